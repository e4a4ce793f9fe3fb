#!/usr/bin/env python
"""Where a training step goes, by operator: structnmt beside fairseq 0.12 (``bench_fairseq.py --breakdown``).

Each toolkit trains as it does on its own command line (``structnmt train``, ``fairseq-train`` through
``fairseq_cli.train``), in its own process, with its trainer's step method wrapped from outside
(``structnmt.train.trainer.Trainer.train_step``, ``fairseq.trainer.Trainer.train_step``). The training loop from
the start of update ``--first`` to the start of update ``--first + --count`` runs under ``torch.profiler`` (CPU
activity): ``--count`` whole iterations of each toolkit's loop, its data loading and logging included. Every
operator's self time (its own time on the calling thread, not its children's) is summed by (operator, context)
and written to a JSON file with the window's wall time and target tokens; the median period of the updates
after the window, without the profiler, comes with it.

An operator's category is its own name's where that tells one (``aten::addmm``: linear GEMMs; ``aten::copy_``:
allocation, wherever it runs), else its context's: the nearest enclosing operator or autograd node that names a
category (``aten::uniform_`` under ``aten::bernoulli_`` is dropout, ``aten::mul`` under ``LogSoftmaxBackward0``
is the loss), else "other". An absorbing scope takes everything inside it, allocations included: Adam's step and
``zero_grad`` (``Optimizer.step#...``), and the scopes added here from outside with ``record_function``, since
no operator name tells them apart: the loss (structnmt's ``label_smoothed_nll``, fairseq's
``LabelSmoothedCrossEntropyCriterion.compute_loss``), gradient scaling and clipping
(``torch.nn.utils.clip_grad_norm_``; fairseq's ``Trainer.clip_grad_norm`` and ``FairseqOptimizer.multiply_grads``)
and structnmt's dropout (``structnmt.nn.dropout``'s ``dropout`` and ``residual_dropout``: a uniform draw, a
comparison and a multiply; the residual addition that ``residual_dropout`` fuses into its multiply counts as
dropout, where fairseq's residual ``aten::add`` is other). A backward node made by an operator inside an absorbing
scope is inside it too (the profiler's sequence numbers link them): fairseq's loss backward (the gather's
vocabulary-sized zeros and scatter, the sum's gradients added) is the loss's. The self time of a toolkit's own
scope that names no category (fairseq's ``forward``, ``clip-grads``) is Python: it counts as outside operators.

Run by the benchmark, one process per toolkit (the fairseq one with the fairseq venv's python; this file
imports only torch and the standard library at the top, so both environments run it)::

    python benchmarks/profile_step.py structnmt OUT.json --first 21 --count 20 -- train CONFIG key=value ...
    VENV/bin/python benchmarks/profile_step.py fairseq OUT.json --first 21 --count 20 -- DATA-BIN --arch ...

:func:`category` groups the rows, :func:`breakdown` sums them per update, :func:`table_lines` prints both
toolkits side by side.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

CATEGORIES = ("linear GEMMs", "attention (bmm, SDPA)", "softmax", "layer norm", "dropout", "loss",
              "optimizer (Adam)", "grad scale/norm", "allocation, copies", "other")
"""The categories of the table, in its order (the last row, outside operators, is the wall time left)."""

OUTSIDE = "outside operators"
"""The step's wall time not inside any operator: Python, data loading, logging, the profiler's own cost."""

SCOPE_PREFIX = "breakdown::"
"""Prefix of the record_function scopes this file adds from outside (``breakdown::loss``, ...)."""

_OPS = {
    "linear GEMMs": {"aten::addmm", "aten::mm", "aten::linear", "aten::addmv", "aten::mv", "aten::_addmm_activation",
                     "mkldnn::_linear_pointwise", "aten::mkldnn_linear", "aten::mkldnn_linear_backward",
                     "aten::mkldnn_linear_backward_input", "aten::mkldnn_linear_backward_weights"},
    "attention (bmm, SDPA)": {"aten::bmm", "aten::baddbmm", "aten::scaled_dot_product_attention"},
    "softmax": {"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::_softmax_backward_data"},
    "layer norm": {"aten::layer_norm", "aten::native_layer_norm", "aten::native_layer_norm_backward"},
    "dropout": {"aten::dropout", "aten::native_dropout", "aten::native_dropout_backward", "aten::bernoulli_",
                "aten::bernoulli", "aten::_fused_dropout", "aten::feature_dropout"},
    "loss": {"aten::log_softmax", "aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss",
             "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::nll_loss_nd", "aten::nll_loss2d_forward",
             "aten::nll_loss2d_backward", "aten::cross_entropy_loss"},
    "allocation, copies": {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                           "aten::new_empty_strided", "aten::zeros", "aten::zeros_like", "aten::new_zeros",
                           "aten::zero_", "aten::ones", "aten::ones_like", "aten::full", "aten::full_like",
                           "aten::fill_", "aten::copy_", "aten::clone", "aten::contiguous", "aten::to",
                           "aten::_to_copy", "aten::resize_", "aten::resize_as_"},
}
_OP_CATEGORY = {name: cat for cat, names in _OPS.items() for name in names}
_PREFIXES = (("aten::_scaled_dot_product", "attention (bmm, SDPA)"), ("aten::_flash_attention", "attention (bmm, SDPA)"),
             ("aten::_efficient_attention", "attention (bmm, SDPA)"), ("aten::_foreach_", "optimizer (Adam)"),
             ("aten::_fused_adam", "optimizer (Adam)"), ("Optimizer.step#", "optimizer (Adam)"),
             ("Optimizer.zero_grad#", "optimizer (Adam)"))
_SCOPES = {f"{SCOPE_PREFIX}loss": "loss", f"{SCOPE_PREFIX}grad scale/norm": "grad scale/norm",
           f"{SCOPE_PREFIX}dropout": "dropout"}
_ABSORBING = ("Optimizer.step#", "Optimizer.zero_grad#", f"{SCOPE_PREFIX}loss", f"{SCOPE_PREFIX}grad scale/norm",
              f"{SCOPE_PREFIX}dropout")
"""Scopes whose every operator counts to the scope's category (an allocation inside Adam's step is Adam's)."""
_NODE = re.compile(r"^(?:autograd::engine::evaluate_function: )?(?:torch::autograd::)?(\w+?)Backward\d*$")
_FUNCTION = re.compile(r"^(_?[A-Z]\w*)$")  # a custom autograd Function's forward: its class name (_OneDNNLinearFn)
# backward nodes by their forward's name (lowercased, underscores dropped): exact names, then words within
_NODE_EXACT = {"mm": "linear GEMMs", "addmm": "linear GEMMs", "bmm": "attention (bmm, SDPA)",
               "baddbmm": "attention (bmm, SDPA)"}
