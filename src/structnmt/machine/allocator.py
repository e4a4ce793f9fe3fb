"""Keep freed tensor memory in the process instead of returning it to the kernel (CPU).

PyTorch's CPU allocator has no cache: every tensor is ``malloc``'d and ``free``'d. glibc
serves allocations above its mmap threshold (128 KiB, adapting up to 32 MiB) with a
fresh ``mmap`` and returns them with ``munmap`` on free, and trims the top of its heap
when more than its trim threshold is free, so much of the next step's memory is new
again and every one of its pages faults on first touch (the
kernel zeroes it). Training re-allocates its activations every step; measured on the
2-core Xeon (benchmarks/README.md, ``bench_train.py --malloc-compare``), a training step
is about 1.3x faster with this setting, the arithmetic unchanged (only where memory
comes from). Decoding showed no measurable difference (``bench_decode.py
--malloc-compare``): glibc's adaptive threshold already serves its repeated sizes.

:func:`configure_allocator` raises glibc's mmap threshold (allocations come from the
heap) and its trim threshold (freed heap memory stays with the process for the next
step). The cost is resident memory: the process keeps its peak heap instead of giving
memory back between steps. It is a process setting; the command line applies it at
start (``structnmt train``, ``translate``, ``experiment``, ... and their subprocesses),
the library never does on import. ``STRUCTNMT_MALLOC=system`` turns it off. On systems
without glibc (macOS, Windows, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from ..errors import UserError

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap
TRIM_THRESHOLD = (1 << 31) - 1  # up to 2 GiB of freed heap memory stays with the process

_applied: str | None = None


def configure_allocator(mode: str | None = None) -> str:
    """Apply the allocator setting once per process; returns what is in effect.

    ``mode``: ``"retain"`` (keep freed memory, the default), ``"system"`` (glibc's own
    behaviour, nothing changed); ``None`` reads ``STRUCTNMT_MALLOC`` (default
    ``retain``). Returns ``"retain"``, ``"system"``, or ``"unsupported"`` (no glibc).
    """
    global _applied
    mode = (mode or os.environ.get("STRUCTNMT_MALLOC") or "retain").strip().lower()
    if mode not in ("retain", "system"):

        raise UserError(f"STRUCTNMT_MALLOC={mode!r} is not a setting; use 'retain' (the default) or 'system'")
    if mode == "system":
        _applied = _applied or "system"
        return "system"
    if _applied == "retain":
        return "retain"
    libc = _glibc()
    if libc is None:
        return "unsupported"
    ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        return "unsupported"
    _applied = "retain"
    return "retain"


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if not hasattr(libc, "gnu_get_libc_version"):  # only glibc has it (musl does not)
            return None
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc
