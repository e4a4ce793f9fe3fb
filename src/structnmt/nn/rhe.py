"""Redundant Head Enlivening (RHE; Wang et al., "Enlivening Redundant Heads in Multi-head
Self-attention for Machine Translation", §4.2-4.3): identify, per sentence and head,
the heads whose plain attention carries no syntactic function, and give only those the
syntax-enhanced attention of :mod:`structnmt.nn.sea` (DEA or LPEA).

Identification (per sentence ``b`` and head ``h``, on the head's **plain** attention
``A`` (B, H, T, S) — before any enhancement, detached; after DEA every head would look
syntactic):

* head confidence, eq. 3 (Voita et al. 2019): ``h_conf = 1/n sum_i max_j A_ij`` over the
  sentence's real query tokens (padding excluded; EOS too unless ``exclude_eos: false``).
  Voita et al.'s "maximum attention weight, excluding the end of sentence symbol" has two
  readings: the EOS **query row** left out of the average (the default) or the EOS **key
  column** left out of each row's maximum (``exclude_eos_key: true``, combinable), which
  lowers the confidence of a head that parks its mass on EOS (the paper's Fig. 5 (a));
* syntactic attention, eq. 9: ``Syn_attn = 1/n sum_i sum_j Dep_mask_ij A_ij`` — the mass
  on the word itself and its head and dependents (the DEA mask of eq. 5), same tokens;
* eq. 10: ``h_label = 1`` (important) iff ``Syn_attn > Syn_gate``; the gate is
  ``dynamic``: ``sigmoid(h_conf)`` (eq. 10, the default), ``fixed``: a constant
  (``fixed_gate``, Fig. 4's 0.1..0.5: ``Syn_attn > fixed_gate``), or
  ``confidence``: ``h_conf`` itself (the prose of §4.2: "when the average of syntactic
  attention weights is higher than the average of maximum attention weights").

Enlivening: the output weights are ``where(important, A, A_SEA)`` per (sentence, head),
with ``A_SEA`` the same head's DEA or LPEA distribution (same queries, keys, values);
``redundant_action: prune`` gives redundant heads a zero output instead (Table 2's
pruning row; it has no enhancement, so it needs ``enhancement: none``). Pruning saves no
computation here: identification needs every head's plain attention of the very sentence,
so the pruned heads' weights are computed before they are zeroed (the paper's "training
speed improves slightly" can only come from removing heads fixed once for all sentences). ``heads: all`` gives every head ``A_SEA`` — the paper's "+DEA"/"+LPEA" rows
(Table 1), where no identification is needed.

The base attention is any plain mechanism that only changes logits and values:
``mha`` (Table 1), ``rel_pos`` or ``localness`` (one reading of Table 2's "Rel_Pos + RHE",
"Localness + RHE": the baseline on every head, LPEA on its redundant ones): "plain" then
means the base's own distribution (its relative-position or Gaussian term included), and
the enhancement is added on top of the base's logits. The base's parameters live in
``self.base``, so RHE adds only the enhancement's. The other reading of Table 2 ("RHE
lifts Rel_Pos": the baseline's enhancement given to the redundant heads only, important
heads kept plain) is ``base: mha, enhancement: rel_pos | localness`` (with
``enhancement_options``): Rel_Pos's key and value terms, or Localness's Gaussian, only on
the heads found redundant.

Inference: identification runs the same way on every sentence being translated (its own
plain attention in eval mode, no dropout), so the parse of the test sentence decides which
heads are enlivened, as in training. Nothing is stored on the module.

Placement: encoder self-attention only (the paper's setting); the layer is chosen with a
per-layer override, the first encoder layer by default (configs/rhe/).

Extras (for analysis, ``structnmt analyze``, the head-role statistics):
``head_important`` (B, H) bool, ``h_conf`` (B, H), ``syn_attn`` (B, H) — whenever
identification ran — and ``plain_weights`` (B, H, T, S) when weights were requested.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, build_dataclass
from ..syntax.batching import StructureSpec
from ..syntax.features import LPEA_RULES
from .attention import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    Mechanism,
    MultiHeadAttention,
    build_attention,
    masked_softmax,
    merge_heads,
    register_attention,
    split_heads,
)
from .head_identification import (  # noqa: F401 (identify_heads, query_tokens: the module's API too)
    DEP_MASK_KEY,
    GATES,
    HeadRoles,
    dep_mask_spec,
    dependency_allowed,
    eos_position,
    identify_heads,
    query_tokens,
)
from .localness import LocalnessAttention, LocalnessBias, check_options
from .relative_position import RelativePositionAttention, RelativePositions
from .sea import LocalPhraseBias, structure

ENHANCEMENTS = ("dea", "lpea", "rel_pos", "localness", "none")
HEAD_SETS = ("redundant", "all")
ACTIONS = ("enliven", "prune")
BASES = ("mha", "rel_pos", "localness")


# --------------------------------------------------------------------------- the enhancements


@dataclass
class HeadScores:
    """What an enhancement reads to give a head its distribution A_SEA, all from one call of the layer.

    scores (B, H, T, S): the base's logits q k^T / sqrt(d) (+ the base's own bias); plain: their masked
    softmax, the base's distribution; q (B, H, T, d); allowed (B, 1, 1, S) bool or None: the key mask;
    dep (B, 1, T, S) bool or None: the DEA mask of eq. 5 (self, head, dependents)."""

    scores: Tensor
    plain: Tensor
    q: Tensor
    allowed: Tensor | None
    dep: Tensor | None
    ctx: AttentionContext
    who: str  # names the layer in a missing-structure sentence


class Enhancement(nn.Module):
    """The interface of RHE's enhancements: :meth:`distribution` gives a head's A_SEA (B, H, T, S) float32,
    :meth:`value_term` what it adds to the output (Rel_Pos's value vectors), :meth:`required_structures`
    what the collator builds for it. One small class per enhancement below; :func:`build_enhancement`
    picks it from ``RHEAttention.Options``."""

    #: reads the DEA mask (eq. 5) even when no identification runs
    needs_dependencies: bool = False
    #: adds :meth:`value_term` to the output of the heads that get it
    has_value_term: bool = False

    def required_structures(self) -> dict[str, StructureSpec]:
        return {}

    def distribution(self, h: HeadScores) -> Tensor:
        raise NotImplementedError

    def value_term(self, dropped: Tensor) -> Tensor | None:
        """What the heads that got this enhancement add to ``dropped @ v`` (``dropped``: their weights)."""
        return None


class DEA(Enhancement):
    """Dependency-enhanced attention, eq. 4: the base's logits + D (0 on the DEA mask, -inf elsewhere)."""

    needs_dependencies = True

    def distribution(self, h: HeadScores) -> Tensor:
        return masked_softmax(h.scores, h.dep if h.allowed is None else h.dep & h.allowed)


class LPEA(LocalPhraseBias, Enhancement):
    """Local-phrase enhanced attention, eqs. 6-8: the base's logits + P inside the local phrase, -inf outside.
    (A :class:`~structnmt.nn.sea.LocalPhraseBias`: its parameters keep their names in a checkpoint.)"""

    def required_structures(self) -> dict[str, StructureSpec]:
        return LocalPhraseBias.required_structures(self)

    def distribution(self, h: HeadScores) -> Tensor:
        T, S = h.scores.shape[-2:]
        p_bias, inside = self(structure(h.ctx.structures, self.key, h.who), T, S)
        return masked_softmax(h.scores + p_bias, inside if h.allowed is None else inside & h.allowed)  # eq. 6


class RelPos(RelativePositions, Enhancement):
    """Rel_Pos (Shaw et al. 2018) as an enhancement: its key term in the logits, its value term in the output."""

    has_value_term = True

    def distribution(self, h: HeadScores) -> Tensor:
        return masked_softmax(h.scores + self.key_term(h.q, h.scores.shape[-1]), h.allowed)

    def value_term(self, dropped: Tensor) -> Tensor | None:
        return RelativePositions.value_term(self, dropped)


class Localness(LocalnessBias, Enhancement):
    """Localness (Yang et al. 2018) as an enhancement: its Gaussian bias in the logits."""

    def distribution(self, h: HeadScores) -> Tensor:
        return masked_softmax(h.scores + self(h.q, h.ctx.key_mask, h.scores.shape[-1]), h.allowed)


class Plain(Enhancement):
    """No enhancement: the base's own distribution (``enhancement: none``)."""

    def distribution(self, h: HeadScores) -> Tensor:
        return h.plain


class Prune(Enhancement):
    """``redundant_action: prune``: the head gives no output (Table 2's pruning row)."""

    def distribution(self, h: HeadScores) -> Tensor:
        return torch.zeros_like(h.plain)


#: the attribute an enhancement is kept under in RHEAttention (its parameters' names in a checkpoint)
ENHANCEMENT_ATTRIBUTE = {"dea": "dea", "lpea": "lpea", "rel_pos": "rel", "localness": "loc", "none": "plain"}


def build_enhancement(options, dims: AttentionDims, where: str) -> Enhancement:
    """The enhancement ``options`` (``RHEAttention.Options``) names, with its own options checked."""
    d_head = dims.d_model // dims.heads
    if options.redundant_action == "prune":
        return Prune()
    if options.enhancement not in ("rel_pos", "localness") and options.enhancement_options:
        raise ConfigError(f"{where}: enhancement_options are for enhancement rel_pos or localness, not "
                          f"'{options.enhancement}'.")
    if options.enhancement == "dea":
        return DEA()
    if options.enhancement == "lpea":
        return LPEA(k=options.k, d=d_head, rule=options.rule)
    if options.enhancement == "rel_pos":  # the baselines as enhancements of the redundant heads only (Table 2)
        ro = build_dataclass(RelativePositionAttention.Options, dict(options.enhancement_options),
                             f"{where}.enhancement_options")
        if ro.k < 0:
            raise ConfigError(f"{where}.enhancement_options: k must be >= 0, got {ro.k}.")
        return RelPos(k=ro.k, d=d_head, shared_table=ro.shared_table)
    if options.enhancement == "localness":
        lo = build_dataclass(LocalnessAttention.Options, dict(options.enhancement_options),
                             f"{where}.enhancement_options")
        check_options(lo, f"{where}.enhancement_options")
        return Localness(d_model=dims.d_model, heads=dims.heads, options=lo)
    return Plain()


def check_rhe_options(options, where: str) -> None:
    """One sentence for an option of ``RHEAttention.Options`` out of range, or two that do not go together."""
    for name, value, valid in (("base", options.base, BASES), ("enhancement", options.enhancement, ENHANCEMENTS),
                               ("heads", options.heads, HEAD_SETS), ("redundant_action", options.redundant_action,
                                                                     ACTIONS), ("gate", options.gate, GATES)):
        if value not in valid:
            raise ConfigError(f"{where}: unknown {name} '{value}'; use one of {', '.join(valid)}.")
    if options.redundant_action == "prune" and options.heads != "redundant":
        raise ConfigError(f"{where}: redundant_action 'prune' removes the redundant heads, so it needs "
                          "heads: redundant (heads: all would prune every head).")
    if options.redundant_action == "prune" and options.enhancement != "none":
        raise ConfigError(f"{where}: redundant_action 'prune' gives the redundant heads no output, so no "
                          f"enhancement is used; set enhancement: none (got '{options.enhancement}').")
    if options.enhancement in ("rel_pos", "localness") and options.base == options.enhancement:
        raise ConfigError(f"{where}: base and enhancement are both '{options.base}', which would add a second, "
                          f"separate {options.base} term on the redundant heads; use base: mha with "
                          f"enhancement: {options.base}, or base: {options.base} with enhancement: lpea or dea.")
    if options.rule not in LPEA_RULES:
        raise ConfigError(f"{where}: unknown rule '{options.rule}'; use one of {', '.join(LPEA_RULES)}.")
    if not 0.0 < options.fixed_gate <= 1.0:
        raise ConfigError(f"{where}: fixed_gate must be in (0, 1], got {options.fixed_gate}.")
    if options.k < 0:
        raise ConfigError(f"{where}: k must be >= 0, got {options.k}.")


@register_attention("rhe")
class RHEAttention(Mechanism):
    """Encoder self-attention with DEA/LPEA for all heads or for the redundant ones only."""

    @dataclass
    class Options:
        base: str = "mha"  # mha | rel_pos | localness: the plain attention being enlivened
        base_options: dict[str, Any] = field(default_factory=dict)  # options of the base mechanism
        enhancement: str = "lpea"  # dea (eqs. 4-5) | lpea (eqs. 6-8) | rel_pos | localness | none
        enhancement_options: dict[str, Any] = field(default_factory=dict)  # rel_pos / localness options
        heads: str = "redundant"  # redundant: the +RHE rows | all: the +DEA / +LPEA rows
        redundant_action: str = "enliven"  # enliven (SEA) | prune (zero output; Table 2)
        gate: str = "dynamic"  # dynamic: sigmoid(h_conf) (eq. 10) | fixed | confidence (Syn_attn > h_conf)
        fixed_gate: float = 0.3  # the constant of gate: fixed (Fig. 4 sweeps 0.1..0.5)
        exclude_eos: bool = True  # leave the EOS row out of eqs. 3 and 9 (Voita et al.)
        exclude_eos_key: bool = False  # leave the EOS column out of each row's maximum in eq. 3 (the other reading)
        k: int = 6  # LPEA clipping distance (Table 3 sweeps 0..16)
        rule: str = "rule2"  # local-phrase rules of §4.1: rule1 | rule2 (Rule 2 symmetric) | rule2_literal (j < i only)

    def __init__(self, *, dims: AttentionDims, options: RHEAttention.Options | None = None):
        super().__init__()
        options = options if options is not None else RHEAttention.Options()
        where = f"model.attention ({dims.cache_key}) rhe options"
        if dims.role != "encoder_self":
            raise ConfigError(
                f"model.attention ({dims.cache_key}): rhe is defined for encoder self-attention (the paper's setting); "
                "use it under encoder_self or an 'encoder_self.<layer>' override."
            )
        check_rhe_options(options, where)
        self.options = options
        self.dims = dims
        self.heads = dims.heads
        self.base = build_attention(options.base, options.base_options, dims)
        if not isinstance(self.base, MultiHeadAttention):
            raise ConfigError(f"{where}: base '{options.base}' is not a plain multi-head attention.")
        self.enhancement_attribute = "prune" if options.redundant_action == "prune" else \
            ENHANCEMENT_ATTRIBUTE[options.enhancement]
        setattr(self, self.enhancement_attribute, build_enhancement(options, dims, where))

    @property
    def enhancement(self) -> Enhancement:
        """The enhancement the redundant (or all) heads get (kept under its own attribute name)."""
        return getattr(self, self.enhancement_attribute)

    # -- what the collator must build
    @property
    def needs_dependencies(self) -> bool:
        """Identification (eq. 9) and DEA read the dependency mask; LPEA/Rel_Pos/Localness on all heads do not."""
        return self.identifies or self.enhancement.needs_dependencies

    def required_structures(self) -> dict[str, StructureSpec]:
        out = dep_mask_spec() if self.needs_dependencies else {}
        out.update(self.enhancement.required_structures())
        return out

    @property
    def identifies(self) -> bool:
        return self.options.heads == "redundant"

    def forward(self, query: Tensor, memory: Tensor, ctx: AttentionContext) -> AttentionOutput:
        """query = memory (B, S, D); ctx.key_mask (B, S); structures: the DEA mask (and LPEA positions)."""
        base, opt = self.base, self.options
        who = f"rhe ({self.dims.cache_key})"
        q = split_heads(base.q_proj(query), self.heads)  # (B, H, T, d)
        k, v = base.project_kv(memory, ctx)
        B, H, T, d = q.shape
        S = k.shape[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / d**0.5
        bias = base.logit_bias(query, q, k, ctx)
        if bias is not None:
            scores = scores + bias
        allowed = None if ctx.key_mask is None else ctx.key_mask[:, None, None, :]
        plain = masked_softmax(scores, allowed)  # (B, H, T, S) float32 (float64 models: float64): the base's own distribution

        dep = None
        if self.needs_dependencies or DEP_MASK_KEY in ctx.structures:
            dep = dependency_allowed(structure(ctx.structures, DEP_MASK_KEY, who), T, S)
        extras: dict[str, Any] = {}
        roles = None
        if self.identifies or (ctx.need_weights and dep is not None):
            key_mask = ctx.key_mask if ctx.key_mask is not None else torch.ones(B, S, dtype=torch.bool,
                                                                                 device=q.device)
            roles = identify_heads(plain, dep, query_tokens(key_mask, opt.exclude_eos), gate=opt.gate,
                                   fixed_gate=opt.fixed_gate,
                                   confidence_keys=key_mask & ~eos_position(key_mask) if opt.exclude_eos_key else None)
            extras.update(head_important=roles.important, h_conf=roles.h_conf, syn_attn=roles.syn_attn)

        enhanced = self.enhancement.distribution(HeadScores(scores, plain, q, allowed, dep, ctx, who))

        if opt.heads == "all":
            weights = enhanced
        else:
            weights = torch.where(roles.important[:, :, None, None], plain, enhanced)
        weights = weights.to(q.dtype)
        dropped = F.dropout(weights, p=self.dims.dropout, training=self.training and self.dims.dropout > 0)
        out = torch.matmul(dropped, v)
        if base.uses_value_term:
            out = out + base.value_term(dropped, ctx)
        if self.enhancement.has_value_term:  # e.g. Rel_Pos's value term, on the heads that got the enhancement
            on = dropped if opt.heads == "all" else dropped.masked_fill(roles.important[:, :, None, None], 0.0)
            out = out + self.enhancement.value_term(on)
        if ctx.need_weights:
            extras["plain_weights"] = plain.to(q.dtype)
        return AttentionOutput(output=base.out_proj(merge_heads(out)),
                               weights=weights if ctx.need_weights else None, extras=extras)
