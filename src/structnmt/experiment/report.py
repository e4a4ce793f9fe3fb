"""The report of a grid: results table (Markdown + CSV), learning curves, n-gram precision gains.

Significance: sacreBLEU's paired bootstrap resampling (two-sided; the Moses
``bootstrap-hypothesis-difference-significance.pl`` test) of each system's first-seed
hypotheses against the baseline's first-seed hypotheses. Marks follow the MG-SA / RHE
papers: ``⇑`` p < 0.01, ``↑`` p < 0.05 for a significant gain; ``⇓``/``↓`` likewise for
a significant loss.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import math
import os
import platform
import statistics
from pathlib import Path

from ..config import Config
from .grid import GridConfig
from .runner import read_lines_exact

COLUMNS = ["System", "# Params", "Speed (train tok/s)", "Decode (sent/s)", "Peak mem (MB)", "BLEU", "Δ", "p", "chrF"]
CSV_COLUMNS = ["system", "baseline", "params", "train_tok_per_s", "decode_sent_per_s", "peak_memory_mb", "bleu",
               "delta", "mark", "p_value", "chrf", "bleu_mean", "bleu_std", "n_seeds", "num_updates",
               "train_target_tokens", "train_seconds", "seed"]


def format_params(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.1f}K"
    return str(n)


def significance_mark(p: float | None, delta: float) -> str:
    if p is None or math.isnan(p):
        return ""
    if p < 0.01:
        return "⇑" if delta > 0 else "⇓"
    if p < 0.05:
        return "↑" if delta > 0 else "↓"
    return ""


def hardware() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "gpu": gpu,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "")}


def _fmt(v, spec: str, empty: str = "—") -> str:
    return empty if v is None else format(v, spec)


def seeds_of(grid: GridConfig, results: dict, name: str) -> list[int]:
    """The seeds of run ``name`` that have results (all of ``grid.seeds`` unless the report was
    written with ``--report-only`` on an unfinished grid)."""
    return [s for s in grid.seeds if (name, s) in results]


def _metric_key(grid: GridConfig) -> str:
    return "bleu_lc_tok" if grid.evaluate.lc_tok else "bleu"


def build_rows(grid: GridConfig, out: Path, results: dict, refs: list[str]) -> tuple[list[dict], dict | None]:
    """One row per run (first seed measured, all seeds averaged); the bootstrap's signature."""
    from ..evaluate.score import paired_bootstrap

    key = _metric_key(grid)
    seed0 = grid.seeds[0]

    def hyps(name: str) -> list[str]:
        r = results[(name, seed0)]
        return read_lines_exact(Path(r["run_dir"]) / r["hyp_file"])

    others = {r.name: hyps(r.name) for r in grid.runs if r.name != grid.baseline}
    tests = {}
    if others:
        tests = paired_bootstrap(hyps(grid.baseline), others, refs, metric=key,
                                 n_samples=grid.evaluate.bootstrap_samples, seed=grid.evaluate.bootstrap_seed,
                                 lang=grid.evaluate.lang)
    base_score = results[(grid.baseline, seed0)][key]
    rows = []
    for r in grid.runs:
        first = results[(r.name, seed0)]
        scores = [results[(r.name, s)][key] for s in seeds_of(grid, results, r.name)]
        is_base = r.name == grid.baseline
        delta = 0.0 if is_base else first[key] - base_score
        p = None if is_base else tests[r.name]["p_value"]
        rows.append({
            "system": r.name, "baseline": is_base, "params": first["n_params"],
            "train_tok_per_s": first["train_tok_per_s"], "decode_sent_per_s": first["decode_sent_per_s"],
            "peak_memory_mb": first["peak_memory_mb"], "bleu": first[key], "delta": delta,
            "mark": significance_mark(p, delta), "p_value": p, "chrf": first["chrf"],
            "bleu_mean": statistics.fmean(scores), "bleu_std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "n_seeds": len(scores), "num_updates": first["num_updates"],
            "train_target_tokens": first["train_target_tokens"], "train_seconds": first["train_seconds"],
            "seed": seed0,
        })
    signature = next(iter(tests.values()))["signature"] if tests else None
    return rows, signature


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_COLUMNS})


