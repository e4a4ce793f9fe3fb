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

Both are also mechanisms of their own, for every head of a layer (the paper's "+DEA" and "+LPEA" rows of
Table 1) written as hooks of plain multi-head attention: ``dea`` (:class:`DEAAttention`, D as
``logit_mask``) and ``lpea`` (:class:`LPEAAttention`, P as ``logit_bias``, -inf outside the phrase). The
configs of configs/rhe/ reach the same rows as ``rhe`` with ``heads: all`` (the class that also
identifies redundant heads); tests/test_rhe.py checks that both give the same distributions.

Structure tensors (built by the collator; keys below; padding conventions in
:mod:`structnmt.syntax.features`): ``rhe.dep_mask`` (B, S, S) bool and
``rhe.lpea.k{k}.{rule}`` (B, S, S) long with ``OUT_OF_PHRASE`` outside the phrase.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ConfigError
from ..syntax.batching import StructureSpec
from ..syntax.features import LPEA_RULES, OUT_OF_PHRASE
from .attention import AttentionContext, AttentionDims, MultiHeadAttention, register_attention
from .head_identification import DEP_MASK_KEY, dep_mask_spec, dependency_allowed  # noqa: F401 (the API here too)


def lpea_key(k: int, rule: str) -> str:
    """Structure key of the LPEA positions clipped at ``k`` under local-phrase ``rule``."""
    return f"rhe.lpea.k{k}.{rule}"


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


def _encoder_only(dims: AttentionDims, name: str) -> None:
    if dims.role != "encoder_self":
        raise ConfigError(f"model.attention ({dims.cache_key}): {name} reads the source's parse, so it is defined "
                          "for encoder self-attention; use it under encoder_self or an 'encoder_self.<layer>' "
                          "override.")


@register_attention("dea")
class DEAAttention(MultiHeadAttention):
    """DEA (eqs. 4-5) on every head: plain attention whose ``logit_mask`` is the dependency mask D."""

    def __init__(self, *, dims: AttentionDims):
        super().__init__(dims=dims)
        _encoder_only(dims, "dea")

    def required_structures(self) -> dict[str, StructureSpec]:
        return dep_mask_spec()

    def logit_mask(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """(B, 1, T, S) bool: each word, its head and its dependents (eq. 5)."""
        return dependency_allowed(structure(ctx.structures, DEP_MASK_KEY, f"dea ({self.dims.cache_key})"),
                                  q.shape[2], k.shape[2])


@register_attention("lpea")
class LPEAAttention(MultiHeadAttention):
    """LPEA (eqs. 6-8) on every head: plain attention whose ``logit_bias`` is P inside the local phrase and
    -inf (a mask) outside it."""

    @dataclass
    class Options:
        k: int = 6  # clipping distance (RHE Table 3 sweeps 0..16)
        rule: str = "rule2"  # local-phrase rule of §4.1: rule1 | rule2 | rule2_literal

    def __init__(self, *, dims: AttentionDims, options: LPEAAttention.Options | None = None):
        super().__init__(dims=dims)
        options = options if options is not None else LPEAAttention.Options()
        _encoder_only(dims, "lpea")
        if options.rule not in LPEA_RULES:
            raise ConfigError(f"model.attention ({dims.cache_key}) lpea options: unknown rule '{options.rule}'; "
                              f"use one of {', '.join(LPEA_RULES)}.")
        if options.k < 0:
            raise ConfigError(f"model.attention ({dims.cache_key}) lpea options: k must be >= 0, got {options.k}.")
        self.lpea = LocalPhraseBias(k=options.k, d=dims.d_model // dims.heads, rule=options.rule)

    def required_structures(self) -> dict[str, StructureSpec]:
        return self.lpea.required_structures()

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """(B, 1, T, S): P of eq. 8 inside the local phrase, -inf outside (eq. 6)."""
        positions = structure(ctx.structures, self.lpea.key, f"lpea ({self.dims.cache_key})")
        bias, inside = self.lpea(positions, q.shape[2], k.shape[2])
        return bias.masked_fill(~inside, float("-inf")).to(q.dtype)
