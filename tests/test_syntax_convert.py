"""Dependency-to-constituency conversion and bracket F1."""

from __future__ import annotations

import pytest

from structnmt.syntax.convert import dependency_to_constituency, projectivize
from structnmt.syntax.evaluate import bracket_f1
from structnmt.syntax.io import format_ptb, parse_ptb
from structnmt.syntax.trees import DependencyTree


def bush_tree() -> DependencyTree:
    # Bush <-nsubj- held; a <-det- talk; talk <-obj- held; with <-case- Sharon;
    # Sharon <-nmod- talk (the PP modifies the noun, so the NP is "a talk with Sharon")
    return DependencyTree(
        words=["Bush", "held", "a", "talk", "with", "Sharon"],
        heads=[2, 0, 4, 2, 6, 4],
        deprels=["nsubj", "root", "det", "obj", "case", "nmod"],
        upos=["PROPN", "VERB", "DET", "NOUN", "ADP", "PROPN"],
        xpos=["NNP", "VBD", "DT", "NN", "IN", "NNP"],
    )


def test_bush_held_a_talk_with_sharon():
    c = dependency_to_constituency(bush_tree())
    assert format_ptb(c) == ("(S (NP (NNP Bush)) (VP (VBD held) (NP (NP (DT a) (NN talk)) "
                             "(PP (IN with) (NP (NNP Sharon))))))")
    spans = set(c.spans())
    for s in [(0, 6, "S"), (0, 1, "NP"), (1, 6, "VP"), (2, 4, "NP"), (2, 6, "NP"), (4, 6, "PP"),
              (5, 6, "NP")]:
        assert s in spans
    assert c.tags == ["NNP", "VBD", "DT", "NN", "IN", "NNP"]


def test_upos_only_and_flat_style():
    t = bush_tree()
    t.xpos = None
    c = dependency_to_constituency(t)
    assert c.tags == t.upos and (0, 6, "S") in c.spans() and (4, 6, "PP") in c.spans()
    flat = dependency_to_constituency(bush_tree(), style="flat")
    assert flat.root.label == "S" and len(flat.root.children) == 3  # Bush held (NP ...)
    with pytest.raises(ValueError):
        dependency_to_constituency(bush_tree(), style="nope")


def test_ptb_style_without_relations():
    # Malt-TAB style (no relations): preposition heads its object, subject found by position
    t = DependencyTree(words=["He", "sat", "on", "the", "mat", "."], heads=[2, 0, 2, 5, 3, 2],
                       deprels=["_"] * 6, upos=["PRON", "VERB", "ADP", "DET", "NOUN", "PUNCT"],
                       xpos=["PRP", "VBD", "IN", "DT", "NN", "."])
    c = dependency_to_constituency(t)
    assert format_ptb(c) == "(S (NP (PRP He)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def test_non_projective_does_not_crash():
    # w4 -> w2 crosses w3, which hangs from w1: non-projective
    heads = [0, 4, 1, 1]
    t = DependencyTree(words=["a", "b", "c", "d"], heads=heads, deprels=["root", "obj", "obj", "obj"],
                       upos=["VERB", "NOUN", "NOUN", "NOUN"], xpos=["VB", "NN", "NN", "NN"])
    proj = projectivize(heads)
    assert proj == [0, 1, 1, 1]
    for style in ("hybrid", "flat", "xbar"):
        c = dependency_to_constituency(t, style=style)
        assert c.words == t.words and c.root.start == 0 and c.root.end == 4
        assert [n.start for n in c.root.walk() if n.is_preterminal] == [0, 1, 2, 3]
        for n in c.root.walk():  # children are contiguous and ordered
            if n.children:
                assert n.children[0].start == n.start and n.children[-1].end == n.end
                assert all(a.end == b.start for a, b in zip(n.children, n.children[1:]))


def test_several_roots_give_frag():
    t = DependencyTree(words=["yes", "no"], heads=[0, 0], deprels=["root", "root"],
                       upos=["INTJ", "INTJ"])
    c = dependency_to_constituency(t)
    assert c.root.label == "FRAG" and c.root.end == 2


GOLD = "(S (NP (NNP Bush)) (VP (VBD held) (NP (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon))))))"


def test_bracket_f1_identity_and_hand_computed():
    g = parse_ptb(GOLD)
    r = bracket_f1([g], [g])
    assert r["f1"] == 1.0 and r["precision"] == 1.0 and r["n_sentences"] == 1
    # PP attached to the verb: gold has 7 brackets, pred 6, 5 shared -> P 5/6, R 5/7, F1 10/13
    p = parse_ptb("(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk))) (PP (IN with) (NP (NNP Sharon))))")
    r = bracket_f1([g], [p])
    assert r["precision"] == pytest.approx(5 / 6) and r["recall"] == pytest.approx(5 / 7)
    assert r["f1"] == pytest.approx(10 / 13)
    # relabel (NP Bush) as ADJP: labelled loses a match, unlabelled does not
    q = parse_ptb(GOLD.replace("(NP (NNP Bush))", "(ADJP (NNP Bush))"))
    assert bracket_f1([g], [q])["f1"] == pytest.approx(6 / 7)
    assert bracket_f1([g], [q], labelled=False)["f1"] == 1.0
    # without the root bracket: 6 gold, 6 pred, 5 shared
    assert bracket_f1([g], [q], include_root=False)["f1"] == pytest.approx(5 / 6)


def test_bracket_f1_punctuation_and_function_tags():
    g = parse_ptb("(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))")
    p = parse_ptb("(S (NP (PRP He)) (VP (VBD left) (. .)))")
    assert bracket_f1([g], [p])["f1"] == 1.0  # evalb ignores where punctuation hangs
    assert bracket_f1([g], [p], ignore_punct=False)["f1"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        bracket_f1([g], [parse_ptb("(S (NP (PRP He)))")])
