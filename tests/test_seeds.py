"""The seed-aware significance test (structnmt.evaluate.seeds): known answers and calibration."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from structnmt.evaluate.score import corpus_scores, paired_bootstrap
from structnmt.evaluate.seeds import seed_aware_test

# an array, not a list: rng.choice draws the same words from either, but converts a list on every call
WORDS = np.array([f"w{i}" for i in range(300)])


def make_refs(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=rng.integers(8, 16))) for _ in range(n)]


def make_run(rng: np.random.Generator, refs: list[str], keep: float) -> list[str]:
    """A "translation" that keeps each reference word with probability ``keep`` (else a random word)."""
    out = []
    for ref in refs:
        words = ref.split()
        mask = rng.random(len(words)) < keep
        out.append(" ".join(w if k else str(rng.choice(WORDS)) for w, k in zip(words, mask)))
    return out


def test_one_sentence_reduces_to_welchs_t_test_over_the_seed_scores():
    # one test sentence: every bootstrap resample is the test set itself, so the sentence part is 0
    # and the test is Welch's unequal-variance t-test over the per-seed scores
    refs = ["a b c d e f g h"]
    base = [["a b c d e f g x"], ["a b c d e x g h"], ["a b x d e f g h"]]
    system = [["a b c d e f g h"], ["a b c d e f x h"]]
    res = seed_aware_test(base, {"sys": system}, refs, n_samples=50, aso=False)["sys"]
    b = [corpus_scores(h, refs)[0].score for h in base]
    a = [corpus_scores(h, refs)[0].score for h in system]
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert res.sentence_se == 0.0
    assert res.delta == pytest.approx(np.mean(a) - np.mean(b))
    assert res.std == pytest.approx(np.std(a, ddof=1)) and res.baseline_std == pytest.approx(np.std(b, ddof=1))
    assert res.t == pytest.approx(welch.statistic) and res.p_value == pytest.approx(welch.pvalue)
    assert res.n_seeds == 2 and res.baseline_n_seeds == 3


def test_identical_runs_give_no_difference_and_p_one():
    rng = np.random.default_rng(0)
    refs = make_refs(rng, 40)
    runs = [make_run(rng, refs, 0.7), make_run(rng, refs, 0.7)]
    res = seed_aware_test(runs, {"same": [list(r) for r in runs]}, refs, n_samples=100, aso=True)["same"]
    assert res.delta == 0.0 and res.p_value == pytest.approx(1.0)
    assert res.aso_better == pytest.approx(1.0)  # no dominance either way (deepsig: 0/0 -> 1)


def test_the_sentence_part_is_the_bootstrap_spread_of_the_seed_means():
    # two seeds a side with identical runs per side: the seed part is 0, all variance is the test set's
    rng = np.random.default_rng(1)
    refs = make_refs(rng, 60)
    a, b = make_run(rng, refs, 0.8), make_run(rng, refs, 0.6)
    res = seed_aware_test([b, b], {"a": [a, a]}, refs, n_samples=400, aso=False)["a"]
    assert res.seed_se == 0.0 and res.std == 0.0
    assert res.df == float("inf")  # no seed part: the normal distribution
    one = paired_bootstrap(b, {"a": a}, refs, n_samples=400, seed=7)["a"]
    # sacreBLEU's 95 % half-widths are 1.96 standard deviations of each system's bootstrap scores
    assert res.s_sel == pytest.approx(one["ci_halfwidth"] / 1.96, rel=0.25)
    assert res.delta == pytest.approx(one["delta"])
    assert 0 < res.sentence_se < res.s_sel + res.baseline_s_sel  # paired: less than the sum of the parts
    assert res.p_value < 1e-6  # 0.8 against 0.6 word accuracy on 60 sentences is no accident


@pytest.mark.parametrize("bad", [1, 0])
def test_fewer_than_two_seeds_is_one_sentence(bad):
    refs = ["a b c"]
    with pytest.raises(ValueError, match=f"at least 2 runs .* got {bad}"):
        seed_aware_test([["a b c"]] * bad, {"s": [["a b c"]] * 2}, refs, aso=False)
    with pytest.raises(ValueError, match="'s' has 1"):
        seed_aware_test([["a b c"]] * 2, {"s": [["a b c"]]}, refs, aso=False)


def _replicate(rng: np.random.Generator, effect: float, seeds: int = 3) -> tuple[float, float]:
    """One simulated comparison: a test set, ``seeds`` runs per system whose quality varies with the
    seed (training noise, sd 0.04 in word accuracy) and per sentence; returns (seed-aware p, the
    first-seed paired bootstrap's p)."""
    refs = make_refs(rng, 120)
    base = [make_run(rng, refs, 0.55 + rng.normal(0, 0.04)) for _ in range(seeds)]
    system = [make_run(rng, refs, 0.55 + effect + rng.normal(0, 0.04)) for _ in range(seeds)]
    p = seed_aware_test(base, {"s": system}, refs, n_samples=200, seed=int(rng.integers(1, 2**31)),
                        aso=False)["s"].p_value
    p1 = paired_bootstrap(base[0], {"s": system[0]}, refs, n_samples=200, seed=int(rng.integers(1, 2**31)))["s"]
    return p, p1["p_value"]


def test_calibration_no_effect_is_flagged_at_most_at_the_nominal_rate():
    """The "mechanism" is the baseline with other seeds: the seed-aware test flags it at p < 0.05 in
    about 5 % of simulated grids or fewer, while the one-seed bootstrap, blind to training noise,
    flags it far more often."""
    rng = np.random.default_rng(2026)
    ps = np.array([_replicate(rng, 0.0) for _ in range(200)])
    seed_aware, one_seed = (ps[:, 0] < 0.05).mean(), (ps[:, 1] < 0.05).mean()
    assert seed_aware <= 0.09  # nominal 0.05; 200 replicates: binomial sd 0.015
    assert one_seed >= 0.3  # the noise the seed-aware test is there for


def test_power_a_real_effect_is_flagged():
    rng = np.random.default_rng(7)
    ps = np.array([_replicate(rng, 0.25) for _ in range(20)])
    assert (ps[:, 0] < 0.05).mean() >= 0.9


def test_score_reads_several_runs_per_system_and_runs_the_seed_aware_test(tmp_path, capsys):
    from structnmt.cli import main

    rng = np.random.default_rng(3)
    refs = make_refs(rng, 50)
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    files = {}
    for system, keep in (("base", 0.5), ("sys", 0.9)):
        for k in (1, 2, 3):
            files[system, k] = tmp_path / f"{system}{k}.txt"
            files[system, k].write_text("\n".join(make_run(rng, refs, keep + 0.02 * k)) + "\n")
    code = main(["score", "--ref", str(tmp_path / "ref.txt"), "--bootstrap", "100",
                 "--hyp", *(str(files["base", k]) for k in (1, 2, 3)), "--hyp", *(str(files["sys", k]) for k in (1, 2, 3))])
    out = capsys.readouterr().out
    assert code == 0
    runs = {s: [make_bleu(files[s, k], refs) for k in (1, 2, 3)] for s in ("base", "sys")}
    assert f"BLEU = {np.mean(runs['base']):.2f} ± {np.std(runs['base'], ddof=1):.2f} (mean ± std over 3 runs)" in out
    expected = seed_aware_test([files["base", k].read_text().splitlines() for k in (1, 2, 3)],
                               {"s": [files["sys", k].read_text().splitlines() for k in (1, 2, 3)]}, refs,
                               n_samples=100, aso=False)["s"]
    line = next(x for x in out.splitlines() if "sys1.txt (+2 more runs): BLEU" in x)
    assert f"delta {expected.delta:+.2f}" in line and f"p = {expected.p_value:.4f}" in line and "ASO eps" in line


def make_bleu(path, refs) -> float:
    return corpus_scores(path.read_text().splitlines(), refs)[0].score


# ---------------------------------------------------------------- the same test for an accuracy over items


def _accuracy_run(rng: np.random.Generator, items: np.ndarray, p_right: float) -> np.ndarray:
    """(N, 2) per-sentence (right, items) of a run that gets each item right with probability ``p_right``."""
    return np.stack([rng.binomial(items, min(max(p_right, 0.0), 1.0)), items], axis=1)


def test_accuracy_test_with_one_sentence_is_welchs_t_test_over_the_seed_accuracies():
    from structnmt.evaluate.seeds import seed_aware_accuracy_test

    base = [np.array([[3, 10]]), np.array([[5, 10]]), np.array([[4, 10]])]
    system = [np.array([[7, 10]]), np.array([[9, 10]])]
    res = seed_aware_accuracy_test(base, {"s": system}, n_samples=50)["s"]
    welch = stats.ttest_ind([70.0, 90.0], [30.0, 50.0, 40.0], equal_var=False)
    assert res.metric == "accuracy" and res.sentence_se == 0.0
    assert res.mean == pytest.approx(80.0) and res.baseline_mean == pytest.approx(40.0)
    assert res.t == pytest.approx(welch.statistic) and res.p_value == pytest.approx(welch.pvalue)


def test_accuracy_pools_items_of_a_run_not_sentence_means():
    from structnmt.evaluate.seeds import seed_aware_accuracy_test

    # sentence 1: 1 of 1 right, sentence 2: 0 of 9: accuracy 10 %, not the 50 % of the sentence means
    run = np.array([[1, 1], [0, 9]])
    res = seed_aware_accuracy_test([run, run], {"s": [run, run]}, n_samples=20)["s"]
    assert res.mean == pytest.approx(10.0) and res.delta == 0.0 and res.p_value == pytest.approx(1.0)


def _accuracy_replicate(rng: np.random.Generator, effect: float) -> float:
    from structnmt.evaluate.seeds import seed_aware_accuracy_test

    items = rng.integers(0, 4, size=150)  # some sentences have no item
    base = [_accuracy_run(rng, items, 0.5 + rng.normal(0, 0.04)) for _ in range(3)]
    system = [_accuracy_run(rng, items, 0.5 + effect + rng.normal(0, 0.04)) for _ in range(3)]
    return seed_aware_accuracy_test(base, {"s": system}, n_samples=200,
                                    seed=int(rng.integers(1, 2**31)))["s"].p_value


def test_accuracy_calibration_no_effect_and_power():
    """No effect (the baseline with other seeds, seed noise sd 4 points): flagged at about the nominal
    rate or less; a 20-point effect: flagged nearly always. Pooling the items of all seeds in one
    paired test (what a test blind to seeds does) flags the no-effect case far more often."""
    from structnmt.experiment.generalization_report import paired_randomization

    rng = np.random.default_rng(11)
    ps = np.array([_accuracy_replicate(rng, 0.0) for _ in range(200)])
    assert (ps < 0.05).mean() <= 0.09
    assert np.mean([_accuracy_replicate(rng, 0.2) < 0.05 for _ in range(20)]) >= 0.9
    pooled = []
    for _ in range(60):
        items = rng.integers(1, 5, size=300)
        qualities = [(0.5 + rng.normal(0, 0.04), 0.5 + rng.normal(0, 0.04)) for _ in range(3)]
        a = [x for qa, _ in qualities for k in items for x in rng.random(k) < qa]
        b = [x for _, qb in qualities for k in items for x in rng.random(k) < qb]
        pooled.append(paired_randomization([float(x) for x in a], [float(x) for x in b], n=200) < 0.05)
    assert np.mean(pooled) >= 0.15  # nominal 0.05: at least three times as often (about 0.27 expected)


def test_accuracy_test_refuses_runs_of_different_lengths():
    from structnmt.evaluate.seeds import seed_aware_accuracy_test

    with pytest.raises(ValueError, match="one row per test sentence"):
        seed_aware_accuracy_test([np.array([[1, 2]])] * 2, {"s": [np.array([[1, 2], [0, 1]])] * 2})
    with pytest.raises(ValueError, match="'s' has 1"):
        seed_aware_accuracy_test([np.array([[1, 2]])] * 2, {"s": [np.array([[1, 2]])]})


# ------------------------------------------- the decomposed test: each source of noise counted once


def _mean_score(sums: np.ndarray) -> np.ndarray:
    """The corpus score of (value, 1) rows: the mean of the per-sentence values."""
    return sums[:, 0] / sums[:, 1]


def _additive_runs(rng: np.random.Generator, *, n: int, k: int, seed_sd: float, sys_sd: float, int_sd: float,
                   delta: float = 0.0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Runs of the per-sentence additive model x = mu + seed_i + sent_j + sys_j + seed x sent_ij, as (N, 2)
    rows of (value, 1); ``sys_sd``: the sd of the A - B difference of the systems' own sentence effects."""
    sent = rng.normal(0, 20.0, n)
    sides = []
    for mu in (0.0, delta):
        g = rng.normal(0, sys_sd / np.sqrt(2), n)
        x = mu + rng.normal(0, seed_sd, (k, 1)) + sent + g + rng.normal(0, int_sd, (k, n))
        sides.append([np.stack([row, np.ones(n)], axis=1) for row in x])
    return sides[0], sides[1]


def test_the_decomposition_recovers_known_components():
    """Interaction sd 8 per sentence over 2,000 sentences: tau^2 = 64 / 2000 = 0.032; the systems'
    own sentence effects differ with sd 10: sigma_sys^2 / N = 0.05. The decomposed test's sentence part is
    the systematic part alone; the double-count form's holds the interaction of both seed means besides."""
    from structnmt.evaluate.seeds import seed_aware_statistic_test

    rng = np.random.default_rng(5)
    n, k = 2000, 4
    base, system = _additive_runs(rng, n=n, k=k, seed_sd=0.0, sys_sd=10.0, int_sd=8.0)
    new = seed_aware_statistic_test(base, {"s": system}, _mean_score, metric="mean", n_samples=2000, seed=3)["s"]
    old = seed_aware_statistic_test(base, {"s": system}, _mean_score, metric="mean", n_samples=2000, seed=3,
                                    method="double-count")["s"]
    tau2, sys2 = 64 / n, 100 / n
    assert new.interaction_sd ** 2 == pytest.approx(tau2, rel=0.15)
    assert new.baseline_interaction_sd ** 2 == pytest.approx(tau2, rel=0.15)
    assert new.sentence_se ** 2 == pytest.approx(sys2, rel=0.2)
    assert old.sentence_se ** 2 == pytest.approx(sys2 + 2 * tau2 / k, rel=0.2)
    assert old.delta == new.delta and old.std == new.std and old.seed_se == new.seed_se


def test_one_configuration_leaves_no_systematic_test_set_part():
    from structnmt.evaluate.seeds import seed_aware_statistic_test

    rng = np.random.default_rng(6)
    base, system = _additive_runs(rng, n=1500, k=3, seed_sd=0.1, sys_sd=0.0, int_sd=8.0)
    new = seed_aware_statistic_test(base, {"s": system}, _mean_score, metric="mean", n_samples=1000)["s"]
    old = seed_aware_statistic_test(base, {"s": system}, _mean_score, metric="mean", n_samples=1000,
                                    method="double-count")["s"]
    assert new.sentence_se < 0.3 * old.sentence_se  # (0 up to the bootstrap's own noise)
    assert new.p_value < old.p_value


def _null_grids(method: str, reps: int = 600) -> tuple[float, float]:
    """(share flagged at p < 0.05, mean sqrt(V-hat) / observed sd of Δ) over ``reps`` simulated A/A grids of
    3 + 3 seeds, 300 sentences, where the seed x sentence interaction (tau = 8 / sqrt(300) = 0.46) dominates
    the seed noise (0.1)."""
    from structnmt.evaluate.seeds import seed_aware_statistic_test

    rng = np.random.default_rng(2029)
    ps, sds, deltas = [], [], []
    for _ in range(reps):
        base, system = _additive_runs(rng, n=300, k=3, seed_sd=0.1, sys_sd=0.0, int_sd=8.0)
        t = seed_aware_statistic_test(base, {"s": system}, _mean_score, metric="mean", n_samples=300,
                                      seed=int(rng.integers(1, 2**31)), method=method)["s"]
        ps.append(t.p_value)
        sds.append(np.hypot(t.seed_se, t.sentence_se))
        deltas.append(t.delta)
    return float(np.mean(np.array(ps) < 0.05)), float(np.mean(sds) / np.std(deltas))


def test_false_alarms_are_near_nominal_and_the_double_count_is_too_wide():
    """600 no-difference grids (binomial sd of a 5 % rate: 0.9 points): the decomposed test flags 2.5-8 %
    and its sqrt(V-hat) matches the spread of Δ (the mean of a standard deviation estimate from 4 degrees of
    freedom sits a few per cent below it); the double-count form, counting the interaction twice, is about
    1.4 times too wide and flags almost nothing."""
    rate, ratio = _null_grids("decomposed")
    assert 0.025 <= rate <= 0.08 and 0.85 <= ratio <= 1.1
    rate_old, ratio_old = _null_grids("double-count")
    assert rate_old < 0.02 and ratio_old > 1.25


def test_an_unknown_form_of_the_test_is_one_sentence():
    from structnmt.evaluate.seeds import seed_aware_statistic_test

    runs = [np.array([[1.0, 1.0]])] * 2
    with pytest.raises(ValueError, match="unknown seed test 'clark'; one of decomposed, double-count"):
        seed_aware_statistic_test(runs, {"s": runs}, _mean_score, metric="mean", method="clark")


def test_score_seed_test_option_runs_either_form(tmp_path, capsys):
    from structnmt.cli import main

    rng = np.random.default_rng(4)
    refs = make_refs(rng, 40)
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    hyps = {}
    for side, keep in (("b", 0.5), ("a", 0.6)):
        hyps[side] = [make_run(rng, refs, keep) for _ in range(3)]
        for i, h in enumerate(hyps[side]):
            (tmp_path / f"{side}{i}.txt").write_text("\n".join(h) + "\n")
    files = {s: [str(tmp_path / f"{s}{i}.txt") for i in range(3)] for s in "ba"}
    for method in ("double-count",):  # (the default, decomposed: the test above)
        assert main(["score", "--ref", str(tmp_path / "ref.txt"), "--bootstrap", "100", "--seed-test", method,
                     "--hyp", *files["b"], "--hyp", *files["a"]]) == 0
        out = capsys.readouterr().out
        want = seed_aware_test(hyps["b"], {"a": hyps["a"]}, refs, n_samples=100, aso=False, method=method)["a"]
        assert f"(structnmt.evaluate.seeds, {method})" in out and f"p = {want.p_value:.4f}" in out


def test_seeds_identical_by_chance_are_read_with_their_interaction():
    """Two seeds that each miss one of 40 items, on different sentences, score exactly alike: s^2 = 0 while
    the bootstrap sees them move apart (tau^2 = 6.25). The spread carries no information there, and the
    decomposed test reads that side's seed variance as tau^2 instead of calling one miss per seed a
    certain loss."""
    from structnmt.evaluate.seeds import seed_aware_accuracy_test

    ones = np.ones((40, 2), dtype=np.int64)
    base = [ones.copy(), ones.copy()]
    system = [ones.copy(), ones.copy()]
    system[0][0, 0] = 0
    system[1][1, 0] = 0
    res = seed_aware_accuracy_test(base, {"s": system}, n_samples=2000, seed=1)["s"]
    assert res.std == 0.0 and res.delta == pytest.approx(-2.5)
    assert res.interaction_sd ** 2 == pytest.approx(6.25, rel=0.15)
    assert res.seed_se ** 2 == pytest.approx(res.interaction_sd ** 2 / 2)
    assert res.p_value > 0.1
    # its MDE reads the same variance
    assert res.variance_parts().seed_var == pytest.approx(res.interaction_sd ** 2)
    assert res.variance_parts().baseline_seed_var == 0.0
