"""A sixth mechanism as a plugin: encoder self-attention biased by dependency-tree distance.

Each head h adds ``-w_h * d(i, j)`` to its logits, ``d(i, j)`` the number of arcs on the
path between the words of pieces ``i`` and ``j`` in the dependency tree, clipped at
``max_distance`` (pieces of one word: 0), ``w_h >= 0`` learned per head (``softplus`` of a
parameter). Nothing of structnmt is edited: this file registers one structure feature and
one mechanism when it is imported, and every command loads it with
``--user-dir examples/tree_distance`` (docs/extending.md walks through it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structnmt.config import ConfigError
from structnmt.nn import AttentionContext, AttentionDims, MultiHeadAttention, register_attention
from structnmt.syntax.batching import StructureSpec
from structnmt.syntax.features import Feature, Padding, check_word_of_piece, register_feature

MAX_DISTANCE = 8


def tree_distances(word_of_piece: np.ndarray, trees: dict, clip: int = MAX_DISTANCE) -> np.ndarray:
    """(P, P) int64: arcs between the words of pieces i and j in the dependency tree, at most ``clip``."""
    tree = trees["dependency"]
    n = len(tree)
    hops = np.full((n, n), clip, dtype=np.int64)
    neighbours = [[] for _ in range(n)]
    for head, dep in tree.edges():  # 0-based (head, dependent) pairs
        neighbours[head].append(dep)
        neighbours[dep].append(head)
    for start in range(n):  # breadth-first search from every word
        hops[start, start] = 0
        frontier, seen = [start], {start}
        for d in range(1, clip):
            frontier = [m for w in frontier for m in neighbours[w] if m not in seen]
            seen.update(frontier)
            hops[start, frontier] = d
    w = check_word_of_piece(word_of_piece, n)
    return hops[np.ix_(w, w)]


register_feature(Feature(
    "tree_distance", tree_distances, needs=("dependency",), params=("clip",),
    doc="dependency-tree distance between the words of two pieces, clipped (P, P) int64; dependency tree",
    # padding and EOS at the largest distance; the diagonal 0 (every position is at distance 0 of itself)
    padding=Padding("pairwise", np.int64, pad=MAX_DISTANCE, diagonal=0),
    example={"clip": MAX_DISTANCE}))


@register_attention("tree_distance")
class TreeDistanceAttention(MultiHeadAttention):
    """MHA plus a learned per-head penalty on tree distance: logits - w_h d(i, j).

    Shapes: query = memory (B, S, D); ``ctx.structures["tree_distance"]`` (B, S, S) int64;
    the bias (B, H, S, S). Parameters: those of MHA and ``raw_weight`` (H,), ``w = softplus``.
    """

    @dataclass
    class Options:
        init: float = 0.5  # the initial w_h of every head

    def __init__(self, *, dims: AttentionDims, options: Options):
        super().__init__(dims=dims)
        if dims.role != "encoder_self":
            raise ConfigError(f"model.attention ({dims.cache_key}) tree_distance: an encoder self-attention; "
                              "use it under encoder_self.")
        inverse = float(np.log(np.expm1(options.init)))  # softplus^-1(init)
        self.raw_weight = nn.Parameter(torch.full((dims.heads,), inverse))

    def required_structures(self) -> dict[str, StructureSpec]:
        return {"tree_distance": StructureSpec("tree_distance", {"clip": MAX_DISTANCE})}

    def logit_bias(self, query: Tensor, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        distance = ctx.structures["tree_distance"].to(q.dtype)  # (B, S, S)
        return -F.softplus(self.raw_weight)[None, :, None, None] * distance[:, None]
