"""Structure features: pure functions from word-level trees + subword alignment to arrays.

Every feature is computed at *word* level from the trees of
:mod:`structnmt.syntax.trees` and then mapped to subword *pieces* with
``word_of_piece`` — an ``int64`` array of length ``P`` (pieces of one sentence, without
the EOS the collator appends) giving the 0-based word index of each piece. It is
non-decreasing, starts at 0 and grows in steps of 0 or 1, so every word has at least one
piece and a word's pieces are contiguous. No function pads or batches; the collator pads
each feature with the value given below and appends the EOS value.

=====================  =====================  ========  ===========================  ==============================================
feature (registry)     output                 dtype     collator padding value       value at the appended EOS position
=====================  =====================  ========  ===========================  ==============================================
``ngram_partition``    ``(P,)`` phrase ids    int64     ``-1`` (no phrase)           its own phrase: ``ids.max() + 1``
``syntax_partition``   ``(K, P)`` phrase ids  int64     ``-1`` (no phrase)           its own phrase per level: ``ids[l].max() + 1``;
                       + labels ``[K][M_l]``  str       label list padded with       its tag is ignored by the tag loss
                                                        the tag loss's ignore index  (use the ignore index, not a real label)
``dep_mask``           ``(P, P)``             bool      ``False``; a padded *query*  row and column ``False`` except the diagonal
                       ``True`` = may attend            row gets ``True`` on the     ``True`` (EOS attends to itself only)
                                                        diagonal so no row is empty
``lpea_positions``     ``(P, P)`` relative    int64     ``OUT_OF_PHRASE``            ``0`` on the diagonal, ``OUT_OF_PHRASE``
                       local-phrasal position                                        elsewhere in its row and column
``ngram_hypernodes``   spans + ``(N, P)``     bool      ``False`` (both axes)        column ``False`` (EOS is in no phrase)
``dep_hypernodes``     pairs + ``(N, P)``     bool      ``False`` (both axes)        column ``False`` (EOS is in no phrase)
``word_boundaries``    ``(P,)``               bool      ``False``                    ``True`` (EOS is a word of its own)
=====================  =====================  ========  ===========================  ==============================================

``OUT_OF_PHRASE`` (``-10**9``) marks pairs outside each other's local phrase (the
paper's ``∞`` in RHE Fig. 3); the LPEA module masks them and embeds the others with
index ``RP + k``. It is far outside any clipping window but small enough that ``RP + k``
does not overflow.

The mask polarity everywhere is ``True = may attend`` (as in SDPA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

__all__ = [
    "FEATURES",
    "Feature",
    "IGNORE_LABEL",
    "Padding",
    "register_feature",
    "OUT_OF_PHRASE",
    "SEMANTIC_MODES",
    "LPEA_RULES",
    "check_word_of_piece",
    "dependency_hypernodes",
    "dependency_mask",
    "hypernode_adjacency",
    "local_phrase_positions",
    "local_phrases",
    "ngram_hypernodes",
    "ngram_partition",
    "syntactic_partitions",
    "to_pieces",
    "word_boundaries",
    "word_depths",
    "word_of_piece_from_pieces",
]

OUT_OF_PHRASE: int = -(10**9)
"""LPEA value for a pair of words not in the same local phrase (RHE Fig. 3's ``∞``)."""

LPEA_RULES: tuple[str, ...] = ("rule1", "rule2", "rule2_literal")
"""Names of RHE §4.1's local-phrase rules accepted by :func:`local_phrase_positions`."""

SPIECE_UNDERLINE = "\u2581"
ROOT_WRAPPER_LABELS = frozenset({"ROOT", "TOP", ""})


# ----------------------------------------------------------------------------- helpers
def check_word_of_piece(
    word_of_piece: np.ndarray | Sequence[int], n_words: int | None = None
) -> np.ndarray:
    """Validate the subword alignment and return it as a 1-D ``int64`` array ``(P,)``.

    Raises ``ValueError`` unless it starts at 0 and grows in steps of 0 or 1 (every word
    has at least one piece), and, when ``n_words`` is given, covers exactly that many words.
    """
    w = np.asarray(word_of_piece)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"word_of_piece must be a non-empty 1-D array, got shape {w.shape}.")
    if not np.issubdtype(w.dtype, np.integer):
        raise ValueError(f"word_of_piece must hold integers, got dtype {w.dtype}.")
    w = w.astype(np.int64, copy=False)
    if w.size <= 512:  # sentences: a Python pass is several times cheaper than numpy's overheads
        lst = w.tolist()
        ok = lst[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(lst, lst[1:]))
    else:
        steps = np.diff(w)
        ok = bool(w[0] == 0) and not np.any((steps != 0) & (steps != 1))
    if not ok:
        raise ValueError(
            "word_of_piece must start at 0 and be non-decreasing in steps of 0 or 1 "
            f"(every word needs at least one piece), got {w.tolist()}."
        )
    if n_words is not None and int(w[-1]) + 1 != n_words:
        raise ValueError(
            f"word_of_piece covers {int(w[-1]) + 1} words but the tree has {n_words}; "
            "re-run the subword alignment on the tree's words."
        )
    return w