_NODE_WORDS = (("labelsmoothed", "loss"), ("logsoftmax", "loss"), ("nllloss", "loss"), ("crossentropy", "loss"),
               ("scaleddotproduct", "attention (bmm, SDPA)"), ("attention", "attention (bmm, SDPA)"),
               ("softmax", "softmax"), ("layernorm", "layer norm"), ("dropout", "dropout"), ("linear", "linear GEMMs"))


def name_category(name: str) -> str | None:
    """The category an operator, autograd node or scope name tells by itself; None for a generic one
    (``aten::mul``, ``aten::add_``: their category is their context's).

    >>> name_category("aten::addmm"), name_category("autograd::engine::evaluate_function: BmmBackward0")
    ('linear GEMMs', 'attention (bmm, SDPA)')
    """
    if name in _OP_CATEGORY:
        return _OP_CATEGORY[name]
    if name in _SCOPES:
        return _SCOPES[name]
    for prefix, cat in _PREFIXES:
        if name.startswith(prefix):
            return cat
    m = _NODE.match(name) or _FUNCTION.match(name)
    if m:
        word = m.group(1).replace("_", "").lower()
        if word in _NODE_EXACT:
            return _NODE_EXACT[word]
        for key, cat in _NODE_WORDS:
            if key in word:
                return cat
    return None


