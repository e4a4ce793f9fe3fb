"""Heterogeneous QUERYK with relative positions: the two mechanisms that won the cross-paper
comparison at 2,000 updates (docs/results/), in one self-attention layer.

Heterogeneous QUERYK (Nguyen & Joty, "Phrase-Based Attentions", §3.2.2, eq. 8; :mod:`.phrasal`)
attends jointly over the phrases of every length n in ``ngrams``; the logit of query t on the
phrase of length n that ends at j is ``sum_i (q_t W_{q,n,i}) . (k_{j-n+1+i} W_{k,n}) / sqrt(n d)``.
Relative positions (Shaw et al. 2018, eqs. 3-5; the RHE paper's Rel_Pos baseline;
:mod:`.relative_position`) add a learned vector per clipped distance to the keys and to the
values. Neither paper defines their combination; this module substitutes Shaw et al.'s
``k_m + a^K_{t,m}`` (eq. 4) for every key token ``k_m`` that eq. 8 reads::

    e_{t,(n,j)} = sum_{i=0}^{n-1} (q_t W_{q,n,i}) . (k_m W_{k,n} + a^K_{clip(m - t, k)}) / sqrt(n d),
                  m = j - n + 1 + i                                       (eq. 8 with eq. 4's keys)
    z_t = sum_{n,j} alpha_{t,(n,j)} (Conv_n(V)_j + a^V_{clip(j - t, k)})   (eq. 8 with eq. 3's values)

A phrase's value is a convolution of the raw inputs, with no per-token value to shift, so its
relative value vector is that of its end position j, where the phrase is placed everywhere in
:mod:`.phrasal` (causality, the weights' layout). With ``ngrams: [1]`` the layer is exactly
``rel_pos`` (Shaw et al.); with the two tables at zero it is exactly ``phrasal_heterogeneous``
with ``variant: queryk`` (tests/test_queryk_rel_pos.py checks both).

Tables: as ``rel_pos``, ``a^K`` and ``a^V`` of 2k + 1 vectors of the head size d per layer,
shared by the heads and by the n-gram types. Roles: encoder and decoder self-attention (cross
attention has no relative order between source and target; use ``phrasal_heterogeneous`` there).
Shapes: query (B, T, D) -> output (B, T, D), weights (B, H, T, N*L) as heterogeneous QUERYK's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..config import ConfigError
from .attention import AttentionContext, AttentionDims, register_attention
from .phrasal import HeterogeneousPhrasalAttention, PhraseBranch
from .relative_position import RelativePositions, gather_relative, relative_index


@register_attention("queryk_rel_pos")
class QueryKRelativePositionAttention(HeterogeneousPhrasalAttention):
    """Heterogeneous QUERYK (eq. 8) whose key tokens and phrase values carry Shaw et al.'s
    relative position vectors (module docstring)."""

    @dataclass
    class Options:
        ngrams: list[int] = field(default_factory=lambda: [1, 2])  # n-gram lengths attended jointly
        k: int = 16  # clipping distance; 2k+1 relative vectors per table
        shared_table: bool = False  # True: one table for keys and values (OpenNMT-py), False: two (Shaw et al.)

    def __init__(self, *, dims: AttentionDims, options: QueryKRelativePositionAttention.Options | None = None):

        options = options if options is not None else QueryKRelativePositionAttention.Options()
        where = f"model.attention ({dims.role}, {dims.cache_key}) queryk_rel_pos options"
        if dims.role == "cross":
            raise ConfigError(f"{where}: relative positions are defined for self-attention only (source and target "
                              "positions have no relative order); use phrasal_heterogeneous with variant: queryk "
                              "under cross.")
        if options.k < 0:
            raise ConfigError(f"{where}: k must be >= 0, got {options.k}.")
        super().__init__(dims=dims, options=HeterogeneousPhrasalAttention.Options(variant="queryk",
                                                                                 ngrams=list(options.ngrams)))
        self.options = options
        self.rel = RelativePositions(k=options.k, d=self.head_dim, shared_table=options.shared_table)

    def block_logits(self, branch: PhraseBranch, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """Eq. 8's logits of one n-gram type plus the relative key term of each of the phrase's n tokens.

        q (B, H, T, n*d): the stacked query kernels ``[q W_{q,n,0}; ...; q W_{q,n,n-1}]``; k (B, H, L, n*d).
        Kernel i meets the token ``m = j - (n-1-i)`` of the phrase ending at j, at distance ``m - t``:
        ``q_i a^K`` (B, H, T, 2k+1) gathered by ``clip(j - t - (n-1-i), k) + k``. Returns (B, H, T, L).
        """
        base = super().block_logits(branch, q, k, ctx)
        B, H, T, _ = q.shape
        n, d, L = branch.n, self.head_dim, k.shape[2]
        table = self.rel.rel_k.weight.t().to(q.dtype)  # (d, 2k+1)
        scores = torch.matmul(q.view(B, H, T, n, d), table)  # (B, H, T, n, 2k+1)
        term = None
        for i in range(n):
            index = relative_index(T, L, self.rel.k, ctx.query_offset + (n - 1 - i), q.device)
            g = gather_relative(scores[:, :, :, i], index)
            term = g if term is None else term + g
        return base + term / (n * d) ** 0.5

    def value_term(self, weights: Tensor, ctx: AttentionContext) -> Tensor:
        """``sum_{n,j} alpha_{t,(n,j)} a^V_{clip(j - t, k)}`` (B, H, T, d) for weights (B, H, T, N*L):
        every type's weights by end position, summed over the types, then Shaw et al.'s value term."""
        B, H, T, NL = weights.shape
        N = len(self.branches)
        return self.rel.value_term(weights.view(B, H, T, N, NL // N).sum(dim=3), ctx.query_offset)