def to_pieces(
    adj: np.ndarray, word_of_piece: np.ndarray | Sequence[int], axes: Sequence[int] = (-1,)
) -> np.ndarray:
    """Map a word-level array to pieces by repeating it along the word ``axes``.

    ``adj`` has size ``W`` on every axis in ``axes``; the result has size ``P`` there:
    ``out[..., p, ...] = adj[..., word_of_piece[p], ...]``. E.g. a hypernode/token
    adjacency ``(N, W) -> (N, P)`` (a hypernode covers every piece of its words), or a
    word/word mask ``(W, W) -> (P, P)`` with ``axes=(0, 1)`` (pieces of one word then
    share that word's row and column, so they may attend to each other).
    """
    w = check_word_of_piece(word_of_piece)
    out = np.asarray(adj)
    n_words = int(w[-1]) + 1
    for ax in axes:
        if out.shape[ax] != n_words:
            raise ValueError(
                f"to_pieces: axis {ax} has size {out.shape[ax]} but word_of_piece covers {n_words} words."
            )
        out = np.take(out, w, axis=ax)
    return out


def _strip_root_wrappers(root: Node) -> Node:
    """Skip a unary ``ROOT``/``TOP``/unlabelled wrapper above the real top node (e.g. ``S``)."""
    while root.label in ROOT_WRAPPER_LABELS and len(root.children) == 1:
        root = root.children[0]
    return root


def _preterminal_paths(tree: ConstituencyTree) -> list[list[Node]]:
    """For each word, the path of nodes from the root down to its preterminal (inclusive)."""
    paths: list[list[Node] | None] = [None] * len(tree)
    path: list[Node] = []  # the current root-to-node path, shared (copied only at preterminals)

    def visit(node: Node) -> None:
        path.append(node)
        if not node.children:
            if node.end != node.start + 1:
                raise ValueError(
                    f"Preterminal {node.label!r} spans words [{node.start}, {node.end}); it must span one word."
                )
            paths[node.start] = path.copy()
        else:
            for c in node.children:
                visit(c)
        path.pop()

    visit(tree.root)
    missing = [i for i, p in enumerate(paths) if p is None]
    if missing:
        raise ValueError(f"Constituency tree has no preterminal over words {missing}.")
    return paths  # type: ignore[return-value]


def _ids_from_keys(keys: Sequence[Any]) -> np.ndarray:
    """Consecutive ids 0, 1, ... for runs of equal keys in order (keys of one phrase are contiguous)."""
    ids = np.zeros(len(keys), dtype=np.int64)
    for i in range(1, len(keys)):
        ids[i] = ids[i - 1] + (keys[i] != keys[i - 1])
    return ids


# ----------------------------------------------------------------------------- MG-SA
def ngram_partition(word_of_piece: np.ndarray | Sequence[int], n: int) -> np.ndarray:
    """MG-SA §3.2 "Phrase Partition": non-overlapping n-grams of words, widened to pieces.

    The words ``x_1..x_T`` are split into ``M = ceil(T / n)`` consecutive phrases
    ``p_m = (x_{n(m-1)+1}, ..., x_{nm})``; "padding is applied to the last phrase if
    necessary", i.e. the last phrase simply holds the ``T mod n`` remaining words (the
    phrase-memory builder pads it). Each piece gets the id of its word's phrase, so a
    phrase boundary always falls on a word boundary (DESIGN.md).

    Returns ``(P,)`` int64 phrase ids ``0..M-1``, non-decreasing.
    """
    if n < 1:
        raise ValueError(f"ngram_partition: n must be >= 1, got {n}.")
    w = check_word_of_piece(word_of_piece)
    return w // n


