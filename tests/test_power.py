"""Power of the seed-aware test (structnmt.evaluate.power) and `structnmt plan-seeds`: known answers, and
simulated grids run through the test itself."""

from __future__ import annotations

import csv
import math
from dataclasses import astuple

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
    # a results.csv of the double-count test (no interaction_sd column): its parts held as measured
    floor_a = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.12
    assert f"| test | + A | 3 / 3 | +0.40 | 0.200 | {minimal_detectable_effect(a, 3, 3):.2f} | " \
           f"{floor_a:.2f} | {seeds_needed(0.6, a)} (no interaction_sd column" in out
    # + B's test-set part alone (0.4) puts 0.6 out of reach of any number of seeds: said, with the floor
    floor = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.4
    assert "| test | + B | 3 / 3 | +0.10 | 0.800 |" in out and f"the test set alone resolves {floor:.2f}" in out
    # two such test sets joined halve that part
    assert main(["plan-seeds", str(path), "--delta", "0.6", "--test-scale", "2"]) == 0
    halved = VarianceParts(0.35 ** 2, 0.3 ** 2, 0.12 ** 2 / 2)
    assert f"| {seeds_needed(0.6, halved)} (no interaction_sd" in capsys.readouterr().out


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


# --------------------------------------------- planning over seeds and test size (decomposed test)


COMPONENTS = [  # (sigma_seed, tau, v_sys) as sds; the middle two make the raw MDE grow with the test set
    (0.0, 0.35, 0.15), (0.4, 0.05, 0.2), (0.4, 0.2, 0.35), (0.2, 0.3, 0.0), (0.1, 0.35, 0.25),
]


@pytest.mark.parametrize(("seed_sd", "tau", "sys_sd"), COMPONENTS)
def test_the_planned_mde_never_grows_with_the_test_set_or_the_seeds(seed_sd, tau, sys_sd):
    from structnmt.evaluate.power import NoiseComponents, mde_floor, plan_mde

    comp = NoiseComponents(seed_sd ** 2, seed_sd ** 2, tau ** 2, tau ** 2, sys_sd ** 2)
    by_scale = [plan_mde(comp, 3, c) for c in (1, 2, 4, 8, 16)]
    assert all(b <= a + 1e-9 for a, b in zip(by_scale, by_scale[1:])), by_scale
    by_seeds = [plan_mde(comp, k, 2) for k in (2, 3, 5, 10, 20, 50)]
    assert all(b <= a + 1e-9 for a, b in zip(by_seeds, by_seeds[1:])), by_seeds
    assert by_seeds[-1] >= mde_floor(comp, 2) - 1e-9  # never below the floor


def test_the_model_at_the_measured_size_is_what_the_test_read():
    from structnmt.evaluate.power import NoiseComponents

    comp = NoiseComponents.from_test(0.3, 0.2, 0.25, 0.35, 0.1)
    assert astuple(comp.parts(1.0)) == pytest.approx((0.3 ** 2, 0.2 ** 2, 0.1 ** 2))
    # s = 0.2 < tau = 0.35: all of the baseline's seed spread is interaction, none training noise
    assert comp.baseline_seed_var == 0.0 and comp.baseline_interaction_var == pytest.approx(0.04)
    # twice the test set: interaction and systematic part halve, training noise stays
    assert astuple(comp.parts(2.0)) == pytest.approx((0.3 ** 2 - 0.25 ** 2 + 0.25 ** 2 / 2, 0.02, 0.005))


def test_a_difference_above_the_floor_gets_a_finite_number_of_seeds():
    from structnmt.evaluate.power import NoiseComponents, mde_floor, seeds_for

    comp = NoiseComponents(0.3 ** 2, 0.3 ** 2, 0.3 ** 2, 0.3 ** 2, 0.17 ** 2)
    floor = mde_floor(comp)
    assert floor == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.17) and floor < 0.5
    k = seeds_for(0.5, comp)
    assert k is not None and k > 20  # close to the floor: many, but finitely many
    assert power(0.5, comp.parts(), k, k) >= 0.8 > power(0.5, comp.parts(), k - 1, k - 1)
    assert seeds_for(floor * 0.99, comp) is None
    assert seeds_for(0.5, comp, 2.0) < k  # a larger test set needs fewer seeds