def is_absorbing(name: str) -> bool:
    """Whether every operator inside the scope ``name`` counts to the scope's category."""
    return name.startswith(_ABSORBING)


def is_python_scope(name: str) -> bool:
    """Whether ``name`` is a toolkit's own profiler scope that tells no category (fairseq's ``forward``,
    ``clip-grads``): not an operator (``aten::mul``), an autograd node (``MulBackward0``) or a custom autograd
    Function (``_OneDNNLinearFn``). Its self time is Python between operators."""
    return "::" not in name and not _NODE.match(name) and not _FUNCTION.match(name) and name_category(name) is None


def category(name: str, context: str = "") -> str:
    """The category of operator ``name`` run inside ``context`` (an absorbing scope, the nearest enclosing
    name that tells a category, or ``""``): the scope's if absorbing, else the operator's own, else the
    context's, else ``"other"``; the self time of a Python scope that tells no category is ``OUTSIDE``."""
    if context and is_absorbing(context):
        return name_category(context) or "other"
    found = name_category(name) or (name_category(context) if context else None)
    return found or (OUTSIDE if is_python_scope(name) else "other")


def event_context(chain: Iterable[str]) -> str:
    """The context of an operator from the names of its enclosing events, innermost first: the outermost
    absorbing scope if there is one, else the innermost name that tells a category, else ``""``."""
    nearest = ""
    absorbing = ""
    for name in chain:
        if is_absorbing(name):
            absorbing = name
        elif not nearest and name_category(name):
            nearest = name
    return absorbing or nearest


def _enclosing(event) -> list:
    """The events around ``event``, innermost first."""
    chain, parent = [], event.cpu_parent
    while parent is not None:
        chain.append(parent)
        parent = parent.cpu_parent
    return chain


def _forward_scopes(events) -> dict[tuple[int, int], str]:
    """(thread, sequence number) of every forward operator inside an absorbing scope -> that scope: the autograd
    node the operator made carries the same number, so its backward counts to the scope too (the loss's
    ``GatherBackward0``, the dropout multiply's ``MulBackward0``)."""
    scopes = {}
    for event in events:
        seq = getattr(event, "sequence_nr", -1)
        if seq >= 0 and not event.name.startswith("autograd::engine") and not _NODE.match(event.name):
            outer = [e.name for e in _enclosing(event) if is_absorbing(e.name)]
            if outer:
                scopes.setdefault((event.thread, seq), outer[-1])
    return scopes


def scoped_rows(events) -> list[dict]:
    """Profiler events (``prof.events()``: FunctionEvents with ``cpu_parent``, ``sequence_nr``, ``thread``,
    ``fwd_thread``) -> rows of ``{"name", "context", "calls", "self_us"}``: self CPU time summed by (operator,
    context), largest first. A backward node whose forward operator ran inside an absorbing scope is inside it."""
    events = list(events)
    forward = _forward_scopes(events)
    sums: dict[tuple[str, str], list[float]] = {}
    for event in events:
        chain = []
        for e in [event, *_enclosing(event)]:
            if e is not event:
                chain.append(e.name)
            if e.name.startswith("autograd::engine::evaluate_function: "):
                scope = forward.get((getattr(e, "fwd_thread", -1), getattr(e, "sequence_nr", -1)))
                if scope:
                    chain.append(scope)
        key = (event.name, event_context(chain))
        row = sums.setdefault(key, [0, 0.0])
        row[0] += 1
        row[1] += event.self_cpu_time_total
    rows = [{"name": n, "context": c, "calls": k, "self_us": t} for (n, c), (k, t) in sums.items()]
    return sorted(rows, key=lambda r: -r["self_us"])


