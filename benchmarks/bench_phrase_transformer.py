#!/usr/bin/env python
"""Training-step time of the PhraseTransformer against plain attention, in one run.

Every variant is a structnmt ``TransformerModel`` of the same size with the
PhraseTransformer in every encoder layer (the paper's setting, §4.1), differing only in
its options:

* ``baseline``       plain multi-head attention everywhere;
* ``pt_k2``, ``pt_k3``   n-gram hypernodes up to k words, phase 2 ``impl: auto`` (the default);
* ``pt_k2_dense``, ``pt_k3_dense``, ``pt_k2_gathered``, ``pt_k3_gathered``  phase 2 forced
  dense (B, H, L, L) or gathered (B, L, K, D);
* ``linear_k2``      without eq. 5's sigmoid;
* ``hadamard_k2``    eq. 5 literally (exact gathered form).

The encoder runs over L = S + N nodes (N ~ (k - 1) x words), so phase 1 alone costs
about (L / S)^2 of the baseline's encoder attention; the target is <= 2x the
baseline's whole training step at k = 2.

Data, timing and output as in ``bench_mgsa.py`` (whose dataset and step functions this
reuses): the synthetic task, a fixed list of batches collated once with every variant's
structures (collation timed separately), one warm-up pass, then ``--rounds`` rounds in a
rotating order; reported: the median over rounds of the summed step times and the ratio
to the baseline in the same run.

``--phase2`` instead times phase 2 alone (forward + backward of
``within_phrase_attention``, masked form) dense against gathered for sentences of 10..320
words at about 4,000 words per batch (4 heads of 32), the measurement behind
``impl: auto``'s crossover (gathered when L > 25 K^2).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_phrase_transformer.py --threads 1
    OMP_NUM_THREADS=1 python benchmarks/bench_phrase_transformer.py --threads 1 --phase2
    python benchmarks/bench_phrase_transformer.py --device cuda --size base
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
from structnmt.machine.device import use_threads
from structnmt.models.transformer import TransformerModel  # noqa: E402


def pt(**options) -> AttentionPlan:
    return AttentionPlan(encoder_self=AttentionSpec("phrase_transformer", options))


VARIANTS: dict[str, AttentionPlan] = {
    "baseline": AttentionPlan(),
    "pt_k2": pt(k=2),
    "pt_k2_dense": pt(k=2, impl="dense"),
    "pt_k2_gathered": pt(k=2, impl="gathered"),
    "pt_k3": pt(k=3),
    "pt_k3_dense": pt(k=3, impl="dense"),
    "pt_k3_gathered": pt(k=3, impl="gathered"),
    "linear_k2": pt(k=2, nonlinear=False),
    "hadamard_k2": pt(k=2, within="hadamard"),
}
TARGETS = {"pt_k2": 2.0, "pt_k2_dense": 2.0, "pt_k2_gathered": 2.0, "linear_k2": 2.0, "hadamard_k2": 2.0}


def build(size: str, plan: AttentionPlan, vocab: int, seed: int) -> TransformerModel:
    cfg = ModelConfig(**SIZES[size], dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                      share_all_embeddings=True, pre_norm=True, attention=plan)
    torch.manual_seed(seed)
    return TransformerModel(cfg, vocab, vocab)


def phase2_table(rounds: int, device: torch.device) -> None:
    from structnmt.nn.phrase_transformer import within_phrase_attention
    from structnmt.syntax.batching import StructureSpec, build_structures

    print(f"# phase 2 alone (fwd + bwd), threads={torch.get_num_threads()} allocator={configure_allocator()}, min over {rounds} rounds after one warm-up")
    print(f"{'words':>6}{'k':>3}{'batch':>7}{'L':>6}{'K':>4}{'dense ms':>10}{'gathered ms':>13}{'g/d':>7}")
    for words in (10, 20, 40, 80, 160, 320):
        for k in (2, 3):
            B = max(1, 4000 // words)
            st = build_structures({"x": StructureSpec("ngram_hypernodes", {"k": k})}, [(None, None)] * B,
                                  [np.arange(words)] * B, words + 1)
            nbr = st["x.neighbours"].to(device)
            L = nbr.shape[1]
            mask = torch.cat([torch.ones(B, words + 1, dtype=torch.bool), st["x.mask"]], 1).to(device)
            best = {}
            for impl in ("dense", "gathered"):
                q, kk, v = (torch.randn(B, 4, L, 32, device=device, requires_grad=True) for _ in range(3))
                times = []
                for _ in range(rounds + 1):
                    t0 = time.perf_counter()
                    out, _ = within_phrase_attention(q, kk, v, nbr, mask, impl=impl)
                    out.sum().backward()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                best[impl] = min(times[1:])
            print(f"{words:>6}{k:>3}{B:>7}{L:>6}{nbr.shape[2]:>4}{best['dense'] * 1e3:>10.1f}"
                  f"{best['gathered'] * 1e3:>13.1f}{best['gathered'] / best['dense']:>7.2f}")


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
    ap.add_argument("--phase2", action="store_true", help="time phase 2 alone, dense vs gathered, by length")
    args = ap.parse_args()
    allocator = configure_allocator()  # as `structnmt train` does (STRUCTNMT_MALLOC=system: glibc's own)
    if args.threads:
        use_threads(args.threads)
    if args.phase2:
        phase2_table(args.rounds, torch.device(args.device))
        return
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
    print(f"# bench_phrase_transformer  size={args.size} {SIZES[args.size]}  device={device} threads={torch.get_num_threads()} allocator={allocator}"
          f"  torch {torch.__version__}  {platform.processor() or platform.machine()}")
    print(f"# {len(batches)} batches (max_tokens={args.max_tokens}): {nsrc} source / {ntok} target tokens; "
          f"{args.rounds} rounds, rotating order; times = median over rounds of the summed step times")
    base = statistics.median(per_round["baseline"])
    print(f"{'variant':<16}{'params':>11}{'step s (sum)':>14}{'ratio':>8}{'min-ratio':>11}{'target':>8}"
          f"{'collate s':>11}")
    for n in names:
        med = statistics.median(per_round[n])
        ratios = [a / b for a, b in zip(per_round[n], per_round["baseline"])]
        nparam = sum(p.numel() for p in {id(p): p for p in models[n].parameters()}.values())
        target = f"{TARGETS[n]:.2f}" if n in TARGETS else "-"
        print(f"{n:<16}{nparam:>11,}{med:>14.3f}{med / base:>8.3f}{min(ratios):>11.3f}{target:>8}"
              f"{collate_s[n]:>11.3f}")


if __name__ == "__main__":
    main()
