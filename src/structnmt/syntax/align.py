"""Aligning parser words, corpus text and SentencePiece pieces through character offsets.

Parsers tokenise differently from SentencePiece. Both are mapped onto the *characters*
of the original corpus line:

* every parser word has a character span ``[start, end)`` in the line (spaCy gives it;
  for pre-parsed files the words are found left to right in the line, PTB escapes such
  as ``-LRB-`` undone);
* every piece has a character span from SentencePiece's byte offsets, with its leading
  whitespace (the ``▁``) removed.

A piece belongs to the word its characters overlap. Three situations need a policy:

* a piece overlapping **several words** (SentencePiece keeps "can't" whole, the parser
  splits "ca" + "n't"): those words are **merged** into one word (their dependency head
  is the head of the merged group that points outside it; constituents are remapped), so
  that no piece is ever shared between words;
* a piece covering only whitespace or characters no word covers: it joins the word of
  the piece before it (the first piece joins the first word);
* a word with no piece (an empty token): merged with the following word.

Only a line whose parser words cannot be found in the text at all (a pre-parsed file
that does not match the corpus line) is *unalignable*: :class:`AlignmentError`. The
caller reports the count and the first line numbers and applies the stated policy
(``prepare``: such pairs are dropped and counted; never silently misaligned).

The result is ``word_of_piece`` (P,) int64, non-decreasing, every word with at least one
piece: the input of every structure feature.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trees import ConstituencyTree, DependencyTree, Node

PTB_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]",
                "``": '"', "''": '"'}


class AlignmentError(ValueError):
    """The parser's words cannot be located in the corpus line."""


@dataclass
class Alignment:
    word_of_piece: np.ndarray  # (P,) int64, word index (after merging) of every piece
    groups: list[list[int]]  # merged word index -> original parser word indices
    merged: int  # how many parser words were merged away


