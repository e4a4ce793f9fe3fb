"""Structure features against the papers' worked examples, hand-built trees and brute-force twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structnmt.syntax.features import (
    FEATURES,
    OUT_OF_PHRASE,
    check_word_of_piece,
    dependency_hypernodes,
    dependency_mask,
    hypernode_adjacency,
    local_phrase_positions,
    local_phrases,
    ngram_hypernodes,
    ngram_partition,
    syntactic_partitions,
    to_pieces,
    word_boundaries,
    word_depths,
    word_of_piece_from_pieces,
)
from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

INF = OUT_OF_PHRASE


def N(label: str, start: int, end: int, *children: Node) -> Node:
    return Node(label, start, end, list(children))


def bush_tree() -> ConstituencyTree:
    """MG-SA Fig. 1 / RHE Fig. 3: (S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon)))))."""
    return ConstituencyTree(
        "Bush held a talk with Sharon".split(),
        N(
            "S",
            0,
            6,
            N("NP", 0, 1, N("NNP", 0, 1)),
            N(
                "VP",
                1,
                6,
                N("VBD", 1, 2),
                N("NP", 2, 4, N("DT", 2, 3), N("NN", 3, 4)),
                N("PP", 4, 6, N("IN", 4, 5), N("NP", 5, 6, N("NNP", 5, 6))),
            ),
        ),
    )


def she_ate() -> DependencyTree:
    """She <-nsubj- ate -obj-> apple -det-> the ; ate is the root."""
    return DependencyTree(
        words=["She", "ate", "the", "apple"],
        heads=[2, 0, 4, 2],
        deprels=["nsubj", "root", "det", "obj"],
        upos=["PRON", "VERB", "DET", "NOUN"],
    )


# ----------------------------------------------------------------------------- hypothesis strategies
@st.composite
def word_of_piece_st(draw, min_words: int = 1, max_words: int = 12) -> np.ndarray:
    lengths = draw(st.lists(st.integers(1, 4), min_size=min_words, max_size=max_words))
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int64)


@st.composite
def constituency_st(draw, max_words: int = 10) -> ConstituencyTree:
    n = draw(st.integers(1, max_words))
    labels = st.sampled_from(["S", "NP", "VP", "PP", "ADJP", "SBAR"])

    def unary_chain(node: Node) -> Node:
        for _ in range(draw(st.integers(0, 2))):
            node = Node(draw(labels), node.start, node.end, [node])
        return node

    def build(start: int, end: int) -> Node:
        if end - start == 1:
            return unary_chain(
                Node(draw(st.sampled_from(["NN", "VB", "DT", "IN"])), start, start + 1)
            )
        n_cuts = draw(st.integers(1, min(3, end - start - 1)))
        cuts = sorted(
            draw(st.sets(st.integers(start + 1, end - 1), min_size=n_cuts, max_size=n_cuts))
        )
        bounds = [start, *cuts, end]
        kids = [build(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        return unary_chain(Node(draw(labels), start, end, kids))

    root = build(0, n)
    if root.is_preterminal:  # the root spans every word; keep a phrase node on top
        root = Node("S", 0, n, [root])
    return ConstituencyTree([f"w{i}" for i in range(n)], root)


@st.composite
def dependency_st(draw, max_words: int = 10) -> DependencyTree:
    n = draw(st.integers(1, max_words))
    order = draw(st.permutations(list(range(n))))
    heads = [0] * n
    for pos in range(1, n):
        heads[order[pos]] = order[draw(st.integers(0, pos - 1))] + 1
    return DependencyTree([f"w{i}" for i in range(n)], heads, ["dep"] * n, ["X"] * n)


@st.composite
def tree_and_pieces(draw, strategy=constituency_st):
    tree = draw(strategy())
    lengths = draw(st.lists(st.integers(1, 3), min_size=len(tree), max_size=len(tree)))
    return tree, np.repeat(np.arange(len(tree)), lengths).astype(np.int64)


# ----------------------------------------------------------------------------- word_of_piece
def test_word_of_piece_from_sentencepiece_pieces_and_boundaries():
    pieces = ["▁Bush", "▁he", "ld", "▁a", "▁ta", "l", "k", "▁", "("]
    wop = word_of_piece_from_pieces(pieces)
    assert wop.dtype == np.int64
    assert wop.tolist() == [0, 1, 1, 2, 3, 3, 3, 4, 4]
    assert word_boundaries(wop).tolist() == [
        True,
        True,
        False,
        True,
        True,
        False,
        False,
        True,
        False,
    ]
    # a first piece without the word marker still starts word 0
    assert word_of_piece_from_pieces(["ab", "c", "▁d"]).tolist() == [0, 0, 1]


@pytest.mark.parametrize("bad", [[1, 1], [0, 2], [0, 1, 0], [], [[0, 1]]])
def test_invalid_word_of_piece_is_rejected(bad):
    with pytest.raises(ValueError):
        check_word_of_piece(np.asarray(bad, dtype=np.int64))


def test_word_of_piece_must_match_tree_length():
    with pytest.raises(ValueError, match="covers 5 words but the tree has 6"):
        syntactic_partitions(bush_tree(), np.arange(5), 2)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_word_boundaries_collapse_pieces_back_to_words(lengths):
    pieces = [("▁" if j == 0 else "") + f"p{i}{j}" for i, n in enumerate(lengths) for j in range(n)]
    wop = word_of_piece_from_pieces(pieces)
    assert wop.tolist() == np.repeat(np.arange(len(lengths)), lengths).tolist()
    b = word_boundaries(wop)
    assert b.sum() == len(lengths) and b[0]
    # SA-NMT eq. 24: summing a piece-level score matrix over each word's pieces
    phi = np.arange(len(wop) ** 2, dtype=float).reshape(len(wop), len(wop))
    idx = np.cumsum(b) - 1
    col = np.zeros((len(wop), len(lengths)))
    np.add.at(col.T, idx, phi.T)
    word = np.zeros((len(lengths), len(lengths)))
    np.add.at(word, idx, col)
    brute = np.array(
        [
            [phi[np.ix_(wop == i, wop == j)].sum() for j in range(len(lengths))]
            for i in range(len(lengths))
        ]
    )
    np.testing.assert_allclose(word, brute)


# ----------------------------------------------------------------------------- MG-SA n-gram partition
def test_ngram_partition_widens_to_whole_words():
    # words of 1, 3, 1, 2 pieces
    wop = np.array([0, 1, 1, 1, 2, 3, 3])
    assert ngram_partition(wop, 2).tolist() == [0, 0, 0, 0, 1, 1, 1]
    # n = 3: phrases (w0 w1 w2) (w3); the last phrase is the shorter one (padded later)
    assert ngram_partition(wop, 3).tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert ngram_partition(wop, 1).tolist() == wop.tolist()
    assert ngram_partition(wop, 10).tolist() == [0] * 7
    assert ngram_partition(wop, 2).dtype == np.int64
    with pytest.raises(ValueError):
        ngram_partition(wop, 0)


@given(word_of_piece_st(), st.integers(1, 5))
def test_ngram_partition_properties(wop, n):
    ids = ngram_partition(wop, n)
    assert ids.shape == wop.shape and ids[0] == 0
    assert set(np.diff(ids).tolist()) <= {0, 1}  # non-decreasing, consecutive ids
    for w in np.unique(wop):  # never splits a word
        assert len(set(ids[wop == w].tolist())) == 1
    words_per_phrase = np.bincount(ids[word_boundaries(wop)])
    assert (words_per_phrase[:-1] == n).all() and 1 <= words_per_phrase[-1] <= n
    assert len(words_per_phrase) == -(-(wop[-1] + 1) // n)  # M = ceil(T / n)


# ----------------------------------------------------------------------------- MG-SA syntactic partition
def test_syntactic_partition_matches_mgsa_figure_1():
    ids, labels = syntactic_partitions(bush_tree(), np.arange(6), K=2)
    assert ids.shape == (2, 6) and ids.dtype == np.int64
    # ("Bush", "held a talk with Sharon"), ("Bush", "held", "a talk", "with Sharon")
    assert ids.tolist() == [[0, 1, 1, 1, 1, 1], [0, 1, 2, 2, 3, 3]]
    assert labels == [["NP", "VP"], ["NNP", "VBD", "NP", "PP"]]  # "NP" tags "a talk" at level 2


def test_syntactic_partition_deeper_levels_keep_words_that_ended():
    ids, labels = syntactic_partitions(bush_tree(), np.arange(6), K=4)
    assert ids[2].tolist() == [0, 1, 2, 3, 4, 5]
    assert labels[2] == ["NNP", "VBD", "DT", "NN", "IN", "NP"]
    assert labels[3] == ["NNP", "VBD", "DT", "NN", "IN", "NNP"]


def test_syntactic_partition_with_subwords_and_root_wrapper():
    t = bush_tree()
    wrapped = ConstituencyTree(t.words, N("ROOT", 0, 6, t.root))
    # "held" -> he ld, "talk" -> ta l k, "Sharon" -> Sha ron
    wop = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5, 5])
    ids, labels = syntactic_partitions(wrapped, wop, K=2)
    assert ids.tolist() == [[0, 1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 2, 2, 2, 2, 3, 3, 3]]
    assert labels == [["NP", "VP"], ["NNP", "VBD", "NP", "PP"]]


@settings(max_examples=60)
@given(tree_and_pieces(), st.integers(1, 5))
def test_syntactic_partitions_are_nested_constituents(tp, K):
    tree, wop = tp
    ids, labels = syntactic_partitions(tree, wop, K)
    assert ids.shape == (K, len(wop))
    nodes = {(n.start, n.end, n.label) for n in tree.root.walk()}
    for lev in range(K):
        row = ids[lev]
        assert row[0] == 0 and set(np.diff(row).tolist()) <= {0, 1}
        assert len(labels[lev]) == row[-1] + 1
        word_ids = row[word_boundaries(wop)]
        for w in range(len(tree)):
            assert len(set(row[wop == w].tolist())) == 1  # a word is never split
        for m, lab in enumerate(labels[lev]):  # every phrase is a labelled node of the tree
            span = np.flatnonzero(word_ids == m)
            assert (int(span[0]), int(span[-1]) + 1, lab) in nodes
        if lev:  # level l refines level l-1
            prev = ids[lev - 1]
            assert all(len(set(prev[row == m].tolist())) == 1 for m in range(row[-1] + 1))


# ----------------------------------------------------------------------------- RHE DEA
def test_dependency_mask_hand_built():
    m = dependency_mask(she_ate(), np.arange(4))
    expected = np.array(
        [
            [1, 1, 0, 0],  # She: self, head ate
            [1, 1, 0, 1],  # ate: self, dependents She and apple
            [0, 0, 1, 1],  # the: self, head apple
            [0, 1, 1, 1],  # apple: self, head ate, dependent the
        ],
        dtype=bool,
    )
    assert m.dtype == bool and (m == expected).all()
    # "apple" in two pieces: both pieces see each other and share the word's arcs
    mp = dependency_mask(she_ate(), np.array([0, 1, 2, 3, 3]))
    assert (mp == expected[np.ix_([0, 1, 2, 3, 3], [0, 1, 2, 3, 3])]).all()
    assert mp[3, 4] and mp[4, 3] and mp[4, 1] and not mp[4, 0]


@given(tree_and_pieces(dependency_st))
def test_dependency_mask_properties(tp):
    tree, wop = tp
    m = dependency_mask(tree, wop)
    assert m.shape == (len(wop), len(wop))
    assert (m == m.T).all() and m.diagonal().all()
    n = len(tree)
    brute = np.array(
        [
            [i == j or tree.heads[i] == j + 1 or tree.heads[j] == i + 1 for j in range(n)]
            for i in range(n)
        ]
    )
    assert (m == brute[np.ix_(wop, wop)]).all()
    assert dependency_mask(tree, np.arange(n)).sum() == n + 2 * (n - 1)  # a tree has n - 1 arcs


# ----------------------------------------------------------------------------- RHE LPEA
FIG3 = np.array(
    [
        #  Bush held   a  talk with Sharon
        [0, 0, 1, 1, 1, 2],  # Bush
        [0, 0, 1, 1, 1, 2],  # held
        [-1, -1, 0, 0, INF, INF],  # a
        [-1, -1, 0, 0, INF, INF],  # talk
        [-1, -1, INF, INF, 0, 1],  # with
        [-2, -2, INF, INF, -1, 0],  # Sharon
    ]
)
# RHE Fig. 3's matrix as the paper's text extraction gives it, row by row ("?" = infinity):
FIG3_TEXT = "0 0 1 1 1 2 0 0 1 1 1 2 0 0 -1 -1 ? ? 0 0 -1 -1 ? ? 0 -1 -1 1 ? ? 0 -1 -2 ? -2 ?"


def test_lpea_reproduces_rhe_figure_3():
    rp = local_phrase_positions(bush_tree(), np.arange(6), k=4, rule="rule2")
    assert rp.dtype == np.int64
    np.testing.assert_array_equal(rp, FIG3)
    # the text's two worked entries: RP_{2,4} ("held", "talk") = layer 4 - layer 3 = 1; talk/Sharon = inf
    assert rp[1, 3] == 1 and rp[3, 5] == INF
    # the extracted figure lists each row's values (in scrambled order within the row)
    vals = [INF if v == "?" else int(v) for v in FIG3_TEXT.split()]
    for i in range(6):
        assert sorted(rp[i].tolist()) == sorted(vals[6 * i : 6 * i + 6])


def test_lpea_rule1_alone_and_clipping():
    t = bush_tree()
    rp1 = local_phrase_positions(t, np.arange(6), k=4, rule="rule1")
    # Rule 1 only: local_phrase(x) = words under x's lowest multi-word ancestor
    assert rp1[0].tolist() == [0, 0, 1, 1, 1, 2]  # Bush: S
    assert rp1[1].tolist() == [INF, 0, 1, 1, 1, 2]  # held: VP (Bush outside)
    assert rp1[5].tolist() == [INF, INF, INF, INF, -1, 0]  # Sharon: PP
    assert word_depths(t).tolist() == [2, 2, 3, 3, 3, 4]
    rp = local_phrase_positions(t, np.arange(6), k=1)
    np.testing.assert_array_equal(rp, np.where(FIG3 == INF, INF, np.clip(FIG3, -1, 1)))
    assert (local_phrase_positions(t, np.arange(6), k=0) == np.where(FIG3 == INF, INF, 0)).all()
    with pytest.raises(ValueError, match="rule"):
        local_phrase_positions(t, np.arange(6), k=2, rule="rule3")


def test_lpea_with_subwords():
    wop = np.array([0, 1, 1, 2, 3, 4, 5, 5])  # held -> 2 pieces, Sharon -> 2 pieces
    rp = local_phrase_positions(bush_tree(), wop, k=4)
    np.testing.assert_array_equal(rp, FIG3[np.ix_(wop, wop)])
    assert rp[1, 2] == 0 and rp[6, 7] == 0 and rp[7, 6] == 0


def test_lpea_rule2_literal_reading_differs_only_when_a_later_word_has_the_larger_phrase():
    # (S (NP (DT the) (NN man)) (VP (VBD left))): LP1(the) = NP, LP1(left) = S
    t = ConstituencyTree(
        ["the", "man", "left"],
        N("S", 0, 3, N("NP", 0, 2, N("DT", 0, 1), N("NN", 1, 2)), N("VP", 2, 3, N("VBD", 2, 3))),
    )
    sym = local_phrases(t, "rule2")
    lit = local_phrases(t, "rule2_literal")
    assert sym[0, 2] and sym[2, 0]
    assert (
        lit[2, 0] and not lit[0, 2]
    )  # Rule 2 as written only copies from earlier x_j to later x_i
    assert (
        local_phrases(bush_tree(), "rule2_literal")
        == local_phrases(bush_tree(), "rule2")
    ).all()


@settings(max_examples=60)
@given(tree_and_pieces(), st.integers(0, 4))
def test_lpea_properties_against_brute_force(tp, k):
    tree, wop = tp
    n = len(tree)
    phrases = [(a, b) for a, b, _ in tree.spans() if b - a > 1]
    depth = [
        sum(a <= i < b for a, b, _ in tree.spans()) for i in range(n)
    ]  # non-preterminal ancestors
    lp1 = np.zeros((n, n), dtype=bool)
    for i in range(n):
        cover = [(a, b) for a, b in phrases if a <= i < b]
        if cover:
            a, b = min(cover, key=lambda s: s[1] - s[0])
            lp1[i, a:b] = True
        else:
            lp1[i, i] = True
    for rule, lp in (("rule1", lp1), ("rule2", lp1 | lp1.T)):
        rp = local_phrase_positions(tree, wop, k, rule)
        word_rp = np.array(
            [
                [max(-k, min(k, depth[j] - depth[i])) if lp[i, j] else INF for j in range(n)]
                for i in range(n)
            ]
        )
        np.testing.assert_array_equal(rp, word_rp[np.ix_(wop, wop)])
        finite = rp != INF
        assert (np.abs(rp[finite]) <= k).all() and (rp.diagonal() == 0).all()
        both = finite & finite.T
        assert (
            rp[both] == -rp.T[both]
        ).all()  # antisymmetric wherever both directions are in a phrase
        if rule == "rule2":
            assert (finite == finite.T).all()


# ----------------------------------------------------------------------------- PhraseTransformer
def test_ngram_hypernodes_four_words():
    spans, adj = ngram_hypernodes(4, 3)
    # eq. 1 with k = 3: runs of 2 or 3 adjacent words (single words are the simple nodes)
    assert spans == [(0, 2), (1, 3), (2, 4), (0, 3), (1, 4)]
    assert adj.dtype == bool and adj.tolist() == [
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1],
        [1, 1, 1, 0],
        [0, 1, 1, 1],
    ]
    # eq. 6 over the 4 words + 5 hypernodes
    a = hypernode_adjacency(adj)
    assert a.shape == (9, 9) and (a == a.T).all() and a.diagonal().all()
    assert not a[:4, :4][
        ~np.eye(4, dtype=bool)
    ].any()  # distinct words are not subsets of each other
    assert a[4, 7] and a[5, 7] and a[5, 8] and a[6, 8]  # bigram inside trigram
    assert not a[4, 5] and not a[6, 7] and not a[4, 8]  # overlapping but not nested
    assert a.sum() == 9 + 2 * 12 + 2 * 4  # diag + word/hyper links + nested pairs
    assert ngram_hypernodes(4, 1)[1].shape == (0, 4)
    assert ngram_hypernodes(3, 9)[0] == [(0, 2), (1, 3), (0, 3)]


def test_dependency_hypernodes_and_pieces():
    pairs, adj = dependency_hypernodes(she_ate())
    assert pairs == [(1, 0), (3, 2), (1, 3)]  # (head, dependent), in dependent order
    assert adj.tolist() == [[1, 1, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]]
    a = hypernode_adjacency(adj)
    assert not a[4:, 4:][~np.eye(3, dtype=bool)].any()  # two arcs are never nested
    wop = np.array([0, 1, 2, 3, 3])
    assert to_pieces(adj, wop).tolist() == [[1, 1, 0, 0, 0], [0, 0, 1, 1, 1], [0, 1, 0, 1, 1]]
    with pytest.raises(ValueError):
        to_pieces(adj, np.array([0, 1, 2]))


@given(st.integers(1, 9), st.integers(1, 5))
def test_hypernode_properties(n, k):
    spans, adj = ngram_hypernodes(n, k)
    brute = {(i, j + 1) for i in range(n) for j in range(i + 1, n) if j - i < k}
    assert set(spans) == brute and len(spans) == len(brute)
    assert (adj.sum(1) == [e - s for s, e in spans]).all()
    a = hypernode_adjacency(adj)
    sets = [{i} for i in range(n)] + [set(range(s, e)) for s, e in spans]
    assert a.tolist() == [[x <= y or y <= x for y in sets] for x in sets]


# ----------------------------------------------------------------------------- registry
def test_registry_builds_each_feature_from_the_trees_it_needs():
    assert FEATURES["dep_mask"].needs == ("dependency",) and FEATURES["syntax_partition"].needs == (
        "constituency",
    )
    wop = np.array([0, 1, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(
        FEATURES["lpea_positions"](wop, constituency=bush_tree(), k=2),
        local_phrase_positions(bush_tree(), wop, 2),
    )
    ids, labels = FEATURES["syntax_partition"](wop, constituency=bush_tree(), K=2)
    assert labels[1] == ["NNP", "VBD", "NP", "PP"] and ids.shape == (2, 7)
    spans, adj = FEATURES["ngram_hypernodes"](wop, k=2)
    assert spans[0] == (0, 2) and adj.shape == (5, 7) and adj[0].tolist() == [1, 1, 1, 0, 0, 0, 0]
    assert FEATURES["ngram_partition"](wop, n=2).tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert FEATURES["word_boundaries"](wop).sum() == 6
    with pytest.raises(ValueError, match="needs a dependency tree"):
        FEATURES["dep_mask"](wop)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_every_registered_feature_batches_by_its_declared_padding(name):
    """Each feature of the registry, on two sentences of different lengths, from the trees it declares:
    the batch tensor keeps each sentence's array, has the declared padding everywhere past it and
    the declared value at each sentence's EOS; a tree it does not declare is never read."""
    feat = FEATURES[name]
    bush_dep = DependencyTree("Bush held a talk with Sharon".split(), [2, 0, 4, 2, 2, 5], ["dep"] * 6, ["X"] * 6)
    she_const = ConstituencyTree(["She", "ate", "the", "apple"], N("S", 0, 4, N("NP", 0, 1, N("PRP", 0, 1)), N(
        "VP", 1, 4, N("VBD", 1, 2), N("NP", 2, 4, N("DT", 2, 3), N("NN", 3, 4)))))
    wops = [np.array([0, 1, 1, 2, 3, 4, 5]), np.array([0, 1, 2, 3])]
    every = {"constituency": [bush_tree(), she_const], "dependency": [bush_dep, she_ate()]}
    trees = {t: every[t] for t in feat.needs}
    values = [feat(w, **{t: trees[t][b] for t in trees}, **feat.example) for b, w in enumerate(wops)]
    S = 10
    batch = feat.batch("x", values, S, {"NP": 1, "VP": 2})
    t = batch["x"].numpy()
    pad = feat.padding
    assert t.dtype == np.dtype(pad.dtype) and t.shape[0] == 2 and t.shape[-1] == S
    for b, v in enumerate(values):
        a = feat.array(v) if feat.array else v
        P = a.shape[-1]
        own = t[b][tuple(slice(0, n) for n in a.shape)]
        if pad.layout == "pairwise":  # the diagonal rule may overwrite the array's own diagonal
            np.testing.assert_array_equal(own[~np.eye(P, dtype=bool)], a[~np.eye(P, dtype=bool)])
        else:
            np.testing.assert_array_equal(own, a)
        rows = a.shape[0] if pad.layout == "rows" else None
        eos = t[b][:rows, P] if pad.layout == "rows" else t[b][P] if pad.layout == "sequence" else t[b][P, :P]
        want = (pad.pad if pad.eos is None else a.max(axis=-1) + 1 if pad.eos == "next_id" else pad.eos)
        np.testing.assert_array_equal(eos, np.broadcast_to(want, eos.shape))
        after = t[b][..., P + 1:]
        if pad.layout == "pairwise" and pad.diagonal is not None:
            after = after.copy()
            after[np.arange(P + 1, S), np.arange(S - P - 1)] = pad.pad
        assert (after == pad.pad).all()
    assert all(k == "x" or k.startswith("x.") for k in batch)


