#!/usr/bin/env python
"""Decoding speed of a trained checkpoint: structnmt's beam search against the source-per-hypothesis search and CTranslate2.

Variants, all on the same sentences, beam and batch size, in one run, in rotating order:

* ``structnmt``: ``structnmt translate``'s path (encoder output and cross-attention keys
  and values kept once per sentence for its hypotheses, candidates normalised after a
  per-hypothesis top-k);
* ``structnmt-copied``: the same search with the source copied per hypothesis and
  reordered every step (``beam_search(share_source=False)``);
* ``ctranslate2``: the checkpoint exported with ``structnmt export --format ctranslate2``
  (float32), through ``CT2Translator`` (``structnmt translate --checkpoint EXPORT``);
* ``ctranslate2-int8`` (``--int8``): the same export with int8 weights.

``--malloc-compare`` instead runs the ``structnmt`` variant in child processes with
STRUCTNMT_MALLOC=system and =retain (structnmt.machine.allocator; a process setting),
alternating ``--rounds`` times, and reports the ratio and whether the translations are
identical. Otherwise the benchmark applies STRUCTNMT_MALLOC (default: retain), as
``structnmt translate`` does.

Reported: sentences/s (best of ``--rounds``), the ratio to ``structnmt-copied``, the
fraction of translations identical to ``structnmt``'s, and sacreBLEU against
``--ref`` (with its signature) when given. Plain Transformers only (CTranslate2).

    OMP_NUM_THREADS=2 python benchmarks/bench_decode.py --checkpoint run/average.pt \\
        --input ../shared/data/multi30k/test_2016_flickr.en.gz --ref ../shared/data/multi30k/test_2016_flickr.de.gz \\
        --threads 2 --beam 5 --batch-size 128
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from structnmt.machine.device import use_threads


def read(path: str) -> list[str]:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--ref", help="references for sacreBLEU (optional)")
    ap.add_argument("--sentences", type=int, default=0, help="first N input lines (0 = all)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--int8", action="store_true", help="also CTranslate2 with int8 weights")
    ap.add_argument("--no-ctranslate2", action="store_true")
    ap.add_argument("--malloc-compare", action="store_true")
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    return ap


def _read_inputs(args: argparse.Namespace) -> tuple[list[str], list[str] | None]:
    """The input lines and the references (None without ``--ref``), cut to ``--sentences``."""
    lines = read(args.input)
    refs = read(args.ref) if args.ref else None
    if args.sentences:
        lines = lines[: args.sentences]
        refs = refs[: args.sentences] if refs else None
    return lines, refs


def _structnmt_variant(tr, lines: list[str], dcfg, share: bool) -> Callable[[], list[str]]:
    """``structnmt translate``'s path over ``lines``, its beam search with ``share_source=share``."""
    import structnmt.decode.translate as T
    from structnmt.decode.beam import beam_search

    def run() -> list[str]:
        T.beam_search = lambda *a, **k: beam_search(*a, share_source=share, **k)
        try:
            return [h[0].text for h in tr.translate(lines, dcfg)]
        finally:
            T.beam_search = beam_search
    return run


def _add_ctranslate2(variants: dict[str, Callable[[], list[str]]], args: argparse.Namespace, tmp: Path,
                     lines: list[str], dcfg) -> None:
    """The CTranslate2 export of the checkpoint (float32, and int8 with ``--int8``) as variants, exported in ``tmp``."""
    from structnmt.tasks.export import CT2Translator, export_ctranslate2

    ct = CT2Translator(export_ctranslate2(args.checkpoint, tmp / "f32"), threads=args.threads)
    variants["ctranslate2"] = lambda: [h[0].text for h in ct.translate(lines, dcfg)]
    if args.int8:
        ct8 = CT2Translator(export_ctranslate2(args.checkpoint, tmp / "int8", quantization="int8"),
                            threads=args.threads)
        variants["ctranslate2-int8"] = lambda: [h[0].text for h in ct8.translate(lines, dcfg)]


