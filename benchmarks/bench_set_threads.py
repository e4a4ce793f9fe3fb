#!/usr/bin/env python
"""What ``torch.set_num_threads`` does to the CPU kernels when it changes nothing: SDPA and a linear layer.

    python benchmarks/bench_set_threads.py [--threads 2] [--rounds 4]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/bench_set_threads.py

Each round starts two child processes with ``OMP_NUM_THREADS=--threads``, in alternating order: one never calls
``torch.set_num_threads``, the other calls it once with the count it already has. Each times, forward and
backward, ``F.scaled_dot_product_attention`` at transformer_tiny's training shapes (the batches' (B, S, T) of
Multi30k at 4,096 tokens, 4 heads of 32; encoder self-attention with a key mask, decoder self-attention with
``is_causal``, cross-attention with a key mask) and a linear layer (4,096 x 128 -> 384). Prints the median over
rounds of each process's ms per call and their ratio. ``structnmt.machine.device.use_threads`` skips the call
for this reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = [(315, 13, 12), (288, 14, 13), (409, 10, 10), (109, 37, 33), (215, 19, 11), (240, 17, 9), (372, 11, 10),
          (163, 25, 15), (170, 24, 14), (54, 44, 45)]
"""(B, S, T) of training batches (source and target lengths), recorded from structnmt's and fairseq's loaders."""


def child(call: bool, threads: int, repeats: int) -> dict:
    """Time the kernels in this process, after ``torch.set_num_threads(threads)`` if ``call``."""
    import torch
    import torch.nn.functional as F

    if call:
        torch.set_num_threads(threads)
    H, d = 4, 32
    gen = torch.Generator().manual_seed(0)
    cases = []
    for B, S, T in SHAPES:
        xs, xt = torch.randn(B, S, 3 * H * d, generator=gen), torch.randn(B, T, 3 * H * d, generator=gen)
        xs.requires_grad_(), xt.requires_grad_()
        key_mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
        key_mask[: B // 3, ..., S - 2:] = False
        cases.append((xs, xt, key_mask, B, S, T))

    def attention() -> None:
        for xs, xt, key_mask, B, S, T in cases:
            qs, ks, vs = xs.view(B, S, 3, H, d).permute(2, 0, 3, 1, 4)
            qt, kt, vt = xt.view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)
            enc = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=key_mask)
            dec = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
            cross = F.scaled_dot_product_attention(qt, ks, vs, attn_mask=key_mask)
            (enc.sum() + dec.sum() + cross.sum()).backward()
            xs.grad = xt.grad = None

    x = torch.randn(4096, 128, requires_grad=True)
    layer = torch.nn.Linear(128, 384)

    def linear() -> None:
        layer(x).sum().backward()
        x.grad = None

    out = {"threads": torch.get_num_threads()}
    for name, fn, calls in (("attention", attention, 3 * len(SHAPES)), ("linear", linear, 1)):
        fn()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        out[name] = (time.perf_counter() - t0) / repeats / calls * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5, help="passes over the shapes in a process")
    ap.add_argument("--child", choices=("call", "no-call"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child == "call", args.threads, args.repeats)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    got: dict[str, list[dict]] = {"no-call": [], "call": []}
    for r in range(args.rounds):
        for which in (("no-call", "call") if r % 2 == 0 else ("call", "no-call")):
            p = subprocess.run([sys.executable, __file__, "--child", which, "--threads", str(args.threads),
                                "--repeats", str(args.repeats)], env=env, capture_output=True, text=True, check=True)
            got[which].append(json.loads(p.stdout))
    import torch

    print(f"# bench_set_threads: torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
          f"OMP_NUM_THREADS={args.threads}, {args.rounds} rounds (median), ms per call, forward + backward")
    print(f"| kernel | no torch.set_num_threads call | torch.set_num_threads({args.threads}) | ratio |")
    print("|---|---:|---:|---:|")
    for kernel in ("attention", "linear"):
        a = statistics.median(g[kernel] for g in got["no-call"])
        b = statistics.median(g[kernel] for g in got["call"])
        print(f"| {kernel} | {a:.2f} | {b:.2f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
