"""Interleaved phrase-to-phrase heterogeneous attention (Phrase-Based Attentions §3.3, eqs. 9-17).

Unigram queries ``u`` (the query itself) and bigram queries ``Conv_2(Q)`` (the bigram
*ending* at t, tokens t-1..t) both attend jointly over unigram and bigram keys/values
(heterogeneous, eqs. 9-12; keys and values are shared by the two query types, built as in
:class:`~structnmt.nn.phrasal.HeterogeneousPhrasalAttention`):

* CONVKV (eqs. 9-10): A_1 uses ``Q W_{q1}``, A_2 uses ``Conv_2(Q, W_{q2})`` (one query
  per head of width d, scale 1/sqrt(d)) against ``[K W_{k,1}; Conv_2(K, W_{k,2})]``.
* QUERYK (eqs. 11-12): per key type n, A_1 uses ``Q W_{q1,n}`` and A_2 uses
  ``Conv_2(Q, W_{q2,n})`` as the kernel over the projected keys, scale 1/sqrt(d*n).

A_1 = (u_1..u_N), A_2 = (b_1..b_{N-1}) where b_i is the bigram query (Q_i, Q_{i+1}); in our
indexing by end position, ``b_t`` (t >= 1) covers t-1..t and there is none at t = 0.
Interleaving and the output convolution (eqs. 13-17) reduce to per-position linear maps
(that is what a stride-2 convolution over an interleaved sequence computes):

* encoder (eqs. 13, 15; window 3, stride 2 over ``(0, u_1, b_1, u_2, ..., u_N, 0)``):
  ``O_t = W_enc [b_t; u_t; b_{t+1}]`` with b_0 = 0 and b_{t+1} = 0 past the last valid
  token (a bigram query overlapping padding is no phrase);
* decoder self / cross (eqs. 14, 16-17; window 2, stride 2 over ``(0, u_1, b_1, ...)``):
  ``O_t = W_dec [b_t; u_t]`` — only past phrases, so it stays autoregressive.

The convolution replaces the attention's output projection W_o. Only n in {1, 2} (the
paper's footnote 3). Cache: the heterogeneous entry plus ``q_tail`` (B, 1, D), the last
query input, for the bigram query; in cross-attention the same static entry carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    masked_softmax,
    merge_heads,
    register_attention,
    split_heads,
)
from .phrasal import (
    _causal_allowed,
    _check_variant,
    _config_error,
    _PhrasalAttention,
    phrase_windows,
)


@register_attention("phrasal_interleaved")
class InterleavedPhrasalAttention(_PhrasalAttention):
    """Interleaved phrase-to-phrase heterogeneous attention, §3.3 (unigrams + bigrams).

    query (B, T, D), memory (B, S, D) -> output (B, T, D); weights (B, 2H, T, 2S): heads
    0..H-1 are the unigram queries (A_1), H..2H-1 the bigram queries (A_2); key block 0 =
    unigram keys, block 1 = bigram keys by end position.
    """

    homogeneous = False

    @dataclass
    class Options:
        variant: str = "convkv"  # convkv (eqs. 9-10) | queryk (eqs. 11-12)

    def __init__(self, *, dims: AttentionDims, options: InterleavedPhrasalAttention.Options | None = None):
        options = options if options is not None else InterleavedPhrasalAttention.Options()
        where = f"model.attention ({dims.role}, {dims.cache_key}) phrasal_interleaved options"
        _check_variant(options.variant, where)
        if dims.role not in ("encoder_self", "decoder_self", "cross"):
            raise _config_error(f"{where}: unknown role '{dims.role}'.")
        queryk = options.variant == "queryk"
        super().__init__(dims=dims, variant=options.variant, branches=[(1, dims.heads), (2, dims.heads)],
                         own_query=queryk)
        D = dims.d_model
        if queryk:  # A_1 queries are the branches' q_proj; A_2: Conv_2(Q, W_{q2,n}) per key type n
            self.q_uni = None
            self.q_bi = nn.ModuleList(nn.Linear(2 * D, n * D) for n in (1, 2))
        else:  # W_{q1}; Conv_2(Q, W_{q2})
            self.q_uni = nn.Linear(D, D)
            self.q_bi = nn.ModuleList([nn.Linear(2 * D, D)])
        self.encoder = dims.role == "encoder_self"
        self.out_proj = nn.Linear((3 if self.encoder else 2) * D, D)  # W_enc (eq. 15) / W_dec, W_cross (16-17)
        self.options = options

    def _heads(self, x: Tensor, n: int) -> Tensor:
        """(B, T, n*H*d) laid out (n, H, d) -> (B, H, T, n*d)."""
        B, T, _ = x.shape
        return x.view(B, T, n, self.dims.heads, self.head_dim).permute(0, 3, 1, 2, 4).reshape(
            B, self.dims.heads, T, n * self.head_dim)

    def _attend(self, queries: list[Tensor], kvs, allowed: Tensor, dropout_p: float) -> tuple[Tensor, Tensor]:
        """One softmax over unigram+bigram keys; queries per key type (B, H, T, n*d)."""
        logits = torch.cat([torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
                            for q, (k, _) in zip(queries, kvs)], dim=-1)
        w = masked_softmax(logits, allowed).to(kvs[0][1].dtype)
        values = torch.cat([v for _, v in kvs], dim=2)
        return torch.matmul(F.dropout(w, p=dropout_p, training=dropout_p > 0), values), w

    def quadrant_layout(self) -> dict:
        """Quadrant statistics (``structnmt analyze``): ``{"kind", "query_phrase" (H',) bool,
        "key_phrase_per_head" (H',) bool | None, "key_blocks" list[int] | None}``; see
        :mod:`structnmt.analysis.phrasal_stats`."""
        H = self.dims.heads
        return {"kind": "interleaved", "query_phrase": [False] * H + [True] * H, "key_phrase_per_head": None,
                "key_blocks": [1, 2]}

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        cache, key = ctx.cache, self.dims.cache_key
        B, T, D = query.shape
        prev = cache.get(key) if cache is not None else None
        q_tail = prev["q_tail"] if prev is not None and "q_tail" in prev else query.new_zeros(B, 1, D)
        q_ext = torch.cat([q_tail, query], dim=1)
        q_win = phrase_windows(q_ext, 2, T).flatten(2)  # (B, T, 2D): [q_{t-1}; q_t]
        kvs, valid, L = self.phrase_memory(memory, ctx)
        if cache is not None:
            cache.get(key)["q_tail"] = q_ext[:, -1:]
        allowed = torch.cat([ok[:, None, None, :].expand(B, 1, T, L) for ok in valid], dim=-1)
        if ctx.causal:
            allowed = allowed & _causal_allowed(T, L, ctx.query_offset, query.device).repeat(1, 2)
        if self.variant == "convkv":
            qu = split_heads(self.q_uni(query), self.dims.heads)
            qb = split_heads(self.q_bi[0](q_win), self.dims.heads)
            q1, q2 = [qu, qu], [qb, qb]
        else:
            q1 = [br.query(query) for br in self.branches]
            q2 = [self._heads(lin(q_win), n) for lin, n in zip(self.q_bi, (1, 2))]
        dropout_p = self.dims.dropout if self.training else 0.0
        a1, w1 = self._attend(q1, kvs, allowed, dropout_p)
        a2, w2 = self._attend(q2, kvs, allowed, dropout_p)
        u, b = merge_heads(a1), merge_heads(a2)  # (B, T, D)
        pos = torch.arange(T, device=query.device) + ctx.query_offset
        b_ok = (pos >= 1)[None, :].expand(B, T)  # the bigram query ending at t covers t-1..t
        if self.encoder and ctx.key_mask is not None:  # self-attention: queries are the keys
            b_ok = b_ok & ctx.key_mask & torch.cat([ctx.key_mask[:, :1], ctx.key_mask[:, :-1]], dim=1)
        b = b * b_ok[..., None].to(b.dtype)
        if self.encoder:
            b_next = torch.cat([b[:, 1:], b.new_zeros(B, 1, D)], dim=1)
            out = self.out_proj(torch.cat([b, u, b_next], dim=-1))  # eq. 15
        else:
            out = self.out_proj(torch.cat([b, u], dim=-1))  # eqs. 16-17
        weights = torch.cat([w1, w2], dim=1) if ctx.need_weights else None
        return AttentionOutput(output=out, weights=weights)
