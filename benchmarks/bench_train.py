#!/usr/bin/env python
"""Training-step levers of the baseline Transformer, each against the trainer's step in one run.

Every variant steps its own copy of the same initial model over the same fixed list of
training batches (collated once); the variants take turns batch by batch in a rotating
order, so load drift on a shared machine hits them alike. A step is what
``Trainer.train_step`` does: forward, label-smoothed loss, backward, gradient norm
(clipping), Adam, zero_grad. Reported: median target tokens/s over ``--rounds`` passes
(after one untimed pass) and the ratio to ``baseline``; for the variants that change the
arithmetic, the loss after the timed passes (same batches, same order) next to the
baseline's, as a first sign of a numerical cost (the BLEU cost needs a training run).

Variants:
  baseline       the trainer's step (torch.optim.Adam defaults, clip_grad_norm_ with max_norm=inf)
  fused-adam     torch.optim.Adam(fused=True)
  bf16           torch.autocast("cpu", bfloat16) around the forward (AMX/AVX512-BF16 CPUs)
  bf16+fused     both
  no-gnorm       no gradient-norm computation (clip_norm = 0 and the norm not logged)
  compile        torch.compile(model, dynamic=True) (the CPU inductor backend; compiled in the untimed pass)
  compile+fused  both
  torch-dropout  dropout masks from F.dropout (bernoulli_) instead of structnmt.nn.dropout's
                 uniform-threshold masks
  autograd-loss  the label-smoothed loss left to autograd (log_softmax, gather, mean) instead
                 of structnmt.train.loss's written-out gradient
  onednn-linear  the linear layers on oneDNN (structnmt.machine.cpu_gemm.to_onednn; the trainer's choice on AMD
                 CPUs), the others' on PyTorch's default (MKL)

Two process settings are compared in child processes that run the baseline alternately,
``--rounds`` times each: ``--thp-compare`` (transparent huge pages for torch's CPU
allocator, THP_MEM_ALLOC_ENABLE=0 and =1, read at the first allocation) and
``--malloc-compare`` (structnmt's allocator setting, ``structnmt.machine.allocator``:
STRUCTNMT_MALLOC=system and =retain). Like the command line, the benchmark applies the
allocator setting of STRUCTNMT_MALLOC (default: retain) before it allocates anything.
``--omp-wait-compare`` compares OpenMP's wait policy the same way: OMP_WAIT_POLICY unset
(libgomp's default: a thread spins before it sleeps) and PASSIVE (threads sleep at once), which
the command line sets unless the user has (``structnmt.cli``). ``--busy N`` keeps N single-thread
busy-loop processes running during a comparison: a machine shared with other jobs.

    OMP_NUM_THREADS=1 python benchmarks/bench_train.py --data data-bin/multi30k_en_de --threads 1
    python benchmarks/bench_train.py --data data-bin/multi30k_en_de --thp-compare
    OMP_NUM_THREADS=1 python benchmarks/bench_train.py --data data-bin/multi30k_en_de --malloc-compare
    python benchmarks/bench_train.py --data data-bin/multi30k_en_de --threads 2 --omp-wait-compare --busy 2
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from structnmt.config import load_config
from structnmt.data.dataset import PreparedDataset, collate, make_batches
from structnmt.machine.allocator import configure_allocator
from structnmt.machine.cpu_gemm import to_onednn
from structnmt.machine.device import use_threads
from structnmt.models import build_model
from structnmt.train.loss import label_smoothed_nll

ROOT = Path(__file__).resolve().parents[1]


def autograd_label_smoothed_nll(logits, target, eps):
    """The loss as the trainer computed it before its gradient was written out."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    keep = target != 0  # PAD
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    nll = nll.masked_fill(~keep, 0.0).sum()
    smooth = smooth.masked_fill(~keep, 0.0).sum()
    return (1.0 - eps) * nll + eps * smooth, nll


