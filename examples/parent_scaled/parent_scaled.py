"""Parent-scaled self-attention (PASCAL; Bugliarello & Okazaki 2020) as a plugin, with no ``forward`` of its own.

Each parent-scaled head h multiplies its attention weights by a Gaussian over the key positions centred on the
position of the query's dependency parent (Bugliarello & Okazaki 2020, §3, "Parent-Scaled Self-Attention"):

    w'_ij = w_ij * N(j; p_i, sigma^2),   N(j; p, sigma^2) = exp(-(j - p)^2 / (2 sigma^2)) / sqrt(2 pi sigma^2)

then uses the scaled weights on the values (``where: weights``, through MultiHeadAttention's ``reweight`` hook,
after the softmax and before dropout). ``p_i`` is a source position: the mean position of the pieces of the
parent word of piece i's word (the paper's "mean" mapping to subwords); the root word's parent is itself. The
authors' released code applies the same Gaussian to the logits ``q k^T / sqrt(d)`` before the softmax instead;
``where: logits`` does that, through the ``logit_bias`` hook (``logits * N - logits`` added to them). The
paper's "parent ignoring" regularisation is not implemented.

This file registers one structure feature (``parent_position``) and one mechanism (``parent_scaled``) when it
is imported; every command loads it with ``--user-dir examples/parent_scaled`` (docs/extending.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from structnmt.config import ConfigError
from structnmt.nn import AttentionContext, AttentionDims, MultiHeadAttention, register_attention
from structnmt.syntax.batching import StructureSpec
from structnmt.syntax.features import Feature, Padding, check_word_of_piece, register_feature

#: the value of ``parent_position`` at EOS and padding: no parent word (the mechanism centres those on themselves)
NO_PARENT = -1.0


def parent_positions(word_of_piece: np.ndarray, trees: dict) -> np.ndarray:
    """(P,) float32: for piece i, the mean source position of the pieces of its word's dependency head (the root
    word: its own pieces). Piece positions are the source positions (pieces first, no BOS; EOS at P)."""
    tree = trees["dependency"]
    w = check_word_of_piece(word_of_piece, len(tree))
    centre = np.bincount(w, weights=np.arange(len(w))) / np.bincount(w)  # (W,) mean piece position of each word
    head = np.asarray(tree.heads, dtype=np.int64) - 1  # 0-based head word; -1 = the root
    head = np.where(head < 0, np.arange(len(tree)), head)  # the root word is its own parent
    return centre[head][w].astype(np.float32)


register_feature(Feature(
    "parent_position", parent_positions, needs=("dependency",), params=(),
    doc="mean position of the pieces of each piece's dependency parent word (P,) float32; dependency tree",
    padding=Padding("sequence", np.float32, pad=NO_PARENT)))  # EOS takes the padding value: no parent


@register_attention("parent_scaled")
class ParentScaledAttention(MultiHeadAttention):
    """Encoder self-attention whose first ``heads`` heads are scaled by N(j; p_i, sigma^2) (module docstring).

    Shapes: query = memory (B, S, D); ``ctx.structures["parent_position"]`` (B, S) float32, ``-1`` at EOS and
    padding (centred on the query itself there); the weights and the Gaussian (B, H, S, S). No parameters
    beyond MHA's.
    """

    @dataclass
    class Options:
        sigma: float = 1.0  # the Gaussian's standard deviation, in pieces
        heads: int | None = None  # parent-scaled heads, the first ones of the layer; None: every head
        where: str = "weights"  # weights: after the softmax (reweight); logits: before it (logit_bias)

    def __init__(self, *, dims: AttentionDims, options: Options):
        super().__init__(dims=dims)
        where = f"model.attention ({dims.cache_key}) parent_scaled"
        if dims.role != "encoder_self":
            raise ConfigError(f"{where}: an encoder self-attention (the parents are source positions); use it "
                              "under encoder_self.")
        if not options.sigma > 0:
            raise ConfigError(f"{where}: sigma={options.sigma}; give a positive standard deviation.")
        if options.heads is not None and not 1 <= options.heads <= dims.heads:
            raise ConfigError(f"{where}: heads={options.heads}; give 1..{dims.heads}, or leave it out for all.")
        if options.where not in ("weights", "logits"):
            raise ConfigError(f"{where}: where={options.where!r}; use weights or logits.")
        self.sigma, self.where = options.sigma, options.where
        self.scaled_heads = options.heads or dims.heads

    def required_structures(self) -> dict[str, StructureSpec]:
        return {"parent_position": StructureSpec("parent_position")}

    def gaussian(self, ctx: AttentionContext, S: int, dtype: torch.dtype) -> Tensor:
        """(B, H, S, S): N(j; p_i, sigma^2) for the scaled heads, 1 for the others; query i, key j."""
        parent = ctx.structures["parent_position"].to(dtype)  # (B, S)
        pos = torch.arange(S, device=parent.device, dtype=dtype)
        centre = torch.where(parent >= 0, parent, pos)  # EOS and padding: centred on themselves
        var = self.sigma ** 2
        g = torch.exp(-(pos[None, None, :] - centre[:, :, None]) ** 2 / (2 * var)) / math.sqrt(2 * math.pi * var)
        g = g[:, None].expand(-1, self.scaled_heads, -1, -1)  # (B, H', S, S)
        if self.scaled_heads == self.heads:
            return g
        return torch.cat([g, g.new_ones(g.shape[0], self.heads - self.scaled_heads, S, S)], dim=1)

    def reweight(self, weights: Tensor, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """weights (B, H, S, S) -> weights * N: a masked key (weight 0) stays 0."""
        if self.where != "weights":
            return weights
        return weights * self.gaussian(ctx, weights.shape[-1], weights.dtype)

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor | None:
        """``where: logits``: (N - 1) * q k^T / sqrt(d), so that the logits become N * q k^T / sqrt(d)."""
        if self.where != "logits":
            return None
        logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, S, S)
        return logits * (self.gaussian(ctx, k.shape[-2], q.dtype) - 1.0)
