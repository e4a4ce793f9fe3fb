"""Tests for the synthetic syntactic-transduction corpus."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from structnmt.data.synthetic import (
    SynthConfig,
    SynthExample,
    agreement_accuracy,
    generate,
    realize,
    source_vocabulary,
    target_lexicon,
    target_verb,
    write_corpus,
)

SMALL = SynthConfig(seed=1, n_train=300, n_valid=50, n_test=50)


@pytest.fixture(scope="module")
def data() -> dict[str, list[SynthExample]]:
    return generate(SMALL)


def _all(data: dict[str, list[SynthExample]]) -> list[SynthExample]:
    return data["train"] + data["valid"] + data["test"]


def _leaves_and_preterminals(tree: str) -> tuple[list[str], list[str]]:
    toks = tree.replace("(", " ( ").replace(")", " ) ").split()
    leaves, tags = [], []
    for i, t in enumerate(toks):
        # a preterminal is "( TAG word )"
        if t == "(" and i + 3 < len(toks) and toks[i + 2] not in "()" and toks[i + 3] == ")":
            tags.append(toks[i + 1])
            leaves.append(toks[i + 2])
    assert toks.count("(") == toks.count(")")
    return leaves, tags


def test_split_sizes(data):
    assert {k: len(v) for k, v in data.items()} == {"train": 300, "valid": 50, "test": 50}


def test_deterministic_same_seed(data):
    again = generate(SMALL)
    assert again == data


def test_different_seed_differs(data):
    other = generate(SynthConfig(seed=2, n_train=300, n_valid=50, n_test=50))
    assert [e.src for e in other["train"]] != [e.src for e in data["train"]]
    assert target_lexicon(1) != target_lexicon(2)


def test_test_set_independent_of_train_size(data):
    bigger = generate(SynthConfig(seed=1, n_train=400, n_valid=50, n_test=50))
    assert bigger["test"] == data["test"]


def test_tree_leaves_match_tokens_and_xpos(data):
    for ex in _all(data):
        leaves, tags = _leaves_and_preterminals(ex.tree)
        assert leaves == ex.src
        assert tags == ex.xpos
        assert "\n" not in ex.tree
        assert ex.tree.startswith("(S ")
        assert len(ex.upos) == len(ex.deprels) == len(ex.heads) == len(ex.src)


def test_dependency_tree_is_single_rooted_and_acyclic(data):
    for ex in _all(data):
        n = len(ex.heads)
        assert all(0 <= h <= n for h in ex.heads)
        roots = [i for i, h in enumerate(ex.heads) if h == 0]
        assert len(roots) == 1
        assert ex.deprels[roots[0]] == "root"
        assert ex.upos[roots[0]] == "VERB"
        assert all(r != "root" for i, r in enumerate(ex.deprels) if i != roots[0])
        for i in range(n):
            seen, j = set(), i
            while ex.heads[j] != 0:
                assert j not in seen, f"cycle in {ex.src}"
                seen.add(j)
                j = ex.heads[j] - 1
                assert ex.heads[j] - 1 != j


def test_dependency_labels_are_consistent(data):
    allowed = {"det", "amod", "nsubj", "obj", "obl", "nmod", "case", "acl:relcl", "cc",
               "conj", "root"}
    for ex in _all(data):
        for i, (rel, up) in enumerate(zip(ex.deprels, ex.upos)):
            assert rel in allowed
            if up == "DET":
                assert rel == "det" and ex.upos[ex.heads[i] - 1] == "NOUN"
            if up == "ADP":
                assert rel == "case"
            if up == "ADJ":
                assert rel == "amod"
            if rel == "acl:relcl":
                assert up == "VERB" and ex.upos[ex.heads[i] - 1] == "NOUN"


def test_target_agreement_items(data):
    n_items = 0
    for ex in _all(data):
        for item in ex.agreement:
            n_items += 1
            assert ex.tgt[item["tgt_index"]] == item["expected"]
            assert item["expected"] != item["wrong"]
            assert item["expected"].startswith(item["lemma_tgt"])
            assert item["wrong"].startswith(item["lemma_tgt"])
            assert item["distance"] >= 1
            assert item["expected"][:-2] == item["wrong"][:-2]  # same stem + tense
    assert n_items > 100


def _subject_head(ex: SynthExample, v: int) -> int:
    """0-based subject head noun of verb ``v`` read off the gold dependency tree."""
    kids = [i for i in range(len(ex.src)) if ex.heads[i] == v + 1]
    subj = [i for i in kids if ex.deprels[i] == "nsubj"]
    if subj:
        s = subj[0]
        if ex.upos[s] == "PRON":  # subject-gap relative: the noun the clause modifies
            assert ex.deprels[v] == "acl:relcl"
            return ex.heads[v] - 1
        return s
    assert ex.deprels[v] == "conj"  # coordinated VP shares the first verb's subject
    return _subject_head(ex, ex.heads[v] - 1)


def test_agreement_items_follow_subject_head_number(data):
    """Recompute the agreement probes from the gold dependencies and compare."""
    checked = 0
    for ex in _all(data):
        expected = []
        for v in range(len(ex.src)):
            if ex.upos[v] != "VERB":
                continue
            s = _subject_head(ex, v)
            assert ex.upos[s] == "NOUN"
            coordinated = any(ex.heads[j] == s + 1 and ex.deprels[j] == "conj"
                              for j in range(len(ex.src)))
            plural = ex.xpos[s] == "NNS" or coordinated
            if ex.xpos[v] != "VBD":  # English agreement matches the gold subject
                assert ex.xpos[v] == ("VBP" if plural else "VBZ")
            if v - s - 1 >= 1:
                expected.append((v - s - 1, "pl" if plural else "sg"))
        got = [(it["distance"], it["number"]) for it in ex.agreement]
        assert sorted(got) == sorted(expected), ex.src
        for it in ex.agreement:
            suffix = "ni" if it["number"] == "pl" else "ko"
            assert it["expected"].endswith(suffix)
            checked += 1
    assert checked > 100


TREE = ("(S (NP (NP (DT the) (NN dog)) (PP (IN near) (NP (NP (DT the) (NNS cats)) "
        "(SBAR (WHNP (WDT that)) (S (VP (VBP chase) (NP (DT a) (NN bird)))))))) "
        "(VP (VBZ sleeps)))")


def test_hand_checked_long_distance_agreement():
    lex = target_lexicon(1)
    ex = realize(TREE, seed=1)
    assert ex.src == "the dog near the cats that chase a bird sleeps".split()
    assert ex.heads == [2, 10, 5, 5, 2, 7, 5, 9, 7, 0]
    assert ex.deprels == ["det", "nsubj", "case", "det", "nmod", "nsubj", "acl:relcl", "det",
                          "obj", "root"]
    expected_tgt = [
        lex[("D", "a")], lex[("N", "bird")], lex[("V", "chase")] + "tani", lex[("R", "subj")],
        lex[("D", "the")], lex[("N", "cat")] + "ri", lex[("P", "near")],
        lex[("D", "the")], lex[("N", "dog")], lex[("V", "sleep")] + "tako",
    ]
    assert ex.tgt == expected_tgt
    main = [it for it in ex.agreement if it["kind"] == "main"]
    assert len(main) == 1
    item = main[0]
    # "sleeps" agrees with the singular head "dog", not with the plural attractor "cats"
    assert item["expected"] == target_verb(lex[("V", "sleep")], "pres", plural=False)
    assert item["wrong"] == target_verb(lex[("V", "sleep")], "pres", plural=True)
    assert item["distance"] == 7 and item["attractors"] == 1 and item["number"] == "sg"
    assert item["tgt_index"] == len(ex.tgt) - 1
    rel = [it for it in ex.agreement if it["kind"] == "relcl"]
    assert rel and rel[0]["expected"] == lex[("V", "chase")] + "tani"


def test_plural_head_with_singular_attractor_past_tense():
    ex = realize("(S (NP (NP (DT the) (NNS kings)) (PP (IN with) (NP (DT a) (NN hat)))) "
                 "(VP (VBD saw) (NP (DT the) (NN river))))", seed=1)
    lex = target_lexicon(1)
    (item,) = ex.agreement
    assert item["expected"] == lex[("V", "see")] + "muni"
    assert item["wrong"] == lex[("V", "see")] + "muko"


def test_postpositions_and_verb_final_order():
    lex = target_lexicon(1)
    ex = realize("(S (NP (DT the) (JJ big) (JJ red) (NN dog)) (VP (VBD slept) "
                 "(PP (IN under) (NP (DT the) (NNS tables)))))", seed=1)
    assert ex.src == "the big red dog slept under the tables".split()
    assert ex.tgt == [
        lex[("D", "the")], lex[("N", "dog")], lex[("A", "red")], lex[("A", "big")],  # N Adj
        lex[("D", "the")], lex[("N", "table")] + "ri", lex[("P", "under")],  # postposition
        lex[("V", "sleep")] + "muko",  # verb-final, past, singular
    ]
    ex2 = realize("(S (NP (DT a) (NN cat)) (VP (VBZ sees) (NP (DT the) (NN dog))))", seed=1)
    assert ex2.src == "a cat sees the dog".split()
    assert ex2.tgt == [lex[("D", "a")], lex[("N", "cat")], lex[("D", "the")],
                       lex[("N", "dog")], lex[("V", "see")] + "tako"]
    assert ex2.agreement == []  # subject head adjacent to the verb


def test_two_pps_appear_in_mirror_order():
    lex = target_lexicon(1)
    ex = realize("(S (NP (NP (DT the) (NN dog)) (PP (IN near) (NP (DT the) (NN tree))) "
                 "(PP (IN with) (NP (DT a) (NN hat)))) (VP (VBD ran)))", seed=1)
    assert ex.src == "the dog near the tree with a hat ran".split()
    assert ex.tgt == [lex[("D", "a")], lex[("N", "hat")], lex[("P", "with")],
                      lex[("D", "the")], lex[("N", "tree")], lex[("P", "near")],
                      lex[("D", "the")], lex[("N", "dog")], lex[("V", "run")] + "muko"]
    assert ex.heads[7] == 2 and ex.deprels[7] == "nmod"  # "hat" modifies "dog"


def test_object_gap_relative_clause():
    lex = target_lexicon(1)
    ex = realize("(S (NP (NP (DT the) (NN dog)) (SBAR (WHNP (WDT that)) (S (NP (DT the) "
                 "(NNS cats)) (VP (VBP chase))))) (VP (VBZ sleeps)))", seed=1)
    assert ex.tgt == [lex[("D", "the")], lex[("N", "cat")] + "ri", lex[("V", "chase")] + "tani",
                      lex[("R", "obj")], lex[("D", "the")], lex[("N", "dog")],
                      lex[("V", "sleep")] + "tako"]
    assert ex.deprels[2] == "obj" and ex.heads[2] == 6  # "that" is the object of "chase"
    (item,) = ex.agreement
    assert item["expected"] == lex[("V", "sleep")] + "tako" and item["distance"] == 4


def test_realize_rejects_bad_trees():
    with pytest.raises(ValueError):
        realize("(S (NP (DT the) (NN dog)) (VP (VBP sleep)))")  # English agreement error
    with pytest.raises(ValueError):
        realize("(S (NP (DT the) (NN blorp)) (VP (VBZ sleeps)))")  # unknown word


def test_realize_round_trips_generated_examples(data):
    for ex in data["test"]:
        assert realize(ex.tree, SMALL.seed) == ex


def test_constructions_are_covered(data):
    trees = " ".join(ex.tree for ex in _all(data))
    for marker in ["(PP (IN", "(SBAR (WHNP (WDT that)) (S (VP", "(SBAR (WHNP (WDT that)) (S (NP",
                   "(CC and)", "(VBD", "(VBZ", "(VBP", "(JJ"]:
        assert marker in trees
    rels = {r for ex in _all(data) for r in ex.deprels}
    assert rels >= {"det", "amod", "nsubj", "obj", "obl", "nmod", "case", "acl:relcl", "cc",
                    "conj", "root"}


def test_agreement_accuracy(data):
    exs = data["valid"]
    refs = [" ".join(ex.tgt) for ex in exs]
    acc, n = agreement_accuracy(refs, exs)
    assert n == sum(len(ex.agreement) for ex in exs) > 0
    assert acc == 1.0
    swapped = []
    for ex in exs:
        toks = list(ex.tgt)
        for item in ex.agreement:
            toks[item["tgt_index"]] = item["wrong"]
        swapped.append(" ".join(toks))
    acc_sw, n_sw = agreement_accuracy(swapped, exs)
    assert n_sw == n and acc_sw == 0.0
    # dropping verbs makes them count as wrong
    empty_acc, _ = agreement_accuracy([""] * len(exs), exs)
    assert empty_acc == 0.0
    with pytest.raises(ValueError, match=r"2 .*3|3 .*2"):
        agreement_accuracy(refs[:2], exs[:3])


def test_agreement_accuracy_aligns_by_order():
    lex = target_lexicon(1)
    # two coordinated VPs with the same lemma: "sleeps and sleeps"
    ex = realize("(S (NP (DT the) (NN dog)) (VP (VP (VBZ sleeps)) (CC and) (VP (VBZ sleeps))))")
    assert len(ex.agreement) == 1  # only the second verb is separated from "dog"
    good, bad = lex[("V", "sleep")] + "tako", lex[("V", "sleep")] + "tani"
    base = [lex[("D", "the")], lex[("N", "dog")]]
    assert agreement_accuracy([" ".join(base + [bad, "x", good])], [ex]) == (1.0, 1)
    assert agreement_accuracy([" ".join(base + [good, "x", bad])], [ex]) == (0.0, 1)
    assert agreement_accuracy([" ".join(base + [good])], [ex]) == (1.0, 1)


def test_no_shared_sources_across_splits(data):
    keys = {s: {" ".join(ex.src) for ex in v} for s, v in data.items()}
    assert not keys["train"] & keys["test"]
    assert not keys["train"] & keys["valid"]
    assert not keys["valid"] & keys["test"]
    assert len(keys["train"]) == len(data["train"])


def test_vocabulary_and_lengths(data):
    vocab = source_vocabulary()
    assert 300 <= len(vocab) <= 800
    seen = {w for ex in _all(data) for w in ex.src}
    assert seen <= vocab
    assert len(seen) >= 200
    lengths = [len(ex.src) for ex in data["train"]]
    assert 11.5 <= statistics.mean(lengths) <= 16.5
    assert max(lengths) <= SMALL.max_len
    assert sum(5 <= n <= 30 for n in lengths) / len(lengths) >= 0.85


def test_tokens_are_clean(data):
    for ex in _all(data):
        for tok in ex.src + ex.tgt:
            assert tok.isalpha() and tok.islower()


def _max_embedding(tree: str) -> int:
    """Largest number of nested PP/SBAR constituents on any path of the tree."""
    toks = tree.replace("(", " ( ").replace(")", " ) ").split()
    stack: list[bool] = []
    best = 0
    for i, t in enumerate(toks):
        if t == "(":
            stack.append(toks[i + 1] in ("PP", "SBAR"))
            best = max(best, sum(stack))
        elif t == ")":
            stack.pop()
    return best


@pytest.mark.parametrize("max_depth", [1, 2])
def test_max_len_and_depth_respected(max_depth):
    cfg = SynthConfig(seed=3, n_train=300, n_valid=0, n_test=0, max_len=12, max_depth=max_depth)
    exs = generate(cfg)["train"]
    assert all(len(ex.src) <= 12 for ex in exs)
    depths = [_max_embedding(ex.tree) for ex in exs]
    assert max(depths) == max_depth


def test_write_corpus(tmp_path: Path):
    cfg = SynthConfig(seed=4, n_train=20, n_valid=5, n_test=5)
    counts = write_corpus(cfg, tmp_path)
    assert counts == {"train": 20, "valid": 5, "test": 5}
    data = generate(cfg)
    for split, n in counts.items():
        src = (tmp_path / f"{split}.src").read_text().splitlines()
        tgt = (tmp_path / f"{split}.tgt").read_text().splitlines()
        trees = (tmp_path / f"{split}.src.tree").read_text().splitlines()
        agr = [json.loads(x) for x in (tmp_path / f"{split}.agreement.jsonl").read_text()
               .splitlines()]
        assert len(src) == len(tgt) == len(trees) == len(agr) == n
        assert src[0] == " ".join(data[split][0].src)
        assert tgt[0] == " ".join(data[split][0].tgt)
        assert agr[0] == data[split][0].agreement
        blocks = (tmp_path / f"{split}.src.conllu").read_text().strip("\n").split("\n\n")
        assert len(blocks) == n
        lines = blocks[0].splitlines()
        assert lines[0] == "# text = " + src[0]
        rows = [ln.split("\t") for ln in lines[1:]]
        assert all(len(r) == 10 for r in rows)
        assert [r[1] for r in rows] == data[split][0].src
        assert [int(r[6]) for r in rows] == data[split][0].heads
        assert [r[4] for r in rows] == data[split][0].xpos
    meta = json.loads((tmp_path / "synth.json").read_text())
    assert meta["config"]["seed"] == 4 and meta["counts"] == counts
