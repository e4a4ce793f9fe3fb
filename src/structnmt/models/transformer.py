"""Transformer encoder-decoder (Vaswani et al. 2017) hosting any registered attention.

Pre-norm by default (``model.pre_norm: false`` gives the original post-norm),
sinusoidal positions, embeddings scaled by sqrt(d), optional tying of the decoder
input embedding with the output projection and sharing of all embeddings.

Every attention module is built by :func:`structnmt.nn.build_attention` from the
config's :class:`~structnmt.config.AttentionPlan`, per role and layer; the model never
looks at which mechanism it holds. Shapes: B batch, S source length, T target length,
D model width, V vocabulary.

Decoding protocol (shared with every model family, used by beam search):

* ``encode(src, src_mask, structures) -> EncoderOutput``
* ``decode_step(prev_tokens (N, t), enc, cache, log_probs=True) -> log_probs (N, V)`` for the
  last position (``log_probs=False``: logits); a fresh tensor, which the search may overwrite
* ``EncoderOutput.reorder(index)`` and ``IncrementalCache.reorder(index)``
* optionally ``shares_source_across_beam() -> bool``: beam search may then keep one
  encoder row per sentence for its ``beam`` hypotheses (``IncrementalCache(beam=K)``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, ModelConfig
from ..data.vocab import PAD
from ..nn import dropout as drop
from ..nn.attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    IncrementalCache,
    MultiHeadAttention,
    build_attention,
    collect_structures,
)
from ..nn.phrase_transformer import HypernodeSpec

if TYPE_CHECKING:
    from ..decode.cuda_graphs import StaticCache


@dataclass
class EncoderOutput:
    memory: Tensor  # (B, S', D); S' = S + N when the decoder sees hypernodes too
    mask: Tensor  # (B, S') bool, True = real position
    structures: dict[str, Tensor] = field(default_factory=dict)  # source structures for cross-attention
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    attentions: dict[str, list[Tensor]] = field(default_factory=dict)  # role -> per layer (B, H, S', S') when requested

    def reorder(self, index: Tensor) -> EncoderOutput:
        return EncoderOutput(
            memory=self.memory.index_select(0, index),
            mask=self.mask.index_select(0, index),
            structures={k: v.index_select(0, index) for k, v in self.structures.items()},
        )

    def padded(self, rows: int, length: int) -> EncoderOutput | None:
        """This output for ``rows`` >= B sentences of ``length`` >= S' positions (decoding in fixed shapes,
        :class:`structnmt.decode.cuda_graphs.GraphPool`): the added sentences repeat the first, the added
        positions are masked zeros. None with source structures (their layout is the mechanism's)."""
        if self.structures:
            return None
        out = self.reorder(padded_batch_rows(self.memory.shape[0], rows, self.memory.device))
        extra = length - out.memory.shape[1]
        return EncoderOutput(memory=F.pad(out.memory, (0, 0, 0, extra)), mask=F.pad(out.mask, (0, extra), value=False))


def padded_batch_rows(batch: int, rows: int, device) -> Tensor:
    """(rows,) long: 0..batch-1, then 0 for the rest (the rows a padded batch takes)."""
    return F.pad(torch.arange(batch, device=device), (0, rows - batch))


@dataclass
class ModelOutput:
    logits: Tensor  # (B, T, V)
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    attentions: dict[str, list[Tensor]] = field(default_factory=dict)  # role -> per layer (B, H, T, S)


def sinusoidal_table(n: int, d: int) -> Tensor:
    """(n, d) sinusoidal position encodings (sin on even, cos on odd dimensions)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return table


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        self.act = F.gelu if cfg.activation == "gelu" else F.relu
        self.activation_dropout = cfg.activation_dropout

    def forward(self, x: Tensor) -> Tensor:
        h = drop.dropout(self.act(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(h)


class Sublayer(nn.Module):
    """Residual wrapper with pre- or post-norm: pre: x + f(LN(x)); post: LN(x + f(x))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.pre_norm = pre_norm

    def inp(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:
        x = drop.residual_dropout(x, y, self.dropout, self.training)
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    """Attention sublayer, an optional second attention sublayer, feed-forward sublayer.

    A mechanism with ``has_second_phase = True`` (PhraseTransformer's within-phrase
    attention) gets a second residual sublayer of its own, run through its
    ``second_phase(x, ctx)``; its weights, if requested, come back in
    ``extras["within_weights"]`` of the returned attention output.
    """

    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        spec = cfg.attention.spec("encoder_self", index)
        dims = AttentionDims(cfg.d_model, cfg.heads, cfg.attention_dropout, "encoder_self", f"enc.{index}.self")
        self.self_attn = build_attention(spec.name, spec.options, dims)
        self.attn_sub = Sublayer(cfg.d_model, cfg.dropout, cfg.pre_norm)
        two = self.self_attn.has_second_phase
        self.second_sub = Sublayer(cfg.d_model, cfg.dropout, cfg.pre_norm) if two else None
        self.ffn = FeedForward(cfg)
        self.ffn_sub = Sublayer(cfg.d_model, cfg.dropout, cfg.pre_norm)

    def forward(self, x: Tensor, ctx: AttentionContext):
        h = self.attn_sub.inp(x)
        a = self.self_attn(h, h, ctx)
        x = self.attn_sub.out(x, a.output)
        if self.second_sub is not None:
            p = self.self_attn.second_phase(self.second_sub.inp(x), ctx)
            x = self.second_sub.out(x, p.output)
            if p.weights is not None:
                a = AttentionOutput(a.output, a.weights, a.aux_losses, {**a.extras, "within_weights": p.weights})
        x = self.ffn_sub.out(x, self.ffn(self.ffn_sub.inp(x)))
        return x, a


def hypernode_plan(layers: nn.ModuleList) -> tuple[int, HypernodeSpec] | None:
    """(index of the first layer whose mechanism adds hypernodes, their spec), or None.

    Every such layer must agree on the spec (one set of nodes travels through the stack),
    and the layers from that one on must be able to attend over nodes that are not
    tokens: PhraseTransformer layers or plain ``mha``.
    """
    first: tuple[int, HypernodeSpec] | None = None
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        spec = attn.hypernodes()
        if spec is not None:
            if first is None:
                first = (i, spec)
            elif spec != first[1]:
                raise ConfigError(f"encoder layers {first[0]} and {i} ask for different hypernodes ({first[1]} vs "
                                  f"{spec}); one set of hypernodes travels through the encoder: give every "
                                  "layer that adds them the same options.")
        elif first is not None and not attn.attends_hypernodes:
            raise ConfigError(f"encoder layer {i} ({type(attn).__name__}) comes after the hypernodes enter (layer "
                              f"{first[0]}) but cannot attend over nodes that are not tokens (its mechanism does "
                              "not set attends_hypernodes; mha and phrase_transformer do); move it below layer "
                              f"{first[0]}.")
    return first


class EncoderStack(nn.Module):
    """The encoder's layers and final norm over embedded tokens, with hypernodes.

    Shared by the translator's encoder, the probing encoder and the tagger.
    ``forward(x (B, S, D), mask (B, S), structures, need_weights)`` returns the states of
    every node (B, S', D) (``S' = S + N`` when a PhraseTransformer layer adds hypernodes),
    their mask, the per-layer aux losses and, when requested, the per-layer weights
    (phase 1 under ``encoder_self``, phase 2 under ``encoder_within``).
    """

    def __init__(self, cfg: ModelConfig, n_layers: int, positions: Tensor):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg, i) for i in range(n_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.plan = hypernode_plan(self.layers)
        self.register_buffer("positions", positions, persistent=False)

    @property
    def decoder_sees_all(self) -> bool:
        return self.plan is not None and self.plan[1].decoder_sees == "all"

    def forward(self, x: Tensor, mask: Tensor, structures: dict[str, Tensor], need_weights: bool = False):
        aux: dict[str, Tensor] = {}
        attentions: dict[str, list[Tensor]] = {"encoder_self": [], "encoder_within": []}
        for i, layer in enumerate(self.layers):
            if self.plan is not None and i == self.plan[0]:
                x, mask = self.plan[1].append(x, mask, structures, self.positions)  # the mechanism's nodes
            ctx = AttentionContext(key_mask=mask, structures=structures, need_weights=need_weights)
            x, a = layer(x, ctx)
            _merge_losses(aux, a.aux_losses)
            if a.weights is not None:
                attentions["encoder_self"].append(a.weights)
            if a.extras.get("within_weights") is not None:
                attentions["encoder_within"].append(a.extras["within_weights"])
        return self.norm(x), mask, aux, attentions


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        d = cfg.d_model
        s_spec = cfg.attention.spec("decoder_self", index)
        c_spec = cfg.attention.spec("cross", index)
        self.self_attn = build_attention(
            s_spec.name, s_spec.options,
            AttentionDims(d, cfg.heads, cfg.attention_dropout, "decoder_self", f"dec.{index}.self"))
        self.cross_attn = build_attention(
            c_spec.name, c_spec.options,
            AttentionDims(d, cfg.heads, cfg.attention_dropout, "cross", f"dec.{index}.cross"))
        self.self_sub = Sublayer(d, cfg.dropout, cfg.pre_norm)
        self.cross_sub = Sublayer(d, cfg.dropout, cfg.pre_norm)
        self.ffn = FeedForward(cfg)
        self.ffn_sub = Sublayer(d, cfg.dropout, cfg.pre_norm)

    def forward(self, x: Tensor, memory: Tensor, self_ctx: AttentionContext, cross_ctx: AttentionContext):
        h = self.self_sub.inp(x)
        a = self.self_attn(h, h, self_ctx)
        x = self.self_sub.out(x, a.output)
        c = self.cross_attn(self.cross_sub.inp(x), memory, cross_ctx)
        x = self.cross_sub.out(x, c.output)
        x = self.ffn_sub.out(x, self.ffn(self.ffn_sub.inp(x)))
        return x, a, c


def _merge_losses(into: dict[str, Tensor], new: dict[str, Tensor]) -> None:
    for k, v in new.items():
        into[k] = into[k] + v if k in into else v


class TransformerModel(nn.Module):
    """Encoder-decoder Transformer; see the module docstring for the decoding protocol."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if cfg.share_all_embeddings and src_vocab_size != tgt_vocab_size:
            raise ConfigError(f"model.share_all_embeddings needs one joint vocabulary, but the source has "
                              f"{src_vocab_size} pieces and the target {tgt_vocab_size}; prepare without "
                              "--separate-vocab or set model.share_all_embeddings=false.")
        self.cfg = cfg
        d = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab_size, d, padding_idx=PAD)
        self.tgt_embed = self.src_embed if cfg.share_all_embeddings else nn.Embedding(tgt_vocab_size, d, padding_idx=PAD)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, mean=0.0, std=d**-0.5)
            nn.init.zeros_(emb.weight[PAD])
        self.register_buffer("positions", sinusoidal_table(cfg.max_positions, d), persistent=False)
        self.encoder = EncoderStack(cfg, cfg.encoder_layers, self.positions)
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.decoder_layers))
        self.decoder_norm = nn.LayerNorm(d) if cfg.pre_norm else nn.Identity()
        self.output_proj = nn.Linear(d, tgt_vocab_size, bias=False)
        if cfg.tie_output or cfg.share_all_embeddings:
            self.output_proj.weight = self.tgt_embed.weight
        else:
            nn.init.normal_(self.output_proj.weight, mean=0.0, std=d**-0.5)
        self.embed_scale = math.sqrt(d)
        if cfg.attention_init == "xavier":
            for module in self.modules():
                if isinstance(module, MultiHeadAttention):
                    module.xavier_init()

    @property
    def encoder_layers(self) -> nn.ModuleList:
        """The encoder's layers (``self.encoder.layers``)."""
        return self.encoder.layers

    def required_structures(self) -> dict:
        """Structure tensors the attention modules consume: key -> StructureSpec, gathered from every
        mechanism (:func:`~structnmt.nn.attention.collect_structures`); the trainer and the translator
        add them to what the collator builds (on top of ``data.structures``)."""
        return collect_structures(self)

    def optimizer_groups(self) -> list[dict]:
        """Parameter groups for the optimizer, each with an ``lr_scale``: one group."""
        return [{"params": list(self.parameters()), "lr_scale": 1.0}]

    def _embed(self, emb: nn.Embedding, tokens: Tensor, offset: int = 0) -> Tensor:
        T = tokens.shape[1]
        if offset + T > self.positions.shape[0]:
            raise ValueError(f"sequence of length {offset + T} exceeds model.max_positions={self.positions.shape[0]}.")
        x = emb(tokens) * self.embed_scale + self.positions[offset : offset + T]
        return drop.dropout(x, self.cfg.dropout, self.training)

    def encode(
        self, src: Tensor, src_mask: Tensor, structures: dict[str, Tensor] | None = None, need_weights: bool = False
    ) -> EncoderOutput:
        """src (B, S) ids, src_mask (B, S) bool -> EncoderOutput."""
        structures = structures or {}
        x, mask, aux, attentions = self.encoder(self._embed(self.src_embed, src), src_mask, structures, need_weights)
        if not self.encoder.decoder_sees_all:  # Algorithm 1 line 6: the decoder sees the S tokens
            S = src.shape[1]
            x, mask = x[:, :S], mask[:, :S]
        return EncoderOutput(x, mask, dict(structures), aux, attentions)

    def decode(
        self,
        tgt_in: Tensor,
        enc: EncoderOutput,
        *,
        cache: IncrementalCache | None = None,
        offset: int = 0,
        need_weights: bool = False,
    ) -> ModelOutput:
        """tgt_in (B, T) -> logits (B, T, V). With a cache, ``tgt_in`` holds only new steps."""
        x = self._embed(self.tgt_embed, tgt_in, offset)
        group = tgt_in.shape[0] // enc.memory.shape[0]
        if group * enc.memory.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"{tgt_in.shape[0]} target rows do not make groups over {enc.memory.shape[0]} source rows.")
        if group > 1 and not self.shares_source_across_beam():
            raise ValueError("this model's decoder cannot read one encoder row per sentence for several hypotheses "
                             "(see shares_source_across_beam); reorder the encoder output to the target rows.")
        self_ctx = AttentionContext(causal=True, cache=cache, need_weights=need_weights, query_offset=offset,
                                    structures=enc.structures)
        cross_ctx = AttentionContext(key_mask=enc.mask, cache=cache, need_weights=need_weights,
                                     query_offset=offset, structures=enc.structures, memory_group=group)
        aux: dict[str, Tensor] = {}
        attn: dict[str, list[Tensor]] = {"decoder_self": [], "cross": []}
        for layer in self.decoder_layers:
            x, a, c = layer(x, enc.memory, self_ctx, cross_ctx)
            _merge_losses(aux, a.aux_losses)
            _merge_losses(aux, c.aux_losses)
            if a.weights is not None:
                attn["decoder_self"].append(a.weights)
            if c.weights is not None:
                attn["cross"].append(c.weights)
        logits = self.output_proj(self.decoder_norm(x))
        return ModelOutput(logits, aux, attn)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        structures: dict[str, Tensor] | None = None,
        need_weights: bool = False,
    ) -> ModelOutput:
        """Teacher-forced pass: src (B, S), src_mask (B, S), tgt_in (B, T) -> ModelOutput."""
        enc = self.encode(src, src_mask, structures, need_weights)
        out = self.decode(tgt_in, enc, need_weights=need_weights)
        _merge_losses(out.aux_losses, enc.aux_losses)
        if need_weights:
            out.attentions.update({k: v for k, v in enc.attentions.items() if v})
        return out

    def shares_source_across_beam(self) -> bool:
        """Whether beam search may keep one encoder row per sentence for all its hypotheses.

        True when every cross-attention is plain MHA (``groups_memory``) and no decoder
        self-attention reads the source structures (which would then have one row per
        sentence, not per hypothesis). Beam search then passes target rows
        ``N = sentences x beam`` with a sentence-level ``EncoderOutput``
        (``AttentionContext.memory_group``), and copies no source state per hypothesis.
        """
        for layer in self.decoder_layers:
            if not layer.cross_attn.groups_memory or collect_structures(layer.self_attn):
                return False
        return True

    def static_decoding_refusal(self) -> str | None:
        """Why this decoder cannot run in fixed shapes (:mod:`structnmt.decode.cuda_graphs`), or None: every
        decoder attention must declare ``decodes_in_fixed_shapes`` (plain multi-head attention and Rel_Pos; the
        others read the step's position or their phrase boundaries on the host)."""
        for i, layer in enumerate(self.decoder_layers):
            for role, name, module in (("self-attention", "decoder_self", layer.self_attn),
                                       ("cross-attention", "cross", layer.cross_attn)):
                if not getattr(module, "decodes_in_fixed_shapes", False):
                    mechanism = self.cfg.attention.spec(name, i).name
                    return (f"decoder layer {i}'s {role} is {mechanism} (model.attention.{name}), and only plain "
                            "multi-head attention (mha) and rel_pos decode in fixed shapes")
        return None

    @torch.no_grad()
    def decode_static(self, last_tokens: Tensor, enc: EncoderOutput, cache: StaticCache) -> Tensor:
        """One decoding step in fixed shapes: last_tokens (N, 1) at position ``cache.position`` (a device
        tensor) -> logits (N, V). Self-attention reads the cache's ``capacity`` positions, those after this
        one masked; nothing here reads a device value on the host (a CUDA graph replays it)."""
        if cache.capacity > self.positions.shape[0]:  # checked on the host: a replay cannot raise
            raise ValueError(f"sequence of length {cache.capacity} exceeds model.max_positions={self.positions.shape[0]}.")
        x = self.tgt_embed(last_tokens) * self.embed_scale + self.positions.index_select(0, cache.position.view(1))
        x = drop.dropout(x, self.cfg.dropout, self.training)
        group = last_tokens.shape[0] // enc.memory.shape[0]
        self_ctx = AttentionContext(key_mask=cache.self_key_mask(), cache=cache, structures=enc.structures,
                                    query_offset=cache.position)
        cross_ctx = AttentionContext(key_mask=enc.mask, cache=cache, structures=enc.structures, memory_group=group,
                                     query_offset=cache.position)
        for layer in self.decoder_layers:
            x = layer(x, enc.memory, self_ctx, cross_ctx)[0]
        return self.output_proj(self.decoder_norm(x))[:, -1]

    @torch.no_grad()
    def decode_step(self, prev_tokens: Tensor, enc: EncoderOutput, cache: IncrementalCache,
                    log_probs: bool = True) -> Tensor:
        """prev_tokens (N, t): all tokens so far; returns log-probs (N, V) of the next one
        (``log_probs=False``: the logits, in the model's dtype, for callers that normalise them
        themselves, as beam search does).

        ``enc`` has N rows, or one per sentence when ``N`` = sentences x beam and
        :meth:`shares_source_across_beam` holds."""
        t = prev_tokens.shape[1]
        out = self.decode(prev_tokens[:, -1:], enc, cache=cache, offset=t - 1)
        logits = out.logits[:, -1]  # in the model's dtype: beam search normalises bfloat16 logits itself
        return torch.log_softmax(logits.float(), dim=-1) if log_probs else logits
