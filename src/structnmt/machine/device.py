"""Which device a command computes on (beneath training and decoding alike)."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

import torch

from ..errors import UserError


def get_device(name: str) -> torch.device:
    """``auto`` (CUDA when visible, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a user error
    for an unknown name or a GPU that is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is unknown; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r}: no CUDA GPU is visible to this process; use cpu or auto.")
    return device


def device_type(name: str) -> str:
    """The kind of a device name as configs and records hold it: ``cuda:1`` -> ``cuda``, ``cpu`` -> ``cpu``
    (``auto`` stays ``auto``: not resolved)."""
    return name.split(":", 1)[0]


def trains_in_bf16(device: str, bf16: bool) -> bool:
    """Whether training on ``device`` (a resolved name, ``cuda:N`` included) with ``train.bf16`` runs under bf16
    autocast: ``train.bf16`` acts on CUDA only, so on a CPU training is float32 whatever it says."""
    return bool(bf16) and device_type(device) == "cuda"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one, as under
    taskset or a container's cpuset), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cap_workers(requested: int, what: str, limits: Sequence[tuple[int, str]] = ()) -> tuple[int, str | None]:
    """How many worker processes to start when ``requested`` were asked for: at most the CPUs this process may use
    (:func:`usable_cores`) and each of ``limits`` (``(count, what it counts)``, e.g. ``(300, "300 lines")``: what the
    input gives the processes to do), at least 1. Every worker option goes through here (``prepare --workers`` and
    ``--spacy-processes``, ``parse --spacy-processes``, ``translate --workers``, ``experiment --jobs``, ``tag
    --jobs``): processes beyond the CPUs only take turns on them, and each one starts Python and imports torch.

    Returns ``(count, note)``: ``note`` is one line saying what was chosen and why when the request was capped
    (``what`` names the command and option: ``"prepare: --workers 1000 capped at 2 (2 CPUs, 300 lines)"``), else
    None."""
    cpus = usable_cores()
    bounds = [(cpus, f"{cpus} CPU{'s' if cpus != 1 else ''}"), *limits]
    chosen = max(1, min([requested, *(n for n, _ in bounds)]))
    if chosen >= requested:
        return requested, None
    why = ", ".join(text for n, text in bounds if n < requested)
    return chosen, f"{what} {requested} capped at {chosen} ({why})"


def set_threads(n: int, key: str = "train.threads") -> None:
    """``torch.set_num_threads(n)`` for ``n > 0`` (0 leaves the default), or one sentence when ``n`` is more than
    the CPUs this process may use: more threads than CPUs only take turns on them (every step slower), and a
    count in the thousands crashes OpenMP's runtime without a message."""
    if n <= 0:
        return
    cores = usable_cores()
    if n > cores:
        raise UserError(f"{key}={n}: this machine gives this process {cores} CPU(s); more threads than CPUs only slow "
                        f"each other (and a very large count crashes OpenMP): use at most {key}={cores}.")
    use_threads(n)


def use_threads(n: int) -> None:
    """``torch.set_num_threads(n)``, unless torch already computes on ``n`` threads (``OMP_NUM_THREADS=n``, or the
    default on ``n`` cores): then nothing is called.

    The call is not free even when it changes nothing. On the 2-core AMD EPYC (Zen 4, torch 2.13.0, 2 threads,
    2026-11-29; ``benchmarks/bench_set_threads.py``) ``F.scaled_dot_product_attention``'s CPU kernel, forward and
    backward at transformer_tiny's training shapes, was 1.64x slower after ``torch.set_num_threads(2)`` with the
    count torch already had (1.69x with the kernels held to AVX2); a linear layer 1.16x (1.01x held to AVX2). Besides
    OpenMP's count the call fixes MKL's thread count for the calling thread and turns MKL's dynamic adjustment off;
    in ad-hoc runs either MKL setting alone reproduced the slowdown and restoring both afterwards did not undo it,
    so the likely cause is MKL's GEMMs running multi-threaded inside the kernel's own parallel loop. A count other
    than the current one has to be set (not measured; at one thread there is no parallel loop to slow)."""
    if n != torch.get_num_threads():
        torch.set_num_threads(n)


def cpuinfo(field: str) -> str | None:
    """The value of ``field`` (``model name``, ``vendor_id``, ...) in ``/proc/cpuinfo``, or None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == field:
                    return value.strip()
    except OSError:
        return None
    return None


def cpu_model_name() -> str:
    """The CPU's model name, so that a benchmark's table says which machine it was measured on."""
    return cpuinfo("model name") or platform.processor() or "unknown CPU"


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags (``/proc/cpuinfo``), or None where they cannot be read (not Linux)."""
    flags = cpuinfo("flags")
    return None if flags is None else set(flags.split())


def cpu_has_bfloat16() -> bool | None:
    """Whether the CPU computes in bfloat16 natively (AVX512-BF16 or AMX); None when unknown."""
    flags = cpu_flags()
    return None if flags is None else bool(flags & {"avx512_bf16", "amx_bf16"})


def slow_dtype_refusal(dtype: str, device: torch.device) -> str | None:
    """Why decoding in ``dtype`` on ``device`` would be slower than float32, or None.

    bfloat16 on a CPU without bfloat16 arithmetic is emulated: decoding measured 0.31x fairseq
    against float32's 1.54x on an AMD EPYC (Zen 3, AVX2; benchmarks/README.md). int8 is not
    refused: it was faster than float32 on every CPU measured."""
    if dtype != "bfloat16" or device.type != "cpu" or cpu_has_bfloat16() is not False:
        return None
    return ("this CPU has no bfloat16 arithmetic (no AVX512-BF16 or AMX), so bfloat16 is emulated and decodes "
            "about 5x slower than float32 (benchmarks/README.md)")
