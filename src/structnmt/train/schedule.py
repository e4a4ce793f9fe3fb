"""Inverse square-root learning-rate schedule with linear warm-up (Vaswani et al. 2017; fairseq)."""

from __future__ import annotations

import math


def inverse_sqrt_lr(step: int, *, lr: float, warmup: int, warmup_init_lr: float = 1e-7) -> float:
    """Learning rate for update ``step`` (1-based): linear warm-up to ``lr`` over
    ``warmup`` updates, then ``lr * sqrt(warmup / step)``."""
    if warmup > 0 and step < warmup:
        return warmup_init_lr + (lr - warmup_init_lr) * step / warmup
    return lr * math.sqrt(max(warmup, 1) / max(step, 1))