def test_a_feature_registered_with_its_padding_is_batched_without_new_code():
    """A new feature (a user's plugin) needs a function and a Padding; pad_structures has no branch for it."""
    from structnmt.syntax.batching import StructureSpec, build_structures
    from structnmt.syntax.features import Feature, Padding, register_feature

    feat = Feature("word_index_test", lambda w, t: np.asarray(w, dtype=np.int64), (), (), "word of each piece",
                   Padding("sequence", np.int64, pad=-1, eos="next_id"))
    register_feature(feat)
    try:
        with pytest.raises(ValueError, match="Duplicate feature name"):
            register_feature(feat)
        out = build_structures({"wi": StructureSpec("word_index_test")}, [(None, None), (None, None)],
                               [np.array([0, 0, 1]), np.array([0])], 5)
        assert out["wi"].tolist() == [[0, 0, 1, 2, -1], [0, 1, -1, -1, -1]]
    finally:
        del FEATURES["word_index_test"]
    with pytest.raises(ValueError, match="layout 'matrix'"):
        Padding("matrix", np.int64, pad=0)
    with pytest.raises(ValueError, match="needs an integer dtype"):
        Padding("sequence", np.bool_, pad=False, eos="next_id")
    with pytest.raises(ValueError, match="reads constituency"):
        Feature("bad", lambda w, t: w, ("semantics",), (), "", Padding("sequence", np.int64, pad=0))