def syntactic_partitions(
    tree: ConstituencyTree, word_of_piece: np.ndarray | Sequence[int], K: int
) -> tuple[np.ndarray, list[list[str]]]:
    """MG-SA §3.2 syntactic phrase partition for the top ``K`` levels, with node labels.

    Level ``l`` (1-based) is made of the nodes at depth ``l`` below the top node (the
    top node — ``S`` in Fig. 1 — is depth 0; a unary ``ROOT``/``TOP`` wrapper above it is
    skipped). A word whose branch ends above depth ``l`` keeps its deepest node, its
    preterminal, as a one-word phrase labelled with its POS tag. For Fig. 1's
    "Bush held a talk with Sharon" this gives level 1 = ("Bush", "held a talk with
    Sharon") labelled (NP, VP) and level 2 = ("Bush", "held", "a talk", "with Sharon")
    labelled (NNP, VBD, NP, PP) — "NP is the tag of the phrase 'a talk' in second layer".
    Each level partitions the words and refines the level above; the labels are the
    phrase tags ``T_x`` of the tag loss (eqs. 9-10).

    Returns ``(ids, labels)``: ``ids`` ``(K, P)`` int64 with ``ids[l-1]`` the phrase id
    (``0..M_l-1``, non-decreasing) of each piece at level ``l``; ``labels[l-1][m]`` the
    label of phrase ``m`` at level ``l``.
    """
    if K < 1:
        raise ValueError(f"syntactic_partitions: K must be >= 1, got {K}.")
    w = check_word_of_piece(word_of_piece, len(tree))
    top = _strip_root_wrappers(tree.root)
    paths = _preterminal_paths(ConstituencyTree(tree.words, top))
    ids = np.zeros((K, len(tree)), dtype=np.int64)
    labels: list[list[str]] = []
    for level in range(1, K + 1):
        nodes = [p[min(level, len(p) - 1)] for p in paths]
        ids[level - 1] = _ids_from_keys([id(n) for n in nodes])
        labels.append(
            [nodes[i].label for i in range(len(nodes)) if i == 0 or nodes[i] is not nodes[i - 1]]
        )
    return ids[:, w], labels


# ----------------------------------------------------------------------------- RHE: DEA
def dependency_mask(tree: DependencyTree, word_of_piece: np.ndarray | Sequence[int]) -> np.ndarray:
    """RHE §4.1 DEA dependency mask (eqs. 4-5), ``True`` = may attend.

    Eq. 5 sets ``D_ij = 0`` (attend) when ``x_i, x_j`` are in a head-dependent relation
    ``Dep(x_i, x_j)`` or ``i = j``, and ``-inf`` otherwise. ``Dep`` is a relation between
    the two words, not a direction, so the mask is symmetric: a head sees its dependents
    and a dependent its head. The root attachment has no word on the other side and adds
    nothing. At piece level all pieces of one word may attend to each other (they are the
    same ``x_i``) and inherit the word's arcs.

    Returns ``(P, P)`` bool, symmetric, diagonal ``True``.
    """
    w = check_word_of_piece(word_of_piece, len(tree))
    n = len(tree)
    m = np.eye(n, dtype=bool)
    for h, d in tree.edges():
        m[h, d] = m[d, h] = True
    return m[np.ix_(w, w)]


# ----------------------------------------------------------------------------- RHE: LPEA
def word_depths(tree: ConstituencyTree, paths: list[list[Node]] | None = None) -> np.ndarray:
    """``(W,)`` int64 layer of each word: depth of its preterminal below the root (root = 0).

    Only differences of layers are used by LPEA, so the origin does not matter (RHE Fig. 3
    counts "held" in layer 3 and "talk" in layer 4; here they are 2 and 3). ``paths``
    (from ``_preterminal_paths``) may be passed to avoid a second traversal.
    """
    paths = _preterminal_paths(tree) if paths is None else paths
    return np.array([len(p) - 1 for p in paths], dtype=np.int64)


