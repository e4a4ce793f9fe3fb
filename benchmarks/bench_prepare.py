"""Benchmark `structnmt prepare` on N synthetic parallel pairs: time and peak memory.

    OMP_NUM_THREADS=1 python benchmarks/bench_prepare.py --pairs 1000000 --workdir /tmp/bench_prepare

1. writes N pairs to ``train.{en,de}.gz`` (plus small valid/test sets), streaming: a pool
   of synthetic examples (:func:`structnmt.data.synthetic.generate`) is recombined at
   random, one pair at a time, so the writer never holds the N pairs;
2. runs :func:`structnmt.data.prepare.prepare` in a child process and reports its wall
   time, pairs/s and peak RSS (the child's own ``ru_maxrss``);
3. opens the result in another child with :class:`PreparedDataset`, builds the
   token-based batches with :func:`make_batches` and collates a few, reporting that
   time and peak RSS too (the memory-mapped data should cost next to nothing);
4. prints the sizes of the output files and a Markdown table.

Peak RSS of ``prepare`` should not grow with N beyond the SentencePiece sample
(``--spm-max-sentences`` sentences, 2M by default). Compare e.g. ``--pairs 100000`` with
``--pairs 1000000``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pool(size: int, seed: int) -> list[tuple[str, str]]:
    from structnmt.data.synthetic import SynthConfig, generate

    data = generate(SynthConfig(seed=seed, n_train=size, n_valid=0, n_test=0, max_len=20))
    return [(" ".join(ex.src), " ".join(ex.tgt)) for ex in data["train"]]


def write_corpus(workdir: Path, pairs: int, *, seed: int = 1, pool_size: int = 5000, n_eval: int = 2000) -> dict:
    """Write train (``pairs`` pairs), valid and test as gzip files, one pair at a time."""
    pool = _pool(pool_size, seed)
    rng = random.Random(seed)
    stats = {}
    for split, n in (("train", pairs), ("valid", n_eval), ("test", n_eval)):
        t0 = time.perf_counter()
        with gzip.open(workdir / f"{split}.en.gz", "wt", encoding="utf-8", compresslevel=1) as fs, \
                gzip.open(workdir / f"{split}.de.gz", "wt", encoding="utf-8", compresslevel=1) as ft:
            for i in range(n):
                # one to three pool pairs joined: clause coordination, varied lengths
                k = 1 + (rng.random() < 0.35) + (rng.random() < 0.1)
                parts = [pool[rng.randrange(len(pool))] for _ in range(k)]
                s = " and ".join(p[0] for p in parts)
                t = " ko ".join(p[1] for p in parts)
                if i % 5000 == 4999:  # a few empty lines, to exercise the counting
                    s = ""
                fs.write(s + "\n")
                ft.write(t + "\n")
        stats[split] = round(time.perf_counter() - t0, 1)
    return stats


def child_prepare(args) -> None:
    from structnmt.data.prepare import PrepareConfig, prepare

    w = Path(args.workdir)
    cfg = PrepareConfig(
        source_lang="en", target_lang="de", trainpref=str(w / "train"), validpref=str(w / "valid"),
        testprefs=[str(w / "test")], joint_vocab=True, vocab_size=args.vocab_size, max_len=args.max_len,
        spm_max_sentences=args.spm_max_sentences,
    )
    t0 = time.perf_counter()
    manifest = prepare(cfg, w / "data", progress=False, log=lambda m: print(m, file=sys.stderr))
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "peak_rss_mb": _rss_mb(), "counts": manifest["counts"],
                      "vocab": manifest["vocab"]["src"]["size"]}))


def child_dataset(args) -> None:
    import numpy as np

    from structnmt.data.dataset import EpochBatchIterator, PreparedDataset, collate, make_batches

    rss0 = _rss_mb()
    t0 = time.perf_counter()
    ds = PreparedDataset(Path(args.workdir) / "data")
    sp = ds.split("train")
    batches, filtered = make_batches(sp.src_lens, sp.tgt_lens, max_tokens=4096, max_len=args.max_len + 1)
    order = EpochBatchIterator(batches, seed=1).epoch_order(1)
    n_tok = 0
    for ids in order[:200]:
        n_tok += collate(sp, ids).n_tgt_tokens
    seconds, peak = time.perf_counter() - t0, _rss_mb()
    # then touch every token once, in slices, as an epoch would: the mapped file pages become
    # resident and count in RSS, but they are page cache, not heap
    checksum = 0
    for side in ("src", "tgt"):
        data = sp.data[side]
        for start in range(0, len(data), 1 << 22):
            checksum += int(np.asarray(data[start:start + (1 << 22)]).sum(dtype=np.int64))
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak, "import_rss_mb": rss0,
                      "full_pass_rss_mb": _rss_mb(), "sentences": len(sp), "batches": len(batches),
                      "filtered": filtered, "checksum": checksum % 1000}))


def _run_child(mode: str, args) -> dict:
    cmd = [sys.executable, __file__, f"--child-{mode}", "--workdir", str(args.workdir),
           "--vocab-size", str(args.vocab_size), "--max-len", str(args.max_len),
           "--spm-max-sentences", str(args.spm_max_sentences)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{mode} child failed with exit code {proc.returncode}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def _size(path: Path) -> str:
    n = path.stat().st_size
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--workdir", default="/tmp/bench_prepare")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--spm-max-sentences", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the generated corpus and dataset")
    ap.add_argument("--child-prepare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-dataset", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_prepare:
        return child_prepare(args)
    if args.child_dataset:
        return child_dataset(args)

    work = Path(args.workdir)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    write_corpus(work, args.pairs, seed=args.seed)
    gen_s = time.perf_counter() - t0
    print(f"wrote {args.pairs:,} training pairs in {gen_s:.1f} s (generator peak RSS {_rss_mb():.0f} MiB)",
          flush=True)

    prep = _run_child("prepare", args)
    c = prep["counts"]["train"]
    print(f"prepare: {prep['seconds']:.1f} s, peak RSS {prep['peak_rss_mb']:.0f} MiB, "
          f"kept {c['kept']:,} of {c['lines']:,} ({c['dropped_empty']:,} empty, {c['dropped_too_long']:,} too long)",
          flush=True)
    dset = _run_child("dataset", args)
    print(f"dataset: {dset['seconds']:.1f} s, peak RSS {dset['peak_rss_mb']:.0f} MiB, "
          f"{dset['batches']:,} batches", flush=True)

    data = work / "data"
    inputs = sum(p.stat().st_size for p in work.glob("train.*.gz"))
    print("\noutput files:")
    for p in sorted(data.iterdir()):
        print(f"  {p.name:<20} {_size(p):>10}")
    out_total = sum(p.stat().st_size for p in data.iterdir())

    rows = [
        ("training pairs (written / kept)", f"{args.pairs:,} / {c['kept']:,}"),
        ("dropped empty / too long", f"{c['dropped_empty']:,} / {c['dropped_too_long']:,}"),
        ("tokens src / tgt", f"{c['src_tokens']:,} / {c['tgt_tokens']:,}"),
        ("vocabulary (joint)", f"{prep['vocab']:,}"),
        ("input size (train, gzip)", _size_n(inputs)),
        ("output size (all files)", _size_n(out_total)),
        ("generate corpus (streaming)", f"{gen_s:.1f} s, peak RSS {_rss_mb():.0f} MiB"),
        ("prepare wall time", f"{prep['seconds']:.1f} s"),
        ("prepare throughput", f"{args.pairs / prep['seconds']:,.0f} pairs/s"),
        ("prepare peak RSS", f"{prep['peak_rss_mb']:.0f} MiB"),
        ("open + make_batches + 200 collates", f"{dset['seconds']:.1f} s, {dset['batches']:,} batches"),
        ("dataset peak RSS (of which imports)", f"{dset['peak_rss_mb']:.0f} MiB ({dset['import_rss_mb']:.0f} MiB)"),
        ("dataset RSS after reading every token (mmap pages)", f"{dset['full_pass_rss_mb']:.0f} MiB"),
    ]
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if not args.keep:
        shutil.rmtree(work)


def _size_n(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return ""


if __name__ == "__main__":
    main()
