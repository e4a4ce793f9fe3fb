"""Batch the structure features a model asked for into padded tensors.

The collator calls :func:`build_structures` with the requests of the config
(``data.structures``: key -> :class:`StructureSpec`), the word-level trees and the
``word_of_piece`` alignment of every sentence of the batch. Each feature of
:data:`structnmt.syntax.features.FEATURES` is computed per sentence and padded to the
batch's source length ``S`` (pieces + EOS) with the values of the table in
:mod:`structnmt.syntax.features`:

=====================  ===========================================================
feature                tensors in ``batch.structures`` (``key`` = the request's key)
=====================  ===========================================================
ngram_partition        ``key`` (B, S) long, -1 at padding, EOS its own phrase
syntax_partition       ``key`` (B, K, S) long; ``key + ".labels"`` (B, K, M) long label
                       ids (``-100`` = ignore, EOS's phrase and padding)
dep_mask               ``key`` (B, S, S) bool, True = may attend; padded rows keep
                       their diagonal so that no row is empty
lpea_positions         ``key`` (B, S, S) long, ``OUT_OF_PHRASE`` outside local phrases and
                       at padding, except ``0`` on the whole diagonal (no row is empty)
ngram_hypernodes,      ``key`` (B, N, S) bool membership of hypernode n;
dep_hypernodes         ``key + ".mask"`` (B, N) bool, True = a real hypernode;
                       ``key + ".neighbours"`` (B, S + N, K) long: PhraseTransformer eq. 6's
                       adjacency over the S tokens then the N hypernodes as neighbour
                       lists (node indices, ``-1`` = none; every node lists itself, a
                       token also the hypernodes containing it, a hypernode its tokens
                       and the hypernodes it contains or is contained in)
word_boundaries        ``key`` (B, S) bool, True at the first piece of a word and at EOS
=====================  ===========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .features import FEATURES, OUT_OF_PHRASE, hypernode_adjacency
from .trees import ConstituencyTree, DependencyTree

IGNORE_LABEL = -100


@dataclass
class StructureSpec:
    feature: str  # a key of structnmt.syntax.features.FEATURES
    params: dict[str, Any] = field(default_factory=dict)


def _check(specs: dict[str, StructureSpec]) -> None:
    for key, spec in specs.items():
        if spec.feature not in FEATURES:
            raise ValueError(f"data.structures.{key}: unknown feature '{spec.feature}'; valid: {', '.join(FEATURES)}.")


def feature_values(spec: StructureSpec, trees: list[tuple[DependencyTree | None, ConstituencyTree | None]],
                   wops: list[np.ndarray]) -> list[Any]:
    """The unpadded value of feature ``spec`` for every sentence (see :data:`FEATURES`)."""
    feat = FEATURES[spec.feature]
    return [feat(w, dependency=d, constituency=c, **spec.params) for w, (d, c) in zip(wops, trees)]


def build_structures(
    specs: dict[str, StructureSpec],
    trees: list[tuple[DependencyTree | None, ConstituencyTree | None]],
    wops: list[np.ndarray],
    S: int,
    label_ids: dict[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """Padded structure tensors for one batch (see the module docstring)."""
    _check(specs)
    return pad_structures(specs, {key: feature_values(spec, trees, wops) for key, spec in specs.items()},
                          S, label_ids)


def pad_structures(
    specs: dict[str, StructureSpec],
    values_of: dict[str, list[Any]],
    S: int,
    label_ids: dict[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """Pad per-sentence feature values (``values_of[key]``, one per sentence, as
    :func:`feature_values` returns them) into the batch tensors of the module docstring."""
    _check(specs)
    out: dict[str, torch.Tensor] = {}
    for key, spec in specs.items():
        values = values_of[key]
        B = len(values)
        name = spec.feature
        # pad in numpy (cheap slicing), convert once
        if name == "ngram_partition":
            t = np.full((B, S), -1, dtype=np.int64)
            for b, ids in enumerate(values):
                t[b, : len(ids)] = ids
                t[b, len(ids)] = ids.max() + 1
            out[key] = torch.from_numpy(t)
        elif name == "syntax_partition":
            K = spec.params["K"]
            t = np.full((B, K, S), -1, dtype=np.int64)
            M = max(len(lab) for _, labels in values for lab in labels) + 1
            lab_t = np.full((B, K, M), IGNORE_LABEL, dtype=np.int64)
            for b, (ids, labels) in enumerate(values):
                P = ids.shape[1]
                t[b, :, :P] = ids
                t[b, :, P] = ids.max(axis=1) + 1
                for level, labs in enumerate(labels):
                    lab_t[b, level, : len(labs)] = [(label_ids or {}).get(x, IGNORE_LABEL) for x in labs]
            out[key] = torch.from_numpy(t)
            out[key + ".labels"] = torch.from_numpy(lab_t)
        elif name in ("dep_mask", "lpea_positions"):
            fill, diag, dtype = (False, True, np.bool_) if name == "dep_mask" else (OUT_OF_PHRASE, 0, np.int64)
            t = np.full((B, S, S), fill, dtype=dtype)
            t[:, np.arange(S), np.arange(S)] = diag
            for b, m in enumerate(values):
                P = m.shape[0]
                t[b, :P, :P] = m
            out[key] = torch.from_numpy(t)
        elif name in ("ngram_hypernodes", "dep_hypernodes"):
            N = max(1, max(adj.shape[0] for _, adj in values))
            t = np.zeros((B, N, S), dtype=np.bool_)
            mask = np.zeros((B, N), dtype=np.bool_)
            for b, (_, adj) in enumerate(values):
                n, P = adj.shape
                t[b, :n, :P] = adj
                mask[b, :n] = True
            out[key] = torch.from_numpy(t)
            out[key + ".mask"] = torch.from_numpy(mask)
            out[key + ".neighbours"] = torch.from_numpy(node_neighbours(t, mask))
        elif name == "word_boundaries":
            t = np.zeros((B, S), dtype=np.bool_)
            for b, f in enumerate(values):
                t[b, : len(f)] = f
                t[b, len(f)] = True
            out[key] = torch.from_numpy(t)
        else:  # a feature registered without a batching rule
            raise ValueError(f"data.structures.{key}: no batching rule for feature '{name}'.")
    return out


def node_neighbours(membership: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """PhraseTransformer eq. 6 as neighbour lists over the ``S + N`` nodes of a batch.

    membership (B, N, S) bool, mask (B, N) bool -> (B, S + N, K) int64, ``K`` the largest
    row count of the batch, ``-1`` = no neighbour. Row ``i`` lists, in increasing order,
    the nodes ``j`` with ``A_ij = 1`` (:func:`hypernode_adjacency`); padded hypernodes
    list only themselves.
    """
    B, N, S = membership.shape
    L = S + N
    lists = []
    for b in range(B):
        n = int(mask[b].sum())
        a = hypernode_adjacency(membership[b, :n])  # (S + n, S + n): tokens first, as in the batch layout
        rows, cols = np.nonzero(a)
        lists.append((rows, cols, np.bincount(rows, minlength=S + n), n))
    K = max(int(c.max()) for _, _, c, _ in lists)
    out = np.full((B, L, K), -1, dtype=np.int64)
    for b, (rows, cols, counts, n) in enumerate(lists):
        starts = np.cumsum(counts) - counts
        out[b, rows, np.arange(len(rows)) - starts[rows]] = cols
        out[b, S + n:, 0] = np.arange(S + n, L)
    return out
