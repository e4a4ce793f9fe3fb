"""Tests for structnmt.syntax.align: parser words <-> corpus characters <-> SentencePiece pieces."""

from __future__ import annotations

import random

import numpy as np
import pytest

from structnmt.data.vocab import train_sentencepiece
from structnmt.syntax.align import (
    AlignmentError,
    align,
    find_word_spans,
    merge_constituency,
    merge_dependency,
    piece_char_spans,
)
from structnmt.syntax.io import parse_ptb
from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

# ----------------------------------------------------------------------------- helpers


def assert_valid_alignment(wop: np.ndarray, n_words: int, n_pieces: int) -> None:
    """The documented contract of ``Alignment.word_of_piece``."""
    assert wop.dtype == np.int64
    assert wop.shape == (n_pieces,)
    assert wop[0] == 0
    steps = np.diff(wop)
    assert np.all((steps == 0) | (steps == 1)), f"not non-decreasing in steps of 0/1: {wop.tolist()}"
    assert int(wop.max()) + 1 == n_words, f"{n_words} words but pieces cover {int(wop.max()) + 1}: {wop.tolist()}"


def assert_valid_dependency(tree: DependencyTree) -> None:
    """Exactly one root, every head in range, no cycle."""
    n = len(tree)
    assert all(0 <= h <= n for h in tree.heads), tree.heads
    assert tree.heads.count(0) == 1, f"expected one root, heads={tree.heads}"
    for i in range(n):
        seen = set()
        j = i
        while tree.heads[j] != 0:
            assert j not in seen, f"cycle through word {j}: heads={tree.heads}"
            seen.add(j)
            j = tree.heads[j] - 1


def assert_valid_constituency(tree: ConstituencyTree) -> None:
    """Single root over all words; children tile their parent; one preterminal per word."""
    n = len(tree.words)
    assert (tree.root.start, tree.root.end) == (0, n)

    def check(node: Node) -> None:
        assert node.start < node.end
        if node.is_preterminal:
            assert node.end == node.start + 1, node
            return
        pos = node.start
        for c in node.children:
            assert c.start == pos, f"{node.label}[{node.start},{node.end}) child {c.label}[{c.start},{c.end}) " \
                                   f"does not start at {pos}"
            check(c)
            pos = c.end
        assert pos == node.end, f"{node.label}[{node.start},{node.end}) children end at {pos}"

    check(tree.root)
    pre = [(p.start, p.end) for p in tree.root.walk() if p.is_preterminal]
    assert pre == [(i, i + 1) for i in range(n)]


# ----------------------------------------------------------------------------- find_word_spans


def test_find_word_spans_plain_words_slice_the_text():
    text = "The  cat sat on the mat."
    words = ["The", "cat", "sat", "on", "the", "mat", "."]
    spans = find_word_spans(text, words)
    assert [text[s:e] for s, e in spans] == words
    assert spans[1] == (5, 8)  # the double space is skipped


def test_find_word_spans_undoes_ptb_escapes():
    text = 'He said "hi" (twice) {ok} [x].'
    words = ["He", "said", "``", "hi", "''", "-LRB-", "twice", "-RRB-", "-LCB-", "ok", "-RCB-",
             "-LSB-", "x", "-RSB-", "."]
    spans = find_word_spans(text, words)
    got = [text[s:e] for s, e in spans]
    assert got == ["He", "said", '"', "hi", '"', "(", "twice", ")", "{", "ok", "}", "[", "x", "]", "."]
    # spans are ordered and disjoint
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))


def test_find_word_spans_ptb_quotes_match_typographic_and_literal_quotes():
    text = "“Go” and ``stay''"
    spans = find_word_spans(text, ["``", "Go", "''", "and", "``", "stay", "''"])
    assert [text[s:e] for s, e in spans] == ["“", "Go", "”", "and", "``", "stay", "''"]


