"""How the toolkit's costs grow with the corpus: CPU seconds, peak memory (anonymous and file-backed apart) and
disk for ``prepare``, training start-up and ``translate``, at several corpus sizes, fitted and extrapolated
to the papers' 4.5M pairs (docs/large_data.md).

    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --work /tmp/scale --sizes 30000 100000 300000 1000000 \\
        --out benchmarks/results/DATE-scale-MACHINE

Corpora (made once in ``--work``, reused):
  * plain: Multi30k's training pairs (../shared/data/multi30k), then word-shuffled copies of them, to N pairs;
  * trees: ``structnmt synth --n-train N`` (the synthetic grammar, with gold CoNLL-U and PTB trees).
Measured per size: ``prepare`` of each (trees: ``--parser synthetic``, with ``--workers 1`` and ``--workers 2``),
training start-up (``train.max_updates=1`` of the tiny recipe: the model, the data's memory maps, the batches,
and for the tree corpus DEA's structures, from its feature store when ``structnmt features`` made one), and
``translate`` of 2,000 and ``--translate-lines`` lines with that model (greedy, at most 3 output pieces: the
memory of streaming is measured, not the model's quality). Every command runs in its own process tree, sampled
every 50 ms from /proc: peak RssAnon and RssFile summed over the tree; CPU seconds are the children's user +
system time (``getrusage``), wall seconds beside them. Nothing here is a test: a busy machine changes the
seconds, not what grows linearly.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from structnmt.machine.device import cpu_model_name

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
WMT_PAIRS = 4_500_000


@dataclass
class Cost:
    """One command's cost."""

    cpu_s: float
    wall_s: float
    anon_mb: float  # peak RssAnon summed over the process tree
    file_mb: float  # peak RssFile summed over the process tree
    exit: int
    anon_by_process: list[float]  # each process's own peak RssAnon, largest first


