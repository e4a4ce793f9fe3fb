"""Each row's difference from the baseline in several experiment reports, side by side: the same grid
at two budgets (does what 2,000 updates show hold at 8,000?), on two machines, or two data sets.

``structnmt delta-plot "2,000 updates=runs/a/results.csv" "8,000 updates=runs/b/results.csv"
--out deltas.png``

Every ``results.csv`` must come from a grid with at least 2 seeds per row: the points are the
difference of the seed means (``delta``) and the bars the 95 % interval of the runner's seed-aware test,
``delta ± t(0.975, df) · sqrt(seed_se² + sentence_se²)`` (:mod:`structnmt.evaluate.seeds`): a bar
that does not cross zero is a row the report marks better or worse at p < 0.05. One panel per split of
the reports; a row missing from a report has no point there. Writes the PNG and a Markdown table of
the same numbers next to it (``.md``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..fileio.files import OutputDir
from .sweep import PICTURE_SUFFIXES, csv_number, read_rows


@dataclass(frozen=True)
class Delta:
    """One row of one report on one split: its difference of seed means from the baseline and the
    seed-aware test's 95 % interval and p-value."""

    delta: float
    low: float
    high: float
    p_value: float


_SEED_AWARE = "delta-plot reads the results.csv of a grid with at least 2 seeds per row (the seed-aware test's parts)."


def _number(row: dict[str, str], column: str, path: Path) -> float:
    return csv_number(row, column, path, _SEED_AWARE)


@dataclass(frozen=True)
class Series:
    """One report drawn: its label, the results.csv it came from (``None`` for the runner's own picture), its
    baseline and split -> row name -> :class:`Delta`."""

    label: str
    source: Path | None
    baseline: str
    by_split: dict[str, dict[str, Delta]]


#: how the runner's results.csv names its test's metric, in words
METRIC_NAMES = {"bleu_lc_tok": "BLEU (lc,tok)", "bleu": "BLEU", "chrf": "chrF"}


def read_deltas(path: str | Path, *, skip_untested: bool = False) -> tuple[str, str, dict[str, dict[str, Delta]]]:
    """(the baseline's name, the metric tested, split -> row name -> :class:`Delta`) of one runner's
    ``results.csv``. A row without the seed-aware test's parts (one seed) is an error, or left out with
    ``skip_untested`` (an unfinished grid's report)."""
    from scipy import stats

    path = Path(path)
    rows = read_rows(path)
    if "seed_se" not in rows[0] or "baseline" not in rows[0]:
        raise UserError(f"{path}: not the runner's results.csv (no 'seed_se' or 'baseline' column).")
    baselines = {r["System"] for r in rows if r["baseline"] == "True"}
    if len(baselines) != 1:
        raise UserError(f"{path}: {len(baselines)} baseline rows ({', '.join(sorted(baselines)) or 'none'}); "
                        "delta-plot reads a grid with one baseline.")
    out: dict[str, dict[str, Delta]] = {}
    for r in rows:
        if r["baseline"] == "True" or (skip_untested and not r.get("seed_se")):
            continue
        se = math.hypot(_number(r, "seed_se", path), _number(r, "sentence_se", path))
        delta, df = _number(r, "delta", path), _number(r, "df", path)
        half = float(stats.t.ppf(0.975, df) if math.isfinite(df) else stats.norm.ppf(0.975)) * se
        out.setdefault(r.get("split", ""), {})[r["System"]] = Delta(delta, delta - half, delta + half,
                                                                    _number(r, "p_value", path))
    metric = rows[0].get("metric", "")
    return baselines.pop(), METRIC_NAMES.get(metric, metric), out


def draw_report_deltas(read: tuple[str, str, dict[str, dict[str, Delta]]], path: str | Path,
                       split_names: dict[str, str], title: str) -> None:
    """The experiment report's ``deltas.png``: the tested rows of one report (``read``, what :func:`read_deltas`
    returns) with their 95 % intervals, one panel per split (``split_names``: the runner's split names in words)."""
    baseline, metric, by_split = read
    named = {split_names.get(k, k): v for k, v in by_split.items()}
    systems = list(dict.fromkeys(n for rows in named.values() for n in rows))
    series = [Series("Δ of the seed means, 95 % interval", None, baseline, named)]
    _figure(series, list(named), systems, title, metric).savefig(path, dpi=130)


def _labelled(item: str) -> tuple[str, Path]:
    """``LABEL=PATH`` or ``PATH`` (labelled with its folder's name)."""
    label, sep, path = item.partition("=")
    return (label, Path(path)) if sep and label else (Path(item).parent.name or item, Path(item))


