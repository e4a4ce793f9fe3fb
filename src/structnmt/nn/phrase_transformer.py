"""PhraseTransformer ("Attention over Phrases", anonymous ICLR submission; the paper's
terms): hypernodes for candidate phrases and a two-phase attention whose second phase
attends within phrases through a non-linearity.

Nodes (§2.1-2.2, Algorithm 1 lines 1-2). Before the first PhraseTransformer layer the
encoder appends ``N`` hypernodes with **zero states** to the ``S`` tokens (pieces + EOS),
so that from then on every layer — attention, residual, normalization, feed-forward —
runs over ``L = S + N`` nodes. Which hypernodes:

* ``hypernodes: ngram`` (eq. 1): one per run of 2..k adjacent words (``unit: word``;
  the hypernode covers every piece of its words) or pieces (``unit: piece``);
* ``hypernodes: semantic`` (§4.3, eq. 8): from the dependency tree; the paper leaves
  open what ``k`` means for them, ``semantic`` chooses (see
  :func:`structnmt.syntax.features.dependency_hypernodes`): ``subtrees`` (default:
  every connected set of 2..k words; exactly eq. 8's edges at k = 2), ``edges`` (eq. 8,
  k ignored), ``edges_ngrams`` (edges plus eq. 1's n-grams).

The collator builds, under :attr:`PhraseTransformerAttention.key`, the membership
(B, N, S) bool, ``.mask`` (B, N) and ``.neighbours`` (B, L, K) long: eq. 6's adjacency
``A`` as neighbour lists (``-1`` = none). :meth:`PhraseTransformerAttention.hypernodes`
tells the encoder where they are and how to initialise them (``positions``: ``none``,
the paper's zero state; ``first``: the position encoding of the first member token;
``mean``: the mean of the members' position encodings) and what the decoder sees
(``decoder_sees: words``, Algorithm 1 line 6's ``H[:n]``, or ``all`` nodes).

Phase 1 (§2.3, eqs. 2-3): multi-head attention over all ``L`` nodes (padding masked),
exactly :class:`~structnmt.nn.attention.MultiHeadAttention`.

Phase 2 (§2.4, eqs. 4-7): with its own projections ``W^{Q'}, W^{K'}, W^{V'}``, per head

    head'_i = sigma( softmax( Q'K'^T / sqrt(d) (.) A ) V' )            (eq. 5)

then ``Concat(head'_1..h) W^O`` (eq. 7; ``phase2_output: own`` gives phase 2 its own
output matrix, ``shared`` reuses phase 1's ``W^O`` as eq. 7 prints it). Sigma is the
sigmoid applied to each head's output (``nonlinear: false`` is the paper's "linear
PhraseTransformer"). The form of ``(.) A``:

* ``within: masked`` (default): attention restricted to adjacent nodes (``-inf``
  elsewhere) — what the prose says ("will not be updated by 'for' or 'her'");
* ``within: hadamard``: eq. 5 literally, logits multiplied by ``A``: a non-adjacent
  node gets logit 0 and so weight ``e^0 / Z``, not zero.

Padded nodes are masked in both phases and both forms. Phase 2 is sparse (a node has
O(k^2) neighbours): ``impl: gathered`` gathers the K neighbours' keys and values,
(B, L, K, D), instead of a dense (B, H, L, L) attention; the Hadamard form has an
exact gathered form too — the ``c`` valid non-adjacent nodes of a row all have logit 0,
so they act as one extra key with logit ``log c`` and value the mean of their values
(total minus adjacent sum, divided by ``c``). ``impl: dense`` computes the (B, H, L, L)
matrix with the adjacency as a mask. ``impl: auto`` (default) picks per batch: gathered
when ``L > 25 K^2``, dense otherwise — measured on CPU, one matmul over a sentence's nodes
is cheaper than K memory-bound gathers until the sentence has hundreds of nodes.

``phase2: false`` drops phase 2 (phase 1 over words and hypernodes only; an ablation); with
``k = 1`` there are no hypernodes either, and the layer is a plain encoder layer.

Layer structure (Algorithm 1 has no residuals or feed-forward; ``sublayers``):
``two`` (default): phase 1 is the layer's attention sublayer and phase 2 a second
residual sublayer after it (:meth:`second_phase`; the encoder layer adds its norm and
residual), then the feed-forward; ``one``: both phases inside one attention sublayer
(``x + W'(phase2(phase1(LN x)))``), then the feed-forward.

Shapes: B batch, L = S + N nodes, H heads, d head size, K neighbours per node.
Encoder self-attention only (the paper applies it there); elsewhere it is refused.
Extras: ``within_weights`` (B, H, L, L) phase-2 weights when weights are requested
(scattered from the gathered form; under ``hadamard`` the non-adjacent nodes share the
extra key's weight equally).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from ..syntax.batching import StructureSpec
from ..syntax.features import SEMANTIC_MODES
from .attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    Mechanism,
    MultiHeadAttention,
    masked_softmax,
    merge_heads,
    register_attention,
    scaled_attention,
    split_heads,
)

KINDS = ("ngram", "semantic")
UNITS = ("word", "piece")
FORMS = ("masked", "hadamard")
IMPLS = ("auto", "gathered", "dense")
AUTO_CROSSOVER = 25
"""``impl: auto`` gathers when L > 25 K^2 (L nodes, K neighbours per node): the crossover
measured on CPU (``bench_phrase_transformer.py --phase2``: about L = 250 at K = 3 and
L = 900 at K = 6); below it the dense masked attention is faster, one matmul beating K
memory-bound gathers."""
OUTPUTS = ("own", "shared")
SUBLAYERS = ("two", "one")
POSITIONS = ("none", "first", "mean")
DECODER_SEES = ("words", "all")


@dataclass(frozen=True)
class HypernodeSpec:
    """What the encoder needs to add the hypernodes (see the module docstring)."""

    key: str  # structure key: membership (B, N, S), .mask (B, N), .neighbours (B, S + N, K)
    positions: str  # none | first | mean
    decoder_sees: str  # words | all

    def append(self, x: Tensor, mask: Tensor, structures: dict[str, Tensor],
               positions: Tensor) -> tuple[Tensor, Tensor]:
        """Algorithm 1 line 2: append the N hypernodes to the S tokens.

        x (B, S, D), mask (B, S) -> (B, S + N, D), (B, S + N). States are zeros (the paper),
        or the position encoding (``positions`` (>= S, D)) of the first member token, or the
        mean of the members' encodings (``self.positions``); padded hypernodes are zero and
        masked.
        """
        for name in (self.key, self.key + ".mask"):
            if name not in structures:
                raise KeyError(f"phrase_transformer: the batch has no structure '{name}'; build the batch with the "
                               "model's required_structures() (the trainer and translator do this).")
        member, hmask = structures[self.key], structures[self.key + ".mask"]  # (B, N, S), (B, N)
        B, N, S = member.shape
        if S != x.shape[1]:
            raise ValueError(f"hypernode membership covers {S} tokens but the encoder has {x.shape[1]}.")
        h = x.new_zeros(B, N, x.shape[2])
        table = positions[:S].to(x.dtype)
        if self.positions == "first":
            h = table[member.to(torch.int8).argmax(-1)]
        elif self.positions == "mean":
            m = member.to(x.dtype)
            h = (m @ table) / m.sum(-1, keepdim=True).clamp_min(1.0)
        h = h * hmask[..., None].to(x.dtype)
        return torch.cat([x, h], dim=1), torch.cat([mask, hmask], dim=1)


def gather_nodes(x: Tensor, index: Tensor) -> Tensor:
    """x (B, H, L, d), index (B, L, K) in [0, L) -> (B, L, K, H, d): node ``index[b, i, j]``."""
    B, H, L, d = x.shape
    flat = x.transpose(1, 2).reshape(B, L, H * d)
    rows = torch.arange(B, device=x.device)[:, None, None]
    return flat[rows, index].view(B, index.shape[1], index.shape[2], H, d)


def dense_adjacency(neighbours: Tensor) -> Tensor:
    """neighbours (B, L, K), -1 = none -> A (B, L, L) bool (eq. 6)."""
    B, L, _ = neighbours.shape
    idx = torch.where(neighbours >= 0, neighbours, torch.full_like(neighbours, L))
    a = torch.zeros(B, L, L + 1, dtype=torch.bool, device=neighbours.device)
    return a.scatter_(2, idx, True)[..., :L]


def choose_impl(L: int, K: int) -> str:
    """``impl: auto``: ``gathered`` when L > 25 K^2 (see :data:`AUTO_CROSSOVER`), else ``dense``."""
    return "gathered" if L > AUTO_CROSSOVER * K * K else "dense"


def within_phrase_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    neighbours: Tensor,
    key_mask: Tensor | None,
    *,
    form: str = "masked",
    impl: str = "auto",
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Eq. 5 without the sigma: softmax(q k^T / sqrt(d) (.) A) v.

    q, k, v (B, H, L, d); neighbours (B, L, K) long (-1 = none), eq. 6's A as lists;
    key_mask (B, L) bool, True = a real node. Returns (out (B, H, L, d), weights
    (B, H, L, L) or None). A query with no valid key (a padded node) gets zeros.
    """
    B, H, L, d = q.shape
    scale = d**-0.5
    valid_mask = torch.ones(B, L, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    if impl == "auto":
        impl = choose_impl(L, neighbours.shape[-1])
    if impl == "dense":
        adj = dense_adjacency(neighbours)[:, None]  # (B, 1, L, L)
        if form == "masked":
            out, w = scaled_attention(q, k, v, key_mask=valid_mask, mask=adj, dropout_p=dropout_p,
                                      need_weights=need_weights)
            return out, w
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale * adj.to(q.dtype)  # eq. 5 literally
        allowed = valid_mask[:, None, None, :] & valid_mask[:, None, :, None]  # padded queries: dead rows
        w = masked_softmax(scores, allowed).to(q.dtype)
        out = torch.matmul(F.dropout(w, dropout_p, dropout_p > 0), v)
        return out, (w if need_weights else None)
    if impl != "gathered":
        raise ValueError(f"unknown impl '{impl}'; use one of {', '.join(IMPLS)}.")
    has = neighbours >= 0
    idx = neighbours.clamp_min(0)
    valid = has & valid_mask.gather(1, idx.flatten(1)).view_as(idx) & valid_mask[:, :, None]  # (B, L, K)
    kg, vg = gather_nodes(k, idx), gather_nodes(v, idx)  # (B, L, K, H, d)
    # elementwise products summed over d: many tiny (1 x d) @ (d x K) products are slow as bmm on CPU
    scores = (q.transpose(1, 2).unsqueeze(2) * kg).sum(-1).permute(0, 3, 1, 2) * scale  # (B, H, L, K)
    allowed = valid[:, None]  # (B, 1, L, K)
    if form == "hadamard":
        # the c valid non-adjacent nodes of a row: logit 0 each = one key with logit log c,
        # value the mean of their values (sum of all valid values minus the adjacent ones)
        n_valid = valid_mask.sum(-1)  # (B,)
        c = (n_valid[:, None] - valid.sum(-1)).to(q.dtype)  # (B, L)
        c = torch.where(valid_mask, c, torch.zeros_like(c))  # padded queries have no keys at all
        # in float32 whatever the dtype: a difference of two sums over the sentence (bf16 would lose it)
        v32, vg32 = v.float(), vg.float()
        total = (v32 * valid_mask[:, None, :, None].float()).sum(2)  # (B, H, d)
        adj_sum = (vg32 * valid[..., None, None].float()).sum(2).transpose(1, 2)  # (B, H, L, d)
        rest = ((total[:, :, None] - adj_sum) / c.float().clamp_min(1.0)[:, None, :, None]).to(v.dtype)
        extra_logit = torch.log(c.clamp_min(1.0))[:, None, :, None].expand(B, H, L, 1)
        scores = torch.cat([scores, extra_logit.to(scores.dtype)], dim=-1)  # (B, H, L, K + 1)
        allowed = torch.cat([valid, (c > 0)[..., None]], dim=-1)[:, None]
    w = masked_softmax(scores, allowed).to(q.dtype)
    dropped = F.dropout(w, dropout_p, dropout_p > 0)
    K = idx.shape[-1]
    out = (dropped[..., :K].permute(0, 2, 3, 1).unsqueeze(-1) * vg).sum(2).transpose(1, 2)  # (B, H, L, d)
    if form == "hadamard":
        out = out + dropped[..., -1:] * rest
    weights = None
    if need_weights:  # scatter back to (B, H, L, L) for analysis
        dense = torch.zeros(B, H, L, L + 1, dtype=w.dtype, device=w.device)
        target = torch.where(valid, idx, torch.full_like(idx, L))[:, None].expand(B, H, L, K)
        dense.scatter_add_(3, target, w[..., :K])
        dense = dense[..., :L]
        if form == "hadamard":
            non_adj = valid_mask[:, None, None, :] & ~dense_adjacency(torch.where(valid, idx, -1))[:, None]
            share = w[..., -1:] / c.clamp_min(1.0)[:, None, :, None]
            dense = dense + share * non_adj.to(w.dtype)
        weights = dense
    return out, weights


@register_attention("phrase_transformer")
class PhraseTransformerAttention(Mechanism):
    """Two-phase attention over words and hypernodes (Algorithm 1); see the module docstring."""

    @dataclass
    class Options:
        k: int = 2  # longest phrase (eq. 1); for semantic hypernodes see `semantic`
        hypernodes: str = "ngram"  # ngram (eq. 1) | semantic (eq. 8, dependency trees)
        unit: str = "word"  # ngram hypernodes over words (default) or pieces
        semantic: str = "subtrees"  # subtrees | edges | edges_ngrams: what k means for semantic hypernodes
        nonlinear: bool = True  # eq. 5's sigmoid on each phase-2 head; False = "linear PhraseTransformer"
        within: str = "masked"  # masked (the prose) | hadamard (eq. 5 literally)
        impl: str = "auto"  # auto | gathered (sparse, O(L K) memory) | dense (O(L^2), one matmul)
        phase2_output: str = "own"  # own W^O' | shared: phase 1's W^O (eq. 7 as printed)
        sublayers: str = "two"  # two residual sublayers | one: both phases in one
        positions: str = "none"  # hypernode start state: none (zeros, Algorithm 1) | first | mean
        decoder_sees: str = "words"  # words (H[:n], Algorithm 1) | all nodes
        phase2: bool = True  # False: phase 1 only (no within-phrase attention; an ablation, and with k = 1
        #                      the layer equals a plain encoder layer)

    def __init__(self, *, dims: AttentionDims, options: Options):
        super().__init__()

        where = f"model.attention ({dims.role}) phrase_transformer"
        if dims.role != "encoder_self":
            raise ConfigError(f"{where}: PhraseTransformer is an encoder self-attention (the paper's setting); "
                              "use it under encoder_self or an encoder_self.N override.")
        for name, allowed in (("hypernodes", KINDS), ("unit", UNITS), ("semantic", SEMANTIC_MODES),
                              ("within", FORMS), ("impl", IMPLS), ("phase2_output", OUTPUTS),
                              ("sublayers", SUBLAYERS), ("positions", POSITIONS), ("decoder_sees", DECODER_SEES)):
            if getattr(options, name) not in allowed:
                raise ConfigError(f"{where}: unknown {name} '{getattr(options, name)}'; use one of {', '.join(allowed)}.")
        if options.k < 1:
            raise ConfigError(f"{where}: k must be >= 1 (k = 1: no hypernodes, a phrase has at least two words), "
                              f"got {options.k}.")
        self.dims = dims
        self.options = options
        self.heads = dims.heads
        self.phase1 = MultiHeadAttention(dims=dims)  # eqs. 2-3
        if options.phase2:
            self.q2 = nn.Linear(dims.d_model, dims.d_model)  # W^{Q'}
            self.kv2 = nn.Linear(dims.d_model, 2 * dims.d_model)  # W^{K'}, W^{V'}
        self.out2 = (nn.Linear(dims.d_model, dims.d_model)
                     if options.phase2 and options.phase2_output == "own" else None)

    @property
    def key(self) -> str:
        o = self.options
        if o.hypernodes == "ngram":
            return f"pt.ngram.k{o.k}.{o.unit}"
        return f"pt.semantic.k{o.k}.{o.semantic}"

    def required_structures(self) -> dict[str, StructureSpec]:
        o = self.options
        if o.hypernodes == "ngram":
            return {self.key: StructureSpec("ngram_hypernodes", {"k": o.k, "unit": o.unit})}
        return {self.key: StructureSpec("dep_hypernodes", {"k": o.k, "mode": o.semantic})}

    attends_hypernodes = True

    def hypernodes(self) -> HypernodeSpec:
        return HypernodeSpec(self.key, self.options.positions, self.options.decoder_sees)

    @property
    def has_second_phase(self) -> bool:
        """True: the encoder layer runs :meth:`second_phase` as a second residual sublayer."""
        return self.options.phase2 and self.options.sublayers == "two"

    def second_phase(self, x: Tensor, ctx: AttentionContext) -> AttentionOutput:
        """Eqs. 4-7: x (B, L, D) -> (B, L, D), attention within phrases."""
        neighbours = ctx.structures.get(self.key + ".neighbours")
        if neighbours is None:
            raise KeyError(f"phrase_transformer: the batch has no structure '{self.key}.neighbours'; build it with "
                           "the model's required_structures() (the trainer and translator do this).")
        if neighbours.shape[1] != x.shape[1]:
            raise ValueError(f"phrase_transformer: {x.shape[1]} nodes but neighbour lists for {neighbours.shape[1]}; "
                             "the encoder must add the hypernodes before the first PhraseTransformer layer.")
        q = split_heads(self.q2(x), self.heads)
        k, v = (split_heads(t, self.heads) for t in self.kv2(x).chunk(2, dim=-1))
        out, weights = within_phrase_attention(
            q, k, v, neighbours, ctx.key_mask, form=self.options.within, impl=self.options.impl,
            dropout_p=self.dims.dropout if self.training else 0.0, need_weights=ctx.need_weights)
        if self.options.nonlinear:
            out = torch.sigmoid(out)  # eq. 5: sigma on each head's output, before the concatenation
        if ctx.key_mask is not None:  # sigmoid(0) = 0.5: padded nodes stay zero
            out = out * ctx.key_mask[:, None, :, None].to(out.dtype)
        proj = self.out2 if self.out2 is not None else self.phase1.out_proj
        return AttentionOutput(output=proj(merge_heads(out)), weights=weights)

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        """query = memory (B, L, D): the S tokens and N hypernodes."""
        first = self.phase1(query, memory, ctx)
        if self.has_second_phase or not self.options.phase2:
            return first
        second = self.second_phase(first.output, ctx)
        extras = {"within_weights": second.weights} if second.weights is not None else {}
        return AttentionOutput(output=second.output, weights=first.weights, extras=extras)
