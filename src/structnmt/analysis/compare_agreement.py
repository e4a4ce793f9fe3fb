"""The synthetic benchmark in ``structnmt compare``'s report (``--benchmark DIR``): subject-verb agreement
accuracy by attractor count and by construction, every system against the baseline with the seed-aware test.

The probes are the benchmark's own (:mod:`structnmt.data.synthetic`, ``SynthExample.agreement``: a target
verb separated from its subject head, with the number of attractors between them, nouns of the other
number, and the clause it heads: ``main``, ``relcl`` or ``conj``), scored as the benchmark scores them
(:func:`structnmt.data.synthetic.agreement_outcomes`). The benchmark's splits are joined into one set of
sentences; buckets:

* **attractors**: the probes with exactly k attractors, pooled over every split;
* **construction**: the split's held-out construction (``attraction2`` ... ``recombination``; ``test`` is
  the training distribution) and the probe's clause (``main``, ``relcl``, ``conj``).

A run's statistic on a bucket is ``(probes right, probes)`` per sentence (sentences without a probe of the
bucket count 0 of 0); the test resamples sentences and reads the seeds' spread, as for BLEU
(:func:`structnmt.evaluate.seeds.seed_aware_statistic_test`). The size column counts probes; a bucket of
fewer than ``min_bucket`` probes is marked small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.synthetic import agreement_outcomes
from ..evaluate.seeds import seed_aware_statistic_test
from .compare import BucketRow, CompareConfig, bucket_row

ATTRACTORS = "agreement by attractors (accuracy)"
SPLIT = "agreement by construction: benchmark split (accuracy)"
CLAUSE = "agreement by construction: the verb's clause (accuracy)"


@dataclass(frozen=True)
class AgreementRuns:
    """The benchmark as ``compare`` reads it: per sentence (every split joined, in order) its split and its
    probes, and per system (the baseline first) per run the outcome of every probe of every sentence."""

    splits: list[str]  # per sentence
    probes: list[list[dict]]  # per sentence, SynthExample.agreement
    outcomes: dict[str, list[list[list[bool]]]]  # system -> runs -> sentences -> one bool per probe


def probe_outcomes(hypotheses: Sequence[str], examples: Sequence) -> list[list[bool]]:
    """Per sentence, whether each of its probes is right (the benchmark's own matching)."""

    flat = iter(ok for _, ok in agreement_outcomes(list(hypotheses), list(examples)))
    return [[next(flat) for _ in ex.agreement] for ex in examples]


def _accuracy(sums: np.ndarray) -> np.ndarray:
    right, items = sums[:, 0].astype(float), sums[:, 1].astype(float)
    return np.divide(100.0 * right, items, out=np.zeros_like(right), where=items > 0)


def _counts(outcomes: list[list[bool]], probes: list[list[dict]], splits: list[str],
            keep: Callable[[str, dict], bool]) -> np.ndarray:
    """(sentences, 2): per sentence (probes right, probes) among the probes ``keep(split, probe)`` takes."""
    out = np.zeros((len(probes), 2), dtype=np.int64)
    for i, (oks, items, split) in enumerate(zip(outcomes, probes, splits)):
        for ok, item in zip(oks, items):
            if keep(split, item):
                out[i, 0] += bool(ok)
                out[i, 1] += 1
    return out


def agreement_rows(runs: AgreementRuns, cfg: CompareConfig) -> list[BucketRow]:
    """Every system against the baseline (the first of ``runs.outcomes``) in every agreement bucket."""

    names = list(runs.outcomes)
    base, others = names[0], names[1:]
    kinds: list[tuple[str, Callable[[str, dict], str]]] = [
        (ATTRACTORS, lambda split, item: str(item["attractors"])),
        (SPLIT, lambda split, item: split),
        (CLAUSE, lambda split, item: item["kind"]),
    ]
    rows: list[BucketRow] = []
    for kind, label_of in kinds:
        labels = list(dict.fromkeys(label_of(sp, it) for sp, items in zip(runs.splits, runs.probes) for it in items))
        if all(x.isdigit() for x in labels):
            labels.sort(key=int)  # attractor counts in order; splits and clauses as the benchmark lists them
        for label in labels:
            keep = lambda sp, it, label=label, label_of=label_of: label_of(sp, it) == label  # noqa: E731
            stats = {n: [_counts(r, runs.probes, runs.splits, keep) for r in runs.outcomes[n]] for n in names}
            probes = int(stats[base][0][:, 1].sum())
            if int((stats[base][0][:, 1] > 0).sum()) < 2:  # one sentence has no test-set spread: small, untested
                rows.extend(BucketRow(kind, label, probes, n, math.nan, math.nan, math.nan, math.nan, math.nan,
                                      math.nan, True) for n in others)
                continue
            tests = seed_aware_statistic_test(stats[base], {n: stats[n] for n in others}, _accuracy,
                                              metric="agreement accuracy", n_samples=cfg.n_samples, seed=cfg.seed,
                                              method=cfg.seed_test)
            rows.extend(bucket_row(kind, label, probes, n, tests[n], cfg) for n in others)
    return rows
