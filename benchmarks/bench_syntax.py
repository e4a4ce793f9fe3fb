"""Syntax-layer speed: spaCy parsing throughput and the cost of structure tensors per batch.

Two measurements:

1. parse the Multi30k training sentences with the spaCy backend, as ``prepare`` does
   (spaCy pipeline + our tree building and dependency-to-constituency conversion);
   target: 29,000 sentences in at most 60 s on a 2-core machine;
2. build the structure tensors of a training batch (every feature of the syntax layer):
   computed in the batch (what happens past ``data.structure_cache_mb``), and padded from
   the values the trainer computed for every sentence before the first update (the default)
   and compare with one baseline training step (forward, backward, Adam) of the
   Multi30k ``transformer_tiny`` model on the same batch; target: under 5 %.

    python benchmarks/bench_syntax.py --data ../shared/data/multi30k --processes 2
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from structnmt.machine.device import use_threads


def bench_parse(data: Path, n: int, processes: int, batch_size: int) -> dict:
    from structnmt.fileio.corpus import read_lines
    from structnmt.syntax.parsers import ParserConfig, build_parser

    lines = [x.strip() for x in read_lines(data / "train.en.gz")][:n]
    t0 = time.perf_counter()
    backend = build_parser(ParserConfig(name="spacy", n_process=processes, batch_size=batch_size))
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    words = sum(len(p.words) for p in backend.parse(iter(lines)))
    secs = time.perf_counter() - t0
    return {"sentences": len(lines), "words": words, "processes": processes, "load_s": load, "parse_s": secs,
            "sent_per_s": len(lines) / secs}


def _prepare_subset(data: Path, n: int, work: Path):
    """The first ``n`` Multi30k training pairs prepared with the spaCy parser in ``work``."""
    from structnmt.data.dataset import PreparedDataset
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.syntax.parsers import ParserConfig

    src = (work / "train.en")
    tgt = (work / "train.de")
    from structnmt.fileio.corpus import read_lines

    src.write_text("\n".join(list(read_lines(data / "train.en.gz"))[:n]) + "\n")
    tgt.write_text("\n".join(list(read_lines(data / "train.de.gz"))[:n]) + "\n")
    prepare(PrepareConfig(source_lang="en", target_lang="de", trainpref=str(work / "train"), vocab_size=10000,
                          parser=ParserConfig(name="spacy")), work / "bin", progress=False, log=lambda *_: None)
    return PreparedDataset(work / "bin")


def _structure_specs() -> dict:
    """Every feature of the syntax layer, by short name."""
    from structnmt.syntax.batching import StructureSpec

    return {
        "ngram2": StructureSpec("ngram_partition", {"n": 2}),
        "ngram3": StructureSpec("ngram_partition", {"n": 3}),
        "syn": StructureSpec("syntax_partition", {"K": 3}),
        "dep": StructureSpec("dep_mask"),
        "lpea": StructureSpec("lpea_positions", {"k": 3}),
        "hyper": StructureSpec("ngram_hypernodes", {"k": 3}),
        "dephyper": StructureSpec("dep_hypernodes"),
        "wb": StructureSpec("word_boundaries"),
    }


def _time_plain_steps(ds, split, batches: list) -> tuple[list[float], list[float]]:
    """Seconds of a plain collate and of one baseline training step (transformer_tiny), per batch."""
    from structnmt.config import ModelConfig
    from structnmt.data.dataset import collate
    from structnmt.models import build_model
    from structnmt.train.loss import label_smoothed_nll

    model = build_model(ModelConfig(d_model=128, ffn_dim=256, heads=4, encoder_layers=4, decoder_layers=4,
                                    dropout=0.3, pre_norm=False, share_all_embeddings=True),
                        len(ds.src_vocab), len(ds.tgt_vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    plain, steps = [], []
    for ids in batches:
        t0 = time.perf_counter()
        b = collate(split, ids)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = model(b.src, b.src_mask, b.tgt_in)
        loss, _ = label_smoothed_nll(out.logits, b.tgt_out, 0.1)
        (loss / b.n_tgt_tokens).backward()
        opt.step()
        opt.zero_grad()
        steps.append(time.perf_counter() - t0)
    return plain, steps


def _structure_sets(specs: dict) -> dict[str, list[str]]:
    """The sets of features timed: all, each alone, and what each paper's mechanism asks for."""
    sets = {"all 8 features": list(specs)}
    sets.update({f"feature {k}": [k] for k in specs})
    sets.update({
        "MG-SA (2/3/4-grams + syntax K=3)": ["ngram2", "ngram3", "syn"],
        "RHE (DEA + LPEA)": ["dep", "lpea"],
        "PhraseTransformer (n-gram + dependency hypernodes)": ["hyper", "dephyper"],
        "SA-NMT (word boundaries)": ["wb"],
    })
    return sets


