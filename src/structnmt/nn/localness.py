"""Localness modelling (Yang et al. 2018, "Modeling Localness for Self-Attention
Networks"): the RHE paper's "Localness" baseline (RHE Table 1, Table 2).

A Gaussian bias added to the logits of every head::

    ATT(Q, K) = softmax(Q K^T / sqrt(d) + G)                       (Yang et al. eq. 4)
    G_ij      = -(j - P_i)^2 / (2 sigma_i^2),   sigma_i = D_i / 2   (eq. 5)
    [P_i; D_i] = I * sigmoid([p_i; z_i])                             (eqs. 6, 9)
    p_i = U_p^T tanh(W_p q_i),   z_i = U_d^T tanh(W_p q_i)           (eqs. 7, 8)

``q_i`` is the query of position ``i``; ``W_p`` is shared by the centre and the window
(Yang et al.: "share the parameter W_p"). ``I`` is the **unpadded** length of the
sentence (its number of valid keys, EOS included), so a sentence gets the same bias
alone and padded in a batch. Positions ``j`` count from 0.

Options:

* ``window: predicted`` (default; the query-specific window D_i of eq. 8) or ``fixed``
  (``D_i = fixed_window`` for every query, Yang et al.'s fixed-window variant, D = 10);
* ``per_head: false`` (default) predicts one centre/window per query from the full query
  vector (B, T, D) and adds the same G to every head; ``true`` predicts them from each
  head's own query (B, H, T, d) with parameters shared by the heads. Yang et al. write the
  formulas for one query vector; which reading they used per head is not stated.

Layers: apply it to the lower encoder layers with per-layer overrides
(``model.attention.overrides: {"encoder_self.0": {name: localness}, ...}``), as Yang et
al. do (configs/rhe/ uses layers 1-2 of the 4-layer recipe). Encoder self-attention only:
in the decoder ``I`` would be the length of the unfinished prefix, which the paper does
not define.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from .attention import (
    AttentionContext,
    AttentionDims,
    MultiHeadAttention,
    merge_heads,
    register_attention,
)

WINDOWS = ("predicted", "fixed")


def gaussian_bias(centre: Tensor, window: Tensor, S: int) -> Tensor:
    """``G_ij = -(j - P_i)^2 / (2 (D_i/2)^2)`` for ``j = 0..S-1``.

    centre, window: (..., T) -> (..., T, S). A window that underflows to 0 is floored at
    1e-4 so the bias stays finite (it is then a very sharp peak, never NaN).
    """
    j = torch.arange(S, device=centre.device, dtype=centre.dtype)
    sigma = (window / 2).clamp_min(1e-4)
    return -((j - centre[..., None]) ** 2) / (2 * sigma[..., None] ** 2)


class LocalnessBias(nn.Module):
    """Yang et al.'s parameters (``W_p``, ``U_p``, ``U_d``) and the bias G they predict;
    used by ``localness`` and by ``rhe`` (``enhancement: localness``).

    d_model, heads: the attention's sizes; options: :class:`LocalnessAttention.Options`.
    """

    def __init__(self, *, d_model: int, heads: int, options: LocalnessAttention.Options):
        super().__init__()
        self.options = options
        width = d_model // heads if options.per_head else d_model
        self.w_p = nn.Linear(width, width, bias=False)
        self.u_p = nn.Linear(width, 1, bias=False)
        self.u_d = nn.Linear(width, 1, bias=False) if options.window == "predicted" else None

    def forward(self, q: Tensor, key_mask: Tensor | None, S: int) -> Tensor:
        """q (B, H, T, d) -> G (B, H or 1, T, S) in float32, ``I`` the unpadded length of each sentence."""
        B = q.shape[0]
        q = q.float()  # positions in float32 (a bf16 centre would be quantised to whole positions)
        length = q.new_full((B,), float(S)) if key_mask is None else key_mask.sum(-1).float()  # (B,) I
        x = q if self.options.per_head else merge_heads(q)[:, None]  # (B, H or 1, T, width)
        hidden = torch.tanh(F.linear(x, self.w_p.weight.float()))
        size = length[:, None, None]  # (B, 1, 1)
        centre = size * torch.sigmoid(F.linear(hidden, self.u_p.weight.float()).squeeze(-1))  # (B, H|1, T)  P_i
        if self.u_d is not None:
            window = size * torch.sigmoid(F.linear(hidden, self.u_d.weight.float()).squeeze(-1))  # D_i
        else:
            window = torch.full_like(centre, self.options.fixed_window)
        return gaussian_bias(centre, window, S)


def check_options(options: LocalnessAttention.Options, where: str) -> None:

    if options.window not in WINDOWS:
        raise ConfigError(f"{where}: unknown window '{options.window}'; use one of {', '.join(WINDOWS)}.")
    if options.fixed_window <= 0:
        raise ConfigError(f"{where}: fixed_window must be > 0, got {options.fixed_window}.")


@register_attention("localness")
class LocalnessAttention(MultiHeadAttention):
    """Multi-head self-attention with a learned Gaussian localness bias (Yang et al. 2018)."""

    @dataclass
    class Options:
        window: str = "predicted"  # predicted (eq. 8) | fixed (D = fixed_window)
        fixed_window: float = 10.0  # D of the fixed-window variant (Yang et al.: 10)
        per_head: bool = False  # True: each head predicts its own centre/window from its query

    def __init__(self, *, dims: AttentionDims, options: LocalnessAttention.Options | None = None):
        super().__init__(dims=dims)

        options = options if options is not None else LocalnessAttention.Options()
        if dims.role != "encoder_self":
            raise ConfigError(
                f"model.attention ({dims.cache_key}): localness is defined for encoder self-attention only (its "
                "formula needs the sentence length I); use it under encoder_self or an 'encoder_self.<layer>' override."
            )
        check_options(options, f"model.attention ({dims.cache_key}) localness options")
        self.bias = LocalnessBias(d_model=dims.d_model, heads=dims.heads, options=options)

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """G (B, H or 1, T, S): eqs. 5-9 with ``I`` the unpadded length of each sentence."""
        return self.bias(q, ctx.key_mask, k.shape[2])
