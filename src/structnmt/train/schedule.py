"""Learning-rate schedules: inverse square root with linear warm-up (Vaswani et al. 2017;
fairseq), and a constant rate halved whenever the validation perplexity rises (SA-NMT §4.3,
OpenNMT-py's decay on a rise), whose current factor the trainer keeps in its run state."""

from __future__ import annotations

import math


def inverse_sqrt_lr(step: int, *, lr: float, warmup: int, warmup_init_lr: float = 1e-7) -> float:
    """Learning rate for update ``step`` (1-based): linear warm-up to ``lr`` over
    ``warmup`` updates, then ``lr * sqrt(warmup / step)``."""
    if warmup > 0 and step < warmup:
        return warmup_init_lr + (lr - warmup_init_lr) * step / warmup
    return lr * math.sqrt(max(warmup, 1) / max(step, 1))


def halve_on_rise_lr(step: int, *, lr: float, warmup: int, scale: float, warmup_init_lr: float = 1e-7) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` updates, then ``lr``; times ``scale`` (0.5 per rise)."""
    if warmup > 0 and step < warmup:
        return (warmup_init_lr + (lr - warmup_init_lr) * step / warmup) * scale
    return lr * scale