def _status(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile) of one process in KiB; zeros for a process that is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    kib = lambda k: int(fields.get(k, "0 kB").split()[0])  # noqa: E731
    return kib("RssAnon"), kib("RssFile")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/*/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*") if Path(f"/proc/{p}/task").exists() else []:
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def measure(cmd: list[str], *, env: dict | None = None, log: Path | None = None) -> Cost:
    """Run ``cmd``; its CPU seconds, wall seconds and peak anonymous / file-backed memory (MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    peak = [0, 0]
    by_pid: dict[int, int] = {}
    done = threading.Event()

    def sample():
        while not done.is_set():
            status = {p: _status(p) for p in _tree(proc.pid)}
            totals = [sum(x) for x in zip(*status.values())] or [0, 0]
            peak[0], peak[1] = max(peak[0], totals[0]), max(peak[1], totals[1])
            for p, (anon, _) in status.items():
                by_pid[p] = max(by_pid.get(p, 0), anon)
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    done.set()
    sampler.join()
    if log:
        out.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Cost(cpu, time.perf_counter() - start, peak[0] / 1024, peak[1] / 1024, code,
                sorted((v / 1024 for v in by_pid.values() if v), reverse=True))


def structnmt(*args) -> list[str]:
    return [sys.executable, "-m", "structnmt.cli", *map(str, args)]


def make_plain(work: Path, n: int) -> Path:
    """``plain{n}/train.{en,de}.gz``: Multi30k's training pairs, then word-shuffled copies, to ``n`` pairs; the
    valid and test sets are Multi30k's own. Written streaming."""
    d = work / f"plain{n}"
    if (d / "train.de.gz").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    src = gzip.open(SHARED / "train.en.gz", "rt", encoding="utf-8").read().splitlines()
    tgt = gzip.open(SHARED / "train.de.gz", "rt", encoding="utf-8").read().splitlines()
    rng = random.Random(n)
    with gzip.open(d / "train.en.gz", "wt", encoding="utf-8") as fe, \
            gzip.open(d / "train.de.gz", "wt", encoding="utf-8") as fd:
        for i in range(n):
            e, g = src[i % len(src)], tgt[i % len(tgt)]
            if i >= len(src):
                e, g = (" ".join(rng.sample(s.split(), len(s.split()))) for s in (e, g))
            fe.write(e + "\n")
            fd.write(g + "\n")
    for lang in ("en", "de"):
        shutil.copy(SHARED / f"val.{lang}.gz", d / f"valid.{lang}.gz")
    return d


def make_trees(work: Path, n: int) -> Path:
    """``trees{n}/``: ``structnmt synth --n-train n`` (gold trees beside the text)."""
    d = work / f"trees{n}"
    if not (d / "train.src").exists():
        c = measure(structnmt("synth", "--out", d, "--n-train", n, "--n-valid", 500, "--n-test", 500))
        assert c.exit == 0, f"synth failed for {n}"
    return d


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def bench_prepare(work: Path, n: int, workers: list[int], logs: Path) -> dict:
    """Costs of ``prepare`` on the plain corpus and (per worker count) on the tree corpus."""
    res = {}
    plain, trees = make_plain(work, n), make_trees(work, n)
    dest = work / f"bin_plain{n}"
    if dest.exists():
        shutil.rmtree(dest)
    c = measure(structnmt("prepare", "-s", "en", "-t", "de", "--trainpref", plain / "train", "--validpref",
                          plain / "valid", "--destdir", dest, "--vocab-size", 8000, "--no-progress"),
                log=logs / f"prepare_plain{n}.log")
    res["prepare_plain"] = {**asdict(c), "disk_mb": disk_mb(dest)}
    for w in workers:
        dest = work / f"bin_trees{n}_w{w}"
        if dest.exists():
            shutil.rmtree(dest)
        extra = ["--workers", w] if w > 1 else []
        c = measure(structnmt("prepare", "-s", "src", "-t", "tgt", "--trainpref", trees / "train", "--validpref",
                              trees / "valid", "--destdir", dest, "--vocab-size", 2000, "--parser", "synthetic",
                              "--no-progress", *extra), log=logs / f"prepare_trees{n}_w{w}.log")
        res[f"prepare_trees_w{w}"] = {**asdict(c), "disk_mb": disk_mb(dest)}
    return res


DEA_CONFIG = ROOT / "configs" / "rhe" / "table1_dea_rhe.yaml"


def train_command(work: Path, data: Path, name: str, structures: bool, ranks: int = 0) -> list[str]:
    """One update of the tiny recipe on ``data`` (``configs/rhe/table1_dea_rhe.yaml``, DEA + RHE in encoder layer 1,
    when ``structures``), checkpointed so that ``translate`` has a model; ``ranks`` > 0: under ``torchrun`` with
    that many processes."""
    config = DEA_CONFIG if structures else ROOT / "configs" / "multi30k_transformer_tiny.yaml"
    save = work / f"train_{name}"
    shutil.rmtree(save, ignore_errors=True)
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), "-m",
               "structnmt.cli"] if ranks else structnmt())
    args = ("train", config, f"data.path={data}", f"train.save_dir={save}", "train.max_updates=1",
            "train.warmup_updates=1", "train.validate_interval_updates=1000", "train.save_interval_updates=1",
            "train.tensorboard=false", "train.threads=1", "--no-progress")
    return launch + [str(a) for a in args]


def bench_train(work: Path, n: int, logs: Path) -> dict:
    """Training start-up (one update) on the plain corpus and, with DEA, on the tree corpus."""
    res = {}
    trees = work / f"bin_trees{n}_w1"
    shutil.rmtree(trees / "features", ignore_errors=True)
    for name, data, structures in (("plain", work / f"bin_plain{n}", False), ("trees_dea", trees, True)):
        c = measure(train_command(work, data, f"{name}{n}", structures), env={"OMP_NUM_THREADS": "1"},
                    log=logs / f"train_{name}{n}.log")
        res[f"train_{name}"] = asdict(c)
    c = measure(structnmt("features", "--for", DEA_CONFIG, f"data.path={trees}", "--no-progress"),
                log=logs / f"features{n}.log")
    res["features_dea"] = {**asdict(c), "disk_mb": disk_mb(trees / "features")}
    for ranks in (0, 2):
        name = f"trees_dea_store{'_ddp' + str(ranks) if ranks else ''}"
        c = measure(train_command(work, trees, f"{name}{n}", True, ranks), env={"OMP_NUM_THREADS": "1"},
                    log=logs / f"train_{name}{n}.log")
        res[f"train_{name}"] = asdict(c)
    return res


def bench_translate(work: Path, n_lines: list[int], logs: Path) -> dict:
    """``translate`` of ``n_lines`` lines (Multi30k's sources repeated) with the smallest size's plain model."""
    ckpt = sorted(work.glob("train_plain*/checkpoint_last.pt"))[0]
    src = gzip.open(SHARED / "train.en.gz", "rt", encoding="utf-8").read().splitlines()
    res = {}
    for n in n_lines:
        inp = work / f"translate{n}.en"
        if not inp.exists():
            inp.write_text("".join(src[i % len(src)] + "\n" for i in range(n)))
        out = work / f"translate{n}.de"
        out.unlink(missing_ok=True)
        c = measure(structnmt("translate", "--checkpoint", ckpt, "--input", inp, "--output", out, "--greedy",
                              "--max-len-a", 0, "--max-len-b", 3, "--workers", 1, "--no-progress"),
                    env={"OMP_NUM_THREADS": "1"}, log=logs / f"translate{n}.log")
        res[f"translate_{n}"] = asdict(c)
    return res