# ----------------------------------------------------------------------------------------- profiling a run


def _scoped(label: str, fn: Callable) -> Callable:
    """``fn`` run inside the profiler scope ``breakdown::<label>``."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with record_function(SCOPE_PREFIX + label):
            return fn(*args, **kwargs)

    return wrapped


class StepWindow:
    """Wraps a trainer's step method: the loop from the start of update ``first`` (1-based) to the start of update
    ``first + count`` runs under the profiler; every update's start time and target tokens are kept."""

    def __init__(self, first: int, count: int, tokens_of: Callable[[tuple, object], float],
                 on_first_update: Callable[[], None] | None = None):
        self.first, self.count, self.tokens_of = first, count, tokens_of
        self.on_first_update = on_first_update  # run once before the first update (the model is built)
        self.starts: list[float] = []  # perf_counter at the start of each update
        self.tokens: list[float] = []  # target tokens of each update
        self.window_s: float | None = None
        self.rows: list[dict] | None = None
        self._prof = None
        self._t0 = 0.0

    def wrap(self, step: Callable) -> Callable:
        @functools.wraps(step)
        def wrapped(trainer, *args, **kwargs):
            self._before(len(self.starts) + 1)
            out = step(trainer, *args, **kwargs)
            self.tokens.append(float(self.tokens_of(args, out) or 0.0))
            return out

        return wrapped

    def _before(self, update: int) -> None:
        if update == 1 and self.on_first_update is not None:
            self.on_first_update()
        if update == self.first + self.count:
            self.window_s = time.perf_counter() - self._t0
            self._prof.stop()
            self.rows = scoped_rows(self._prof.events())
            self._prof = None
        self.starts.append(time.perf_counter())
        if update == self.first:
            self._prof = profile(activities=[ProfilerActivity.CPU])
            self._prof.start()
            self._t0 = time.perf_counter()

    def result(self, tool: str) -> dict:
        """What the JSON file holds; a clear error if the run ended before the window did."""
        end = self.first + self.count
        if self.rows is None:
            raise SystemExit(f"{tool}: the run stopped after {len(self.starts)} updates, before update {end} that "
                             f"ends the profiled window; give it at least {end} updates (--updates).")
        after = [b - a for a, b in zip(self.starts[end - 1:], self.starts[end:])]
        return {"tool": tool, "first": self.first, "count": self.count, "window_s": self.window_s,
                "tokens": sum(self.tokens[self.first - 1:end - 1]), "periods_after_s": after,
                "updates": len(self.starts), "torch": torch.__version__, "threads": torch.get_num_threads(),
                "capability": torch.backends.cpu.get_cpu_capability(), "rows": self.rows}


def _structnmt_main(window: StepWindow) -> Callable[[list[str]], object]:
    """structnmt's command line with its trainer's step, loss, gradient clipping and dropout wrapped."""
    from structnmt.nn import dropout as dropout_module
    from structnmt.train import trainer as trainer_module

    trainer_module.Trainer.train_step = window.wrap(trainer_module.Trainer.train_step)
    trainer_module.label_smoothed_nll = _scoped("loss", trainer_module.label_smoothed_nll)
    torch.nn.utils.clip_grad_norm_ = _scoped("grad scale/norm", torch.nn.utils.clip_grad_norm_)
    scoped = {id(fn): _scoped("dropout", fn) for fn in (dropout_module.dropout, dropout_module.residual_dropout)}

    def rebind_dropout() -> None:
        """Every structnmt module's name for ``dropout`` or ``residual_dropout`` (the mask, its multiply and the
        fused residual addition) to the scoped one; at the first update, when the model's modules are loaded."""
        for name, module in list(sys.modules.items()):
            if name.startswith("structnmt.") and module is not None:
                for attr, value in list(vars(module).items()):
                    if id(value) in scoped:
                        setattr(module, attr, scoped[id(value)])

    window.on_first_update = rebind_dropout
    from structnmt.cli import main

    return main