def test_find_word_spans_missing_word_raises():
    with pytest.raises(AlignmentError, match="dog"):
        find_word_spans("the cat sat", ["the", "dog", "sat"])


def test_find_word_spans_out_of_order_or_skipping_text_raises():
    # "the" exists but only before "cat": words must be found left to right
    with pytest.raises(AlignmentError):
        find_word_spans("the cat", ["cat", "the"])
    # a word found only after skipping non-space text is not a match
    with pytest.raises(AlignmentError):
        find_word_spans("the big cat", ["the", "cat"])


# ----------------------------------------------------------------------------- SentencePiece

SPECIAL_LINES = [
    "Un café über ﬁne déjà vu.",
    "I can't go home.",
    "Müller's ﬁsh café is naïve.",
    "The ﬁrst ﬂoor is über-cool.",
]


@pytest.fixture(scope="module")
def spm_vocab(tmp_path_factory):
    """A real SentencePiece model trained on a few hundred lines (with é, ü and ligatures)."""
    rng = random.Random(0)
    words = ("a the cat dog café über fine first floor man woman is on in with blue red can't "
             "won't naïve déjà vu home go going street water Müller's fish").split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(300)]
    lines += SPECIAL_LINES * 5
    d = tmp_path_factory.mktemp("spm")
    return train_sentencepiece(lines, d / "spm", vocab_size=200, num_threads=1)


def _pieces(vocab, text):
    return list(vocab.sp.encode(text, return_type="proto").pieces)


def test_piece_char_spans_handwritten_multibyte():
    text = "é über ﬁ"
    # bytes: é=2, space=1, ü=2, ber=3, space=1, ﬁ=3
    byte_spans = [(0, 2), (2, 5), (5, 8), (8, 12)]
    assert piece_char_spans(text, byte_spans) == [(0, 1), (2, 3), (3, 6), (7, 8)]
    # a span of whitespace only becomes empty (start == end)
    assert piece_char_spans("a b", [(0, 1), (1, 2), (2, 3)]) == [(0, 1), (2, 2), (2, 3)]


@pytest.mark.parametrize("text", SPECIAL_LINES)
def test_piece_char_spans_with_real_sentencepiece(spm_vocab, text):
    pieces = _pieces(spm_vocab, text)
    spans = piece_char_spans(text, [(p.begin, p.end) for p in pieces])
    assert len(spans) == len(pieces)
    prev_end = 0
    for p, (s, e) in zip(pieces, spans):
        assert 0 <= s <= e <= len(text)
        assert s >= prev_end, "piece spans must be ordered and disjoint"
        prev_end = e
        # the character span is exactly the piece's surface in the original text, minus
        # its leading whitespace (also when NFKC expanded a ligature such as "ﬁ")
        assert text[s:e] == p.surface.lstrip(), (p.piece, p.surface, text[s:e])
    # together the pieces cover every non-space character of the line
    covered = "".join(text[s:e] for s, e in spans)
    assert covered == "".join(text.split())


@pytest.mark.parametrize("text", SPECIAL_LINES)
def test_align_real_sentencepiece_whitespace_words(spm_vocab, text):
    words = text.split()
    spans = find_word_spans(text, words)
    pieces = _pieces(spm_vocab, text)
    pspans = piece_char_spans(text, [(p.begin, p.end) for p in pieces])
    al = align(spans, pspans)
    assert al.merged == 0  # pieces never cross a space
    assert al.groups == [[i] for i in range(len(words))]
    assert_valid_alignment(al.word_of_piece, len(words), len(pieces))
    # every piece with characters lies inside the characters of its word
    for (s, e), w in zip(pspans, al.word_of_piece):
        if s < e:
            ws, we = spans[w]
            assert ws <= s and e <= we, (text[s:e], words[w])