def _time_structure_set(ds, batches: list, want: dict, labels: dict[str, int], plain: list[float]) -> dict:
    """Precompute, computed-in-batch (cold) and padded-from-kept (warm) times of one set of features."""
    from structnmt.data.dataset import collate

    med = statistics.median
    t0 = time.perf_counter()
    pre = ds.split("train")
    pre.precompute_structures(want)  # what the trainer does before the first update
    pre_s = time.perf_counter() - t0
    fresh = ds.split("train")
    cold, warm = [], []
    for i, ids in enumerate(batches):
        t0 = time.perf_counter()
        collate(fresh, ids, want, labels)
        cold.append(time.perf_counter() - t0 - plain[i])
        t0 = time.perf_counter()
        collate(fresh, ids, want, labels)
        warm.append(time.perf_counter() - t0 - plain[i])
    return {"cold_ms": 1000 * med(cold), "warm_ms": 1000 * med(warm), "pre_s": pre_s,
            "cache_mb": pre.structures_kept_mb}


def bench_structures(data: Path, n: int, max_tokens: int, rounds: int) -> dict:
    """Structure-tensor cost on the first ``rounds`` batches against a plain collate and a baseline step."""
    from structnmt.data.dataset import make_batches

    with tempfile.TemporaryDirectory(prefix="bench_syntax_") as tmp:  # the prepared subset goes with it
        ds = _prepare_subset(data, n, Path(tmp))
        split = ds.split("train")
        labels = {x: i for i, x in enumerate(ds.manifest["syntax"]["labels"])}
        specs = _structure_specs()
        batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=max_tokens, seed=1)
        batches = batches[: rounds]
        plain, steps = _time_plain_steps(ds, split, batches)
        # what each paper's mechanism asks for (the collator builds only those); every set gets a
        # fresh split, so its first pass over a batch computes the features (the first epoch) and
        # the second only pads the values the split kept (every later epoch)
        sets = _structure_sets(specs)
        rows = {}
        for name, keys in sets.items():
            want = {k: specs[k] for k in keys}
            rows[name] = _time_structure_set(ds, batches, want, labels, plain)
    med = statistics.median
    return {"batches": len(batches), "collate_plain_ms": 1000 * med(plain), "step_ms": 1000 * med(steps),
            "rows": rows, "sentences_seen": int(sum(len(x) for x in batches)), "sentences": len(split)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--sentences", type=int, default=29000)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--struct-sentences", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--skip-parse", action="store_true")
    args = ap.parse_args()
    if args.threads:
        use_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    if not args.skip_parse:
        r = bench_parse(Path(args.data), args.sentences, args.processes, args.batch_size)
        print(f"| spaCy backend | {r['sentences']:,} sentences, {r['words']:,} words | {r['processes']} process(es) | "
              f"load {r['load_s']:.1f} s | parse {r['parse_s']:.1f} s | {r['sent_per_s']:.0f} sent/s |")
    s = bench_structures(Path(args.data), args.struct_sentences, args.max_tokens, args.rounds)
    print(f"structures: {s['batches']} batches of {args.max_tokens} tokens ({s['sentences_seen']} sentences); "
          f"plain collate {s['collate_plain_ms']:.1f} ms; baseline step {s['step_ms']:.0f} ms (medians)")
    print(f"| structures | computed in the batch | % of a step | kept (precomputed) | % of a step | "
          f"precompute {s['sentences']:,} sentences | kept |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, r in s["rows"].items():
        print(f"| {k} | {_cost(r['cold_ms'], s['step_ms'])} | {_cost(r['warm_ms'], s['step_ms'])} | "
              f"{r['pre_s']:.2f} s | {r['cache_mb']:.1f} MB |")


def _cost(ms: float, step_ms: float) -> str:
    """Two table cells: an extra cost in ms and as % of a step. The cost is a difference of timings
    (collate with the structures minus the plain collate), so one below the timing noise can come out
    negative: that reads "≈ 0", not as a saving."""
    if ms <= 0:
        return "≈ 0 (below the timing noise) | ≈ 0 %"
    return f"{ms:.1f} ms | {100 * ms / step_ms:.2f} %"


if __name__ == "__main__":
    main()
