"""Which encoder heads are redundant (RHE eqs. 3, 9, 10), per layer and head, over training.

RHE's claims tested here: redundant heads sit in the low layers (after Voita et al. 2019),
and RHE enlarges the set of important heads. For every encoder self-attention layer and
head, the **redundant fraction** is the share of sentences in which the head is judged
redundant: ``Syn_attn <= Syn_gate`` on its plain attention.

* An RHE layer reports its own identification (``extras["head_important"]``, computed on
  the head's plain attention before enhancement, with the layer's own gate options).
* Any other layer whose weights are over the source tokens (plain MHA, Rel_Pos,
  Localness) is judged from its weights with the same functions
  (:func:`structnmt.nn.head_identification.identify_heads`, dynamic gate, EOS excluded). Layers whose
  weights are over phrases (MG-SA, phrase-based attentions) are not comparable and are
  left out (``None``).

Over training: with ``train.head_roles: true`` the trainer computes the fractions on (up
to ``train.head_roles_sentences`` of) the validation set at every validation and appends
``{"step": n, "redundant": [[fraction per head] per layer], "sentences": m}`` to
``<save_dir>/head_roles.jsonl``; at the end it draws ``head_roles.png``. This needs the
dependency trees of the data (the DEA mask is the syntactic reference of eq. 9), so the
dataset must be prepared with a parser.

To compare runs (e.g. the Transformer and LPEA + RHE of the same grid)::

    structnmt head-roles runs/a runs/b --labels Transformer "LPEA + RHE" --out DIR

writes ``DIR/head_roles.png`` (the last record of every run as a layer x head map, and the
mean redundant fraction of every layer over training) and ``DIR/head_roles.md`` (a table).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..config import ConfigError
from ..data.dataset import collate
from ..errors import UserError
from ..fileio.files import OutputDir
from ..nn.head_identification import (
    DEP_MASK_KEY,
    dep_mask_spec,
    dependency_allowed,
    identify_heads,
    query_tokens,
)
from ..train.hooks import TrainingHook


@torch.no_grad()
def encoder_head_roles(model, src: Tensor, mask: Tensor, structures: dict[str, Tensor]) -> list[Tensor | None]:
    """Per encoder layer: (B, H) bool important heads, or None where not comparable.

    src, mask (B, S); ``structures`` must hold the DEA mask ``rhe.dep_mask`` (B, S, S).
    """
    if DEP_MASK_KEY not in structures:
        raise KeyError(f"head roles need the structure '{DEP_MASK_KEY}' (the dependency trees of the batch).")
    captured: list = []
    hooks = [layer.self_attn.register_forward_hook(lambda _m, _i, out: captured.append(out))
             for layer in model.encoder_layers]
    try:
        model.encode(src, mask, structures, need_weights=True)
    finally:
        for h in hooks:
            h.remove()
    S = src.shape[1]
    dep = dependency_allowed(structures[DEP_MASK_KEY], S, S)
    queries = query_tokens(mask, exclude_eos=True)
    roles: list[Tensor | None] = []
    for out in captured:
        if "head_important" in out.extras:
            roles.append(out.extras["head_important"])
        elif out.weights is not None and out.weights.shape[-1] == S and out.weights.shape[-2] == S:
            roles.append(identify_heads(out.weights, dep, queries).important)
        else:
            roles.append(None)
    return roles


class HeadRoleCounter:
    """Accumulates the redundant fraction per (layer, head) over batches."""

    def __init__(self) -> None:
        self.redundant: list[Tensor | None] | None = None
        self.sentences = 0

    def add(self, roles: list[Tensor | None]) -> None:
        counts = [None if r is None else (~r).sum(0).double().cpu() for r in roles]
        if self.redundant is None:
            self.redundant = counts
        else:
            self.redundant = [None if a is None or b is None else a + b for a, b in zip(self.redundant, counts)]
        self.sentences += next((int(r.shape[0]) for r in roles if r is not None), 0)

    def fractions(self) -> list[list[float] | None]:
        if self.redundant is None or not self.sentences:
            return []
        return [None if c is None else [round(float(x) / self.sentences, 4) for x in c] for c in self.redundant]


def read_head_roles(path: str | Path) -> list[dict]:
    """Records of a ``head_roles.jsonl``; a resumed run's repeated steps keep the last record."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no head-role records; train with train.head_roles=true (needs parsed data).")
    by_step: dict[int, dict] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not text (invalid UTF-8 at byte {err.start}); give the head_roles.jsonl a training "
                        "with train.head_roles=true wrote.") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if not isinstance(rec, dict) or not _is_record(rec):
            raise UserError(f"{path}, line {lineno}: not a complete head-role record (cut short, or edited); remove "
                            "that line (a run killed while writing leaves one) and run again.")
        if any(row is not None for row in rec["redundant"]):  # (a validation without sentences has no roles)
            by_step[int(rec["step"])] = rec
    if not by_step:
        raise UserError(f"{path}: holds no head-role record.")
    return [by_step[k] for k in sorted(by_step)]