def local_phrases(
    tree: ConstituencyTree,
    rule: str = "rule2",
    *,
    paths: list[list[Node]] | None = None,
) -> np.ndarray:
    """``(W, W)`` bool, ``[i, j]`` True iff ``x_j`` is in ``local_phrase(x_i)`` (RHE §4.1).

    * ``"rule1"`` — Rule 1: ``local_phrase(x_i)`` is the set of words under the lowest
      *multi-descendant* ancestor of ``x_i`` (the lowest ancestor covering more than one
      word; a one-word sentence has only itself).
    * ``"rule2"`` — Rule 1 then Rule 2: if ``x_i`` is in ``local_phrase(x_j)`` then
      ``x_j`` is in ``local_phrase(x_i)``. The paper states Rule 2 for ``j < i``; read as
      a symmetry rule it applies to both orders (the default, which makes the relation
      symmetric).
    * ``"rule2_literal"`` -- Rule 1 then Rule 2 as written: only from an earlier ``x_j`` to
      a later ``x_i`` (``j < i``). Both readings give RHE Fig. 3; they differ when a later
      word has the larger phrase. Chosen by the LPEA option ``rule``.
    """
    if rule not in LPEA_RULES:
        raise ValueError(f"Unknown local-phrase rule {rule!r}; use one of {LPEA_RULES}.")
    n = len(tree)
    lp = np.zeros((n, n), dtype=bool)
    for i, path in enumerate(_preterminal_paths(tree) if paths is None else paths):
        multi = [a for a in path if a.end - a.start > 1]
        if multi:
            a = multi[-1]
            lp[i, a.start : a.end] = True
        else:
            lp[i, i] = True
    if rule == "rule2":
        lp |= lp.T
    elif rule == "rule2_literal":  # x_i in LP(x_j) with j < i  =>  x_j in LP(x_i):  lp[i, j] |= lp[j, i] for j < i
        lp |= np.tril(lp.T, k=-1)
    return lp


def local_phrase_positions(
    tree: ConstituencyTree,
    word_of_piece: np.ndarray | Sequence[int],
    k: int,
    rule: str = "rule2",
) -> np.ndarray:
    """RHE §4.1 LPEA relative local-phrasal position matrix ``RP`` (Fig. 3), clipped at ``k``.

    ``RP_ij = clip(layer(x_j) - layer(x_i), k)`` (eq. 7, ``clip(x, k) = max(-k, min(k, x))``)
    when ``x_j`` is in ``local_phrase(x_i)`` under ``rule`` (see :func:`local_phrases`),
    and ``OUT_OF_PHRASE`` (the paper's ``∞``) otherwise. Layers are word depths in the
    constituency tree: in Fig. 3, "held" (layer 3) and "talk" (layer 4) give
    ``RP_{2,4} = 1``, and "talk"/"Sharon" are in different local phrases (``∞``).
    Pieces of one word share that word's row and column (relative position 0 among
    themselves). Under ``"rule2"`` (default reading) ``RP`` is antisymmetric where finite.

    Returns ``(P, P)`` int64 with values in ``[-k, k]`` or ``OUT_OF_PHRASE``.
    """
    if k < 0:
        raise ValueError(f"local_phrase_positions: k must be >= 0, got {k}.")
    w = check_word_of_piece(word_of_piece, len(tree))
    paths = _preterminal_paths(tree)
    lp = local_phrases(tree, rule, paths=paths)
    depth = word_depths(tree, paths)
    rp = np.clip(depth[None, :] - depth[:, None], -k, k)
    rp = np.where(lp, rp, OUT_OF_PHRASE).astype(np.int64)
    return rp[np.ix_(w, w)]