def plot_deltas(reports: list[str], out: str | Path, title: str = "",
                split_names: dict[str, str] | None = None) -> list[Path]:
    """Write ``out`` (a picture) and ``out`` with ``.md``; ``reports``: ``[LABEL=]results.csv`` each;
    ``split_names``: the runner's split names in words (``{"test1": "test_2017_flickr"}``)."""

    out = Path(out)
    if out.suffix.lower() not in PICTURE_SUFFIXES:
        raise UserError(f"--out {out}: the picture's name must end in {', '.join(PICTURE_SUFFIXES)} (its format), "
                        f"e.g. {out.with_suffix('.png')}.")
    read, metrics = [], set()
    for label, path in map(_labelled, reports):
        baseline, metric, by_split = read_deltas(path)
        read.append(Series(label, path, baseline, {(split_names or {}).get(k, k): v for k, v in by_split.items()}))
        metrics.add(metric)
    if len(metrics) > 1:
        raise UserError(f"delta-plot: the reports tested different metrics ({', '.join(metrics)}); give reports of "
                        "one metric (a grid's evaluate.lc_tok chooses BLEU (lc,tok) or BLEU).")
    table = out.with_suffix(".md")
    target = OutputDir(out.parent, "delta-plot", expect=(out.name, table.name))  # checked before drawing
    splits = list(dict.fromkeys(s for series in read for s in series.by_split))
    systems = list(dict.fromkeys(n for series in read for s in splits for n in series.by_split.get(s, {})))
    fig = _figure(read, splits, systems, title, metrics.pop())
    target.write_with(out.name, lambda p: fig.savefig(p, dpi=130))
    target.write_text(table.name, _table(read, splits, systems))
    return [out, table]


def _figure(read: list[Series], splits: list[str], systems: list[str], title: str, metric: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(splits) + 2.4, 0.42 * len(systems) * max(1, len(read)) ** 0.5 + 1.6))
    axes = fig.subplots(1, len(splits), sharey=True, squeeze=False)[0]
    step = 0.7 / max(1, len(read))
    for ax, split in zip(axes, splits):
        drawn = []
        for k, series in enumerate(read):
            rows = series.by_split.get(split, {})
            ys = [i + (k - (len(read) - 1) / 2) * step for i, n in enumerate(systems) if n in rows]
            ds = [rows[n] for n in systems if n in rows]
            ax.errorbar([d.delta for d in ds], ys, xerr=[[d.delta - d.low for d in ds], [d.high - d.delta for d in ds]],
                        fmt="o", ms=4, capsize=2, color=f"C{k % 10}",
                        label=f"{series.label} (against {series.baseline})")
            drawn += zip(ds, ys)
        _clip_wide_intervals(ax, drawn)
        ax.axvline(0.0, color="0.3", lw=0.8)
        ax.set_title(split, fontsize=9)
        ax.set_xlabel(f"Δ {metric} against the baseline (95 % interval, seed-aware)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(systems)), systems, fontsize=8)
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=min(3, len(read)))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(read) - 1) // 3), 1, 1))
    return fig


def _clip_wide_intervals(ax, drawn: list[tuple[Delta, float]], factor: float = 5.0) -> None:
    """Scale the panel to the intervals of ordinary width: one ``factor`` times wider than the median (a row
    whose seeds disagree wildly: 2 seeds, one degree of freedom) would flatten every other row, so the axis
    stops short of it; its Δ and interval are written at its place, with an arrow at the edge where its
    point lies beyond."""

    if len(drawn) < 3:
        return
    typical = statistics.median(d.high - d.low for d, _ in drawn)
    wide = [(d, y) for d, y in drawn if d.high - d.low > factor * typical]
    narrow = [d for d, _ in drawn if d.high - d.low <= factor * typical]
    if not wide:
        return
    low, high = min([d.low for d in narrow] + [0.0]), max([d.high for d in narrow] + [0.0])
    pad = 0.08 * (high - low)
    low, high = low - pad, high + pad
    ax.set_xlim(low, high)
    for d, y in wide:
        x = min(max(d.delta, low), high)
        if x != d.delta:
            ax.plot([x], [y], marker="<" if x == low else ">", ms=6, color="0.25", clip_on=False)
        ax.annotate(f"Δ {d.delta:+.1f} [{d.low:+.1f}, {d.high:+.1f}], off the scale", (x, y), xytext=(0, 5),
                    textcoords="offset points", ha="left" if x == low else "right" if x == high else "center",
                    fontsize=6, color="0.25")


def _table(read: list[Series], splits: list[str], systems: list[str]) -> str:
    head = "| split | system | " + " | ".join(f"{series.label}: Δ [95 % interval], p" for series in read) + " |"
    lines = [head, "|---|---|" + "---:|" * len(read)]
    for split in splits:
        for name in systems:
            cells = []
            for series in read:
                d = series.by_split.get(split, {}).get(name)
                p = "p < 0.001" if d and d.p_value < 0.001 else f"p = {d.p_value:.3f}" if d else ""
                cells.append(f"{d.delta:+.2f} [{d.low:+.2f}, {d.high:+.2f}], {p}" if d else "—")
            lines.append(f"| {split} | {name} | " + " | ".join(cells) + " |")
    sources = "; ".join(f"{series.label}: `{series.source}` (baseline {series.baseline})" for series in read)
    return (f"Δ of the seed means against each report's baseline, the seed-aware test's 95 % interval and p. "
            f"From {sources}.\n\n" + "\n".join(lines) + "\n")