def _fairseq_main(window: StepWindow) -> Callable[[list[str]], object]:
    """fairseq-train (``fairseq_cli.train``) with its trainer's step, loss, gradient scaling and clipping wrapped."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
    from fairseq.optim.fairseq_optimizer import FairseqOptimizer
    from fairseq.trainer import Trainer
    from fairseq_cli import train

    Trainer.train_step = window.wrap(Trainer.train_step)
    Trainer.clip_grad_norm = _scoped("grad scale/norm", Trainer.clip_grad_norm)
    FairseqOptimizer.multiply_grads = _scoped("grad scale/norm", FairseqOptimizer.multiply_grads)
    LabelSmoothedCrossEntropyCriterion.compute_loss = _scoped("loss", LabelSmoothedCrossEntropyCriterion.compute_loss)

    def main(argv: list[str]) -> int:
        sys.argv = ["fairseq-train", *argv]
        train.cli_main()
        return 0

    return main


def _tokens(tool: str) -> Callable[[tuple, object], float]:
    """An update's target tokens: structnmt's step returns them; fairseq's step gets its samples."""
    if tool == "structnmt":
        return lambda args, out: out["tokens"] if out else 0.0
    return lambda args, out: sum(s.get("ntokens", 0) for s in args[0] if s)


def profile_main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("profile_step.py: put the toolkit's own training arguments after --, e.g. "
                         "profile_step.py structnmt OUT.json -- train CONFIG key=value.")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tool", choices=("structnmt", "fairseq"))
    ap.add_argument("out", help="the JSON file to write")
    ap.add_argument("--first", type=int, default=21, help="the first profiled update (1-based)")
    ap.add_argument("--count", type=int, default=20, help="how many updates are profiled")
    args = ap.parse_args(argv[:cut])
    window = StepWindow(args.first, args.count, _tokens(args.tool))
    main = (_structnmt_main if args.tool == "structnmt" else _fairseq_main)(window)
    code = main(argv[cut + 1:])
    if code:
        raise SystemExit(f"{args.tool} training failed (exit status {code}).")
    Path(args.out).write_text(json.dumps(window.result(args.tool)))


# ----------------------------------------------------------------------------------------------- the report


