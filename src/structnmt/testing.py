"""The contract check of an attention mechanism, one line for a plugin's author::

    from structnmt.testing import check_mechanism
    check_mechanism("my_mechanism", {"k": 3})      # raises ContractError naming every broken rule

It builds a small Transformer (float64, CPU, no dropout) with the mechanism in every layer of each role it
accepts (encoder self-attention, decoder self-attention, cross-attention; a role whose construction raises a
``ConfigError`` is left out and listed in the report, then the first layer alone is tried) and checks the
contract of :mod:`structnmt.nn.attention` on batches with parses (the synthetic grammar's gold trees, one
piece per word, built by the collator's own :func:`~structnmt.syntax.batching.build_structures`):

1. **padding**: a batch of sentences of different lengths, padded, gives each sentence the logits it gets
   alone (no padding); its weights on padded keys are exactly zero;
2. **weights on and off**: ``need_weights=True`` changes no output;
3. **incremental decoding** (decoder roles): step-by-step decoding with the cache equals the full pass, also
   after a beam reordering of the cache (a hypothesis dropped, one duplicated);
4. **finite**: no NaN or inf in the logits, the weights (padded query rows included) or any gradient, with a
   one-word sentence in the batch;
5. **outputs**: every auxiliary loss is a finite scalar, and every tensor in ``extras`` and every weight map
   has the batch first;
6. **no hidden state**: a second identical call gives the same output (nothing kept on the module);
7. **reweight** (a mechanism whose :meth:`~structnmt.nn.attention.MultiHeadAttention.reweight` is overridden):
   the hook keeps the weights' shape and dtype, holds no NaN or inf, keeps every masked key (padding, later
   positions under causality, ``logit_mask``) at exactly 0, in full passes with and without weights, and is
   applied in every step of incremental decoding (decoder roles), whose outputs rule 3 compares with the full
   pass. A hook that changes the shape stops the other rules of its role (they could not run).

The returned :class:`CheckReport` says which roles were checked and which were left out, and why.
tests/test_check_mechanism.py runs it on every mechanism of the package, and on broken ones it must catch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .config import AttentionPlan, AttentionSpec, ConfigError, ModelConfig
from .data.synthetic import SynthConfig, generate
from .data.vocab import BOS, PAD
from .models import build_model
from .nn.attention import ATTENTION_REGISTRY, AttentionOutput, IncrementalCache, Mechanism
from .syntax.batching import build_structures
from .syntax.io import parse_ptb
from .syntax.trees import ConstituencyTree, DependencyTree

ROLES = ("encoder_self", "decoder_self", "cross")
VOCAB = 40
ATOL = 1e-6


class ContractError(AssertionError):
    """A mechanism broke the contract: the message lists every rule it broke, one sentence each."""


@dataclass
class CheckReport:
    """What :func:`check_mechanism` checked: the roles (and layers) it ran, the roles left out with the reason."""

    name: str
    checked: list[str] = field(default_factory=list)  # "encoder_self (every layer)", ...
    left_out: dict[str, str] = field(default_factory=dict)  # role -> the ConfigError's sentence
    failures: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"check_mechanism({self.name!r}): checked {', '.join(self.checked) or 'no role'}"]
        lines += [f"  left out {r}: {why}" for r, why in self.left_out.items()]
        lines += [f"  FAILED: {f}" for f in self.failures]
        return "\n".join(lines)


# --------------------------------------------------------------------------- batches with parses


def _one_word() -> tuple[DependencyTree, ConstituencyTree]:
    return (DependencyTree(words=["dogs"], heads=[0], deprels=["root"], upos=["NOUN"], xpos=["NNS"]),
            parse_ptb("(S (NP (NNS dogs)))"))


def example_trees(n: int = 3, seed: int = 7) -> list[tuple[DependencyTree, ConstituencyTree]]:
    """``n`` parsed sentences of different lengths from the synthetic grammar (gold trees), the last of one
    word."""

    examples = generate(SynthConfig(seed=seed, n_train=1, n_valid=1, n_test=40))["test"]
    lengths: dict[int, Any] = {}
    for ex in examples:
        lengths.setdefault(len(ex.src), ex)
    picked = [lengths[k] for k in sorted(lengths)[: n - 1]][::-1]  # the longest first
    return [(ex.dep, parse_ptb(ex.tree)) for ex in picked] + [_one_word()]


def _labels(trees) -> dict[str, int]:
    labels: set[str] = set()
    for _, cons in trees:
        stack = [cons.root]
        while stack:
            node = stack.pop()
            labels.add(node.label)
            stack.extend(node.children)
    return {x: i for i, x in enumerate(sorted(labels))}


@dataclass
class _Batch:
    src: Tensor  # (B, S) padded
    mask: Tensor  # (B, S)
    tgt: Tensor  # (B, T)
    trees: list
    wops: list[np.ndarray]
    labels: dict[str, int]


def _batch(trees, T: int = 6, seed: int = 3) -> _Batch:
    g = torch.Generator().manual_seed(seed)
    lengths = [len(dep.words) + 1 for dep, _ in trees]  # one piece per word, and EOS
    S = max(lengths)
    src = torch.full((len(trees), S), PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(4, VOCAB, (n,), generator=g)
    tgt = torch.randint(4, VOCAB, (len(trees), T), generator=g)
    tgt[:, 0] = BOS
    return _Batch(src, src != PAD, tgt, list(trees), [np.arange(n - 1) for n in lengths], _labels(trees))


def _structures(model, b: _Batch, rows: list[int], S: int) -> dict[str, Tensor]:
    specs = model.required_structures()
    if not specs:
        return {}
    return {k: v for k, v in build_structures(specs, [b.trees[i] for i in rows], [b.wops[i] for i in rows], S,
                                              b.labels).items()}


# --------------------------------------------------------------------------- the model with the mechanism


def _model(name: str, options: Mapping[str, Any], role: str, first_layer_only: bool):

    spec = AttentionSpec(name, dict(options))
    plan = AttentionPlan(overrides={f"{role}.0": spec}) if first_layer_only else AttentionPlan(**{role: spec})
    cfg = ModelConfig(d_model=16, ffn_dim=32, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      attention=plan, max_positions=64)
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, VOCAB).double()
    model.eval()
    return model


def _mechanisms(model) -> list[Mechanism]:
    return [m for m in model.modules() if isinstance(m, Mechanism) and type(m).__name__ != "MultiHeadAttention"]


# --------------------------------------------------------------------------- the rules


def _check_padding(model, b: _Batch, fail: list[str]) -> None:
    S = b.src.shape[1]
    padded = model(b.src, b.mask, b.tgt, _structures(model, b, list(range(len(b.trees))), S), need_weights=True)
    for i in range(len(b.trees)):
        n = int(b.mask[i].sum())
        alone = model(b.src[i : i + 1, :n], b.mask[i : i + 1, :n], b.tgt[i : i + 1],
                      _structures(model, b, [i], n)).logits
        if not torch.allclose(padded.logits[i : i + 1], alone, atol=ATOL, rtol=ATOL):
            diff = float((padded.logits[i : i + 1] - alone).abs().max())
            fail.append(f"padding: sentence {i + 1} ({n} pieces) gets other logits in a padded batch than alone "
                        f"(max difference {diff:.2e}); does the mechanism read ctx.key_mask, and pad its "
                        "structures?")
    for role in ("encoder_self", "cross"):
        for layer, w in enumerate(padded.attentions.get(role, [])):
            keys = w[..., :S]  # (B, H, rows, S): the source tokens as keys (hypernodes or phrases after them)
            if role == "encoder_self":  # the real tokens as queries
                keys = keys[:, :, :S]
                sel = b.mask[:, None, :, None] & ~b.mask[:, None, None, :]
            else:  # every target query
                sel = ~b.mask[:, None, None, :]
            leak = keys.masked_select(sel.expand_as(keys))
            if leak.numel() and float(leak.abs().max()) != 0.0:
                fail.append(f"masked keys: {role} layer {layer + 1} gives padded source positions weight "
                            f"{float(leak.abs().max()):.2e}; a masked position must get exactly 0.")


def _check_weights_and_state(model, b: _Batch, fail: list[str]) -> None:
    st = _structures(model, b, list(range(len(b.trees))), b.src.shape[1])
    off = model(b.src, b.mask, b.tgt, st).logits
    on = model(b.src, b.mask, b.tgt, st, need_weights=True).logits
    if not torch.allclose(on, off, atol=ATOL, rtol=ATOL):
        fail.append(f"need_weights: asking for the weights changes the output (max difference "
                    f"{float((on - off).abs().max()):.2e}); the weights must be those the output used.")
    again = model(b.src, b.mask, b.tgt, st).logits
    if not torch.equal(again, off):
        fail.append("hidden state: a second identical call gives another output; keep nothing on the module "
                    "between calls (return it in extras).")


def _check_finite(model, b: _Batch, fail: list[str]) -> None:
    model.train()  # gradients as in training (dropout is 0)
    try:
        model.zero_grad(set_to_none=True)
        res = model(b.src, b.mask, b.tgt, _structures(model, b, list(range(len(b.trees))), b.src.shape[1]),
                    need_weights=True)
        if not torch.isfinite(res.logits).all():
            fail.append("finite: the logits hold NaN or inf (with a one-word sentence and padded rows in the "
                        "batch).")
        for role, maps in res.attentions.items():
            for layer, w in enumerate(maps):
                if not torch.isfinite(w).all():
                    fail.append(f"finite: {role} layer {layer + 1}'s weights hold NaN or inf (padded query rows "
                                "included: a row with no key to see must be zeros, not NaN).")
                if w.shape[0] != b.src.shape[0]:
                    fail.append(f"outputs: {role} layer {layer + 1}'s weights have {w.shape[0]} rows first, not "
                                f"the batch's {b.src.shape[0]}.")
        loss = res.logits.sum() + sum((v for v in res.aux_losses.values()), res.logits.new_tensor(0.0))
        loss.backward()
        bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        if bad:
            fail.append(f"finite: NaN or inf in the gradient of {', '.join(bad[:3])}.")
    finally:
        model.eval()


def _check_outputs(model, b: _Batch, fail: list[str]) -> None:
    seen: list[tuple[str, AttentionOutput]] = []
    hooks = [m.register_forward_hook(lambda mod, _i, out: seen.append((type(mod).__name__, out)))
             for m in _mechanisms(model)]
    try:
        model(b.src, b.mask, b.tgt, _structures(model, b, list(range(len(b.trees))), b.src.shape[1]),
              need_weights=True)
    finally:
        for h in hooks:
            h.remove()
    B = b.src.shape[0]
    for who, out in seen:
        if not isinstance(out, AttentionOutput):
            fail.append(f"outputs: {who} returned {type(out).__name__}, not an AttentionOutput.")
            continue
        for key, loss in out.aux_losses.items():
            if not (isinstance(loss, Tensor) and loss.dim() == 0 and torch.isfinite(loss)):
                fail.append(f"outputs: {who}'s aux_losses[{key!r}] is not a finite scalar tensor.")
        for key, value in out.extras.items():
            for t in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(t, Tensor) and (t.dim() == 0 or t.shape[0] != B):
                    fail.append(f"outputs: {who}'s extras[{key!r}] has shape {tuple(t.shape)}; extras have the "
                                f"batch ({B}) first.")


def _check_incremental(model, b: _Batch, fail: list[str], cut: int = 3) -> None:
    st = _structures(model, b, list(range(len(b.trees))), b.src.shape[1])
    T = b.tgt.shape[1]
    full = torch.log_softmax(model(b.src, b.mask, b.tgt, st).logits.float(), dim=-1)
    enc = model.encode(b.src, b.mask, st)
    cache = IncrementalCache()
    steps = torch.stack([model.decode_step(b.tgt[:, : t + 1], enc, cache) for t in range(T)], 1)
    if not torch.allclose(steps, full, atol=1e-5, rtol=1e-5):
        fail.append(f"incremental decoding: step-by-step decoding with the cache differs from the full pass (max "
                    f"difference {float((steps - full).abs().max()):.2e}).")
        return
    B = b.src.shape[0]
    perm = torch.tensor([B - 1] + [0] * (B - 1))  # the last hypothesis first, the first duplicated, the rest dropped
    cache = IncrementalCache()
    for t in range(cut):
        model.decode_step(b.tgt[:, : t + 1], enc, cache)
    cache.reorder(perm)
    tgt = b.tgt[perm]
    got = torch.stack([model.decode_step(tgt[:, : t + 1], enc.reorder(perm), cache) for t in range(cut, T)], 1)
    st_perm = {k: v[perm] for k, v in st.items()}
    want = torch.log_softmax(model(b.src[perm], b.mask[perm], tgt, st_perm).logits.float(), dim=-1)[:, cut:]
    if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
        fail.append("incremental decoding: after a beam reordering of the cache (IncrementalCache.reorder) the "
                    "steps differ from the full pass of the reordered batch; keep the batch first in every "
                    "cached tensor.")


def _masked_keys(m: Mechanism, weights: Tensor, query: Tensor, q: Tensor, k: Tensor, ctx) -> Tensor:
    """(B, H, T, S) bool: the keys no query of this call may see (key mask, causality, ``logit_mask``)."""
    B, H, T, S = weights.shape
    allowed = torch.ones(1, 1, T, S, dtype=torch.bool, device=weights.device)
    if ctx.key_mask is not None:
        allowed = allowed & ctx.key_mask[:, None, None, :]
    if ctx.causal:
        pos = torch.arange(T, device=weights.device)[:, None] + int(ctx.query_offset)
        allowed = allowed & (torch.arange(S, device=weights.device)[None, :] <= pos)
    mask = m.logit_mask(query, q, k, ctx)
    if mask is not None:
        allowed = allowed & mask
    return ~allowed.expand(B, H, T, S)


class _ReweightWatch:
    """Rule 7: the ``reweight`` of every mechanism of ``model`` that overrides it, wrapped (an instance attribute,
    which ``forward`` calls instead of the method) while the role's rules run, each of its calls checked; what it
    broke in :attr:`found`, one sentence per kind."""

    def __init__(self, model) -> None:
        self.model = model
        self.watched = [m for m in model.modules() if getattr(m, "uses_reweight", False)]
        self.calls: list[str] = []  # the role of the layer of each call
        self.found: dict[str, str] = {}
        for m in self.watched:
            m.reweight = self._wrap(m)

    def remove(self) -> None:
        for m in self.watched:
            del m.reweight

    def _wrap(self, m: Mechanism):
        hook, who = type(m).reweight, type(m).__name__

        def watched(weights, query, q, k, ctx):
            out = hook(m, weights, query, q, k, ctx)
            self.calls.append(m.dims.role)
            if not (isinstance(out, Tensor) and out.shape == weights.shape and out.dtype == weights.dtype):
                got = (f"a {out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, Tensor)
                       else type(out).__name__)
                self.found.setdefault("shape", f"reweight: {who}.reweight returns {got} for {weights.dtype} weights "
                                               f"of shape {tuple(weights.shape)}; it must keep the weights' shape "
                                               "(B, H, T, S) and dtype.")
                return weights  # so that the pass ends; the role's other rules are then left out
            seen = out.detach()
            if not torch.isfinite(seen).all():
                self.found.setdefault("finite", f"reweight: {who}.reweight gives NaN or inf weights (with a "
                                                "one-word sentence in the batch); a hook must keep them finite.")
            leak = seen.masked_select(_masked_keys(m, weights.detach(), query, q, k, ctx))
            if leak.numel() and float(leak.abs().max()) != 0.0:
                self.found.setdefault("masked", f"reweight: {who}.reweight gives masked keys (padding, later "
                                                f"positions under causality) weight {float(leak.abs().max()):.2e}; "
                                                "a key the softmax gave 0 must keep exactly 0.")
            return out

        return watched

    def check_applied(self, b: _Batch) -> bool:
        """The hook is called in full passes, and in every step of incremental decoding by every decoder layer that
        overrides it; False when it changes the weights' shape (the other rules would only stop at its error)."""
        if not self.watched:
            return True
        st = _structures(self.model, b, list(range(len(b.trees))), b.src.shape[1])
        self.model(b.src, b.mask, b.tgt, st)
        self.model(b.src, b.mask, b.tgt, st, need_weights=True)
        if not self.calls:
            self.found["unused"] = ("reweight: the hook is overridden but no forward pass called it; a mechanism "
                                    "with its own forward must apply it (docs/extending.md).")
        decoding = {m.dims.role for m in self.watched if m.dims.role != "encoder_self"}
        if decoding and not self.found.keys() & {"shape", "unused"}:
            enc, cache = self.model.encode(b.src, b.mask, st), IncrementalCache()
            for t in range(b.tgt.shape[1]):
                del self.calls[:]
                self.model.decode_step(b.tgt[:, : t + 1], enc, cache)
                if not decoding <= set(self.calls):
                    self.found.setdefault("steps", f"reweight: decoding step {t + 1} with the cache did not apply the "
                                                   "hook of every decoder layer that overrides it; apply it on every "
                                                   "path.")
        return "shape" not in self.found


