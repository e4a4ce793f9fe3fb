"""Dropout (Srivastava et al. 2014) with a mask drawn from uniform numbers, not Bernoulli draws.

``F.dropout`` on the CPU draws its mask with ``bernoulli_``, which costs about three
times a ``torch.rand_like`` of the same size (benchmarks/README.md); the residual and
feed-forward dropouts were about 10 % of a Multi30k training step. Here the mask is
``rand >= p`` scaled by ``1 / (1 - p)``: the same distribution (each unit kept with
probability 1 - p, kept units scaled so the expectation is unchanged), another random
stream. :func:`residual_dropout` fuses the residual addition: ``x + mask * y`` in one
``addcmul``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def dropout_mask(like: Tensor, p: float) -> Tensor:
    """A mask shaped like ``like``: ``1 / (1 - p)`` with probability 1 - p, else 0 (``like``'s dtype)."""
    dtype = like.dtype if like.dtype in (torch.float32, torch.float64) else torch.float32
    mask = torch.rand(like.shape, dtype=dtype, device=like.device).ge_(p).mul_(1.0 / (1.0 - p))
    return mask.to(like.dtype)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout of ``x`` (any shape); identity when not training or ``p == 0``."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return F.dropout(x, p, True)  # all zeros, torch's behaviour
    return x * dropout_mask(x, p)


def residual_dropout(x: Tensor, y: Tensor, p: float, training: bool) -> Tensor:
    """``x + dropout(y)`` (shapes equal) in one fused operation."""
    if not training or p == 0.0:
        return x + y
    if p >= 1.0:
        return x + F.dropout(y, p, True)
    return torch.addcmul(x, y, dropout_mask(y, p))
