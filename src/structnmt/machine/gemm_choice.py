"""``STRUCTNMT_CPU_GEMM=auto``: MKL or oneDNN for a model's float32 linear layers, chosen by measuring them.

Which library multiplies a small Transformer's matrices faster depends on the CPU, its instruction set (AVX2
or AVX-512, and what an environment variable such as ``ONEDNN_MAX_CPU_ISA`` holds back), the thread count,
the library versions and the shapes: on a family-26 AMD EPYC oneDNN was 2x faster, on a Zen 3 EPYC 15 %
slower (docs/speed.md). So ``auto`` does not go by the vendor's name: before a model's first float32 step on
the CPU it times that model's own linear layers with both libraries and keeps the faster.

What is timed, for each distinct (in, out) shape of the model's ``nn.Linear`` layers, weighted by how many
layers have it: in training the forward product x W^T + b and the input gradient dy W over ``rows`` tokens
(the weight gradient dy^T x runs on MKL under both choices, :class:`~structnmt.machine.cpu_gemm.OneDNNLinear`),
in decoding the forward product over ``rows``, ``rows/2``, ... 8 hypotheses (:func:`row_ladder`: a search's
steps shrink as sentences finish, and oneDNN's fixed cost per call, about 20 us against MKL's 10 us on a Zen 4
held to AVX2, loses the small products it wins the large ones). The two libraries alternate call by call,
each count's median over ``ROUNDS`` rounds is kept. Each shape goes to the faster library: oneDNN when it
takes at most ``1 - MARGIN`` of MKL's time (MKL, PyTorch's own default, otherwise: a tie is not worth swapping
the layer), so a model may run its 10,000-way output projection on oneDNN and its small layers on MKL.

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
#: what is timed (part of the cache key: a change of method measures again). 2: decoding times the layers
METHOD = 2


@dataclass(frozen=True)
class GemmChoice:
    """Where the float32 linear layers run and why: ``library`` "mkl" (every layer), "onednn" (every layer)
    or "mixed" (the layers whose (in, out) shape is in ``onednn_shapes`` on oneDNN, the others on MKL);
    ``why`` one line for the log; ``seconds`` the measured time of the model's products per step with MKL
    alone, oneDNN alone and as chosen (empty when not measured)."""

    library: str
    why: str
    onednn_shapes: frozenset[tuple[int, int]] | None = None
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
        "purpose": purpose, "rows": rows, "shapes": sorted(shapes.items()), "method": METHOD,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def row_ladder(rows: int, purpose: str) -> list[int]:
    """The row counts timed: training multiplies a whole batch (``rows``); a beam search's step multiplies
    the hypotheses still alive, from ``rows`` down as sentences finish, so decoding times ``rows``, ``rows/2``,
    ... down to 8 (a library's fixed cost per call, which dominates the small products of a search's last
    steps, is part of the measurement)."""
    if purpose != "decode":
        return [rows]
    ladder = [rows]
    while ladder[-1] // 2 >= 8:
        ladder.append(ladder[-1] // 2)
    return ladder


def _products(K: int, N: int, rows: int, purpose: str, onednn: Callable,
              onednn_layer: Callable[[nn.Linear], nn.Module] | None = None) -> tuple[Callable, Callable]:
    """(MKL's call, oneDNN's call) computing what one layer of this shape computes per step for ``purpose``.
    Decoding with ``onednn_layer`` (a function giving the oneDNN version of an ``nn.Linear``) times the two
    layers themselves, so that a swapped layer's own cost per call (its Python path) is measured: a beam
    search calls every layer thousands of times a sentence on few rows."""
    gen = torch.Generator().manual_seed(rows + K + N)
    x, w, b = torch.randn(rows, K, generator=gen), torch.randn(N, K, generator=gen), torch.randn(N, generator=gen)
    if purpose == "decode" and onednn_layer is not None:
        plain = nn.Linear(K, N)
        swapped = onednn_layer(plain)
        return (lambda: plain(x)), (lambda: swapped(x))
    if purpose == "decode":
        return (lambda: F.linear(x, w, b)), (lambda: onednn(x, w, b))
    dy = torch.randn(rows, N, generator=gen)
    return ((lambda: (F.linear(x, w, b), torch.mm(dy, w))),
            (lambda: (onednn(x, w, b), onednn(dy, w.t(), None))))


def _timed(calls: dict[str, Callable], timer: Callable[[], float], rounds: int) -> dict[str, float]:
    """Median seconds of each call over ``rounds`` rounds, the libraries alternating, after one warm-up call
    each (a library's first call on a shape prepares it)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            start = timer()
            calls[name]()
            times[name].append(timer() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(shapes: Counter, rows: int, purpose: str, onednn: Callable, *,
            timer: Callable[[], float] = time.perf_counter, rounds: int = ROUNDS,
            onednn_layer: Callable[[nn.Linear], nn.Module] | None = None) -> dict[tuple[int, int], dict]:
    """Seconds per step of each distinct linear shape (K, N) with each library, for all the layers that have
    it: {(K, N): {"mkl": s, "onednn": s}}. Each shape is timed at every row count of :func:`row_ladder`
    (summed), each count by :func:`_timed`, and multiplied by how many layers have the shape."""
    out: dict[tuple[int, int], dict] = {}
    with torch.no_grad():
        for (K, N), count in sorted(shapes.items()):
            total = {"mkl": 0.0, "onednn": 0.0}
            for m in row_ladder(rows, purpose):
                calls = dict(zip(("mkl", "onednn"), _products(K, N, m, purpose, onednn, onednn_layer), strict=True))
                for name, sec in _timed(calls, timer, rounds).items():
                    total[name] += count * sec
            out[(K, N)] = total
    return out


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


def _encode(seconds: dict[tuple[int, int], dict]) -> dict[str, dict]:
    return {f"{K}x{N}": {k: float(v) for k, v in t.items()} for (K, N), t in seconds.items()}


def _decode(stored: dict) -> dict[tuple[int, int], dict]:
    out = {}
    for shape, t in stored.items():
        K, N = (int(x) for x in shape.split("x"))
        out[(K, N)] = {"mkl": float(t["mkl"]), "onednn": float(t["onednn"])}
    return out


def _cached_seconds(shapes: Counter, rows: int, purpose: str, onednn: Callable,
                    measure_fn: Callable) -> tuple[dict[tuple[int, int], dict], str]:
    """The per-shape seconds of :func:`measure` from the cache, else measured now and kept; and where from."""
    key = machine_key(purpose, rows, shapes)
    path = cache_dir() / CACHE_FILE
    what = f"{purpose}, {sum(shapes.values())} linear layers, {rows:,} rows, {torch.get_num_threads()} thread(s)"
    try:
        with _locked(path.with_name(path.name + ".lock")):
            entry = _read(path).get(key)
            if entry is not None:
                return _decode(entry["seconds"]), f"measured before on this machine ({what}; {path})"
            seconds = measure_fn(shapes, rows, purpose, onednn)
            entry = {"seconds": _encode(seconds), "cpu": cpu_model_name(), "what": what,
                     "capability": torch.backends.cpu.get_cpu_capability()}
            _write(path, {**_read(path), key: entry})
            return seconds, f"measured now ({what}), kept in {path}"
    except OSError as e:
        seconds = measure_fn(shapes, rows, purpose, onednn)
        return seconds, f"measured now ({what}); not kept, the cache {path} cannot be written ({e.strerror or e})"


def measured_choice(model: nn.Module, purpose: str, rows: int, onednn: Callable,
                    measure_fn: Callable[..., dict] | None = None) -> GemmChoice:
    """Where ``model``'s linear layers run in ``purpose`` ("train" or "decode") with ``rows`` tokens or
    hypotheses a step: each (in, out) shape on the library :func:`decide` finds faster for it, from the
    cache, else measured (``measure_fn``, default :func:`measure`) and cached."""
    rows = max(1, min(rows, MAX_ROWS))
    shapes = linear_shapes(model)
    seconds, source = _cached_seconds(shapes, rows, purpose, onednn, measure if measure_fn is None else measure_fn)
    fast = frozenset(shape for shape, t in seconds.items() if decide(t) == "onednn")
    totals = {lib: sum(t[lib] for t in seconds.values()) for lib in ("mkl", "onednn")}
    totals["chosen"] = sum(t["onednn"] if shape in fast else t["mkl"] for shape, t in seconds.items())
    library = "mkl" if not fast else "onednn" if fast == set(seconds) else "mixed"
    where = {"mkl": "MKL", "onednn": "oneDNN"}.get(library) or (
        f"oneDNN for {', '.join(f'{K}->{N}' for K, N in sorted(fast))} (in->out), MKL for the other shapes")
    why = (f"{where}: the model's linear products took {totals['mkl'] * 1e3:.2f} ms with MKL alone, "
           f"{totals['onednn'] * 1e3:.2f} ms with oneDNN alone, {totals['chosen'] * 1e3:.2f} ms as chosen, "
           f"{source}; STRUCTNMT_CPU_GEMM=mkl or onednn fixes the library")
    return GemmChoice(library, why, fast if library == "mixed" else None, tuple(sorted(totals.items())))
