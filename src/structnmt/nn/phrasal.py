"""Phrase-based attentions (Nguyen & Joty, "Phrase-Based Attentions"), §3.1-3.2.

Two ways to attend to n-grams (phrases) of keys and values, eqs. 5-6:

* **CONVKV** (eq. 5): ``S((Q W_q) Conv_n(K, W_k)^T / sqrt(d_k)) Conv_n(V, W_v)`` —
  phrase keys and values are an n-gram convolution over the input sequence
  (kernels ``W_k, W_v`` of shape (n, D, d)); the query meets them by a dot product.
* **QUERYK** (eq. 6): ``S(Conv_n(K W_k, Q W_q) / sqrt(d_k * n)) Conv_n(V, W_v)`` —
  the query, projected by n matrices ``W_{q,i}`` (i = 0..n-1), is the kernel of a
  convolution over the projected keys ``K W_k``: the logit of query t on the phrase
  ending at j is ``sum_i (q_t W_{q,i}) . (k_{j-n+1+i} W_k)``, i.e. a sum of n shifted
  ``(Q W_{q,i}) (K W_k)^T`` products (:func:`queryk_logits`), or one dot product of the
  stacked query ``[q W_{q,0}; ...; q W_{q,n-1}]`` (n*d) with the stacked key
  ``[k_{j-n+1}; ...; k_j]`` (n*d) — which is how the module computes it (SDPA, whose
  default scale 1/sqrt(n*d) is exactly the paper's).

Convolution semantics, everywhere (encoder, decoder, cross): the n-gram at position j
covers tokens ``j-n+1 .. j`` (it *ends* at j), so in the decoder a phrase is causal
(visible to query t iff j <= t) and a bigram at j covers j-1..j, never j..j+1. Inputs
before the sentence start are zeros (left zero-padding, in the space the convolution
reads: the raw inputs for ``Conv_n(K|V, W)``, the projected keys for QUERYK).

Multi-head structures (§3.2):

* ``phrasal_homogeneous`` (§3.2.1, Fig. 1): heads are distributed over n-gram types
  (``ngram_heads: [4, 4]`` = 4 unigram + 4 bigram heads; ``[3, 2, 3]`` adds trigrams).
  Each head attends to one type; keys/values are left zero-padded so every position keeps
  one phrase representation. A phrase is valid iff all its *real* tokens are valid
  (positions before 0 are padding zeros and count as valid). Weights (B, H, T, S).
* ``phrasal_heterogeneous`` (§3.2.2, Fig. 2, eqs. 7-8): every head attends jointly over
  all n-gram types (``ngrams: [1, 2]``, ``[1, 2, 3]``, ``[1, 2, 3, 4]``): logits of all
  types are concatenated before one softmax, values likewise. No padding: the phrase
  ending at j exists only for j >= n-1 (we compute the left-padded convolution and mask
  those positions, which is numerically the unpadded convolution) and is valid only if
  all its tokens are (key mask). Weights (B, H, T, N*S): block b (keys
  ``b*S .. b*S+S-1``) holds the phrases of length ``ngrams[b]``, indexed by end position.
  CONVKV (eq. 7) shares one query projection over types; QUERYK (eq. 8) has its own
  ``W_{q,n}`` (n matrices) and ``W_{k,n}`` per type, and scales type n by 1/sqrt(d*n).

Caching (decoder self-attention, ``ctx.cache`` entry under ``dims.cache_key``; every
tensor batch first, so :meth:`IncrementalCache.reorder` serves beam search):
``x_tail`` (B, N_max-1, D) the last N_max-1 inputs (the convolution inputs), and per
branch b: ``k{b}``/``v{b}`` (B, h_b, t, d_k) the phrase keys/values of all positions so
far (QUERYK: stacked keys (B, h_b, t, n*d)), and for QUERYK ``kt{b}`` (B, n-1, h_b*d)
the last n-1 projected keys. A step with new inputs ``x`` (B, T, D) builds the phrases
ending at the new positions from ``[tail; x]`` only — exactly what the full pass
computes. Cross-attention (role ``cross``) builds the source phrase keys/values once per
sentence (static entry) and reuses them.

The interleaved phrase-to-phrase model (§3.3, eqs. 9-17) is not built here (see
docs/phrasal.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from .attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    Mechanism,
    masked_softmax,
    merge_heads,
    register_attention,
    scaled_attention,
    split_heads,
)

VARIANTS = ("convkv", "queryk")


def _config_error(message: str) -> Exception:

    return ConfigError(message)


# --------------------------------------------------------------------------- helpers


def phrase_windows(x_ext: Tensor, n: int, new: int) -> Tensor:
    """Sliding n-token windows ending at the last ``new`` positions.

    x_ext (B, P + new, C) with P >= n-1 preceding rows (zeros before the sentence start)
    -> (B, new, n, C) where ``out[:, t, i]`` is the input at position ``t - n + 1 + i``
    (i = 0 is the oldest token of the phrase ending at t).
    """
    P = x_ext.shape[1] - new
    start = P - (n - 1)
    if start < 0:
        raise ValueError(f"phrase_windows needs {n - 1} preceding rows, got {P}.")
    return torch.stack([x_ext[:, start + i : start + i + new] for i in range(n)], dim=2)


def phrase_valid(mask: Tensor, n: int, before_start_valid: bool) -> Tensor:
    """mask (B, L) bool (True = real token) -> (B, L): the phrase ending at j (tokens
    j-n+1..j) is valid iff all its tokens are; positions before 0 count as
    ``before_start_valid`` (True: homogeneous left zero-padding; False: heterogeneous,
    where a phrase must fit in the sequence)."""
    B, L = mask.shape
    out = mask
    for i in range(1, n):
        pad = torch.full((B, min(i, L)), before_start_valid, dtype=torch.bool, device=mask.device)
        out = out & torch.cat([pad, mask[:, : max(L - i, 0)]], dim=1)
    return out


def queryk_logits(q: Tensor, k: Tensor) -> Tensor:
    """Unscaled QUERYK logits as a sum of n shifted matrix products (DESIGN.md).

    q (B, H, T, n, d): the n query projections ``Q W_{q,i}``; k (B, H, S, d): the
    projected keys ``K W_k`` of the whole sequence. Returns (B, H, T, S) with
    ``out[..., t, j] = sum_i q[..., t, i] . k[..., j-n+1+i]`` (keys before 0 are zeros),
    i.e. ``Conv_n(K W_k, Q W_q)`` of eq. 6 before the 1/sqrt(d*n) scale.
    """
    n = q.shape[-2]
    S = k.shape[-2]
    out = None
    for i in range(n):
        s = torch.matmul(q[..., i, :], k.transpose(-1, -2))  # (B, H, T, S): key index m
        shift = n - 1 - i  # the phrase ending at j uses key m = j - shift
        s = F.pad(s, (shift, 0))[..., :S]
        out = s if out is None else out + s
    return out


def _causal_allowed(T: int, L: int, offset: int, device) -> Tensor:
    """(T, L) bool: key (phrase end) j visible to query t iff j <= t + offset."""
    return torch.arange(L, device=device)[None, :] <= (torch.arange(T, device=device)[:, None] + offset)


# --------------------------------------------------------------------------- one n-gram type


class PhraseBranch(nn.Module):
    """Queries, phrase keys and phrase values of one n-gram type for ``heads`` heads.

    CONVKV: ``k_conv``/``v_conv`` are Conv_n kernels (n, D, heads*d) stored as
    ``nn.Linear(n*D, heads*d)`` over the flattened window (eq. 5); ``q_proj`` (D, heads*d)
    when the branch owns its query (homogeneous).
    QUERYK: ``q_proj`` (D, n*heads*d) holds ``W_{q,0..n-1}``; ``k_proj`` (D, heads*d) is
    ``W_k``; ``v_conv`` is the value convolution (eq. 6).
    """

    def __init__(self, *, variant: str, n: int, heads: int, head_dim: int, d_model: int, own_query: bool):
        super().__init__()
        self.variant, self.n, self.heads, self.head_dim = variant, n, heads, head_dim
        width = heads * head_dim
        self.v_conv = nn.Linear(n * d_model, width)
        if variant == "convkv":
            self.k_conv = nn.Linear(n * d_model, width)
            self.q_proj = nn.Linear(d_model, width) if own_query else None
        else:
            self.k_proj = nn.Linear(d_model, width)
            self.q_proj = nn.Linear(d_model, n * width)

    def query(self, query: Tensor) -> Tensor:
        """query (B, T, D) -> CONVKV (B, h, T, d); QUERYK stacked (B, h, T, n*d)."""
        if self.variant == "convkv":
            return split_heads(self.q_proj(query), self.heads)
        B, T, _ = query.shape
        q = self.q_proj(query).view(B, T, self.n, self.heads, self.head_dim)
        return q.permute(0, 3, 1, 2, 4).reshape(B, self.heads, T, self.n * self.head_dim)

    def keys_values(self, x_ext: Tensor, new: int, k_tail: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """Phrase keys/values ending at the last ``new`` positions of x_ext (B, P+new, D).

        Returns k (B, h, new, d) [QUERYK: (B, h, new, n*d)], v (B, h, new, d) and, for
        QUERYK with n > 1, the last n-1 projected keys (B, n-1, h*d) to cache.
        """
        n, h, d = self.n, self.heads, self.head_dim
        win = phrase_windows(x_ext, n, new).flatten(2)  # (B, new, n*D)
        v = split_heads(self.v_conv(win), h)
        if self.variant == "convkv":
            return split_heads(self.k_conv(win), h), v, None
        kp = self.k_proj(x_ext[:, x_ext.shape[1] - new :])  # (B, new, h*d)
        B = kp.shape[0]
        new_tail = None
        if n > 1:
            tail = k_tail if k_tail is not None else kp.new_zeros(B, n - 1, h * d)
            kp_ext = torch.cat([tail, kp], dim=1)
            stacked = phrase_windows(kp_ext, n, new)  # (B, new, n, h*d)
            new_tail = kp_ext[:, -(n - 1) :]
        else:
            stacked = kp[:, :, None]
        k = stacked.view(B, new, n, h, d).permute(0, 3, 1, 2, 4).reshape(B, h, new, n * d)
        return k, v, new_tail


# --------------------------------------------------------------------------- shared machinery


class _PhrasalAttention(Mechanism):
    """Branch bookkeeping, caching and validity shared by both structures."""

    homogeneous: bool

    def __init__(self, *, dims: AttentionDims, variant: str, branches: list[tuple[int, int]], own_query: bool):
        super().__init__()
        if dims.d_model % dims.heads:
            raise ValueError(f"d_model={dims.d_model} is not divisible by heads={dims.heads}.")
        self.dims = dims
        self.variant = variant
        self.head_dim = dims.d_model // dims.heads
        self.ngrams = [n for n, _ in branches]
        self.max_n = max(self.ngrams)
        self.branches = nn.ModuleList(
            PhraseBranch(variant=variant, n=n, heads=h, head_dim=self.head_dim, d_model=dims.d_model,
                         own_query=own_query)
            for n, h in branches
        )
        self.out_proj = nn.Linear(dims.d_model, dims.d_model)
        self.static_kv = dims.role == "cross"

    def memory_kv(self, memory: Tensor, ctx: AttentionContext) -> list[tuple[Tensor, Tensor]]:
        """Per branch: phrase keys and values over all positions so far, (B, h_b, L, .)."""
        cache, key = ctx.cache, self.dims.cache_key
        entry = cache.get(key) if cache is not None else None
        if self.static_kv and entry is not None:
            return [(entry[f"k{b}"], entry[f"v{b}"]) for b in range(len(self.branches))]
        incremental = cache is not None and not self.static_kv and entry is not None
        B, new, D = memory.shape
        P = self.max_n - 1
        if P:
            tail = entry["x_tail"] if incremental else memory.new_zeros(B, P, D)
            x_ext = torch.cat([tail, memory], dim=1)
        else:
            x_ext = memory
        store: dict[str, Tensor] = {}
        out = []
        for b, branch in enumerate(self.branches):
            k, v, kt = branch.keys_values(x_ext, new, entry.get(f"kt{b}") if incremental else None)
            if incremental:
                k = torch.cat([entry[f"k{b}"], k], dim=2)
                v = torch.cat([entry[f"v{b}"], v], dim=2)
            store[f"k{b}"], store[f"v{b}"] = k, v
            if kt is not None and not self.static_kv:
                store[f"kt{b}"] = kt
            out.append((k, v))
        if P and not self.static_kv:
            store["x_tail"] = x_ext[:, -P:]
        if cache is not None:
            cache.set(key, store)
        return out

    def phrase_memory(self, memory: Tensor, ctx: AttentionContext) -> tuple[list[tuple[Tensor, Tensor]],
                                                                              list[Tensor | None], int]:
        """:meth:`memory_kv` and :meth:`branch_valid` together: ``(kvs, valid, L)`` with L
        the number of phrase end positions (the key length of every branch)."""
        kvs = self.memory_kv(memory, ctx)
        B, L = kvs[0][0].shape[0], kvs[0][0].shape[2]
        return kvs, self.branch_valid(ctx, B, L, memory.device), L

    def branch_valid(self, ctx: AttentionContext, B: int, L: int, device) -> list[Tensor | None]:
        """Per branch (B, L) bool phrase validity, or None when every phrase is valid."""
        if ctx.key_mask is None and self.homogeneous:
            return [None] * len(self.branches)
        mask = ctx.key_mask if ctx.key_mask is not None else torch.ones(B, L, dtype=torch.bool, device=device)
        if mask.shape[1] != L:
            raise ValueError(f"key_mask covers {mask.shape[1]} positions but there are {L} keys.")
        return [phrase_valid(mask, n, before_start_valid=self.homogeneous) for n in self.ngrams]


def _check_variant(variant: str, where: str) -> None:
    if variant not in VARIANTS:
        raise _config_error(f"{where}: unknown variant '{variant}'; use one of {', '.join(VARIANTS)}.")


# --------------------------------------------------------------------------- §3.2.1


@register_attention("phrasal_homogeneous")
class HomogeneousPhrasalAttention(_PhrasalAttention):
    """Homogeneous n-gram attention (§3.2.1, Fig. 1) with CONVKV (eq. 5) or QUERYK (eq. 6).

    ``ngram_heads[n-1]`` heads attend to n-grams (zero allowed); their sum must be the
    model's head count. Empty: half unigram, half bigram heads (the paper's 4/4).
    query (B, T, D), memory (B, S, D) -> output (B, T, D), weights (B, H, T, S) where
    key j of a head is that head's phrase ending at j.
    """

    homogeneous = True

    @dataclass
    class Options:
        variant: str = "convkv"  # convkv (eq. 5) | queryk (eq. 6)
        ngram_heads: list[int] = field(default_factory=list)  # heads per n-gram length, n = 1, 2, ...

    def __init__(self, *, dims: AttentionDims, options: HomogeneousPhrasalAttention.Options | None = None):
        options = options if options is not None else HomogeneousPhrasalAttention.Options()
        where = f"model.attention ({dims.role}, {dims.cache_key}) phrasal_homogeneous options"
        _check_variant(options.variant, where)
        counts = list(options.ngram_heads)
        if not counts:
            if dims.heads % 2:
                raise _config_error(f"{where}: the default 1/2-gram split needs an even head count; set ngram_heads.")
            counts = [dims.heads // 2, dims.heads // 2]
        if any(c < 0 for c in counts) or sum(counts) != dims.heads:
            raise _config_error(
                f"{where}: ngram_heads {counts} must be non-negative and sum to model.heads={dims.heads}.")
        branches = [(i + 1, c) for i, c in enumerate(counts) if c > 0]
        super().__init__(dims=dims, variant=options.variant, branches=branches, own_query=True)
        self.options = options

    def quadrant_layout(self) -> dict:
        """Quadrant statistics (``structnmt analyze``): ``{"kind", "query_phrase" (H',) bool,
        "key_phrase_per_head" (H',) bool | None, "key_blocks" list[int] | None}``; see
        :mod:`structnmt.analysis.phrasal_stats`."""
        heads_n = [b.n for b in self.branches for _ in range(b.heads)]
        return {"kind": "homogeneous", "query_phrase": [False] * len(heads_n),
                "key_phrase_per_head": [n > 1 for n in heads_n], "key_blocks": None, "heads_n": heads_n}

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        kvs, valid, L = self.phrase_memory(memory, ctx)
        B, T = query.shape[:2]
        outs, weights = [], []
        for branch, (k, v), ok in zip(self.branches, kvs, valid):
            o, w = scaled_attention(
                branch.query(query), k, v,
                key_mask=ok, causal=ctx.causal, query_offset=ctx.query_offset,
                dropout_p=self.dims.dropout if self.training else 0.0,
                need_weights=ctx.need_weights,
            )  # scale 1/sqrt(d) (CONVKV) or 1/sqrt(n*d) (QUERYK: stacked head dim n*d)
            outs.append(o)
            weights.append(w)
        out = self.out_proj(merge_heads(torch.cat(outs, dim=1)))
        w = torch.cat(weights, dim=1) if ctx.need_weights else None
        extras = {"head_ngrams": [b.n for b in self.branches for _ in range(b.heads)]} if ctx.need_weights else {}
        return AttentionOutput(output=out, weights=w, extras=extras)


# --------------------------------------------------------------------------- §3.2.2


@register_attention("phrasal_heterogeneous")
class HeterogeneousPhrasalAttention(_PhrasalAttention):
    """Heterogeneous n-gram attention (§3.2.2, Fig. 2): CONVKV eq. 7, QUERYK eq. 8.

    Every head attends jointly over all n-gram types in ``ngrams`` (one softmax over the
    concatenated logits). query (B, T, D), memory (B, S, D) -> output (B, T, D), weights
    (B, H, T, N*S) (block b = phrases of length ``ngrams[b]`` by end position).
    With ``ngrams: [1]`` it is plain multi-head attention.
    """

    homogeneous = False

    @dataclass
    class Options:
        variant: str = "convkv"  # convkv (eq. 7) | queryk (eq. 8)
        ngrams: list[int] = field(default_factory=lambda: [1, 2])  # n-gram lengths attended jointly

    def __init__(self, *, dims: AttentionDims, options: HeterogeneousPhrasalAttention.Options | None = None):
        options = options if options is not None else HeterogeneousPhrasalAttention.Options()
        where = f"model.attention ({dims.role}, {dims.cache_key}) phrasal_heterogeneous options"
        _check_variant(options.variant, where)
        ngrams = list(options.ngrams)
        if not ngrams or any(n < 1 for n in ngrams) or len(set(ngrams)) != len(ngrams):
            raise _config_error(f"{where}: ngrams {ngrams} must be distinct lengths >= 1, e.g. [1, 2].")
        if 1 not in ngrams:  # without unigram keys, position 0 of a decoder and 1-token sentences have no key
            raise _config_error(f"{where}: ngrams {ngrams} must include 1 (unigram keys), or the first decoder "
                                f"position and sentences shorter than {min(ngrams)} tokens have no key at all; "
                                f"e.g. {sorted({1, *ngrams})}.")
        super().__init__(dims=dims, variant=options.variant, branches=[(n, dims.heads) for n in ngrams],
                         own_query=options.variant == "queryk")
        self.q_proj = nn.Linear(dims.d_model, dims.d_model) if options.variant == "convkv" else None
        self.options = options

    def quadrant_layout(self) -> dict:
        """Quadrant statistics (``structnmt analyze``): ``{"kind", "query_phrase" (H',) bool,
        "key_phrase_per_head" (H',) bool | None, "key_blocks" list[int] | None}``; see
        :mod:`structnmt.analysis.phrasal_stats`."""
        return {"kind": "heterogeneous", "query_phrase": [False] * self.dims.heads, "key_phrase_per_head": None,
                "key_blocks": list(self.ngrams)}

    def block_logits(self, branch: PhraseBranch, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """QUERYK logits of one n-gram type (eq. 8): q (B, H, T, n*d) the stacked query kernels, k (B, H, L,
        n*d) the stacked phrase keys -> (B, H, T, L), scaled by 1/sqrt(d*n). A subclass that adds a term to
        the logits (``queryk_rel_pos``) overrides it."""
        return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim * branch.n)

    def value_term(self, weights: Tensor, ctx: AttentionContext) -> Tensor | None:
        """Added to ``weights @ values`` (QUERYK): (B, H, T, d) from the weights after dropout (B, H, T, N*L).
        None here; ``queryk_rel_pos`` adds its relative value vectors."""
        return None

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        kvs, valid, L = self.phrase_memory(memory, ctx)
        B, T = query.shape[:2]
        allowed = torch.cat([ok[:, None, None, :].expand(B, 1, T, L) for ok in valid], dim=-1)  # (B, 1, T, N*L)
        if ctx.causal:
            cmask = _causal_allowed(T, L, ctx.query_offset, query.device).repeat(1, len(self.branches))
            allowed = allowed & cmask
        values = torch.cat([v for _, v in kvs], dim=2)  # (B, H, N*L, d)
        dropout_p = self.dims.dropout if self.training else 0.0
        if self.variant == "convkv":  # eq. 7: one query, concatenated phrase keys
            q = split_heads(self.q_proj(query), self.dims.heads)
            keys = torch.cat([k for k, _ in kvs], dim=2)
            out, weights = scaled_attention(q, keys, values, mask=allowed, dropout_p=dropout_p,
                                            need_weights=ctx.need_weights)
        else:  # eq. 8: per-type query kernels, per-type scale 1/sqrt(d*n)
            logits = torch.cat([self.block_logits(br, br.query(query), k, ctx)
                                for br, (k, _) in zip(self.branches, kvs)], dim=-1)
            w = masked_softmax(logits, allowed).to(values.dtype)
            dropped = F.dropout(w, p=dropout_p, training=dropout_p > 0)
            out = torch.matmul(dropped, values)
            extra = self.value_term(dropped, ctx)
            if extra is not None:
                out = out + extra
            weights = w if ctx.need_weights else None
        extras = {"key_blocks": list(self.ngrams)} if ctx.need_weights else {}
        return AttentionOutput(output=self.out_proj(merge_heads(out)), weights=weights, extras=extras)