def test_align_real_sentencepiece_merges_cant(spm_vocab):
    text = "I can't go home."
    words = ["I", "ca", "n't", "go", "home", "."]  # PTB / spaCy tokenisation
    pieces = _pieces(spm_vocab, text)
    pspans = piece_char_spans(text, [(p.begin, p.end) for p in pieces])
    # SentencePiece has a piece crossing "ca|n't" (e.g. "an" or "can")
    assert any(s < 4 < e for s, e in pspans), [p.piece for p in pieces]
    al = align(find_word_spans(text, words), pspans)
    assert al.groups == [[0], [1, 2], [3], [4], [5]]
    assert al.merged == 1
    assert_valid_alignment(al.word_of_piece, 5, len(pieces))


# ----------------------------------------------------------------------------- align (policy)


def test_align_piece_spanning_two_words_merges_them():
    # text "can't go": parser words "ca" "n't" "go", pieces "can't" "go"
    al = align([(0, 2), (2, 5), (6, 8)], [(0, 5), (6, 8)])
    assert al.groups == [[0, 1], [2]]
    assert al.merged == 1
    assert al.word_of_piece.tolist() == [0, 1]


def test_align_piece_over_three_words_and_chained_pieces_merge():
    # "abc d": one piece over the three parser words "a" "b" "c"
    al = align([(0, 1), (1, 2), (2, 3), (4, 5)], [(0, 3), (4, 5)])
    assert al.groups == [[0, 1, 2], [3]]
    assert al.merged == 2
    assert al.word_of_piece.tolist() == [0, 1]
    # pieces "ab" "bc" chain words a-b-c into one group; "x" stays alone
    al = align([(0, 1), (1, 2), (2, 3), (4, 5)], [(0, 2), (1, 3), (4, 5)])
    assert al.groups == [[0, 1, 2], [3]]
    assert al.word_of_piece.tolist() == [0, 0, 1]


def test_align_whitespace_only_pieces_join_previous_word():
    # "a b": pieces "▁" (empty), "a", "▁" (empty, whitespace only), "b"
    al = align([(0, 1), (2, 3)], [(0, 0), (0, 1), (2, 2), (2, 3)])
    assert al.word_of_piece.tolist() == [0, 0, 0, 1]  # the first joins the first word
    assert al.merged == 0
    assert_valid_alignment(al.word_of_piece, 2, 4)


def test_align_piece_over_uncovered_characters_joins_previous_word():
    # "a - b" where the parser dropped the "-"
    al = align([(0, 1), (4, 5)], [(0, 1), (2, 3), (4, 5)])
    assert al.word_of_piece.tolist() == [0, 0, 1]


def test_align_empty_word_merges_with_following_word():
    al = align([(0, 1), (2, 2), (2, 3)], [(0, 1), (2, 3)])
    assert al.groups == [[0], [1, 2]]
    assert_valid_alignment(al.word_of_piece, 2, 2)


def test_align_trailing_words_without_pieces_still_give_every_word_a_piece():
    # two trailing words no piece covers (characters dropped by SentencePiece normalisation,
    # e.g. zero-width spaces): after merging, every word must still own >= 1 piece.
    # BUG (src/structnmt/syntax/align.py, align(), "words without any piece" loop): word 1
    # is merged into word 2, then word 2 (the last) should merge into the previous root,
    # but find(roots[1]) is already word 2, so nothing happens: groups [[0], [1, 2]] with
    # word_of_piece [0] -- group 1 has no piece.
    al = align([(0, 1), (2, 3), (4, 5)], [(0, 1)])
    assert_valid_alignment(al.word_of_piece, len(al.groups), 1)


def test_align_no_words_raises():
    with pytest.raises(AlignmentError):
        align([], [(0, 1)])


# ----------------------------------------------------------------------------- merging trees


def _cant_dependency() -> DependencyTree:
    # I ca n't go home .   (spaCy's parse)
    return DependencyTree(["I", "ca", "n't", "go", "home", "."], [4, 4, 4, 0, 4, 4],
                          ["nsubj", "aux", "neg", "root", "advmod", "punct"],
                          ["PRON", "AUX", "PART", "VERB", "ADV", "PUNCT"], ["PRP", "MD", "RB", "VB", "RB", "."])


