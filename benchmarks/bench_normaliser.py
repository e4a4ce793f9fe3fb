#!/usr/bin/env python
"""The per-step vocabulary work of beam search on random logits: normaliser and top-k variants.

Every beam step turns (hypotheses, V) logits into log-probabilities and keeps each row's
``2 * beam`` best. This times, in one run and alternating, the variants structnmt chose
between:

* normaliser: ``log_softmax`` into a fresh block vs written back into the logits (``out=``);
* top-k: one ``topk`` over the row, the two-stage top-k with an element-wise ``gather`` of the
  best chunks' entries, and with whole chunks copied by one
  ``index_select`` (:func:`structnmt.decode.beam.topk_rows`).

It checks that the variants agree and prints milliseconds per call (best of ``--rounds``
blocks) and the ratios. No model, no data: shapes as in a Multi30k batch (128 sentences x
beam 5 rows, 10,000 pieces).

    OMP_NUM_THREADS=2 python benchmarks/bench_normaliser.py --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import torch

from structnmt.decode.beam import _chunk_size, topk_rows
from structnmt.machine.allocator import configure_allocator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from structnmt.machine.device import (
    cpu_model_name,  # noqa: E402
    use_threads,
)


def topk_gather(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two-stage top-k with an element-wise gather of the best chunks' entries (the alternative)."""
    N, V = x.shape
    C = _chunk_size(V, k)
    _, top_chunks = x.view(N, V // C, C).amax(dim=2).topk(k, dim=1)
    cand = x.gather(1, (top_chunks[:, :, None] * C + torch.arange(C)).view(N, k * C))
    values, j = cand.topk(k, dim=1)
    return values, top_chunks.gather(1, torch.div(j, C, rounding_mode="floor")) * C + j % C


def timed(fn, calls: int, rounds: int) -> float:
    """Best over ``rounds`` blocks of ``calls`` calls: ms per call."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=640, help="hypotheses (sentences x beam)")
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--k", type=int, default=10, help="candidates kept per row (2 x beam)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    use_threads(args.threads)
    configure_allocator()  # as structnmt translate
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, generator=g) * 3
    work = logits.clone()
    lp = torch.log_softmax(logits, dim=1)
    assert torch.equal(torch.log_softmax(work, dim=1, out=work), lp), "in-place log_softmax differs"
    ref = lp.topk(args.k, dim=1)
    for name, fn in (("gather", topk_gather), ("index_select", topk_rows)):
        v, i = fn(lp, args.k)
        assert torch.equal(v, ref[0]), f"two-stage top-k ({name}) differs from topk"

    def refill():  # the in-place variant needs fresh logits every call; timed on its own and subtracted
        work.copy_(logits)

    def inplace():
        work.copy_(logits)
        torch.log_softmax(work, dim=1, out=work)

    res = {}
    for _ in range(2):  # alternate: the variants see the same machine state
        res.setdefault("fresh", []).append(timed(lambda: torch.log_softmax(logits, dim=1), args.calls, args.rounds))
        res.setdefault("inplace", []).append(timed(inplace, args.calls, args.rounds)
                                             - timed(refill, args.calls, args.rounds))
        res.setdefault("topk", []).append(timed(lambda: lp.topk(args.k, dim=1), args.calls, args.rounds))
        res.setdefault("gather", []).append(timed(lambda: topk_gather(lp, args.k), args.calls, args.rounds))
        res.setdefault("index_select", []).append(timed(lambda: topk_rows(lp, args.k), args.calls, args.rounds))
    ms = {k: min(v) for k, v in res.items()}
    print(f"# bench_normaliser {datetime.date.today()} {platform.machine()} {cpu_model_name()}, "
          f"{args.threads} thread(s), logits ({args.rows}, {args.vocab}), k={args.k}")
    print("| variant | ms per call | ratio |")
    print("|---|---:|---:|")
    print(f"| log_softmax into a fresh block | {ms['fresh']:.3f} | 1.00 |")
    print(f"| log_softmax written into the logits | {ms['inplace']:.3f} | {ms['fresh'] / ms['inplace']:.2f}x |")
    print(f"| topk over the row | {ms['topk']:.3f} | 1.00 |")
    print(f"| two-stage, element-wise gather | {ms['gather']:.3f} | {ms['topk'] / ms['gather']:.2f}x |")
    print(f"| two-stage, chunks by index_select | {ms['index_select']:.3f} | {ms['topk'] / ms['index_select']:.2f}x "
          f"({ms['gather'] / ms['index_select']:.2f}x the gather) |")


if __name__ == "__main__":
    main()
