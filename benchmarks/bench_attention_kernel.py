#!/usr/bin/env python
"""SDPA's CPU kernel against the explicit matmul-softmax-matmul, forward and backward, at a training shape.

    python benchmarks/bench_attention_kernel.py [--threads 2] [--batch 110 --heads 4 --length 32 --dim 32]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/bench_attention_kernel.py

The five ways an attention of transformer_tiny's training batches can be computed: SDPA with a boolean key mask
(what structnmt's encoder and cross-attention run), with an additive float mask, SDPA's ``is_causal`` kernel,
and the explicit path with a key mask and with a causal mask (fairseq's encoder-decoder attention is ``bmm`` +
``softmax``). Each: ``--calls`` forward-and-backward calls a round, the ways alternating, the median of
``--rounds`` rounds after one untimed round; milliseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from structnmt.machine.device import use_threads


def ways(B: int, H: int, T: int, d: int) -> tuple[dict, list[torch.Tensor]]:
    """The five computations over one set of q, k, v (B, H, T, d) and key lengths."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, d, generator=gen).requires_grad_() for _ in range(3))
    lens = torch.randint(T // 3, T + 1, (B,), generator=gen)
    key_mask = (torch.arange(T)[None, :] < lens[:, None])[:, None, None, :]  # (B, 1, 1, T), True = may attend
    float_mask = torch.zeros(B, 1, 1, T).masked_fill(~key_mask, float("-inf"))
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def explicit(mask: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5
        return torch.matmul(torch.softmax(scores.masked_fill(~mask, float("-inf")), -1), v)

    return {
        "SDPA, bool key mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask),
        "SDPA, float key mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask),
        "SDPA, is_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "explicit, key mask": lambda: explicit(key_mask),
        "explicit, causal": lambda: explicit(causal),
    }, [q, k, v]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=110)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    use_threads(args.threads)  # not torch.set_num_threads when the count is already right: it slows SDPA
    fns, leaves = ways(args.batch, args.heads, args.length, args.dim)
    spent: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(args.rounds + 1):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fns[name]().sum().backward()
            if r:
                spent[name].append((time.perf_counter() - t0) / args.calls)
            for t in leaves:
                t.grad = None
    print(f"# bench_attention_kernel: torch {torch.__version__}, capability "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), (B, H, T, d) = "
          f"({args.batch}, {args.heads}, {args.length}, {args.dim})")
    base = statistics.median(spent["SDPA, bool key mask"])
    for name, s in spent.items():
        print(f"| {name} | {statistics.median(s) * 1e3:.2f} ms | {statistics.median(s) / base:.2f} |")


if __name__ == "__main__":
    main()
