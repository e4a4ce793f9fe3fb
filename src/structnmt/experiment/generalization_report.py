"""The generalization part of a grid's report (``evaluate.benchmark``): one table per split.

For every split of the benchmark and every system: sacreBLEU, exact match, agreement
accuracy and verb-final placement accuracy as mean ± standard deviation over the seeds;
against the baseline, sacreBLEU's paired bootstrap on the first seed's translations, and
for the accuracies a paired randomization test (two-sided, sign flips of the per-item
differences, the items of all seeds pooled, each seed's items paired with the baseline's
run of the same seed). Agreement is also broken down by the number of attractors
(``agreement_by_attractors.png``) and by distance.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from .grid import GridConfig
from .runner import read_lines_exact

N_PERMUTATIONS = 2000


def paired_randomization(a: list[float], b: list[float], *, n: int = N_PERMUTATIONS, seed: int = 12345) -> float:
    """Two-sided p-value of mean(a - b) != 0 for paired outcomes, by random sign flips."""
    diffs = [x - y for x, y in zip(a, b) if x != y]
    if not diffs:
        return 1.0
    observed = abs(sum(diffs))
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed for _ in range(n))
    return (hits + 1) / (n + 1)


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def _per_item(run_dir: Path, split: str, key: str) -> list[float]:
    data = json.loads((run_dir / f"bench_{split}.json").read_text(encoding="utf-8"))["per_sentence"][key]
    return [float(x) for x in data] if key == "exact" else [float(x) for sent in data for x in sent]


def generalization_section(grid: GridConfig, results: dict, out: Path) -> list[str]:
    """Markdown lines of the per-split tables (and the attractor picture in ``out``)."""
    from ..data.generalization import benchmark_splits, load_examples
    from ..evaluate.score import paired_bootstrap

    directory = grid.evaluate.benchmark
    splits = benchmark_splits(directory)
    seed0, base = grid.seeds[0], grid.baseline
    names = [r.name for r in grid.runs]

    def run_dir(name: str, seed: int) -> Path:
        return Path(results[(name, seed)]["run_dir"])

    head = ["## Structural generalization", "",
             f"Benchmark `{directory}` (`benchmark.json` states and checks each split). Per split: mean ± std "
             f"over seeds {', '.join(map(str, grid.seeds))}; p against **{base}**: BLEU by paired bootstrap "
             f"({grid.evaluate.bootstrap_samples} samples, seed {seed0}), accuracies by a paired randomization "
             f"test ({N_PERMUTATIONS} sign flips, items of all seeds pooled). Agreement = share of agreement "
             "probes with the right number suffix; verb-final = share of reference verbs the translation puts "
             "at the end of their clause.", ""]
    lines: list[str] = []
    summary = ["| System | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    agreement_by_split: dict[str, dict[str, float]] = {n: {} for n in names}
    for split, statement in splits.items():
        refs = [" ".join(ex.tgt) for ex in load_examples(directory, split)]
        hyps = {n: read_lines_exact(run_dir(n, seed0) / f"bench_{split}.hyp") for n in names}
        others = {n: hyps[n] for n in names if n != base}
        boot = paired_bootstrap(hyps[base], others, refs, n_samples=grid.evaluate.bootstrap_samples,
                                seed=grid.evaluate.bootstrap_seed) if others else {}
        lines += [f"### {split}: {statement}", "",
                  "| System | BLEU | p | exact | agreement | p | verb-final | p | agreement by attractors |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        pooled = {n: {k: [x for s in grid.seeds for x in _per_item(run_dir(n, s), split, k)]
                      for k in ("agreement", "verb_final")} for n in names}
        for n in names:
            res = [results[(n, s)]["benchmark"][split] for s in grid.seeds]
            cells = {k: _mean_std([r[k] for r in res]) for k in ("bleu", "exact", "agreement", "verb_final")}
            by_att = {}
            for r in res:
                for k, (c, t) in r["agreement_by_attractors"].items():
                    by_att.setdefault(k, [0, 0])
                    by_att[k][0] += c
                    by_att[k][1] += t
            att = ", ".join(f"{k}: {100 * c / t:.0f}%" for k, (c, t) in sorted(by_att.items(), key=lambda kv: int(kv[0])))
            if n == base:
                p_bleu = p_agr = p_vf = "—"
            else:
                p_bleu = f"{boot[n]['p_value']:.3f}"
                p_agr = f"{paired_randomization(pooled[n]['agreement'], pooled[base]['agreement']):.3f}"
                p_vf = f"{paired_randomization(pooled[n]['verb_final'], pooled[base]['verb_final']):.3f}"
            lines.append(f"| {n} | {cells['bleu']} | {p_bleu} | {cells['exact']} | {cells['agreement']} | {p_agr} | "
                         f"{cells['verb_final']} | {p_vf} | {att} |")
            agreement_by_split[n][split] = statistics.fmean(r["agreement"] for r in res)
        lines.append("")
    for n in names:
        summary.append(f"| {n} | " + " | ".join(f"{agreement_by_split[n][s]:.1f}" for s in splits) + " |")
    _plot_attractors(grid, results, out / "agreement_by_attractors.png")
    return (head + ["Agreement accuracy (%) per split, mean over seeds:", ""] + summary + [""]
            + ["![agreement by attractors](agreement_by_attractors.png)", ""] + lines)


def _plot_attractors(grid: GridConfig, results: dict, path: Path) -> None:
    """Agreement accuracy by number of attractors (all splits and seeds pooled), per system."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.0), dpi=110)
    ax = fig.subplots()
    for i, r in enumerate(grid.runs):
        cells: dict[int, list[int]] = {}
        for s in grid.seeds:
            for split in results[(r.name, s)]["benchmark"].values():
                for k, (c, t) in split["agreement_by_attractors"].items():
                    cells.setdefault(int(k), [0, 0])
                    cells[int(k)][0] += c
                    cells[int(k)][1] += t
        xs = sorted(cells)
        ax.plot(xs, [100 * cells[x][0] / cells[x][1] for x in xs], marker="o", label=r.name, color=f"C{i % 10}")
    ax.set_xlabel("attractors between subject and verb")
    ax.set_ylabel("agreement accuracy (%)")
    ax.set_title(f"{grid.name}: agreement by attractors (all splits, seeds {', '.join(map(str, grid.seeds))})",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
