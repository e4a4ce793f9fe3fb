"""Seed-aware significance: is a system better than the baseline beyond training *and* test-set noise?

Every system is trained several times (seeds ``k = 1..n``), each run's translations of the same test
set scored. Two sources of noise separate two systems' scores (Clark et al. 2011, "Better hypothesis
testing for statistical machine translation: controlling for optimizer instability"):

* **training variance** (Clark's ``s_dev``): the spread of one system's corpus score over seeds on
  the fixed test set, :math:`s_A^2`; the mean over :math:`n_A` seeds varies by :math:`s_A^2 / n_A`;
* **test-set sampling** (Clark's ``s_sel``): the corpus score of one run varies with the sentences
  the test set happened to draw; estimated by paired bootstrap resampling of sentences (Koehn 2004).

The test (:func:`seed_aware_test`) compares the seed means :math:`\\Delta = \\bar{A} - \\bar{B}`.
Write run :math:`i` of system A on sentence :math:`j` as
:math:`\\mu_A + u_i + e_j + g_j^A + w_{ij}` (seed :math:`u`, variance :math:`\\sigma^2_{seed}`; sentence
difficulty :math:`e`, shared by every run of every system; the system's own sentence effects :math:`g`,
whose A − B difference has variance :math:`\\sigma^2_{sys}`; seed × sentence interaction :math:`w`,
variance :math:`\\sigma^2_{int}`). Over seeds and test sets of :math:`N` sentences,

.. math::

    \\mathrm{Var}(\\Delta) = \\Big(\\sigma^2_{seed,A} + \\tau_A^2\\Big)\\frac{1}{n_A}
        + \\Big(\\sigma^2_{seed,B} + \\tau_B^2\\Big)\\frac{1}{n_B} + \\frac{\\sigma^2_{sys}}{N},
    \\qquad \\tau^2 = \\sigma^2_{int}/N .

What can be measured on one test set: the across-seed variance :math:`s_A^2` of the corpus score
(:math:`E\\,s_A^2 = \\sigma^2_{seed,A} + \\tau_A^2`: on a fixed test set the interaction shows up as
seed-to-seed spread), and the variance :math:`v_{sent}` of :math:`\\bar{A}^{(b)} - \\bar{B}^{(b)}` over
bootstrap resamples :math:`b` of the test sentences (the same resampled sentences for every run of both
systems, each run's corpus score recomputed by sacreBLEU from its per-sentence statistics), which holds
:math:`\\sigma^2_{sys}/N + \\tau_A^2/n_A + \\tau_B^2/n_B`: the interaction again. The interaction of
one system is read from how its runs move apart under resampling (:func:`_interaction_var`),

.. math::

    \\hat\\tau_A^2 = \\frac{n_A}{n_A - 1}\\cdot\\frac{1}{n_A}\\sum_i
        \\mathrm{Var}_b\\big(a_i^{(b)} - \\bar{a}^{(b)}\\big),

and the default test (``method="decomposed"``) counts every part once:

.. math::

    \\hat{V} = \\frac{s_A^2}{n_A} + \\frac{s_B^2}{n_B}
        + \\max\\Big(0,\\ v_{sent} - \\frac{\\hat\\tau_A^2}{n_A} - \\frac{\\hat\\tau_B^2}{n_B}\\Big),

the last term the systematic test-set part :math:`\\hat\\sigma^2_{sys}/N` (``sentence_se`` squared; 0 for
two samples of one configuration, where only the interaction moves the runs apart). A side whose
:math:`s^2` is below the 1 % quantile of what its interaction alone would give,
:math:`\\hat\\tau^2 \\chi^2_{n-1}(0.01)/(n-1)` (identical scores of discrete counts from 2 or 3 seeds,
typically), is read with :math:`s^2 = \\hat\\tau^2` (:func:`_seed_var`). ``method=
"double-count"`` is Clark et al.'s sum :math:`s_A^2/n_A + s_B^2/n_B + v_{sent}`, which counts the
interaction twice: on 3 v 3 A/A splits of 6 real seeds its :math:`\\sqrt{\\hat V}` is 1.16-2.78 times the
observed spread of Δ (the decomposed form's 0.99-1.48), and it flags too few differences
(docs/experiments.md, "Calibration of the seed-aware test").

Either way :math:`t = \\Delta / \\sqrt{\\hat V}` is read against Student's t with the Welch–Satterthwaite
degrees of freedom of the seed part (the test-set part counted as known),
:math:`\\nu = \\hat V^2 / \\big((s_A^2/n_A)^2/(n_A-1) + (s_B^2/n_B)^2/(n_B-1)\\big)`; two-sided p-value
from :func:`scipy.stats.t`. With 3 seeds a side :math:`\\nu` is small (4 to 10). Both sides need 2 or more
runs (one run per system: :func:`structnmt.evaluate.score.paired_bootstrap`, test-set sampling only).
Calibration: tests/test_seeds.py and benchmarks/calibrate_seed_test.py.

Beside it, the almost stochastic order of Dror et al. (2019, "Deep dominance"), from the
``deepsig`` package: :math:`\\varepsilon_{min}` of "the system's seeds dominate the baseline's"
(0 = always better, 0.5 = no order, 1 = always worse). It is reported, not used for marks: it
rests on the per-seed scores alone (no test-set sampling), gives no p-value, and with 3 seeds per
side its estimate is coarse.

Why not one of the two alone: a paired bootstrap of one seed per system (sacreBLEU's test) measures
test-set sampling only, and pairs of identical configurations trained with two seeds differ at
p = 0.001 under it; a t-test over per-seed scores alone measures training variance only, and calls
a difference on this one test set general.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .power import VarianceParts, minimal_detectable_effect
from .score import _check_parallel, lc_tok_bleu, moses_lc_tokenize

__all__ = ["SeedTest", "RunStatistics", "seed_aware_test", "seed_aware_accuracy_test", "seed_aware_statistic_test",
           "run_statistics", "describe_test", "seed_variance_read", "SEED_TESTS", "DEFAULT_SEED_TEST"]

#: the two forms of the test (module docstring): each noise counted once, and Clark et al.'s sum
SEED_TESTS = ("decomposed", "double-count")
DEFAULT_SEED_TEST = "decomposed"


@dataclass
class SeedTest:
    """The seed-aware comparison of one system with the baseline on one metric.

    ``delta = mean - baseline_mean`` (seed means); ``std``/``baseline_std`` are the sample standard
    deviations over seeds (``s_dev``); ``s_sel``/``baseline_s_sel`` the bootstrap standard deviation
    of one run's score, averaged over the runs (test-set sampling); ``seed_se`` and ``sentence_se``
    the two parts of the standard error of ``delta`` (``sentence_se``: the systematic test-set part
    alone under ``method="decomposed"``, the whole bootstrap spread under ``"double-count"``);
    ``interaction_sd``/``baseline_interaction_sd`` :math:`\\hat\\tau` of either side (the seed ×
    sentence interaction's share of one run's score on this test set); ``t``, ``df``, ``p_value`` the
    test; ``aso_better``/``aso_worse`` deepsig's epsilon_min for "system better than baseline" and the
    reverse (None when not computed)."""

    metric: str
    n_seeds: int
    baseline_n_seeds: int
    mean: float
    baseline_mean: float
    delta: float
    std: float
    baseline_std: float
    s_sel: float
    baseline_s_sel: float
    seed_se: float
    sentence_se: float
    t: float
    df: float
    p_value: float
    n_samples: int
    aso_better: float | None = None
    aso_worse: float | None = None
    interaction_sd: float = 0.0
    baseline_interaction_sd: float = 0.0
    method: str = DEFAULT_SEED_TEST

    def variance_parts(self) -> VarianceParts:
        """The variances this test read: both sides' seed variances and the test-set part."""
        return VarianceParts(
            seed_variance_read(self.std ** 2, self.interaction_sd ** 2, self.n_seeds, self.method),
            seed_variance_read(self.baseline_std ** 2, self.baseline_interaction_sd ** 2, self.baseline_n_seeds,
                               self.method),
            self.sentence_se ** 2)

    def minimal_detectable_effect(self, *, alpha: float = 0.05, target: float = 0.8) -> float:
        """The smallest |Δ| this test would flag at ``alpha`` with power ``target``, with these seeds and
        variances (:func:`structnmt.evaluate.power.minimal_detectable_effect`)."""
        return minimal_detectable_effect(self.variance_parts(), self.n_seeds, self.baseline_n_seeds, alpha=alpha,
                                         target=target)


