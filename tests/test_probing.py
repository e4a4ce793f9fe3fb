"""MG-SA §4.2 probing labels (Shi et al. 2016) on hand-built trees."""

from __future__ import annotations

import random

import pytest

from structnmt.syntax.probing import (
    main_verb_chain,
    pos_labels,
    probing_labels,
    smallest_phrase_constituent,
    tense,
    top_level_sequence,
    tss_classes,
    voice,
)
from structnmt.syntax.trees import ConstituencyTree, Node


def parse(s: str) -> ConstituencyTree:
    """Tiny bracket reader for the tests: ``(S (NP (NNP Bush)) (VP ...))``."""
    toks = s.replace("(", " ( ").replace(")", " ) ").split()
    words: list[str] = []
    pos = 0

    def node() -> Node:
        nonlocal pos
        assert toks[pos] == "("
        label = toks[pos + 1]
        pos += 2
        if toks[pos] != "(":  # preterminal
            words.append(toks[pos])
            assert toks[pos + 1] == ")"
            pos += 2
            return Node(label, len(words) - 1, len(words))
        kids = []
        while toks[pos] == "(":
            kids.append(node())
        assert toks[pos] == ")"
        pos += 1
        return Node(label, kids[0].start, kids[-1].end, kids)

    root = node()
    return ConstituencyTree(words, root)


BUSH = "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon)))))"
PASSIVE_PAST = "(S (NP (DT A) (NN talk)) (VP (VBD was) (VP (VBN held) (PP (IN with) (NP (NNP Sharon))))) (. .))"


@pytest.mark.parametrize(
    ("bracket", "expected_voice", "expected_tense"),
    [
        (BUSH, "active", "past"),
        (PASSIVE_PAST, "passive", "past"),
        ("(S (NP (NNP Bush)) (VP (VBZ holds) (NP (DT a) (NN talk))) (. .))", "active", "non-past"),
        ("(S (NP (DT A) (NN talk)) (VP (VBZ is) (VP (VBN held))) (. .))", "passive", "non-past"),
        (
            "(S (NP (NNP Bush)) (VP (VBZ has) (VP (VBN held) (NP (DT a) (NN talk)))))",
            "active",
            "non-past",
        ),
        (
            "(S (NP (NNP Bush)) (VP (VBD had) (VP (VBN held) (NP (DT a) (NN talk)))))",
            "active",
            "past",
        ),
        ("(S (NP (NN talk)) (VP (VBD had) (VP (VBN been) (VP (VBN held)))))", "passive", "past"),
        ("(S (NP (PRP He)) (VP (VBD got) (VP (VBN fired))))", "passive", "past"),
        ("(S (NP (PRP He)) (VP (VBD was) (VP (VBG holding) (NP (NN talks)))))", "active", "past"),
        ("(S (NP (PRP He)) (VP (MD will) (VP (VB be) (VP (VBN fired)))))", "passive", "non-past"),
        ("(S (NP (PRP He)) (VP (MD would) (VP (VB go))))", "active", "non-past"),
        ("(ROOT (S (NP (PRP He)) (VP (VBD was) (VP (VBN fired)))))", "passive", "past"),
        (
            "(S (NP (PRP He)) (VP (VBZ wants) (S (VP (TO to) (VP (VB be) (VP (VBN seen)))))))",
            "active",
            "non-past",
        ),
        (
            "(S (S (NP (PRP He)) (VP (VBD left))) (CC and) (S (NP (PRP she)) (VP (VBZ stays))))",
            "active",
            "past",
        ),
        ("(NP (NP (DT A) (NN talk)) (PP (IN with) (NP (NNP Sharon))))", "active", "non-past"),
    ],
)
def test_voice_and_tense_of_the_main_verb(bracket, expected_voice, expected_tense):
    tree = parse(bracket)
    assert voice(tree) == expected_voice
    assert tense(tree) == expected_tense


def test_main_verb_chain_lists_auxiliaries_then_main_verb():
    chain = main_verb_chain(
        parse("(S (NP (NN talk)) (VP (VBD had) (VP (VBN been) (VP (VBN held)))))")
    )
    assert [(n.label, n.start) for n in chain] == [("VBD", 1), ("VBN", 2), ("VBN", 3)]
    assert main_verb_chain(parse("(NP (DT a) (NN talk))")) == []