def _check_role(model, b: _Batch, role: str) -> list[str]:
    """The broken rules of ``model`` (the mechanism in ``role``), one sentence each."""
    fail: list[str] = []
    watch = _ReweightWatch(model)
    try:
        with torch.no_grad():
            if not watch.check_applied(b):
                return list(watch.found.values())
            _check_padding(model, b, fail)
            _check_weights_and_state(model, b, fail)
            _check_outputs(model, b, fail)
            if role != "encoder_self":
                _check_incremental(model, b, fail)
        _check_finite(model, b, fail)
    finally:
        watch.remove()
    return fail + list(watch.found.values())


# --------------------------------------------------------------------------- entry point


def check_mechanism(name: str | type[Mechanism], options: Mapping[str, Any] | None = None, *,
                    roles: tuple[str, ...] = ROLES, trees: list | None = None) -> CheckReport:
    """Check mechanism ``name`` (a registered name, or a registered class) with ``options`` against the
    contract (module docstring); returns the report, or raises :class:`ContractError` listing every failure.
    ``trees``: the batch's parses, ``[(DependencyTree, ConstituencyTree), ...]`` (default: 3 sentences of the
    synthetic grammar, the last of one word)."""

    if isinstance(name, type):
        found = [k for k, v in ATTENTION_REGISTRY.items() if v is name]
        if not found:
            raise ValueError(f"{name.__name__} is not registered; decorate it with @register_attention(NAME).")
        name = found[0]
    report = CheckReport(str(name))
    batch = _batch(trees if trees is not None else example_trees())
    for role in roles:
        model, where = None, ""
        for first_only in (False, True):
            try:
                model = _model(str(name), options or {}, role, first_only)
                where = "layer 1" if first_only else "every layer"
                break
            except ConfigError as err:
                report.left_out[role] = str(err)
        if model is None:
            continue
        report.left_out.pop(role, None)
        report.checked.append(f"{role} ({where})")
        report.failures += [f"{role}: {f}" for f in _check_role(model, batch, role)]
    if not report.checked:
        raise ContractError(f"check_mechanism({name!r}): no role accepts the mechanism with these options:\n" +
                            "\n".join(f"  {r}: {why}" for r, why in report.left_out.items()))
    if report.failures:
        raise ContractError(str(report))
    return report