def bench_chunks(work: Path, lines: int, chunk_batches: list[int], rounds: int, logs: Path) -> dict:
    """What sorting within chunks costs: ``translate`` of ``lines`` Multi30k sources (beam 5, the checkpoint's
    lengths) at each ``--chunk-batches``, rounds alternated; CPU seconds per setting (median of the rounds) and
    whether every setting wrote the same bytes."""
    ckpt = sorted(work.glob("train_plain*/checkpoint_last.pt"))[0]
    src = gzip.open(SHARED / "train.en.gz", "rt", encoding="utf-8").read().splitlines()
    inp = work / f"chunks{lines}.en"
    rng = random.Random(1)
    inp.write_text("".join(src[rng.randrange(len(src))] + "\n" for _ in range(lines)))
    cpu: dict[int, list[float]] = {c: [] for c in chunk_batches}
    outputs = {}
    for _ in range(rounds):
        for c in chunk_batches:
            out = work / f"chunks{lines}_{c}.de"
            out.unlink(missing_ok=True)
            cost = measure(structnmt("translate", "--checkpoint", ckpt, "--input", inp, "--output", out, "--beam", 5,
                                     "--workers", 1, "--chunk-batches", c, "--no-progress"),
                           env={"OMP_NUM_THREADS": "1"}, log=logs / f"chunks{c}.log")
            cpu[c].append(cost.cpu_s)
            outputs[c] = out.read_bytes()
    same = len(set(outputs.values())) == 1
    return {"lines": lines, "rounds": rounds, "cpu_s": {c: float(np.median(v)) for c, v in cpu.items()},
            "all_rounds": cpu, "identical_outputs": same}


def fit(sizes: list[int], values: list[float]) -> dict:
    """Growth exponent (slope of log value on log size) and the value at 4.5M pairs: a cost that grows
    (exponent >= 0.3) extrapolated by the least-squares line through the measurements, a flat one (a start-up's
    fixed cost, a bounded memory) taken as its largest measurement."""
    x, y = np.asarray(sizes, float), np.asarray(values, float)
    if len(x) < 2:
        return {"exponent": float("nan"), "at_4.5M": float("nan"), "flat": False}
    slope = float(np.polyfit(np.log(x), np.log(np.maximum(y, 1e-9)), 1)[0])
    if slope < 0.3:
        return {"exponent": slope, "at_4.5M": float(y.max()), "flat": True}
    b, a = np.polyfit(x, y, 1)
    return {"exponent": slope, "at_4.5M": float(a + b * WMT_PAIRS), "flat": False}