def _metric(metric: str) -> Any:
    from sacrebleu.metrics import BLEU, CHRF

    if metric == "chrf":
        return CHRF()
    if metric == "bleu_lc_tok":

        return lc_tok_bleu()
    if metric == "bleu":
        return BLEU()
    raise ValueError(f"unknown metric {metric!r}; one of bleu, bleu_lc_tok, chrf")


def run_statistics(runs: Sequence[Sequence[str]], refs: Sequence[str], *, metric: str = "bleu",
                   lang: str = "en") -> tuple[Any, list[np.ndarray]]:
    """(sacreBLEU metric object, per-sentence sufficient statistics of every run: (N, S) arrays)."""

    m = _metric(metric)
    references = list(refs)
    if metric == "bleu_lc_tok":
        references = moses_lc_tokenize(references, lang)
    out = []
    for i, hyps in enumerate(runs):
        _check_parallel(hyps, refs, what=f"hypotheses of run {i + 1}")
        h = moses_lc_tokenize(list(hyps), lang) if metric == "bleu_lc_tok" else list(hyps)
        out.append(np.asarray(m._extract_corpus_statistics(h, [references]), dtype=np.int64))
    return m, out


def _scores(m: Any, sums: np.ndarray) -> np.ndarray:
    """Corpus scores (sacreBLEU's own formula) of summed statistics, one per row of ``sums``."""
    return np.array([m._compute_score_from_stats(row.tolist()).score for row in sums])


def seed_aware_test(baseline_runs: Sequence[Sequence[str]], systems: dict[str, Sequence[Sequence[str]]],
                    refs: Sequence[str], *, metric: str = "bleu", n_samples: int = 1000, seed: int = 12345,
                    lang: str = "en", aso: bool = True, method: str = DEFAULT_SEED_TEST) -> dict[str, SeedTest]:
    """Compare every system's runs (one translation of ``refs`` per seed) with the baseline's runs.

    Args:
        baseline_runs: the baseline's hypotheses, one list per seed (at least 2).
        systems: ``{name: runs}``, each at least 2 runs.
        refs: the references every run translated.
        metric: ``bleu``, ``bleu_lc_tok`` (lowercased, Moses-tokenized) or ``chrf``.
        n_samples: bootstrap resamples of the test sentences (the same resamples for every run).
        seed: the resampling RNG's seed (and deepsig's).
        aso: also compute deepsig's almost stochastic order (a few seconds per system).
        method: ``decomposed`` (each noise counted once; the default) or ``double-count`` (Clark et al.'s
            sum, the seed × sentence interaction in both parts); module docstring.

    Raises:
        ValueError: a side with fewer than 2 runs (the sentence says how many it has), a run whose
            length differs from the references, ``n_samples < 1``.
    """
    return RunStatistics.of(baseline_runs, systems, refs, metric=metric, lang=lang).test(
        n_samples=n_samples, seed=seed, aso=aso, method=method)


@dataclass
class RunStatistics:
    """Every run's per-sentence sacreBLEU statistics, computed once, for tests on subsets of the sentences
    (``structnmt compare``'s buckets): :meth:`test` with ``rows`` is :func:`seed_aware_test` on those
    sentences alone, without tokenizing and scoring the text again.

    metric_obj: sacreBLEU's metric; stats: (N, S) statistics per run, the baseline's ``sizes[0]`` runs
    first, then each of ``names``' ``sizes[i + 1]``."""

    metric: str
    metric_obj: Any
    stats: list[np.ndarray]
    sizes: list[int]
    names: list[str]

    @classmethod
    def of(cls, baseline_runs: Sequence[Sequence[str]], systems: dict[str, Sequence[Sequence[str]]],
           refs: Sequence[str], *, metric: str = "bleu", lang: str = "en") -> RunStatistics:
        _check_sides(len(baseline_runs), {n: len(r) for n, r in systems.items()}, 2)
        names = list(systems)
        m, stats = run_statistics([*baseline_runs, *[r for n in names for r in systems[n]]], refs,
                                  metric=metric, lang=lang)
        return cls(metric, m, stats, [len(baseline_runs)] + [len(systems[n]) for n in names], names)

    def run_scores(self, rows: np.ndarray | None = None) -> list[float]:
        """Every run's corpus score on ``rows`` (all sentences when None), in the order of ``stats``."""
        return [float(x) for x in _scores(self.metric_obj, np.stack([
            (s if rows is None else s[rows]).sum(0) for s in self.stats]))]

    def test(self, rows: np.ndarray | None = None, *, n_samples: int = 1000, seed: int = 12345,
             aso: bool = True, method: str = DEFAULT_SEED_TEST) -> dict[str, SeedTest]:
        """The seed-aware test of every system against the baseline on ``rows`` (indices of sentences;
        all when None)."""
        if n_samples < 2:
            raise ValueError(f"n_samples must be >= 2 (the test-set part is a variance over resamples), got "
                             f"{n_samples}")
        stats = self.stats if rows is None else [s[rows] for s in self.stats]
        return _compare(lambda sums: _scores(self.metric_obj, sums), stats, self.sizes, self.names,
                        metric=self.metric, n_samples=n_samples, seed=seed, aso=aso, method=method)


