#!/usr/bin/env python
"""structnmt against fairseq 0.12, side by side on the same data, model and batch size.

Optional: needs fairseq in its own virtual environment (``bash benchmarks/install_fairseq.sh``,
about 4 minutes); never part of the tests.

What it does, in one run:

1. **Same data.** The pieces structnmt trains on (a prepared dataset with a joint
   SentencePiece vocabulary, e.g. ``data-bin/multi30k_en_de``) are written out as text,
   one piece per token, and binarised by ``fairseq-preprocess`` with a dictionary made from
   the same SentencePiece vocabulary (``--srcdict``, ``--joined-dictionary``): same
   sentences, same pieces, same vocabulary size.
2. **Same model and batch.** The transformer_tiny recipe on both sides: 4+4 layers,
   d = 128, FFN 256, 4 heads, post-norm, all embeddings shared, dropout 0.3, Adam
   (0.9, 0.98), lr 0.005, inverse-sqrt warm-up 2,000, label smoothing 0.1, 4,096 tokens
   per batch, no validation and no checkpoint during the timed updates.
3. **Training speed.** ``fairseq-train`` and ``structnmt train`` alternate ``--rounds``
   times, ``--updates`` each, with the same number of threads; each reports target
   tokens/s per log interval (fairseq's ``wps``, structnmt's ``tok_per_s``); the median
   over the intervals after the first ``--skip`` (the warm-up) is taken; the order of the two
   alternates from round to round (ABBA), and the ratio printed is the median of the rounds'
   own ratios, with their range and each toolkit's spread over rounds. With ``--processes N`` (default 2; 1 leaves it out) both also
   train as N processes of one thread each with 4,096 / N tokens per process (the same
   tokens per update): structnmt under ``torchrun --standalone`` (DistributedDataParallel,
   gloo), fairseq as N ``fairseq-train`` processes joined over TCP with gloo and its
   ``legacy_ddp`` (fairseq 0.12's DistributedDataParallel wrapper passes a GPU device to
   PyTorch and fails on the CPU; its automatic set-up divides by the number of GPUs).
4. **Decoding speed.** Both models of the last round (the same number of updates, so
   their outputs have comparable lengths) translate the test split with beam 5 and 128
   sentences per batch: fairseq-generate's own "sentences/s" against structnmt's
   sentences/s measured the same way (generation only, the model already loaded), the
   same with ``--threads`` worker processes of one thread each (``structnmt translate
   --workers``; workers started before the clock; with ``--threads 1`` that is the one-process
   row, so it is left out), structnmt's ``--dtype bfloat16`` and
   ``--dtype int8``, plus structnmt's CTranslate2 export (float32 and int8) when
   ``ctranslate2`` is installed.
5. **Where a step goes** (``--breakdown``, instead of 3 and 4): each toolkit trains ``--updates`` once, in its own
   process, with updates ``--profile-first`` .. ``--profile-first + --profile-count - 1`` under
   ``torch.profiler`` (``benchmarks/profile_step.py``); one table gives each toolkit's ms per update and share of
   the step by category (linear GEMMs, attention, softmax, layer norm, dropout, loss, Adam, gradient scaling and
   norm, allocation, other, and the time outside operators), then each toolkit's largest operators.
6. **On a GPU** (``--device cuda``): both train and decode on the GPU in mixed precision,
   fairseq with its ``--fp16`` (half-precision weights, dynamic loss scaling), structnmt with
   its bfloat16 autocast (``train.bf16``, the default on CUDA); decoding fairseq-generate
   ``--fp16`` against structnmt in float32 and ``--dtype bfloat16``. The CPU-only rows
   (processes of one thread, ``--workers``, int8, CTranslate2) are left out. ``--threads``
   still sets the CPU threads of both (data loading, the host side).

    bash benchmarks/install_fairseq.sh ~/fairseq-venv
    python benchmarks/bench_fairseq.py --data data-bin/multi30k_en_de --fairseq-venv ~/fairseq-venv \\
        --threads 2 --updates 200 --rounds 2
    python benchmarks/bench_fairseq.py --data data-bin/multi30k_en_de --fairseq-venv ~/fairseq-venv \\
        --threads 2 --updates 60 --breakdown --profile-first 21 --profile-count 20 [--cpu-isa avx2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from structnmt.machine.device import cpu_model_name

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "multi30k_transformer_tiny.yaml"
PROFILE_STEP = ROOT / "benchmarks" / "profile_step.py"


def write_pieces(data: Path, work: Path) -> None:
    """train/valid/test.{src,tgt} as space-separated pieces, and a fairseq dictionary of the vocabulary."""
    from structnmt.data.dataset import PreparedDataset

    ds = PreparedDataset(data)
    if not ds.manifest.get("joint_vocab"):
        raise SystemExit(f"{data}: needs a joint vocabulary (prepare without --separate-vocab).")
    sp = ds.src_vocab.sp
    piece = sp.id_to_piece
    for name in ("train", "valid", "test"):
        split = ds.split(name)
        for side, ext in (("src", "src"), ("tgt", "tgt")):
            with open(work / f"{name}.{ext}", "w", encoding="utf-8") as f:
                for i in range(len(split)):
                    f.write(" ".join(piece(int(t)) for t in split.get(side, i)) + "\n")
    with open(work / "dict.txt", "w", encoding="utf-8") as f:
        for i in range(4, sp.get_piece_size()):  # fairseq adds its own <s> <pad> </s> <unk>
            f.write(f"{piece(i)} 1\n")


def fairseq_train_args(bin_dir: Path, save: Path, updates: int, log_interval: int, device: str = "cpu") -> list[str]:
    return [str(bin_dir), "--arch", "transformer", "--encoder-layers", "4", "--decoder-layers", "4",
            "--encoder-embed-dim", "128", "--decoder-embed-dim", "128", "--encoder-ffn-embed-dim", "256",
            "--decoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
            "--share-all-embeddings", "--dropout", "0.3", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
            "--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2000",
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "4096",
            "--max-update", str(updates), "--log-interval", str(log_interval), "--log-format", "json",
            *fairseq_device_args(device), "--num-workers", "0", "--disable-validation", "--save-dir", str(save), "--no-epoch-checkpoints",
            "--save-interval-updates", "0", "--seed", "1"]


def fairseq_device_args(device: str) -> list[str]:
    """fairseq-train's and fairseq-generate's device flags: the CPU, or the GPU in fp16."""
    return ["--cpu"] if device == "cpu" else ["--fp16"]


def structnmt_train_args(data: Path, save: Path, args, threads: int, max_tokens: int = 4096) -> list[str]:
    return ["train", str(RECIPE), f"data.path={data}", f"data.max_tokens={max_tokens}", f"train.device={args.device}",
            f"train.save_dir={save}", f"train.max_updates={args.updates}",
            f"train.log_interval={args.log_interval}", f"train.threads={threads}",
            f"train.save_interval_updates={10 * args.updates}",
            f"train.validate_interval_updates={10 * args.updates}", "train.keep_last=1",
            "train.tensorboard=false", "train.seed=1", "--no-progress"]


def run_structnmt(cmd: list[str], save: Path, env: dict, skip: int) -> float:
    """Run a structnmt training; the median target tokens/s of its log intervals after ``skip``."""
    shutil.rmtree(save, ignore_errors=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"structnmt train failed: {p.stderr[-2000:]}")
    rows = [json.loads(x) for x in (save / "metrics.jsonl").read_text().splitlines()]
    return median_after([x["tok_per_s"] for x in rows if x.get("kind") == "train" and x["step"] > 1], skip)


def train_structnmt_processes(data: Path, work: Path, args, env: dict) -> float:
    """structnmt as ``--processes`` processes of one thread (torchrun), 4,096 / N tokens each."""
    n = args.processes
    save = work / "structnmt-mp-run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           "-m", "structnmt.cli", *structnmt_train_args(data, save, args, 1, 4096 // n)]
    return run_structnmt(cmd, save, {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, args.skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_fairseq_processes(venv: Path, bin_dir: Path, work: Path, args, env: dict) -> float:
    """fairseq-train as ``--processes`` processes of one thread, 4,096 / N tokens each: gloo over TCP and
    fairseq's own ``legacy_ddp`` (its torch DistributedDataParallel wrapper asks for a GPU device)."""
    n = args.processes
    save = work / "fairseq-mp-run"
    shutil.rmtree(save, ignore_errors=True)
    base = fairseq_train_args(bin_dir, save, args.updates, args.log_interval)
    base[base.index("--max-tokens") + 1] = str(4096 // n)
    base += ["--distributed-world-size", str(n), "--distributed-backend", "gloo", "--distributed-no-spawn",
             "--distributed-init-method", f"tcp://127.0.0.1:{free_port()}", "--ddp-backend", "legacy_ddp"]
    env1 = {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen([str(venv / "bin" / "fairseq-train"), *base, "--distributed-rank", str(r)], env=env1,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(n)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"fairseq-train ({n} processes) failed: {outs[0][-2000:]}")
    # rank 0 logs the statistics summed over all processes (wpb and wps are totals)
    wps = [float(json.loads(m.group(1))["wps"]) for m in re.finditer(r"\| train_inner \| (\{.*\})", outs[0])]
    return median_after(wps, args.skip)


ISA_LIMITS = {"native": {},
              # what PyTorch's own kernels (ATen), oneDNN and MKL may use: an AVX2-only CPU's code paths
              "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
"""``--cpu-isa``: environment variables that hold both toolkits' kernels to an instruction set (the same for both)."""


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def median_after(values: list[float], skip: int) -> float:
    kept = values[skip:] or values
    return statistics.median(kept)


DECODE_SNIPPET = (
    "import sys, time, torch\nfrom structnmt.machine.device import use_threads; use_threads(int(sys.argv[3]))  # as translate\n"
    "from structnmt.machine.allocator import configure_allocator; configure_allocator()  # as structnmt translate\n"
    "from structnmt.decode.translate import Translator\nfrom structnmt.config import DecodeConfig\n"
    "if __name__ == '__main__':\n"
    "    lines = open(sys.argv[2], encoding='utf-8').read().splitlines()\n"
    "    workers = int(sys.argv[5]) or None  # 0: translate's default (workers=None)\n"
    "    tr = Translator(sys.argv[1], device=sys.argv[6], workers=workers)\n"
    "    d = DecodeConfig(beam=5, batch_size=128, dtype=sys.argv[4], allow_slow_dtype=True)\n"
    "    tr._pool_for(-(-len(lines) // d.batch_size))  # the decoding processes, if any, start before the clock\n"
    "    t = time.perf_counter(); out = tr.translate(lines, d); el = time.perf_counter() - t\n"
    "    print(len(lines) / el, sum(len(h[0].tokens) + 1 for h in out))\n"
    "    tr.close()\n")


def decode_structnmt(checkpoint: Path, src_lines: Path, threads: int, dtype: str, workers: int,
                     env: dict, device: str = "cpu") -> tuple[float, float]:
    """structnmt's beam-5 decoding of ``src_lines`` in a fresh process: (sentences/s, output tokens with EOS)."""
    env = {**env, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", DECODE_SNIPPET, str(checkpoint), str(src_lines), str(threads), dtype,
                          str(workers), device], env=env, capture_output=True, text=True, check=True)
    rate, tokens = (float(x) for x in out.stdout.strip().splitlines()[-1].split())
    return rate, tokens


def decode_ct2(checkpoint: Path, src_lines: Path, threads: int, work: Path, env: dict) -> dict[str, float]:
    """structnmt's CTranslate2 export (float32 and int8 weights) decoding ``src_lines``: quantization -> sentences/s;
    empty when ``ctranslate2`` is not installed."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return {}
    snippet = (
        "import sys, time\nfrom structnmt.tasks.export import export_ctranslate2, CT2Translator\n"
        "from structnmt.config import DecodeConfig\n"
        "lines = open(sys.argv[2], encoding='utf-8').read().splitlines()\n"
        "q = None if sys.argv[5] == 'none' else sys.argv[5]\n"
        "ct = CT2Translator(export_ctranslate2(sys.argv[1], sys.argv[4], quantization=q), threads=int(sys.argv[3]))\n"
        "d = DecodeConfig(beam=5, batch_size=128)\n"
        "t = time.perf_counter(); ct.translate(lines, d); print(len(lines) / (time.perf_counter() - t))\n")
    rates = {}
    for quant in ("none", "int8"):
        out = subprocess.run([sys.executable, "-c", snippet, str(checkpoint), str(src_lines), str(threads),
                              str(work / f"ct2-{quant}"), quant], env=env, capture_output=True, text=True, check=True)
        rates[quant] = float(out.stdout.strip().splitlines()[-1])
    return rates


def _build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data-bin/multi30k_en_de")
    ap.add_argument("--fairseq-venv", default=os.path.expanduser("~/.cache/structnmt/fairseq-venv"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4,
                    help="rounds of both trainings, in alternating order (ABBA); the ratio is the median of the "
                         "rounds' ratios, printed with their range")
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--skip", type=int, default=2, help="log intervals left out at the start (warm-up)")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed at the end)")
    ap.add_argument("--processes", type=int, default=2,
                    help="also train both as this many processes of one thread each (1: leave it out)")
    ap.add_argument("--decode-only", action="store_true",
                    help="skip training: decode with the models a previous run left in --work")
    ap.add_argument("--cpu-isa", choices=sorted(ISA_LIMITS), default="native",
                    help="avx2: hold PyTorch's, oneDNN's and MKL's kernels of both toolkits to AVX2 (the code paths of "
                         "a CPU without AVX-512, on this one; not the other CPU's caches and clocks)")
    ap.add_argument("--breakdown", action="store_true",
                    help="instead of the rounds and decoding: one profiled training of each toolkit, and where its "
                         "update goes by operator category, side by side (benchmarks/profile_step.py)")
    ap.add_argument("--profile-first", type=int, default=21,
                    help="--breakdown: the first profiled update (the ones before it are the warm-up)")
    ap.add_argument("--profile-count", type=int, default=20, help="--breakdown: how many updates are profiled")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: train and decode on the GPU in mixed precision (fairseq --fp16, structnmt bf16 "
                         "autocast); the CPU-only rows are left out")
    return ap


def _binarise(venv: Path, data: Path, work: Path, env: dict) -> Path:
    """fairseq's binarised copy of the data under ``work`` (made once, reused by later runs); its directory."""
    text = work / "text"
    bin_dir = work / "fairseq-bin"
    if not (bin_dir / "dict.src.txt").exists():
        text.mkdir(exist_ok=True)
        write_pieces(data, text)
        subprocess.run([str(venv / "bin" / "fairseq-preprocess"), "--source-lang", "src", "--target-lang", "tgt",
                        "--trainpref", str(text / "train"), "--validpref", str(text / "valid"),
                        "--testpref", str(text / "test"), "--destdir", str(bin_dir),
                        "--srcdict", str(text / "dict.txt"), "--joined-dictionary", "--workers", "2"],
                       check=True, env=env, capture_output=True)
    return bin_dir


def _train_fairseq(venv: Path, bin_dir: Path, work: Path, args: argparse.Namespace, env: dict) -> float:
    """One fairseq-train run of ``--threads`` threads; the median target tokens/s of its log intervals."""
    save = work / "fairseq-run"
    shutil.rmtree(save, ignore_errors=True)
    p = subprocess.run([str(venv / "bin" / "fairseq-train"),
                        *fairseq_train_args(bin_dir, save, args.updates, args.log_interval, args.device)],
                       env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"fairseq-train failed: {p.stderr[-2000:]}")
    wps = [float(json.loads(m.group(1))["wps"]) for m in
           re.finditer(r"\| train_inner \| (\{.*\})", p.stdout + p.stderr)]
    return median_after(wps, args.skip)


def _train_structnmt(data: Path, work: Path, args: argparse.Namespace, env: dict) -> float:
    """One structnmt train run of ``--threads`` threads; the median target tokens/s of its log intervals."""
    save = work / "structnmt-run"
    shutil.rmtree(save, ignore_errors=True)
    cmd = [sys.executable, "-m", "structnmt.cli", *structnmt_train_args(data, save, args, args.threads)]
    return run_structnmt(cmd, save, env, args.skip)


def _train_rounds(venv: Path, bin_dir: Path, data: Path, work: Path, args: argparse.Namespace,
                  env: dict) -> dict[str, list[float]]:
    """Both trainings (and their N-process forms) alternating ``--rounds`` times: who -> tok/s per round."""
    rates: dict[str, list[float]] = {"fairseq": [], "structnmt": [],
                                     "fairseq-mp": [], "structnmt-mp": []}  # -mp: N processes x 1 thread
    whos = ("fairseq", "structnmt") + (("fairseq-mp", "structnmt-mp") if args.processes > 1 else ())
    if args.decode_only and not (args.work and (work / "fairseq-run" / "checkpoint_last.pt").exists()
                                 and (work / "structnmt-run" / "checkpoint_last.pt").exists()):
        raise SystemExit("--decode-only needs --work with the models of an earlier run of this benchmark.")
    for r in range(0 if args.decode_only else args.rounds):
        order = whos if r % 2 == 0 else tuple(reversed(whos))
        for who in order:
            if who == "fairseq-mp":
                rates[who].append(train_fairseq_processes(venv, bin_dir, work, args, env))
            elif who == "structnmt-mp":
                rates[who].append(train_structnmt_processes(data, work, args, env))
            elif who == "fairseq":
                rates[who].append(_train_fairseq(venv, bin_dir, work, args, env))
            else:
                rates[who].append(_train_structnmt(data, work, args, env))
            print(f"round {r + 1}: {who}: {rates[who][-1]:.0f} target tok/s", flush=True)
    return rates


def _decode_fairseq(venv: Path, bin_dir: Path, work: Path, device: str, env: dict) -> tuple[float, int]:
    """fairseq-generate on the test split with the last round's model: (sentences/s, output tokens)."""
    gen = subprocess.run([str(venv / "bin" / "fairseq-generate"), str(bin_dir), "--path",
                          str(work / "fairseq-run" / "checkpoint_last.pt"), "--gen-subset", "test", "--beam", "5",
                          "--batch-size", "128", *fairseq_device_args(device), "--num-workers", "0",
                          "--post-process", "sentencepiece"],
                         env=env, capture_output=True, text=True)
    m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in [\d.]+s \(([\d.]+) sentences/s",
                  gen.stdout + gen.stderr)
    if gen.returncode or not m:
        raise SystemExit(f"fairseq-generate failed: {(gen.stdout + gen.stderr)[-2000:]}")
    return float(m.group(3)), int(m.group(2).replace(",", ""))


def _decode_modes(threads: int, device: str) -> dict[str, tuple[int, str, int]]:
    """structnmt's decoding modes: label -> (threads, dtype, workers; 0: translate's default)."""
    # structnmt decoding in float32, bfloat16 (faster where the CPU has AVX512-BF16 or AMX) and int8, in one
    # process of --threads threads or in --threads worker processes of one thread (translate --workers);
    # on a GPU float32 and bfloat16 only. mode label -> (threads, dtype, workers)
    modes = {"": (threads, "float32", 1), " --dtype bfloat16": (threads, "bfloat16", 1)}
    if device == "cpu":
        modes[" translate's default (workers chosen by itself)"] = (threads, "float32", 0)
        if threads > 1:  # with one thread, "--workers 1 (1 thread each)" is the one-process row again
            modes.update({f" --workers {threads} (1 thread each)": (1, "float32", threads),
                          f" --workers {threads} --dtype int8": (1, "int8", threads)})
        modes[" --dtype int8"] = (threads, "int8", 1)
    return modes


def _measure(venv: Path, data: Path, work: Path, args: argparse.Namespace, env: dict) -> Measured:
    """The whole benchmark in ``work``: binarise, train in rounds, decode with the last round's models."""
    bin_dir = _binarise(venv, data, work, env)
    rates = _train_rounds(venv, bin_dir, data, work, args, env)
    # decoding: the last round's models
    fs_dec, fs_tokens = _decode_fairseq(venv, bin_dir, work, args.device, env)
    src_lines = data / "test.src.txt"
    checkpoint = work / "structnmt-run" / "checkpoint_last.pt"
    modes = _decode_modes(args.threads, args.device)
    sn = {label: decode_structnmt(checkpoint, src_lines, threads, dtype, workers, env, args.device)
          for label, (threads, dtype, workers) in modes.items()}  # label -> (sentences/s, output tokens)
    ct2_dec = decode_ct2(checkpoint, src_lines, args.threads, work, env) if args.device == "cpu" else {}
    return Measured(threads=args.threads, processes=args.processes, fs_rates=rates["fairseq"],
                    sn_rates=rates["structnmt"], fs_mp=rates["fairseq-mp"], sn_mp=rates["structnmt-mp"],
                    fs_dec=fs_dec, fs_tokens=fs_tokens, sn_dec=sn, modes=modes, ct2_dec=ct2_dec)


def _profile(tool: str, python: str, train_argv: list[str], out: Path, args: argparse.Namespace,
             env: dict) -> dict:
    """One profiled training of ``tool`` (benchmarks/profile_step.py run by ``python``): the JSON it wrote."""
    out.unlink(missing_ok=True)
    cmd = [python, str(PROFILE_STEP), tool, str(out), "--first", str(args.profile_first),
           "--count", str(args.profile_count), "--", *train_argv]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode or not out.exists():
        raise SystemExit(f"{tool}'s profiled training failed: {(p.stdout + p.stderr)[-2000:]}")
    return json.loads(out.read_text())


def breakdown_lines(venv: Path, data: Path, work: Path, args: argparse.Namespace, env: dict) -> list[str]:
    """``--breakdown``: fairseq's and then structnmt's profiled training, each as its own command line trains (the
    same arguments as the rounds), and the side-by-side table of where an update goes. Both run with
    ``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets a policy (structnmt's command line sets it for itself;
    fairseq's would spin idle OpenMP threads, and on a shared machine the table would show the wait policy, not
    the operators). The profiles stay in ``work`` (breakdown-*.json)."""
    sys.path.insert(0, str(PROFILE_STEP.parent))
    from profile_step import breakdown, table_lines

    end = args.profile_first + args.profile_count
    if args.profile_first < 1 or args.profile_count < 1 or args.updates < end:
        raise SystemExit(f"--breakdown: the profiled window (updates {args.profile_first}-{end - 1}) must lie within "
                         f"--updates {args.updates}, with one update after it; give --updates {end + 10} or more.")
    bin_dir = _binarise(venv, data, work, env)
    saves = {tool: work / f"{tool}-profile-run" for tool in ("fairseq", "structnmt")}
    for save in saves.values():
        shutil.rmtree(save, ignore_errors=True)  # both toolkits resume from a checkpoint left in their save dir
    env = {**env, "OMP_WAIT_POLICY": env.get("OMP_WAIT_POLICY", "PASSIVE")}
    fs = _profile("fairseq", str(venv / "bin" / "python"),
                  fairseq_train_args(bin_dir, saves["fairseq"], args.updates, args.log_interval),
                  work / "breakdown-fairseq.json", args, env)
    sn = _profile("structnmt", sys.executable, structnmt_train_args(data, saves["structnmt"], args, args.threads),
                  work / "breakdown-structnmt.json", args, env)
    return [f"updates {args.profile_first}-{end - 1} of {args.updates} profiled (self CPU time of each operator on "
            f"the training thread, per update); kernels: fairseq {fs['capability']}, structnmt {sn['capability']}; "
            f"torch threads: fairseq {fs['threads']}, structnmt {sn['threads']}; "
            f"OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']} for both", "",
            *table_lines(breakdown(fs), breakdown(sn))]


def main() -> None:
    ap = _build_parser()
    args = ap.parse_args()
    if args.breakdown and args.device != "cpu":
        raise SystemExit("--breakdown profiles the CPU's operators; drop --device cuda.")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: PyTorch sees no CUDA GPU here; run on a GPU machine or drop --device.")
        args.processes = 1  # one GPU: the N processes x 1 thread comparison is a CPU one

    venv = Path(args.fairseq_venv)
    if not (venv / "bin" / "fairseq-train").exists():
        raise SystemExit(f"no fairseq in {venv}; install it with: bash benchmarks/install_fairseq.sh {venv}")
    data = Path(args.data).resolve()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-fairseq-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ISA_LIMITS[args.cpu_isa], "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads),
           # fairseq 0.12 checkpoints hold an argparse.Namespace, which torch >= 2.6 refuses to unpickle by default
           "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    try:
        if args.breakdown:
            lines = breakdown_lines(venv, data, work, args, env)
        else:
            measured = _measure(venv, data, work, args, env)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    gpu = f", GPU {gpu_name()}, mixed precision (fairseq --fp16, structnmt bf16)" if args.device == "cuda" else ""
    print(f"# bench_fairseq {datetime.date.today()} {platform.machine()} {cpu_model_name()}, {os.cpu_count()} cores{gpu}, "
          f"{args.threads} thread(s), "
          + (f"{args.updates} updates once each (--breakdown)" if args.breakdown
             else f"{args.updates} updates x {args.rounds} rounds each") + f", data {args.data}"
          + (f", kernels held to {args.cpu_isa} ({' '.join(f'{k}={v}' for k, v in ISA_LIMITS[args.cpu_isa].items())})"
             if args.cpu_isa != "native" else "")
          + (" (decoding only: the models of an earlier run)" if args.decode_only else ""))
    print("\n".join(lines if args.breakdown else report_lines(measured)))


@dataclass
class Measured:
    """What one run of the benchmark measured (training rates per round, decoding rates and output tokens)."""

    threads: int
    processes: int
    fs_rates: list[float]  # fairseq training, target tokens/s per round (1 process x threads)
    sn_rates: list[float]  # structnmt, the same
    fs_mp: list[float]  # fairseq, `processes` processes x 1 thread
    sn_mp: list[float]
    fs_dec: float  # fairseq-generate sentences/s
    fs_tokens: int  # its output tokens
    sn_dec: dict[str, tuple[float, float]]  # structnmt decoding mode label -> (sentences/s, output tokens)
    modes: dict[str, tuple[int, str, int]]  # label -> (threads, dtype, workers; 0: translate's default)
    ct2_dec: dict[str, float]  # CTranslate2 export quantization -> sentences/s


def ratio_spread(fairseq: list[float], structnmt: list[float]) -> str:
    """The training ratio as the table gives it: the median of the rounds' own ratios (each round runs both, one
    after the other, so a round's ratio is the least disturbed by what else the machine does), and with two or
    more rounds their range and, from three rounds, the spread of each toolkit's rate (max / min - 1)."""
    ratios = [s / f for f, s in zip(fairseq, structnmt)]
    text = f"{statistics.median(ratios):.2f}"
    if len(ratios) > 1:
        text += f" (rounds {min(ratios):.2f}-{max(ratios):.2f}"
        if len(ratios) > 2:
            text += (f"; rate spread fairseq {max(fairseq) / min(fairseq) - 1:.0%}, "
                     f"structnmt {max(structnmt) / min(structnmt) - 1:.0%}")
        text += ")"
    return text


def report_lines(m: Measured) -> list[str]:
    """The benchmark's Markdown table (and its per-round line) from what it measured."""
    lines = ["| measure | fairseq 0.12 | structnmt | ratio structnmt / fairseq |", "|---|---|---|---|"]
    if m.fs_rates:
        fs, sn = statistics.median(m.fs_rates), statistics.median(m.sn_rates)
        lines.append(f"| training target tok/s (median), 1 process x {m.threads} threads | {fs:.0f} | {sn:.0f} | "
                     f"{ratio_spread(m.fs_rates, m.sn_rates)} |")
    if m.fs_mp:
        fm, sm = statistics.median(m.fs_mp), statistics.median(m.sn_mp)
        n = m.processes
        lines.append(f"| training target tok/s (median), {n} processes x 1 thread, {4096 // n} tokens each | "
                     f"{fm:.0f} | {sm:.0f} | {ratio_spread(m.fs_mp, m.sn_mp)} |")
        if m.fs_rates:
            lines.append(f"| training: structnmt {n} processes x 1 thread against fairseq 1 process x {m.threads} "
                         f"threads | {fs:.0f} | {sm:.0f} | {sm / fs:.2f} |")
    for label, (rate, _) in m.sn_dec.items():
        name = "decoding sentences/s (beam 5, batch 128)" if not label else f"decoding sentences/s, structnmt{label}"
        lines.append(f"| {name} | {m.fs_dec:.1f} | {rate:.1f} | {rate / m.fs_dec:.2f} |")
    for label, (_, tokens) in m.sn_dec.items():
        _, dtype, workers = m.modes[label]
        if workers != 1:  # several processes (0: chosen by translate): the translations of one process, or a warning
            one = next(m.sn_dec[other][1] for other, mode in m.modes.items() if mode[1:] == (dtype, 1))
            if tokens != one:
                lines.append(f"WARNING: structnmt{label} wrote {tokens:.0f} output tokens, one process {one:.0f}")
            continue
        name = ("output tokens (EOS included; decoding speeds compare only where these are alike)" if not label
                else f"output tokens, structnmt{label}")
        lines.append(f"| {name} | {m.fs_tokens} | {tokens:.0f} | {tokens / m.fs_tokens:.2f} |")
    for quant, rate in m.ct2_dec.items():
        lines.append(f"| decoding sentences/s, structnmt's CTranslate2 export "
                     f"({'float32' if quant == 'none' else quant}) | {m.fs_dec:.1f} | {rate:.1f} | {rate / m.fs_dec:.2f} |")
    if m.fs_rates:
        lines.append(f"(per round: fairseq {', '.join(f'{x:.0f}' for x in m.fs_rates)}; "
                     f"structnmt {', '.join(f'{x:.0f}' for x in m.sn_rates)} target tok/s"
                     + (f"; {m.processes} processes: fairseq {', '.join(f'{x:.0f}' for x in m.fs_mp)}, structnmt "
                        f"{', '.join(f'{x:.0f}' for x in m.sn_mp)}" if m.fs_mp else "") + ")")
    return lines


if __name__ == "__main__":
    main()
