"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018): the RHE paper's
"Rel_Pos" baseline (RHE Table 1, Table 2).

Shaw et al. eqs. 3-5, per head, with ``a_ij = w_{clip(j - i, k)}``::

    e_ij = q_i (k_j + a^K_ij)^T / sqrt(d)          (eq. 4)
    z_i  = sum_j alpha_ij (v_j + a^V_ij)            (eq. 3)
    clip(x, k) = max(-k, min(k, x))                 (eq. 5)

Two tables ``a^K, a^V`` of ``2k + 1`` vectors of the head size ``d`` per layer, shared by
all heads (Shaw et al. §3.1: "shared across attention heads"); ``shared_table: true``
uses one table for both, as OpenNMT-py does (the toolkit the RHE authors used) — a
departure from Shaw et al., available for reproducing that setting. The model keeps its
absolute sinusoidal positions (Shaw et al. found little difference with both; the RHE
paper adds Rel_Pos to a Transformer that has them).

Never a (T, S, d) tensor (the efficient form of Shaw et al. §3.3, done with a gather):

* keys: ``q W^K_r`` is (B, H, T, 2k+1) — each query against the 2k+1 relative vectors —
  then gathered by the clipped distance index ``clip(j - i, k) + k`` (T, S) into the
  (B, H, T, S) logit term;
* values: the weights (B, H, T, S) are summed into their 2k+1 distance buckets
  (``scatter_add``), (B, H, T, 2k+1), times the table (2k+1, d) -> (B, H, T, d).

Roles: encoder self-attention and decoder self-attention. In the decoder the cache holds
the plain keys/values of all previous steps (as plain MHA); a step's query ``i`` is its
absolute position ``ctx.query_offset + t``, so the distances of a cached step equal those
of the full pass. Cross-attention has no relative order between source and target and
is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ConfigError
from .attention import AttentionContext, AttentionDims, MultiHeadAttention, register_attention


def relative_index(T: int, S: int, k: int, query_offset: int | Tensor = 0, device: torch.device | None = None
                   ) -> Tensor:
    """(T, S) long ``clip(j - i, k) + k`` with ``i = query_offset + t`` (Shaw et al. eq. 5); ``query_offset`` an
    int, or a 0-dim tensor on ``device`` (fixed-shape decoding: computed there, never read by the host)."""
    i = torch.arange(T, device=device)[:, None] + query_offset
    j = torch.arange(S, device=device)[None, :]
    return (j - i).clamp(-k, k) + k


def gather_relative(table_scores: Tensor, index: Tensor) -> Tensor:
    """(B, H, T, R) scores per relative distance -> (B, H, T, S) per key, by ``index`` (T, S)."""
    B, H, T, _ = table_scores.shape
    return table_scores.gather(-1, index.expand(B, H, T, index.shape[-1]))


def bucket_weights(weights: Tensor, index: Tensor, buckets: int) -> Tensor:
    """(B, H, T, S) weights summed into their distance buckets: (B, H, T, buckets).

    Summed in float32 whatever the weights' dtype (under bf16 autocast the clipped far
    buckets gather many small weights), then cast back.
    """
    B, H, T, S = weights.shape
    out = torch.zeros(B, H, T, buckets, dtype=torch.float32, device=weights.device)
    return out.scatter_add(-1, index.expand(B, H, T, S), weights.float()).to(weights.dtype)


class RelativePositions(nn.Module):
    """The two tables of Shaw et al. (keys ``a^K``, values ``a^V``; 2k+1 vectors of the head
    size ``d``, shared by the heads) and the two terms they add; used by ``rel_pos`` and by
    ``rhe`` (``enhancement: rel_pos``)."""

    def __init__(self, *, k: int, d: int, shared_table: bool = False):
        super().__init__()
        if k < 0:
            raise ValueError(f"relative positions: k must be >= 0, got {k}.")
        self.k = k
        self.rel_k = nn.Embedding(2 * k + 1, d)
        self.rel_v = self.rel_k if shared_table else nn.Embedding(2 * k + 1, d)
        for table in {id(self.rel_k): self.rel_k, id(self.rel_v): self.rel_v}.values():
            nn.init.normal_(table.weight, std=d**-0.5)

    def key_term(self, q: Tensor, S: int, query_offset: int = 0) -> Tensor:
        """``q_i a^K_ij / sqrt(d)`` (B, H, T, S) for q (B, H, T, d): eq. 4's second term, by gather."""
        scores = torch.matmul(q, self.rel_k.weight.t().to(q.dtype))  # (B, H, T, 2k+1)
        index = relative_index(q.shape[2], S, self.k, query_offset, q.device)
        return gather_relative(scores, index) / math.sqrt(q.shape[-1])

    def value_term(self, weights: Tensor, query_offset: int = 0) -> Tensor:
        """``sum_j alpha_ij a^V_ij`` (B, H, T, d) for weights (B, H, T, S): eq. 3's second term, by buckets."""
        T, S = weights.shape[-2:]
        index = relative_index(T, S, self.k, query_offset, weights.device)
        return torch.matmul(bucket_weights(weights, index, 2 * self.k + 1), self.rel_v.weight.to(weights.dtype))


@register_attention("rel_pos")
class RelativePositionAttention(MultiHeadAttention):
    """Multi-head self-attention with clipped relative positions (Shaw et al. 2018).

    Options: ``k`` the clipping distance (Shaw et al.'s default 16), ``shared_table``
    one table for keys and values (OpenNMT-py) instead of two (Shaw et al.).
    """

    @dataclass
    class Options:
        k: int = 16  # clipping distance; 2k+1 relative vectors per table
        shared_table: bool = False  # True: one table for keys and values (OpenNMT-py), False: two (Shaw et al.)

    uses_value_term = True
    #: the distances of a fixed-shape step are tensor arithmetic on its position (relative_index)
    decodes_in_fixed_shapes = True

    def __init__(self, *, dims: AttentionDims, options: RelativePositionAttention.Options | None = None):
        super().__init__(dims=dims)

        options = options if options is not None else RelativePositionAttention.Options()
        if dims.role == "cross":
            raise ConfigError(
                f"model.attention ({dims.cache_key}): rel_pos is defined for self-attention only (source and "
                "target positions have no relative order); use it under encoder_self or decoder_self."
            )
        if options.k < 0:
            raise ConfigError(f"model.attention ({dims.cache_key}) rel_pos options: k must be >= 0, got {options.k}.")
        self.rel = RelativePositions(k=options.k, d=dims.d_model // dims.heads, shared_table=options.shared_table)

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        return self.rel.key_term(q, k.shape[2], ctx.query_offset)

    def value_term(self, weights: Tensor, ctx: AttentionContext) -> Tensor:
        return self.rel.value_term(weights, ctx.query_offset)
