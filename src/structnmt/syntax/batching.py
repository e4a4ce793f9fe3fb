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
lpea_positions         ``key`` (B, S, S) long, ``OUT_OF_PHRASE`` outside local phrases
ngram_hypernodes,      ``key`` (B, N, S) bool membership of hypernode n;
dep_hypernodes         ``key + ".mask"`` (B, N) bool, True = a real hypernode
word_boundaries        ``key`` (B, S) bool, True at the first piece of a word and at EOS
=====================  ===========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .features import FEATURES, OUT_OF_PHRASE
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


def build_structures(
    specs: dict[str, StructureSpec],
    trees: list[tuple[DependencyTree | None, ConstituencyTree | None]],
    wops: list[np.ndarray],
    S: int,
    label_ids: dict[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """Padded structure tensors for one batch (see the module docstring)."""
    _check(specs)
    out: dict[str, torch.Tensor] = {}
    B = len(wops)
    for key, spec in specs.items():
        feat = FEATURES[spec.feature]
        values = [feat(w, dependency=d, constituency=c, **spec.params) for w, (d, c) in zip(wops, trees)]
        name = spec.feature
        if name == "ngram_partition":
            t = torch.full((B, S), -1, dtype=torch.long)
            for b, ids in enumerate(values):
                t[b, : len(ids)] = torch.from_numpy(ids)
                t[b, len(ids)] = int(ids.max()) + 1
            out[key] = t
        elif name == "syntax_partition":
            K = spec.params["K"]
            t = torch.full((B, K, S), -1, dtype=torch.long)
            M = max(len(lab) for _, labels in values for lab in labels) + 1
            lab_t = torch.full((B, K, M), IGNORE_LABEL, dtype=torch.long)
            for b, (ids, labels) in enumerate(values):
                P = ids.shape[1]
                t[b, :, :P] = torch.from_numpy(ids)
                t[b, :, P] = torch.from_numpy(ids.max(axis=1) + 1)
                for level, labs in enumerate(labels):
                    lab_t[b, level, : len(labs)] = torch.tensor(
                        [label_ids.get(x, IGNORE_LABEL) if label_ids else IGNORE_LABEL for x in labs], dtype=torch.long)
            out[key] = t
            out[key + ".labels"] = lab_t
        elif name == "dep_mask":
            t = torch.zeros(B, S, S, dtype=torch.bool)
            t[:, torch.arange(S), torch.arange(S)] = True
            for b, m in enumerate(values):
                P = m.shape[0]
                t[b, :P, :P] = torch.from_numpy(m)
            out[key] = t
        elif name == "lpea_positions":
            t = torch.full((B, S, S), OUT_OF_PHRASE, dtype=torch.long)
            t[:, torch.arange(S), torch.arange(S)] = 0
            for b, m in enumerate(values):
                P = m.shape[0]
                t[b, :P, :P] = torch.from_numpy(m)
            out[key] = t
        elif name in ("ngram_hypernodes", "dep_hypernodes"):
            N = max(1, max(adj.shape[0] for _, adj in values))
            t = torch.zeros(B, N, S, dtype=torch.bool)
            mask = torch.zeros(B, N, dtype=torch.bool)
            for b, (_, adj) in enumerate(values):
                n, P = adj.shape
                t[b, :n, :P] = torch.from_numpy(adj)
                mask[b, :n] = True
            out[key] = t
            out[key + ".mask"] = mask
        elif name == "word_boundaries":
            t = torch.zeros(B, S, dtype=torch.bool)
            for b, f in enumerate(values):
                t[b, : len(f)] = torch.from_numpy(f)
                t[b, len(f)] = True
            out[key] = t
        else:  # a feature registered without a batching rule
            raise ValueError(f"data.structures.{key}: no batching rule for feature '{name}'.")
    return out
