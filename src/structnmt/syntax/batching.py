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

from typing import Any

import numpy as np
import torch

from ..config import StructureSpec  # noqa: F401  (re-exported: defined with the config it is part of)
from ..plugins import load_plugins
from .features import FEATURES, IGNORE_LABEL, node_neighbours  # noqa: F401  (re-exported)
from .trees import ConstituencyTree, DependencyTree


def check_structures(specs: dict[str, StructureSpec]) -> None:
    """Every request names a registered feature (plugins imported first); else one sentence listing them."""
    if any(spec.feature not in FEATURES for spec in specs.values()):

        load_plugins()  # a plugin's feature (--user-dir, an entry point) not imported in this process yet
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
    check_structures(specs)
    return pad_structures(specs, {key: feature_values(spec, trees, wops) for key, spec in specs.items()},
                          S, label_ids)


def pad_structures(
    specs: dict[str, StructureSpec],
    values_of: dict[str, list[Any]],
    S: int,
    label_ids: dict[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """Pad per-sentence feature values (``values_of[key]``, one per sentence, as
    :func:`feature_values` returns them) into the batch tensors of the module docstring, each
    feature by its own declared :class:`~structnmt.syntax.features.Padding`."""
    check_structures(specs)
    out: dict[str, torch.Tensor] = {}
    for key, spec in specs.items():
        out.update(FEATURES[spec.feature].batch(key, values_of[key], S, label_ids))
    return out
