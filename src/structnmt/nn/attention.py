"""The attention contract shared by every mechanism, and plain multi-head attention.

Mask polarity, everywhere in structnmt: **boolean ``True`` = may attend** (as in
``torch.nn.functional.scaled_dot_product_attention``). Tensors are batch first.

The contract
------------
Every mechanism is an ``nn.Module`` registered under a name in
:data:`ATTENTION_REGISTRY` and called as::

    out: AttentionOutput = attn(query, memory, ctx)

* ``query``  (B, T, D) — the positions that attend;
* ``memory`` (B, S, D) — what is attended to (``memory is query`` for self-attention);
* ``ctx``    :class:`AttentionContext` — the key mask, causality, the batch's structure
  tensors, the incremental-decoding cache and whether weights are wanted.

It returns :class:`AttentionOutput`: ``output`` (B, T, D), optional ``weights``
(B, H, T, S'), a dict of auxiliary losses (added to the training loss by the trainer
with their own weights already applied) and a dict of ``extras`` for analysis. A module
stores nothing as a side effect of ``forward``; what a caller wants back is in the
output.

Layers get their attention from :func:`build_attention`, which reads an
:class:`~structnmt.config.AttentionSpec` (name + options) per layer and role. Models
never test which mechanism they hold.

How the five papers fit without changing the model
---------------------------------------------------
* **MG-SA phrase memories** — a mechanism computes its own keys/values from
  ``memory`` and the partition tensors in ``ctx.structures`` (e.g. ``"ngram_ids"``,
  ``"syntax_ids"``), one phrase memory per head group, each with its own length and
  key mask; the tag-supervision loss returns in ``aux_losses``. Queries stay words, so
  the output is (B, T, D) like any attention.
* **Phrase-based attentions (CONVKV, QUERYK)** — convolutions over keys, values or
  queries live inside the mechanism. In decoder self- and cross-attention the
  mechanism keeps what it needs in its own cache entry (``ctx.cache``, keyed by its
  ``cache_key``): the last n-1 projected inputs and the phrase keys/values built so
  far; the source phrase keys of cross-attention are built once (``static`` entry).
  :meth:`IncrementalCache.reorder` reorders every tensor with the beam, so mechanisms
  only have to keep the batch dimension first.
* **Per-sentence additive biases and masks (DEA, LPEA, relative positions,
  localness)** — either read from ``ctx.structures`` (dependency masks, local-phrase
  positions, built by the collator) or computed from the queries (localness); they go
  through :func:`scaled_attention` as ``bias`` (added to the logits) and ``mask``.
  A bias without gradient uses the SDPA fast path as a float mask; a learned bias
  takes the explicit path.
* **PhraseTransformer hypernodes** — nodes that travel through the encoder's layers. A
  mechanism declares them with ``hypernodes() -> HypernodeSpec`` (the structure key of
  their membership, their initial state, what the decoder sees); the encoder stack
  appends the N hypernodes (zero states, Algorithm 1) to the S tokens **before** the
  first such layer, so every later layer — attention, residual, norm, feed-forward —
  runs over S + N nodes, with ``key_mask`` (B, S + N). The adjacency over the S + N nodes
  (eq. 6) travels in ``ctx.structures`` like any structure (neighbour lists built by the
  collator). A mechanism with ``has_second_phase = True`` gets a second residual
  sublayer in its layer, run through its ``second_phase(x, ctx)`` (the within-phrase
  attention). The decoder sees the first S nodes, or all of them.
* **SA-NMT (RNN family)** — the model family is chosen by ``model.family``; the RNN
  translator implements the same decoding protocol (``encode`` / ``decode_step`` /
  ``EncoderOutput.reorder``) so beam search, training and evaluation are shared;
  its structured (matrix-tree) attention is a mechanism with this same call signature
  whose ``extras`` carry the arc marginals used for tree extraction.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, build_dataclass
from ..plugins import load_plugins

# --------------------------------------------------------------------------- contract types


class IncrementalCache:
    """Per-sentence decoding state of every attention module, keyed by ``cache_key``.

    Each entry is a dict of tensors whose first dimension is the batch (times beam).
    :meth:`reorder` applies a beam permutation to all of them.

    ``beam > 1``: beam search keeps the hypotheses of a sentence in ``beam`` consecutive
    rows and reads a sentence-level encoder output (``AttentionContext.memory_group``).
    Entries set with ``per_sentence=True`` (the source keys and values of plain
    cross-attention) then hold one row per sentence, shared by its hypotheses: a beam
    permutation leaves them alone, and only the sentences that leave the batch are
    dropped from them.
    """

    def __init__(self, beam: int = 1) -> None:
        self.beam = beam
        self.entries: dict[str, dict[str, Tensor]] = {}
        self.per_sentence: set[str] = set()
        # beam permutations not yet applied to an entry (composed); applied when the entry is
        # read (get) or, fused with the copy that grows it, when it is extended (extend)
        self.pending: dict[str, Tensor] = {}

    def get(self, key: str) -> dict[str, Tensor] | None:
        index = self.pending.pop(key, None)
        if index is not None:
            self.entries[key] = {name: t.index_select(0, index) for name, t in self.entries[key].items()}
        return self.entries.get(key)

    def set(self, key: str, value: dict[str, Tensor], *, per_sentence: bool = False) -> None:
        if per_sentence and self.beam == 1:
            raise ValueError("per-sentence cache entries need IncrementalCache(beam=K) with K > 1.")
        self.entries[key] = value
        self.pending.pop(key, None)
        if per_sentence:
            self.per_sentence.add(key)

    def extend(self, key: str, new: dict[str, Tensor], dim: int) -> dict[str, Tensor]:
        """The entry's tensors with ``new``'s concatenated along ``dim`` (the entry is set to that).

        Equal to ``torch.cat([get(key)[name], new[name]], dim)``, but a pending beam
        permutation is applied in the same copy (one copy of the history per step instead
        of two). Without an entry, ``new`` becomes the entry.
        """
        prev = self.entries.get(key)
        index = self.pending.pop(key, None)
        if prev is None:
            self.entries[key] = dict(new)
            return self.entries[key]
        out: dict[str, Tensor] = {}
        for name, t_new in new.items():
            old = prev[name]
            T = old.shape[dim]
            shape = list(old.shape)
            shape[dim] = T + t_new.shape[dim]
            if index is not None:
                shape[0] = index.numel()
            buf = old.new_empty(shape)
            if index is None:
                buf.narrow(dim, 0, T).copy_(old)
            else:
                torch.index_select(old, 0, index, out=buf.narrow(dim, 0, T))
            buf.narrow(dim, T, t_new.shape[dim]).copy_(t_new)
            out[name] = buf
        self.entries[key] = out
        return out

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Select/permute the batch dimension of every cached tensor: ``t[index]``.

        With ``beam > 1`` the new rows must come in groups of ``beam`` that each take
        their rows from one old sentence (as beam search's do); per-sentence entries
        follow the sentences, and are left untouched while no sentence leaves. Other
        entries are reordered lazily (:meth:`get`, :meth:`extend`). ``sentences``: the
        old sentences that stay, in order (None: every sentence stays when there are
        ``beam`` new rows per per-sentence row, otherwise read from ``index``, which then
        must hold ``beam`` old rows per sentence too).
        """
        for key, entry in self.entries.items():
            if key in self.per_sentence:
                for name, t in entry.items():
                    if sentences is None and index.numel() == t.shape[0] * self.beam:
                        continue  # every sentence stays, in order: beam moves happen inside a sentence
                    if sentences is None:
                        sentences = torch.div(index.view(-1, self.beam)[:, 0], self.beam, rounding_mode="floor")
                    entry[name] = t.index_select(0, sentences)
            else:
                prev = self.pending.get(key)
                self.pending[key] = index if prev is None else prev.index_select(0, index)


