"""Which library multiplies the linear layers' float32 matrices on the CPU: MKL or oneDNN.

PyTorch's CPU build multiplies float32 matrices with Intel's MKL (``torch.mm``, ``F.linear``). On AMD CPUs
MKL does not take its fastest code paths, and oneDNN — also inside every PyTorch CPU build, where it serves
bfloat16 and convolutions — is faster for the shapes of a small Transformer. Measured on a 2-core AMD EPYC
(family 26, AVX-512; 2 threads; benchmarks/bench_gemm.py and benchmarks/README.md): a linear layer's forward
over 4,096 tokens, d 128 -> 256, 2.1x faster with oneDNN; its input gradient 2.2x; the 10,000-way output
projection of a decoding step (640 hypotheses) 2.9x. The weight gradient is the exception: over many tokens
into a large output (10,000 x 128 from 4,096 tokens) oneDNN is slower than MKL, so it stays with MKL.

:class:`OneDNNLinear` is an ``nn.Linear`` whose forward and input gradient run oneDNN's fp32 inner-product
kernel (PyTorch's ``mkldnn::_linear_pointwise``, the kernel its own compiler emits for CPU linear layers) and
whose weight gradient runs ``torch.mm``; the arithmetic is float32 either way, summed in another order
(results within float32 rounding of MKL's: tests/test_cpu_gemm.py). :func:`with_cpu_gemm` gives a model whose
``nn.Linear`` modules are OneDNNLinear sharing the same parameters, when the backend chosen is oneDNN:

* ``STRUCTNMT_CPU_GEMM=auto`` (the default): the faster of the two for this model on this machine, measured
  (:mod:`structnmt.machine.gemm_choice`: the model's own shapes, cached per CPU, instruction set, thread count
  and library versions; the training log says which and why);
* ``STRUCTNMT_CPU_GEMM=onednn`` or ``mkl``: that library, whatever the CPU.

Applied where the toolkit runs float32 on the CPU: the trainer's model (``structnmt train`` and the runner),
and the decoder of ``translate`` and validation BLEU (:func:`structnmt.decode.translate.decoding_model`).
bfloat16 already runs on oneDNN in PyTorch; int8 has its own kernels (FBGEMM); a GPU is not touched. The
layer's backward is first-order only (``once_differentiable``): a double backward through a linear layer, or a
``torch.func`` transform of it, raises instead of computing (nothing in the toolkit does either; the matrix-tree
marginals' second derivative never reaches a linear layer).
"""

from __future__ import annotations

import copy
import functools
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..errors import UserError
from . import gemm_choice
from .device import cpuinfo
from .gemm_choice import GemmChoice, measured_choice

ENV = "STRUCTNMT_CPU_GEMM"
CHOICES = ("auto", "onednn", "mkl")


@functools.lru_cache(maxsize=1)
def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN's linear kernel (every x86 CPU build does)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def cpu_vendor() -> str | None:
    """The CPU's vendor id (``/proc/cpuinfo``: GenuineIntel, AuthenticAMD, ...), or None where unknown."""
    return cpuinfo("vendor_id")


def choose(model: nn.Module, purpose: str = "train", rows: int = 4096) -> GemmChoice:
    """The library for ``model``'s float32 linear layers on the CPU, from ``STRUCTNMT_CPU_GEMM``: ``auto``
    measures (:func:`structnmt.machine.gemm_choice.measured_choice`; ``purpose`` "train" or "decode", ``rows``
    the tokens or hypotheses of a step), ``mkl`` or ``onednn`` is taken as given."""
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise UserError(f"{ENV}={os.environ[ENV]!r}: give auto (the faster library, measured on this machine), "
                        "onednn or mkl.")
    if choice == "onednn" and not onednn_available():
        raise UserError(f"{ENV}=onednn: this PyTorch has no oneDNN linear kernel; set {ENV}=mkl (or auto).")
    if choice != "auto":
        return GemmChoice(choice, f"{'oneDNN' if choice == 'onednn' else 'MKL'}: {ENV}={choice}")
    if not onednn_available():
        return GemmChoice("mkl", "MKL: this PyTorch has no oneDNN linear kernel to measure against")
    measure = functools.partial(gemm_choice.measure, onednn_layer=_onednn_layer)
    return measured_choice(model, purpose, rows, _onednn, measure_fn=measure)


