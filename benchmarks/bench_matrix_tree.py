#!/usr/bin/env python
"""Which path the matrix-tree marginals take (closed form, exact elimination, tempered) and how exact they
are, on random score matrices; the figures of docs/sa_nmt.md and of structnmt.nn.matrix_tree's docstring.

    OMP_NUM_THREADS=1 python benchmarks/bench_matrix_tree.py
    OMP_NUM_THREADS=1 python benchmarks/bench_matrix_tree.py --memory STD   (part 3 alone, one std a process)

Part 1: 100 random matrices per standard deviation (n = 2..6), each against enumeration of every tree
(tests/test_matrix_tree.py's ``brute``): the paths taken, the largest |beta - enumeration| and the largest
gradient error (of sum(w * beta) for random w, relative to the largest true gradient + 1) over the
sentences not tempered. Part 2: batches of 64 sentences of 10-30 words with a graph, the paths taken and
the seconds of the call with its backward (median of 5; a wall-clock figure: name the CPU and what else ran
beside it) and their ratio to the batch of the same lengths at std 1, which takes the closed form alone.
Part 3 (``--memory``): how far the process's peak memory grows for 16 sentences of 100 words with a graph.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_matrix_tree import brute  # noqa: E402

from structnmt.nn import matrix_tree as mt  # noqa: E402


def against_enumeration(std: float, count: int = 100) -> str:
    for key in mt.STATS:
        mt.STATS[key] = 0
    worst_value = worst_grad = 0.0
    for t in range(count):
        n = 2 + t % 5
        s = torch.randn(n, n, dtype=torch.float64) * std
        w = torch.randn(n, n, dtype=torch.float64)
        ref = s.clone().requires_grad_(True)
        want = brute(ref)
        (want * w).sum().backward()
        tempered = mt.STATS["tempered"]
        got_s = s.clone().requires_grad_(True)
        got = mt.marginals(got_s[None], torch.tensor([n]))[0]
        (got * w).sum().backward()
        if mt.STATS["tempered"] == tempered:
            worst_value = max(worst_value, float((got - want).detach().abs().max()))
            worst_grad = max(worst_grad, float((got_s.grad - ref.grad).abs().max() / (ref.grad.abs().max() + 1)))
    st = mt.STATS
    closed = st["sentences"] - st["exact_elimination"] - st["tempered"]
    return (f"| {std:g} | {st['sentences']} | {closed} | {st['exact_elimination']} | {st['tempered']} | "
            f"{worst_value:.0e} | {worst_grad:.0e} |")


def batch_seconds(std: float, lengths: torch.Tensor, repeats: int = 5) -> tuple[float, int, int]:
    """Median seconds of ``marginals`` with its backward on (64, 30, 30) scores of this std (a fresh draw each
    call), and the sentences of the last call that took the elimination and the tempered path."""
    times = []
    for _ in range(repeats):
        for key in mt.STATS:
            mt.STATS[key] = 0
        s = (torch.randn(64, 30, 30, dtype=torch.float64) * std).requires_grad_(True)
        t0 = time.perf_counter()
        beta = mt.marginals(s, lengths)
        (beta * torch.randn_like(beta)).sum().backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), mt.STATS["exact_elimination"], mt.STATS["tempered"]


def peak_memory(std: float) -> str:
    """How much the process's peak resident memory grows for the marginals of 16 sentences of 100 words at score
    std ``std`` with a graph and the backward of a weighted sum (a process-wide peak: one std per process)."""
    torch.manual_seed(0)
    s = (torch.randn(16, 100, 100, dtype=torch.float64) * std).requires_grad_(True)
    w = torch.randn(16, 100, 100, dtype=torch.float64)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (mt.marginals(s, torch.full((16,), 100)) * w).sum().backward()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024  # ru_maxrss is in KiB on Linux
    return f"std {std:g}: peak memory grew {grown:.0f} MiB; {mt.STATS['exact_elimination']} of 16 eliminated"


def main() -> None:
    if len(sys.argv) > 1:  # part 3 alone: --memory STD
        try:
            std = float(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--memory" else None
        except ValueError:
            std = None
        if std is None:
            sys.exit(f"bench_matrix_tree.py: give no arguments, or --memory STD (a number), not {' '.join(sys.argv[1:])}")
        print(peak_memory(std))
        return
    torch.manual_seed(11)
    print("| std | sentences | closed form | elimination | tempered | max abs value error | max rel gradient error |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for std in (1, 10, 20, 50, 100, 200, 300, 1000):
        print(against_enumeration(std), flush=True)
    lengths = torch.randint(10, 31, (64,))  # the same sentences' lengths at every std
    batch_seconds(1000, lengths, repeats=1)  # warm-up: both paths once
    rows = {std: batch_seconds(std, lengths) for std in (1, 5, 10, 20, 50, 100, 300, 1000)}
    print("\n| std (64 sentences, 10-30 words) | elimination | tempered | seconds with backward (median of 5) "
          "| against std 1 |")
    print("|---:|---:|---:|---:|---:|")
    for std, (sec, exact, tempered) in rows.items():
        print(f"| {std:g} | {exact} | {tempered} | {sec:.3f} | {sec / rows[1][0]:.1f} |")

if __name__ == "__main__":
    main()