def test_top_level_sequence_skips_root_wrapper_and_function_tags():
    assert top_level_sequence(parse(BUSH)) == "NP VP"
    assert top_level_sequence(parse(PASSIVE_PAST)) == "NP VP ."
    assert (
        top_level_sequence(parse("(ROOT (S (NP-SBJ (PRP He)) (VP (VBD left)) (. .)))")) == "NP VP ."
    )


def test_tss_keeps_most_frequent_with_deterministic_ties():
    # 21 distinct sequences: counts 5 ("A"), 4 ("B"), then 19 sequences tied at 1.
    seqs = ["A"] * 5 + ["B"] * 4 + [f"S{i:02d}" for i in range(19)]
    ranked = ["A", "B"] + [f"S{i:02d}" for i in range(17)]  # ties broken by ascending string
    expected = {s: (s if s in ranked else "other") for s in set(seqs)}
    for seed in range(3):  # independent of corpus order
        shuffled = seqs[:]
        random.Random(seed).shuffle(shuffled)
        out = tss_classes(shuffled)
        assert out == [expected[s] for s in shuffled]
        assert len(set(out)) == 20  # 19 classes + "other"
    assert tss_classes(["NP VP .", "NP VP", "NP VP ."], n=1) == ["NP VP .", "other", "NP VP ."]
    assert tss_classes(["b", "a"], n=1) == ["other", "a"]


def test_smallest_phrase_constituent_and_pos():
    tree = parse(BUSH)
    assert smallest_phrase_constituent(tree) == ["NP", "VP", "NP", "NP", "PP", "NP"]
    assert pos_labels(tree) == ["NNP", "VBD", "DT", "NN", "IN", "NNP"]
    passive = parse(PASSIVE_PAST)
    assert smallest_phrase_constituent(passive) == ["NP", "NP", "VP", "VP", "PP", "NP", "S"]
    tagged = parse("(S (NP-SBJ (PRP He)) (VP (VBD left)))")
    assert smallest_phrase_constituent(tagged) == ["NP", "VP"]
    assert smallest_phrase_constituent(ConstituencyTree(["Hi"], Node("UH", 0, 1))) == ["UH"]


def test_probing_labels_for_a_corpus():
    trees = [parse(BUSH), parse(PASSIVE_PAST), parse(BUSH)]
    labels = probing_labels(trees, n_tss=1)
    assert labels["voice"] == ["active", "passive", "active"]
    assert labels["tense"] == ["past", "past", "past"]
    assert labels["tss"] == ["NP VP", "other", "NP VP"]
    assert labels["spc"][0] == ["NP", "VP", "NP", "NP", "PP", "NP"]
    assert labels["pos"][1] == ["DT", "NN", "VBD", "VBN", "IN", "NNP", "."]
    assert set(labels) == {"voice", "tense", "tss", "spc", "pos"}


def test_voice_sees_auxiliaries_wrapped_in_unary_vps():
    """Head projection wraps auxiliaries in unary VPs; the main-verb chain looks through them."""
    from structnmt.syntax.convert import dependency_to_constituency
    from structnmt.syntax.probing import tense, voice
    from structnmt.syntax.trees import DependencyTree

    # "The house has been attacked ." (UD: aux, aux:pass)
    dep = DependencyTree(["The", "house", "has", "been", "attacked", "."], [2, 5, 5, 5, 0, 5],
                         ["det", "nsubj:pass", "aux", "aux:pass", "root", "punct"],
                         ["DET", "NOUN", "AUX", "AUX", "VERB", "PUNCT"], ["DT", "NN", "VBZ", "VBN", "VBN", "."])
    tree = dependency_to_constituency(dep)
    assert voice(tree) == "passive" and tense(tree) == "non-past"
    active = DependencyTree(["The", "man", "has", "attacked", "it", "."], [2, 4, 4, 0, 4, 4],
                            ["det", "nsubj", "aux", "root", "obj", "punct"],
                            ["DET", "NOUN", "AUX", "VERB", "PRON", "PUNCT"], ["DT", "NN", "VBZ", "VBN", "PRP", "."])
    assert voice(dependency_to_constituency(active)) == "active"
