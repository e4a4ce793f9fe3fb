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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.synthetic import agreement_outcomes
from .compare import Bucketing, BucketRow, CompareConfig, bucketing_rows

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


def agreement_bucketings(runs: AgreementRuns) -> list[Bucketing]:
    """The agreement buckets (by attractors, split, clause) as :class:`.compare.Bucketing`: per bucket every
    run's per-sentence (probes right, probes) among the bucket's probes; every sentence is resampled."""

    names = list(runs.outcomes)
    kinds: list[tuple[str, Callable[[str, dict], str]]] = [
        (ATTRACTORS, lambda split, item: str(item["attractors"])),
        (SPLIT, lambda split, item: split),
        (CLAUSE, lambda split, item: item["kind"]),
    ]
    out = []
    for kind, label_of in kinds:
        labels = list(dict.fromkeys(label_of(sp, it) for sp, items in zip(runs.splits, runs.probes) for it in items))
        if all(x.isdigit() for x in labels):
            labels.sort(key=int)  # attractor counts in order; splits and clauses as the benchmark lists them
        stats = []
        for label in labels:
            keep = lambda sp, it, label=label, label_of=label_of: label_of(sp, it) == label  # noqa: E731
            stats.append([_counts(r, runs.probes, runs.splits, keep) for n in names for r in runs.outcomes[n]])
        out.append(Bucketing(kind, labels, stats, [len(runs.outcomes[n]) for n in names], names[1:], _accuracy,
                             None, [int(s[0][:, 1].sum()) for s in stats]))
    return out


def agreement_rows(runs: AgreementRuns, cfg: CompareConfig,
                   bucketings: list[Bucketing] | None = None) -> list[BucketRow]:
    """Every system against the baseline (the first of ``runs.outcomes``) in every agreement bucket
    (``bucketings``: :func:`agreement_bucketings`, computed here when None)."""

    bucketings = bucketings if bucketings is not None else agreement_bucketings(runs)
    return [r for b in bucketings for r in bucketing_rows(b, cfg, "agreement accuracy")]
