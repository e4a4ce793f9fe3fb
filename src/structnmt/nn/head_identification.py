"""Which heads are redundant: RHE's identification (Wang et al., §4.2, eqs. 3, 9, 10) and its syntactic
reference, the dependency mask of eq. 5 (each word, its head, its dependents; DEA's mask too).

Shared by the ``rhe`` mechanism (:mod:`structnmt.nn.rhe`, which enlivens the heads it finds redundant), the
``dea`` mechanism (:mod:`structnmt.nn.sea`) and the head-role analysis (:mod:`structnmt.analysis.head_roles`,
which judges any layer whose weights are over the source tokens), so that the analysis reads no
mechanism's module. Shapes: B sentences, H heads, T queries, S keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..syntax.batching import StructureSpec

DEP_MASK_KEY = "rhe.dep_mask"
GATES = ("dynamic", "fixed", "confidence")


def dep_mask_spec() -> dict[str, StructureSpec]:
    return {DEP_MASK_KEY: StructureSpec("dep_mask")}


def dependency_allowed(dep_mask: Tensor, T: int, S: int) -> Tensor:
    """DEA eq. 5 as a mask (B, 1, T, S), True = ``D_ij = 0`` (attend).

    ``dep_mask`` (B, P, P) bool from the collator, P >= T, S (a batch may carry it padded
    wider than the sequence a layer sees).
    """
    return dep_mask[:, None, :T, :S]


@dataclass
class HeadRoles:
    """Result of identification: every tensor (B, H)."""

    important: Tensor  # bool, h_label = 1
    h_conf: Tensor  # eq. 3
    syn_attn: Tensor  # eq. 9
    gate: Tensor  # the Syn_gate compared with


def eos_position(key_mask: Tensor) -> Tensor:
    """(B, S) bool: the EOS the collator appends (the last real position of each row)."""
    length = key_mask.sum(-1)  # (B,)
    pos = torch.arange(key_mask.shape[1], device=key_mask.device)
    return pos[None, :] == (length - 1)[:, None]


def query_tokens(key_mask: Tensor, exclude_eos: bool) -> Tensor:
    """(B, S) bool: the real tokens whose rows count in eqs. 3 and 9.

    The EOS the collator appends is the last real position of each row; with
    ``exclude_eos`` it is left out (a sentence of EOS alone keeps it, so n >= 1).
    """
    if not exclude_eos:
        return key_mask
    keep = key_mask & ~eos_position(key_mask)
    return torch.where(key_mask.sum(-1, keepdim=True) > 1, keep, key_mask)


def identify_heads(
    weights: Tensor,
    dep_allowed: Tensor,
    queries: Tensor,
    *,
    gate: str = "dynamic",
    fixed_gate: float = 0.3,
    confidence_keys: Tensor | None = None,
) -> HeadRoles:
    """Eqs. 3, 9, 10 per sentence and head.

    weights (B, H, T, S) plain attention (detached here); dep_allowed (B, 1 or H, T, S)
    bool, the DEA mask (self included); queries (B, T) bool, the rows that count;
    confidence_keys (B, S) bool or None: the keys whose weights may be a row's maximum in
    eq. 3 (None: all; ``exclude_eos_key`` passes every key but EOS).
    """
    w = weights.detach().float()
    q = queries[:, None, :].to(w.dtype)  # (B, 1, T)
    n = q.sum(-1).clamp_min(1.0)  # (B, 1)
    wc = w if confidence_keys is None else w.masked_fill(~confidence_keys[:, None, None, :], 0.0)
    h_conf = (wc.amax(-1) * q).sum(-1) / n  # (B, H)  eq. 3
    syn = ((w * dep_allowed.to(w.dtype)).sum(-1) * q).sum(-1) / n  # (B, H)  eq. 9
    if gate == "dynamic":
        g = torch.sigmoid(h_conf)  # eq. 10
    elif gate == "confidence":
        g = h_conf
    elif gate == "fixed":
        g = torch.full_like(h_conf, fixed_gate)
    else:
        raise ValueError(f"unknown gate '{gate}'; use one of {', '.join(GATES)}.")
    return HeadRoles(important=syn > g, h_conf=h_conf, syn_attn=syn, gate=g)