@dataclass
class AttentionContext:
    """What an attention call needs besides the query and memory.

    key_mask:     (B, S) bool, True = key may be attended; None = all keys valid.
    causal:       query t may only see keys <= t + query_offset.
    structures:   the batch's structure tensors by name (built by the collator).
    cache:        incremental-decoding cache, or None during training / full passes.
    need_weights: return attention weights (forces the explicit path).
    query_offset: absolute position of the first query (incremental decoding): an int, or in fixed-shape
                  decoding (``decode.cuda_graphs``) a 0-dim device tensor, with ``causal`` off and the
                  keys after it masked by ``key_mask`` (see ``Mechanism.decodes_in_fixed_shapes``).
    memory_group: query rows per memory row (cross-attention in beam search): the
                  memory holds one row per sentence and the queries ``memory_group``
                  consecutive rows (its hypotheses) per sentence. Only mechanisms whose
                  class sets ``groups_memory = True`` receive a value above 1.
    """

    key_mask: Tensor | None = None
    causal: bool = False
    structures: Mapping[str, Tensor] = field(default_factory=dict)
    cache: IncrementalCache | None = None
    need_weights: bool = False
    query_offset: int | Tensor = 0
    memory_group: int = 1


@dataclass
class AttentionOutput:
    output: Tensor  # (B, T, D)
    weights: Tensor | None = None  # (B, H, T, S')
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- registry

