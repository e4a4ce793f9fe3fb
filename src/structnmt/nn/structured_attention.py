"""Structured (matrix-tree) self-attention as a Transformer encoder mechanism: SA-NMT's head
word selection (§3.1, eqs. 6-15) moved into the Transformer family, so that trees induced
by the two families can be compared ("beyond the paper").

Per head h, with the head's queries and keys: the arc score of word i heading word j is
``phi[i, j] = q_j . k_i / sqrt(d_h)`` — the dependent j asks, the head i answers, as a
query row asks its keys (the RNN family's eq. 9 has the head ask: ``q_i . k_j``; both
are learned bilinear forms, so the roles only swap names, but compare the families'
raw scores with that in mind) — and the root score of j is ``phi[j, j] = q_j . k_j / sqrt(d_h)``
(the paper's choice: the word's own entry) or ``r . k_j / sqrt(d_h)`` with a learned root
query (``root: learned``). ``scale: false`` drops the 1/sqrt(d_h) from every entry, root
included (the paper's eq. 9 has none; the RNN family's ``scale`` option is the same switch). beta = :func:`~structnmt.nn.matrix_tree.marginals` (each column sums
to 1 over heads and root). The attention weight of query j on key i is ``beta[i, j]``
(j's probability of being headed by i), the root marginal ``beta[j, j]`` landing on j
itself, so the output is M = S_v beta (eq. 8) per head, followed by the usual output
projection. ``heads``: how many of the layer's heads are structured (the first ones;
the others stay plain softmax attention), default all.

Shapes: (B, H, n, n) weights; padding masked (marginals are zero outside the length).
Encoder self-attention only. Extras: ``arcs`` (B, H_s, n, n) beta and ``arc_scores`` phi
in the [head, dependent] layout, for ``structnmt induce``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from .attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    MultiHeadAttention,
    merge_heads,
    register_attention,
    scaled_attention,
    split_heads,
)
from .matrix_tree import marginals


@register_attention("structured")
class StructuredAttention(MultiHeadAttention):
    """Matrix-tree attention on the first ``heads`` heads (see the module docstring)."""

    @dataclass
    class Options:
        heads: int = 0  # structured heads (the first ones); 0 = all
        root: str = "self"  # self (phi_jj = q_j . k_j) | learned (r . k_j)
        scale: bool = True  # divide phi (root entries included) by sqrt(d_h)

    def __init__(self, *, dims: AttentionDims, options: Options):
        super().__init__(dims=dims)

        if dims.role != "encoder_self":
            raise ConfigError(f"model.attention ({dims.role}) structured: tree attention is an encoder "
                              "self-attention; use it under encoder_self or an encoder_self.N override.")
        if options.root not in ("self", "learned"):
            raise ConfigError(f"model.attention ({dims.role}) structured: unknown root '{options.root}'; use self or learned.")
        if not 0 <= options.heads <= dims.heads:
            raise ConfigError(f"model.attention ({dims.role}) structured: heads={options.heads} must be in 0..{dims.heads}.")
        self.options = options
        self.n_tree = options.heads or dims.heads
        d_h = dims.d_model // dims.heads
        self.root_query = nn.Parameter(torch.randn(self.n_tree, d_h) * d_h**-0.5) if options.root == "learned" else None

    @property
    def tree_heads(self) -> int:
        """The first ``n_tree`` heads carry matrix-tree arcs in their extras (``structnmt induce``)."""
        return self.n_tree

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        B, n, _ = query.shape
        q = split_heads(self.q_proj(query), self.heads)
        k, v = (split_heads(t, self.heads) for t in self.kv_proj(memory).chunk(2, dim=-1))
        G = self.n_tree
        d_h = q.shape[-1]
        mask = ctx.key_mask if ctx.key_mask is not None else torch.ones(B, n, dtype=torch.bool, device=query.device)
        c = d_h**-0.5 if self.options.scale else 1.0
        phi = torch.matmul(k[:, :G], q[:, :G].transpose(-1, -2)) * c  # (B, G, n, n): [head i, dependent j]
        if self.root_query is not None:
            root = torch.einsum("bgnd,gd->bgn", k[:, :G], self.root_query) * c
            phi = phi.diagonal_scatter(root, dim1=-2, dim2=-1)
        lengths = mask.sum(-1).repeat_interleave(G)
        beta = marginals(phi.reshape(B * G, n, n), lengths).view(B, G, n, n)
        weights = beta.transpose(-1, -2)  # (B, G, n(query j), n(key i)) = beta[i, j]
        dropped = F.dropout(weights, self.dims.dropout, self.training)
        out = torch.matmul(dropped, v[:, :G])  # eq. 8 per head
        all_w = weights
        if G < self.heads:  # the other heads: plain attention
            rest, w_rest = scaled_attention(q[:, G:], k[:, G:], v[:, G:], key_mask=mask,
                                            dropout_p=self.dims.dropout if self.training else 0.0,
                                            need_weights=ctx.need_weights)
            out = torch.cat([out, rest], dim=1)
            all_w = torch.cat([weights, w_rest], dim=1) if w_rest is not None else None
        extras = {"arcs": beta, "arc_scores": phi} if ctx.need_weights else {}
        return AttentionOutput(output=self.out_proj(merge_heads(out)),
                               weights=all_w if ctx.need_weights else None, extras=extras)
