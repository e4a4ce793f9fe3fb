"""The report of a grid: results tables (Markdown + CSV), learning curves, n-gram precision gains.

Significance: with at least 2 seeds per row, the seed-aware test of
:mod:`structnmt.evaluate.seeds` (training variance over the seeds plus test-set sampling by
paired bootstrap over the sentences, every seed of both systems), with deepsig's almost
stochastic order reported beside it; marks follow the MG-SA / RHE papers: ``⇑`` p < 0.01,
``↑`` p < 0.05 for a significant gain, ``⇓``/``↓`` for a significant loss. A one-seed grid
shows sacreBLEU's paired bootstrap p-value of its one seed (test-set sampling only) and
marks nothing: differences between two seeds of the same configuration pass that test.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import statistics
from pathlib import Path

import torch

from ..analysis.curves import plot_curves
from ..analysis.deltas import draw_report_deltas, read_deltas
from ..config import Config
from ..evaluate.score import corpus_scores, paired_bootstrap
from ..evaluate.seeds import describe_test, seed_aware_test
from ..fileio.files import OutputDir, committed_or_plain, read_lines_exact
from ..machine.device import device_type, trains_in_bf16
from .generalization_report import generalization_section
from .grid import GridConfig, seeds_of, split_prefix

COLUMNS = ["System", "# Params", "Speed (train tok/s)", "Decode (sent/s)", "Peak mem (MB)", "BLEU", "Δ", "p", "chrF"]
#: results.csv: one line per (split, system); the per-seed figures follow as <metric>_seed<k> columns
CSV_COLUMNS = ["split", "system", "baseline", "params", "train_tok_per_s", "decode_sent_per_s", "peak_memory_mb",
               "metric", "bleu", "delta", "mark", "p_value", "test", "chrf", "bleu_mean", "bleu_std", "n_seeds",
               "sacrebleu_mean", "sacrebleu_std", "bleu_lc_tok_mean", "bleu_lc_tok_std", "chrf_mean", "chrf_std",
               "s_sel", "seed_se", "sentence_se", "interaction_sd",
               "baseline_interaction_sd", "seed_test", "df", "aso_better", "aso_worse", "mde", "num_updates",
               "train_target_tokens", "train_seconds", "seed"]
#: per-seed metric columns: result.json key -> CSV name
SEED_METRICS = {"bleu": "sacrebleu", "bleu_lc_tok": "bleu_lc_tok", "chrf": "chrf"}


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


def _metric_key(grid: GridConfig) -> str:
    return "bleu_lc_tok" if grid.evaluate.lc_tok else "bleu"


#: what every run's result.json holds (the runner writes more; these the report cannot do without)
RESULT_KEYS = ("bleu", "chrf", "hyp_file", "split", "num_updates")


class DamagedResult(Exception):
    """A run's result.json that cannot be read as one: the sentence names the run directory and what is wrong."""


def read_result(path: Path, grid: GridConfig) -> dict:
    """A run's ``result.json``, checked: a JSON object with :data:`RESULT_KEYS` (and the grid's headline score)
    whose scores are finite numbers; else :class:`DamagedResult` saying what is wrong and what to do."""

    fix = f"delete {path} to train and score that run again (or copy its run directory again)"
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DamagedResult(f"{path.parent}: its result.json is not text; {fix}.") from None
    except ValueError as err:
        raise DamagedResult(f"{path.parent}: its result.json is cut short or not JSON ({err}); {fix}.") from None
    if not isinstance(res, dict):
        raise DamagedResult(f"{path.parent}: its result.json holds a {type(res).__name__}, not a run's record; {fix}.")
    missing = [k for k in (*RESULT_KEYS, _metric_key(grid)) if k not in res]
    if missing:
        raise DamagedResult(f"{path.parent}: its result.json has no '{missing[0]}'; {fix}.")
    for key in ("bleu", "chrf", _metric_key(grid)):
        value = res[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DamagedResult(f"{path.parent}: its result.json's '{key}' is {value!r}, not a finite score; {fix}.")
    return res


def headline_score(grid: GridConfig, res: dict) -> str:
    """The score a run's progress line shows: the one the report ranks on (BLEU (lc,tok) where the grid
    scores it: a lowercased model's cased BLEU against cased references says little), else BLEU."""
    key = _metric_key(grid)
    return f"{'BLEU (lc,tok)' if key == 'bleu_lc_tok' else 'BLEU'} {res[key]:.2f}"


def split_result(grid: GridConfig, res: dict, split: str) -> dict | None:
    """A run's scores on ``split``: the evaluation split's are the result's own keys, an extra split's
    (and a joined set's, :func:`with_joined`) are under ``splits`` (None where the run has not been scored on it)."""
    return res if split == grid.evaluate.split else res.get("splits", {}).get(split)


def join_parts(split: str) -> list[str]:
    """The splits a joined set is made of ("test+test1" -> [test, test1]); a plain split: itself."""
    return split.split("+")


def _hyps(grid: GridConfig, results: dict, name: str, seed: int, split: str) -> list[str]:
    """A run's translations of ``split`` (of each part of a joined set, in order): ``<run>/<hyp_file>``, or its
    gzipped copy (docs/outputs keeps them so)."""
    r = results[(name, seed)]
    return [h for part in join_parts(split)
            for h in read_lines_exact(committed_or_plain(Path(r["run_dir"]) / split_result(grid, r, part)["hyp_file"]))]


def joined_splits(grid: GridConfig, data_path: Path) -> list[str]:
    """The splits the report joins (``evaluate.join``); unset, the scored splits when there are two or more and
    the dataset prepared them from files of one domain: names equal but for their digits (test_2016_flickr,
    test_2017_flickr; not test_2017_mscoco)."""
    ev = grid.evaluate
    if ev.join is not None:
        return list(ev.join)
    scored = [ev.split, *ev.extra_splits]
    if len(scored) < 2:
        return []
    cfg = Config()
    cfg.data.path = str(data_path)
    names = [split_prefix(cfg, x)[0] for x in scored]
    if any(n is None for n in names):
        return []
    return scored if len({re.sub(r"\d+", "", Path(n).name) for n in names}) == 1 else []


def with_joined(grid: GridConfig, results: dict, parts: list[str], refs: list[str]) -> dict:
    """``results`` with every run scored on the joined set ``parts`` too (under ``splits["a+b"]``): its
    translations of every part concatenated and scored against the concatenated references, corpus BLEU
    and chrF recomputed on the join (not an average of the parts' scores). Runs lacking a part are left as
    they are."""
    ev, joined_name, out = grid.evaluate, "+".join(parts), {}
    for (row, seed), res in results.items():
        if not all(split_result(grid, res, x) for x in parts):
            out[(row, seed)] = res
            continue
        scores = {s.name: s for s in corpus_scores(_hyps(grid, results, row, seed, joined_name), refs,
                                                   lowercase_tokenized=ev.lc_tok, lang=ev.lang)}
        joined = {"split": joined_name, "n_sentences": len(refs), "bleu": scores["BLEU"].score,
                  "bleu_precisions": scores["BLEU"].precisions, "chrf": scores["chrF"].score}
        if "BLEU (lc,tok)" in scores:
            joined.update(bleu_lc_tok=scores["BLEU (lc,tok)"].score,
                          bleu_lc_tok_precisions=scores["BLEU (lc,tok)"].precisions)
        out[(row, seed)] = {**res, "splits": {**res.get("splits", {}), joined_name: joined}}
    return out


def _tests(grid: GridConfig, results: dict, split: str, refs: list[str], seeds: dict[str, list[int]]) -> tuple[dict, dict]:
    """({system: test}, facts about the test) for one split: seed-aware where the baseline has >= 2
    seeds (rows with fewer than 2 are left untested), else the first seed's paired bootstrap."""

    ev, key, base = grid.evaluate, _metric_key(grid), grid.baseline
    others = [r.name for r in grid.runs if r.name != base]
    if len(seeds[base]) >= 2:
        testable = {n: [_hyps(grid, results, n, s, split) for s in seeds[n]] for n in others if len(seeds[n]) >= 2}
        tests = seed_aware_test([_hyps(grid, results, base, s, split) for s in seeds[base]], testable, refs,
                                metric=key, n_samples=ev.bootstrap_samples, seed=ev.bootstrap_seed, lang=ev.lang,
                                method=ev.seed_test)
        return ({n: {"p_value": t.p_value, "test": t} for n, t in tests.items()},
                {"kind": "seed-aware", "untested": [n for n in others if n not in testable]})
    seed0 = grid.seeds[0]
    boot = paired_bootstrap(_hyps(grid, results, base, seed0, split),
                            {n: _hyps(grid, results, n, seed0, split) for n in others}, refs, metric=key,
                            n_samples=ev.bootstrap_samples, seed=ev.bootstrap_seed, lang=ev.lang) if others else {}
    signature = next(iter(boot.values()))["signature"] if boot else None
    return boot, {"kind": "one-seed bootstrap", "signature": signature, "untested": []}


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def build_rows(grid: GridConfig, out: Path, results: dict, refs: list[str], split: str | None = None
               ) -> tuple[list[dict], dict]:
    """One row per run on ``split`` (default: the evaluation split): measurements of the first seed,
    scores as means and standard deviations over the seeds, the test against the baseline."""
    split = split or grid.evaluate.split
    key = _metric_key(grid)
    seed0 = grid.seeds[0]
    seeds = {r.name: [s for s in seeds_of(grid, results, r.name) if split_result(grid, results[(r.name, s)], split)]
             for r in grid.runs}
    tests, info = _tests(grid, results, split, refs, seeds)
    seed_aware = info["kind"] == "seed-aware"
    base_score = _mean_std([split_result(grid, results[(grid.baseline, s)], split)[key]
                            for s in seeds[grid.baseline]])[0]
    rows = []
    for r in grid.runs:
        first = results[(r.name, seed0)]
        per_seed = {s: split_result(grid, results[(r.name, s)], split) for s in seeds[r.name]}
        is_base = r.name == grid.baseline
        score, std = _mean_std([v[key] for v in per_seed.values()])
        delta = 0.0 if is_base else score - base_score
        test = tests.get(r.name)
        p = None if is_base or test is None else test["p_value"]
        row = {
            "split": split, "system": r.name, "baseline": is_base, "params": first["n_params"],
            "train_tok_per_s": first["train_tok_per_s"], "decode_sent_per_s": first["decode_sent_per_s"],
            "peak_memory_mb": first["peak_memory_mb"], "metric": key, "bleu": score, "delta": delta,
            # a one-seed p-value covers test-set sampling only: no mark (docs/experiments.md)
            "mark": significance_mark(p, delta) if seed_aware else "", "p_value": p,
            "test": "" if is_base or test is None else info["kind"],
            "chrf": _mean_std([v["chrf"] for v in per_seed.values()])[0], "bleu_mean": score, "bleu_std": std,
            "n_seeds": len(per_seed), "num_updates": first["num_updates"],
            "train_target_tokens": first["train_target_tokens"], "train_seconds": first["train_seconds"],
            "seed": seed0,
        }
        for metric, column in SEED_METRICS.items():
            values = {s: v[metric] for s, v in per_seed.items() if v.get(metric) is not None}
            if values:
                row[f"{column}_mean"], row[f"{column}_std"] = _mean_std(list(values.values()))
            for s in grid.seeds:
                row[f"{column}_seed{s}"] = values.get(s)
        if test is not None and "test" in test:
            t = test["test"]
            row.update({"s_sel": t.s_sel, "seed_se": t.seed_se, "sentence_se": t.sentence_se, "df": t.df,
                        "interaction_sd": t.interaction_sd, "baseline_interaction_sd": t.baseline_interaction_sd,
                        "seed_test": t.method,
                        "aso_better": t.aso_better, "aso_worse": t.aso_worse,
                        "mde": t.minimal_detectable_effect()})
        if is_base and seed_aware:
            row["s_sel"] = next(iter(tests.values()))["test"].baseline_s_sel if tests else None
        rows.append(row)
    return rows, info


def write_csv(rows: list[dict], path: Path, seeds: list[int]) -> None:
    columns = CSV_COLUMNS + [f"{c}_seed{s}" for c in SEED_METRICS.values() for s in seeds]
    with open(path, "w", encoding="utf-8", newline="") as f:  # (a temporary file of the report's OutputDir)
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})


