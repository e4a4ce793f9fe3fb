#!/usr/bin/env python
"""Training-step time of SA-NMT's models against their baselines, in one run.

Two families, each against its own baseline:

* RNN (``model.family: rnn``, 2+2 LSTM layers, d = 256): ``rnn`` (the NMT baseline),
  ``sa_shared``, ``sa_separate``, ``sa_1set``, ``sa_hard`` (matrix-tree head selection,
  eqs. 6-22) and ``fa_shared`` (flat attention);
* Transformer (the tiny size): ``transformer`` and ``structured_l1`` (the matrix-tree
  attention as the first encoder layer, all heads).

Then the matrix-tree marginals alone (``structnmt.nn.matrix_tree.marginals``, forward and
backward) for a batch of ``--mt-batch`` sentences of ``--mt-words`` words (default 64 x 40,
random scores), median of ``--mt-reps`` calls, against one RNN baseline step (the median
round's summed step time divided by the number of batches).

Data, timing and output as in ``bench_mgsa.py``: the synthetic task, a fixed list of
batches, one warm-up pass, ``--rounds`` rounds in a rotating order; reported: the median
over rounds of the summed step times and the ratio to the family's baseline.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_sa_nmt.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mgsa import SIZES, dataset, step  # noqa: E402

from structnmt.config import AttentionPlan, AttentionSpec, ModelConfig, RNNConfig  # noqa: E402
from structnmt.data.dataset import PreparedDataset, collate, make_batches  # noqa: E402
from structnmt.machine.allocator import configure_allocator  # noqa: E402
from structnmt.machine.device import use_threads
from structnmt.models import build_model  # noqa: E402


def rnn(**options) -> ModelConfig:
    return ModelConfig(family="rnn", d_model=256, encoder_layers=2, decoder_layers=2, dropout=0.1,
                       share_all_embeddings=True, rnn=RNNConfig(**options))


def transformer(plan: AttentionPlan) -> ModelConfig:
    return ModelConfig(**SIZES["tiny"], dropout=0.1, share_all_embeddings=True, pre_norm=True, attention=plan)


VARIANTS: dict[str, tuple[str, ModelConfig]] = {  # name -> (its baseline, config)
    "rnn": ("rnn", rnn()),
    "sa_shared": ("rnn", rnn(syntax="sa", annotations="shared")),
    "sa_separate": ("rnn", rnn(syntax="sa", annotations="separate")),
    "sa_1set": ("rnn", rnn(syntax="sa", annotations="one_set")),
    "sa_hard": ("rnn", rnn(syntax="sa", annotations="shared", hard=True)),
    "fa_shared": ("rnn", rnn(syntax="fa", annotations="shared")),
    "transformer": ("transformer", transformer(AttentionPlan())),
    "structured_l1": ("transformer", transformer(AttentionPlan(overrides={"encoder_self.0": AttentionSpec("structured")}))),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--mt-batch", type=int, default=64)
    ap.add_argument("--mt-words", type=int, default=40)
    ap.add_argument("--mt-reps", type=int, default=20)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "structnmt-bench-mgsa"))
    args = ap.parse_args()
    allocator = configure_allocator()  # as `structnmt train` does (STRUCTNMT_MALLOC=system: glibc's own)
    if args.threads:
        use_threads(args.threads)
    device = torch.device(args.device)
    ds = PreparedDataset(dataset(Path(args.workdir), args.n_train, args.vocab_size))
    split = ds.split("train")
    vocab = len(ds.src_vocab)
    models = {}
    for name, (_, cfg) in VARIANTS.items():
        torch.manual_seed(1)
        models[name] = build_model(cfg, vocab, vocab).to(device)
    opts = {n: torch.optim.Adam(m.parameters(), lr=1e-4, fused=True) for n, m in models.items()}
    all_batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=args.max_tokens, seed=1)
    pick = np.random.default_rng(0).choice(len(all_batches), size=min(args.train_batches, len(all_batches)),
                                           replace=False)
    batches = [collate(split, all_batches[i], {}).to(device) for i in pick]
    names = list(models)
    for b in batches:
        for n in names:
            step(models[n], opts[n], b, device)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        tot = dict.fromkeys(names, 0.0)
        for j, b in enumerate(batches):
            k = (r * len(batches) + j) % len(names)
            for n in names[k:] + names[:k]:
                tot[n] += step(models[n], opts[n], b, device)
        for n in names:
            per_round[n].append(tot[n])
    print(f"# bench_sa_nmt  device={device} threads={torch.get_num_threads()} allocator={allocator}  torch {torch.__version__}  "
          f"{platform.processor() or platform.machine()}")
    print(f"# {len(batches)} batches (max_tokens={args.max_tokens}); {args.rounds} rounds, rotating order")
    print(f"{'variant':<15}{'baseline':<13}{'params':>11}{'step s (sum)':>14}{'ratio':>8}{'min-ratio':>11}")
    for n in names:
        base = VARIANTS[n][0]
        med = statistics.median(per_round[n])
        ratios = [a / b for a, b in zip(per_round[n], per_round[base])]
        nparam = sum(p.numel() for p in {id(p): p for p in models[n].parameters()}.values())
        print(f"{n:<15}{base:<13}{nparam:>11,}{med:>14.3f}{med / statistics.median(per_round[base]):>8.3f}"
              f"{min(ratios):>11.3f}")
    mt = time_marginals(args.mt_batch, args.mt_words, args.mt_reps, device)
    rnn_step = statistics.median(per_round["rnn"]) / len(batches)
    print(f"# matrix-tree marginals, {args.mt_batch} sentences x {args.mt_words} words, forward + backward: "
          f"{mt * 1000:.1f} ms (median of {args.mt_reps}) = {mt / rnn_step:.3f} of one RNN baseline step "
          f"({rnn_step * 1000:.0f} ms)")


def time_marginals(batch: int, words: int, reps: int, device: torch.device) -> float:
    """Median seconds of marginals() forward + backward on random (batch, words, words) scores."""
    from structnmt.nn.matrix_tree import marginals

    g = torch.Generator().manual_seed(1)
    scores = (torch.randn(batch, words, words, generator=g) * 3).to(device).requires_grad_(True)
    lengths = torch.full((batch,), words, dtype=torch.long, device=device)
    weight = torch.rand(batch, words, words, generator=g).to(device)  # not the sum: columns sum to 1
    times = []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        (marginals(scores, lengths) * weight).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first call warms up
            times.append(time.perf_counter() - t0)
        scores.grad = None
    return statistics.median(times)


if __name__ == "__main__":
    main()