# ----------------------------------------------------------------------------- PhraseTransformer
def ngram_hypernodes(n_words: int, k: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """PhraseTransformer §2.2 eq. 1: one hypernode per run of 2..k adjacent words.

    Eq. 1 takes every ``(w_i, ..., w_j)`` with ``j - i < k`` (length <= k); length-1 runs
    are the simple nodes (words) themselves, and "for hypernodes |word(s)| > 1" (§2.1),
    so hypernodes are the n-grams of length ``2..min(k, n_words)``. They are ordered by
    length, then start. The adjacency is eq. 4/6's subset relation restricted to
    hypernode x word: ``adj[h, t]`` iff word ``t`` is in ``word(h)``.

    Returns ``(spans, adj)``: ``spans[h] = (start, end)`` half-open over words;
    ``adj`` ``(N, W)`` bool with ``N = sum_{L=2}^{min(k,W)} (W - L + 1)``. Map it to pieces
    with :func:`to_pieces`; the full (nodes+hypernodes) eq. 6 matrix is
    :func:`hypernode_adjacency`.
    """
    if n_words < 1 or k < 1:
        raise ValueError(f"ngram_hypernodes: need n_words >= 1 and k >= 1, got {n_words}, {k}.")
    spans = [
        (s, s + length)
        for length in range(2, min(k, n_words) + 1)
        for s in range(n_words - length + 1)
    ]
    adj = np.zeros((len(spans), n_words), dtype=bool)
    for h, (s, e) in enumerate(spans):
        adj[h, s:e] = True
    return spans, adj


SEMANTIC_MODES: tuple[str, ...] = ("edges", "subtrees", "edges_ngrams")
"""What ``k`` means for the semantic PhraseTransformer's hypernodes (the paper leaves it open)."""


def dependency_hypernodes(
    tree: DependencyTree, k: int = 2, mode: str = "edges"
) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """PhraseTransformer §4.3 eq. 8 ("semantic PhraseTransformer"): hypernodes from arcs.

    Eq. 8 gives one hypernode ``word(s) = (w_i, w_j)`` per edge of the dependency tree
    (the root attachment is not an edge between two words), so non-adjacent words can
    form one phrase. The paper reports semantic rows for k = 2 and 3 without saying what
    k means for them; ``mode`` chooses:

    * ``edges``: eq. 8 alone, k ignored (k = 2 and 3 are then the same model);
    * ``subtrees`` (our default in the mechanism): every connected set of 2..k words of
      the tree (arcs taken in either direction) — exactly eq. 8's edges at k = 2, and at
      k = 3 also a head with two dependents and a chain head-dependent-grandchild;
    * ``edges_ngrams``: eq. 8's edges plus the n-gram hypernodes of eq. 1 up to k
      (a bigram that is also an arc is kept once).

    Hypernodes are ordered by size, then by their sorted word tuple (edges: by
    dependent, as before). Returns ``(members, adj)``: ``members[h]`` the word indices
    (an edge as ``(head, dependent)``); ``adj`` ``(N, W)`` bool, ``adj[h, t]`` iff word
    ``t`` is in hypernode ``h`` (eqs. 4, 6).
    """
    if mode not in SEMANTIC_MODES:
        raise ValueError(f"dependency_hypernodes: unknown mode '{mode}'; use one of {', '.join(SEMANTIC_MODES)}.")
    n = len(tree)
    members: list[tuple[int, ...]] = list(tree.edges())
    if mode == "subtrees" and k > 2:
        nbrs: list[set[int]] = [set() for _ in range(n)]
        for a, b in members:
            nbrs[a].add(b)
            nbrs[b].add(a)
        seen = {frozenset(e) for e in members}
        frontier = list(seen)
        for _ in range(3, k + 1):  # grow every connected set by one neighbouring word
            grown: list[frozenset[int]] = []
            for sub in frontier:
                for w in set().union(*(nbrs[x] for x in sub)) - sub:
                    bigger = sub | {w}
                    if bigger not in seen:
                        seen.add(bigger)
                        grown.append(bigger)
            members += sorted(tuple(sorted(g)) for g in grown)
            frontier = grown
    elif mode == "edges_ngrams":
        have = {frozenset(e) for e in members}
        for s, e in ngram_hypernodes(n, k)[0]:
            span = tuple(range(s, e))
            if frozenset(span) not in have:
                members.append(span)
    adj = np.zeros((len(members), n), dtype=bool)
    for h, words in enumerate(members):
        adj[h, list(words)] = True
    return members, adj


def hypernode_adjacency(membership: np.ndarray) -> np.ndarray:
    """PhraseTransformer eq. 6: adjacency ``A`` over the ``T + N`` nodes (simple nodes first).

    ``membership`` is ``(N, T)`` bool (hypernode x token, at word or piece level).
    ``A_ij = 1`` iff ``word(s_i) ⊆ word(s_j)`` or ``word(s_j) ⊆ word(s_i)``: a token is
    adjacent to itself and to every hypernode containing it, two distinct tokens are not
    adjacent, and two hypernodes are adjacent when one's tokens are a subset of the
    other's (e.g. a bigram inside a trigram; always itself).

    Returns ``(T + N, T + N)`` bool, symmetric, diagonal ``True``.
    """
    m = np.asarray(membership, dtype=bool)
    n_h, n_t = m.shape
    mi = m.astype(np.int64)
    inter = mi @ mi.T  # |word(a) ∩ word(b)|
    size = mi.sum(axis=1)
    subset = (inter == size[:, None]) | (inter == size[None, :])
    a = np.zeros((n_t + n_h, n_t + n_h), dtype=bool)
    a[:n_t, :n_t] = np.eye(n_t, dtype=bool)
    a[n_t:, :n_t] = m
    a[:n_t, n_t:] = m.T
    a[n_t:, n_t:] = subset
    return a


# ----------------------------------------------------------------------------- SA-NMT
def word_boundaries(word_of_piece: np.ndarray | Sequence[int]) -> np.ndarray:
    """``(P,)`` bool, True at the first piece of each word.

    SA-NMT §6.1 eq. 24 collapses the pieces ``u..v`` of word ``k`` before Chu-Liu-Edmonds:
    the word-level score matrix sums the rows and columns of the piece-level arc scores
    ``phi`` over each word's pieces (both, for the word's block with itself). With
    ``b = word_boundaries(...)`` the piece->word map is ``cumsum(b) - 1`` and the collapse
    is a scatter-add of rows then columns over that index (``np.add.at`` /
    ``index_add_``); padding pieces (``False``) must be dropped before the cumsum.
    """
    w = check_word_of_piece(word_of_piece)
    b = np.ones(w.shape, dtype=bool)
    b[1:] = w[1:] != w[:-1]
    return b


def word_of_piece_from_pieces(pieces: Sequence[str]) -> np.ndarray:
    """``(P,)`` int64 word index of each SentencePiece piece (a word starts with "▁", U+2581).

    The first piece always starts word 0, even without "▁"; a lone "▁" piece starts a word
    that the following pieces continue.
    """
    if len(pieces) == 0:
        raise ValueError("word_of_piece_from_pieces: no pieces.")
    starts = np.array(
        [i == 0 or p.startswith(SPIECE_UNDERLINE) for i, p in enumerate(pieces)], dtype=bool
    )
    return np.cumsum(starts).astype(np.int64) - 1


# ----------------------------------------------------------------------------- registry
IGNORE_LABEL = -100
"""Label id the tag loss ignores (padding, EOS's phrase, labels outside the dataset's list)."""

LAYOUTS = ("sequence", "pairwise", "rows")


@dataclass(frozen=True)
class Padding:
    """How a feature's per-sentence array becomes its slice of the batch tensor (no per-feature code).

    ``layout``:
      * ``sequence`` -- ``(P,)`` -> ``(S,)``;
      * ``pairwise`` -- ``(P, P)`` -> ``(S, S)``;
      * ``rows``     -- ``(R, P)`` -> ``(R_max, S)``, ``R_max`` the batch's largest ``R`` (at least 1).

    ``pad``: the value of every cell the sentence does not fill. ``eos``: the value at the position
    right after the sentence's ``P`` pieces, its EOS (the column of each of its rows; pairwise: EOS's
    row and column): a constant, ``"next_id"`` (one more than the largest id of the row: EOS is a
    phrase of its own; not pairwise) or None (the padding value).
    ``diagonal`` (pairwise): the value of the whole diagonal of the batch tensor, padding and EOS
    included, so that no query row is empty; None leaves it to the other rules.
    """

    layout: str
    dtype: Any
    pad: Any
    eos: Any = None
    diagonal: Any = None

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"Padding layout '{self.layout}': use one of {', '.join(LAYOUTS)}.")
        if self.diagonal is not None and self.layout != "pairwise":
            raise ValueError("Padding.diagonal is for the pairwise layout.")
        if self.eos == "next_id" and (np.dtype(self.dtype).kind not in "iu" or self.layout == "pairwise"):
            raise ValueError("Padding.eos='next_id' needs an integer dtype and the sequence or rows layout.")

    def batch(self, arrays: list[np.ndarray], S: int) -> np.ndarray:
        """The padded batch array of ``arrays`` (one per sentence) at source length ``S``."""
        B = len(arrays)
        if self.layout == "sequence":
            t = np.full((B, S), self.pad, dtype=self.dtype)
        elif self.layout == "pairwise":
            t = np.full((B, S, S), self.pad, dtype=self.dtype)
            if self.diagonal is not None:
                t[:, np.arange(S), np.arange(S)] = self.diagonal
        else:
            t = np.full((B, max([1] + [a.shape[0] for a in arrays]), S), self.pad, dtype=self.dtype)
        for b, a in enumerate(arrays):
            P = a.shape[-1]
            eos = None if self.eos is None else a.max(axis=-1) + 1 if self.eos == "next_id" else self.eos
            if self.layout == "sequence":
                t[b, :P] = a
                if eos is not None:
                    t[b, P] = eos
            elif self.layout == "pairwise":
                t[b, :P, :P] = a
                if eos is not None:  # EOS's row and column within the sentence
                    t[b, P, : P + 1] = eos
                    t[b, : P + 1, P] = eos
            else:
                t[b, : a.shape[0], :P] = a
                if eos is not None:
                    t[b, : a.shape[0], P] = eos
        return t


