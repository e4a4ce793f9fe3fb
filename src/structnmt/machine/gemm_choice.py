"""``STRUCTNMT_CPU_GEMM=auto``: MKL or oneDNN for a model's float32 linear layers, chosen by measuring them.

Which library multiplies a small Transformer's matrices faster depends on the CPU, its instruction set (AVX2
or AVX-512, and what an environment variable such as ``ONEDNN_MAX_CPU_ISA`` holds back), the thread count,
the library versions and the shapes: on a family-26 AMD EPYC oneDNN was 2x faster, on a Zen 3 EPYC 15 %
slower (docs/speed.md). So ``auto`` does not go by the vendor's name: before a model's first float32 step on
the CPU it times that model's own linear layers with both libraries and keeps the faster.

What is timed, for each distinct (in, out) shape of the model's ``nn.Linear`` layers, weighted by how many
layers have it: in training the forward product x W^T + b and the input gradient dy W over ``rows`` tokens
(the weight gradient dy^T x runs on MKL under both choices, :class:`~structnmt.machine.cpu_gemm.OneDNNLinear`),
in decoding the forward product over ``rows`` hypotheses. The two libraries alternate call by call, each
shape's median over ``ROUNDS`` rounds is kept; oneDNN is chosen when it takes at most ``1 - MARGIN`` of MKL's
time (MKL, PyTorch's own default, otherwise: a tie is not worth swapping the layers).

The result is cached per key (the CPU model and stepping, the instruction set PyTorch and oneDNN may use, the
thread count, the torch, MKL and oneDNN versions, the purpose and the shapes) in
``$STRUCTNMT_CACHE_DIR/cpu_gemm.json`` (default ``$XDG_CACHE_HOME/structnmt``, else ``~/.cache/structnmt``):
measured once per machine and model, re-measured when any part of the key changes. A key once written is
never rewritten (a file lock serialises processes that measure at once), so every run on one machine uses
one choice and a resumed run computes as the uninterrupted one. A cache that cannot be read or written costs
a measurement per run and a line in the log, never the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .device import cpu_model_name, cpuinfo

#: rounds of alternated calls per shape; the median is kept
ROUNDS = 5
#: oneDNN must save at least this share of MKL's time to be chosen
MARGIN = 0.03
#: rows timed at most (a large batch's products scale with its rows; the ratio between libraries barely does)
MAX_ROWS = 2048
#: environment variables that hold back an instruction set (the measurement depends on them)
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                 "MKL_DEBUG_CPU_TYPE")
CACHE_FILE = "cpu_gemm.json"


@dataclass(frozen=True)
class GemmChoice:
    """A library for the float32 linear layers and why: ``library`` "mkl" | "onednn"; ``why`` one line for
    the log; ``seconds`` the measured time of the model's products per library (empty when not measured)."""

    library: str
    why: str
    seconds: tuple[tuple[str, float], ...] = ()


