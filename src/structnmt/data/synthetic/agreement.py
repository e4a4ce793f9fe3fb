"""The agreement metric of the synthetic corpus: does a hypothesis give each probed target verb
the agreement suffix of its subject (the probes of ``SynthExample.agreement``, package
docstring)? :func:`agreement_outcomes` per probe, :func:`agreement_accuracy` overall."""

from __future__ import annotations

from .render import SynthExample

__all__ = ["agreement_outcomes", "agreement_accuracy"]


def agreement_outcomes(hypotheses: list[str], examples: list[SynthExample]) -> list[tuple[dict, bool]]:
    """(agreement item, correct?) for every agreement item of ``examples``, in order.

    For each item, the hypothesis occurrences of the verb (tokens equal to ``expected`` or
    ``wrong``) are listed; the item is matched to the k-th occurrence, where k is the
    number of such tokens before it in the reference target (or to the last one if the
    hypothesis has fewer). It is correct when that token is ``expected``; an absent verb
    counts as wrong.
    """
    if len(hypotheses) != len(examples):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses for {len(examples)} examples"
        )
    out = []
    for hyp, ex in zip(hypotheses, examples):
        toks = hyp.split()
        for item in ex.agreement:
            forms = {item["expected"], item["wrong"]}
            rank = sum(1 for t in ex.tgt[: item["tgt_index"]] if t in forms)
            occ = [t for t in toks if t in forms]
            chosen = (occ[rank] if rank < len(occ) else occ[-1]) if occ else None
            out.append((item, chosen == item["expected"]))
    return out


def agreement_accuracy(hypotheses: list[str], examples: list[SynthExample]) -> tuple[float, int]:
    """Accuracy of target verb agreement in ``hypotheses`` (detokenised strings), matched
    as in :func:`agreement_outcomes`. Returns ``(accuracy, number_of_items)``; accuracy is
    0.0 without items.
    """
    outcomes = agreement_outcomes(hypotheses, examples)
    return (sum(ok for _, ok in outcomes) / len(outcomes) if outcomes else 0.0), len(outcomes)
