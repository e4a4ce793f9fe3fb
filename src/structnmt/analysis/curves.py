"""Learning curves (PNG) from ``metrics.jsonl``: training and validation loss per update.

The trainer draws ``learning_curve.png`` in its save_dir at the end of a run; the
experiment runner draws one figure for a whole grid. By hand::

    python -m structnmt.analysis.curves runs/a runs/b --out curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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


def plot_curves(series: list[tuple[str | None, Path, str, float]], title: str, path: str | Path) -> None:
    """series: (label, metrics.jsonl, color, alpha) per run; writes a two-panel PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=110)
    ax_t, ax_v = fig.subplots(1, 2)
    for label, metrics, color, alpha in series:
        train, valid = read_curves(metrics)
        if train:
            ax_t.plot(list(train), list(train.values()), color=color, alpha=alpha, label=label, lw=1.2)
        if valid:
            ax_v.plot(list(valid), list(valid.values()), color=color, alpha=alpha, label=label, lw=1.2,
                      marker="o", ms=3)
    for ax, name in ((ax_t, "training loss"), (ax_v, "validation loss")):
        ax.set_xlabel("update")
        ax.set_ylabel("label-smoothed loss (bits/token)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
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