CANT_GROUPS = [[0], [1, 2], [3], [4], [5]]


def test_merge_dependency_cant():
    merged = merge_dependency(_cant_dependency(), CANT_GROUPS)
    assert merged.words == ["I", "can't", "go", "home", "."]
    assert merged.heads == [3, 3, 0, 3, 3]
    assert merged.deprels[1] == "aux" and merged.upos[1] == "AUX" and merged.xpos[1] == "MD"
    assert_valid_dependency(merged)


def test_merge_dependency_group_head_is_the_member_pointing_outside():
    # "New York is big": New -> York (compound), York -> is, is root, big -> is
    tree = DependencyTree(["New", "York", "is", "big"], [2, 3, 0, 3], ["compound", "nsubj", "root", "acomp"],
                          ["PROPN", "PROPN", "AUX", "ADJ"])
    merged = merge_dependency(tree, [[0, 1], [2], [3]])
    assert merged.words == ["NewYork", "is", "big"]
    assert merged.heads == [2, 0, 2]
    assert merged.deprels == ["nsubj", "root", "acomp"]
    assert_valid_dependency(merged)


def test_merge_dependency_group_containing_the_root_stays_root():
    # x -> z, y = root, z -> y; merging {x, y}: the group holds the root, so it must be the root.
    # BUG (src/structnmt/syntax/align.py, merge_dependency): rep = outside[0] picks x (its
    # head z is outside the group) instead of the root y, giving heads [2, 1]: a cycle and
    # no root. Fix: pick the member closest to the root (minimum depth; a root member first).
    tree = DependencyTree(["x", "y", "z"], [3, 0, 2], ["dep", "root", "dep"], ["X", "X", "X"])
    merged = merge_dependency(tree, [[0, 1], [2]])
    assert merged.heads == [0, 1]
    assert_valid_dependency(merged)


def test_merge_dependency_no_groups_is_identity():
    tree = _cant_dependency()
    assert merge_dependency(tree, [[i] for i in range(len(tree))]) is tree


def test_merge_constituency_inside_one_phrase():
    tree = parse_ptb("(S (NP (NNP New) (NNP York)) (VP (VBZ is) (ADJP (JJ big))))")
    merged = merge_constituency(tree, [[0, 1], [2], [3]])
    assert merged.words == ["NewYork", "is", "big"]
    assert_valid_constituency(merged)
    assert merged.tags == ["NNP", "VBZ", "JJ"]
    assert ("NP", 0, 1) in [(lab, s, e) for s, e, lab in merged.spans()]


def test_merge_constituency_across_phrases_keeps_a_valid_tree():
    # spaCy's head projection of "I ca n't go home ." puts "ca" and "n't" in sibling VPs.
    # BUG (src/structnmt/syntax/align.py, merge_constituency.remap): a node's new span is
    # taken from index[n.start] / index[n.end - 1] of its *old* span, not from its surviving
    # children; the inner VP (n't go home) becomes [1, 4) although its children start at 2,
    # overlapping its sibling VP (can't) [1, 2). Fix: start, end = kids[0].start, kids[-1].end.
    tree = parse_ptb("(S (NP (PRP I)) (VP (VP (MD ca)) (VP (ADVP (RB n't)) (VB go) (ADVP (RB home)))) (. .))")
    merged = merge_constituency(tree, CANT_GROUPS)
    assert merged.words == ["I", "can't", "go", "home", "."]
    assert merged.tags == ["PRP", "MD", "VB", "RB", "."]
    assert_valid_constituency(merged)


def test_merge_constituency_no_groups_is_identity():
    tree = parse_ptb("(S (NP (DT a) (NN b)) (VP (VBZ c)))")
    assert merge_constituency(tree, [[0], [1], [2]]) is tree