class Mechanism(nn.Module):
    """The protocol of an attention mechanism: the call, and every optional hook with its default.

    A mechanism is called as ``attn(query, memory, ctx) -> AttentionOutput`` (see the module
    docstring). Everything else a model, the collator, the trainer or an analysis may ask
    of it is one of the hooks below; a mechanism overrides the ones it needs and inherits
    the defaults of the others. Nothing outside ``structnmt.nn`` tests which class a
    mechanism is: it asks these hooks.

    What the batch must hold
        :meth:`required_structures` -- ``{key: StructureSpec}``: the structure tensors the
        collator builds for it (``ctx.structures[key]``); the features are those of
        :data:`structnmt.syntax.features.FEATURES`. Default: none. The model gathers them
        from all its mechanisms with :func:`collect_structures`.
    How the encoder stack runs it
        :meth:`hypernodes` -- a :class:`~structnmt.nn.phrase_transformer.HypernodeSpec`:
        nodes appended to the tokens before this layer (PhraseTransformer). Default: None.
        :attr:`has_second_phase` and :meth:`second_phase` -- a second residual sublayer in
        the encoder layer, run through ``second_phase(x, ctx)``. Default: False.
        :attr:`attends_hypernodes` -- may sit in a layer after the hypernodes entered, and
        attend over tokens and hypernodes alike. Default: False (plain MHA and the
        PhraseTransformer only).
    Beam search
        :attr:`groups_memory` -- can read one memory row per sentence for ``memory_group``
        hypotheses (cross-attention). Default: False (plain MHA only).
        :attr:`decodes_in_fixed_shapes` -- decodes with a :class:`~structnmt.decode.cuda_graphs.StaticCache`
        (``decode.cuda_graphs``): keys and values written in place at ``ctx.query_offset``, then a 0-dim device
        tensor that the mechanism reads in tensor arithmetic only (never ``int()``, ``if``, or a slice), with
        the keys after it masked by ``ctx.key_mask``. Default: False (plain MHA and Rel_Pos).
    What analysis reads
        :meth:`memory_groups` -- the head groups whose weights are over their own phrase
        memories (MG-SA; the weights come back in ``extras["group_weights"]``). Default: None.
        :meth:`quadrant_layout` -- how token and phrase queries and keys sit in ``weights``
        (phrase-based attentions; ``structnmt analyze``'s quadrant statistics). Default: None.
        :attr:`tree_heads` -- heads whose ``extras["arcs"]`` / ``extras["arc_scores"]``
        (B, H', S, S) are matrix-tree marginals and scores (``structnmt induce``). Default: 0.
        :meth:`head_labels` -- a label per head for pictures. Default: None.

    Register a mechanism with :func:`register_attention`; a mechanism's options are a
    dataclass set as its ``Options`` attribute (built and checked from the config).
    """

    #: reads a sentence-level memory for ``memory_group`` hypotheses per sentence (beam search)
    groups_memory: bool = False
    #: decodes with a fixed-shape cache and a device-tensor position (``decode.cuda_graphs``)
    decodes_in_fixed_shapes: bool = False
    #: the encoder layer gives this mechanism a second residual sublayer (:meth:`second_phase`)
    has_second_phase: bool = False
    #: attends over the S + N nodes of a stack whose hypernodes entered at an earlier layer
    attends_hypernodes: bool = False
    #: heads whose extras carry matrix-tree arcs (``"arcs"``, ``"arc_scores"``) for tree induction
    tree_heads: int = 0

    def required_structures(self) -> dict[str, Any]:
        """``{key: StructureSpec}`` the collator must build for this mechanism; none by default."""
        return {}

    def hypernodes(self) -> Any:
        """The hypernodes this layer adds to the tokens (a ``HypernodeSpec``), or None."""
        return None

    def second_phase(self, x: Tensor, ctx: AttentionContext) -> AttentionOutput:
        """The second sublayer's attention, for a mechanism with :attr:`has_second_phase`."""
        raise NotImplementedError(f"{type(self).__name__} has no second phase.")

    def memory_groups(self) -> list[Any] | None:
        """Head groups attending over their own memories (``kind``, ``heads``, ``n``, ``level``), or None."""
        return None

    def quadrant_layout(self) -> dict | None:
        """How to read the weights by token/phrase queries and keys (phrase-based attentions), or None."""
        return None

    def head_labels(self) -> list[str] | None:
        """A short label per head for pictures (MG-SA: its granularity), or None."""
        return None