def report(results: dict, sizes: list[int]) -> str:
    """The Markdown table of every measured cost, with fits and the targets' verdicts."""
    rows = ["| stage | metric | " + " | ".join(f"{n:,}" for n in sizes) + " | growth exponent | at 4.5M pairs |",
            "|---|---|" + "---:|" * (len(sizes) + 2)]
    stages = sorted({k for n in sizes for k in results[str(n)] if k.startswith(("prepare", "train", "features"))})
    for stage in stages:
        for metric in ("cpu_s", "anon_mb", "file_mb", "disk_mb"):
            vals = [results[str(n)].get(stage, {}).get(metric) for n in sizes]
            if any(v is None for v in vals):
                continue
            f = fit(sizes, vals)
            rows.append(f"| {stage} | {metric} | " + " | ".join(f"{v:,.1f}" for v in vals)
                        + f" | {f['exponent']:.2f} | {f['at_4.5M']:,.0f}{' (flat)' if f['flat'] else ''} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="working directory (corpora, datasets, logs)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 300_000, 1_000_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="prepare --workers counts (trees)")
    ap.add_argument("--translate-lines", type=int, nargs="+", default=[2_000, 200_000])
    ap.add_argument("--out", type=Path, help="directory for results.json and results.md")
    ap.add_argument("--chunk-batches", type=int, nargs="+",
                    help="instead: translate --chunk-batches settings compared (after one run of the sizes)")
    ap.add_argument("--chunk-lines", type=int, default=8192, help="lines translated for --chunk-batches")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of --chunk-batches, alternated")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    logs = args.work / "logs"
    logs.mkdir(exist_ok=True)
    if args.chunk_batches:
        res = bench_chunks(args.work, args.chunk_lines, args.chunk_batches, args.rounds, logs)
        print(json.dumps(res, indent=1))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "chunks.json").write_text(json.dumps(res, indent=1) + "\n")
        return 0
    results: dict = {"machine": {"cpu": cpu_model_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}
    for n in args.sizes:
        print(f"== {n:,} pairs", flush=True)
        results[str(n)] = {**bench_prepare(args.work, n, args.workers, logs), **bench_train(args.work, n, logs)}
        print(json.dumps(results[str(n)], indent=1), flush=True)
    results["translate"] = bench_translate(args.work, args.translate_lines, logs)
    text = _summary(results, args)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "results.md").write_text(text + "\n")
    return 0


def _summary(results: dict, args) -> str:
    sizes = args.sizes
    tr = results["translate"]
    lo, hi = (tr[f"translate_{n}"] for n in (min(args.translate_lines), max(args.translate_lines)))
    lines = [f"Machine: {results['machine']['cpu']} ({results['machine']['cores']} cores), "
             f"{results['machine']['date']}.", "", report(results, sizes), "",
             f"translate peak anonymous memory: {lo['anon_mb']:,.0f} MiB at {min(args.translate_lines):,} lines, "
             f"{hi['anon_mb']:,.0f} MiB at {max(args.translate_lines):,} lines "
             f"(ratio {hi['anon_mb'] / lo['anon_mb']:.2f}; target <= 1.2); CPU {lo['cpu_s']:.0f} s / {hi['cpu_s']:.0f} s."]
    for n in sizes:
        one, two = (results[str(n)].get(k) for k in ("train_trees_dea_store", "train_trees_dea_store_ddp2"))
        if one and two:
            ranks = two["anon_by_process"][:2]
            lines.append(f"training start-up with the feature store at {n:,} pairs, peak RssAnon per process: one "
                         f"process {one['anon_by_process'][0]:,.0f} MiB; two torchrun ranks "
                         + " and ".join(f"{r:,.0f}" for r in ranks) + " MiB (the launcher "
                         f"{two['anon_by_process'][2] if len(two['anon_by_process']) > 2 else 0:,.0f} MiB); without "
                         f"the store one process {results[str(n)]['train_trees_dea']['anon_by_process'][0]:,.0f} MiB.")
    if 1 in args.workers and 2 in args.workers:
        speed = [results[str(n)]["prepare_trees_w1"]["wall_s"] / results[str(n)]["prepare_trees_w2"]["wall_s"]
                 for n in sizes]
        lines.append("prepare with trees, 2 workers against 1 (wall time): "
                     + ", ".join(f"{s:.2f}x at {n:,}" for s, n in zip(speed, sizes)) + " (target >= 1.7x).")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