@contextmanager
def torch_dropout():
    """The model's dropout through F.dropout while inside (the backward needs no patch: masks are saved)."""
    import torch.nn.functional as F

    import structnmt.nn.dropout as D

    saved = D.dropout, D.residual_dropout
    D.dropout = lambda x, p, training: F.dropout(x, p, training)
    D.residual_dropout = lambda x, y, p, training: x + F.dropout(y, p, training)
    try:
        yield
    finally:
        D.dropout, D.residual_dropout = saved


def variants(names: list[str]):
    out = {}
    for n in names:
        out[n] = {"fused": "fused" in n, "bf16": n.startswith("bf16"), "gnorm": n != "no-gnorm",
                  "compile": n.startswith("compile"), "autograd_loss": n == "autograd-loss",
                  "torch_dropout": n == "torch-dropout", "onednn": n == "onednn-linear"}
    return out


@dataclass
class _Runs:
    """Per variant: its flags (``variants``), its copy of the model, what is called (compiled or not), its Adam."""

    flags: dict[str, dict[str, bool]]
    models: dict[str, torch.nn.Module]
    calls: dict[str, Callable]
    opts: dict[str, torch.optim.Optimizer]
    label_smoothing: float

    def step(self, n: str, b) -> float:
        """One trainer step of variant ``n`` on batch ``b``; returns seconds."""
        v, m, opt = self.flags[n], self.models[n], self.opts[n]
        t0 = time.perf_counter()
        with (torch.autocast("cpu", dtype=torch.bfloat16) if v["bf16"] else nullcontext(),
              torch_dropout() if v["torch_dropout"] else nullcontext()):
            out = self.calls[n](b.src, b.src_mask, b.tgt_in)
        loss_fn = autograd_label_smoothed_nll if v["autograd_loss"] else label_smoothed_nll
        loss, _ = loss_fn(out.logits, b.tgt_out, self.label_smoothing)
        (loss / b.n_tgt_tokens).backward()
        if v["gnorm"]:
            torch.nn.utils.clip_grad_norm_(m.parameters(), float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())  # the trainer reads the loss every step
        return time.perf_counter() - t0


def _build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_tiny.yaml"))
    ap.add_argument("--data", default="data-bin/multi30k_en_de")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="baseline,fused-adam,bf16,bf16+fused,no-gnorm")
    ap.add_argument("--thp-compare", action="store_true")
    ap.add_argument("--malloc-compare", action="store_true")
    ap.add_argument("--omp-wait-compare", action="store_true")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes beside a --*-compare (a shared machine)")
    ap.add_argument("--only-baseline", action="store_true", help=argparse.SUPPRESS)
    return ap


def _compare_settings(args: argparse.Namespace) -> None:
    """``--thp-compare`` / ``--malloc-compare`` / ``--omp-wait-compare``: the baseline in child processes under
    both settings, alternating (``unset``: the variable removed from the child's environment)."""
    cmd = [sys.executable, __file__, "--config", args.config, "--data", args.data, "--threads", str(args.threads),
           "--batches", str(args.batches), "--rounds", "1", "--only-baseline"]
    if args.thp_compare:
        var, settings = "THP_MEM_ALLOC_ENABLE", ("0", "1")
    elif args.omp_wait_compare:
        var, settings = "OMP_WAIT_POLICY", ("unset", "PASSIVE")
    else:
        var, settings = "STRUCTNMT_MALLOC", ("system", "retain")
    res: dict[str, list[float]] = {v: [] for v in settings}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for r in range(args.rounds):
            for v in (settings if r % 2 == 0 else settings[::-1]):
                env = {k: x for k, x in os.environ.items() if k != var}
                if v != "unset":
                    env[var] = v
                line = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip()
                res[v].append(float(line.split()[-1]))
                print(f"{var}={v}: {res[v][-1]:.0f} tok/s", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    a, b = statistics.median(res[settings[0]]), statistics.median(res[settings[1]])
    print(f"| {var}={settings[0]} | {a:.0f} tok/s | 1.00 |\n| {var}={settings[1]} | {b:.0f} tok/s | {b / a:.2f} |")


def _load_batches(args: argparse.Namespace, cfg) -> tuple[PreparedDataset, list]:
    """The dataset and ``--batches`` training batches drawn at random (seed 0), collated once."""
    ds = PreparedDataset(Path(args.data))
    split = ds.split("train")
    batches, _ = make_batches(split.src_lens, split.tgt_lens, max_tokens=cfg.data.max_tokens,
                              max_len=cfg.data.max_len, seed=1)
    rng = np.random.default_rng(0)
    chosen = [batches[i] for i in rng.choice(len(batches), size=args.batches, replace=False)]
    return ds, [collate(split, ids) for ids in chosen]


def _build_runs(base: torch.nn.Module, names: list[str], label_smoothing: float) -> _Runs:
    """A copy of ``base`` per variant, compiled where asked, each with its own Adam."""
    vs = variants(names)
    models, opts, calls = {}, {}, {}
    for n, v in vs.items():
        m = copy.deepcopy(base).train()
        if v["onednn"]:
            m = to_onednn(m, in_place=True)
        models[n] = m
        calls[n] = torch.compile(m, dynamic=True) if v["compile"] else m
        opts[n] = torch.optim.Adam(m.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-8, fused=v["fused"] or None)
    return _Runs(vs, models, calls, opts, label_smoothing)


def _timed_rounds(runs: _Runs, names: list[str], data: list, n_tok: list[int], rounds: int) -> dict[str, list[float]]:
    """An untimed pass per variant, then ``rounds`` timed passes taking turns per batch: tok/s per round."""
    for n in names:  # warm-up (and compilation)
        t0 = time.perf_counter()
        for b in data:
            runs.step(n, b)
        print(f"# warm-up pass of {n}: {time.perf_counter() - t0:.1f} s", flush=True)
    rates: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        spent = {n: 0.0 for n in names}
        for i, b in enumerate(data):
            k = (i + r) % len(names)
            for n in names[k:] + names[:k]:
                spent[n] += runs.step(n, b)
        for n in names:
            rates[n].append(sum(n_tok) / spent[n])
    return rates


@torch.no_grad()
def _final_losses(runs: _Runs, names: list[str], data: list, n_tok: list[int]) -> dict[str, float]:
    """Each variant's loss per target token on the batches after the passes (fp32, eval mode)."""
    final = {}
    for n in names:
        m = runs.models[n].eval()
        tot = 0.0
        for b in data:
            loss, _ = label_smoothed_nll(m(b.src, b.src_mask, b.tgt_in).logits, b.tgt_out, runs.label_smoothing)
            tot += float(loss)
        final[n] = tot / sum(n_tok)
    return final


def main() -> None:
    ap = _build_parser()
    args = ap.parse_args()

    if args.thp_compare or args.malloc_compare or args.omp_wait_compare:
        _compare_settings(args)
        return

    allocator = configure_allocator()

    use_threads(args.threads)
    cfg = load_config(args.config, [f"data.path={args.data}"])
    ds, data = _load_batches(args, cfg)
    n_tok = [b.n_tgt_tokens for b in data]
    torch.manual_seed(1)
    base = build_model(cfg.model, len(ds.src_vocab), len(ds.tgt_vocab))
    names = ["baseline"] if args.only_baseline else args.variants.split(",")
    runs = _build_runs(base, names, cfg.train.label_smoothing)
    rates = _timed_rounds(runs, names, data, n_tok, args.rounds)
    if args.only_baseline:
        print(f"baseline {statistics.median(rates['baseline']):.1f}")
        return
    final = _final_losses(runs, names, data, n_tok)
    print(f"# bench_train {datetime.date.today()} {platform.machine()} torch {torch.__version__}, "
          f"{args.threads} thread(s), {args.batches} batches ({sum(n_tok)} target tokens), {args.rounds} rounds, "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}, allocator {allocator}")
    b0 = statistics.median(rates["baseline"])
    print("| variant | target tok/s (median) | ratio | loss per token after the passes (fp32 eval) |")
    print("|---|---|---|---|")
    for n in names:
        med = statistics.median(rates[n])
        print(f"| {n} | {med:.0f} | {med / b0:.2f} | {final[n]:.4f} |")


if __name__ == "__main__":
    main()