def _onednn_layer(layer: nn.Linear) -> nn.Module:
    """The :class:`OneDNNLinear` version of ``layer`` (the same parameters), for the measurement of decoding."""
    return to_onednn(nn.Sequential(layer), in_place=False)[0]


def _onednn(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (M, K) @ weight (N, K)^T + bias (N,) by oneDNN's float32 inner product -> (M, N)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinearFn(torch.autograd.Function):
    """y = x W^T + b (x (M, K), W (N, K), b (N,) or None): forward and dx = dy W by oneDNN, dW = dy^T x by torch.mm."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        # what the backward reads, and only that: x for the weight's gradient, the weight for x's
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight if ctx.needs_input_grad[0] else None)
        ctx.has_bias = bias is not None
        return _onednn(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        gx = _onednn(grad, weight.t(), None) if ctx.needs_input_grad[0] else None
        gw = torch.mm(grad.t(), x) if ctx.needs_input_grad[1] else None
        gb = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


class OneDNNLinear(nn.Linear):
    """``nn.Linear`` on oneDNN for float32 CPU tensors (see the module docstring); anything else as nn.Linear.

    input (..., in_features) -> (..., out_features); the same parameters and state dict as nn.Linear."""

    def forward(self, input: Tensor) -> Tensor:
        if not (input.device.type == "cpu" and input.dtype == torch.float32 and self.weight.dtype == torch.float32
                and input.numel() and not torch.is_autocast_enabled("cpu")):
            return F.linear(input, self.weight, self.bias)
        lead = input.shape[:-1]
        out = _OneDNNLinearFn.apply(input.reshape(-1, self.in_features), self.weight, self.bias)
        return out.view(*lead, self.out_features)


def uses_onednn(model: nn.Module) -> bool:
    """Whether any linear layer of ``model`` is a :class:`OneDNNLinear`."""
    return any(isinstance(m, OneDNNLinear) for m in model.modules())


def with_cpu_gemm(model: nn.Module, *, in_place: bool, choice: GemmChoice | None = None,
                  purpose: str = "train", rows: int = 4096) -> nn.Module:
    """``model`` with its linear layers on ``choice``'s library (default: :func:`choose` for ``purpose`` and
    ``rows``): MKL, ``model`` itself; oneDNN, :func:`to_onednn` (``in_place`` for a trainer's own model; a
    decoder's view of a model the caller keeps swaps a copy of the module tree that shares every parameter)."""
    choice = choose(model, purpose, rows) if choice is None else choice
    if choice.library == "mkl":
        return model
    return to_onednn(model, in_place=in_place, shapes=choice.onednn_shapes)


def to_onednn(model: nn.Module, *, in_place: bool, shapes: frozenset[tuple[int, int]] | None = None) -> nn.Module:
    """``model`` with every ``nn.Linear`` module (exactly that class; with ``shapes``, only those whose
    (in_features, out_features) is in it) a :class:`OneDNNLinear` holding the same parameters (tied weights
    stay tied). ``in_place``: swapped in ``model``; otherwise in a copy of the module tree sharing every
    parameter and buffer with ``model`` (no weight copied). A model without such a module is returned as it is."""
    def wanted(m: nn.Module) -> bool:
        return type(m) is nn.Linear and (shapes is None or (m.in_features, m.out_features) in shapes)

    if not any(wanted(m) for m in model.modules()):
        return model
    if not in_place:
        shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
        model = copy.deepcopy(model, memo=shared)
    return _swap(model, nn.Linear, OneDNNLinear, shapes)


def to_plain(model: nn.Module) -> nn.Module:
    """``model`` with every :class:`OneDNNLinear` an ``nn.Linear`` again holding the same parameters, in place
    (before PyTorch's int8 quantization, which converts modules of exactly that class)."""
    return _swap(model, OneDNNLinear, nn.Linear, None)


def _swap(model: nn.Module, old: type[nn.Linear], new: type[nn.Linear],
          shapes: frozenset[tuple[int, int]] | None) -> nn.Module:
    """Every submodule of exactly class ``old`` (with ``shapes``: of an (in, out) shape in it) replaced, in
    place, by one of class ``new`` with the same attributes (the same parameters and hooks)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is old and (shapes is None or (child.in_features, child.out_features) in shapes):
                swapped = new.__new__(new)
                swapped.__dict__.update(child.__dict__)
                setattr(parent, name, swapped)
    return model