def _pm(row: dict, column: str) -> str:
    if row.get(f"{column}_mean") is None:
        return "—"
    return f"{row[f'{column}_mean']:.2f} ± {row[f'{column}_std']:.2f}"


def markdown_table(rows: list[dict], *, seeds: int, bleu_name: str = "BLEU", measurements: bool = True,
                   lc_tok: bool = False) -> str:
    """The table of one split. One seed: the first seed's scores and its bootstrap p (no marks). Several:
    means ± standard deviations over the seeds, Δ of the means, the seed-aware p and deepsig's ASO."""
    first = ["System"] + (COLUMNS[1:5] if measurements else [])
    if seeds <= 1:
        cols = first + [bleu_name, "Δ", "p", "chrF"]
    else:
        cols = first + [f"{bleu_name} mean ± std", "Δ (means)", "p (seed-aware)", "MDE", "ASO ε"]
        cols += (["BLEU mean ± std"] if lc_tok else []) + ["chrF mean ± std"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for r in rows:
        cells = [r["system"]]
        if measurements:
            cells += [format_params(r["params"]), _fmt(r["train_tok_per_s"], ",.0f"),
                      _fmt(r["decode_sent_per_s"], ".1f"), _fmt(r["peak_memory_mb"], ",.0f")]
        delta = "—" if r["baseline"] else f"{r['delta']:+.2f}"
        p = "—" if r["p_value"] is None else f"{r['p_value']:.3f}"
        if seeds <= 1:
            cells += [f"{r['bleu']:.2f}", delta, p, f"{r['chrf']:.2f}"]
        else:
            fewer = f" ({r['n_seeds']} of {seeds})" if r["n_seeds"] < seeds else ""
            cells += [f"{r['bleu']:.2f} ± {r['bleu_std']:.2f}{r['mark']}{fewer}", delta, p,
                      _fmt(r.get("mde"), ".2f"), _fmt(r.get("aso_better"), ".2f")]
            cells += ([_pm(r, "sacrebleu")] if lc_tok else []) + [_pm(r, "chrf")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def noise_floor(rows: list[dict], bleu_name: str) -> str:
    """One line: the baseline's spread over its seeds, next to the differences read against it."""
    base = next(r for r in rows if r["baseline"])
    if base["n_seeds"] < 2:
        return ("- **Noise floor**: one seed, so the spread between seeds is not measured here; no Δ in this table "
                "is read as an effect.")
    vals = [base[k] for k in base if k.startswith("bleu_lc_tok_seed" if base["metric"] == "bleu_lc_tok"
                                                    else "sacrebleu_seed") and base[k] is not None]
    deltas = [abs(r["delta"]) for r in rows if not r["baseline"]]
    inside = sum(d <= base["bleu_std"] for d in deltas)
    return (f"- **Noise floor**: the baseline's {bleu_name} over its {len(vals)} seeds spans "
            f"{min(vals):.2f}–{max(vals):.2f} (std {base['bleu_std']:.2f}); {inside} of {len(deltas)} rows differ "
            "from it by no more than that std.")


def plot_learning_curves(grid: GridConfig, results: dict, path: Path) -> None:

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


def _write_deltas_picture(grid: GridConfig, report, configs: dict, splits: list[str]) -> bool:
    """``deltas.png`` (:func:`structnmt.analysis.deltas.draw_report_deltas`) from the results.csv just written,
    when some row has the seed-aware test (2 seeds or more); else an earlier report's picture is removed."""

    read = read_deltas(report.path / "results.csv", skip_untested=True)
    _, _, tested = read
    if not tested:
        report.remove_earlier(("deltas.png",), keep=[])
        return False
    names = {x: _split_label(configs, x) for x in splits}
    title = f"{grid.name}: each row against {grid.baseline}"
    report.write_with("deltas.png", lambda tmp: draw_report_deltas(read, tmp, names, title))
    return True


def _split_label(configs: dict, split: str) -> str:
    """"test (test_2016_flickr)": a split with the corpus file it was prepared from, where known; a joined
    set: "test+test1 (joined: test_2016_flickr + test_2017_flickr)"."""

    if len(join_parts(split)) > 1:
        names = [_split_label(configs, x) for x in join_parts(split)]
        return f"{split} (joined: {' + '.join(n[n.find('(') + 1:-1] if '(' in n else n for n in names)})"
    cfg = next(iter(configs.values()), None)
    prefix = split_prefix(cfg, split)[0] if cfg is not None else None
    return f"{split} ({Path(prefix).name})" if prefix else split


def _significance_lines(grid: GridConfig, info: dict, seeds: int) -> list[str]:

    ev = grid.evaluate
    if info["kind"] == "seed-aware":
        text = (f"- **Significance**: {describe_test(ev.bootstrap_samples, ev.bootstrap_seed, ev.seed_test)} Against the baseline "
                f"**{grid.baseline}**; ⇑/↑: significantly better at p < 0.01 / p < 0.05, ⇓/↓: significantly worse. "
                "**MDE**: the minimal detectable effect, the smallest |Δ| the test flags at p < 0.05 with "
                "probability 0.8 with the row's and the baseline's seeds and variances "
                "(structnmt.evaluate.power); a row without a mark shows no effect larger than its MDE, not "
                "no effect. `structnmt plan-seeds` gives the seeds a smaller Δ needs.")
        if info["untested"]:
            text += f" Not tested (fewer than 2 seeds): {', '.join(info['untested'])}."
        return [text]
    return [f"- **Significance**: one seed per row, so the p-values are sacreBLEU's paired bootstrap resampling "
            f"({ev.bootstrap_samples:,} samples, seed {ev.bootstrap_seed}; two-sided) of each system's seed-"
            f"{grid.seeds[0]} translations against the baseline **{grid.baseline}**'s: they cover test-set "
            "sampling only, not training variance, so nothing here is marked as significant on BLEU."
            + (f" Test `{info['signature']}`." if info.get("signature") else "")]


def _add_joined(grid: GridConfig, results: dict, split_data: dict, splits: list[str], data_path: Path
                ) -> tuple[dict, dict, list[str]]:
    """(results, split data, splits) with the joined set (:func:`joined_splits`) first, where every run was
    scored on each of its parts; else as they are."""
    parts = joined_splits(grid, data_path)
    if len(parts) < 2 or not all(x in splits for x in parts):
        return results, split_data, splits
    joined = "+".join(parts)
    split_data = {**split_data, joined: tuple([t for x in parts for t in split_data[x][i]] for i in (0, 1))}
    return with_joined(grid, results, parts, split_data[joined][1]), split_data, [joined] + splits


def _joined_lines(splits: list[str], split_data: dict) -> list[str]:
    """The bullet under a joined set's table: what was joined, how it is scored, and why it comes first."""
    parts = join_parts(splits[0])
    if len(parts) < 2:
        return []
    sizes = " and ".join(f"`{x}` ({len(split_data[x][1]):,})" for x in parts)
    return [f"- **Joined test sets**: {sizes} are test sets of one domain, read as one set of "
            f"{len(split_data[splits[0]][1]):,} sentences: each run's translations of them concatenated and scored "
            "against the concatenated references (corpus scores recomputed on the join, not an average of the "
            "sets' scores), the test on the join. The test-set part of the variance falls as 1/N, so the join "
            "marks a consistent effect that each set alone leaves unmarked; each set's own verdict is beside it "
            "(the table after the columns) and in its own section (docs/experiments.md, \"Joined test sets\")."]


def beside_table(tables: dict, splits: list[str], bleu_name: str) -> list[str]:
    """With a joined set: one line per row, its Δ, mark and p on the joined set, then on each set alone."""
    if len(splits) < 2 or len(join_parts(splits[0])) < 2:
        return []
    lines = [f"## Each test set beside the joined one ({bleu_name}: Δ of the means, p)", "",
             "| System | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    by_split = {x: {r["system"]: r for r in tables[x][0]} for x in splits}
    for row in tables[splits[0]][0]:
        if row["baseline"]:
            continue
        cells = []
        for x in splits:
            r = by_split[x][row["system"]]
            p = "—" if r["p_value"] is None else f"{r['p_value']:.3f}"
            cells.append(f"{r['delta']:+.2f}{r['mark']} (p {p})")
        lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _columns_line(results: dict, seed0: int, n_seeds: int) -> str:
    """The paragraph under the main table that says what each column measures."""
    devices = {device_type(r["train_device"]) for (_, seed), r in results.items() if seed == seed0}  # measured runs'
    kinds = {"cuda": "peak GPU memory allocated by the training process",
             "cpu": "peak resident memory (RSS) of the training process"}
    only = next(iter(devices)) if len(devices) == 1 else None
    mem_kind = kinds.get(only, f"{kinds['cuda']} for a run trained on a GPU, else {kinds['cpu']} (the Hardware "
                               "line says which)")
    return ("Columns: **# Params** trainable parameters (shared embeddings counted once); **Speed** "
            "training target tokens per second of training wall-clock (validation and checkpoint "
            "writing excluded); **Decode** sentences per second translating the split (beam search, "
            f"in the runner process); **Peak mem** {mem_kind} (these four measured on seed {seed0}); "
            + ("**p** the bootstrap p-value; **chrF** sacreBLEU chrF2." if n_seeds <= 1 else
               "scores are means ± sample standard deviations over the seeds; **ASO ε** deepsig's ε_min "
               "that the row's seeds dominate the baseline's; per-seed scores, s_sel (test-set spread of one run) "
               "and the test's parts in `results.csv`."))


def _left_out_lines(missing: list[tuple[str, int]], damaged: dict[tuple[str, int], str]) -> list[str]:
    """What the report says under its title of the runs it leaves out: those without results yet (``--report-only``)
    and those whose record is damaged (each with its file and fix), not the one as the other."""
    lines = []
    unfinished = [key for key in missing if key not in damaged]
    if unfinished:
        lines += ["", "**Unfinished grid** (written with `--report-only`): no results yet for "
                  + "; ".join(f"{n} (seed {s})" for n, s in unfinished) + "."]
    if damaged:
        lines += ["", "**Damaged records**, left out: " + " ".join(f"{n} (seed {s}): {why}"
                                                                   for (n, s), why in damaged.items())]
    if lines:
        lines[-1] += (" A system without its first seed is left out of the tables; the mean ± std of one without a "
                      "later seed is over the seeds it has.")
    return lines


def write_report(grid: GridConfig, out: Path, results: dict, configs: dict[tuple[str, int], Config],
                 split_data: dict[str, tuple[list[str], list[str]]], *, dirs: dict[str, str], command: str,
                 data_path: Path, log=print, missing: list[tuple[str, int]] | None = None,
                 damaged: dict[tuple[str, int], str] | None = None, trained_with: list[str] | None = None) -> Path:
    """Write ``results.md``/``results.csv`` and the pictures: one table per split (the evaluation split
    first, with the measurements). ``missing`` (``--report-only`` on an unfinished grid, or a damaged record)
    lists the (run, seed) pairs without results: a run without its first seed leaves the tables, one without a
    later seed is averaged (and tested) over the seeds it has, and both are named under the table. ``damaged``:
    those of them whose result.json is damaged, with the sentence naming the file and the fix."""
    missing = list(missing or [])
    if missing:
        grid = dataclasses.replace(grid, runs=[r for r in grid.runs if (r.name, grid.seeds[0]) in results])
    ev = grid.evaluate
    # an extra split gets a table when every run reported has been scored on it
    splits = [ev.split] + [x for x in ev.extra_splits
                           if all(split_result(grid, results[(r.name, s)], x)
                                  for r in grid.runs for s in seeds_of(grid, results, r.name))]
    results, split_data, splits = _add_joined(grid, results, split_data, splits, data_path)
    report = report_dir(grid, out)
    tables = {x: build_rows(grid, out, results, split_data[x][1], x) for x in splits}
    report.write_with("results.csv", lambda tmp: write_csv([row for x in splits for row in tables[x][0]], tmp,
                                                           grid.seeds))
    report.write_with("learning_curves.png", lambda tmp: plot_learning_curves(grid, results, tmp))
    report.write_with("ngram_gain.png", lambda tmp: plot_ngram_gain(grid, results, tmp))
    deltas = _write_deltas_picture(grid, report, configs, splits)
    seed0 = grid.seeds[0]
    first = results[(grid.baseline, seed0)]
    bleu_name = "BLEU (lc,tok)" if ev.lc_tok else "BLEU"
    sig_key = "bleu_lc_tok_signature" if ev.lc_tok else "bleu_signature"
    n_seeds = max(len(seeds_of(grid, results, r.name)) for r in grid.runs)
    main_rows, main_info = tables[splits[0]]
    lines = [
        f"# {grid.name}",
        "",
        f"Split {_split_label(configs, splits[0])}:",
        "",
        markdown_table(main_rows, seeds=n_seeds, bleu_name=bleu_name, lc_tok=ev.lc_tok),
        "",
        *_joined_lines(splits, split_data),
        *_significance_lines(grid, main_info, n_seeds),
        noise_floor(main_rows, bleu_name),
        f"- **Budget**: {grid.budget.describe()}, identical for every run; seeds: "
        f"{', '.join(map(str, grid.seeds))}" + (f"; every run: `{' '.join(grid.overrides)}`" if grid.overrides else "")
        + ".",
        f"- **Data**: `{data_path}`, "
        + ", ".join(f"split `{x}` ({len(split_data[x][1]):,} sentences)" for x in splits) + ".",
        f"- **Decoding**: average of the last {ev.average_last} checkpoints, beam {ev.beam}, "
        f"length penalty {ev.lenpen:g}.",
        f"- **Scores**: {bleu_name} `{first[sig_key]}`; chrF `{first['chrf_signature']}`"
        + (f"; BLEU `{first['bleu_signature']}`" if ev.lc_tok else "") + ".",
        _hardware_line(results, configs),
        f"- **Command**: `{command}`" + ("" if not trained_with else "; the runs were trained and decoded with "
                                         + "; ".join(f"`{c}`" for c in trained_with)),
        f"- **Date**: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        "",
        _columns_line(results, seed0, n_seeds),
        "",
        *beside_table(tables, splits, bleu_name),
    ]
    for x in splits[1:]:
        rows, info = tables[x]
        lines += [f"## Split {_split_label(configs, x)}", "",
                  markdown_table(rows, seeds=n_seeds, bleu_name=bleu_name, measurements=False, lc_tok=ev.lc_tok), "",
                  *_significance_lines(grid, info, n_seeds), noise_floor(rows, bleu_name), ""]
    if deltas:
        lines += ["![each row's difference from the baseline, 95 % intervals](deltas.png)", ""]
    lines += ["![learning curves](learning_curves.png)", "", "![n-gram precision gain](ngram_gain.png)", ""]
    lines[3:3] = _left_out_lines(missing, damaged or {})
    lines += _per_run_lines(grid, results, dirs, splits, bleu_name)
    if ev.benchmark:

        lines += ["", *generalization_section(grid, results, report)]
    return report.write_text("results.md", "\n".join(lines) + "\n")


def _hardware_line(results: dict, configs: dict[tuple[str, int], Config]) -> str:
    """The report's hardware bullet: the machine the runs were decoded on (recorded in result.json), else
    this machine's; the training devices and threads of the runs reported (their resolved.yaml), not those a
    ``--report-only`` command would give the runs it lacks."""
    recorded = [r["hardware"] for r in results.values() if r.get("hardware")]
    hw = recorded[0] if recorded else hardware()
    where = ("recorded by the runs" if recorded and all(h == hw for h in recorded) else
             _machines_note(results) if recorded else
             "this machine (the runs recorded none)")
    threads = sorted({configs[k].train.threads for k in results})
    devices = sorted({r["train_device"] for r in results.values()})
    on_cuda = sorted({r.get("train_precision")  # the run's record, else its config (train.bf16 acts on CUDA)
                      or ("bf16 autocast" if trains_in_bf16(r["train_device"], configs[k].train.bf16) else "float32")
                      for k, r in results.items() if device_type(r["train_device"]) == "cuda"})
    precision = "" if not on_cuda else f" (on CUDA {' and '.join(on_cuda)}, train.bf16)"  # a CPU trains in float32
    torches = sorted({h["torch"] for h in recorded} or {hw["torch"]})
    return (f"- **Hardware**: {hw['platform']}; CPU {hw['cpu'] or 'unknown'} ({hw['cpu_count']} logical CPUs); "
            f"GPU {hw['gpu'] or 'none'}; training device {', '.join(devices)}{precision}; torch {', '.join(torches)}, "
            f"Python {hw['python']}; train.threads {', '.join(str(t) for t in threads)}"
            + (f"; OMP_NUM_THREADS={hw['omp_num_threads']}" if hw["omp_num_threads"] else "") + f" ({where})"
            + _decode_workers_note(results) + ".")


def _machine_name(hw: dict) -> str:
    """A recorded machine in a few words: its GPU, else its CPU and core count."""
    return hw["gpu"] or f"{hw['cpu'] or 'unknown CPU'} ({hw['cpu_count']} logical CPUs)"


def _machines_note(results: dict) -> str:
    """When the runs recorded different machines: which systems (and seeds) ran on which, and that the
    speed and memory columns compare only rows measured on the same one."""
    by_machine: dict[str, dict[str, list[int]]] = {}
    for (name, seed), r in results.items():
        if r.get("hardware"):
            by_machine.setdefault(_machine_name(r["hardware"]), {}).setdefault(name, []).append(seed)
    if len(by_machine) == 1:  # same GPU or CPU, another platform or library version
        return "runs recorded different platforms or library versions: see result.json"
    parts = []
    for machine, systems in by_machine.items():
        rows = ", ".join(f"{name} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))})"
                         for name, seeds in systems.items())
        parts.append(f"{machine}: {rows}")
    return ("the runs recorded different machines, the fields above are the first run's; " + "; ".join(parts)
            + "; Speed, Decode and Peak mem compare only rows measured on the same machine")


def _decode_workers_note(results: dict) -> str:
    """How the evaluation split was decoded, when any run used several processes (the runner with --jobs 1
    decodes as translate does by default): their Decode (sent/s) includes starting those processes."""
    workers = sorted({int(r.get("decode_workers", 1)) for r in results.values()})
    if workers == [1]:
        return ""
    return (f"; the evaluation split decoded with {' or '.join(map(str, workers))} process(es) of one thread each "
            "(translate's default for 8 batches or more; Decode (sent/s) includes starting them)")


#: the report files of an experiment's output directory (the runs live in its runs/ folder)
REPORT_FILES = ("results.md", "results.csv", "learning_curves.png", "ngram_gain.png", "deltas.png")


def report_dir(grid: GridConfig, out: Path):
    """``out`` as the report directory of ``structnmt experiment`` (:class:`structnmt.fileio.files.OutputDir`): a
    file under a report name that no structnmt command wrote is refused, before any run is trained; a
    directory with the runner's ``experiment.log`` but no manifest is an earlier report, replaced."""

    names = REPORT_FILES + (("agreement_by_attractors.png", "generalization.csv") if grid.evaluate.benchmark else ())
    return OutputDir(out, "experiment", expect=names,
                     marker=(("experiment.log", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d experiment "),))


def _per_run_lines(grid: GridConfig, results: dict, dirs: dict[str, str], splits: list[str], bleu_name: str) -> list[str]:
    ev = grid.evaluate
    pkey = "bleu_lc_tok_precisions" if ev.lc_tok else "bleu_precisions"
    bkey = _metric_key(grid)
    others = [x for x in splits if x != ev.split]
    extra = "".join(f" {bleu_name} {x} |" for x in others)
    main = f"{bleu_name} {ev.split}" if others else bleu_name  # with other columns, each names its split
    lines = ["## Per run", "", "| System | seed | updates | target tokens | train s | "
             f"{main} | chrF | 1/2/3/4-gram precision |{extra} directory |",
             "|---|---:|---:|---:|---:|---:|---:|---|" + "---:|" * len(others) + "---|"]
    for seed in grid.seeds:
        for r in grid.runs:
            if (r.name, seed) not in results:
                continue
            res = results[(r.name, seed)]
            prec = "/".join(f"{p:.1f}" for p in res[pkey])
            more = "".join(f" {_fmt((split_result(grid, res, x) or {}).get(bkey), '.2f')} |" for x in others)
            lines.append(f"| {r.name} | {seed} | {res['num_updates']:,} | {res['train_target_tokens']:,} | "
                         f"{res['train_seconds']:.0f} | {res[bkey]:.2f} | {res['chrf']:.2f} | {prec} |{more} "
                         f"`runs/{dirs[r.name]}/seed{seed}` |")
    return lines