def breakdown(prof: dict) -> dict:
    """A profile (the JSON of :func:`profile_main`) per update: ``ms`` (category -> ms, with ``OUTSIDE``),
    ``wall_ms`` (the profiled window), ``free_ms`` (median period after the window, without the profiler, or
    None), ``tokens`` (target tokens), ``ops`` ((operator in its context, category) -> ms, largest first)."""
    n = prof["count"]
    ms = dict.fromkeys(CATEGORIES, 0.0)
    ops: dict[tuple[str, str], float] = {}
    for row in prof["rows"]:
        cat = category(row["name"], row["context"])
        value = row["self_us"] / 1000.0 / n
        if cat == OUTSIDE:
            continue  # Python inside a toolkit's own scope: the remainder below holds it
        ms[cat] += value
        key = (op_label(row["name"], row["context"]), cat)
        ops[key] = ops.get(key, 0.0) + value
    wall = prof["window_s"] * 1000.0 / n
    ms[OUTSIDE] = wall - sum(ms.values())
    after = prof.get("periods_after_s") or []
    return {"ms": ms, "wall_ms": wall, "free_ms": statistics.median(after) * 1000.0 if after else None,
            "tokens": prof["tokens"] / n, "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def op_label(name: str, context: str) -> str:
    """How the tables name an operator: with its context where that tells more than the name
    (``aten::copy_ in aten::addmm``, ``aten::mul in breakdown::loss``); where the two tell the same category, the
    name alone, with ``(backward)`` if the context is a backward node (``aten::mm (backward)``)."""
    context = context.removeprefix("autograd::engine::evaluate_function: ")
    if not context:
        return name
    if name_category(name) is not None and name_category(name) == name_category(context):
        return f"{name} (backward)" if _NODE.match(context) else name
    return f"{name} in {context}"


def _cells(b: dict, key: str) -> str:
    value = b["ms"][key]
    return f"{value:.1f} | {value / b['wall_ms']:.1%}"


def _top(b: dict, cat: str | None, k: int) -> list[tuple[str, str, float]]:
    """The ``k`` largest (operator, category, ms/update) of one toolkit, of category ``cat`` or all."""
    return [(name, c, ms) for (name, c), ms in b["ops"].items() if cat is None or c == cat][:k]


def table_lines(fairseq: dict, structnmt: dict, top: int = 10) -> list[str]:
    """Both toolkits' :func:`breakdown` side by side (Markdown): ms per update and share of the step by category,
    the step's wall time with and without the profiler, target tokens per update; then "other"'s largest
    operators and each toolkit's ``top`` operators."""
    fs, sn = fairseq, structnmt
    lines = ["| category | fairseq ms/update | share | structnmt ms/update | share | structnmt - fairseq ms/update |",
             "|---|---:|---:|---:|---:|---:|"]
    for cat in (*CATEGORIES, OUTSIDE):
        label = f"{OUTSIDE} (Python, data, logging, profiler)" if cat == OUTSIDE else cat
        lines.append(f"| {label} | {_cells(fs, cat)} | {_cells(sn, cat)} | {sn['ms'][cat] - fs['ms'][cat]:+.1f} |")
    lines.append(f"| **the update, wall, under the profiler** | {fs['wall_ms']:.1f} | 100% | {sn['wall_ms']:.1f} | 100% "
                 f"| {sn['wall_ms'] - fs['wall_ms']:+.1f} |")
    if fs["free_ms"] is not None and sn["free_ms"] is not None:
        lines.append(f"| the update without the profiler (median, after the window) | {fs['free_ms']:.1f} | | "
                     f"{sn['free_ms']:.1f} | | {sn['free_ms'] - fs['free_ms']:+.1f} |")
    lines.append(f"| target tokens per update | {fs['tokens']:.0f} | | {sn['tokens']:.0f} | | "
                 f"{sn['tokens'] - fs['tokens']:+.0f} |")
    lines.append(f"| wall ms per 1,000 target tokens, under the profiler | {1000 * fs['wall_ms'] / fs['tokens']:.1f} | "
                 f"| {1000 * sn['wall_ms'] / sn['tokens']:.1f} | | "
                 f"{1000 * (sn['wall_ms'] / sn['tokens'] - fs['wall_ms'] / fs['tokens']):+.1f} |")
    lines.append("")
    for who, b in (("fairseq", fs), ("structnmt", sn)):
        named = ", ".join(f"{name} {ms:.1f}" for name, _, ms in _top(b, "other", 5))
        lines.append(f"\"other\", largest (ms/update), {who}: {named or 'none'}.")
    lines += ["", "| # | fairseq operator (category) | ms/update | structnmt operator (category) | ms/update |",
              "|---:|---|---:|---|---:|"]
    fs_top, sn_top = _top(fs, None, top), _top(sn, None, top)
    for i in range(max(len(fs_top), len(sn_top))):
        left = f"{fs_top[i][0]} ({fs_top[i][1]}) | {fs_top[i][2]:.1f}" if i < len(fs_top) else " | "
        right = f"{sn_top[i][0]} ({sn_top[i][1]}) | {sn_top[i][2]:.1f}" if i < len(sn_top) else " | "
        lines.append(f"| {i + 1} | {left} | {right} |")
    return lines


if __name__ == "__main__":
    profile_main()