def cache_dir() -> Path:
    """Where measurements are kept: ``$STRUCTNMT_CACHE_DIR``, else ``$XDG_CACHE_HOME/structnmt``, else
    ``~/.cache/structnmt``."""
    if os.environ.get("STRUCTNMT_CACHE_DIR"):
        return Path(os.environ["STRUCTNMT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "structnmt"


def linear_shapes(model: nn.Module) -> Counter:
    """(in_features, out_features) -> how many ``nn.Linear`` layers (any subclass) of ``model`` have it."""
    return Counter((m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear))


def machine_key(purpose: str, rows: int, shapes: Counter) -> str:
    """The cache key: everything the measurement depends on, hashed (the readable parts are kept beside)."""
    parts = {
        "cpu": cpu_model_name(), "family": cpuinfo("cpu family"), "model": cpuinfo("model"),
        "stepping": cpuinfo("stepping"), "capability": torch.backends.cpu.get_cpu_capability(),
        "isa_variables": {v: os.environ[v] for v in ISA_VARIABLES if v in os.environ},
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "libraries": hashlib.sha256(torch.__config__.show().encode()).hexdigest()[:16],
        "purpose": purpose, "rows": rows, "shapes": sorted(shapes.items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _products(K: int, N: int, rows: int, purpose: str, onednn: Callable) -> tuple[Callable, Callable]:
    """(MKL's call, oneDNN's call) computing what one layer of this shape computes per step for ``purpose``."""
    gen = torch.Generator().manual_seed(rows + K + N)
    x, w, b = torch.randn(rows, K, generator=gen), torch.randn(N, K, generator=gen), torch.randn(N, generator=gen)
    if purpose == "decode":
        return (lambda: F.linear(x, w, b)), (lambda: onednn(x, w, b))
    dy = torch.randn(rows, N, generator=gen)
    return ((lambda: (F.linear(x, w, b), torch.mm(dy, w))),
            (lambda: (onednn(x, w, b), onednn(dy, w.t(), None))))


def measure(shapes: Counter, rows: int, purpose: str, onednn: Callable, *,
            timer: Callable[[], float] = time.perf_counter, rounds: int = ROUNDS) -> dict[str, float]:
    """Seconds per step of the model's linear products with each library: {"mkl": s, "onednn": s}. Each
    distinct shape: one warm-up call each, then ``rounds`` rounds alternating the libraries; its median times
    how many layers have it."""
    total = {"mkl": 0.0, "onednn": 0.0}
    with torch.no_grad():
        for (K, N), count in sorted(shapes.items()):
            calls = dict(zip(("mkl", "onednn"), _products(K, N, rows, purpose, onednn), strict=True))
            times: dict[str, list[float]] = {"mkl": [], "onednn": []}
            for call in calls.values():
                call()  # warm-up: the library's first call on a shape prepares it
            for r in range(rounds):
                order = ("mkl", "onednn") if r % 2 == 0 else ("onednn", "mkl")
                for name in order:
                    start = timer()
                    calls[name]()
                    times[name].append(timer() - start)
            for name in total:
                total[name] += count * statistics.median(times[name])
    return total


def decide(seconds: dict[str, float]) -> str:
    """oneDNN when it takes at most ``1 - MARGIN`` of MKL's time, else MKL."""
    return "onednn" if seconds["onednn"] <= (1 - MARGIN) * seconds["mkl"] else "mkl"


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (created if need be) for the block: processes measuring at once wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def measured_choice(model: nn.Module, purpose: str, rows: int, onednn: Callable,
                    measure_fn: Callable[..., dict[str, float]] | None = None) -> GemmChoice:
    """The library for ``model``'s linear layers in ``purpose`` ("train" or "decode") with ``rows`` tokens or
    hypotheses a step: from the cache, else measured (``measure_fn``, default :func:`measure`) and cached."""
    measure_fn = measure if measure_fn is None else measure_fn
    rows = max(1, min(rows, MAX_ROWS))
    shapes = linear_shapes(model)
    key = machine_key(purpose, rows, shapes)
    path = cache_dir() / CACHE_FILE
    what = f"{purpose}, {sum(shapes.values())} linear layers, {rows:,} rows, {torch.get_num_threads()} thread(s)"
    try:
        with _locked(path.with_name(path.name + ".lock")):
            entry = _read(path).get(key)
            if entry is None:
                entry = {"seconds": measure_fn(shapes, rows, purpose, onednn), "cpu": cpu_model_name(),
                         "capability": torch.backends.cpu.get_cpu_capability(), "what": what}
                _write(path, {**_read(path), key: entry})
                source = f"measured now ({what}), kept in {path}"
            else:
                source = f"measured before on this machine ({what}; {path})"
    except OSError as e:
        entry = {"seconds": measure_fn(shapes, rows, purpose, onednn)}
        source = f"measured now ({what}); not kept, the cache {path} cannot be written ({e.strerror or e})"
    seconds = {k: float(v) for k, v in entry["seconds"].items()}
    library = decide(seconds)
    why = (f"{'oneDNN' if library == 'onednn' else 'MKL'}: the model's linear products took "
           f"{seconds['mkl'] * 1e3:.2f} ms with MKL, {seconds['onednn'] * 1e3:.2f} ms with oneDNN, {source}; "
           "STRUCTNMT_CPU_GEMM=mkl or onednn fixes the library")
    return GemmChoice(library, why, tuple(sorted(seconds.items())))
