"""Syntax-Enhanced Attention (SEA) of the RHE paper (Wang et al., "Enlivening Redundant
Heads in Multi-head Self-attention for Machine Translation", §4.1): the two syntactic
revisions of a head's attention distribution that RHE applies to redundant heads.

* **DEA**, dependency-enhanced attention (eqs. 4-5): ``softmax(q k^T / sqrt(d) + D)``
  with ``D_ij = 0`` when ``x_i, x_j`` are in a head-dependent relation or ``i = j`` and
  ``-inf`` otherwise — an additive mask, applied here as the boolean mask ``D_ij = 0``
  (``True`` = may attend) intersected with the key-padding mask.
* **LPEA**, local-phrase-enhanced attention (eqs. 6-8): ``softmax(q k^T / sqrt(d) + P)``
  where, for ``x_j`` in ``local_phrase(x_i)``, ``P_ij = -|tanh(W_P M_ij + b_P) U_P|`` with
  ``M_ij = w_{clip(RP_ij, k)}`` one of 2k+1 learned vectors of the head size, and
  ``P_ij = -inf`` (masked) outside the local phrase. ``RP_ij = layer(x_j) - layer(x_i)``
  is the relative local-phrasal position matrix of the syntax layer
  (:func:`structnmt.syntax.features.local_phrase_positions`, RHE Fig. 3).

  **Eq. 7 as printed** reads ``M_ij = w_{clip(j - i, k)}`` — the *linear* distance, which
  would make LPEA Shaw et al.'s relative positions restricted to the local phrase. The
  prose ("relative phrasal position distance according to their relative phrase layer")
  and Fig. 3 (``RP_{2,4} = 1`` from layers 3 and 4) mean ``clip(RP_ij, k)``; we
  implement that.

  ``P`` takes only 2k+1 values (one per clipped relative layer): :meth:`LocalPhraseBias.values`
  computes those scalars from the (2k+1, d) table and the bias is a gather of them by
  ``RP + k`` — never an (n, n, d) tensor ``M``. ``W_P, b_P, U_P`` and the table are per
  layer and shared by the heads (eq. 8's shapes are per head size; the paper does not
  give heads separate ones).

Structure tensors (built by the collator; keys below; padding conventions in
:mod:`structnmt.syntax.features`): ``rhe.dep_mask`` (B, S, S) bool and
``rhe.lpea.k{k}.{rule}`` (B, S, S) long with ``OUT_OF_PHRASE`` outside the phrase.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..syntax.batching import StructureSpec
from ..syntax.features import LPEA_RULES, OUT_OF_PHRASE

DEP_MASK_KEY = "rhe.dep_mask"


def lpea_key(k: int, rule: str) -> str:
    """Structure key of the LPEA positions clipped at ``k`` under local-phrase ``rule``."""
    return f"rhe.lpea.k{k}.{rule}"


def dep_mask_spec() -> dict[str, StructureSpec]:
    return {DEP_MASK_KEY: StructureSpec("dep_mask")}


def lpea_spec(k: int, rule: str) -> dict[str, StructureSpec]:
    return {lpea_key(k, rule): StructureSpec("lpea_positions", {"k": k, "rule": rule})}


def structure(ctx_structures, key: str, who: str) -> Tensor:
    """``ctx.structures[key]`` or a clear error naming what is missing."""
    if key not in ctx_structures:
        raise KeyError(
            f"{who}: the batch has no structure '{key}'; build the batch with the model's required_structures() "
            "(the trainer and translator do this) and a dataset prepared with a parser that gives the trees."
        )
    return ctx_structures[key]


def dependency_allowed(dep_mask: Tensor, T: int, S: int) -> Tensor:
    """DEA eq. 5 as a mask (B, 1, T, S), True = ``D_ij = 0`` (attend).

    ``dep_mask`` (B, P, P) bool from the collator, P >= T, S (a batch may carry it padded
    wider than the sequence a layer sees).
    """
    return dep_mask[:, None, :T, :S]


class LocalPhraseBias(nn.Module):
    """LPEA eqs. 7-8: ``P = -|tanh(W_P M + b_P) U_P|`` over the 2k+1 clipped relative
    local-phrasal positions, gathered per pair.

    k: clipping distance; d: head size (the width of each ``w_r`` and of ``W_P``).
    """

    def __init__(self, *, k: int, d: int, rule: str = "rule2"):
        super().__init__()
        if k < 0:
            raise ValueError(f"LPEA: k must be >= 0, got {k}.")
        if rule not in LPEA_RULES:
            raise ValueError(f"LPEA: unknown local-phrase rule '{rule}'; use one of {', '.join(LPEA_RULES)}.")
        self.k = k
        self.rule = rule
        self.table = nn.Embedding(2 * k + 1, d)  # w_{-k} .. w_k  (eq. 7)
        self.w_p = nn.Linear(d, d)  # W_P, b_P  (eq. 8)
        self.u_p = nn.Linear(d, 1, bias=False)  # U_P  (eq. 8)
        nn.init.normal_(self.table.weight, std=d**-0.5)

    @property
    def key(self) -> str:
        return lpea_key(self.k, self.rule)

    def required_structures(self) -> dict[str, StructureSpec]:
        return lpea_spec(self.k, self.rule)

    def values(self) -> Tensor:
        """(2k+1,) the scalars ``P`` for relative layers ``-k .. k`` (eq. 8 on each ``w_r``)."""
        return -torch.tanh(self.w_p(self.table.weight)).matmul(self.u_p.weight.t()).squeeze(-1).abs()

    def forward(self, positions: Tensor, T: int, S: int) -> tuple[Tensor, Tensor]:
        """positions (B, P, P) long ``RP`` (``OUT_OF_PHRASE`` outside the local phrase)
        -> bias (B, 1, T, S) float and allowed (B, 1, T, S) bool (inside the phrase)."""
        rp = positions[:, :T, :S]
        inside = rp != OUT_OF_PHRASE
        index = torch.where(inside, rp.clamp(-self.k, self.k) + self.k, torch.zeros_like(rp))
        bias = self.values()[index].masked_fill(~inside, 0.0)
        return bias[:, None], inside[:, None]
