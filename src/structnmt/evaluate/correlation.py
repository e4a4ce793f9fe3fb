"""Spearman's rank correlation with an exact (or sampled) permutation test.

Used where a paper claims that two measurements of the same systems are unrelated — SA-NMT
(§6.2): "the quality of induced trees ... is not correlated with the translation quality" —
across a handful of systems, too few for the t approximation of the usual p-value. The test
here is the permutation test of the rank correlation: under independence every assignment
of the y ranks to the x ranks is equally likely, so the two-sided p-value is the share of
the n! permutations whose |rho| reaches the observed one (all of them for n <= 8, otherwise
``samples`` random ones with a fixed seed, counting the observed assignment once).
Ties get average ranks (rho is then Pearson's r of the ranks).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

EXACT_MAX_N = 8  # 8! = 40,320 permutations


@dataclass
class RankCorrelation:
    rho: float  # Spearman's rho (nan when one side is constant)
    p: float  # two-sided permutation p-value (nan when rho is)
    n: int
    exact: bool  # p from all n! permutations, else from ``samples`` random ones

    def __str__(self) -> str:
        if math.isnan(self.rho):
            return f"rho undefined (a constant column, n = {self.n})"
        how = "exact" if self.exact else "sampled"
        return f"rho = {self.rho:+.2f} (p = {self.p:.3f}, {how} permutation test, n = {self.n})"


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n of ``x``, ties sharing the mean of their ranks."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i: j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / den if den > 0 else math.nan


def spearman(x, y, *, samples: int = 100_000, seed: int = 12345) -> RankCorrelation:
    """Spearman's rho of paired values ``x``, ``y`` (at least 3 pairs) and its permutation p."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} x values but {len(y)} y values")
    n = len(x)
    if n < 3:
        raise ValueError(f"spearman: {n} pairs; a rank correlation needs at least 3")
    rx, ry = average_ranks(x), average_ranks(y)
    rho = _pearson(rx, ry)
    if math.isnan(rho):
        return RankCorrelation(math.nan, math.nan, n, True)
    tol = 1e-12
    if n <= EXACT_MAX_N:
        hits = total = 0
        for perm in itertools.permutations(range(n)):
            total += 1
            hits += abs(_pearson(rx, ry[list(perm)])) >= abs(rho) - tol
        return RankCorrelation(rho, hits / total, n, True)
    rng = np.random.default_rng(seed)
    hits = 1  # the observed assignment
    for _ in range(samples):
        hits += abs(_pearson(rx, rng.permutation(ry))) >= abs(rho) - tol
    return RankCorrelation(rho, hits / (samples + 1), n, False)
