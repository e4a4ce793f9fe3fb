#!/usr/bin/env python
"""MKL against oneDNN for the float32 matrix products of a small Transformer's linear layers, on this CPU.

    python benchmarks/bench_gemm.py --threads 2 [--rounds 5] [--out FILE]

For each shape of ``transformer_tiny`` (d 128, FFN 256, a 10,000-piece vocabulary) in training (4,096 tokens a
batch) and in beam decoding (128 sentences x beam 5 = 640 hypotheses a step), times the three products of a
linear layer y = x W^T + b — the forward, the input gradient dy W and the weight gradient dy^T x — once by
PyTorch's default (``F.linear`` / ``torch.mm``: MKL on x86) and once by oneDNN's float32 inner product (the
kernel :mod:`structnmt.machine.cpu_gemm` uses), alternated call by call, the median of ``--rounds`` rounds of
``--calls`` calls each. Prints one table with the CPU (``/proc/cpuinfo``), torch version and threads; the ratio
is MKL's time over oneDNN's (above 1: oneDNN faster). Both are float32; their results agree within float32
rounding (checked here on every shape, printed as the largest relative difference).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from structnmt.machine.cpu_gemm import _onednn, cpu_vendor
from structnmt.machine.device import cpu_model_name, use_threads

#: (name, rows M, in K, out N): transformer_tiny's linear layers in training and in a decoding step
SHAPES = [
    ("training: attention projection d -> d", 4096, 128, 128),
    ("training: keys and values d -> 2d, FFN in d -> 256", 4096, 128, 256),
    ("training: FFN out 256 -> d", 4096, 256, 128),
    ("training: output projection d -> 10,000", 4096, 128, 10000),
    ("decoding step: attention projection d -> d", 640, 128, 128),
    ("decoding step: FFN in d -> 256", 640, 128, 256),
    ("decoding step: output projection d -> 10,000", 640, 128, 10000),
]


def products(M: int, K: int, N: int):
    """The three products of a linear layer, each as (MKL's call, oneDNN's call)."""
    gen = torch.Generator().manual_seed(M + K + N)
    x, w, b = torch.randn(M, K, generator=gen), torch.randn(N, K, generator=gen), torch.randn(N, generator=gen)
    dy = torch.randn(M, N, generator=gen)
    return {
        "forward": (lambda: F.linear(x, w, b), lambda: _onednn(x, w, b)),
        "input gradient": (lambda: torch.mm(dy, w), lambda: _onednn(dy, w.t(), None)),
        "weight gradient": (lambda: torch.mm(dy.t(), x), lambda: _onednn(dy.t(), x.t(), None)),
    }


def timed(calls, n: int) -> tuple[float, float]:
    """Seconds per call of the two ``calls``, alternated call by call over ``n`` calls each."""
    spent = [0.0, 0.0]
    for i in range(n):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            calls[k]()
            spent[k] += time.perf_counter() - t0
    return spent[0] / n, spent[1] / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="calls per round of each library")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args(argv)
    use_threads(args.threads)
    lines = [f"# bench_gemm {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {cpu_model_name()} ({cpu_vendor()}), "
             f"torch {torch.__version__}, {args.threads} thread(s), median of {args.rounds} rounds x {args.calls} calls",
             "", "| product | shape M x K -> N | MKL ms | oneDNN ms | MKL / oneDNN | largest rel. difference |",
             "|---|---|---:|---:|---:|---:|"]
    with torch.inference_mode():
        for name, M, K, N in SHAPES:
            for what, calls in products(M, K, N).items():
                a, b = calls[0](), calls[1]()
                diff = float((a - b).abs().max() / a.abs().max())
                timed(calls, 2)  # warm-up: oneDNN makes its kernel for a new shape once
                rounds = [timed(calls, args.calls) for _ in range(args.rounds)]
                mkl, dnn = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
                lines.append(f"| {name}: {what} | {M} x {K} -> {N} | {mkl * 1e3:.3f} | {dnn * 1e3:.3f} | "
                             f"{mkl / dnn:.2f} | {diff:.1e} |")
                print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
