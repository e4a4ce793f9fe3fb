#!/usr/bin/env python
"""Phrase-based attentions (Nguyen & Joty 2018): training step and cached decoding speed vs
the baseline, every variant in one run.

Every variant is a structnmt ``TransformerModel`` of the same size with the mechanism in
every attention layer (encoder self, decoder self, cross), as in the paper:

* ``baseline``                  plain multi-head attention;
* ``homogeneous-{convkv,queryk}`` heads split 1/2-gram half and half (the paper's 4/4);
* ``heterogeneous-{convkv,queryk}`` n-grams 1-2 jointly;
* ``interleaved-{convkv,queryk}``  phrase-to-phrase, unigram + bigram queries.

Data: the synthetic task (``structnmt.data.synthetic``), prepared once under
``$TMPDIR/structnmt-bench-phrasal``. A fixed list of batches (``--max-tokens``,
``--train-batches``) is collated once; every variant steps on the same tensors.

Training: one step = forward, label-smoothed NLL, backward, Adam step; one untimed
warm-up pass, then ``--rounds`` rounds in which every batch is stepped by every variant
back to back in a rotating order (load drift hits all alike); reported: the median over
rounds of the summed step times and its ratio to the baseline (and target tokens/s).

Decoding: beam search (``--beam``) with the incremental cache over ``--decode-sentences``
source sentences in batches of ``--decode-batch``, every variant back to back per
round. The models are untrained and would stop at random lengths, so EOS is blocked
until the length limit (``max_len_a * |src| + max_len_b``, where beam search forces it):
every variant decodes the same number of steps of the same beams. Reported: median
sentences/s and the ratio of time to the baseline.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_phrasal.py --threads 1
    python benchmarks/bench_phrasal.py --device cuda
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from structnmt.config import AttentionSpec, ModelConfig
from structnmt.data.dataset import PreparedDataset, collate, make_batches
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.data.vocab import EOS
from structnmt.decode.beam import beam_search
from structnmt.machine.allocator import configure_allocator  # noqa: E402
from structnmt.machine.device import use_threads
from structnmt.models.transformer import TransformerModel
from structnmt.train.loss import label_smoothed_nll

SIZES = {
    "tiny": dict(d_model=128, ffn_dim=256, heads=4, encoder_layers=4, decoder_layers=4),
    "base": dict(d_model=512, ffn_dim=2048, heads=8, encoder_layers=6, decoder_layers=6),
}


def variants(heads: int) -> dict[str, AttentionSpec | None]:
    out: dict[str, AttentionSpec | None] = {"baseline": None}
    for v in ("convkv", "queryk"):
        out[f"homogeneous-{v}"] = AttentionSpec("phrasal_homogeneous", {"variant": v,
                                                                        "ngram_heads": [heads // 2, heads // 2]})
        out[f"heterogeneous-{v}"] = AttentionSpec("phrasal_heterogeneous", {"variant": v, "ngrams": [1, 2]})
        out[f"interleaved-{v}"] = AttentionSpec("phrasal_interleaved", {"variant": v})
    return out


def dataset(workdir: Path, n_train: int, vocab_size: int) -> Path:
    out = workdir / f"data_{n_train}_{vocab_size}"
    if not (out / "manifest.json").exists():
        write_corpus(SynthConfig(seed=11, n_train=n_train, n_valid=50, n_test=50), workdir / "corpus")
        prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(workdir / "corpus" / "train"),
                              vocab_size=vocab_size), out, progress=False, log=lambda *_: None)
    return out


def build(size: str, spec: AttentionSpec | None, vocab: int, seed: int) -> TransformerModel:
    cfg = ModelConfig(**SIZES[size], dropout=0.1, share_all_embeddings=True, pre_norm=False)
    if spec is not None:
        cfg.attention.encoder_self = cfg.attention.decoder_self = cfg.attention.cross = spec
    torch.manual_seed(seed)
    return TransformerModel(cfg, vocab, vocab)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, opt, b) -> float:
    model.train()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    out = model(b.src, b.src_mask, b.tgt_in, b.structures)
    loss, _ = label_smoothed_nll(out.logits, b.tgt_out, 0.1)
    (loss / b.n_tgt_tokens).backward()
    opt.step()
    sync(b.src.device)
    return time.perf_counter() - t0


class _FullLength:
    """The model with EOS blocked before the length limit (see the module docstring)."""

    def __init__(self, model: TransformerModel):
        self.model = model

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def shares_source_across_beam(self) -> bool:
        return self.model.shares_source_across_beam()

    def decode_step(self, *args, **kwargs):
        # log-probs, or logits (beam search asks for logits and normalises over what is left: with EOS blocked,
        # the other tokens' probabilities are renormalised, which changes the ranking but not the work)
        lprobs = self.model.decode_step(*args, **kwargs).float()
        lprobs[:, EOS] = float("-inf")
        return lprobs


@torch.no_grad()
def decode(model, srcs: list, beam: int) -> float:
    model.eval()
    t0 = time.perf_counter()
    for src, mask in srcs:
        hyps = beam_search(_FullLength(model), src, mask, beam=beam, max_len_a=1.2, max_len_b=10)
        assert all(len(h[0].tokens) >= int(1.2 * n + 10) - 2 for h, n in zip(hyps, mask.sum(1).tolist())), \
            "a hypothesis stopped before the length limit"
    sync(srcs[0][0].device)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--n-train", type=int, default=3000)
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decode-sentences", type=int, default=64)
    ap.add_argument("--decode-batch", type=int, default=32)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="variants to run besides the baseline")
    ap.add_argument("--skip-train", action="store_true", help="measure decoding only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "structnmt-bench-phrasal"))
    args = ap.parse_args()
    allocator = configure_allocator()  # as `structnmt train` does (STRUCTNMT_MALLOC=system: glibc's own)
    if args.threads:
        use_threads(args.threads)
    device = torch.device(args.device)

    ds = PreparedDataset(dataset(Path(args.workdir), args.n_train, args.vocab_size))
    split = ds.split("train")
    vocab = len(ds.src_vocab)
    specs = variants(SIZES[args.size]["heads"])
    if args.only:
        specs = {k: v for k, v in specs.items() if k == "baseline" or k in args.only}
    models = {name: build(args.size, spec, vocab, seed=1).to(device) for name, spec in specs.items()}
    opts = {name: torch.optim.Adam(m.parameters(), lr=1e-4, fused=True) for name, m in models.items()}
    names = list(models)

    all_batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=args.max_tokens, seed=1)
    pick = np.random.default_rng(0).choice(len(all_batches), size=min(args.train_batches, len(all_batches)),
                                           replace=False)
    batches = [collate(split, all_batches[i]).to(device) for i in pick]
    order = np.random.default_rng(1).permutation(len(split))[: args.decode_sentences]
    srcs = []
    for start in range(0, len(order), args.decode_batch):
        b = collate(split, order[start:start + args.decode_batch]).to(device)
        srcs.append((b.src, b.src_mask))

    if args.skip_train:
        batches = []
    for b in batches:  # warm-up
        for name in names:
            train_step(models[name], opts[name], b)
    train_t: dict[str, list[float]] = {n: [] for n in names}
    dec_t: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        tot = dict.fromkeys(names, 0.0)
        for j, b in enumerate(batches):
            k = (r * len(batches) + j) % len(names)
            for name in names[k:] + names[:k]:
                tot[name] += train_step(models[name], opts[name], b)
        for n in names:
            train_t[n].append(tot[n])
        k = r % len(names)
        if r == 0:  # warm-up
            for name in names:
                decode(models[name], srcs[:1], args.beam)
        for name in names[k:] + names[:k]:
            dec_t[name].append(decode(models[name], srcs, args.beam))

    ntok = sum(b.n_tgt_tokens for b in batches) or float("nan")
    med = statistics.median
    print(f"# bench_phrasal  size={args.size} {SIZES[args.size]}  device={device} threads={torch.get_num_threads()} allocator={allocator}"
          f"  torch {torch.__version__}  {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"# training: {len(batches)} batches (max_tokens={args.max_tokens}, {ntok} target tokens), {args.rounds} "
          f"rounds; decoding: {len(order)} sentences, beam {args.beam}, batches of {args.decode_batch}, cached")
    print("| variant | params | train step (s, sum) | train ratio | target tok/s | decode sent/s | decode time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base_t = med(train_t["baseline"]) if batches else float("nan")
    base_d = med(dec_t["baseline"])
    for n in names:
        t, d = (med(train_t[n]) if batches else float("nan")), med(dec_t[n])
        nparam = sum(p.numel() for p in {id(p): p for p in models[n].parameters()}.values())
        print(f"| {n} | {nparam:,} | {t:.3f} | {t / base_t:.2f}x | {ntok / t:,.0f} | {len(order) / d:.1f} | "
              f"{d / base_d:.2f}x |")


if __name__ == "__main__":
    main()
