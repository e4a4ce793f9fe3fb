"""Spearman's rank correlation and its permutation test (structnmt.evaluate.correlation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from structnmt.evaluate.correlation import average_ranks, spearman


def test_average_ranks_share_ties():
    assert average_ranks([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert average_ranks([3.0, 1.0, 2.0]).tolist() == [3.0, 1.0, 2.0]
    assert average_ranks([5, 5, 5]).tolist() == [2.0, 2.0, 2.0]


def test_rho_and_exact_p_by_hand():
    # no ties: rho = 1 - 6 sum d^2 / (n (n^2 - 1)); d = (-1, 1, -1, 1, 0) -> 1 - 24 / 120 = 0.8
    r = spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    assert r.rho == pytest.approx(0.8) and r.exact and r.n == 5
    # permutations of 5 with sum d^2 <= 4: the identity, 4 adjacent swaps, 3 pairs of disjoint adjacent
    # swaps = 8; as many with rho <= -0.8 (reversed): p = 16 / 120
    assert r.p == pytest.approx(16 / 120)
    perfect = spearman([0.1, 0.5, 0.7, 2.0, 9.0], [3, 4, 8, 9, 10])
    assert perfect.rho == pytest.approx(1.0) and perfect.p == pytest.approx(2 / 120)
    anti = spearman([1, 2, 3, 4], [9, 7, 5, 1])
    assert anti.rho == pytest.approx(-1.0) and anti.p == pytest.approx(2 / 24)


def test_ties_give_pearson_of_average_ranks():
    x, y = [1, 2, 2, 3, 4, 6], [3, 3, 1, 5, 4, 6]
    rx, ry = average_ranks(x), average_ranks(y)
    assert spearman(x, y).rho == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]))


def test_sampled_p_for_larger_n_agrees_with_the_exact_count_of_a_known_case():
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = x + rng.normal(scale=0.3, size=12)  # strongly related
    r = spearman(x, y, samples=20_000)
    assert not r.exact and r.rho > 0.8 and r.p < 0.01
    unrelated = spearman(x, rng.permutation(12).astype(float), samples=5_000)
    assert 0.0 < unrelated.p <= 1.0 and unrelated.p > 1 / 5001


def test_degenerate_inputs():
    r = spearman([1, 1, 1], [1, 2, 3])
    assert math.isnan(r.rho) and math.isnan(r.p) and "undefined" in str(r)
    with pytest.raises(ValueError, match="at least 3"):
        spearman([1, 2], [2, 1])
    with pytest.raises(ValueError, match="3 x values but 4"):
        spearman([1, 2, 3], [1, 2, 3, 4])
    assert "exact permutation test, n = 5" in str(spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]))
