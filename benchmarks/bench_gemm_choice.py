#!/usr/bin/env python
"""Is ``STRUCTNMT_CPU_GEMM=auto``'s measured choice at least as fast as either fixed library, end to end?

    python benchmarks/bench_gemm_choice.py --data data-bin/multi30k_en_de --threads 2 [--cpu-isa avx2]

Training: the trainer's step (benchmarks/bench_train.py's ``baseline`` on MKL and ``onednn-linear`` on oneDNN)
over the same ``--batches`` batches, taking turns batch by batch, ``--rounds`` timed passes after an untimed
one, with a third variant, the model as ``auto`` sets it up (each layer shape on the library measured
faster for it): target tokens/s. Decoding: ``translate_ids`` (beam ``--beam``, ``--batch-size`` sentences) of the first
``--sentences`` test sentences with the linear layers on each library, alternated, ``--rounds`` times:
sentences/s, the same three ways. What ``auto`` chooses for the same model, purpose and step size
(structnmt.machine.gemm_choice: its own short measurement, here with a cache in a temporary folder so it is
measured now) is taken first; the table gives its end-to-end rate over the faster fixed library's: at least
1.00 (within the spread of the rounds) is the claim. ``--cpu-isa avx2`` holds every library to AVX2 (set before torch
loads, in a child process).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ISA_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_tiny.yaml"))
    ap.add_argument("--data", default="data-bin/multi30k_en_de")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--cpu-isa", choices=("native", "avx2"), default="native")
    return ap


def _train_rates(args, cfg, ds, model, chosen) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import copy  # noqa: PLC0415

    import bench_train  # noqa: PLC0415 (a sibling script, not a package)
    import torch  # noqa: PLC0415

    from structnmt.machine.cpu_gemm import with_cpu_gemm  # noqa: PLC0415

    _, data = bench_train._load_batches(args, cfg)
    n_tok = [b.n_tgt_tokens for b in data]
    runs = bench_train._build_runs(model, ["baseline", "onednn-linear"], cfg.train.label_smoothing)
    # the measured choice as a third variant: a copy of the model with the chosen layers on oneDNN
    runs.flags["chosen"] = dict(runs.flags["baseline"])
    runs.models["chosen"] = runs.calls["chosen"] = with_cpu_gemm(copy.deepcopy(model).train(), in_place=True,
                                                                  choice=chosen)
    runs.opts["chosen"] = torch.optim.Adam(runs.models["chosen"].parameters(), lr=5e-4, betas=(0.9, 0.98),
                                           eps=1e-8)
    names = ["baseline", "onednn-linear", "chosen"]
    rates = bench_train._timed_rounds(runs, names, data, n_tok, args.rounds)
    return {lib: statistics.median(rates[n]) for lib, n in zip(("mkl", "onednn", "chosen"), names, strict=True)}


def _decode_rates(args, ds, model, chosen) -> dict[str, float]:
    import torch  # noqa: PLC0415 (after the ISA variables are set)

    from structnmt.config import DecodeConfig  # noqa: PLC0415
    from structnmt.decode.translate import translate_ids  # noqa: PLC0415
    from structnmt.machine import cpu_gemm  # noqa: PLC0415

    split = ds.split("test")
    sources = [split.get("src", i).tolist() for i in range(min(args.sentences, len(split)))]
    dcfg = DecodeConfig(beam=args.beam, batch_size=args.batch_size)
    model = model.eval()
    # MKL alone and oneDNN alone through the variable; the choice as a view whose chosen layers are swapped
    # (decoding leaves a model with oneDNN layers as it is; under "mkl" a plain view stays plain)
    views = {"mkl": ("mkl", model), "onednn": ("onednn", model),
             "chosen": ("mkl", cpu_gemm.with_cpu_gemm(model, in_place=False, choice=chosen))}
    spent: dict[str, list[float]] = {name: [] for name in views}
    for r in range(args.rounds + 1):  # the first round untimed (warm-up)
        order = list(views) if r % 2 == 0 else list(views)[::-1]
        for name in order:
            os.environ[cpu_gemm.ENV], m = views[name]
            t0 = time.perf_counter()
            translate_ids(m, sources, dcfg, device=torch.device("cpu"), max_positions=1024)
            if r:
                spent[name].append(time.perf_counter() - t0)
    os.environ.pop(cpu_gemm.ENV)
    return {name: len(sources) / statistics.median(s) for name, s in spent.items()}


def run(args) -> None:
    import torch  # noqa: PLC0415 (after the ISA variables are set)

    from structnmt.config import (
        DecodeConfig,  # noqa: PLC0415
        load_config,  # noqa: PLC0415
    )
    from structnmt.data.dataset import PreparedDataset  # noqa: PLC0415
    from structnmt.decode.translate import decode_rows  # noqa: PLC0415
    from structnmt.machine.cpu_gemm import choose  # noqa: PLC0415
    from structnmt.machine.device import cpu_model_name, cpuinfo, use_threads  # noqa: PLC0415
    from structnmt.models import build_model  # noqa: PLC0415

    use_threads(args.threads)
    cfg = load_config(args.config, [f"data.path={args.data}"])
    ds = PreparedDataset(Path(args.data))
    torch.manual_seed(1)
    model = build_model(cfg.model, len(ds.src_vocab), len(ds.tgt_vocab))
    os.environ["STRUCTNMT_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-gemm-choice-")
    os.environ.pop("STRUCTNMT_CPU_GEMM", None)
    chosen = {"train": choose(model, "train", cfg.data.max_tokens),
              "decode": choose(model, "decode", decode_rows(DecodeConfig(beam=args.beam, batch_size=args.batch_size)))}
    rates = {"train": _train_rates(args, cfg, ds, model, chosen["train"]),
             "decode": _decode_rates(args, ds, model, chosen["decode"])}
    print(f"# bench_gemm_choice {datetime.date.today()}: {cpu_model_name()} (family {cpuinfo('cpu family')}, model "
          f"{cpuinfo('model')}), ISA {args.cpu_isa} (torch capability {torch.backends.cpu.get_cpu_capability()}), "
          f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds; {args.config}")
    print("| purpose | MKL alone | oneDNN alone | auto's choice | its rate | / the faster fixed library | "
          "/ the slower |")
    print("|---|---|---|---|---|---|---|")
    for purpose, unit in (("train", "target tok/s"), ("decode", "sentences/s")):
        r = rates[purpose]
        fixed = (r["mkl"], r["onednn"])
        print(f"| {purpose} | {r['mkl']:.1f} {unit} | {r['onednn']:.1f} {unit} | {chosen[purpose].library} | "
              f"{r['chosen']:.1f} | {r['chosen'] / max(fixed):.2f} | {r['chosen'] / min(fixed):.2f} |")
    for purpose, c in chosen.items():
        print(f"# auto for {purpose}: {c.why}")


def main() -> None:
    args = _parser().parse_args()
    if args.cpu_isa == "avx2" and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        env = {**os.environ, **ISA_AVX2}
        sys.exit(subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env).returncode)
    run(args)


if __name__ == "__main__":
    main()