def markdown_table(rows: list[dict], *, seeds: int, bleu_name: str = "BLEU") -> str:
    cols = [c if c != "BLEU" else bleu_name for c in COLUMNS]
    if seeds > 1:
        cols.append(f"{bleu_name} mean ± std ({seeds} seeds)")
        if any(r["n_seeds"] < seeds for r in rows):
            cols[-1] = f"{bleu_name} mean ± std (seeds)"
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for r in rows:
        cells = [r["system"], format_params(r["params"]), _fmt(r["train_tok_per_s"], ",.0f"),
                 _fmt(r["decode_sent_per_s"], ".1f"), _fmt(r["peak_memory_mb"], ",.0f"),
                 f"{r['bleu']:.2f}{r['mark']}", "—" if r["baseline"] else f"{r['delta']:+.2f}",
                 "—" if r["p_value"] is None else f"{r['p_value']:.3f}", f"{r['chrf']:.2f}"]
        if seeds > 1:
            cells.append(f"{r['bleu_mean']:.2f} ± {r['bleu_std']:.2f}"
                         + (f" ({r['n_seeds']} of {seeds})" if r["n_seeds"] < seeds else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_learning_curves(grid: GridConfig, results: dict, path: Path) -> None:
    from ..analysis.curves import plot_curves

    series, styles = [], []
    for i, r in enumerate(grid.runs):
        for j, seed in enumerate(seeds_of(grid, results, r.name)):
            series.append((r.name if j == 0 else None, Path(results[(r.name, seed)]["run_dir"]) / "metrics.jsonl",
                           f"C{i % 10}", 1.0 if j == 0 else 0.35))
            styles.append(["-", "--", ":"][(i // 10) % 3])
    extra = f"; faded lines: seeds {', '.join(map(str, grid.seeds[1:]))}" if len(grid.seeds) > 1 else ""
    plot_curves(series, f"{grid.name}: learning curves (seed {grid.seeds[0]}{extra})", path, linestyles=styles)


def plot_ngram_gain(grid: GridConfig, results: dict, path: Path) -> None:
    """MG-SA Fig. 2: per n = 1..4, BLEU n-gram precision of each variant minus the baseline's."""
    from matplotlib.figure import Figure

    key = "bleu_lc_tok_precisions" if grid.evaluate.lc_tok else "bleu_precisions"
    seed0 = grid.seeds[0]
    base = results[(grid.baseline, seed0)][key]
    variants = [r.name for r in grid.runs if r.name != grid.baseline]
    fig = Figure(figsize=(max(6.5, 1.6 + 1.4 * max(1, len(variants))), 4.2), dpi=110)
    ax = fig.subplots()
    width = 0.8 / max(1, len(variants))
    for i, name in enumerate(variants):
        prec = results[(name, seed0)][key]
        gains = [p - b for p, b in zip(prec, base)]
        xs = [n + (i - (len(variants) - 1) / 2) * width for n in range(1, 5)]
        bars = ax.bar(xs, gains, width=width * 0.95, label=name, color=f"C{(i + 1) % 10}")
        ax.bar_label(bars, labels=[f"{g:+.2f}" for g in gains], fontsize=7, padding=2)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks([1, 2, 3, 4])
    ax.set_xticklabels([f"{n}-gram" for n in range(1, 5)])
    ax.set_ylabel("BLEU n-gram precision gain (points)")
    ax.set_title(f"{grid.name}\nn-gram precision gain over {grid.baseline} (seed {seed0})", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if variants:
        ax.legend(fontsize=8)
    else:
        ax.text(2.5, 0, "no variant besides the baseline", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path)


def write_report(grid: GridConfig, out: Path, results: dict, configs: dict[tuple[str, int], Config],
                 refs: list[str], *, dirs: dict[str, str], command: str, data_path: Path, log=print,
                 missing: list[tuple[str, int]] | None = None) -> Path:
    """Write ``results.md``/``results.csv`` and the pictures. ``missing`` (``--report-only`` on an
    unfinished grid) lists the (run, seed) pairs without results: a run without its first seed
    leaves the tables, one without a later seed is averaged over the seeds it has, and both are
    named under the table."""
    missing = list(missing or [])
    if missing:
        grid = dataclasses.replace(grid, runs=[r for r in grid.runs if (r.name, grid.seeds[0]) in results])
    rows, bs_signature = build_rows(grid, out, results, refs)
    write_csv(rows, out / "results.csv")
    plot_learning_curves(grid, results, out / "learning_curves.png")
    plot_ngram_gain(grid, results, out / "ngram_gain.png")
    # the hardware the runs were decoded on (recorded in result.json), else this machine's
    recorded = [r["hardware"] for r in results.values() if r.get("hardware")]
    hw = recorded[0] if recorded else hardware()
    where = ("recorded by the runs" if recorded and all(h == hw for h in recorded) else
             "runs recorded different machines: see result.json" if recorded else
             "this machine (the runs recorded none)")
    ev = grid.evaluate
    seed0 = grid.seeds[0]
    first = results[(grid.baseline, seed0)]
    bleu_name = "BLEU (lc,tok)" if ev.lc_tok else "BLEU"
    sig_key = "bleu_lc_tok_signature" if ev.lc_tok else "bleu_signature"
    threads = sorted({c.train.threads for c in configs.values()})
    devices = sorted({r["train_device"] for r in results.values()})
    mem_kind = ("peak GPU memory allocated by the training process" if "cuda" in devices
                else "peak resident memory (RSS) of the training process")
    lines = [
        f"# {grid.name}",
        "",
        markdown_table(rows, seeds=len(grid.seeds), bleu_name=bleu_name),
        "",
        f"- **Budget**: {grid.budget.describe()}, identical for every run; seeds: "
        f"{', '.join(map(str, grid.seeds))}.",
        f"- **Data**: `{data_path}`, split `{ev.split}` ({first['n_sentences']:,} sentences).",
        f"- **Decoding**: average of the last {ev.average_last} checkpoints, beam {ev.beam}, "
        f"length penalty {ev.lenpen:g}.",
        f"- **Significance**: paired bootstrap resampling ({ev.bootstrap_samples:,} samples, seed "
        f"{ev.bootstrap_seed}; sacreBLEU, two-sided) of each system's seed-{seed0} translations against "
        f"the baseline **{grid.baseline}**'s seed-{seed0} translations. ⇑/↑: significantly better at "
        "p < 0.01 / p < 0.05; ⇓/↓: significantly worse. Δ = BLEU − baseline BLEU (seed "
        f"{seed0}).",
        f"- **Scores**: {bleu_name} `{first[sig_key]}`; chrF `{first['chrf_signature']}`"
        + (f"; test `{bs_signature}`" if bs_signature else "") + ".",
        f"- **Hardware**: {hw['platform']}; CPU {hw['cpu'] or 'unknown'} ({hw['cpu_count']} logical CPUs); "
        f"GPU {hw['gpu'] or 'none'}; training device {', '.join(devices)}; torch {hw['torch']}, "
        f"Python {hw['python']}; train.threads {', '.join(str(t) for t in threads)}"
        + (f"; OMP_NUM_THREADS={hw['omp_num_threads']}" if hw["omp_num_threads"] else "") + f" ({where}).",
        f"- **Command**: `{command}`",
        f"- **Date**: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        "",
        "Columns: **# Params** trainable parameters (shared embeddings counted once); **Speed** "
        "training target tokens per second of training wall-clock (validation and checkpoint "
        "writing excluded); **Decode** sentences per second translating the split (beam search, "
        f"in the runner process); **Peak mem** {mem_kind}; **p** the bootstrap p-value; "
        f"**chrF** sacreBLEU chrF2. All measured on seed {seed0}.",
        "",
        "![learning curves](learning_curves.png)",
        "",
        "![n-gram precision gain](ngram_gain.png)",
        "",
    ]
    if missing:
        lines[3:3] = ["", "**Unfinished grid** (written with `--report-only`): no results yet for "
                      + "; ".join(f"{n} (seed {s})" for n, s in missing)
                      + ". A system without its first seed is left out of the tables; the mean ± std of one "
                      "without a later seed is over the seeds it has."]
    lines += ["## Per run", "", "| System | seed | updates | target tokens | train s | "
              f"{bleu_name} | chrF | 1/2/3/4-gram precision | directory |",
              "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    pkey = "bleu_lc_tok_precisions" if ev.lc_tok else "bleu_precisions"
    bkey = "bleu_lc_tok" if ev.lc_tok else "bleu"
    for seed in grid.seeds:
        for r in grid.runs:
            if (r.name, seed) not in results:
                continue
            res = results[(r.name, seed)]
            prec = "/".join(f"{p:.1f}" for p in res[pkey])
            lines.append(f"| {r.name} | {seed} | {res['num_updates']:,} | {res['train_target_tokens']:,} | "
                         f"{res['train_seconds']:.0f} | {res[bkey]:.2f} | {res['chrf']:.2f} | {prec} | "
                         f"`runs/{dirs[r.name]}/seed{seed}` |")
    if ev.benchmark:
        from .generalization_report import generalization_section

        lines += ["", *generalization_section(grid, results, out)]
    path = out / "results.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
