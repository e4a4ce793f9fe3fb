"""The generalization part of a grid's report (``evaluate.benchmark``): one table per split.

For every split of the benchmark and every system: sacreBLEU, exact match, agreement
accuracy and verb-final placement accuracy as mean ± standard deviation over the seeds;
against the baseline, BLEU by the seed-aware test of :mod:`structnmt.evaluate.seeds` and the
accuracies by its accuracy form (:func:`~structnmt.evaluate.seeds.seed_aware_accuracy_test`:
the spread over seeds plus the resampling of the split's sentences). Where either side has one
seed, BLEU by sacreBLEU's paired bootstrap of the first seed and the accuracies by a paired
randomization test (two-sided, sign flips of the per-item differences, the items of the common
seeds pooled): both cover test-set sampling only, which the table says. Agreement is also
broken down by the number of attractors (``agreement_by_attractors.png``) and by distance.
"""

from __future__ import annotations

import csv
import json
import random
import statistics
from pathlib import Path

import numpy as np

from ..data.generalization import benchmark_splits, load_examples
from ..evaluate.score import paired_bootstrap
from ..evaluate.seeds import describe_test, seed_aware_accuracy_test, seed_aware_test
from ..fileio.files import read_lines_exact
from .grid import GridConfig, seeds_of

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


def read_per_sentence(run_dir: Path, split: str) -> dict:
    """A run's per-sentence outcomes on one split (``bench_<split>.json``: ``exact`` one bool per sentence,
    ``agreement`` / ``verb_final`` a list of bools per sentence)."""
    return json.loads((run_dir / f"bench_{split}.json").read_text(encoding="utf-8"))["per_sentence"]


def _items(per_sentence: dict, key: str) -> list[float]:
    """The run's outcomes as one flat list of items (0/1)."""
    data = per_sentence[key]
    return [float(x) for x in data] if key == "exact" else [float(x) for sent in data for x in sent]


def sentence_counts(per_sentence: dict, key: str):
    """(N, 2) array of (items right, items) per sentence (``exact``: one item per sentence)."""
    data = per_sentence[key]
    rows = [[int(bool(x)), 1] for x in data] if key == "exact" else [[sum(map(bool, s)), len(s)] for s in data]
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def _pool(tables: list[dict]) -> dict[str, list[int]]:
    """Sum {bucket: [correct, total]} tables (of several seeds)."""
    out: dict[str, list[int]] = {}
    for t in tables:
        for k, (c, n) in t.items():
            out.setdefault(k, [0, 0])
            out[k][0] += c
            out[k][1] += n
    return out


def _accuracy_p(grid: GridConfig, results: dict, outcomes: dict, name: str, key: str) -> tuple[float, bool]:
    """(p-value of ``name`` against the baseline on one accuracy, whether it is the seed-aware test); ``outcomes``:
    {(row, seed): :func:`read_per_sentence`} of one split. With >= 2 seeds a side the seed-aware accuracy test, else
    the paired randomization test of the items of the seeds both sides have (test-set sampling only)."""

    base = grid.baseline
    seeds_a, seeds_b = seeds_of(grid, results, name), seeds_of(grid, results, base)
    if len(seeds_a) >= 2 and len(seeds_b) >= 2:
        test = seed_aware_accuracy_test([sentence_counts(outcomes[(base, s)], key) for s in seeds_b],
                                        {name: [sentence_counts(outcomes[(name, s)], key) for s in seeds_a]},
                                        n_samples=grid.evaluate.bootstrap_samples, seed=grid.evaluate.bootstrap_seed,
                                        method=grid.evaluate.seed_test)
        return test[name].p_value, True
    common = [s for s in seeds_a if (base, s) in results]  # each seed's items paired with the baseline's same seed
    pooled = ([x for s in common for x in _items(outcomes[(m, s)], key)] for m in (name, base))
    return paired_randomization(*pooled), False


def _bleu_tests(grid: GridConfig, results: dict, split: str, refs: list[str], run_dir) -> dict[str, float]:
    """BLEU p-values against the baseline on one benchmark split: the seed-aware test where the baseline
    has >= 2 seeds (rows with fewer are left out), else the first seed's paired bootstrap."""

    ev, base = grid.evaluate, grid.baseline

    def hyps(name: str, seed: int) -> list[str]:
        return read_lines_exact(run_dir(name, seed) / f"bench_{split}.hyp")

    others = [r.name for r in grid.runs if r.name != base]
    if len(seeds_of(grid, results, base)) >= 2:
        runs = {n: [hyps(n, s) for s in seeds_of(grid, results, n)] for n in others}
        tests = seed_aware_test([hyps(base, s) for s in seeds_of(grid, results, base)],
                                {n: r for n, r in runs.items() if len(r) >= 2}, refs, n_samples=ev.bootstrap_samples,
                                seed=ev.bootstrap_seed, aso=False, method=ev.seed_test)
        return {n: t.p_value for n, t in tests.items()}
    seed0 = grid.seeds[0]
    boot = paired_bootstrap(hyps(base, seed0), {n: hyps(n, seed0) for n in others}, refs,
                            n_samples=ev.bootstrap_samples, seed=ev.bootstrap_seed)
    return {n: b["p_value"] for n, b in boot.items()}


def _header(grid: GridConfig, results: dict, directory: str) -> list[str]:
    """The section's opening paragraph: the benchmark, the statistics and the tests."""

    base, seed0 = grid.baseline, grid.seeds[0]
    seed_aware = len(seeds_of(grid, results, base)) >= 2
    bleu_test = (describe_test(grid.evaluate.bootstrap_samples, grid.evaluate.bootstrap_seed, grid.evaluate.seed_test).split(" ASO:")[0]
                 if seed_aware else
                 f"paired bootstrap of seed {seed0} ({grid.evaluate.bootstrap_samples} samples; test-set sampling "
                 "only, so no BLEU difference is read as significant)")
    acc_test = ("the same seed-aware test on the accuracies (per-sentence counts of items right, the split's "
                "sentences resampled); where a row has one seed, a paired randomization test "
                f"({N_PERMUTATIONS} sign flips of the items of the seeds both sides have), which covers test-set "
                "sampling only and is marked †" if seed_aware else
                f"a paired randomization test ({N_PERMUTATIONS} sign flips of the items), which covers test-set "
                "sampling only (†)")
    return ["## Structural generalization", "",
             f"Benchmark `{directory}` (`benchmark.json` states and checks each split). Per split: mean ± std "
             f"over seeds {', '.join(map(str, grid.seeds))}; p against **{base}**: BLEU by the {bleu_test}; "
             f"accuracies by {acc_test}. Agreement = share of agreement "
             "probes with the right number suffix; verb-final = share of reference verbs the translation puts "
             "at the end of their clause.", ""]


def generalization_section(grid: GridConfig, results: dict, out) -> list[str]:
    """Markdown lines of the per-split tables (and the attractor picture and ``generalization.csv`` in ``out``,
    the report's :class:`structnmt.fileio.files.OutputDir`)."""

    directory = grid.evaluate.benchmark
    splits = benchmark_splits(directory)
    base = grid.baseline
    names = [r.name for r in grid.runs]

    def run_dir(name: str, seed: int) -> Path:
        return Path(results[(name, seed)]["run_dir"])

    head = _header(grid, results, directory)
    lines: list[str] = []
    summary = ["| System | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    agreement_by_split: dict[str, dict[str, float]] = {n: {} for n in names}
    csv_rows: list[dict] = []  # generalization.csv: one row per (system, split), means and stds over seeds
    for split, statement in splits.items():
        refs = [" ".join(ex.tgt) for ex in load_examples(directory, split)]
        boot = _bleu_tests(grid, results, split, refs, run_dir) if len(names) > 1 else {}
        outcomes = {k: read_per_sentence(run_dir(*k), split) for k in results}  # each run's file read once
        lines += [f"### {split}: {statement}", "",
                  "| System | BLEU | p | exact | agreement | p | verb-final | p | agreement by attractors "
                  "| agreement by distance (words) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for n in names:
            res = [results[(n, s)]["benchmark"][split] for s in seeds_of(grid, results, n)]
            cells = {k: _mean_std([r[k] for r in res]) for k in ("bleu", "exact", "agreement", "verb_final")}
            att, dist = _agreement_cells(res)
            if n == base:
                p_bleu = p_agr = p_vf = "—"
            else:
                p_bleu = f"{boot[n]:.3f}" if n in boot else "—"
                p_agr, p_vf = (_p_cell(*_accuracy_p(grid, results, outcomes, n, k))
                               for k in ("agreement", "verb_final"))
            lines.append(f"| {n} | {cells['bleu']} | {p_bleu} | {cells['exact']} | {cells['agreement']} | {p_agr} | "
                         f"{cells['verb_final']} | {p_vf} | {att} | {dist} |")
            agreement_by_split[n][split] = statistics.fmean(r["agreement"] for r in res)
            row = {"System": n, "split": split, "n_seeds": len(res)}
            for k in ("bleu", "exact", "agreement", "verb_final"):
                vals = [r[k] for r in res]
                row[k] = statistics.fmean(vals)
                row[f"{k}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            csv_rows.append(row)
        lines.append("")
    for n in names:
        summary.append(f"| {n} | " + " | ".join(f"{agreement_by_split[n][s]:.1f}" for s in splits) + " |")
    out.write_with("agreement_by_attractors.png", lambda tmp: _plot_attractors(grid, results, tmp))

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(csv_rows[0]) if csv_rows else ["System", "split"])
            w.writeheader()
            w.writerows(csv_rows)

    out.write_with("generalization.csv", write)
    return (head + ["Agreement accuracy (%) per split, mean over seeds (every split's means and standard deviations: "
                    "`generalization.csv`):", ""] + summary + [""]
            + ["![agreement by attractors](agreement_by_attractors.png)", ""] + lines)


def _p_cell(p: float, seed_aware: bool) -> str:
    """A p-value cell; one from a test blind to the seeds (a side with one seed) carries a dagger."""
    return f"{p:.3f}" if seed_aware else f"{p:.3f}†"


def _agreement_cells(res: list[dict]) -> tuple[str, str]:
    """The table's agreement cells of one system on one split, pooled over its seeds: by the number of
    attractors ("0: 98%, 1: 91%, ...") and by the subject-verb distance in words."""
    by_att: dict[str, list[int]] = {}
    for r in res:
        for k, (c, t) in r["agreement_by_attractors"].items():
            by_att.setdefault(k, [0, 0])
            by_att[k][0] += c
            by_att[k][1] += t
    att = ", ".join(f"{k}: {100 * c / t:.0f}%" for k, (c, t) in sorted(by_att.items(), key=lambda kv: int(kv[0])))
    by_dist = _pool([r.get("agreement_by_distance", {}) for r in res])
    dist = ", ".join(f"{k}: {100 * c / t:.0f}%" for k, (c, t) in
                     sorted(by_dist.items(), key=lambda kv: int(kv[0].split("-")[0].rstrip("+"))))
    return att, dist


#: buckets with fewer probes than this (per system, all splits and seeds) are not drawn
MIN_PROBES = 30


def _plot_attractors(grid: GridConfig, results: dict, path: Path) -> None:
    """Agreement accuracy by number of attractors (all splits and seeds pooled), per system;
    attractor counts with fewer than ``MIN_PROBES`` probes are left out (too noisy to read)."""
    from matplotlib.figure import Figure

    n = len(grid.runs)
    fig = Figure(figsize=(9.5 if n > 6 else 6.5, 4.4), dpi=110)
    ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    for i, r in enumerate(grid.runs):
        cells = _pool([split["agreement_by_attractors"] for s in seeds_of(grid, results, r.name)
                       for split in results[(r.name, s)]["benchmark"].values()])
        xs = sorted(int(k) for k, (_, t) in cells.items() if t >= MIN_PROBES)
        ax.plot(xs, [100 * cells[str(x)][0] / cells[str(x)][1] for x in xs], marker="o", ms=4, label=r.name,
                color=f"C{i % 10}", linestyle=styles[(i // 10) % len(styles)])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axhline(50, color="grey", lw=0.8, linestyle=":")
    ax.set_xlabel("attractors between subject and verb")
    ax.set_ylabel("agreement accuracy (%)")
    ax.set_title(f"{grid.name}: agreement by attractors\n(all splits pooled, seeds "
                 f"{', '.join(map(str, grid.seeds))}; buckets with >= {MIN_PROBES} probes; dotted: 50 %)", fontsize=9)
    ax.grid(alpha=0.3)
    if n > 6:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
