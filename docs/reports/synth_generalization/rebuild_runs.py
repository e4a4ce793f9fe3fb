"""Rebuild the structural generalization grid's run directories from its committed outputs.

The grid's runs trained on two machines (48 on a lent GPU, the last six on a CPU machine); their
checkpoints are not kept. What is kept: every run's hypotheses of the 8 benchmark splits
(docs/outputs/synth_generalization/<row>.seed<k>.<split>.hyp, in the folder's archive
docs/outputs/synth_generalization.tar.xz: unpack it first with ``python scripts/outputs.py unpack
synth_generalization``), its learning curve where it was
kept (<row>.seed<k>.metrics.jsonl) and its training measurements (runs.csv beside this file: updates,
target tokens, training seconds, and for seed 1 the parameter count, speed and memory the report's
first columns show). From these this script writes the runner's layout, ``OUT/runs/<row>/seed<k>/``
with ``result.json``, ``test.hyp`` and ``bench_<split>.hyp`` / ``bench_<split>.json`` (every split
scored again by :func:`structnmt.evaluate.generalization.split_metrics`, the runner's own scorer),
so that the runner writes the grid's full report with its own tests:

    structnmt synth --generalization --out runs/synth_gen
    python docs/reports/synth_generalization/rebuild_runs.py runs/synth_gen runs/synth_report
    structnmt experiment configs/grids/synth_generalization.yaml --out runs/synth_report --report-only \
        train.threads=1

(every run trained with one CPU thread; the override tells the report, which has no run's resolved.yaml).
A run finished later is kept with ``--keep MACHINE RUN_DIR...`` (MACHINE: a key of ``MACHINES``): its
hypotheses and learning curve go into the outputs folder and its measurements into runs.csv (then
``python scripts/outputs.py pack synth_generalization`` writes the archive again).

Each rebuilt run's test BLEU must equal the one runs.csv recorded (to its two decimals): a
hypothesis file that does not belong to its run, or a benchmark regenerated differently, stops the
script with the run named.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

from structnmt.data.generalization import benchmark_splits, load_examples
from structnmt.evaluate.generalization import split_metrics
from structnmt.evaluate.score import corpus_scores
from structnmt.experiment.grid import slug

HERE = Path(__file__).resolve().parent
OUTPUTS = HERE.parents[1] / "outputs" / "synth_generalization"

#: what each machine of runs.csv was (what its runs' result.json would have recorded; unknown fields say so)
MACHINES = {
    "H100": {"platform": "Linux x86_64, Firecracker VM (the toolkit's lent GPU machine, nvidia-h100-x1)",
             "python": "3.12", "cpu": "not recorded", "cpu_count": 16, "torch": "2.11.0+cu130", "gpu": "NVIDIA H100 80GB HBM3", "omp_num_threads": "1"},
    "EPYC": {"platform": "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36", "python": "3.11.7", "cpu": "AMD EPYC",
             "cpu_count": 2, "torch": "2.13.0+cpu", "gpu": "", "omp_num_threads": "1"},
}
TRAIN_DEVICE = {"H100": "cuda", "EPYC": "cpu"}


def read_hyps(row: str, seed: int, split: str) -> list[str]:
    path = OUTPUTS / f"{slug(row)}.seed{seed}.{split}.hyp"
    if not path.is_file():
        raise SystemExit(f"{path} is not there: unpack the committed outputs first (python scripts/outputs.py "
                         "unpack synth_generalization).")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _measurements(rec: dict) -> dict:
    """runs.csv's columns as result.json's fields (the seed-1-only ones where runs.csv has them)."""
    res = {"n_params": int(rec["n_params"]), "num_updates": int(rec["num_updates"]),
           "train_target_tokens": int(rec["train_target_tokens"]), "train_seconds": float(rec["train_seconds"]),
           "train_device": TRAIN_DEVICE[rec["machine"]], "hardware": MACHINES[rec["machine"]]}
    for key in ("train_tok_per_s", "decode_sent_per_s", "peak_memory_mb"):
        if rec[key]:
            res[key] = float(rec[key])
    return res


def rebuild_run(rec: dict, bench: Path, splits: list[str], bench_seed: int, run_dir: Path) -> None:
    """One run's directory from its committed hypotheses and its row of runs.csv."""
    row, seed = rec["system"], int(rec["seed"])
    run_dir.mkdir(parents=True, exist_ok=True)
    summary, test_hyps, test_refs = {}, [], []
    for split in splits:
        hyps, examples = read_hyps(row, seed, split), load_examples(str(bench), split)
        if len(hyps) != len(examples):
            raise SystemExit(f"{OUTPUTS}/{slug(row)}.seed{seed}.{split}.hyp has {len(hyps)} lines, the "
                             f"benchmark's {split} split {len(examples)}: regenerate the benchmark with "
                             "`structnmt synth --generalization` (its default seed).")
        text = "".join(h + "\n" for h in hyps)
        (run_dir / f"bench_{split}.hyp").write_text(text, encoding="utf-8")
        metrics = split_metrics(hyps, examples, seed=bench_seed)
        (run_dir / f"bench_{split}.json").write_text(json.dumps(metrics), encoding="utf-8")
        summary[split] = {k: v for k, v in metrics.items() if k != "per_sentence"}
        if split == "test":
            test_hyps, test_refs = hyps, [" ".join(ex.tgt) for ex in examples]
    hyps, refs = test_hyps, test_refs
    (run_dir / "test.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    bleu, chrf = corpus_scores(hyps, refs)
    if abs(round(bleu.score, 2) - float(rec["bleu"])) > 0.011:
        raise SystemExit(f"{row} (seed {seed}): the committed test hypotheses score BLEU {bleu.score:.2f}, "
                         f"runs.csv recorded {rec['bleu']}: the hypotheses or the benchmark are not the run's.")
    curve = OUTPUTS / f"{slug(row)}.seed{seed}.metrics.jsonl"
    if curve.exists():
        shutil.copyfile(curve, run_dir / "metrics.jsonl")
    result = {**_measurements(rec), "split": "test", "n_sentences": len(hyps), "hyp_file": "test.hyp",
              "bleu": bleu.score, "bleu_signature": bleu.signature, "bleu_detail": bleu.detail,
              "bleu_precisions": list(bleu.precisions), "chrf": chrf.score, "chrf_signature": chrf.signature,
              "benchmark": summary,
              "name": row, "seed": seed, "rebuilt_from": "docs/outputs/synth_generalization (committed outputs)"}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


FIELDS = ["system", "seed", "machine", "num_updates", "train_target_tokens", "train_seconds", "bleu", "chrf",
          "n_params", "train_tok_per_s", "decode_sent_per_s", "peak_memory_mb"]


def keep_run(machine: str, run_dir: Path) -> None:
    """Add a finished run of the grid to the committed outputs and to runs.csv."""
    if not (run_dir / "result.json").is_file():
        raise SystemExit(f"{run_dir}: no result.json; keep a run the runner finished (its directory "
                         "OUT/runs/<row>/seed<k>).")
    res = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    row, seed = res["name"], int(res["seed"])
    with open(HERE / "runs.csv", encoding="utf-8", newline="") as f:
        records = list(csv.DictReader(f))
    if any(r["system"] == row and int(r["seed"]) == seed for r in records):
        raise SystemExit(f"runs.csv already has {row} (seed {seed}): nothing kept from {run_dir}.")
    for hyp in sorted(run_dir.glob("bench_*.hyp")):
        split = hyp.stem[len("bench_"):]
        shutil.copyfile(hyp, OUTPUTS / f"{slug(row)}.seed{seed}.{split}.hyp")
    shutil.copyfile(run_dir / "metrics.jsonl", OUTPUTS / f"{slug(row)}.seed{seed}.metrics.jsonl")
    rec = {k: res.get(k, "") for k in FIELDS if k not in ("system", "machine")}
    rec.update(system=row, machine=machine, bleu=f"{res['bleu']:.2f}", chrf=f"{res['chrf']:.2f}")
    with open(HERE / "runs.csv", "a", encoding="utf-8", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writerow(rec)
    print(f"{row} (seed {seed}): kept", flush=True)


def main(bench: str, out: str) -> None:
    bench_dir, out_dir = Path(bench), Path(out)
    splits = list(benchmark_splits(str(bench_dir)))
    bench_seed = json.loads((bench_dir / "benchmark.json").read_text(encoding="utf-8"))["config"]["seed"]
    with open(HERE / "runs.csv", encoding="utf-8", newline="") as f:
        records = list(csv.DictReader(f))
    for rec in records:
        run_dir = out_dir / "runs" / slug(rec["system"]) / f"seed{rec['seed']}"
        if (run_dir / "result.json").exists():
            raise SystemExit(f"{run_dir}/result.json exists: rebuild into a new directory (this script writes "
                             "only where nothing is).")
        rebuild_run(rec, bench_dir, splits, bench_seed, run_dir)
        print(f"{rec['system']} (seed {rec['seed']}): rebuilt", flush=True)


if __name__ == "__main__":
    USAGE = ("usage: python docs/reports/synth_generalization/rebuild_runs.py BENCHMARK_DIR OUT_DIR\n"
             "       python docs/reports/synth_generalization/rebuild_runs.py --keep MACHINE RUN_DIR...")
    if len(sys.argv) >= 4 and sys.argv[1] == "--keep" and sys.argv[2] in MACHINES:
        for d in sys.argv[3:]:
            keep_run(sys.argv[2], Path(d))
    elif len(sys.argv) == 3 and not sys.argv[1].startswith("-"):
        main(sys.argv[1], sys.argv[2])
    else:
        raise SystemExit(USAGE)
