"""Counting the operator calls of a piece of work: what a GPU launches, measured on any device.

On a GPU, a small model's step is bound by the Python process that launches its kernels, not by the kernels:
every ATen operator call costs the dispatcher and (for a computing operator) a kernel launch of a few
microseconds, whatever the tensor's size. :class:`OpCounter` counts the calls below autograd (torch's
``TorchDispatchMode``), so the backward pass's operators are counted too, and the count is the same on a CPU
and a GPU for the same work (the CPU is where it is measured and tested), with three exceptions: a composite
operator that has its own backward formula (``logsumexp``, ``lstm`` cells, ...) counts as one call although it
may launch several kernels; an operator whose GPU version is one fused call (cuDNN's LSTM) may be a different
call on the CPU (oneDNN's, one per layer and direction); and bf16 autocast, the trainer's default on CUDA, adds
the casts (``_to_copy``) of its inputs there. Operators that only make a view
(``view``, ``transpose``, ``expand``, ...: no kernel) are counted apart, in :attr:`OpCounter.views`.

    with OpCounter() as ops:
        loss = model(...).sum()
        loss.backward()
    ops.total, ops.kernels, ops.counts.most_common(5)
"""

from __future__ import annotations

from collections import Counter

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

READS = frozenset({"tolist", "item", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"})
"""Tensor methods by which the host reads a tensor's values (on a GPU, each one of a device tensor waits for
every kernel launched before it)."""


class _Dispatch(TorchDispatchMode):
    """The ATen calls below autograd, by operator name, and how many of them make views."""

    def __init__(self, counter: OpCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counter.counts[str(func.overloadpacket)] += 1
        if func.is_view:
            self.counter.views += 1
        return func(*args, **(kwargs or {}))


class _Reads(TorchFunctionMode):
    """The host's reads of tensor values (:data:`READS`)."""

    def __init__(self, counter: OpCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            self.counter.reads += 1
        return func(*args, **(kwargs or {}))


class OpCounter:
    """Counts ATen operator calls (forward, backward and optimizer alike) and the host's reads of tensor values
    while it is entered.

    ``counts``: calls per operator name (``aten.mm``, ...); ``views``: the calls of view-only operators among
    them; :attr:`total` and :attr:`kernels` (the calls that compute, what a GPU launches); ``reads``: the host's
    reads of tensor values (``.tolist()``, ``.item()``, ``bool(t)``, ``.cpu()``, ...): on a GPU those of device
    tensors are syncs, which stall the launch queue; counted on the CPU, where every tensor is a host tensor,
    they also include reads of data that never leaves the host (a batch before it moves, an LSTM's packed
    lengths). They are not every sync: an operator whose output's size depends on values (``nonzero``,
    boolean-mask indexing) waits for the device too and is counted only as a call."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.views = 0
        self.reads = 0
        self._modes = (_Reads(self), _Dispatch(self))

    def __enter__(self) -> OpCounter:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @property
    def total(self) -> int:
        """Every operator call."""
        return sum(self.counts.values())

    @property
    def kernels(self) -> int:
        """The calls that are not views: each one a kernel (or more) on a GPU."""
        return self.total - self.views
