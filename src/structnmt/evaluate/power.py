"""Power of the seed-aware test: the smallest difference it would detect, and the seeds a question needs.

The seed-aware test (:mod:`structnmt.evaluate.seeds`) reads the difference of two systems' seed means,
:math:`\\Delta = \\bar{A} - \\bar{B}`, against

.. math::

    \\hat{V} = \\frac{\\hat{s}_A^2}{n_A} + \\frac{\\hat{s}_B^2}{n_B} + v_{sent},
    \\qquad t = \\Delta / \\sqrt{\\hat{V}},

(:math:`v_{sent}` here: the test-set part the test reads, the systematic part :math:`v_{sys}` alone for
its default, decomposed form; the whole bootstrap spread for the double-count form, for which this
model, taking its too-wide :math:`\\hat V` as the true variance, gives too large an MDE)

with Welch–Satterthwaite degrees of freedom :math:`\\hat\\nu` of the seed part, and rejects "no
difference" when :math:`|t| > t_{1-\\alpha/2,\\hat\\nu}`. Given the variance parts of a comparison
(:class:`VarianceParts`: the two systems' seed variances :math:`\\sigma_A^2, \\sigma_B^2` and the
test-set part :math:`v_{sent}`) and a true difference :math:`\\delta`, the observed :math:`\\Delta` is
normal with mean :math:`\\delta` and variance :math:`V = \\sigma_A^2/n_A + \\sigma_B^2/n_B + v_{sent}`
(the test-set draw included), and independent of the seed variances' estimates, which follow
:math:`\\hat{s}^2 \\sim \\sigma^2 \\chi^2_{n-1}/(n-1)`. So the test's power is

.. math::

    \\mathrm{power}(\\delta) = \\mathbb{E}_{\\hat{s}_A^2, \\hat{s}_B^2}\\Big[
        \\Phi\\Big(\\frac{\\delta - q}{\\sqrt{V}}\\Big) + \\Phi\\Big(\\frac{-\\delta - q}{\\sqrt{V}}\\Big)\\Big],
    \\qquad q = t_{1-\\alpha/2,\\hat\\nu} \\sqrt{\\hat{V}},

the expectation taken over ``draws`` pairs of chi-square draws with a fixed seed (SciPy's
distributions; the same draws for every :math:`\\delta`, so power is smooth and increasing in
:math:`|\\delta|`). The test-set part is counted as known, as the test counts it. The usual
noncentral-t shortcut (the degrees of freedom taken as fixed) overstates the power at 3 seeds a side
by about 5 points; averaging over the variance estimates does not (tests/test_power.py checks both
functions against simulated grids run through the test itself).

* :func:`minimal_detectable_effect` -- the :math:`\\delta` at which power reaches ``power`` (0.8) at
  level ``alpha`` (0.05) with the seeds a comparison has: a row that is not significant had no
  effect larger than this, at that power;
* :func:`seeds_needed` -- the fewest seeds per system (the same number on both sides) at which a
  difference of ``delta`` is detected with that power, or None where even ``max_seeds`` do not
  suffice (the test-set part alone is too large: a larger or a second test set is what helps).

**Planning with seeds and test size** (:class:`NoiseComponents`, the decomposed test of
:mod:`structnmt.evaluate.seeds`). Each part of the variance shrinks with what it averages over: with
:math:`k` seeds a side and a test set :math:`c` times the size of the one measured,

.. math::

    V(k, c) = \\frac{\\sigma^2_{seed,A} + \\sigma^2_{seed,B}}{k}
        + \\frac{\\tau_A^2 + \\tau_B^2}{k\\,c} + \\frac{v_{sys}}{c},

(training noise; the seed × sentence interaction, :math:`\\tau^2 = \\sigma^2_{int}/N`; the systematic
test-set part, :math:`v_{sys} = \\sigma^2_{sys}/N`), which is :class:`VarianceParts` with per-seed
variances :math:`\\sigma^2_{seed} + \\tau^2/c` and test-set part :math:`v_{sys}/c`
(:meth:`NoiseComponents.parts`). As :math:`k \\to \\infty` only :math:`v_{sys}/c` is left and the
degrees of freedom grow without bound, so the smallest difference any number of seeds resolves is
:math:`(z_{1-\\alpha/2} + z_{power})\\sqrt{v_{sys}/c}` (:func:`mde_floor`); a difference above it is
resolved by a finite number of seeds (:func:`seeds_for`). :func:`plan_mde` is the MDE at
:math:`(k, c)`, taken as the smallest over the test sizes from 1 to :math:`c` (a test set :math:`c` times
as large holds every smaller one: the MDE never grows with the test set, though the Welch degrees of
freedom fall as the known test-set part shrinks against the estimated seed part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VarianceParts", "NoiseComponents", "power", "minimal_detectable_effect", "seeds_needed", "mde_floor",
           "plan_mde", "seeds_for"]


@dataclass(frozen=True)
class VarianceParts:
    """The variances a seed-aware comparison reads (units: the metric's, squared).

    seed_var: the system's variance over seeds on the fixed test set (:math:`s_A^2`);
    baseline_seed_var: the baseline's (:math:`s_B^2`);
    sentence_var: the variance of the difference of the seed means over test-set resamples
    (:math:`v_{sent}`, the test's ``sentence_se`` squared).
    """

    seed_var: float
    baseline_seed_var: float
    sentence_var: float

    def __post_init__(self) -> None:
        for name in ("seed_var", "baseline_seed_var", "sentence_var"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite variance >= 0, got {value}.")


def _check_seeds(n: int, n_baseline: int) -> None:
    if n < 2 or n_baseline < 2:
        raise ValueError(f"the seed variance needs >= 2 seeds on each side (got {n} and {n_baseline}); power and "
                         "seed plans are for the seed-aware test, which needs them too.")


def power(delta: float, parts: VarianceParts, n: int, n_baseline: int, *, alpha: float = 0.05,
          draws: int = 20000, seed: int = 0) -> float:
    """Probability that the seed-aware test at level ``alpha`` (two-sided) flags a true difference ``delta``
    with ``n`` seeds of the system and ``n_baseline`` of the baseline (module docstring)."""
    from scipy import stats

    _check_seeds(n, n_baseline)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}.")
    rng = np.random.default_rng(seed)
    va = parts.seed_var * rng.chisquare(n - 1, draws) / (n - 1) / n  # (draws,) estimates of s_A^2 / n_A
    vb = parts.baseline_seed_var * rng.chisquare(n_baseline - 1, draws) / (n_baseline - 1) / n_baseline
    v_hat = va + vb + parts.sentence_var
    seed_part = va ** 2 / (n - 1) + vb ** 2 / (n_baseline - 1)
    finite = seed_part > 0
    df = np.where(finite, v_hat ** 2 / np.where(finite, seed_part, 1.0), 1.0)
    crit = np.where(finite, stats.t.ppf(1 - alpha / 2, df), stats.norm.ppf(1 - alpha / 2))
    q = crit * np.sqrt(v_hat)
    sd = math.sqrt(parts.seed_var / n + parts.baseline_seed_var / n_baseline + parts.sentence_var)
    if sd == 0:  # no noise at all: any difference is seen, none is invented
        return 1.0 if delta != 0 else 0.0
    p = stats.norm.sf((q - abs(delta)) / sd) + stats.norm.cdf((-q - abs(delta)) / sd)
    return float(p.mean())


def minimal_detectable_effect(parts: VarianceParts, n: int, n_baseline: int, *, alpha: float = 0.05,
                              target: float = 0.8) -> float:
    """The smallest |Δ| the test detects with probability ``target`` at level ``alpha`` with these seeds."""
    from scipy import optimize

    if not alpha < target < 1:
        raise ValueError(f"the power must lie between alpha ({alpha}) and 1, got {target}.")
    _check_seeds(n, n_baseline)
    sd = math.sqrt(parts.seed_var / n + parts.baseline_seed_var / n_baseline + parts.sentence_var)
    if sd == 0:
        return 0.0
    hi = sd
    while power(hi, parts, n, n_baseline, alpha=alpha) < target:
        hi *= 2
    return float(optimize.brentq(lambda d: power(d, parts, n, n_baseline, alpha=alpha) - target, 0.0, hi,
                                 xtol=1e-6 * sd))


def seeds_needed(delta: float, parts: VarianceParts, *, alpha: float = 0.05, target: float = 0.8,
                 max_seeds: int = 100) -> int | None:
    """The fewest seeds per system (both sides the same) at which a true difference of ``delta`` is detected
    with probability ``target``; None if ``max_seeds`` do not reach it."""
    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"the difference to resolve must be above 0, got {delta}.")
    if max_seeds < 2:
        raise ValueError(f"max_seeds must be >= 2, got {max_seeds}.")
    if power(delta, parts, max_seeds, max_seeds, alpha=alpha) < target:
        return None
    return _fewest_seeds(delta, parts, 2, max_seeds, alpha=alpha, target=target)


def _fewest_seeds(delta: float, parts: VarianceParts, lo: int, hi: int, *, alpha: float, target: float) -> int:
    """The first n in [lo, hi] whose power reaches ``target`` (``hi`` reaches it), by bisection: power grows
    with the seeds."""
    while lo < hi:
        mid = (lo + hi) // 2
        if power(delta, parts, mid, mid, alpha=alpha) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class NoiseComponents:
    """The parts of Var(Δ) of a comparison, each by what it shrinks with (module docstring).

    seed_var, baseline_seed_var: :math:`\\sigma^2_{seed}` of either side (training noise of the corpus
    score beyond the interaction); interaction_var, baseline_interaction_var: :math:`\\tau^2 =
    \\sigma^2_{int}/N` of either side on the measured test set; sentence_var: :math:`v_{sys} =
    \\sigma^2_{sys}/N`, the systematic test-set part of the difference."""

    seed_var: float
    baseline_seed_var: float
    interaction_var: float
    baseline_interaction_var: float
    sentence_var: float

    @classmethod
    def from_test(cls, std: float, baseline_std: float, tau: float, baseline_tau: float,
                  sentence_se: float) -> NoiseComponents:
        """The components behind a decomposed test's numbers: each side's :math:`s^2` split into
        :math:`\\min(s^2, \\hat\\tau^2)` of interaction and the rest of training noise, so that
        :meth:`parts` at scale 1 is what the test read."""
        ia, ib = min(std ** 2, tau ** 2), min(baseline_std ** 2, baseline_tau ** 2)
        return cls(std ** 2 - ia, baseline_std ** 2 - ib, ia, ib, sentence_se ** 2)

    def parts(self, scale: float = 1.0) -> VarianceParts:
        """:class:`VarianceParts` at a test set ``scale`` times the measured one:
        per-seed variances :math:`\\sigma^2_{seed} + \\tau^2/c`, test-set part :math:`v_{sys}/c`."""
        if not scale > 0:
            raise ValueError(f"the test-set scale must be above 0, got {scale}.")
        return VarianceParts(self.seed_var + self.interaction_var / scale,
                             self.baseline_seed_var + self.baseline_interaction_var / scale,
                             self.sentence_var / scale)


def mde_floor(comp: NoiseComponents, scale: float = 1.0, *, alpha: float = 0.05, target: float = 0.8) -> float:
    """The MDE as the seeds grow without bound: :math:`(z_{1-\\alpha/2} + z_{power})\\sqrt{v_{sys}/c}`."""
    from scipy.stats import norm

    return float((norm.ppf(1 - alpha / 2) + norm.ppf(target)) * math.sqrt(comp.sentence_var / scale))


def plan_mde(comp: NoiseComponents, n: int, scale: float = 1.0, *, n_baseline: int | None = None,
             alpha: float = 0.05, target: float = 0.8) -> float:
    """The MDE with ``n`` seeds of the row (``n_baseline`` of the baseline, default ``n``) on a test set
    ``scale`` times the measured one: :math:`\\min_{1 \\le c' \\le c}` MDE of :meth:`NoiseComponents.parts`
    at :math:`c'`, over :math:`c' = c` and a halving grid down to 1 (below 1: at ``scale`` alone)."""
    nb = n if n_baseline is None else n_baseline
    scales = [scale]
    while scales[-1] / 2 >= 1:
        scales.append(scales[-1] / 2)
    if scale > 1:
        scales.append(1.0)
    return min(minimal_detectable_effect(comp.parts(c), n, nb, alpha=alpha, target=target) for c in scales)


def seeds_for(delta: float, comp: NoiseComponents, scale: float = 1.0, *, alpha: float = 0.05,
              target: float = 0.8, max_seeds: int = 100000) -> int | None:
    """The fewest seeds per system (both sides alike) at which ``delta`` is detected with probability
    ``target`` on a test set ``scale`` times the measured one; None where ``delta`` is at or below
    :func:`mde_floor` (no number of seeds resolves it) or ``max_seeds`` do not reach it. Doubling, then
    bisection (power grows with the seeds)."""
    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"the difference to resolve must be above 0, got {delta}.")
    if delta <= mde_floor(comp, scale, alpha=alpha, target=target):
        return None
    parts = comp.parts(scale)
    hi = 2
    while power(delta, parts, hi, hi, alpha=alpha) < target:
        if hi >= max_seeds:
            return None
        hi = min(2 * hi, max_seeds)
    return _fewest_seeds(delta, parts, max(2, hi // 2), hi, alpha=alpha, target=target)