def _time_variants(variants: dict[str, Callable[[], list[str]]], rounds: int
                   ) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """An untimed pass of each variant (its outputs kept), then ``rounds`` timed ones in rotating order."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list[str]] = {}
    for n in names:  # warm-up, not timed
        outputs[n] = variants[n]()
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            variants[n]()
            times[n].append(time.perf_counter() - t0)
    return times, outputs


def _print_report(args: argparse.Namespace, allocator: str, lines: list[str], refs: list[str] | None,
                  times: dict[str, list[float]], outputs: dict[str, list[str]]) -> None:
    """The run's header line and Markdown table (with sacreBLEU and its signature when there are references)."""
    print(f"# bench_decode {datetime.date.today()} {platform.machine()} torch {torch.__version__}, "
          f"{args.threads} thread(s), {len(lines)} sentences, beam {args.beam}, batch {args.batch_size}, "
          f"best of {args.rounds} rounds, allocator {allocator}")
    bleu = None
    if refs:
        import sacrebleu

        bleu = sacrebleu.BLEU()
    base = min(times["structnmt-copied"])
    print("| variant | sentences/s | speed vs structnmt-copied | identical to structnmt | BLEU |")
    print("|---|---|---|---|---|")
    for n in times:
        best = min(times[n])
        same = sum(a == b for a, b in zip(outputs[n], outputs["structnmt"])) / len(lines)
        score = f"{bleu.corpus_score(outputs[n], [refs]).score:.2f}" if bleu else "-"
        print(f"| {n} | {len(lines) / best:.1f} | {base / best:.2f} | {100 * same:.1f} % | {score} |")
    if bleu:
        print(f"sacreBLEU signature: {bleu.get_signature()}")


def main() -> None:
    ap = _build_parser()
    args = ap.parse_args()

    if args.malloc_compare:
        malloc_compare(args)
        return
    from structnmt.machine.allocator import configure_allocator

    allocator = configure_allocator()
    use_threads(args.threads)
    import structnmt.decode.translate as T
    from structnmt.config import DecodeConfig

    lines, refs = _read_inputs(args)
    dcfg = DecodeConfig(beam=args.beam, lenpen=args.lenpen, batch_size=args.batch_size)
    tr = T.Translator(args.checkpoint, device="cpu")

    variants = {"structnmt": _structnmt_variant(tr, lines, dcfg, True),
                "structnmt-copied": _structnmt_variant(tr, lines, dcfg, False)}
    if args.child_json:  # one timed pass of the structnmt variant (after an untimed one), for --malloc-compare
        _structnmt_variant(tr, lines, dcfg, True)()
        t0 = time.perf_counter()
        out = _structnmt_variant(tr, lines, dcfg, True)()
        Path(args.child_json).write_text(json.dumps({"rate": len(lines) / (time.perf_counter() - t0), "out": out}))
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-decode-"))
    try:
        if not args.no_ctranslate2:
            _add_ctranslate2(variants, args, tmp, lines, dcfg)
        times, outputs = _time_variants(variants, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    _print_report(args, allocator, lines, refs, times, outputs)


def malloc_compare(args) -> None:
    cmd = [sys.executable, __file__, "--checkpoint", args.checkpoint, "--input", args.input, "--beam", str(args.beam),
           "--lenpen", str(args.lenpen), "--batch-size", str(args.batch_size), "--threads", str(args.threads),
           "--sentences", str(args.sentences), "--no-ctranslate2"]
    settings = ("system", "retain")
    rates: dict[str, list[float]] = {v: [] for v in settings}
    outs: dict[str, list[str]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-decode-"))
    try:
        for r in range(args.rounds):
            for v in (settings if r % 2 == 0 else settings[::-1]):
                res = tmp / f"{v}.json"
                subprocess.run(cmd + ["--child-json", str(res)], env={**os.environ, "STRUCTNMT_MALLOC": v}, check=True)
                got = json.loads(res.read_text())
                rates[v].append(got["rate"])
                outs[v] = got["out"]
                print(f"STRUCTNMT_MALLOC={v}: {got['rate']:.1f} sentences/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a, b = max(rates["system"]), max(rates["retain"])
    same = sum(x == y for x, y in zip(outs["system"], outs["retain"])) / len(outs["system"])
    print(f"# bench_decode --malloc-compare {datetime.date.today()} {platform.machine()} torch {torch.__version__}, "
          f"{args.threads} thread(s), beam {args.beam}, batch {args.batch_size}, best of {args.rounds} rounds")
    print(f"| STRUCTNMT_MALLOC=system | {a:.1f} sentences/s | 1.00 |\n| STRUCTNMT_MALLOC=retain | {b:.1f} sentences/s | "
          f"{b / a:.2f} |\ntranslations identical: {100 * same:.1f} %")


if __name__ == "__main__":
    main()
