"""The GPU check: what one GPU does with structnmt's Transformer, against the hardware's limit, in a few minutes.

    python benchmarks/gpu_check.py --out DIR                    # on a GPU machine (about 3 minutes on an H100/H200)
    python benchmarks/gpu_check.py --device cpu --smoke --out DIR   # the same code on a CPU, in seconds

Measured, one after another, and printed as one table (also DIR/gpu_check.json and DIR/gpu_check.md) with the
device's name and the torch and CUDA versions:

* **Transformer-base training** (the papers' size: d 512, 8 heads, 6 + 6 layers, FFN 2048, a 32,000-piece
  shared vocabulary) in bf16 autocast (float32 on a CPU) at 4k, 8k and 16k target tokens per batch, on sentences of
  Multi30k's lengths (drawn from a fixed distribution, mean about 14 pieces): target tokens per second and MFU,
  the model's FLOPs per second (:mod:`structnmt.machine.flops`: matrix products over the real tokens, three forward
  passes a step) over the device's dense bf16 peak (:data:`PEAK_BF16`; none known: no MFU).
* **Decoding** at beam 5, 128 sentences a batch, a fixed 20 steps per sentence (a random model never ends on its
  own), in bfloat16 on a GPU (``decode.dtype=bfloat16``), for Transformer-base and transformer_tiny, each without
  and with CUDA graphs (``decode.cuda_graphs``, :mod:`structnmt.decode.cuda_graphs`; on a CPU its fixed-shape
  steps without the capture): sentences per second.
* **transformer_tiny training** (4 + 4 layers, d 128, the Multi30k recipe's 4,096-token batches): updates per second,
  without and with CUDA graphs (:mod:`structnmt.train.cuda_graphs`: batches padded to shape buckets, the step
  compiled with TorchDynamo's ``cudagraphs`` backend; on a CPU the same code with the ``eager`` backend).
* **The cross-paper rows** (with ``--data``, a prepared parsed dataset such as data-bin/multi30k_en_de_spacy): each
  row of ``--grid`` trained alone by the toolkit's own trainer (its config as the experiment runner resolves it,
  bf16 autocast on a GPU), updates per second and the ratio of its time per update to the baseline's.

Timing: ``torch.cuda.synchronize`` around ``--steps`` steps after ``--warmup`` untimed ones; each figure is the
median of ``--rounds`` rounds. The outputs are rewritten after every measurement, and ``--deadline SECONDS`` starts
none after that many seconds (marked "not measured"), so a loan's time limit keeps what was measured. On a CPU, Transformer-base at 16k tokens a batch needs more than 24 GiB (float32);
``--sizes 2048`` runs the full-size path there (2,048 tokens: 171 target tok/s on a 2-core AMD EPYC).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from structnmt.config import ModelConfig
from structnmt.data.vocab import BOS, EOS
from structnmt.decode.beam import beam_search
from structnmt.decode.cuda_graphs import GraphPool
from structnmt.decode.translate import model_for_dtype
from structnmt.machine.flops import mfu, transformer_training_flops
from structnmt.models import build_model
from structnmt.train.cuda_graphs import BUCKET, compiled_step

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: dense bf16 peak FLOP/s by device name (NVIDIA's data sheets, SXM parts, without sparsity)
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}

BASE = ModelConfig(d_model=512, ffn_dim=2048, heads=8, encoder_layers=6, decoder_layers=6, dropout=0.1,
                   share_all_embeddings=True, tie_output=True)
TINY = ModelConfig(d_model=128, ffn_dim=256, heads=4, encoder_layers=4, decoder_layers=4, dropout=0.3,
                   share_all_embeddings=True, tie_output=True)
SMOKE = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1, dropout=0.1,
                    share_all_embeddings=True, tie_output=True)


@dataclass
class Batch:
    src: torch.Tensor
    mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_lens: list[int]
    tgt_lens: list[int]

    @property
    def target_tokens(self) -> int:
        return sum(self.tgt_lens)


def make_batches(n: int, tokens: int, vocab: int, device: torch.device, seed: int = 1, bucket: int = 1) -> list[Batch]:
    """``n`` batches of about ``tokens`` target tokens each, as the trainer batches: sentence pairs of Multi30k-like
    lengths (source ~ N(14, 5), target ~ source + N(1, 2), 3 to 60 pieces) sorted by length and cut into batches,
    so a batch's sentences have similar lengths; random pieces, padded (0) to the batch's longest, rounded up to a
    multiple of ``bucket`` (the CUDA-graph buckets; sentences are not added: these batches are the rate's own)."""
    rng = np.random.default_rng(seed)
    pool, total = [], 0
    while total < (n + 2) * tokens:  # enough for n whole batches
        s = int(np.clip(rng.normal(14, 5), 3, 60))
        pool.append((s, int(np.clip(s + rng.normal(1, 2), 3, 60))))
        total += pool[-1][1]
    pool.sort()
    groups, group, size = [], [], 0
    for pair in pool:
        group.append(pair)
        size += pair[1]
        if size >= tokens:
            groups.append(group)
            group, size = [], 0
    out = [_batch(g, vocab, rng, device, bucket) for g in groups[:n]]
    return [out[i] for i in rng.permutation(len(out))]


def _batch(pairs: list[tuple[int, int]], vocab: int, rng, device: torch.device, bucket: int = 1) -> Batch:
    """One padded batch of random pieces with these (source, target) lengths; with ``bucket`` > 1 every dimension
    rounded up to a multiple of it as :func:`structnmt.train.cuda_graphs.bucketed` rounds them (extra sentences:
    a source of EOS, a target of BOS, outputs of padding)."""
    src_lens, tgt_lens = [s for s, _ in pairs], [t for _, t in pairs]
    rows = -(-len(pairs) // bucket) * bucket
    src = torch.zeros(rows, -(-max(src_lens) // bucket) * bucket, dtype=torch.long)
    tgt = torch.zeros(rows, -(-max(tgt_lens) // bucket) * bucket + 1, dtype=torch.long)
    src[len(pairs):, 0], tgt[len(pairs):, 0] = EOS, BOS
    for i, (s, t) in enumerate(pairs):
        src[i, :s] = torch.from_numpy(rng.integers(4, vocab, s))
        tgt[i, : t + 1] = torch.from_numpy(rng.integers(4, vocab, t + 1))
    return Batch(src.to(device), (src != 0).to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device),
                 src_lens, tgt_lens)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_rate(cfg: ModelConfig, vocab: int, tokens: int, device: torch.device, args, graphs: bool = False) -> dict:
    """Target tokens/s, updates/s and model FLOP/s of training ``cfg`` on ``tokens``-token batches; ``graphs``:
    with CUDA graphs (the batches padded to the trainer's shape buckets, the model compiled as train.cuda_graphs
    compiles it; the ``eager`` backend off a GPU)."""
    print(f"gpu_check: training d={cfg.d_model} {cfg.encoder_layers}+{cfg.decoder_layers} layers, {tokens:,} "
          f"tokens a batch{', CUDA graphs' if graphs else ''} ...", file=sys.stderr, flush=True)
    torch.manual_seed(1)
    model = build_model(cfg, vocab, vocab).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    batches = make_batches(args.warmup + args.steps, tokens, vocab, device, bucket=BUCKET if graphs else 1)
    run = compiled_step(model, "cudagraphs" if device.type == "cuda" else "eager") if graphs else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)

    def step(b: Batch) -> None:
        with autocast:
            logits = run(b.src, b.mask, b.tgt_in).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), b.tgt_out.reshape(-1),
                                   ignore_index=0, label_smoothing=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    if graphs:  # every shape compiled and recorded, untimed: what a long run pays once per shape. Two passes: on an
        for _ in range(2):  # H200, after one, two of three timed rounds were still slow (warming up, by their times;
            for b in batches:  # benchmarks/results/2026-11-29-h200-gpu-check)
                step(b)
    rounds = []
    for _ in range(args.rounds):
        for b in batches[: args.warmup]:
            step(b)
        sync(device)
        t0 = time.perf_counter()
        for b in batches[args.warmup:]:
            step(b)
        sync(device)
        rounds.append(time.perf_counter() - t0)
    seconds = statistics.median(rounds)
    timed = batches[args.warmup:]
    flops = sum(transformer_training_flops(cfg, b.src_lens, b.tgt_lens, vocab) for b in timed)
    return {"tokens_per_batch": tokens, "target_tok_s": sum(b.target_tokens for b in timed) / seconds,
            "updates_s": len(timed) / seconds, "model_flops_s": flops / seconds, "rounds_s": rounds}


def decode_rate(cfg: ModelConfig, vocab: int, device: torch.device, args, graphs: bool = False) -> dict:
    """Sentences/s of beam search (beam 5, 128 sentences a batch, 20 steps) with a random ``cfg`` model, in bfloat16
    on a GPU (``decode.dtype=bfloat16``: the model cast, as ``translate`` does), float32 on a CPU. ``graphs``: with
    ``decode.cuda_graphs`` with one graph pool for all batches, as ``translate`` keeps (a capture a bucket of
    sentences, source length and output length; captures in the timed rounds are timed); on a CPU the same
    fixed-shape steps without the capture."""
    print(f"gpu_check: decoding d={cfg.d_model}{' with CUDA graphs' if graphs else ''} ...", file=sys.stderr, flush=True)
    torch.manual_seed(1)
    model = build_model(cfg, vocab, vocab).to(device).eval()
    if device.type == "cuda":
        model = model_for_dtype(model, "bfloat16")
    sents = 128 if not args.smoke else 8
    srcs = [b.src[:sents] for b in make_batches(args.warmup + args.decode_batches, sents * 16, vocab, device)]
    on_gpu = device.type == "cuda"
    kw = dict(beam=5, max_len_a=0, max_len_b=20, cuda_graphs=graphs and on_gpu, fixed_shapes=graphs and not on_gpu,
              graph_pool=GraphPool() if graphs else None)  # the pool serves the graphs only (a CPU passes it unused)
    rounds = []
    for _ in range(args.rounds):
        for src in srcs[: args.warmup]:
            beam_search(model, src, src != 0, **kw)
        sync(device)
        t0 = time.perf_counter()
        for src in srcs[args.warmup:]:
            beam_search(model, src, src != 0, **kw)
        sync(device)
        rounds.append(time.perf_counter() - t0)
    out = {"sentences_s": sum(len(s) for s in srcs[args.warmup:]) / statistics.median(rounds), "rounds_s": rounds}
    if graphs:  # what decides decode.cuda_graphs' default besides speed: does it translate as the ordinary search
        out["same_best"], out["sentences"] = same_best(model, srcs[args.warmup:], kw)
    return out


def same_best(model, srcs: list[torch.Tensor], kw: dict) -> tuple[int, int]:
    """(sentences whose best hypothesis is the same, sentences) decoding ``srcs`` with ``kw`` (the graphs' or fixed
    shapes' settings) and with the ordinary search, same model, same beam and lengths."""
    plain = dict(kw, cuda_graphs=False, fixed_shapes=False, graph_pool=None)
    same = total = 0
    for src in srcs:
        for a, b in zip(beam_search(model, src, src != 0, **kw), beam_search(model, src, src != 0, **plain),
                        strict=True):
            same += a[0].tokens == b[0].tokens
            total += 1
    return same, total


def row_rates(args, device: torch.device):
    """Updates/s of every row of ``args.grid`` on ``args.data``, one row at a time, with the toolkit's trainer: yields
    ``(name, measure)``, ``measure()`` timing that row (so that the caller may stop between rows)."""
    from grid_rows import grid_rows, row_trainer, step_groups

    overrides = [f"train.device={device.type}", *(["data.max_tokens=300"] if args.smoke else [])]
    for name, cfg in grid_rows(args.grid, args.data, overrides, args.rows):
        def measure(name=name, cfg=cfg) -> dict:
            print(f"gpu_check: row {name} ...", file=sys.stderr, flush=True)
            with row_trainer(cfg) as trainer:
                groups = step_groups(trainer, args.warmup + args.steps)
                for group in groups[: args.warmup]:
                    trainer.train_step(group)
                sync(device)
                t0 = time.perf_counter()
                for group in groups[args.warmup:]:
                    trainer.train_step(group)
                sync(device)
                return {"row": name, "updates_s": args.steps / (time.perf_counter() - t0)}
        yield name, measure


def with_baseline(rows: list[dict], baseline: str) -> list[dict]:
    """``rows`` with each row's time per update over the baseline's (None until the baseline is measured)."""
    base = next((r["updates_s"] for r in rows if r["row"] == baseline), None)
    return [{**r, "time_x_baseline": base / r["updates_s"] if base else None} for r in rows]


def device_info(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "CPU")
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None) if device.type == "cuda" else None
    return {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "peak_bf16": peak,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


SKIPPED = "not measured (past --deadline)"


UNSTEADY = 1.5
"""A median round longer than this times the fastest: the figure (that median) is marked unsteady (one slow first
round, a cold start, leaves the median alone and is not marked)."""


def unsteady(r: dict | None) -> str:
    """`` (unsteady: rounds 4.31 / 1.94 / 0.17 s)`` when a measurement's median round took more than :data:`UNSTEADY`
    times its fastest (still compiling or warming up: the median then is no rate to decide on), else ``""``. With
    two rounds the median is their mean, so there a cold first round alone can mark it."""
    rounds = (r or {}).get("rounds_s") or []
    if len(rounds) < 2 or statistics.median(rounds) <= UNSTEADY * min(rounds):
        return ""
    return " (unsteady: rounds " + " / ".join(f"{x:.2f}" for x in rounds) + " s)"


def table(info: dict, results: dict) -> str:
    """The check's table; a measurement left out (None, or named in ``results["skipped"]``) says so."""
    lines = [f"GPU check on {info['device']} (torch {info['torch']}, CUDA {info['cuda']}), {info['date']}", "",
             "| measurement | rate | MFU |", "|---|---:|---:|"]
    for r in results["base_train"]:
        m = f"{mfu(r['model_flops_s'], info['peak_bf16']):.1%}" if info["peak_bf16"] else "-"
        lines.append(f"| {results['base_name']} training, {r['tokens_per_batch']:,} tokens/batch | "
                     f"{r['target_tok_s']:,.0f} target tok/s{unsteady(r)} | {m} |")
    decode, tiny, graphs = results["decode"], results["tiny_train"], results["tiny_graphs"]
    for name, plain, fixed in ((results["base_name"], decode, results["decode_graphs"]),
                               (results["tiny_name"], results["tiny_decode"], results["tiny_decode_graphs"])):
        what = f"| {name} decoding, beam 5, batch {results['decode_batch']}"
        lines.append(f"{what} | " + (f"{plain['sentences_s']:,.1f} sent/s{unsteady(plain)}" if plain else SKIPPED)
                     + " | - |")
        ratio = f" ({fixed['sentences_s'] / plain['sentences_s']:.2f}x)" if fixed and plain else ""
        same = (f"; best hypothesis as the ordinary search's for {fixed['same_best']:,} of {fixed['sentences']:,} "
                "sentences" if fixed and "same_best" in fixed else "")
        lines.append(f"{what}, {results['graphs_name']} | "
                     + (f"{fixed['sentences_s']:,.1f} sent/s{ratio}{unsteady(fixed)}{same}" if fixed else SKIPPED)
                     + " | - |")
    lines.append(f"| {results['tiny_name']} training | "
                 + (f"{tiny['updates_s']:,.2f} updates/s{unsteady(tiny)}" if tiny else SKIPPED) + " | - |")
    ratio = f" ({graphs['updates_s'] / tiny['updates_s']:.2f}x)" if graphs and tiny else ""
    lines.append(f"| {results['tiny_name']} training, CUDA graphs (train.cuda_graphs) | "
                 + (f"{graphs['updates_s']:,.2f} updates/s{ratio}{unsteady(graphs)}" if graphs else SKIPPED) + " | - |")
    if not results["rows"] and not results.get("rows_asked"):
        lines.append("| cross-paper rows, one at a time | not measured (give --data) | - |")
    for r in results["rows"]:
        ratio = f", {r['time_x_baseline']:.2f}x the baseline's time per update" if r["time_x_baseline"] else ""
        lines.append(f"| {r['row']} training (the toolkit's trainer) | {r['updates_s']:,.2f} updates/s{ratio} | - |")
    lines += [f"| {name} | {SKIPPED} | - |" for name in results.get("skipped", [])]
    return "\n".join(lines)


clock = time.monotonic
"""The check's clock for ``--deadline`` (the tests give it a fake one)."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for gpu_check.json and gpu_check.md")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--smoke", action="store_true", help="tiny models and batches: the code path in seconds")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per round (default 20; smoke 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per round (default 5; smoke 1)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds, median taken (default 3; smoke 1)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="target tokens per batch of the Transformer-base rows (default 4096 8192 16384; smoke "
                         "256 512 1024)")
    ap.add_argument("--data", type=Path, default=None,
                    help="a prepared parsed dataset: also time every row of --grid on it, one at a time")
    ap.add_argument("--grid", type=Path, default=Path(__file__).resolve().parents[1] / "configs" / "grids"
                    / "cross_paper_multi30k.yaml", help="the grid whose rows --data times (default: the cross-paper one)")
    ap.add_argument("--rows", nargs="+", default=None, help="only these rows of --grid (names as in the grid)")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="seconds after which no measurement starts (the rest is marked not measured; 0: none); "
                         "the outputs are rewritten after every measurement, so a run cut short keeps what it measured")
    args = ap.parse_args(argv)
    for name, full, smoke in (("steps", 20, 1), ("warmup", 5, 1), ("rounds", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    args.decode_batches = args.steps
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; give --device cpu (with --smoke for a quick run).", file=sys.stderr)
        return 2
    info = device_info(device)
    base, vocab = (SMOKE, 200) if args.smoke else (BASE, 32_000)
    sizes = args.sizes or ((256, 512, 1024) if args.smoke else (4096, 8192, 16384))
    tiny, tiny_vocab, tiny_tokens = (SMOKE, 200, 256) if args.smoke else (TINY, 10_000, 4096)
    results = {"base_name": "smoke model" if args.smoke else "Transformer-base",
               "tiny_name": "smoke model (in transformer_tiny's place)" if args.smoke else "transformer_tiny",
               "decode_batch": 8 if args.smoke else 128, "base_train": [], "decode": None, "tiny_train": None,
               "tiny_graphs": None, "rows": [], "rows_asked": bool(args.data), "skipped": [], "decode_graphs": None,
               "tiny_decode": None, "tiny_decode_graphs": None,
               "graphs_name": ("CUDA graphs (decode.cuda_graphs)" if device.type == "cuda"
                               else "fixed shapes (decode.cuda_graphs's steps, no capture off a GPU)")}
    plan = [(f"{results['base_name']} training, {n:,} tokens/batch", "base_train",
             lambda n=n: train_rate(base, vocab, n, device, args)) for n in sizes]
    plan += [(f"{results['base_name']} decoding", "decode", lambda: decode_rate(base, vocab, device, args)),
             (f"{results['base_name']} decoding, CUDA graphs", "decode_graphs",
              lambda: decode_rate(base, vocab, device, args, graphs=True)),
             (f"{results['tiny_name']} decoding", "tiny_decode", lambda: decode_rate(tiny, tiny_vocab, device, args)),
             (f"{results['tiny_name']} decoding, CUDA graphs", "tiny_decode_graphs",
              lambda: decode_rate(tiny, tiny_vocab, device, args, graphs=True)),
             (f"{results['tiny_name']} training", "tiny_train",
              lambda: train_rate(tiny, tiny_vocab, tiny_tokens, device, args)),
             (f"{results['tiny_name']} training, CUDA graphs", "tiny_graphs",
              lambda: train_rate(tiny, tiny_vocab, tiny_tokens, device, args, graphs=True))]
    if args.data:
        plan += [(f"{name} training (the toolkit's trainer)", "rows", measure)
                 for name, measure in row_rates(args, device)]
    baseline = None
    if args.data:
        from structnmt.experiment.grid import load_grid

        baseline = load_grid(args.grid)[0].baseline
    start = clock()
    for label, key, measure in plan:
        if args.deadline and clock() - start >= args.deadline:
            if isinstance(results[key], list):  # the others stay None, and their own lines say so
                results["skipped"].append(label)
        elif isinstance(results[key], list):
            results[key].append(measure())
        else:
            results[key] = measure()
        if baseline:
            results["rows"] = with_baseline(results["rows"], baseline)
        write_outputs(args.out, info, results)  # after every measurement: a run cut short keeps what it measured
    print(table(info, results))
    return 0


def write_outputs(out: Path, info: dict, results: dict) -> None:
    """DIR/gpu_check.json and DIR/gpu_check.md as they stand."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps({"info": info, **results}, indent=1) + "\n")
    (out / "gpu_check.md").write_text(table(info, results) + "\n")

if __name__ == "__main__":
    sys.exit(main())