def seed_aware_accuracy_test(baseline_runs: Sequence[np.ndarray], systems: dict[str, Sequence[np.ndarray]], *,
                             n_samples: int = 1000, seed: int = 12345, aso: bool = False,
                             method: str = DEFAULT_SEED_TEST) -> dict[str, SeedTest]:
    """The same test for an accuracy over items grouped in sentences (e.g. agreement probes).

    Every run is an ``(N, 2)`` array, one row per test sentence: (items right, items) in that sentence;
    a run's accuracy is ``100 * sum(right) / sum(items)``. The test-set part resamples sentences (not
    items: the items of one sentence share its words), the same resamples for every run, exactly as the
    BLEU test resamples sentences and sums their statistics.

    Raises:
        ValueError: a side with fewer than 2 runs; runs of different sentence counts.
    """
    runs = [np.asarray(r, dtype=np.int64).reshape(-1, 2) for r in baseline_runs]
    return seed_aware_statistic_test(runs, {n: [np.asarray(r, dtype=np.int64).reshape(-1, 2) for r in v]
                                            for n, v in systems.items()},
                                     _accuracies, metric="accuracy", n_samples=n_samples, seed=seed, aso=aso,
                                     method=method)


def seed_aware_statistic_test(baseline_runs: Sequence[np.ndarray], systems: dict[str, Sequence[np.ndarray]],
                              score: Callable[[np.ndarray], np.ndarray], *, metric: str, n_samples: int = 1000,
                              seed: int = 12345, aso: bool = False, method: str = DEFAULT_SEED_TEST
                              ) -> dict[str, SeedTest]:
    """The test for any corpus score that is a function of summed per-sentence statistics.

    Every run is an ``(N, K)`` array, one row of K counts per test sentence; ``score`` maps an ``(R, K)``
    array of summed counts to R scores (e.g. an accuracy from (right, items), an F-measure from
    (matches, reference words, output words)). Resamples sentences, as the BLEU test does.

    Raises:
        ValueError: a side with fewer than 2 runs; runs of different sentence counts.
    """
    _check_sides(len(baseline_runs), {n: len(r) for n, r in systems.items()}, n_samples)
    names = list(systems)
    stats = [np.asarray(r) for r in [*baseline_runs, *[r for n in names for r in systems[n]]]]
    if len({s.shape for s in stats}) > 1:
        raise ValueError(f"every run must have one row per test sentence; got {sorted({s.shape for s in stats})}")
    sizes = [len(baseline_runs)] + [len(systems[n]) for n in names]
    return _compare(score, stats, sizes, names, metric=metric, n_samples=n_samples, seed=seed, aso=aso,
                    method=method)


def _accuracies(sums: np.ndarray) -> np.ndarray:
    """Accuracy (%) of every row of summed (right, items); a resample without items scores 0."""
    right, items = sums[:, 0].astype(float), sums[:, 1].astype(float)
    return np.divide(100.0 * right, items, out=np.zeros_like(right), where=items > 0)


def _check_sides(n_baseline: int, n_systems: dict[str, int], n_samples: int) -> None:
    if n_baseline < 2:
        raise ValueError(f"a seed-aware test needs at least 2 runs (seeds) of the baseline, got "
                         f"{n_baseline}; train it with more seeds.")
    for name, k in n_systems.items():
        if k < 2:
            raise ValueError(f"a seed-aware test needs at least 2 runs (seeds) of every system; {name!r} has "
                             f"{k}; train it with more seeds.")
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2 (the test-set part is a variance over resamples), got {n_samples}")


