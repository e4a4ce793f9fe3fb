#!/usr/bin/env python
"""Speed of the structnmt baseline Transformer against a plain ``torch.nn.Transformer``.

Both models have the same size (d_model, heads, layers, FFN width, dropout, norm
placement, shared + tied embeddings) and run on the same collated batches in the same
process, so the printed ratios (structnmt / reference) are meaningful on any machine.

* Training: target tokens/s of forward + label-smoothed loss + backward + Adam step over
  a fixed list of training batches; every batch is stepped by both models back to back,
  alternating AB, BA, AB, ... so that load drift on the machine hits both alike; a
  warm-up pass is excluded; the median of the rounds is reported.
* Decoding: sentences/s of greedy search with structnmt's IncrementalCache, greedy
  search without cache (every step re-runs the whole decoder over all tokens so far),
  the nn.Transformer reference greedy (it has no incremental decoding: a full decoder
  pass per step) and structnmt beam 5 with the cache. All of them go through the same
  ``structnmt.decode.beam`` search code via the decoding protocol; each batch is decoded
  by all variants back to back in a rotating order. Decoding uses the
  models at random initialisation (before training), so every hypothesis runs to the
  maximum length ``1.2 * src_len + 10``: identical work for every variant.

Usage (CPU, one thread, the synthetic task built on the fly)::

    OMP_NUM_THREADS=1 python benchmarks/bench_speed.py
    OMP_NUM_THREADS=1 python benchmarks/bench_speed.py --data data-bin/multi30k_en_de
    python benchmarks/bench_speed.py --device cuda --threads 4
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structnmt.config import ModelConfig
from structnmt.data.dataset import PreparedDataset, collate, make_batches, pad_sources
from structnmt.data.vocab import EOS, PAD
from structnmt.decode.beam import beam_search, greedy_search
from structnmt.machine.device import use_threads
from structnmt.models.transformer import TransformerModel, sinusoidal_table
from structnmt.train.loss import label_smoothed_nll

# --------------------------------------------------------------------------- reference model


@dataclass
class RefEncoderOutput:
    memory: Tensor  # (B, S, D)
    pad_mask: Tensor  # (B, S) bool, True = padding (nn.Transformer polarity)

    def reorder(self, index: Tensor) -> RefEncoderOutput:
        return RefEncoderOutput(self.memory.index_select(0, index), self.pad_mask.index_select(0, index))


class ReferenceTransformer(nn.Module):
    """``torch.nn.Transformer`` with one shared, scaled embedding, sinusoidal positions
    and the output projection tied to the embedding; implements the decoding protocol
    without a cache (``decode_step`` re-runs the decoder over the whole prefix)."""

    def __init__(self, vocab: int, d_model: int, heads: int, enc_layers: int, dec_layers: int, ffn: int,
                 dropout: float, norm_first: bool, max_positions: int = 1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        self.register_buffer("positions", sinusoidal_table(max_positions, d_model), persistent=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "enable_nested_tensor is True, but ... norm_first"
            self.transformer = nn.Transformer(
                d_model, heads, enc_layers, dec_layers, ffn, dropout, batch_first=True, norm_first=norm_first)
        self.dropout = dropout
        self.scale = math.sqrt(d_model)

    @staticmethod
    def causal_mask(T: int, device) -> Tensor:
        """(T, T) bool, True = may NOT attend (nn.Transformer polarity); bool like the padding masks."""
        return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)

    def _embed(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) * self.scale + self.positions[: tokens.shape[1]]
        return F.dropout(x, self.dropout, self.training)

    def _logits(self, h: Tensor) -> Tensor:
        return F.linear(h, self.embed.weight)  # tied, no bias

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """src (B, S), src_mask (B, S) True = real token, tgt_in (B, T) -> logits (B, T, V)."""
        T = tgt_in.shape[1]
        causal = self.causal_mask(T, tgt_in.device)
        h = self.transformer(
            self._embed(src), self._embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=~src_mask,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=~src_mask,
            tgt_is_causal=True,
        )
        return self._logits(h)

    # decoding protocol (no cache: nn.Transformer has no incremental decoding)
    def encode(self, src: Tensor, src_mask: Tensor, structures=None) -> RefEncoderOutput:
        pad = ~src_mask
        memory = self.transformer.encoder(self._embed(src), src_key_padding_mask=pad)
        return RefEncoderOutput(memory, pad)

    @torch.no_grad()
    def decode_step(self, prev_tokens: Tensor, enc: RefEncoderOutput, cache, log_probs: bool = True) -> Tensor:
        T = prev_tokens.shape[1]
        causal = self.causal_mask(T, prev_tokens.device)
        h = self.transformer.decoder(self._embed(prev_tokens), enc.memory, tgt_mask=causal,
                                     memory_key_padding_mask=enc.pad_mask, tgt_is_causal=True)
        # all positions projected, then the last taken: the same work as NoCacheAdapter, which
        # can only get logits for every position from TransformerModel.decode
        logits = self._logits(h)[:, -1].float()
        return torch.log_softmax(logits, dim=-1) if log_probs else logits


class NoCacheAdapter:
    """structnmt model behind the decoding protocol, re-running the full decoder each step."""

    def __init__(self, model: TransformerModel):
        self.model = model

    def encode(self, src, src_mask, structures=None):
        return self.model.encode(src, src_mask, structures)

    @torch.no_grad()
    def decode_step(self, prev_tokens: Tensor, enc, cache, log_probs: bool = True) -> Tensor:
        logits = self.model.decode(prev_tokens, enc).logits[:, -1].float()  # cache deliberately unused
        return torch.log_softmax(logits, dim=-1) if log_probs else logits


# --------------------------------------------------------------------------- data


def synthetic_dataset(workdir: Path, n_train: int, vocab_size: int) -> Path:
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus

    raw = workdir / f"synth-{n_train}"
    if not (raw / "synth.json").exists():
        write_corpus(SynthConfig(n_train=n_train, n_valid=200, n_test=500), raw)
    out = workdir / f"bin-{n_train}-{vocab_size}"
    cfg = PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(raw / "train"),
                        validpref=str(raw / "valid"), testprefs=[str(raw / "test")], vocab_size=vocab_size)
    prepare(cfg, out, progress=False, log=lambda *a: None)
    return out


# --------------------------------------------------------------------------- timing helpers


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, kind: str, opt, b, device, eps: float) -> float:
    """One update on batch ``b`` (forward, loss, backward, Adam step); returns seconds."""
    model.train()
    sync(device)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    if kind == "structnmt":
        logits = model(b.src, b.src_mask, b.tgt_in, b.structures).logits
    else:
        logits = model(b.src, b.src_mask, b.tgt_in)
    loss, _ = label_smoothed_nll(logits, b.tgt_out, eps)
    (loss / b.ntok).backward()
    opt.step()
    sync(device)
    return time.perf_counter() - t0


def decode_batch(model, src: Tensor, mask: Tensor, beam: int, device) -> tuple[float, list[list[int]]]:
    """Greedy (beam == 1) or beam search on one padded batch; returns (seconds, token lists)."""
    sync(device)
    t0 = time.perf_counter()
    hyps = greedy_search(model, src, mask) if beam == 1 else beam_search(model, src, mask, beam=beam)
    sync(device)
    return time.perf_counter() - t0, [h[0].tokens if h else [] for h in hyps]


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared tensors counted once


# --------------------------------------------------------------------------- main


@dataclass
class _BenchData:
    """The data of one run: fixed training batches and the sorted test sources to decode."""

    data_dir: Path
    vocab: int  # joint vocabulary size
    batches: list  # collated training batches on the device, ``ntok`` set
    train_tokens: int  # target tokens per pass over ``batches``
    test_name: str
    n_dec: int  # sentences decoded
    sources: list[list[int]]  # token ids + EOS, sorted by length
    data_s: float  # seconds to get the data ready


def _build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="", help="prepared dataset dir (default: build the synthetic task)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "structnmt-bench-speed"),
                    help="where the synthetic corpus and its prepared dataset are cached")
    ap.add_argument("--n-train", type=int, default=4000, help="synthetic training pairs")
    ap.add_argument("--vocab-size", type=int, default=2000, help="synthetic joint vocabulary size")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    ap.add_argument("--rounds", type=int, default=5, help="timed training rounds (one pass per model, interleaved per batch)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up passes per model")
    ap.add_argument("--max-tokens", type=int, default=4096, help="batch size in padded tokens (make_batches)")
    ap.add_argument("--train-batches", type=int, default=8, help="fixed training batches per pass (0 = all)")
    ap.add_argument("--pre-norm", action="store_true", help="pre-norm for both models (default: post-norm)")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--ffn-dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4, help="encoder and decoder layers each")
    ap.add_argument("--dropout", type=float, default=0.1,
                    help="dropout everywhere (nn.Transformer also drops attention weights and FFN activations; "
                         "structnmt gets attention_dropout = activation_dropout = this to do the same work)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--decode-sentences", type=int, default=200, help="test sentences decoded")
    ap.add_argument("--decode-batch", type=int, default=50, help="sentences per decoding batch")
    ap.add_argument("--decode-rounds", type=int, default=3, help="timed decoding rounds (variants interleaved per batch)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="after the benchmark, profile a few training steps of each model (torch.profiler)")
    ap.add_argument("--seed", type=int, default=1)
    return ap


def _load_data(ap: argparse.ArgumentParser, args: argparse.Namespace, device: torch.device) -> _BenchData:
    """Build or open the dataset, collate the fixed training batches and pick the test sources."""
    t0 = time.perf_counter()
    data_dir = Path(args.data) if args.data else synthetic_dataset(Path(args.workdir), args.n_train, args.vocab_size)
    ds = PreparedDataset(data_dir)
    if len(ds.src_vocab) != len(ds.tgt_vocab):
        ap.error(f"{data_dir}: needs a joint vocabulary (shared embeddings)")
    V = len(ds.tgt_vocab)
    train = ds.split("train")
    ids_batches, _ = make_batches(train.src_lens, train.tgt_lens, max_tokens=args.max_tokens, max_len=256,
                                  seed=args.seed)
    rng = np.random.default_rng(args.seed)
    pick = rng.permutation(len(ids_batches))
    if args.train_batches > 0:
        pick = pick[: args.train_batches]
    batches = []
    for i in pick:
        b = collate(train, ids_batches[i]).to(device)
        b.ntok = b.n_tgt_tokens
        batches.append(b)
    train_tokens = sum(b.ntok for b in batches)
    test_name = "test" if "test" in ds.splits else "valid"
    test = ds.split(test_name)
    n_dec = min(args.decode_sentences, len(test))
    sources = [test.get("src", i).tolist() + [EOS] for i in range(n_dec)]
    sources.sort(key=len)  # batch by length, like structnmt translate
    data_s = time.perf_counter() - t0
    return _BenchData(data_dir, V, batches, train_tokens, test_name, n_dec, sources, data_s)


def _build_models(args: argparse.Namespace, V: int, device: torch.device
                  ) -> tuple[TransformerModel, ReferenceTransformer]:
    """structnmt's TransformerModel and the nn.Transformer reference of the same size, same seed."""
    cfg = ModelConfig(d_model=args.d_model, ffn_dim=args.ffn_dim, heads=args.heads, encoder_layers=args.layers,
                      decoder_layers=args.layers, dropout=args.dropout, attention_dropout=args.dropout,
                      activation_dropout=args.dropout, activation="relu", pre_norm=args.pre_norm,
                      share_all_embeddings=True)
    torch.manual_seed(args.seed)
    ours = TransformerModel(cfg, V, V).to(device)
    torch.manual_seed(args.seed)
    ref = ReferenceTransformer(V, args.d_model, args.heads, args.layers, args.layers, args.ffn_dim, args.dropout,
                               norm_first=args.pre_norm).to(device)
    return ours, ref


