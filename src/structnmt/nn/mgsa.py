"""Multi-Granularity Self-Attention, MG-SA (Hao et al. 2019), registered as ``"mgsa"``.

Heads are split into *head groups*. A word-level group is plain multi-head attention.
Every other group attends over its own **phrase memory**: queries stay words, keys and
values come from phrases of one granularity (an n-gram partition or one level of the
constituency tree), so the output is (B, T, D) like any attention.

Equations (paper numbering) and how they are read here
------------------------------------------------------
* eq. 4  ``H_g = F_h(H)`` — the phrase memory of a group, computed from the layer input
  ``H = memory`` (B, S, D) by :class:`PhraseMemory` (partition -> composition ->
  interaction, §3.2), with parameters of its own per group.
* eq. 5  ``Q^h = H W_Q^h,  K^h = H_g W_K^h,  V^h = H_g W_V^h`` — composition happens
  **before** the projection, in the model space (D): the phrase vectors are projected
  by the layer's own K/V projection (the rows of ``kv_proj`` belonging to the group's
  heads). Eq. 8 writes ``g_m in R^{1 x d_h}``, which contradicts eq. 5 (``H_g W_K^h``
  needs D columns); eq. 5 is followed, so MG-SA with every head word-level *is* plain
  multi-head attention with the same parameters.
* eq. 6  ``O^h = ATT(Q^h, K^h) V^h`` with ``ATT`` of eq. 3, masking each group's padded
  phrases (each group has its own memory length M_g and key mask (B, M_g)).
* eq. 7  ``MG-SA(H) = [O^1, ..., O^N]`` — heads concatenated in group order, then the
  usual output projection.
* eq. 8  ``g_m = COM(p_m)``, ``composition``:
  ``max``  — max-pooling over the phrase's tokens;
  ``san``  — the max-pooled vector ``m`` is the query of a one-head attention over the
  phrase's own tokens: ``g = sum_l softmax_l(m W x_l^T / sqrt(D)) x_l`` (``W`` (D, D) is
  the query-key bilinear form ``W_q W_k^T``; the values are the tokens themselves so
  that ``g`` stays in model space for eq. 5);
  ``lstm`` — the last hidden state of an LSTM (D -> D) run over the phrase's tokens.
* eqs. 9-10  tag supervision, syntax groups only: ``p = softmax(W_t g_i + b_t)`` on the
  composed representation ``g_i`` (after eq. 8, *before* interaction — the paper
  predicts tags "given phrase level memory G_x after phrase composition"); one
  classifier per layer shared by its syntax groups; the loss is the mean NLL over the
  phrases whose label is not ignored (-100: EOS's phrase, padding, labels missing from
  the dataset's label list).
* eq. 11  ``H_g = REC(G_x)``, ``interaction``: ``none`` (``H_g = G_x``), ``lstm`` or
  ``on_lstm`` (:class:`~structnmt.nn.on_lstm.ONLSTM`, ``chunk_size``) run left to right
  over the sequence of phrase vectors of each sentence.
* eq. 12  ``L = NLL + lambda L_tag`` — returned as ``aux_losses["mgsa_tag"]``, already
  multiplied by ``lambda = tag_loss_weight`` (0.001 in the paper).

Default heads (§4.1): a quarter word-level, the rest 2-, 3- and 4-grams (``preset:
ngram``, the default); ``preset: syntax`` is a quarter word-level plus a quarter for
each of the top three syntactic levels. The paper uses MG-SA in the bottom encoder
layer only; it is defined for encoder self-attention only (the target prefix has no
phrase partition), other roles are rejected.

Structures (built by the collator from :meth:`MGSAAttention.required_structures`)
-----------------------------------------------------------------------------------
* ``"mgsa.ngram{n}"`` (B, S) long phrase ids ``0..M-1`` per sentence, -1 at padding
  (``ngram_partition`` with ``n``);
* ``"mgsa.syntax"`` (B, K, S) long phrase ids of the top K levels, and
  ``"mgsa.syntax.labels"`` (B, K, M) long label ids, -100 = ignore
  (``syntax_partition`` with K = the deepest level used).

Used on its own, pass these tensors in ``AttentionContext(structures=...)``.
Everything is batched: phrase memories are built with scatter/gather over the phrase
ids (no loop over sentences); the only Python loops are over head groups and, for
the recurrent interactions, over phrase positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from ..syntax.batching import IGNORE_LABEL, StructureSpec
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
from .on_lstm import ONLSTM, run_on_lstms

GROUP_KINDS = ("word", "ngram", "syntax")
COMPOSITIONS = ("max", "san", "lstm")
INTERACTIONS = ("none", "lstm", "on_lstm")
PRESETS = ("", "ngram", "syntax")
SYNTAX_KEY = "mgsa.syntax"
TAG_LOSS_NAME = "mgsa_tag"


def ngram_key(n: int) -> str:
    return f"mgsa.ngram{n}"


@dataclass
class MGSAGroup:
    """One head group: ``kind`` word | ngram (``n``) | syntax (``level``, 1 = top), ``heads``."""

    kind: str = "word"
    heads: int = 1
    n: int = 0  # ngram only: phrase length in words
    level: int = 0  # syntax only: 1-based level counted from the top of the tree

    def phrase_ids(self, structures: dict) -> tuple[Tensor | None, Tensor | None]:
        """For analysis, batch row 0: ((S,) the phrase id of each token, (M,) the phrases' label ids or None);
        (None, None) for a word group (its memory is the tokens)."""
        if self.kind == "ngram":
            return structures[ngram_key(self.n)][0], None
        if self.kind == "syntax":
            labels = structures.get(SYNTAX_KEY + ".labels")
            return (structures[SYNTAX_KEY][0, self.level - 1],
                    None if labels is None else labels[0, self.level - 1])
        return None, None


# --------------------------------------------------------------------------- partitions


@dataclass
class PhraseLayout:
    """Where each token's phrase is, for one partition of a batch.

    Phrases are contiguous runs of tokens numbered 0..M_b-1 from left to right in each
    sentence (what the collator builds); padding has id -1.

    ids:         (B, S) long phrase id of each token, -1 at padding
    index:       (B, S) long phrase id with padding sent to a dump slot ``M``
    mask:        (B, M) bool, True = a real phrase
    length:      (B, M) long number of tokens of each phrase (0 for padded phrases)
    token_index: (B * M * L,) long, row of ``x.view(B * S, D)`` holding token l of phrase
                 m (L = the longest phrase); slots past a phrase's end repeat its last
                 token (harmless for max-pooling and for the last LSTM state)
    token_mask:  (B, M, L) bool, True = a real token of the phrase (slot 0 is True for
                 padded phrases too, so that no softmax row is empty; they are masked later)
    """

    ids: Tensor
    index: Tensor
    mask: Tensor
    length: Tensor
    token_index: Tensor
    token_mask: Tensor

    @property
    def num_phrases(self) -> int:
        return self.mask.shape[1]

    @property
    def max_length(self) -> int:
        return self.token_mask.shape[2]

    @classmethod
    def from_ids(cls, ids: Tensor) -> PhraseLayout:
        """ids (B, S) long, contiguous phrase ids 0..M_b-1 per sentence, -1 at padding."""
        B, S = ids.shape
        count = ids.max(dim=1).values + 1  # (B,) phrases per sentence
        valid = ids >= 0
        # every phrase's length in a slot per possible phrase (at most S), so that the number of phrases M and
        # the longest phrase L are read off the device together, once
        lengths = ids.new_zeros(B, S + 1).scatter_add_(1, torch.where(valid, ids, S), valid.long())[:, :S]
        M, L = (max(int(x), 1) for x in torch.stack([count.max(), lengths.max()]).tolist()) if B and S else (1, 1)
        index = torch.where(valid, ids, torch.full_like(ids, M))
        length = lengths[:, :M]  # (B, M): a sentence's phrases are at most its tokens
        mask = torch.arange(M, device=ids.device)[None, :] < count[:, None]
        start = torch.cumsum(length, 1) - length  # phrases are contiguous and in order
        slot = torch.arange(L, device=ids.device)
        offset = torch.minimum(slot[None, None, :], (length - 1).clamp_min(0)[..., None])  # (B, M, L)
        token_index = (torch.arange(B, device=ids.device)[:, None, None] * S + start[..., None] + offset).clamp(
            max=B * S - 1)
        token_mask = (slot[None, None, :] < length[..., None]) | (slot == 0)[None, None, :]
        return cls(ids=ids, index=index, mask=mask, length=length, token_index=token_index.reshape(-1),
                   token_mask=token_mask)


def gather_phrases(x: Tensor, layout: PhraseLayout) -> Tensor:
    """x (B, S, D) -> (B, M, L, D): the tokens of every phrase, right-padded (see ``token_index``)."""
    B, S, D = x.shape
    return x.reshape(B * S, D).index_select(0, layout.token_index).view(B, layout.num_phrases, -1, D)


def segment_reduce(x: Tensor, layout: PhraseLayout, reduce: str) -> Tensor:
    """Reduce the tokens of each phrase: x (B, S, ...) -> (B, M, ...) (``max`` or ``sum``).

    Phrases are contiguous, so each sentence's row is a run of segments (its phrases,
    then one segment with its padding) and ``torch.segment_reduce`` reduces all of them
    without padding the phrases to a common length. Padded phrases get -inf (max) or 0.
    """
    B, S = x.shape[:2]
    M = layout.num_phrases
    seg = torch.cat([layout.length, S - layout.length.sum(1, keepdim=True)], 1).reshape(-1)  # (B*(M+1),)
    out = torch.segment_reduce(x.reshape(B * S, *x.shape[2:]), reduce, lengths=seg, axis=0, unsafe=True)
    return out.view(B, M + 1, *x.shape[2:])[:, :M]


def phrase_max_pool(x: Tensor, layout: PhraseLayout) -> Tensor:
    """Eq. 8 with max-pooling: x (B, S, D) -> (B, M, D), max over each phrase's tokens (0 at padding)."""
    return segment_reduce(x, layout, "max").masked_fill(~layout.mask.unsqueeze(-1), 0.0)