def _compare(score: Callable[[np.ndarray], np.ndarray], stats: list[np.ndarray], sizes: list[int],
             names: list[str], *, metric: str, n_samples: int, seed: int, aso: bool,
             method: str = DEFAULT_SEED_TEST) -> dict[str, SeedTest]:
    """The test (module docstring) on per-sentence statistics: ``stats`` holds the baseline's ``sizes[0]``
    runs, then each system's ``sizes[i + 1]``; ``score`` maps (R, S) summed statistics to R scores."""
    if method not in SEED_TESTS:
        raise ValueError(f"unknown seed test {method!r}; one of {', '.join(SEED_TESTS)}")
    n = len(stats[0])
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_samples) if n else np.zeros((n_samples, 0))
    full = np.array([score(s.sum(0, keepdims=True))[0] for s in stats])
    boot = np.stack([score(counts @ s) for s in stats])  # (runs, samples)
    nb = sizes[0]
    b_full, b_boot = full[:nb], boot[:nb]
    out: dict[str, SeedTest] = {}
    start = nb
    for name, k in zip(names, sizes[1:]):
        a_full, a_boot = full[start:start + k], boot[start:start + k]
        start += k
        out[name] = _one_test(a_full, a_boot, b_full, b_boot, metric=metric, n_samples=n_samples, method=method)
        if aso:
            out[name].aso_better, out[name].aso_worse = _aso(a_full, b_full, seed)
    return out


def _interaction_var(boot: np.ndarray) -> float:
    """One system's seed × sentence interaction on this test set, from its runs' bootstrap scores.

    .. math::

        \\hat\\tau^2 = \\frac{k}{k-1} \\cdot \\frac{1}{k} \\sum_i
            \\mathrm{Var}_b\\big(a_i^{(b)} - \\bar{a}^{(b)}\\big)

    ``boot``: (k runs, B resamples). A run's deviation from the seed mean moves with the resampled
    sentences only through the interaction (the systematic sentence effects are shared by all runs and
    cancel); each deviation holds (k − 1)/k of it, hence the factor. 0 with one run."""
    k = boot.shape[0]
    if k < 2:
        return 0.0
    dev = boot - boot.mean(0, keepdims=True)
    return float(dev.var(axis=1, ddof=1).mean() * k / (k - 1))


def _sentence_part(a_boot: np.ndarray, b_boot: np.ndarray, method: str) -> tuple[float, float, float]:
    """(the test-set part of Var(Δ) the test reads, τ_A², τ_B²).

    ``double-count``: :math:`v_{sent}`, the bootstrap variance of the difference of the seed means;
    ``decomposed``: :math:`\\max(0,\\ v_{sent} - \\hat\\tau_A^2/n_A - \\hat\\tau_B^2/n_B)`, the
    systematic part alone (the interaction is in :math:`s^2` already)."""
    if method not in SEED_TESTS:
        raise ValueError(f"unknown seed test {method!r}; one of {', '.join(SEED_TESTS)}")
    v_sent = float((a_boot.mean(0) - b_boot.mean(0)).var(ddof=1))
    tau_a, tau_b = _interaction_var(a_boot), _interaction_var(b_boot)
    if method == "double-count":
        return v_sent, tau_a, tau_b
    return max(0.0, v_sent - tau_a / a_boot.shape[0] - tau_b / b_boot.shape[0]), tau_a, tau_b


def _seed_var(full: np.ndarray, tau2: float, method: str) -> float:
    """A side's variance over seeds, :math:`s^2`, read as :math:`\\hat\\tau^2` by the decomposed test where it
    is implausibly small for the interaction alone,

    .. math::

        s^2 < \\hat\\tau^2 \\, \\chi^2_{k-1}(0.01) / (k - 1)

    (below the 1 % quantile of :math:`s^2` with no training noise at all: identical scores of discrete counts,
    typically, from 2 or 3 seeds). Its spread carries no information there, and :math:`E\\,s^2 \\ge \\tau^2`."""
    return seed_variance_read(float(full.var(ddof=1)), tau2, len(full), method)