def collect_structures(model: nn.Module) -> dict[str, Any]:
    """The structures every mechanism inside ``model`` requires, merged: ``{key: StructureSpec}``.

    Two mechanisms asking for one key with different specs is a configuration error (the
    batch can hold one tensor per key), refused here for the Transformer, the tagger and
    the prober alike."""
    out: dict[str, Any] = {}
    for module in model.modules():
        if not isinstance(module, Mechanism):
            continue
        for key, spec in module.required_structures().items():
            if key in out and out[key] != spec:
                raise ConfigError(f"structure '{key}' is requested with two different specs ({out[key]} and "
                                  f"{spec}); give the mechanisms that share it the same options.")
            out[key] = spec
    return out


ATTENTION_REGISTRY: dict[str, type[Mechanism]] = {}


class UnknownMechanismError(ConfigError):
    """A config names a mechanism that no module (of the package or a plugin) registered."""


def register_attention(name: str) -> Callable[[type[Mechanism]], type[Mechanism]]:
    """Class decorator adding a mechanism (a :class:`Mechanism` subclass) to :data:`ATTENTION_REGISTRY`
    under ``name``, the name configs use (``model.attention``). A name registered twice is refused."""

    def deco(cls: type[Mechanism]) -> type[Mechanism]:
        if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
            raise TypeError(f"attention '{name}': {cls!r} is not a subclass of structnmt.nn.attention.Mechanism; "
                            "derive the mechanism from Mechanism (or MultiHeadAttention).")
        if name in ATTENTION_REGISTRY:
            raise ValueError(f"attention '{name}' is registered twice ({ATTENTION_REGISTRY[name]} and {cls}).")
        ATTENTION_REGISTRY[name] = cls
        return cls

    return deco


@dataclass
class AttentionDims:
    """What the model tells every mechanism it builds."""

    d_model: int
    heads: int
    dropout: float  # attention-weight dropout
    role: str  # encoder_self | decoder_self | cross
    cache_key: str  # unique per module, names its IncrementalCache entry


def build_attention(name: str, options: Mapping[str, Any], dims: AttentionDims) -> Mechanism:
    """Instantiate mechanism ``name`` with its typed options (unknown options rejected)."""

    if name not in ATTENTION_REGISTRY:

        load_plugins()  # a plugin (--user-dir, an entry point) not imported in this process yet
    if name not in ATTENTION_REGISTRY:

        close = difflib.get_close_matches(name, list(ATTENTION_REGISTRY), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(sorted(ATTENTION_REGISTRY))}"
        raise UnknownMechanismError(f"model.attention ({dims.role}): unknown mechanism '{name}'; {hint} (a "
                                    "mechanism of your own: load its file with --user-dir DIR)")
    cls = ATTENTION_REGISTRY[name]
    opts_cls = getattr(cls, "Options", None)
    if opts_cls is None:
        if options:
            raise ConfigError(f"model.attention ({dims.role}): mechanism '{name}' takes no options.")
        return cls(dims=dims)
    opts = build_dataclass(opts_cls, dict(options), f"model.attention.{dims.role}.options")
    return cls(dims=dims, options=opts)


# --------------------------------------------------------------------------- the core op


def masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax over the last axis of ``scores`` (..., S) restricted to ``allowed`` keys.

    ``allowed`` is a bool mask broadcastable to ``scores`` (True = may attend). A row with
    no allowed key at all (a padded query under a structural mask, a decoder position
    with no valid phrase) gets all-zero weights instead of the NaN of a softmax over
    only ``-inf``, and no NaN reaches the gradient. Computed in float32 for float32, float16 and
    bfloat16 scores (half precision is upcast), in float64 for float64 scores (so that a float64
    reference test can be exact); the caller casts.
    """
    scores = scores if scores.dtype == torch.float64 else scores.float()
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    live = allowed.any(dim=-1, keepdim=True)  # (..., 1): the row has a key
    scores = scores.masked_fill(~(allowed | ~live), float("-inf"))  # dead rows stay finite here
    return torch.softmax(scores, dim=-1).masked_fill(~live, 0.0)


def bias_allows(bias: Tensor, allowed: Tensor | None) -> Tensor:
    """``allowed`` (or all keys) without the keys a bias of −inf rules out: a −inf in a :meth:`logit_bias` is a
    mask, and a row it leaves without a key gets zero weights and output on every path, never NaN. A NaN in a
    bias is a bug, not a mask: it stays, and reaches the output (where ``structnmt.testing`` finds it)."""
    finite = bias != float("-inf")
    return finite if allowed is None else allowed & finite


#: at most this many queries per row take the explicit path without gradients on the CPU (see below)
_FEW_QUERIES = 8


def scaled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_mask: Tensor | None = None,
    causal: bool = False,
    query_offset: int = 0,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    return_dropped: bool = False,
    reweight: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Any]:
    """softmax(q k^T * scale + bias) v with masks; returns (out, weights or None).

    q (B, H, T, d), k (B, H, S, d), v (B, H, S, dv);
    key_mask (B, S) bool; mask broadcastable to (B, H, T, S) bool; bias broadcastable
    to (B, H, T, S) float. All masks: True = may attend.

    Fast path: ``F.scaled_dot_product_attention`` (causal without other masks uses its
    ``is_causal`` kernel). The explicit matmul-softmax path runs when weights are
    requested or the bias requires grad, and, without weights, for at most
    ``_FEW_QUERIES`` queries per row on the CPU with gradients off (decoding steps), where
    it is faster than SDPA's kernel; its scores and softmax are then float32 whatever ``q``'s
    dtype. A query row with no allowed key gets a zero
    output and zero weights on every path (see :func:`masked_softmax`).
    ``return_dropped=True`` (explicit path) returns ``(weights, dropped weights)`` as the
    second element, for mechanisms that also read the weights that met the values.
    ``reweight``: a function of the weights (B, H, T, S) after the softmax, in ``q``'s dtype, returning
    the weights of the same shape that meet the dropout and the values (and are returned); it is applied
    on the explicit and the few-queries paths, and turns the SDPA path off
    (:meth:`MultiHeadAttention.reweight`).
    """
    T, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    allowed: Tensor | None = None
    if key_mask is not None:
        allowed = key_mask[:, None, None, :]
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if causal and T == 1 and query_offset == S - 1:
        causal = False  # one new query over all earlier keys and itself (incremental decoding): no mask
    use_is_causal = causal and allowed is None and bias is None and T == S and query_offset == 0
    if causal and not use_is_causal:
        pos_q = torch.arange(T, device=q.device)[:, None] + query_offset
        cmask = torch.arange(S, device=q.device)[None, :] <= pos_q
        allowed = cmask if allowed is None else allowed & cmask
    explicit = need_weights or return_dropped or (bias is not None and bias.requires_grad)
    if (not explicit and T <= _FEW_QUERIES and dropout_p == 0.0 and q.device.type == "cpu"
            and not torch.is_grad_enabled()):
        return _few_queries(q, k, v, scale, bias, _causal(T, S, q.device) if use_is_causal else allowed,
                            reweight), None
    if not explicit and reweight is None:
        return _sdpa(q, k, v, scale, bias, allowed, dropout_p, use_is_causal), None
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if bias is not None:
        allowed = bias_allows(bias, allowed)  # (a bias turns SDPA's is_causal kernel off: allowed holds causality)
        scores = scores + bias.masked_fill(~allowed, 0.0)  # the −inf keys are masked: no −inf reaches the softmax
    weights = masked_softmax(scores, _causal(T, S, q.device) if use_is_causal else allowed).to(q.dtype)
    if reweight is not None:
        weights = reweight(weights)
    dropped = F.dropout(weights, p=dropout_p, training=dropout_p > 0)
    return torch.matmul(dropped, v), ((weights, dropped) if return_dropped else weights)


def _causal(T: int, S: int, device: torch.device) -> Tensor:
    """(T, S) bool: query i may attend keys 0..i (what SDPA's ``is_causal`` means, for the other paths)."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


def _few_queries(q: Tensor, k: Tensor, v: Tensor, scale: float, bias: Tensor | None,
                 allowed: Tensor | None, reweight: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """:func:`scaled_attention`'s path for decoding on the CPU (one new step per hypothesis, or a sentence's
    hypotheses over its source): two batched matmuls beat SDPA's blocked kernel for so few queries
    (benchmarks/README.md). Scores in float32 for float32 and half-precision q (a bfloat16 model's logits
    rounded to bfloat16 would be ~10x less exact than SDPA's, which accumulates them in float32), in float64
    for float64 q; for float32 and float64 the casts are no-ops. ``reweight`` gets the weights in q's dtype."""
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    scores = torch.matmul(q.to(wide) * scale, k.to(wide).transpose(-1, -2))
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, allowed)
    if bias is not None:  # a bias of -inf on every allowed key: zeros, as SDPA gives, not NaN
        weights = weights.nan_to_num(nan=0.0)
    if reweight is not None:
        weights = reweight(weights.to(q.dtype))
    return torch.matmul(weights.to(v.dtype), v)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, scale: float, bias: Tensor | None, allowed: Tensor | None,
          dropout_p: float, is_causal: bool) -> Tensor:
    """:func:`scaled_attention`'s fast path, ``F.scaled_dot_product_attention``: a query with no allowed
    key gets a zero output (not NaN) on every torch."""
    live = None
    if bias is not None:  # a −inf in the bias masks its key (bias_allows); the row-wise rules below then hold
        allowed = bias_allows(bias, allowed)
        bias = bias.masked_fill(~allowed, 0.0)
    if allowed is not None:
        live = allowed.any(dim=-1, keepdim=True)
        allowed = allowed | ~live
    attn_mask: Tensor | None = allowed
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if allowed is not None:
            attn_mask = attn_mask.masked_fill(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                         scale=scale)
    return out if live is None else out.masked_fill(~live, 0.0)