def phrase_attention_pool(x: Tensor, query: Tensor, layout: PhraseLayout) -> Tensor:
    """Within-phrase attention: x (B, S, D), query (B, M, D) -> (B, M, D).

    ``g_m = sum_{t in p_m} softmax_t(query_m . x_t / sqrt(D)) x_t`` (0 at padded phrases),
    a softmax per phrase computed token-wise with segment reductions.
    """
    B, S, D = x.shape
    q_tok = F.pad(query / math.sqrt(D), (0, 0, 0, 1)).gather(1, layout.index.unsqueeze(-1).expand(B, S, D))
    s = (q_tok * x).sum(-1)  # (B, S) score of each token against its phrase's query
    smax = F.pad(segment_reduce(s.detach(), layout, "max"), (0, 1), value=0.0)  # shift (no gradient needed)
    e = torch.exp(s - smax.gather(1, layout.index))  # padding tokens use the dump slot M (shift 0)
    den = F.pad(segment_reduce(e, layout, "sum"), (0, 1), value=1.0)
    a = e / den.gather(1, layout.index)
    return segment_reduce(a.unsqueeze(-1) * x, layout, "sum").masked_fill(~layout.mask.unsqueeze(-1), 0.0)


def phrase_tokens(x: Tensor, layout: PhraseLayout, tokens: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The tokens of every real phrase as a right-padded batch of sequences.

    x (B, S, D) -> ``(tokens (N, L, D), lengths (N,), flat (N,))`` where N is the number
    of real phrases in the batch, L the longest phrase, and ``flat`` the index of each
    phrase in the flattened (B * M) phrase grid.
    """
    tokens = gather_phrases(x, layout) if tokens is None else tokens
    B, M, L, D = tokens.shape
    flat = layout.mask.reshape(-1).nonzero().squeeze(1)
    return tokens.reshape(B * M, L, D).index_select(0, flat), layout.length.reshape(-1)[flat], flat


# --------------------------------------------------------------------------- F_h (eq. 4)


class PhraseMemory(nn.Module):
    """``F_h`` of eq. 4 for one head group: composition (eq. 8) then interaction (eq. 11).

    forward(x (B, S, D), layout) -> (H_g (B, M, D), G_x (B, M, D)); both zero at padded
    phrases (``layout.mask`` False). ``G_x`` is the composed memory the tag classifier sees.
    """

    def __init__(self, d_model: int, composition: str, interaction: str, chunk_size: int):
        super().__init__()
        self.composition = composition
        self.interaction = interaction
        self.san = nn.Linear(d_model, d_model, bias=False) if composition == "san" else None
        self.com_lstm = nn.LSTM(d_model, d_model, batch_first=True) if composition == "lstm" else None
        if interaction == "lstm":
            self.rec: nn.Module | None = nn.LSTM(d_model, d_model, batch_first=True)
        elif interaction == "on_lstm":
            self.rec = ONLSTM(d_model, d_model, chunk_size)
        else:
            self.rec = None

    def compose(self, x: Tensor, layout: PhraseLayout) -> Tensor:
        """Eq. 8: x (B, S, D) -> G_x (B, M, D)."""
        if self.composition == "max":
            return phrase_max_pool(x, layout)
        if self.composition == "san":
            return phrase_attention_pool(x, self.san(phrase_max_pool(x, layout)), layout)
        B, S, D = x.shape
        seqs, lengths, flat = phrase_tokens(x, layout)
        out, _ = self.com_lstm(seqs)  # right padding: the state at length-1 is exact
        last = out[torch.arange(out.shape[0], device=x.device), lengths - 1]  # (N, D)
        g = x.new_zeros(B * layout.num_phrases, D).index_put((flat,), last)
        return g.view(B, layout.num_phrases, D)

    def interact(self, g: Tensor, layout: PhraseLayout) -> Tensor:
        """Eq. 11: G_x (B, M, D) -> H_g (B, M, D), left to right over the phrases."""
        if self.rec is None:
            return g
        if isinstance(self.rec, ONLSTM):
            out, _ = self.rec(g, layout.mask)
            return out
        out, _ = self.rec(g)  # right padding leaves the real steps exact
        return out * layout.mask.unsqueeze(-1).to(out.dtype)

    def forward(self, x: Tensor, layout: PhraseLayout) -> tuple[Tensor, Tensor]:
        g = self.compose(x, layout)
        return self.interact(g, layout), g


# --------------------------------------------------------------------------- the mechanism


def resolve_groups(groups: list[MGSAGroup], preset: str, heads: int, where: str) -> list[MGSAGroup]:
    """The head groups of a layer: ``groups`` as given, or a preset (default ``ngram``)."""
    if preset not in PRESETS:
        raise ConfigError(f"{where}: unknown preset '{preset}'; use one of 'ngram', 'syntax' or '' (explicit groups).")
    if groups and preset:
        raise ConfigError(f"{where}: give either 'groups' or 'preset', not both.")
    if not groups:
        preset = preset or "ngram"
        if heads % 4:
            raise ConfigError(
                f"{where}: preset '{preset}' gives a quarter of the heads to each of 4 granularities, "
                f"but heads={heads} is not divisible by 4; list 'groups' explicitly."
            )
        q = heads // 4
        if preset == "ngram":
            return [MGSAGroup("word", q)] + [MGSAGroup("ngram", q, n=n) for n in (2, 3, 4)]
        return [MGSAGroup("word", q)] + [MGSAGroup("syntax", q, level=lv) for lv in (1, 2, 3)]
    for i, g in enumerate(groups):
        at = f"{where}.groups[{i}]"
        if g.kind not in GROUP_KINDS:
            raise ConfigError(f"{at}: unknown kind '{g.kind}'; use one of {', '.join(GROUP_KINDS)}.")
        if g.heads < 1:
            raise ConfigError(f"{at}: heads must be >= 1, got {g.heads}.")
        if g.kind == "ngram" and g.n < 1:
            raise ConfigError(f"{at}: an ngram group needs n >= 1 (phrase length in words), got n={g.n}.")
        if g.kind != "ngram" and g.n:
            raise ConfigError(f"{at}: 'n' applies to ngram groups only (this group is '{g.kind}').")
        if g.kind == "syntax" and g.level < 1:
            raise ConfigError(f"{at}: a syntax group needs level >= 1 (1 = top of the tree), got level={g.level}.")
        if g.kind != "syntax" and g.level:
            raise ConfigError(f"{at}: 'level' applies to syntax groups only (this group is '{g.kind}').")
    total = sum(g.heads for g in groups)
    if total != heads:
        raise ConfigError(
            f"{where}: the groups' heads sum to {total} but the layer has {heads} heads; "
            f"make them add up to {heads}."
        )
    return list(groups)


@register_attention("mgsa")
class MGSAAttention(MultiHeadAttention):
    """Multi-granularity self-attention (Hao et al. 2019, eqs. 4-12); see the module docstring.

    Shapes: query = memory (B, S, D) (self-attention); per group g with H_g heads and
    M_g phrases: q (B, H_g, S, d), k/v (B, H_g, M_g, d), key mask (B, M_g).
    Parameters: those of :class:`MultiHeadAttention` (``q_proj``, ``kv_proj``,
    ``out_proj``, same names, so its state dict loads), one :class:`PhraseMemory` per
    phrase group (``phrase_memories[str(i)]``) and, with syntax groups and a positive
    ``tag_loss_weight``, the tag classifier ``tagger`` (D -> num_tags).
    """

    @dataclass
    class Options:
        groups: list[MGSAGroup] = field(default_factory=list)  # empty: use ``preset``
        preset: str = ""  # "" with no groups = "ngram" (the paper's default); or "syntax"
        composition: str = "san"  # max | san | lstm (eq. 8; the paper's default is san)
        interaction: str = "none"  # none | lstm | on_lstm (eq. 11)
        chunk_size: int = 8  # ON-LSTM chunk size; must divide d_model
        tag_loss_weight: float = 0.001  # lambda of eq. 12; 0 disables the tag classifier
        num_tags: int = 64  # size of the tag classifier (label ids must be < num_tags)

    def __init__(self, *, dims: AttentionDims, options: MGSAAttention.Options | None = None):
        super().__init__(dims=dims)
        options = options if options is not None else MGSAAttention.Options()
        where = f"model.attention ({dims.role}, {dims.cache_key}) mgsa options"
        if dims.role != "encoder_self":
            raise ConfigError(
                f"model.attention: mgsa is defined for encoder self-attention only (phrase partitions of the "
                f"target prefix are not defined), but it was placed in '{dims.role}' ({dims.cache_key}); "
                "use it under encoder_self or an 'encoder_self.<layer>' override."
            )
        if options.composition not in COMPOSITIONS:
            raise ConfigError(f"{where}: unknown composition '{options.composition}'; use one of {', '.join(COMPOSITIONS)}.")
        if options.interaction not in INTERACTIONS:
            raise ConfigError(f"{where}: unknown interaction '{options.interaction}'; use one of {', '.join(INTERACTIONS)}.")
        if options.tag_loss_weight < 0:
            raise ConfigError(f"{where}: tag_loss_weight must be >= 0, got {options.tag_loss_weight}.")
        if options.num_tags < 1:
            raise ConfigError(f"{where}: num_tags must be >= 1, got {options.num_tags}.")
        if options.interaction == "on_lstm" and (options.chunk_size < 1 or dims.d_model % options.chunk_size):
            raise ConfigError(
                f"{where}: chunk_size {options.chunk_size} must divide hidden size {dims.d_model} "
                f"(d_model); choose a divisor of {dims.d_model}."
            )
        self.options = options
        self.groups = resolve_groups(options.groups, options.preset, dims.heads, where)
        self.head_dim = dims.d_model // dims.heads
        self.phrase_memories = nn.ModuleDict(
            {str(i): PhraseMemory(dims.d_model, options.composition, options.interaction, options.chunk_size)
             for i, g in enumerate(self.groups) if g.kind != "word"}
        )
        self.has_syntax = any(g.kind == "syntax" for g in self.groups)
        self.tagger = (nn.Linear(dims.d_model, options.num_tags)
                       if self.has_syntax and options.tag_loss_weight > 0 else None)

    # ----------------------------------------------------------------- what analysis reads

    def memory_groups(self) -> list[MGSAGroup]:
        """The head groups, in head order; ``extras["group_weights"]`` holds one weight tensor per group."""
        return self.groups

    def head_labels(self) -> list[str]:
        """Per head: its granularity ("word", "2-gram", "syntax L1")."""
        out = []
        for g in self.groups:
            name = "word" if g.kind == "word" else (f"{g.n}-gram" if g.kind == "ngram" else f"syntax L{g.level}")
            out += [name] * g.heads
        return out

    # ----------------------------------------------------------------- structures

    def required_structures(self) -> dict[str, StructureSpec]:
        out: dict[str, StructureSpec] = {}
        for g in self.groups:
            if g.kind == "ngram":
                out[ngram_key(g.n)] = StructureSpec("ngram_partition", {"n": g.n})
        levels = [g.level for g in self.groups if g.kind == "syntax"]
        if levels:
            out[SYNTAX_KEY] = StructureSpec("syntax_partition", {"K": max(levels)})
        return out

    def _layout(self, g: MGSAGroup, ctx: AttentionContext, cache: dict) -> PhraseLayout:
        key = (g.kind, g.n, g.level)
        if key not in cache:
            name = ngram_key(g.n) if g.kind == "ngram" else SYNTAX_KEY
            if name not in ctx.structures:
                raise KeyError(
                    f"mgsa ({self.dims.cache_key}): the batch has no structure '{name}'; build the batch with "
                    "the model's required_structures() (the trainer and translator do this)."
                )
            ids = ctx.structures[name]
            if g.kind == "syntax":
                if ids.dim() != 3 or ids.shape[1] < g.level:
                    raise ValueError(
                        f"mgsa ({self.dims.cache_key}): '{name}' must be (B, K, S) with K >= {g.level}, "
                        f"got shape {tuple(ids.shape)}."
                    )
                ids = ids[:, g.level - 1]
            cache[key] = PhraseLayout.from_ids(ids)
        return cache[key]

    def _labels(self, ctx: AttentionContext, level: int, M: int) -> Tensor | None:
        labels = ctx.structures.get(SYNTAX_KEY + ".labels")
        if labels is None:
            return None
        lab = labels[:, level - 1, :M]
        if lab.shape[1] < M:
            lab = F.pad(lab, (0, M - lab.shape[1]), value=IGNORE_LABEL)
        return lab

    def _phrase_memories(self, memory: Tensor, ctx: AttentionContext) -> dict[int, tuple]:
        """Eq. 4 for every phrase group: ``{i: (layout, H_g (B, M_g, D), G_x (B, M_g, D))}``.

        Compositions run group by group; ON-LSTM interactions of all groups run in one
        time loop (:func:`run_on_lstms`), which is equivalent to running them one by one.
        """
        layouts: dict = {}
        composed: dict[int, tuple[PhraseLayout, Tensor]] = {}
        for i, g in enumerate(self.groups):
            if g.kind != "word":
                layout = self._layout(g, ctx, layouts)
                composed[i] = (layout, self.phrase_memories[str(i)].compose(memory, layout))
        if not composed:
            return {}
        if self.options.interaction == "on_lstm":
            idx = list(composed)
            runs = run_on_lstms([self.phrase_memories[str(i)].rec for i in idx],
                                [composed[i][1] for i in idx], [composed[i][0].mask for i in idx])
            return {i: (composed[i][0], out, composed[i][1]) for i, (out, _) in zip(idx, runs)}
        return {i: (lay, self.phrase_memories[str(i)].interact(g, lay), g) for i, (lay, g) in composed.items()}

    def _kv_weights(self, h0: int, h1: int) -> tuple[Tensor, Tensor]:
        D, dh = self.dims.d_model, self.head_dim
        if h0 == 0 and h1 == self.heads:
            return self.kv_proj.weight, self.kv_proj.bias
        w, b = self.kv_proj.weight, self.kv_proj.bias
        k_rows, v_rows = slice(h0 * dh, h1 * dh), slice(D + h0 * dh, D + h1 * dh)
        return torch.cat([w[k_rows], w[v_rows]]), torch.cat([b[k_rows], b[v_rows]])

    # ----------------------------------------------------------------- forward

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        """query (B, T, D) (words), memory (B, S, D) (the layer input H) -> AttentionOutput.

        ``weights`` (when requested) is (B, H, T, S): word heads as usual, phrase heads with
        each phrase's weight shared evenly by its tokens; ``extras["group_weights"]`` holds
        the raw per-group weights (B, H_g, T, M_g).
        """
        q = split_heads(self.q_proj(query), self.heads)  # (B, H, T, d)
        phrase = self._phrase_memories(memory, ctx)  # group index -> (layout, H_g, G_x)
        outs: list[Tensor] = []
        token_weights: list[Tensor] = []
        group_weights: list[Tensor] = []
        tag_logits: list[Tensor] = []
        tag_labels: list[Tensor] = []
        dropout_p = self.dims.dropout if self.training else 0.0
        h0 = 0
        for i, g in enumerate(self.groups):
            h1 = h0 + g.heads
            layout = None
            if g.kind == "word":
                mem, key_mask = memory, ctx.key_mask
            else:
                layout, mem, composed = phrase[i]  # (B, M_g, D)
                key_mask = layout.mask
                if g.kind == "syntax" and self.tagger is not None:
                    lab = self._labels(ctx, g.level, layout.num_phrases)
                    if lab is not None:
                        tag_logits.append(self.tagger(composed).flatten(0, 1))
                        tag_labels.append(lab.reshape(-1))
            w, b = self._kv_weights(h0, h1)
            k, v = F.linear(mem, w, b).chunk(2, dim=-1)
            k, v = split_heads(k, g.heads), split_heads(v, g.heads)
            out, weights = scaled_attention(
                q[:, h0:h1], k, v, key_mask=key_mask, dropout_p=dropout_p, need_weights=ctx.need_weights
            )
            outs.append(out)
            if weights is not None:
                group_weights.append(weights)
                token_weights.append(weights if layout is None else self._to_tokens(weights, layout))
            h0 = h1
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        result = AttentionOutput(output=self.out_proj(merge_heads(out)))
        if ctx.need_weights:
            result.weights = torch.cat(token_weights, dim=1)
            result.extras["group_weights"] = group_weights
        if tag_logits:
            result.aux_losses[TAG_LOSS_NAME] = self.options.tag_loss_weight * self._tag_loss(
                torch.cat(tag_logits), torch.cat(tag_labels)
            )
        return result

    def _tag_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """Eqs. 9-10: mean NLL of the phrase tags over non-ignored phrases (0 when there are none)."""
        keep = labels != IGNORE_LABEL
        outside = keep & ((labels < 0) | (labels >= self.options.num_tags))
        if bool(outside.any()):  # one read of the device a call; the offending ids only when there are some
            bad = labels[outside]
            raise ValueError(
                f"mgsa ({self.dims.cache_key}): phrase label id {int(bad.max())} is outside "
                f"[0, num_tags={self.options.num_tags}); set the mgsa option num_tags to at least the "
                "number of syntax labels in the dataset's manifest."
            )
        nll = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_LABEL, reduction="sum")
        return nll / keep.sum().clamp_min(1)

    @staticmethod
    def _to_tokens(weights: Tensor, layout: PhraseLayout) -> Tensor:
        """(B, H, T, M) phrase weights -> (B, H, T, S): each phrase's weight split evenly over its tokens."""
        B, H, T, _ = weights.shape
        S = layout.ids.shape[1]
        per_token = F.pad(weights / layout.length.clamp_min(1)[:, None, None, :].to(weights.dtype), (0, 1))
        idx = layout.index[:, None, None, :].expand(B, H, T, S)
        return per_token.gather(-1, idx)
