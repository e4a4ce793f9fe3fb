"""``structnmt compare``: multiple-comparison control over the buckets, and tests of the difference between buckets.

**Adjusted p.** A report tests 19-33 buckets per system; at p < 0.05 one bucket in twenty is "significant"
by chance alone. Every p is therefore also given adjusted by Holm's step-down method (family-wise error: the
chance that *any* marked bucket of the family is a false alarm stays below 5 %) and by Benjamini-Hochberg
(false discovery rate: the expected share of false alarms among the marked buckets stays below 5 %), both
from :func:`statsmodels.stats.multitest.multipletests`, within two families:

* **the bucketing** (``*_kind``): the buckets of one kind (one panel of the page: e.g. every tree-depth
  bucket), every system against the baseline;
* **the report** (``*_report``): every bucket of every kind and every system in the report.

"all sentences" is the headline test, not a bucket: it is in no family. A small bucket's p (fewer than
``min_bucket`` sentences) is shown but not read, so it is in no family and has no adjusted p. Marks use
**Holm over the whole report**: a mark on a bucket is read as a claim about that bucket, so the chance that
any mark on the page is false is what should stay small; and Holm is valid under any dependence between
the tests, while BH's guarantee needs positive dependence, which the bucket-vs-rest contrasts below (and
buckets of one bucketing, which share the seeds) do not all have. BH is reported beside it for screening.

**Between buckets.** "Marked in deep trees, not in shallow ones" is not a test of a difference between
them. For each bucketing, per system:

* a **contrast** ``Δ_bucket − Δ_rest``: the system's gain in a bucket minus its gain on every other
  sentence (word, probe) of the bucketing pooled; for a two-level bucketing the one contrast second − first
  (``yes − no``). Tested as a bucket is: each run's contrast ``score(bucket) − score(rest)`` on the full
  data and on every bootstrap resample (the same resamples for every run of both systems; sentence buckets
  resampled within each bucket, as a bucket's own test does, the word-frequency and agreement buckets
  resampling every sentence, as theirs do), then :func:`structnmt.evaluate.seeds._one_test`: the seeds'
  spread (s²/n, Welch df) plus the test-set part, Student-t interval and p;
* an omnibus **heterogeneity** test: does Δ differ at all between the bucketing's (not small) buckets?
  Statistic ``Q = Σ_j (c_j / se_j)²`` over the buckets' contrasts with the rest (the spread of Δ over buckets,
  each departure in units of its standard error). Its null distribution is simulated from the same
  ingredients: the bootstrap deviations of the contrasts (centred, so no heterogeneity) plus the seed part
  drawn with the seeds' covariance across buckets (each replicate ``Σ_r g_r (c_r − c̄)/sqrt(k(k−1))``,
  ``g_r`` standard normal, scaled by ``sqrt(ν/χ²_ν)`` with ν the smallest Welch df of the contrasts, so that
  few seeds widen it as the t distribution widens the per-bucket test). ``p = (1 + #{Q* ≥ Q}) / (1 + B)``.

Contrasts are adjusted within their bucketing and over the report; the heterogeneity tests over the
bucketings of the report (one per bucketing and system). Marks again use Holm over the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..evaluate.seeds import _one_test
from .compare import Bucketing, BucketRow, CompareConfig, interval

#: statsmodels method -> the suffix of its adjusted-p columns (p_<suffix>_kind, p_<suffix>_report)
METHODS = {"holm": "holm", "fdr_bh": "bh"}
#: adjusted p below which a row is marked
MARK_ALPHA = 0.05
CONTRAST, HETEROGENEITY = "bucket − rest", "heterogeneity"


@dataclass(frozen=True)
class BetweenRow:
    """One test of a difference between buckets, one system against the baseline.

    ``test``: ``bucket − rest`` (a contrast) or ``heterogeneity`` (the omnibus test of a bucketing);
    ``contrast``: what is compared (``[10,15) − rest``, ``yes − no``, ``4 buckets``); ``size``: the bucket's
    sentences (words, probes), for heterogeneity the buckets' together; ``delta_bucket``/``delta_rest``: Δ in
    the bucket and on the rest; ``difference``: their difference (heterogeneity: the standard deviation of
    Δ over the buckets, descriptive); ``low``/``high``: its 95 % interval (contrasts); ``statistic``: t
    (contrasts) or Q (heterogeneity); ``p_value`` and its adjustments (module docstring)."""

    kind: str
    test: str
    contrast: str
    system: str
    size: int
    delta_bucket: float
    delta_rest: float
    difference: float
    low: float
    high: float
    statistic: float
    p_value: float
    small: bool
    p_holm_kind: float = math.nan
    p_bh_kind: float = math.nan
    p_holm_report: float = math.nan
    p_bh_report: float = math.nan


# --------------------------------------------------------------------------- adjusted p


def adjusted(p_values: list[float]) -> dict[str, list[float]]:
    """Holm's and Benjamini-Hochberg's adjusted p of one family (statsmodels' ``multipletests``), by suffix."""
    from statsmodels.stats.multitest import multipletests

    if not p_values:
        return {suffix: [] for suffix in METHODS.values()}
    return {suffix: [float(x) for x in multipletests(p_values, alpha=MARK_ALPHA, method=method)[1]]
            for method, suffix in METHODS.items()}


def _adjust(rows: list, read, family_of, column: str) -> list:
    """``rows`` with ``p_<method>_<column>`` set for every row ``read`` takes, within the families
    ``family_of`` names (rows outside ``read`` keep NaN)."""
    families: dict = {}
    for i, r in enumerate(rows):
        if read(r):
            families.setdefault(family_of(r), []).append(i)
    out = list(rows)
    for members in families.values():
        adj = adjusted([rows[i].p_value for i in members])
        for k, i in enumerate(members):
            out[i] = replace(out[i], **{f"p_{s}_{column}": adj[s][k] for s in METHODS.values()})
    return out


def _read(r) -> bool:
    """A row whose p is read: tested, not small."""
    return not r.small and not math.isnan(r.p_value)


def adjust_bucket_rows(rows: list[BucketRow]) -> list[BucketRow]:
    """Holm and BH within each bucketing and over the report ("all sentences", small and untested rows
    left out)."""
    rows = _adjust(rows, lambda r: _read(r) and r.kind != "all sentences", lambda r: r.kind, "kind")
    return _adjust(rows, lambda r: _read(r) and r.kind != "all sentences", lambda r: "report", "report")


def adjust_between_rows(rows: list[BetweenRow]) -> list[BetweenRow]:
    """Contrasts: within their bucketing and over the report's contrasts; heterogeneity: over the
    report's bucketings."""
    rows = _adjust(rows, lambda r: _read(r) and r.test == CONTRAST, lambda r: r.kind, "kind")
    return _adjust(rows, _read, lambda r: r.test, "report")


def marked(row) -> bool:
    """The mark of a bucket or between-bucket row: Holm over the whole report below 0.05."""
    return not math.isnan(row.p_holm_report) and row.p_holm_report < MARK_ALPHA


# --------------------------------------------------------------------------- between-bucket tests


def _resample(b: Bucketing, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_samples, sentences) bootstrap counts: within each stratum (bucket), or over every sentence."""
    n = len(b.stats[0][0])
    if b.strata is None:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=n_samples)
    out = np.zeros((n_samples, n), dtype=np.int64)
    for s in np.unique(b.strata):
        idx = np.flatnonzero(b.strata == s)
        out[:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1.0 / len(idx)), size=n_samples)
    return out


def _run_scores(b: Bucketing, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per run and bucket the score of the bucket and of the rest, on the full data (runs, buckets) and on
    every resample (runs, buckets, samples)."""
    k, runs, w = len(b.labels), len(b.stats[0]), counts.astype(np.float64)  # float: BLAS; the sums stay exact
    full = np.stack([[b.stats[j][r].sum(0) for j in range(k)] for r in range(runs)])  # (runs, buckets, K)
    boot = np.stack([[np.rint(w @ b.stats[j][r]).astype(np.int64) for j in range(k)]
                     for r in range(runs)])  # (runs, buckets, B, K)
    rest_full, rest_boot = full.sum(1, keepdims=True) - full, boot.sum(1, keepdims=True) - boot

    def score(x: np.ndarray) -> np.ndarray:  # (..., K) summed statistics -> (...) scores
        return np.asarray(b.score(x.reshape(-1, x.shape[-1]))).reshape(x.shape[:-1])

    return score(full), score(rest_full), score(boot), score(rest_boot)


def _contrasts(b: Bucketing) -> list[tuple[int, int | None, str]]:
    """(bucket, the other bucket or None for the rest, label) of every contrast of ``b``."""
    if len(b.labels) == 2:
        return [(1, 0, f"{b.labels[1]} − {b.labels[0]}")]
    return [(j, None, f"{label} − rest") for j, label in enumerate(b.labels)]


def between_rows(b: Bucketing, cfg: CompareConfig) -> list[BetweenRow]:
    """Every contrast of ``b`` and its heterogeneity test, every system against the baseline (module
    docstring). A bucketing of one bucket has none."""
    if len(b.labels) < 2:
        return []
    rng = np.random.default_rng(cfg.seed)
    s, s_rest, s_boot, s_rest_boot = _run_scores(b, _resample(b, cfg.n_samples, rng))
    c, c_boot = s - s_rest, s_boot - s_rest_boot  # every run's contrast of every bucket with the rest
    nb, rows, start = b.sizes[0], [], b.sizes[0]
    for name, k in zip(b.names, b.sizes[1:]):
        sys_ = slice(start, start + k)
        start += k
        tests = [_one_test(c[sys_, j], c_boot[sys_, j], c[:nb, j], c_boot[:nb, j], metric=b.kind,
                           n_samples=cfg.n_samples, method=cfg.seed_test) for j in range(len(b.labels))]
        for j, other, label in _contrasts(b):
            t = tests[j]
            low, high = interval(t)
            d_bucket = float(s[sys_, j].mean() - s[:nb, j].mean())
            small = b.counts[j] < cfg.min_bucket or (b.counts[other] if other is not None
                                                     else sum(b.counts) - b.counts[j]) < cfg.min_bucket
            rows.append(BetweenRow(b.kind, CONTRAST, label, name, b.counts[j], d_bucket, d_bucket - t.delta,
                                   t.delta, low, high, t.t, t.p_value, small))
        rows.append(heterogeneity_row(b, cfg, name, tests, (c[sys_], c_boot[sys_], c[:nb], c_boot[:nb]),
                                      s[sys_].mean(0) - s[:nb].mean(0), rng))
    return rows


def heterogeneity_row(b: Bucketing, cfg: CompareConfig, name: str, tests: list, contrasts: tuple,
                      deltas: np.ndarray, rng: np.random.Generator) -> BetweenRow:
    """The omnibus test of one system's Δ over the (not small) buckets of ``b``: ``Q = Σ (c_j / se_j)²``
    against its simulated null (module docstring). ``contrasts``: the system's and the baseline's per-run
    contrasts, full and resampled; ``deltas``: Δ per bucket."""
    a, a_boot, base, base_boot = contrasts
    se = np.array([math.hypot(t.seed_se, t.sentence_se) for t in tests])
    use = np.array([n >= cfg.min_bucket for n in b.counts]) & (se > 0)
    size = int(sum(n for n, u in zip(b.counts, use) if u))
    label = f"{int(use.sum())} buckets"
    if use.sum() < 2:  # nothing to compare: untested
        return BetweenRow(b.kind, HETEROGENEITY, label, name, size, math.nan, math.nan, math.nan, math.nan,
                          math.nan, math.nan, math.nan, True)
    observed = np.array([t.delta for t in tests])[use] / se[use]
    q = float((observed ** 2).sum())
    sent = a_boot.mean(0) - base_boot.mean(0)  # (buckets, B): the contrasts of the seed means per resample
    null = (sent - sent.mean(1, keepdims=True)).T[:, use]  # (B, used buckets)
    # the resamples' spread holds the seed x sentence interaction, which the seed draws below hold again: scaled
    # per bucket to the test's own sentence part (net of the interaction under the decomposed test), keeping the
    # resamples' correlation between buckets
    spread = null.std(0, ddof=1)
    own = np.array([t.sentence_se for t, u in zip(tests, use) if u])
    null = null * np.divide(own, spread, out=np.zeros_like(own), where=spread > 0)
    dfs = [t.df for t, u in zip(tests, use) if u and math.isfinite(t.df)]
    nu = min(dfs) if dfs else math.inf
    null = null + _seed_draws(a[:, use], len(null), nu, rng) - _seed_draws(base[:, use], len(null), nu, rng)
    q_null = ((null / se[use]) ** 2).sum(1)
    p = float((1 + (q_null >= q * (1 - 1e-12)).sum()) / (1 + len(q_null)))
    return BetweenRow(b.kind, HETEROGENEITY, label, name, size, math.nan, math.nan, float(deltas[use].std(ddof=1)),
                      math.nan, math.nan, q, p, False)


def _seed_draws(per_run: np.ndarray, n: int, nu: float, rng: np.random.Generator) -> np.ndarray:
    """(n, buckets) draws of the seed part of a seed mean's error: covariance that of ``per_run`` (runs,
    buckets) over its runs divided by their number, widened to a multivariate t of ``nu`` df."""
    k = len(per_run)
    dev = (per_run - per_run.mean(0)) / math.sqrt(k * (k - 1))
    draws = rng.standard_normal((n, k)) @ dev
    if math.isfinite(nu):
        draws *= np.sqrt(nu / rng.chisquare(nu, size=n))[:, None]
    return draws