# --------------------------------------------------------------------------- plain MHA


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, H*d) -> (B, H, T, d)"""
    B, T, D = x.shape
    return x.view(B, T, heads, D // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, d) -> (B, T, H*d)"""
    B, H, T, d = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d)


@register_attention("mha")
class MultiHeadAttention(Mechanism):
    """Scaled dot-product multi-head attention (Vaswani et al. 2017, eqs. 1-2).

    The reference mechanism. In decoder self-attention the cache entry holds the
    projected keys and values of all previous steps, ``k, v`` (B, H, t, d); in
    cross-attention it holds the source keys and values, computed once per sentence.
    Subclasses that only change the logits override :meth:`logit_bias` (added to them; a −inf there masks
    its key) or :meth:`logit_mask` (which keys a query may see); those that change the weights after the
    softmax override :meth:`reweight`; those that add to the values, :meth:`value_term`. The order on every
    path: q, k, v projections (``q_proj``, ``kv_proj``), logits ``q k^T / sqrt(d) + logit_bias`` under the
    key mask, causality and ``logit_mask``, :func:`masked_softmax`, :meth:`reweight`, dropout
    (``dims.dropout``, training only), ``@ v`` plus :meth:`value_term`, ``merge_heads``, ``out_proj``.
    """

    def __init__(self, *, dims: AttentionDims):
        super().__init__()
        if dims.d_model % dims.heads:
            raise ValueError(f"d_model={dims.d_model} is not divisible by heads={dims.heads}.")
        self.dims = dims
        self.heads = dims.heads
        self.q_proj = nn.Linear(dims.d_model, dims.d_model)
        self.kv_proj = nn.Linear(dims.d_model, 2 * dims.d_model)
        self.out_proj = nn.Linear(dims.d_model, dims.d_model)
        self.static_kv = dims.role == "cross"

    def xavier_init(self) -> None:
        """fairseq's initialisation of the projections (``MultiheadAttention.reset_parameters``):
        Glorot-uniform W_Q, W_K, W_V with gain 1/sqrt(2) (each its own d x d matrix, here W_K and
        W_V are the two halves of ``kv_proj``), Glorot-uniform W_O and a zero output bias; the input
        biases keep nn.Linear's. ``model.attention_init=xavier``; the default is nn.Linear's."""
        gain = 2 ** -0.5
        nn.init.xavier_uniform_(self.q_proj.weight, gain=gain)
        with torch.no_grad():
            for half in self.kv_proj.weight.chunk(2, dim=0):
                half.copy_(nn.init.xavier_uniform_(torch.empty_like(half), gain=gain))
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def project_kv(self, memory: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """Keys and values (B, H, S, d), using and updating the cache when decoding."""
        cache = ctx.cache
        key = self.dims.cache_key
        if cache is not None and self.static_kv and cache.get(key) is not None:
            entry = cache.get(key)
            return entry["k"], entry["v"]
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        k, v = split_heads(k, self.heads), split_heads(v, self.heads)
        if cache is not None:
            if self.static_kv:
                # contiguous once: every later step's matmuls read them, and the (B, H, S, d) views of the
                # projection would be copied by each of those matmuls (profile of a CPU beam search:
                # benchmarks/README.md, decoding on the Intel Xeon, 2026-11-25)
                k, v = k.contiguous(), v.contiguous()
                # a beam cache's memory is one row per sentence (beam search's first step reads it with
                # memory_group 1, one row per sentence, the later ones with memory_group = beam)
                cache.set(key, {"k": k, "v": v}, per_sentence=cache.beam > 1)
            else:
                entry = cache.extend(key, {"k": k, "v": v}, dim=2)  # the beam's reorder fused into the copy
                k, v = entry["k"], entry["v"]
        return k, v

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor | None:
        """Additive logits (B or 1, H or 1, T, S) for subclasses; plain MHA has none."""
        return None

    def logit_mask(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor | None:
        """Which keys each query may see, for subclasses that restrict attention: bool (B or 1, H or 1, T, S),
        True = may attend, combined with the key mask and causality (``scaled_attention``'s ``mask``). A query
        row left without a key gets zero weights and a zero output, on every path. Plain MHA has none.
        ``query`` (B, T, D) is the layer's input, ``q`` (B, H, T, d) and ``k`` (B, H, S, d) its projections."""
        return None

    def value_term(self, weights: Tensor, ctx: AttentionContext) -> Tensor | None:
        """Added to ``weights @ v``: (B, H, T, d) computed from the weights (B, H, T, S).

        Subclasses that change the values as well as the logits (relative positions,
        Shaw et al. 2018 eq. 3) override it and set ``uses_value_term = True``, which
        makes :meth:`forward` take the explicit path. Plain MHA has none.
        """
        return None

    uses_value_term: bool = False

    def reweight(self, weights: Tensor, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """The attention weights after the softmax, changed before the dropout and the values.

        ``weights`` (B, H, T, S) in ``q``'s dtype: each row sums to 1 over the keys the query may see, and is
        exactly 0 on masked keys (padding, later positions under causality, :meth:`logit_mask`, a −inf of
        :meth:`logit_bias`) and on a row without any key. Returns a tensor of the same shape and dtype, which
        meets the dropout and the values, is given to :meth:`value_term` and comes back as
        ``AttentionOutput.weights``; it must keep every masked key at 0 and hold no NaN (it need not sum to
        1). ``query`` (B, T, D) is the layer's input, ``q`` (B, H, T, d) and ``k`` (B, H, S, d) its
        projections, ``ctx`` the call's context (``ctx.query_offset``: the absolute position of query 0 in
        incremental decoding). Plain MHA returns ``weights`` unchanged and never calls it: a subclass that
        overrides it gets :attr:`uses_reweight` set, which makes :meth:`forward` take a path that applies it
        (the explicit path, or the few-queries path of CPU decoding; never SDPA's kernel), in training,
        with or without weights, with :meth:`value_term`, step by step with the cache, and in beam search's
        grouped cross-attention (for a subclass that sets ``groups_memory = True``).
        """
        return weights

    #: set on a subclass that overrides :meth:`reweight` (by ``__init_subclass__``); plain MHA: False
    uses_reweight: bool = False

    #: reads a sentence-level memory for ``memory_group`` hypotheses per sentence (beam search):
    #: true for plain MHA only; a subclass (which changes logits or values) must opt in itself.
    groups_memory: bool = True

    #: plain MHA attends over hypernodes like over tokens; a subclass must opt in itself
    attends_hypernodes: bool = True

    #: plain MHA's cache is keys and values only; a subclass (which may read the position on the host) must opt in
    decodes_in_fixed_shapes: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for flag in ("groups_memory", "attends_hypernodes", "decodes_in_fixed_shapes"):
            if flag not in cls.__dict__:
                setattr(cls, flag, False)
        cls.uses_reweight = cls.reweight is not MultiHeadAttention.reweight

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        q = split_heads(self.q_proj(query), self.heads)
        k, v = self.project_kv(memory, ctx)
        g = ctx.memory_group
        if g > 1:
            return self._grouped_forward(query, q, k, v, ctx)
        return self._attention_with_hooks(query, q, k, v, ctx)

    def _attention_with_hooks(self, query: Tensor, q: Tensor, k: Tensor, v: Tensor,
                              ctx: AttentionContext) -> AttentionOutput:
        """The attention of q (B, H, T, d) over k, v (B, H, S, d) with the hooks, out_proj applied."""
        out, weights = scaled_attention(
            q,
            k,
            v,
            key_mask=ctx.key_mask,
            causal=ctx.causal,
            query_offset=ctx.query_offset,
            mask=self.logit_mask(query, q, k, ctx),
            bias=self.logit_bias(query, q, k, ctx),
            dropout_p=self.dims.dropout if self.training else 0.0,
            need_weights=ctx.need_weights or self.uses_value_term,
            return_dropped=self.uses_value_term,
            reweight=self._reweight_hook(query, q, k, ctx) if self.uses_reweight else None,
        )
        if self.uses_value_term:
            weights, dropped = weights
            out = out + self.value_term(dropped, ctx)
        return AttentionOutput(output=self.out_proj(merge_heads(out)),
                               weights=weights if ctx.need_weights else None)

    def _reweight_hook(self, query: Tensor, q: Tensor, k: Tensor,
                       ctx: AttentionContext) -> Callable[[Tensor], Tensor]:
        """:meth:`reweight` as ``scaled_attention`` calls it (weights -> weights), its result's shape and dtype
        checked."""

        def hook(weights: Tensor) -> Tensor:
            out = self.reweight(weights, query, q, k, ctx)
            if not isinstance(out, Tensor) or out.shape != weights.shape or out.dtype != weights.dtype:
                got = (f"a {out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, Tensor)
                       else type(out).__name__)
                raise ValueError(f"{type(self).__name__}.reweight returned {got} for {weights.dtype} weights of "
                                 f"shape {tuple(weights.shape)}; return the weights' shape (B, H, T, S) and dtype.")
            return out

        return hook

    def _grouped_forward(self, query: Tensor, q: Tensor, k: Tensor, v: Tensor,
                         ctx: AttentionContext) -> AttentionOutput:
        """Cross-attention of ``g`` hypotheses per sentence over the sentence's one memory row.

        q (n*g, H, T, d), k/v (n, H, S, d), ctx.key_mask (n, S): the g hypotheses' queries of
        a sentence become g*T query positions of one row, so the source keys and values are
        neither copied per hypothesis nor reordered with the beam. Every query row is the
        same computation as with a memory copied g times. A subclass with :meth:`reweight` (and
        ``groups_memory = True``) gets the memory copied g times, so that its hook sees the
        (n*g, H, T, S) weights, keys and structures of one row per hypothesis, as on every other path.
        """
        if not self.groups_memory or ctx.causal or not self.static_kv:
            raise ValueError(f"{type(self).__name__} ({self.dims.role}) cannot read a memory shared by "
                             f"{ctx.memory_group} query rows.")
        g = ctx.memory_group
        N, H, T, d = q.shape
        n = N // g
        if n * g != N or k.shape[0] != n:
            raise ValueError(f"memory_group={g}: {N} query rows do not make groups over {k.shape[0]} memory rows.")
        if self.uses_reweight:
            rows = {name: t.repeat_interleave(g, 0) for name, t in ctx.structures.items()}
            key_mask = None if ctx.key_mask is None else ctx.key_mask.repeat_interleave(g, 0)
            return self._attention_with_hooks(query, q, k.repeat_interleave(g, 0), v.repeat_interleave(g, 0),
                                              replace(ctx, key_mask=key_mask, structures=rows, memory_group=1))
        qg = q.view(n, g, H, T, d).transpose(1, 2).reshape(n, H, g * T, d)
        out, weights = scaled_attention(qg, k, v, key_mask=ctx.key_mask, need_weights=ctx.need_weights,
                                        dropout_p=self.dims.dropout if self.training else 0.0)
        out = out.view(n, H, g, T, d).transpose(1, 2).reshape(N, H, T, d)
        if weights is not None:
            weights = weights.view(n, H, g, T, -1).transpose(1, 2).reshape(N, H, T, -1)
        return AttentionOutput(output=self.out_proj(merge_heads(out)), weights=weights)

