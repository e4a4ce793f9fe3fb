"""Power of the seed-aware test (structnmt.evaluate.power) and `structnmt plan-seeds`: known answers, and
simulated grids run through the test itself."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy import stats

from structnmt.cli import main
from structnmt.evaluate.power import VarianceParts, minimal_detectable_effect, power, seeds_needed
from structnmt.evaluate.seeds import _one_test


def simulated_power(delta: float, parts: VarianceParts, n: int, nb: int, *, grids: int, seed: int,
                    resamples: int = 200) -> float:
    """The share of simulated grids in which the seed-aware test (its own code) flags the row at p < 0.05.

    Each grid draws the test set (a shift of the difference with variance ``sentence_var``), the row's and
    the baseline's seeds (variances ``seed_var``, ``baseline_seed_var``) and ``resamples`` bootstrap
    resamples of the test set whose difference of the seed means has variance ``sentence_var``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(grids):
        shift = rng.normal(0.0, math.sqrt(parts.sentence_var))
        a = delta + shift + math.sqrt(parts.seed_var) * rng.standard_normal(n)
        b = math.sqrt(parts.baseline_seed_var) * rng.standard_normal(nb)
        w = rng.normal(0.0, math.sqrt(parts.sentence_var), resamples)
        test = _one_test(a, a[:, None] + w[None, :], b, np.repeat(b[:, None], resamples, 1), metric="bleu",
                         n_samples=resamples)
        hits += test.p_value < 0.05
    return hits / grids


# the Multi30k grids' orders of magnitude: seed std 0.1-0.5 BLEU, test-set part 0.2-0.35
CASES = [
    (VarianceParts(0.3 ** 2, 0.2 ** 2, 0.1 ** 2), 3, 3),
    (VarianceParts(0.34 ** 2, 0.14 ** 2, 0.25 ** 2), 3, 6),
    (VarianceParts(0.5 ** 2, 0.5 ** 2, 0.2 ** 2), 2, 2),
]


@pytest.mark.parametrize(("parts", "n", "nb"), CASES)
def test_the_minimal_detectable_effect_is_detected_80_percent_of_the_time(parts, n, nb):
    mde = minimal_detectable_effect(parts, n, nb)
    assert power(mde, parts, n, nb) == pytest.approx(0.8, abs=1e-4)
    got = simulated_power(mde, parts, n, nb, grids=1000, seed=7)
    assert abs(got - 0.8) <= 0.05, (mde, got)
    # and the test holds its level where there is no difference
    assert simulated_power(0.0, parts, n, nb, grids=1000, seed=8) <= 0.08
    assert power(0.0, parts, n, nb) == pytest.approx(0.05, abs=0.02)


def test_the_planned_seeds_reach_the_planned_power():
    parts = VarianceParts(0.35 ** 2, 0.3 ** 2, 0.12 ** 2)
    delta = minimal_detectable_effect(parts, 5, 5)  # a difference that 5 seeds a side detect with power 0.8
    assert seeds_needed(delta, parts) == 5
    assert power(delta, parts, 4, 4) < 0.8 <= power(delta, parts, 5, 5)
    assert abs(simulated_power(delta, parts, 5, 5, grids=1000, seed=11) - 0.8) <= 0.05
    # more seeds for a smaller difference, fewer for a larger one
    assert seeds_needed(delta * 0.8, parts) > 5 > seeds_needed(delta * 1.5, parts)


def test_known_answers_without_seed_variance():
    """No seed variance: the test is a z-test on the test-set part, power and MDE in closed form."""
    v = 0.3 ** 2
    parts = VarianceParts(0.0, 0.0, v)
    z = stats.norm.ppf(0.975)
    for d in (0.2, 0.5, 1.0):
        want = stats.norm.sf(z - d / 0.3) + stats.norm.cdf(-z - d / 0.3)
        assert power(d, parts, 3, 3) == pytest.approx(want, rel=1e-9)
    assert minimal_detectable_effect(parts, 3, 3) == pytest.approx((z + stats.norm.ppf(0.8)) * 0.3, rel=1e-5)
    # the test-set part sets a floor no number of seeds goes below
    assert seeds_needed(0.5, VarianceParts(0.2 ** 2, 0.2 ** 2, v), max_seeds=200) is None
    assert seeds_needed(0.9, VarianceParts(0.2 ** 2, 0.2 ** 2, v), max_seeds=200) is not None
    assert power(0.3, VarianceParts(0.0, 0.0, 0.0), 2, 2) == 1.0


