#!/usr/bin/env python
"""Training-step time of RHE's mechanisms and its two baselines against plain attention.

Every variant is a structnmt ``TransformerModel`` of the same size; they differ only in
their attention plan (the rows of configs/rhe/):

* ``baseline``     plain multi-head attention everywhere;
* ``rel_pos``      Rel_Pos (Shaw et al. 2018, k = 16) in every encoder and decoder self-attention;
* ``localness``    Localness (Yang et al. 2018, predicted window) in encoder layers 1-2;
* ``dea``, ``lpea``  DEA / LPEA (k = 6) on all heads of encoder layer 1 (Table 1's "+DEA", "+LPEA");
* ``dea+rhe``, ``lpea+rhe``  the same on the redundant heads only: identification on the
  plain attention (eqs. 3, 9, 10), then the enhanced pass (Table 1's "+RHE" rows).

Targets: DEA and LPEA <= 1.05x, RHE <= 1.15x, Rel_Pos and Localness <= 1.10x.

Data, timing and output as in ``bench_mgsa.py`` (whose dataset and step functions this
reuses): the synthetic task with its gold trees (dependency and constituency), a fixed list
of batches collated once with every variant's structures (collation timed separately),
one warm-up pass, then ``--rounds`` rounds in a rotating order; reported: the median over
rounds of the summed step times and the ratio to the baseline in the same run.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_rhe.py --threads 1
    python benchmarks/bench_rhe.py --device cuda
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

from structnmt.config import AttentionPlan, AttentionSpec, ModelConfig  # noqa: E402
from structnmt.data.dataset import PreparedDataset, collate, make_batches  # noqa: E402
from structnmt.machine.allocator import configure_allocator  # noqa: E402
from structnmt.machine.device import use_threads  # noqa: E402
from structnmt.models.transformer import TransformerModel  # noqa: E402

REL = AttentionSpec("rel_pos", {"k": 16})
LOC = AttentionSpec("localness", {})


def first(options: dict) -> AttentionPlan:
    return AttentionPlan(overrides={"encoder_self.0": AttentionSpec("rhe", options)})


VARIANTS: dict[str, AttentionPlan] = {
    "baseline": AttentionPlan(),
    "rel_pos": AttentionPlan(encoder_self=REL, decoder_self=REL),
    "localness": AttentionPlan(overrides={"encoder_self.0": LOC, "encoder_self.1": LOC}),
    "dea": first({"enhancement": "dea", "heads": "all"}),
    "lpea": first({"enhancement": "lpea", "heads": "all"}),
    "dea+rhe": first({"enhancement": "dea"}),
    "lpea+rhe": first({"enhancement": "lpea"}),
}
TARGETS = {"rel_pos": 1.10, "localness": 1.10, "dea": 1.05, "lpea": 1.05, "dea+rhe": 1.15, "lpea+rhe": 1.15}


def build(size: str, plan: AttentionPlan, vocab: int, seed: int) -> TransformerModel:
    cfg = ModelConfig(**SIZES[size], dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                      share_all_embeddings=True, pre_norm=True, attention=plan)
    torch.manual_seed(seed)
    return TransformerModel(cfg, vocab, vocab)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-batches", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="variants to run besides the baseline")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "structnmt-bench-mgsa"))
    args = ap.parse_args()
    allocator = configure_allocator()  # as `structnmt train` does (STRUCTNMT_MALLOC=system: glibc's own)
    if args.threads:
        use_threads(args.threads)
    device = torch.device(args.device)

    ds = PreparedDataset(dataset(Path(args.workdir), args.n_train, args.vocab_size))
    split = ds.split("train")
    vocab = len(ds.src_vocab)
    specs = {k: v for k, v in VARIANTS.items() if not args.only or k == "baseline" or k in args.only}
    models = {name: build(args.size, plan, vocab, seed=1).to(device) for name, plan in specs.items()}
    opts = {name: torch.optim.Adam(m.parameters(), lr=1e-4, fused=True) for name, m in models.items()}

    all_batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=args.max_tokens, seed=1)
    pick = np.random.default_rng(0).choice(len(all_batches), size=min(args.train_batches, len(all_batches)),
                                           replace=False)
    structures: dict = {}
    for m in models.values():
        structures.update(m.required_structures())
    batches = [collate(split, all_batches[i], structures).to(device) for i in pick]
    collate_s = {}
    for name, m in models.items():
        req = m.required_structures()
        t0 = time.perf_counter()
        for i in pick:
            collate(split, all_batches[i], req)
        collate_s[name] = time.perf_counter() - t0

    names = list(models)
    for b in batches:  # warm-up
        for name in names:
            step(models[name], opts[name], b, device)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        tot = dict.fromkeys(names, 0.0)
        for j, b in enumerate(batches):
            k = (r * len(batches) + j) % len(names)
            for name in names[k:] + names[:k]:
                tot[name] += step(models[name], opts[name], b, device)
        for n in names:
            per_round[n].append(tot[n])

    ntok = sum(b.n_tgt_tokens for b in batches)
    nsrc = sum(int(b.src_mask.sum()) for b in batches)
    print(f"# bench_rhe  size={args.size} {SIZES[args.size]}  device={device} threads={torch.get_num_threads()} allocator={allocator}"
          f"  torch {torch.__version__}  {platform.processor() or platform.machine()}")
    print(f"# {len(batches)} batches (max_tokens={args.max_tokens}): {nsrc} source / {ntok} target tokens; "
          f"{args.rounds} rounds, rotating order; times = median over rounds of the summed step times")
    base = statistics.median(per_round["baseline"])
    print(f"{'variant':<12}{'params':>11}{'step s (sum)':>14}{'ratio':>8}{'min-ratio':>11}{'target':>8}"
          f"{'collate s':>11}")
    for n in names:
        med = statistics.median(per_round[n])
        ratios = [a / b for a, b in zip(per_round[n], per_round["baseline"])]
        nparam = sum(p.numel() for p in {id(p): p for p in models[n].parameters()}.values())
        target = f"{TARGETS[n]:.2f}" if n in TARGETS else "-"
        print(f"{n:<12}{nparam:>11,}{med:>14.3f}{med / base:>8.3f}{min(ratios):>11.3f}{target:>8}"
              f"{collate_s[n]:>11.3f}")


if __name__ == "__main__":
    main()