def write_new_results(path, rows):
    cols = ["split", "system", "baseline", "metric", "delta", "p_value", "n_seeds", "bleu_std", "sentence_se",
            "interaction_sd", "baseline_interaction_sd", "seed_test"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(dict(zip(cols, r)))


def test_plan_seeds_models_seeds_and_test_size_through_the_cli(tmp_path, capsys):
    from structnmt.evaluate.power import NoiseComponents, mde_floor, plan_mde, seeds_for

    path = tmp_path / "results.csv"
    write_new_results(path, [
        ("test", "Base", "True", "bleu_lc_tok", "0.0", "", "6", "0.34", "", "", "", ""),
        ("test", "+ A", "False", "bleu_lc_tok", "0.56", "0.09", "6", "0.57", "0.15", "0.35", "0.35", "decomposed"),
        ("test", "+ B", "False", "bleu_lc_tok", "-0.2", "0.3", "3", "0.3", "0.0", "0.35", "0.35", "decomposed"),
    ])
    assert main(["plan-seeds", str(tmp_path), "--delta", "0.5", "--joint"]) == 0
    out = capsys.readouterr().out
    a = NoiseComponents.from_test(0.57, 0.34, 0.35, 0.35, 0.15)
    assert astuple(a.parts()) == pytest.approx((0.57 ** 2, 0.34 ** 2, 0.15 ** 2))  # the report's own MDE at the size at hand
    need = seeds_for(0.5, a)
    assert need is not None and mde_floor(a) < 0.5
    assert (f"| test | + A | 6 / 6 | +0.56 | 0.090 | {minimal_detectable_effect(a.parts(), 6, 6):.2f} | "
            f"{mde_floor(a):.2f} | {need} |") in out
    # + B: no systematic test-set part, so no floor: any difference is resolved by enough seeds
    assert "| test | + B | 3 / 6 | -0.20 | 0.300 |" in out and "| 0.00 | " in out
    assert "extrapolation" in out
    # the joint table: seeds x test size, never growing along either
    assert "test / + A: MDE with k seeds per system on a test set c times this one" in out
    table = [line for line in out.split("test / + A:")[1].split("test / + B:")[0].splitlines() if line.startswith("| 1 |")
             or line.startswith("| 2 |") or line.startswith("| 4 |")]
    grid = np.array([[float(x) for x in line.strip("|").split("|")[1:-1]] for line in table])
    assert grid.shape == (3, 6)  # k = 3, 5, 6 (the row's own), 10, 20, and the floor
    assert (np.diff(grid, axis=1) <= 1e-9).all() and (np.diff(grid, axis=0) <= 1e-9).all()
    assert grid[0, 1] == pytest.approx(plan_mde(a, 5, 1.0), abs=0.006)
    # --test-scale: the MDE with the seeds at hand on a larger test set, never larger
    assert main(["plan-seeds", str(path), "--delta", "0.5", "--test-scale", "4"]) == 0
    out4 = capsys.readouterr().out
    assert f"| test | + A | 6 / 6 | +0.56 | 0.090 | {plan_mde(a, 6, 4.0):.2f} |" in out4
    assert plan_mde(a, 6, 4.0) <= minimal_detectable_effect(a.parts(), 6, 6)


def test_plan_seeds_for_the_double_count_form(tmp_path, capsys):
    path = tmp_path / "results.csv"
    write_new_results(path, [
        ("test", "Base", "True", "bleu_lc_tok", "0.0", "", "3", "0.34", "", "", "", ""),
        ("test", "+ A", "False", "bleu_lc_tok", "0.5", "0.2", "3", "0.4", "0.1", "0.3", "0.35", "decomposed"),
    ])
    assert main(["plan-seeds", str(path), "--delta", "0.5", "--seed-test", "double-count"]) == 0
    out = capsys.readouterr().out
    # that form reads the interaction again in its test-set part, and holds it fixed as seeds are added
    v_sent = 0.1 ** 2 + 0.3 ** 2 / 3 + 0.35 ** 2 / 3
    old = VarianceParts(0.4 ** 2, 0.34 ** 2, v_sent)
    assert f"| test | + A | 3 / 3 | +0.50 | 0.200 | {minimal_detectable_effect(old, 3, 3):.2f} |" in out