def test_dependency_hypernode_modes():
    """What k means for semantic hypernodes: edges (eq. 8), connected subtrees, edges + n-grams."""
    # 0 <- 1 -> 2, 2 -> 3 (word 1 the root): arcs (1,0), (1,2), (2,3)
    tree = DependencyTree(list("abcd"), [2, 0, 2, 3], ["dep"] * 4, ["X"] * 4)
    edges, adj = dependency_hypernodes(tree, 3, "edges")
    assert edges == [(1, 0), (1, 2), (2, 3)] and adj.sum(1).tolist() == [2, 2, 2]
    sub2, _ = dependency_hypernodes(tree, 2, "subtrees")
    assert sub2 == edges  # k = 2: exactly eq. 8
    sub3, adj3 = dependency_hypernodes(tree, 3, "subtrees")
    # connected triples: {0,1,2} (head with two dependents), {1,2,3} (chain); {0,1,3} is not connected
    assert sub3 == edges + [(0, 1, 2), (1, 2, 3)]
    assert adj3[3].tolist() == [True, True, True, False]
    sub4, _ = dependency_hypernodes(tree, 4, "subtrees")
    assert sub4[-1] == (0, 1, 2, 3) and len(sub4) == 6
    mixed, _ = dependency_hypernodes(tree, 3, "edges_ngrams")
    # bigrams (0,1), (1,2), (2,3) are arcs already; (0,1,2) and (1,2,3) are the trigrams
    assert mixed == edges + [(0, 1, 2), (1, 2, 3)]
    tree2 = DependencyTree(list("abc"), [3, 0, 2], ["dep"] * 3, ["X"] * 3)  # arcs (2,0), (1,2): bigram (0,1) is not an arc
    mixed2, _ = dependency_hypernodes(tree2, 2, "edges_ngrams")
    assert mixed2 == [(2, 0), (1, 2), (0, 1)]
    with pytest.raises(ValueError, match="unknown mode"):
        dependency_hypernodes(tree, 2, "spans")


