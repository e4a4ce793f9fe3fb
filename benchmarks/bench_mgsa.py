#!/usr/bin/env python
"""Training-step time of MG-SA (Hao et al. 2019) in the bottom encoder layer vs the baseline.

Every variant is a structnmt ``TransformerModel`` of the same size; they differ only in
``model.attention.overrides["encoder_self.0"]``:

* ``baseline``        plain multi-head attention everywhere;
* ``ngram``           MG-SA, preset ngram (a quarter of heads each: word, 2-, 3-, 4-gram),
                      SAN composition (the paper's default);
* ``ngram+onlstm``    the same with ON-LSTM phrase interaction (eq. 11);
* ``syntax+tag+onlstm`` MG-SA, preset syntax (word + top 3 levels), tag loss, ON-LSTM —
                      the paper's full model (Table 3 row 6).

Data: the synthetic task (``structnmt.data.synthetic``) prepared with its gold trees
(``parser: synthetic``) under ``$TMPDIR/structnmt-bench-mgsa`` (reused on later runs),
so that the syntax variant has real partitions and labels. A fixed list of training
batches (``--max-tokens``, ``--train-batches``, fixed seed) is collated once with the
union of every variant's structures; every variant steps on the same tensors.
Collation (structure building) is timed separately and reported, not counted in the step.

One step = forward, label-smoothed NLL + auxiliary losses, backward, Adam step. One
untimed warm-up pass; then ``--rounds`` rounds in which every batch is stepped by every
variant back to back in a rotating order, so that load drift hits all alike. Reported:
median (over rounds) of the total step time per variant and its ratio to the baseline.

Sizes: default ``--size tiny`` = the Multi30k ``transformer_tiny`` (4+4 layers,
d=128, FFN 256, 4 heads); ``--size base`` = the paper's Transformer-Base (6+6, d=512,
FFN 2048, 8 heads), much slower on CPU.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_mgsa.py
    OMP_NUM_THREADS=1 python benchmarks/bench_mgsa.py --size base --train-batches 3 --rounds 3
    python benchmarks/bench_mgsa.py --device cuda
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
from structnmt.machine.allocator import configure_allocator  # noqa: E402
from structnmt.machine.device import use_threads
from structnmt.models.transformer import TransformerModel
from structnmt.train.loss import label_smoothed_nll

SIZES = {
    "tiny": dict(d_model=128, ffn_dim=256, heads=4, encoder_layers=4, decoder_layers=4),
    "base": dict(d_model=512, ffn_dim=2048, heads=8, encoder_layers=6, decoder_layers=6),
}


def dataset(workdir: Path, n_train: int, vocab_size: int) -> Path:
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus
    from structnmt.syntax.parsers import ParserConfig

    raw = workdir / f"synth-{n_train}"
    if not (raw / "synth.json").exists():
        write_corpus(SynthConfig(n_train=n_train, n_valid=50, n_test=50), raw)
    out = workdir / f"bin-{n_train}-{vocab_size}"
    if not (out / "manifest.json").exists():
        prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(raw / "train"),
                              validpref=str(raw / "valid"), testprefs=[str(raw / "test")], vocab_size=vocab_size,
                              parser=ParserConfig(name="synthetic")), out, progress=False, log=lambda *a: None)
    return out


def variants(num_tags: int, chunk_size: int) -> dict[str, dict | None]:
    return {
        "baseline": None,
        "ngram": {"preset": "ngram"},
        "ngram+onlstm": {"preset": "ngram", "interaction": "on_lstm", "chunk_size": chunk_size},
        "syntax+tag+onlstm": {"preset": "syntax", "interaction": "on_lstm", "chunk_size": chunk_size,
                              "num_tags": num_tags},
    }


def build(size: str, options: dict | None, vocab: int, seed: int) -> TransformerModel:
    cfg = ModelConfig(**SIZES[size], dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                      share_all_embeddings=True, pre_norm=True)
    if options is not None:
        cfg.attention.overrides = {"encoder_self.0": AttentionSpec(name="mgsa", options=options)}
    torch.manual_seed(seed)
    return TransformerModel(cfg, vocab, vocab)


def step(model: TransformerModel, opt: torch.optim.Optimizer, b, device: torch.device) -> float:
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    out = model(b.src, b.src_mask, b.tgt_in, b.structures)
    loss, _ = label_smoothed_nll(out.logits, b.tgt_out, 0.1)
    loss = loss / b.n_tgt_tokens
    for aux in out.aux_losses.values():
        loss = loss + aux
    loss.backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-batches", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk-size", type=int, default=8)
    ap.add_argument("--only", nargs="*", help="variants to run besides the baseline")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "structnmt-bench-mgsa"))
    args = ap.parse_args()
    allocator = configure_allocator()  # as `structnmt train` does (STRUCTNMT_MALLOC=system: glibc's own)
    if args.threads:
        use_threads(args.threads)
    device = torch.device(args.device)

    data = dataset(Path(args.workdir), args.n_train, args.vocab_size)
    ds = PreparedDataset(data)
    split = ds.split("train")
    labels = ds.manifest["syntax"]["labels"]
    label_ids = {x: i for i, x in enumerate(labels)}
    vocab = len(ds.src_vocab)

    specs = variants(len(labels), args.chunk_size)
    if args.only:
        specs = {k: v for k, v in specs.items() if k == "baseline" or k in args.only}
    models = {name: build(args.size, opts, vocab, seed=1).to(device) for name, opts in specs.items()}
    opts = {name: torch.optim.Adam(m.parameters(), lr=1e-4, fused=True) for name, m in models.items()}

    all_batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=args.max_tokens, seed=1)
    pick = np.random.default_rng(0).choice(len(all_batches), size=min(args.train_batches, len(all_batches)),
                                           replace=False)
    structures: dict = {}
    for m in models.values():
        structures.update(m.required_structures())
    batches = [collate(split, all_batches[i], structures, label_ids).to(device) for i in pick]

    # collation cost per variant (structure building happens in the trainer's loop)
    collate_s = {}
    for name, m in models.items():
        req = m.required_structures()
        t0 = time.perf_counter()
        for i in pick:
            collate(split, all_batches[i], req, label_ids)
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
    print(f"# bench_mgsa  size={args.size} {SIZES[args.size]}  device={device} threads={torch.get_num_threads()} allocator={allocator}"
          f"  torch {torch.__version__}  {platform.processor() or platform.machine()}")
    print(f"# {len(batches)} batches (max_tokens={args.max_tokens}): {nsrc} source / {ntok} target tokens; "
          f"{args.rounds} rounds, rotating order; times = median over rounds of the summed step times")
    base = statistics.median(per_round["baseline"])
    print(f"{'variant':<20}{'params':>11}{'step s (sum)':>14}{'ratio':>8}{'min-ratio':>11}{'collate s':>11}")
    for n in names:
        med = statistics.median(per_round[n])
        ratios = [a / b for a, b in zip(per_round[n], per_round["baseline"])]
        nparam = sum(p.numel() for p in {id(p): p for p in models[n].parameters()}.values())
        print(f"{n:<20}{nparam:>11,}{med:>14.3f}{med / base:>8.3f}{min(ratios):>11.3f}{collate_s[n]:>11.3f}")


if __name__ == "__main__":
    main()