def seed_variance_read(s2: float, tau2: float, k: int, method: str = DEFAULT_SEED_TEST) -> float:
    """The seed variance the test reads for a side of ``k`` seeds with variance ``s2`` and interaction
    ``tau2`` (:func:`_seed_var`; power and plans read it the same way)."""
    from scipy import stats as st

    if method == "decomposed" and tau2 > 0 and k > 1 and s2 < tau2 * st.chi2.ppf(0.01, k - 1) / (k - 1):
        return tau2
    return s2


def _one_test(a_full: np.ndarray, a_boot: np.ndarray, b_full: np.ndarray, b_boot: np.ndarray, *, metric: str,
              n_samples: int, method: str = DEFAULT_SEED_TEST) -> SeedTest:
    """One system against the baseline: per-run scores on the full test set and on every resample.

    :math:`V = s_A^2/n_A + s_B^2/n_B + v` (``v`` from :func:`_sentence_part`), :math:`t = \\Delta/\\sqrt{V}`,
    :math:`\\nu = V^2 / \\big((s_A^2/n_A)^2/(n_A-1) + (s_B^2/n_B)^2/(n_B-1)\\big)`."""
    from scipy import stats as st

    k, nb = len(a_full), len(b_full)
    v_part, tau_a, tau_b = _sentence_part(a_boot, b_boot, method)
    va, vb = _seed_var(a_full, tau_a, method) / k, _seed_var(b_full, tau_b, method) / nb
    total = va + vb + v_part
    delta = float(a_full.mean() - b_full.mean())
    seed_part = (va ** 2 / (k - 1) if va else 0.0) + (vb ** 2 / (nb - 1) if vb else 0.0)
    df = total ** 2 / seed_part if seed_part > 0 else math.inf
    if total > 0:
        t = delta / math.sqrt(total)
        p = float(2 * st.t.sf(abs(t), df)) if math.isfinite(df) else float(2 * st.norm.sf(abs(t)))
    else:  # identical scores everywhere: no evidence of a difference unless the means differ
        t, p = (0.0, 1.0) if delta == 0 else (math.copysign(math.inf, delta), 0.0)
    return SeedTest(
        metric=metric, n_seeds=k, baseline_n_seeds=nb, mean=float(a_full.mean()),
        baseline_mean=float(b_full.mean()), delta=delta, std=float(a_full.std(ddof=1)),
        baseline_std=float(b_full.std(ddof=1)), s_sel=float(a_boot.std(axis=1, ddof=1).mean()),
        baseline_s_sel=float(b_boot.std(axis=1, ddof=1).mean()), seed_se=math.sqrt(va + vb),
        sentence_se=math.sqrt(v_part), t=t, df=df, p_value=p, n_samples=n_samples,
        interaction_sd=math.sqrt(tau_a), baseline_interaction_sd=math.sqrt(tau_b), method=method)


def _aso(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[float, float]:
    """deepsig's epsilon_min for "a dominates b" and for "b dominates a" (confidence 0.95)."""

    from deepsig import aso

    with warnings.catch_warnings():  # identical score lists: deepsig warns of a 0/0 and returns 1.0
        warnings.simplefilter("ignore")
        better = aso(a.tolist(), b.tolist(), confidence_level=0.95, seed=seed, show_progress=False)
        worse = aso(b.tolist(), a.tolist(), confidence_level=0.95, seed=seed, show_progress=False)
    return float(better), float(worse)


def describe_test(n_samples: int, seed: int, method: str = DEFAULT_SEED_TEST) -> str:
    """One paragraph stating the test, for the foot of a table."""
    sentence = ("the systematic test-set part of the difference (the paired bootstrap spread of the difference "
                "of the seed means, less each side's seed × sentence interaction, which the seeds' spread holds "
                "already)" if method == "decomposed" else
                "the test-set sampling of the seed means (the paired bootstrap spread of their difference; the "
                "seed × sentence interaction counted here and in the seeds' spread: the double-count form)")
    return (f"seed-aware test (structnmt.evaluate.seeds, {method}): Δ = difference of the seed means, read against "
            f"the seeds' spread on both sides (s²/n, Welch–Satterthwaite degrees of freedom) plus {sentence} "
            f"({n_samples:,} paired bootstrap resamples of the sentences, seed {seed}, every run rescored by "
            "sacreBLEU); two-sided Student-t p-value. "
            "ASO: deepsig's ε_min that the row's seeds almost stochastically dominate the baseline's "
            "(Dror et al. 2019; < 0.2 reads as better, 0.5 as no order), reported, not used for marks.")