def test_piece_level_ngram_hypernodes():
    wop = np.array([0, 0, 1, 2])  # word 0 has two pieces
    spans, adj = FEATURES["ngram_hypernodes"](wop, k=2, unit="piece")
    assert spans == [(0, 2), (1, 3), (2, 4)] and adj.shape == (3, 4)
    spans_w, adj_w = FEATURES["ngram_hypernodes"](wop, k=2)
    assert spans_w == [(0, 2), (1, 3)] and adj_w[0].tolist() == [True, True, True, False]


def test_lpea_of_the_converted_ud_parse_reproduces_fig_3_only_in_the_hybrid_style():
    """LPEA reads constituency trees; with spaCy the dataset's come from its dependencies by head
    projection. The UD parse of "Bush held a talk with Sharon" gives RHE Fig. 3's matrix under the
    hybrid conversion (the default), not under flat or xbar (docs/rhe.md)."""
    from structnmt.syntax.convert import dependency_to_constituency

    dep = DependencyTree("Bush held a talk with Sharon".split(), [2, 0, 4, 2, 6, 2],
                         ["nsubj", "root", "det", "obj", "case", "obl"], ["PROPN", "VERB", "DET", "NOUN", "ADP", "PROPN"])
    fig3 = local_phrase_positions(bush_tree(), np.arange(6), 6)
    same = {style: (local_phrase_positions(dependency_to_constituency(dep, style), np.arange(6), 6) == fig3).all()
            for style in ("hybrid", "flat", "xbar")}
    assert same == {"hybrid": True, "flat": False, "xbar": False}