def find_word_spans(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Character spans of ``words`` found left to right in ``text``.

    Raises :class:`AlignmentError` when a word is not found after the previous one.
    """
    spans = []
    pos = 0
    for w in words:
        candidates = [w, PTB_UNESCAPE.get(w, w)]
        if w in ("``", "''"):
            candidates += ["``", "''", "“", "”", "'"]
        best = None
        for c in candidates:
            i = text.find(c, pos)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, i + len(c))
        if best is None or text[pos : best[0]].strip():
            raise AlignmentError(f"word {w!r} not found in the text after character {pos}")
        spans.append(best)
        pos = best[1]
    return spans


def piece_char_spans(text: str, byte_spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """SentencePiece byte offsets -> character offsets, leading whitespace removed."""
    b2c = np.zeros(len(text.encode("utf-8")) + 1, dtype=np.int64)
    pos = 0
    for ci, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        b2c[pos : pos + n] = ci
        pos += n
    b2c[pos] = len(text)
    out = []
    for b, e in byte_spans:
        s, t = int(b2c[b]), int(b2c[e])
        while s < t and text[s].isspace():
            s += 1
        out.append((s, t))
    return out


def align(word_spans: list[tuple[int, int]], piece_spans: list[tuple[int, int]]) -> Alignment:
    """Map pieces to words, merging words that share a piece (see module docstring)."""
    W = len(word_spans)
    if W == 0:
        raise AlignmentError("the parser returned no words")
    # union-find over words that must merge
    parent = list(range(W))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    piece_words: list[list[int]] = []
    for s, e in piece_spans:
        ws = [w for w, (a, b) in enumerate(word_spans) if a < e and s < b] if s < e else []
        piece_words.append(ws)
        for w in ws[1:]:
            parent[find(w)] = find(ws[0])
    # merge every word in a run between two words of the same group (keeps groups contiguous)
    for w in range(W):
        r = find(w)
        members = [x for x in range(W) if find(x) == r]
        for x in range(min(members), max(members) + 1):
            parent[find(x)] = r
    # assign pieces
    raw = []
    prev = find(0)
    for ws in piece_words:
        prev = find(ws[0]) if ws else prev
        raw.append(prev)
    # words without any piece join the next word that has one (a run at the end joins the
    # last word that has one)
    covered = {find(w) for w in raw}
    roots = sorted({find(w) for w in range(W)}, key=lambda r: min(x for x in range(W) if find(x) == r))
    with_piece = [r for r in roots if r in covered]
    if not with_piece:
        raise AlignmentError("the sentence has no pieces")
    for i, r in enumerate(roots):
        if r in covered:
            continue
        later = [c for c in roots[i + 1 :] if c in covered]
        target = later[0] if later else with_piece[-1]
        parent[r] = target
    groups_by_root: dict[int, list[int]] = {}
    for w in range(W):
        groups_by_root.setdefault(find(w), []).append(w)
    groups = sorted(groups_by_root.values(), key=lambda g: g[0])
    index = {w: gi for gi, g in enumerate(groups) for w in g}
    wop = np.array([index[w] for w in raw], dtype=np.int64)
    return Alignment(wop, groups, W - len(groups))


def merge_dependency(tree: DependencyTree, groups: list[list[int]]) -> DependencyTree:
    """Merge words per ``groups``; a group's head is that of its member pointing outside."""
    if all(len(g) == 1 for g in groups):
        return tree
    index = {w: gi for gi, g in enumerate(groups) for w in g}
    words, heads, rels, upos, xpos = [], [], [], [], []
    depth = []
    for w in range(len(tree.words)):
        d, h = 0, tree.heads[w]
        while h > 0 and d <= len(tree.words):
            d, h = d + 1, tree.heads[h - 1]
        depth.append(d)
    for g in groups:
        rep = min(g, key=lambda w: (depth[w], w))  # the member closest to the root heads the group
        words.append("".join(tree.words[w] for w in g))
        h = tree.heads[rep]
        heads.append(0 if h == 0 else index[h - 1] + 1)
        rels.append(tree.deprels[rep])
        upos.append(tree.upos[rep])
        if tree.xpos is not None:
            xpos.append(tree.xpos[rep])
    return DependencyTree(words, heads, rels, upos, xpos if tree.xpos is not None else None)


def merge_constituency(tree: ConstituencyTree, groups: list[list[int]]) -> ConstituencyTree:
    """Remap spans onto merged words; preterminals of one group collapse into the first."""
    if all(len(g) == 1 for g in groups):
        return tree
    index = {w: gi for gi, g in enumerate(groups) for w in g}

    def remap(n: Node) -> Node | None:
        if n.is_preterminal:
            if groups[index[n.start]][0] != n.start:
                return None
            return Node(n.label, index[n.start], index[n.start] + 1)
        kids = [k for k in (remap(c) for c in n.children) if k is not None]
        if not kids:
            return None
        start, end = kids[0].start, kids[-1].end
        if len(kids) == 1 and kids[0].start == start and kids[0].end == end and not kids[0].is_preterminal \
                and kids[0].label == n.label:
            return kids[0]
        return Node(n.label, start, end, kids)

    root = remap(tree.root)
    assert root is not None
    words = ["".join(tree.words[w] for w in g) for g in groups]
    return ConstituencyTree(words, root)


def align_trees(
    text: str,
    byte_spans: list[tuple[int, int]],
    dependency: DependencyTree | None,
    constituency: ConstituencyTree | None,
    word_spans: list[tuple[int, int]] | None = None,
) -> tuple[DependencyTree | None, ConstituencyTree | None, Alignment]:
    """Align a parsed line to its SentencePiece pieces and merge words that share a piece.

    ``byte_spans`` are the pieces' SentencePiece byte offsets in ``text``; ``word_spans``
    the words' character spans when the parser knows them (else found in ``text``).
    Returns the (merged) trees and the :class:`Alignment`; raises :class:`AlignmentError`.
    The one implementation used by ``prepare``, ``translate`` and the probing tasks.
    """
    tree = dependency if dependency is not None else constituency
    if tree is None:
        raise AlignmentError("the line has no parse")
    spans = word_spans if word_spans is not None else find_word_spans(text, tree.words)
    al = align(spans, piece_char_spans(text, byte_spans))
    if al.merged:
        dependency = merge_dependency(dependency, al.groups) if dependency is not None else None
        constituency = merge_constituency(constituency, al.groups) if constituency is not None else None
    return dependency, constituency, al