def _is_record(rec: dict) -> bool:
    """A head-role record: an integer ``step`` and ``redundant``, per layer null or a list of per-head numbers."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    layers = rec.get("redundant")
    return (isinstance(rec.get("step"), int) and isinstance(layers, list)
            and all(row is None or (isinstance(row, list) and row and all(number(x) for x in row)) for row in layers))


def _layer_means(rec: dict) -> list[float | None]:
    return [None if row is None else sum(row) / len(row) for row in rec["redundant"]]


def plot_head_roles(runs: list[tuple[str, list[dict]]], path: str | Path, title: str = "redundant heads") -> None:
    """One column per run: its last record as a layer x head map (redundant fraction, annotated),
    and below, every layer's mean redundant fraction over training."""
    from matplotlib.figure import Figure

    n = len(runs)
    fig = Figure(figsize=(4.2 * n + 0.6, 7.2), dpi=110)
    axes = fig.subplots(2, n, squeeze=False)
    for col, (label, recs) in enumerate(runs):
        last = recs[-1]
        grid = np.array([[np.nan] * len(next(r for r in last["redundant"] if r is not None)) if row is None else row
                         for row in last["redundant"]], dtype=float)
        ax = axes[0, col]
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="Reds", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if v > 0.6 else "black")
        ax.set_xticks(range(grid.shape[1]), [f"h{j + 1}" for j in range(grid.shape[1])])
        ax.set_yticks(range(grid.shape[0]), [f"layer {i + 1}" for i in range(grid.shape[0])])
        ax.set_title(f"{label}\nredundant fraction @ update {last['step']}", fontsize=9)
        ax = axes[1, col]
        steps = [r["step"] for r in recs]
        means = np.array([[np.nan if m is None else m for m in _layer_means(r)] for r in recs], dtype=float)
        for i in range(means.shape[1]):
            ax.plot(steps, means[:, i], marker="o", ms=2.5, lw=1.2, label=f"layer {i + 1}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("update")
        ax.set_ylabel("mean redundant fraction")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.subplots_adjust(wspace=0.45, hspace=0.35)
    fig.colorbar(im, ax=axes[0, :].tolist(), shrink=0.8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path)


def head_roles_table(runs: list[tuple[str, list[dict]]]) -> str:
    """Markdown: per run and layer, the redundant fraction of each head at the last record."""
    lines = ["| run | update | sentences | layer | redundant fraction per head | important heads (< 0.5) |",
             "|---|---|---|---|---|---|"]
    for label, recs in runs:
        last = recs[-1]
        for i, row in enumerate(last["redundant"]):
            if row is None:
                lines.append(f"| {label} | {last['step']} | {last.get('sentences', '')} | {i + 1} | not comparable | |")
                continue
            cells = " ".join(f"{x:.2f}" for x in row)
            lines.append(f"| {label} | {last['step']} | {last.get('sentences', '')} | {i + 1} | {cells} | "
                         f"{sum(x < 0.5 for x in row)}/{len(row)} |")
    return "\n".join(lines) + "\n"


def compare_runs(run_dirs: list[str], labels: list[str] | None, out_dir: str | Path) -> list[Path]:
    """``structnmt head-roles``: the PNG and the table of several runs' head_roles.jsonl."""
    if labels and len(labels) != len(run_dirs):
        raise UserError(f"head-roles: {len(labels)} labels for {len(run_dirs)} runs; give one label per run.")
    if labels and len(set(labels)) < len(labels):
        twice = next(x for x in labels if labels.count(x) > 1)
        raise UserError(f"head-roles: the label {twice!r} is given twice; give every run its own label.")
    runs = [(labels[i] if labels else Path(d).name, read_head_roles(Path(d) / "head_roles.jsonl"))
            for i, d in enumerate(run_dirs)]

    out = OutputDir(out_dir, "head-roles", expect=("head_roles.png", "head_roles.md"))
    png = out.write_with("head_roles.png", lambda p: plot_head_roles(runs, p))
    return [png, out.write_text("head_roles.md", head_roles_table(runs))]


class HeadRolesHook(TrainingHook):
    """Training hook (``train.head_roles``): at every validation, the redundant fraction of every encoder
    head on the first ``train.head_roles_sentences`` validation sentences, appended to
    ``head_roles.jsonl``; ``head_roles.png`` when the run ends. Its batches carry the DEA dependency
    mask, the syntactic reference of head identification (RHE eq. 9)."""

    files = ("head_roles.png",)

    def required_structures(self, trainer) -> dict:

        if not trainer.data.manifest.get("syntax"):
            raise ConfigError(f"train.head_roles needs dependency trees, but {trainer.cfg.data.path} was prepared "
                              "without a parser; prepare it with --parser (spacy, file or synthetic).")
        return dep_mask_spec()

    @torch.no_grad()
    def on_validation(self, trainer) -> None:

        trainer.model.eval()
        split = trainer.valid_split
        counter = HeadRoleCounter()
        # the first sentences among those the validation loss reads (a pair longer than the model's positions
        # or data.max_len is left out of both, as the trainer has logged)
        fits = np.flatnonzero(np.maximum(split.src_lens, split.tgt_lens) + 1 <= trainer.max_len)
        first = fits[: trainer.cfg.train.head_roles_sentences].tolist()
        for start in range(0, len(first), 32):
            b = collate(split, first[start : start + 32], trainer.structures, trainer.label_ids).to(trainer.device)
            counter.add(encoder_head_roles(trainer.model, b.src, b.src_mask, b.structures))
        record = {"step": trainer.state.num_updates, "sentences": counter.sentences, "redundant": counter.fractions()}
        with open(trainer.save_dir / "head_roles.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def on_end(self, trainer) -> None:
        try:
            records = read_head_roles(trainer.save_dir / "head_roles.jsonl")
            trainer.outputs.write_with("head_roles.png", lambda tmp: plot_head_roles([(trainer.save_dir.name, records)],
                                                                                      tmp))
        except (ImportError, OSError, UserError) as err:
            trainer.log(f"head roles not drawn: {err}")