def test_more_seeds_detect_smaller_differences():
    parts = VarianceParts(0.4 ** 2, 0.3 ** 2, 0.1 ** 2)
    mdes = [minimal_detectable_effect(parts, n, n) for n in (2, 3, 5, 10, 30)]
    assert all(a > b for a, b in zip(mdes, mdes[1:]))
    assert mdes[-1] > (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.1  # never below the test-set floor


def test_bad_requests_are_sentences():
    parts = VarianceParts(0.1, 0.1, 0.01)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        power(0.5, parts, 1, 3)
    with pytest.raises(ValueError, match="above 0"):
        seeds_needed(0.0, parts)
    with pytest.raises(ValueError, match="above 0"):
        seeds_needed(-0.5, parts)
    with pytest.raises(ValueError, match="finite variance"):
        VarianceParts(-1.0, 0.1, 0.1)


# --------------------------------------------------------------------------- plan-seeds


def write_results(path, rows):
    cols = ["split", "system", "baseline", "metric", "delta", "p_value", "n_seeds", "bleu_std", "sentence_se"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(dict(zip(cols, r)))


def test_plan_seeds_reads_a_results_csv(tmp_path, capsys):
    path = tmp_path / "results.csv"
    write_results(path, [
        ("test", "Base", "True", "bleu_lc_tok", "0.0", "", "3", "0.3", ""),
        ("test", "+ A", "False", "bleu_lc_tok", "0.4", "0.2", "3", "0.35", "0.12"),
        ("test", "+ B", "False", "bleu_lc_tok", "0.1", "0.8", "3", "0.2", "0.4"),
    ])
    assert main(["plan-seeds", str(tmp_path), "--delta", "0.6"]) == 0
    out = capsys.readouterr().out
    a = VarianceParts(0.35 ** 2, 0.3 ** 2, 0.12 ** 2)
    assert f"| test | + A | 3 / 3 | +0.40 | 0.200 | {minimal_detectable_effect(a, 3, 3):.2f} | " \
           f"{seeds_needed(0.6, a)} |" in out
    # + B's test-set part alone (0.4) puts 0.6 out of reach of any number of seeds: said, with the floor
    floor = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.4
    assert "| test | + B | 3 / 3 | +0.10 | 0.800 |" in out and f"the test set alone resolves {floor:.2f}" in out
    # two such test sets joined halve that part
    assert main(["plan-seeds", str(path), "--delta", "0.6", "--test-scale", "2"]) == 0
    halved = VarianceParts(0.35 ** 2, 0.3 ** 2, 0.12 ** 2 / 2)
    assert f"{seeds_needed(0.6, halved)} |" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--delta", "0"], "above 0"),
    (["--delta", "-0.5"], "above 0"),
    (["--delta", "0.5", "--power", "0.01"], "alpha < power"),
    (["--delta", "0.5", "--test-scale", "0"], "factor above 0"),
])
def test_plan_seeds_bad_options_are_one_sentence(tmp_path, capsys, args, message):
    path = tmp_path / "results.csv"
    write_results(path, [("test", "Base", "True", "bleu_lc_tok", "0", "", "3", "0.3", ""),
                         ("test", "+ A", "False", "bleu_lc_tok", "0.4", "0.2", "3", "0.35", "0.12")])
    assert main(["plan-seeds", str(path), *args]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_plan_seeds_with_one_seed_says_the_variance_needs_two(tmp_path, capsys):
    path = tmp_path / "results.csv"
    write_results(path, [("test", "Base", "True", "bleu_lc_tok", "0", "", "1", "0", ""),
                         ("test", "+ A", "False", "bleu_lc_tok", "0.4", "0.2", "1", "0", "")])
    assert main(["plan-seeds", str(path), "--delta", "0.5"]) != 0
    err = capsys.readouterr().err
    assert "the seed variance needs >= 2 seeds" in err and str(path) in err
    assert main(["plan-seeds", str(tmp_path / "missing.csv"), "--delta", "0.5"]) != 0
    assert "no such results file" in capsys.readouterr().err