@dataclass(frozen=True)
class Feature:
    """A registered feature: ``feature(word_of_piece, constituency=..., dependency=..., **params)``.

    ``needs`` names the trees it reads (``"constituency"``, ``"dependency"``; none: it is computed
    from the pieces alone); ``params`` the hyper-parameters it takes from the mechanism's request.
    ``padding`` says how its array is batched; ``array`` picks that array from the feature's value
    (default: the value itself); ``companions`` gives tensors batched beside it, under
    ``key + suffix`` (``companions(key, values, batched, label_ids) -> {name: tensor}``).
    """

    name: str
    func: Callable[..., Any]
    needs: tuple[str, ...]
    params: tuple[str, ...]
    doc: str
    padding: Padding
    array: Callable[[Any], np.ndarray] | None = None
    companions: Callable[..., dict] | None = None
    example: dict = field(default_factory=dict)

    def __post_init__(self):
        unknown = set(self.needs) - {"constituency", "dependency"}
        if unknown:
            raise ValueError(f"Feature {self.name!r}: needs {sorted(unknown)}; a feature reads constituency "
                             "and/or dependency trees.")

    def __call__(
        self,
        word_of_piece: np.ndarray | Sequence[int],
        *,
        constituency: ConstituencyTree | None = None,
        dependency: DependencyTree | None = None,
        **params: Any,
    ) -> Any:
        trees = {"constituency": constituency, "dependency": dependency}
        for t in self.needs:
            if trees[t] is None:
                raise ValueError(
                    f"Feature {self.name!r} needs a {t} tree; prepare the dataset with {t} parses."
                )
        return self.func(word_of_piece, trees, **params)

    def batch(self, key: str, values: list[Any], S: int, label_ids: dict[str, int] | None = None) -> dict:
        """The batch tensors of this feature under ``key`` (and its companions), from one value per sentence."""
        import torch  # noqa: PLC0415 (prepare imports this module and runs without torch)

        arrays = [self.array(v) for v in values] if self.array is not None else values
        batched = self.padding.batch(arrays, S)
        out = {key: torch.from_numpy(batched)}
        if self.companions is not None:
            out.update(self.companions(key, values, batched, label_ids))
        return out


