"""Label-smoothed cross entropy (Szegedy et al. 2016), summed over non-padding tokens."""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.vocab import PAD


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, nll sum), PAD ignored.

    loss = (1 - eps) * nll + eps * mean_v(-log p_v): the smoothing mass is spread
    uniformly over the vocabulary.
    """
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    keep = target != PAD
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    nll = nll.masked_fill(~keep, 0.0).sum()
    smooth = smooth.masked_fill(~keep, 0.0).sum()
    return (1.0 - epsilon) * nll + epsilon * smooth, nll
