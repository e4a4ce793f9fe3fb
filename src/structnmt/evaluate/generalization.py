"""Metrics of the synthetic generalization benchmark (:mod:`structnmt.data.generalization`).

Per split, from the hypotheses and the gold examples:

* ``bleu``: sacreBLEU (its signature in ``bleu_signature``);
* ``exact``: share of hypotheses equal to the reference (whitespace-normalised);
* ``agreement``: share of agreement probes whose verb carries the right number suffix
  (:func:`structnmt.data.synthetic.agreement_outcomes`), with ``agreement_by_attractors``
  (0, 1, 2, ...) and ``agreement_by_distance`` (source words between subject head and
  verb, in the buckets of :data:`DISTANCE_BUCKETS`), each ``[correct, total]``;
* ``verb_final``: the reordering rule: share of reference verbs that the hypothesis also
  puts at the end of their clause. The k-th verb of a stem in the reference is matched
  to the k-th token of the same stem in the hypothesis (any tense or number); it counts
  as placed when the token after it is the one after it in the reference (the end of
  the sentence, the coordinator or the relative-clause marker); a missing verb counts
  as wrong.

``per_sentence`` keeps the per-sentence values (exact match, agreement and verb-final
outcomes) that paired significance tests between systems need.
"""

from __future__ import annotations

from ..data.synthetic import (
    TENSE_SUFFIX,
    SynthExample,
    agreement_outcomes,
    target_lexicon,
    target_verb,
)
from .score import corpus_scores

DISTANCE_BUCKETS = ((1, 2), (3, 5), (6, 9), (10, 10_000))


def _bucket(distance: int) -> str:
    for lo, hi in DISTANCE_BUCKETS:
        if lo <= distance <= hi:
            return f"{lo}-{hi}" if hi < 10_000 else f"{lo}+"
    return "0"


def verb_forms(seed: int) -> dict[str, str]:
    """Every target verb token of the lexicon of ``seed`` -> its stem."""
    return {target_verb(stem, tense, plural): stem
            for (cat, _), stem in target_lexicon(seed).items() if cat == "V"
            for tense in TENSE_SUFFIX for plural in (False, True)}


def verb_final_outcomes(hypothesis: str, example: SynthExample, forms: dict[str, str]) -> list[bool]:
    """Per reference verb of ``example``: does the hypothesis end its clause with it? (module docstring)"""
    hyp, ref = hypothesis.split(), example.tgt
    out = []
    for i, tok in enumerate(ref):
        stem = forms.get(tok)
        if stem is None:
            continue
        rank = sum(1 for t in ref[:i] if forms.get(t) == stem)
        where = [j for j, t in enumerate(hyp) if forms.get(t) == stem]
        if rank >= len(where):
            out.append(False)
            continue
        j = where[rank]
        out.append((hyp[j + 1] if j + 1 < len(hyp) else None) == (ref[i + 1] if i + 1 < len(ref) else None))
    return out


def split_metrics(hypotheses: list[str], examples: list[SynthExample], *, seed: int) -> dict:
    """The metrics of one split (module docstring); ``seed`` is the corpus's (its lexicon)."""

    if len(hypotheses) != len(examples):
        raise ValueError(f"got {len(hypotheses)} hypotheses for {len(examples)} examples")
    refs = [" ".join(ex.tgt) for ex in examples]
    bleu = corpus_scores(hypotheses, refs, metrics=("bleu",))[0]
    exact = [" ".join(h.split()) == r for h, r in zip(hypotheses, refs)]
    by_att: dict[str, list[int]] = {}
    by_dist: dict[str, list[int]] = {}
    agreement_per_sentence: list[list[bool]] = [[] for _ in examples]
    outcomes = iter(agreement_outcomes(hypotheses, examples))
    for s, ex in enumerate(examples):
        for _ in ex.agreement:
            item, ok = next(outcomes)
            agreement_per_sentence[s].append(ok)
            for table, key in ((by_att, str(item["attractors"])), (by_dist, _bucket(item["distance"]))):
                cell = table.setdefault(key, [0, 0])
                cell[0] += ok
                cell[1] += 1
    forms = verb_forms(seed)
    verb_final = [verb_final_outcomes(h, ex, forms) for h, ex in zip(hypotheses, examples)]
    n_agr = sum(len(a) for a in agreement_per_sentence)
    n_vf = sum(len(v) for v in verb_final)
    return {
        "sentences": len(examples),
        "bleu": bleu.score,
        "bleu_signature": bleu.signature,
        "exact": 100 * sum(exact) / len(exact) if exact else 0.0,
        "agreement": 100 * sum(map(sum, agreement_per_sentence)) / n_agr if n_agr else 0.0,
        "agreement_items": n_agr,
        "agreement_by_attractors": dict(sorted(by_att.items(), key=lambda kv: int(kv[0]))),
        "agreement_by_distance": by_dist,
        "verb_final": 100 * sum(map(sum, verb_final)) / n_vf if n_vf else 0.0,
        "verb_final_items": n_vf,
        "per_sentence": {"exact": exact, "agreement": agreement_per_sentence, "verb_final": verb_final},
    }