def _print_header(args: argparse.Namespace, argv: list[str] | None, device: torch.device, data: _BenchData,
                  p_ours: int, p_ref: int) -> None:
    """The machine, command, data, model and parameter counts of the run."""
    print(f"# structnmt speed benchmark  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} | os.cpu_count()={os.cpu_count()} | "
          f"torch {torch.__version__} | torch threads={torch.get_num_threads()} | "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | device={device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    print(f"command: python {' '.join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:]))}")
    print(f"data: {data.data_dir} (vocab {data.vocab}); {len(data.batches)} training batches of <= {args.max_tokens} "
          f"tokens, {data.train_tokens} target tokens per pass; {data.n_dec} '{data.test_name}' sentences decoded "
          f"(data ready in {data.data_s:.1f}s)")
    print(f"model: d={args.d_model} ffn={args.ffn_dim} heads={args.heads} layers={args.layers}+{args.layers} "
          f"dropout={args.dropout} {'pre' if args.pre_norm else 'post'}-norm, shared+tied embeddings")
    final_norms = 0 if args.pre_norm else 2 * 2 * args.d_model
    print(f"parameters: structnmt {p_ours:,} | nn.Transformer {p_ref:,} | difference {p_ref - p_ours:+,}"
          + (f" (= nn.Transformer's final encoder and decoder LayerNorms, {final_norms}, which post-norm "
             "structnmt does not have)" if final_norms and p_ref - p_ours == final_norms else ""))


def _decode_rounds(variants: dict[str, tuple], dec_batches: list[tuple[Tensor, Tensor]], rounds: int,
                   device: torch.device) -> tuple[dict[str, list[float]], dict[str, list]]:
    """Warm up, then time ``rounds`` passes of every variant: (seconds per round, last round's outputs) by name."""
    names = list(variants)
    for name in names:  # warm-up on the first batch
        m, beam = variants[name]
        decode_batch(m, *dec_batches[0], beam, device)
    # every batch is decoded by all variants back to back, in a rotating order, so that
    # load drift on the machine spreads over the variants alike
    times: dict[str, list[float]] = {k: [] for k in names}
    outputs: dict[str, list] = {}
    k = 0
    for _ in range(rounds):
        acc = {name: 0.0 for name in names}
        outs: dict[str, list] = {name: [] for name in names}
        for src, mask in dec_batches:
            order = names[k % len(names):] + names[: k % len(names)]
            k += 1
            for name in order:
                m, beam = variants[name]
                secs, out = decode_batch(m, src, mask, beam, device)
                acc[name] += secs
                outs[name].extend(out)
        for name in names:
            times[name].append(acc[name])
        outputs = outs
    return times, outputs


def _bench_decoding(args: argparse.Namespace, ours: TransformerModel, ref: ReferenceTransformer, data: _BenchData,
                    device: torch.device, results: dict[str, float]) -> None:
    """Decoding sentences/s of the four variants at random initialisation, into ``results``; prints the rounds."""
    ours.eval()
    ref.eval()
    variants = {
        "ours_greedy_cached": (ours, 1),
        "ours_greedy_nocache": (NoCacheAdapter(ours), 1),
        "ref_greedy_nocache": (ref, 1),
        f"ours_beam{args.beam}_cached": (ours, args.beam),
    }
    names = list(variants)
    n_dec = data.n_dec
    dec_batches = []
    for start in range(0, n_dec, args.decode_batch):
        src, mask = pad_sources(data.sources[start : start + args.decode_batch])
        dec_batches.append((src.to(device), mask.to(device)))
    times, outputs = _decode_rounds(variants, dec_batches, args.decode_rounds, device)
    a, b = outputs["ours_greedy_cached"], outputs["ours_greedy_nocache"]
    mism = sum(x != y for x, y in zip(a, b))
    assert mism == 0, f"greedy with and without the cache differ on {mism}/{len(a)} sentences"
    for name in names:
        results[name] = n_dec / statistics.median(times[name])
    mean_len = {k: sum(map(len, v)) / len(v) for k, v in outputs.items()}
    print("decoding (random-init models, outputs run to max length 1.2*src+10): mean hypothesis length "
          + ", ".join(f"{k} {v:.1f}" for k, v in mean_len.items()))
    print("greedy with cache == greedy without cache: identical outputs on all "
          f"{n_dec} sentences")
    for name in names:
        print(f"  {name:24s} " + " ".join(f"{t:7.2f}s" for t in times[name])
              + f"   median {results[name]:8.1f} sent/s")


def _bench_training(args: argparse.Namespace, ours: TransformerModel, ref: ReferenceTransformer, data: _BenchData,
                    device: torch.device, results: dict[str, float]) -> None:
    """Training target tokens/s of both models, interleaved per batch, into ``results``; prints the rounds."""
    batches = data.batches
    models = {"structnmt": ours, "reference": ref}
    opts = {k: torch.optim.Adam(m.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
            for k, m in models.items()}
    for _ in range(args.warmup):
        for b in batches:
            for k, m in models.items():
                train_step(m, k, opts[k], b, device, args.label_smoothing)
    # one round = one pass over the batches for each model; each batch is stepped by
    # both models back to back (AB, BA, AB, ... alternating), so drift hits both alike
    rates: dict[str, list[float]] = {k: [] for k in models}
    i = 0
    for r in range(args.rounds):
        acc = {k: 0.0 for k in models}
        for b in batches:
            order = ["structnmt", "reference"] if i % 2 == 0 else ["reference", "structnmt"]
            i += 1
            for k in order:
                acc[k] += train_step(models[k], k, opts[k], b, device, args.label_smoothing)
        for k in models:
            rates[k].append(data.train_tokens / acc[k])
        print(f"  round {r + 1}: structnmt {rates['structnmt'][-1]:8.0f} tok/s | "
              f"reference {rates['reference'][-1]:8.0f} tok/s | "
              f"ratio {rates['structnmt'][-1] / rates['reference'][-1]:.3f}")
    results["ours_train"] = statistics.median(rates["structnmt"])
    results["ref_train"] = statistics.median(rates["reference"])
    paired = statistics.median(x / y for x, y in zip(rates["structnmt"], rates["reference"]))
    print(f"training: median structnmt/reference = {results['ours_train'] / results['ref_train']:.3f} "
          f"(median of per-round ratios {paired:.3f})")


def _print_table(results: dict[str, float], beam: int, p_ours: int, p_ref: int) -> None:
    """The Markdown table of the results (``-`` where a measurement was skipped) and the cache speed-up."""
    def f(key: str, fmt: str = "{:,.0f}") -> str:
        return fmt.format(results[key]) if key in results else "-"

    def ratio(a: str, b: str) -> str:
        return f"{results[a] / results[b]:.2f}x" if a in results and b in results else "-"

    bk = f"ours_beam{beam}_cached"
    print()
    print(f"| model | params | train tgt tok/s | greedy cached sent/s | greedy uncached sent/s | "
          f"beam{beam} cached sent/s |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| structnmt TransformerModel | {p_ours:,} | {f('ours_train')} | {f('ours_greedy_cached', '{:.1f}')} | "
          f"{f('ours_greedy_nocache', '{:.1f}')} | {f(bk, '{:.1f}')} |")
    print(f"| torch.nn.Transformer reference | {p_ref:,} | {f('ref_train')} | n/a (no cache) | "
          f"{f('ref_greedy_nocache', '{:.1f}')} | n/a |")
    print(f"| ratio structnmt / reference | | {ratio('ours_train', 'ref_train')} | "
          f"{ratio('ours_greedy_cached', 'ref_greedy_nocache')} (vs ref uncached) | "
          f"{ratio('ours_greedy_nocache', 'ref_greedy_nocache')} | |")
    if "ours_greedy_cached" in results:
        print(f"\ncache speed-up (structnmt greedy cached / uncached): "
              f"{ratio('ours_greedy_cached', 'ours_greedy_nocache')}")


def main(argv: list[str] | None = None) -> int:
    ap = _build_parser()
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    use_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*nested tensors is in prototype.*")
    torch.manual_seed(args.seed)

    # ---- data
    data = _load_data(ap, args, device)

    # ---- models of the same size
    ours, ref = _build_models(args, data.vocab, device)
    p_ours, p_ref = n_params(ours), n_params(ref)
    _print_header(args, argv, device, data, p_ours, p_ref)

    results: dict[str, float] = {}

    # ---- decoding (random initialisation, before training)
    if not args.skip_decode:
        _bench_decoding(args, ours, ref, data, device, results)

    # ---- training
    if not args.skip_train:
        _bench_training(args, ours, ref, data, device, results)

    # ---- table
    _print_table(results, args.beam, p_ours, p_ref)

    if args.profile:
        profile(ours, ref, data.batches, device, args)
    return 0


def profile(ours, ref, batches, device, args) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sub = batches[:4]
    for kind, model in (("structnmt", ours), ("reference", ref)):
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        for b in sub:
            train_step(model, kind, opt, b, device, args.label_smoothing)
        with tprofile(activities=acts) as prof:
            for b in sub:
                train_step(model, kind, opt, b, device, args.label_smoothing)
        print(f"\n## profile: {kind}, {len(sub)} training steps")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    raise SystemExit(main())