FEATURES: dict[str, Feature] = {}


def register_feature(feature: Feature) -> Feature:
    """Add ``feature`` to :data:`FEATURES` under its name (a duplicate is refused); mechanisms then
    request it by name in ``required_structures()``."""
    if not isinstance(feature, Feature):
        raise TypeError(f"register_feature: {feature!r} is not a structnmt.syntax.features.Feature.")
    if feature.name in FEATURES:
        raise ValueError(f"Duplicate feature name {feature.name!r}.")
    FEATURES[feature.name] = feature
    return feature


def _syntax_labels(key: str, values: list, batched: np.ndarray, label_ids: dict[str, int] | None) -> dict:
    """``key.labels`` (B, K, M) long: label ids of each level's phrases, IGNORE_LABEL elsewhere."""
    import torch  # noqa: PLC0415 (prepare imports this module and runs without torch)

    K = batched.shape[1]
    M = max(len(lab) for _, labels in values for lab in labels) + 1
    t = np.full((len(values), K, M), IGNORE_LABEL, dtype=np.int64)
    for b, (_, labels) in enumerate(values):
        for level, labs in enumerate(labels):
            t[b, level, : len(labs)] = [(label_ids or {}).get(x, IGNORE_LABEL) for x in labs]
    return {key + ".labels": torch.from_numpy(t)}


