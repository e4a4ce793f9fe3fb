"""Benchmark `structnmt prepare --workers N` with given trees: wall and CPU time for each N, and the speed-up.

    python benchmarks/bench_prepare_workers.py --pairs 300000 --workers 1 2 --workdir /tmp/bench_prepare_workers

1. writes the synthetic grammar's corpus (:func:`structnmt.data.synthetic.write_corpus`): ``--pairs``
   training pairs (plus 1,000 valid and test pairs), each source sentence with its gold trees
   (``train.src.conllu``, ``train.src.tree``); a corpus of the same size and seed is reused;
2. runs ``structnmt prepare --parser synthetic --workers N`` in a child process for each N (``--repeat``
   times, the worker counts taking turns), timing its wall clock and its CPU time (the child's and its
   workers': ``RUSAGE_CHILDREN``), and the CPU time the whole machine spent meanwhile (``/proc/stat``):
   what the machine spent beyond the child's own is other work, which slows the child down and makes the
   numbers noisy;
3. checks that every N gave the same dataset (every file byte for byte, the manifest but its ``seconds``);
4. times, in one more child process, only what ``--workers`` splits: the encoding of the training split
   (its trees read and aligned, the planning pass that reads every file once and the joining of the
   workers' files included), the vocabulary trained once beforehand;
5. prints Markdown tables, with the speed-up of the median wall time against the first N.

A whole ``prepare`` also spends time that no worker count changes: SentencePiece's training on the
training text (and the valid and test splits, each encoded by its own workers too).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from structnmt.data.prepare import (
    PrepareConfig,
    _encode_split,
    _ShardJob,
    _train_vocabs,
    _vocab_specs,
)
from structnmt.data.shards import Shard
from structnmt.data.synthetic import SynthConfig
from structnmt.data.synthetic import write_corpus as synth_write
from structnmt.syntax.parsers import ParserConfig, build_parser


@dataclass
class Run:
    """One timed ``prepare``."""

    workers: int
    wall_s: float
    cpu_s: float  # the child's and its workers' user + system time
    machine_cpu_s: float  # every CPU's busy time meanwhile (this run's included)


def _machine_busy_seconds() -> float:
    """CPU time the machine has spent busy since boot, all CPUs together (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu_seconds() -> float:
    """This process's CPU time and that of the children it waited for (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child_encode(args) -> None:
    """Time the encoding of the training split alone for each worker count (one JSON line per run): the
    vocabulary trained once, then each run into a fresh directory. Uses prepare's internal steps."""
    work = Path(args.workdir)
    corpus = work / "corpus"
    src, tgt = corpus / "train.src", corpus / "train.tgt"
    cfg = PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                        vocab_size=args.vocab_size, parser=ParserConfig(name="synthetic"))
    vocab_dir = work / "encode-vocab"
    shutil.rmtree(vocab_dir, ignore_errors=True)
    vocab_dir.mkdir()
    vocabs, _ = _train_vocabs(cfg, (src, tgt), vocab_dir, lambda *_: None)
    backend = build_parser(cfg.parser)
    for _ in range(args.repeat):
        for n in args.workers:
            out = work / f"encode-w{n}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            job = _ShardJob(cfg, "train", src, tgt, str(corpus / "train"), _vocab_specs(vocabs), Shard(), out)
            busy0, cpu0, t0 = _machine_busy_seconds(), _own_cpu_seconds(), time.perf_counter()
            _encode_split(job, vocabs, backend, workers=n, progress=False)
            wall = time.perf_counter() - t0
            print(json.dumps({"workers": n, "wall_s": wall, "cpu_s": _own_cpu_seconds() - cpu0,
                              "machine_cpu_s": _machine_busy_seconds() - busy0}), flush=True)
            shutil.rmtree(out)
    shutil.rmtree(vocab_dir)


