"""Learning curves (PNG) from ``metrics.jsonl``: training and validation loss per update.

The trainer draws ``learning_curve.png`` in its save_dir at the end of a run; the
experiment runner draws one figure for a whole grid. By hand::

    python -m structnmt.analysis.curves runs/a runs/b --out curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..train.hooks import TrainingHook


def read_curves(metrics: str | Path) -> tuple[dict[int, float], dict[int, float]]:
    """(train loss by update, valid loss by update); a resumed run's repeated steps keep the last value."""
    train: dict[int, float] = {}
    valid: dict[int, float] = {}
    path = Path(metrics)
    if not path.exists():
        return train, valid
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" in rec and "step" in rec and rec.get("kind") in ("train", "valid"):
            (train if rec["kind"] == "train" else valid)[int(rec["step"])] = rec["loss"]
    return dict(sorted(train.items())), dict(sorted(valid.items()))


def validation_ylim(valids: list[list[float]], span: float = 0.6) -> tuple[float, float] | None:
    """The validation panel's zoom: from just below the lowest loss to ``span`` bits above it,
    raised where needed so that every run's last point stays in view (a run that ends far
    above the others is not cut off); None (no zoom) when the curves fit in that range anyway."""
    valids = [v for v in valids if v]
    if not valids:
        return None
    low = min(min(v) for v in valids)
    high = max(max(v) for v in valids)
    top = max(low + span, max(v[-1] for v in valids) + 0.05)
    return (low - 0.02, top) if high > top else None


def plot_curves(series: list[tuple[str | None, Path, str, float]], title: str, path: str | Path,
                linestyles: list[str] | None = None) -> None:
    """series: (label, metrics.jsonl, color, alpha) per run; writes a two-panel PNG.

    The validation panel zooms (:func:`validation_ylim`) so that converged runs can be told
    apart, the early drop staying visible in the training panel; with more than 6 labelled
    runs the legend stands outside, once."""
    from matplotlib.figure import Figure

    labelled = sum(1 for s in series if s[0])
    wide = labelled > 6
    fig = Figure(figsize=(13.5 if wide else 11, 4.6 if wide else 4.2), dpi=110)
    ax_t, ax_v = fig.subplots(1, 2)
    valids = []
    for i, (label, metrics, color, alpha) in enumerate(series):
        ls = linestyles[i] if linestyles else "-"
        train, valid = read_curves(metrics)
        if train:
            ax_t.plot(list(train), list(train.values()), color=color, alpha=alpha, label=label, lw=1.2, linestyle=ls)
        if valid:
            ax_v.plot(list(valid), list(valid.values()), color=color, alpha=alpha, label=label, lw=1.2,
                      marker="o", ms=3, linestyle=ls)
            valids.append(list(valid.values()))
    ylim = validation_ylim(valids)
    zoomed = ylim is not None
    if zoomed:
        ax_v.set_ylim(*ylim)
    for ax, name in ((ax_t, "training loss"), (ax_v, "validation loss" + (" (zoomed)" if zoomed else ""))):
        ax.set_xlabel("update")
        ax.set_ylabel("label-smoothed loss (bits/token)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    if ax_v.get_legend_handles_labels()[0]:
        if wide:
            ax_v.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        else:
            for ax in (ax_t, ax_v):
                ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Plot learning curves of training runs.")
    ap.add_argument("runs", nargs="+", help="save_dirs holding metrics.jsonl")
    ap.add_argument("--out", required=True, help="PNG path")
    ap.add_argument("--title", default="learning curves")
    args = ap.parse_args(argv)
    plot_curves([(Path(r).name, Path(r) / "metrics.jsonl", f"C{i % 10}", 1.0) for i, r in enumerate(args.runs)],
                args.title, args.out)


if __name__ == "__main__":
    main()


class LearningCurveHook(TrainingHook):
    """Training hook: ``learning_curve.png`` beside the checkpoints when the run ends (the losses of
    its ``metrics.jsonl``). A missing matplotlib or a full disk is logged, not fatal to the run."""

    files = ("learning_curve.png",)

    def on_end(self, trainer) -> None:
        save_dir = trainer.save_dir
        try:
            trainer.outputs.write_with("learning_curve.png", lambda tmp: plot_curves(
                [(None, save_dir / "metrics.jsonl", "C0", 1.0)], f"{save_dir.name}: learning curve", tmp))
        except (ImportError, OSError) as err:
            trainer.log(f"learning curve not drawn: {err}")