def _hypernode_companions(key: str, values: list, batched: np.ndarray, label_ids) -> dict:
    """``key.mask`` (B, N) bool (a real hypernode) and ``key.neighbours`` (B, S + N, K) (eq. 6's lists)."""
    import torch  # noqa: PLC0415 (prepare imports this module and runs without torch)

    mask = np.zeros(batched.shape[:2], dtype=np.bool_)
    for b, (_, adj) in enumerate(values):
        mask[b, : adj.shape[0]] = True
    return {key + ".mask": torch.from_numpy(mask), key + ".neighbours": torch.from_numpy(node_neighbours(batched, mask))}


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


def _ngram_hyper_pieces(w: Any, trees: dict, k: int, unit: str = "word") -> tuple[list[tuple[int, int]], np.ndarray]:
    w = check_word_of_piece(w)
    if unit == "piece":  # runs of 2..k adjacent pieces, whatever words they belong to
        return ngram_hypernodes(len(w), k)
    if unit != "word":
        raise ValueError(f"ngram_hypernodes: unknown unit '{unit}'; use word or piece.")
    spans, adj = ngram_hypernodes(int(w[-1]) + 1, k)
    return spans, to_pieces(adj, w)


def _dep_hyper_pieces(w: Any, trees: dict, k: int = 2, mode: str = "edges") -> tuple[list[tuple[int, ...]], np.ndarray]:
    members, adj = dependency_hypernodes(trees["dependency"], k, mode)
    return members, to_pieces(adj, check_word_of_piece(w, len(trees["dependency"])))


def _second(value: tuple) -> np.ndarray:
    return value[1]


def _first(value: tuple) -> np.ndarray:
    return value[0]


for _feature in (
    Feature(
        "ngram_partition",
        lambda w, t, n: ngram_partition(w, n),
        (),
        ("n",),
        "MG-SA n-gram phrase ids (P,) int64; no tree.",
        Padding("sequence", np.int64, pad=-1, eos="next_id"),
        example={"n": 2},
    ),
    Feature(
        "syntax_partition",
        lambda w, t, K: syntactic_partitions(t["constituency"], w, K),
        ("constituency",),
        ("K",),
        "MG-SA top-K syntactic phrase ids (K, P) int64 + labels; constituency tree.",
        Padding("rows", np.int64, pad=-1, eos="next_id"),
        array=_first,
        companions=_syntax_labels,
        example={"K": 2},
    ),
    Feature(
        "dep_mask",
        lambda w, t: dependency_mask(t["dependency"], w),
        ("dependency",),
        (),
        "RHE DEA mask (P, P) bool; dependency tree.",
        Padding("pairwise", np.bool_, pad=False, diagonal=True),
    ),
    Feature(
        "lpea_positions",
        lambda w, t, k, rule="rule2": local_phrase_positions(t["constituency"], w, k, rule),
        ("constituency",),
        ("k", "rule"),
        "RHE LPEA relative local-phrasal positions (P, P) int64; constituency tree.",
        Padding("pairwise", np.int64, pad=OUT_OF_PHRASE, diagonal=0),
        example={"k": 2},
    ),
    Feature(
        "ngram_hypernodes",
        _ngram_hyper_pieces,
        (),
        ("k", "unit"),
        "PhraseTransformer n-gram hypernodes (k; unit word|piece): spans + (N, P) bool; no tree.",
        Padding("rows", np.bool_, pad=False),
        array=_second,
        companions=_hypernode_companions,
        example={"k": 2},
    ),
    Feature(
        "dep_hypernodes",
        _dep_hyper_pieces,
        ("dependency",),
        ("k", "mode"),
        "PhraseTransformer dependency hypernodes (k, mode edges|subtrees|edges_ngrams): members + (N, P) bool; dependency tree.",
        Padding("rows", np.bool_, pad=False),
        array=_second,
        companions=_hypernode_companions,
        example={"k": 2},
    ),
    Feature(
        "word_boundaries",
        lambda w, t: word_boundaries(w),
        (),
        (),
        "SA-NMT eq. 24 first-piece flags (P,) bool; no tree.",
        Padding("sequence", np.bool_, pad=False, eos=True),
    ),
):
    register_feature(_feature)