def run_encode_child(args) -> list[Run]:
    """:func:`child_encode` in a child process; its runs."""
    cmd = [sys.executable, __file__, "--child-encode", "--workdir", args.workdir, "--vocab-size",
           str(args.vocab_size), "--repeat", str(args.repeat), "--workers", *map(str, args.workers)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        sys.exit(f"the encoding child failed with exit status {proc.returncode}")
    return [Run(**json.loads(line)) for line in proc.stdout.splitlines() if line.startswith("{")]


def write_corpus(workdir: Path, pairs: int, seed: int) -> Path:
    """The synthetic corpus with gold trees in ``workdir/corpus`` (reused when it has ``pairs`` pairs)."""
    corpus = workdir / "corpus"
    meta = corpus / "synth.json"  # written last: a corpus without it was cut short
    if meta.is_file():
        old = json.loads(meta.read_text())
        if old["counts"]["train"] == pairs and old["config"]["seed"] == seed:
            print(f"reusing the corpus of {pairs:,} pairs in {corpus}", flush=True)
            return corpus
    if corpus.exists():
        shutil.rmtree(corpus)
    t0 = time.perf_counter()
    synth_write(SynthConfig(seed=seed, n_train=pairs, n_valid=1000, n_test=1000), corpus)
    print(f"wrote {pairs:,} training pairs with their trees in {time.perf_counter() - t0:.1f} s", flush=True)
    return corpus


def run_prepare(corpus: Path, dest: Path, workers: int, vocab_size: int) -> Run:
    """``structnmt prepare --parser synthetic --workers N`` into a fresh ``dest``, timed."""
    if dest.exists():
        shutil.rmtree(dest)
    cmd = [sys.executable, "-m", "structnmt.cli", "prepare", "-s", "src", "-t", "tgt",
           "--trainpref", str(corpus / "train"), "--validpref", str(corpus / "valid"),
           "--testpref", str(corpus / "test"), "--destdir", str(dest), "--vocab-size", str(vocab_size),
           "--parser", "synthetic", "--workers", str(workers), "--no-progress"]
    cpu0, busy0, t0 = _children_cpu_seconds(), _machine_busy_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    run = Run(workers, wall, _children_cpu_seconds() - cpu0, _machine_busy_seconds() - busy0)
    if proc.returncode:
        sys.exit(f"prepare --workers {workers} failed with exit status {proc.returncode}")
    return run


def dataset_digest(dest: Path) -> str:
    """SHA-256 over every file of a prepared directory (the manifest without its ``seconds``)."""
    h = hashlib.sha256()
    for path in sorted(dest.iterdir()):
        data = path.read_bytes()
        if path.name == "manifest.json":
            manifest = json.loads(data)
            manifest.pop("seconds")
            data = json.dumps(manifest, sort_keys=True).encode()
        h.update(path.name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def report(title: str, runs: list[Run], counts: list[int], cpus: int) -> None:
    """A Markdown table of ``runs``, then the medians and the speed-up against the first worker count."""
    print(f"\n{title}\n\n| workers | wall s | CPU s (with workers) | machine busy s meanwhile | of which other work "
          "|\n|---|---|---|---|---|")
    for r in runs:
        other = max(0.0, r.machine_cpu_s - r.cpu_s)
        print(f"| {r.workers} | {r.wall_s:.1f} | {r.cpu_s:.1f} | {r.machine_cpu_s:.1f} "
              f"| {other:.1f} ({other / r.wall_s:.2f} of {cpus} CPUs) |")
    median = {n: statistics.median(r.wall_s for r in runs if r.workers == n) for n in counts}
    base = counts[0]
    print()
    for n in counts:
        cpu = statistics.median(r.cpu_s for r in runs if r.workers == n)
        print(f"--workers {n}: median wall {median[n]:.1f} s, CPU {cpu:.1f} s, speed-up {median[base] / median[n]:.2f}x "
              f"against --workers {base}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=300_000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time (default 1 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each worker count, taking turns (default 1)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", default="/tmp/bench_prepare_workers")
    ap.add_argument("--keep", action="store_true", help="keep the corpus and the datasets")
    ap.add_argument("--child-encode", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_encode:
        return child_encode(args)

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(work, args.pairs, args.seed)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    runs, digests = [], {}
    for _ in range(args.repeat):
        for n in args.workers:
            dest = work / f"data-w{n}"
            run = run_prepare(corpus, dest, n, args.vocab_size)
            runs.append(run)
            digests.setdefault(n, set()).add(dataset_digest(dest))
            print(f"--workers {n}: {run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU", flush=True)
    same = len(set().union(*digests.values())) == 1
    encode_runs = run_encode_child(args)
    cpus = os.cpu_count() or 1
    report("Whole `prepare` (vocabulary, then train, valid and test):", runs, args.workers, cpus)
    report("Encoding the training split alone (trees read and aligned, planning and joining included):",
           encode_runs, args.workers, cpus)
    print(f"\nthe datasets of every worker count are {'identical' if same else 'DIFFERENT'} "
          f"(every file, the manifest but its seconds)")
    if not args.keep:
        for n in args.workers:
            shutil.rmtree(work / f"data-w{n}", ignore_errors=True)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
