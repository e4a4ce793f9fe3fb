"""Readers and writers of PTB brackets and CoNLL-U (structnmt.syntax.io)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from structnmt.syntax.io import (
    TreeFormatError,
    format_ptb,
    parse_ptb,
    read_conllu,
    read_conllu_sentences,
    read_conllu_with_text,
    read_ptb,
    write_conllu,
    write_ptb,
)
from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

REPO = Path(__file__).resolve().parents[1]
UD_DEV = REPO.parent / "shared" / "data" / "ud" / "en_ewt-ud-dev.conllu.gz"

MRG = """
( (S|
    (NP-SBJ-1 (NNP Mr.) (NNP Vinken) )
    (VP (VBZ is)|
      (NP-PRD=2|
        (NP (NN chairman) )
        (PP (IN of)|
          (NP (NNP Elsevier) (-NONE- *T*-1) ))))
    (. .) ))
( (S|
    (NP-SBJ (-NONE- *) )
    (VP (VB Go) (-LRB- -LRB-) (RB now) (-RRB- -RRB-) )
    (. .) ))
""".replace("|", " ")  # .mrg lines end in a space


def test_parse_format_round_trip():
    s = "(S (NP (DT the) (NN dog)) (VP (VBD barked) (ADVP (RB loudly))) (. .))"
    t = parse_ptb(s)
    assert t.words == ["the", "dog", "barked", "loudly", "."]
    assert t.tags == ["DT", "NN", "VBD", "RB", "."]
    assert t.spans() == [(0, 5, "S"), (0, 2, "NP"), (2, 4, "VP"), (3, 4, "ADVP")]
    assert format_ptb(t) == s
    assert parse_ptb(format_ptb(t)) == t


def test_round_trip_hand_built_tree_and_unary_chain():
    root = Node("S", 0, 2, [Node("NP", 0, 1, [Node("NP", 0, 1, [Node("PRP", 0, 1)])]),
                            Node("VP", 1, 2, [Node("VBD", 1, 2)])])
    t = ConstituencyTree(["He", "left"], root)
    assert format_ptb(t) == "(S (NP (NP (PRP He))) (VP (VBD left)))"
    assert parse_ptb(format_ptb(t)) == t


def test_outer_bracket_root_and_whitespace():
    a = parse_ptb("( (S (NP (PRP I)) (VP (VBP run))) )")
    b = parse_ptb("(ROOT\n  (S\n\t(NP (PRP I))\n   (VP (VBP run))))")
    assert a == b
    assert a.root.label == "S" and a.root.end == 2


def test_escaped_brackets_are_words():
    t = parse_ptb("(NP (-LRB- -LRB-) (NN aside) (-RRB- -RRB-))")
    assert t.words == ["-LRB-", "aside", "-RRB-"]
    assert t.tags == ["-LRB-", "NN", "-RRB-"]


def test_strip_empty_and_function_tags(tmp_path):
    p = tmp_path / "wsj_0002.mrg"
    p.write_text(MRG)
    raw = list(read_ptb(p))
    assert len(raw) == 2
    assert "*T*-1" in raw[0].words and raw[0].root.children[0].label == "NP-SBJ-1"
    clean = list(read_ptb(p, strip_empty=True, strip_function_tags=True))
    t0, t1 = clean
    assert t0.words == ["Mr.", "Vinken", "is", "chairman", "of", "Elsevier", "."]
    assert (0, 2, "NP") in t0.spans() and (3, 6, "NP") in t0.spans()
    assert all("-" not in lab and "=" not in lab for _, _, lab in t0.spans())
    # the empty subject disappears with its NP; -LRB-/-RRB- labels stay whole
    assert t1.words == ["Go", "-LRB-", "now", "-RRB-", "."]
    assert [c.label for c in t1.root.children] == ["VP", "."]
    assert t1.tags == ["VB", "-LRB-", "RB", "-RRB-", "."]


def test_read_one_per_line_gz_and_write(tmp_path):
    trees = [parse_ptb("(S (NP (PRP I)) (VP (VBP run)))"), parse_ptb("(FRAG (NN yes) (. .))")]
    p = tmp_path / "x.tree.gz"
    assert write_ptb(trees, p) == 2
    with gzip.open(p, "rt") as fh:
        assert fh.read().count("\n") == 2
    assert list(read_ptb(p)) == trees
    q = tmp_path / "y.txt"
    q.write_text("\n(S (NP (PRP I)) (VP (VBP run)))\n\n\n(FRAG (NN yes) (. .))\n")
    assert list(read_ptb(q)) == trees


def _error(path: Path) -> TreeFormatError:
    with pytest.raises(TreeFormatError) as ei:
        list(read_ptb(path))
    return ei.value


def test_unbalanced_brackets_name_file_and_line(tmp_path):
    p = tmp_path / "bad.mrg"
    p.write_text("( (S (NP (PRP I)) (VP (VBP run))) )\n\n( (S (NP (PRP you))\n  (VP (VBP go)) )\n")
    e = _error(p)
    assert e.line == 3 and "bad.mrg" in str(e) and "line 3" in str(e)
    q = tmp_path / "extra.txt"
    q.write_text("(S (NP (PRP I)) (VP (VBP run)))\n(S (NN x)))\n")
    e = _error(q)
    assert e.line == 2 and "extra.txt" in str(e) and "')'" in str(e)


def test_missing_word_and_junk(tmp_path):
    p = tmp_path / "noword.txt"
    p.write_text("(S (NN a))\n(S (NP (DT the) (NN))\n   (VP (VBD ran)))\n")
    e = _error(p)
    assert e.line == 2 and "noword.txt" in str(e) and "no word" in str(e)
    q = tmp_path / "junk.txt"
    q.write_text("(S (NN a))\nhello (S (NN b))\n")
    e = _error(q)
    assert e.line == 2 and "junk.txt" in str(e)
    with pytest.raises(TreeFormatError):
        parse_ptb("(S (NN a b))")
    with pytest.raises(TreeFormatError):
        parse_ptb("(S (NP (NN a))")


CONLLU = """# sent_id = es-1
# text = Vámonos al mar.
1-2\tVámonos\t_\t_\t_\t_\t_\t_\t_\t_
1\tVamos\tir\tVERB\t_\t_\t0\troot\t_\t_
2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_
3-4\tal\t_\t_\t_\t_\t_\t_\t_\t_
3\ta\ta\tADP\t_\t_\t5\tcase\t_\t_
4\tel\tel\tDET\t_\t_\t5\tdet\t_\t_
5\tmar\tmar\tNOUN\t_\t_\t1\tobl\t_\t_
6\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_

# text = I ate and you did.
1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_
2\tate\teat\tVERB\tVBD\t_\t0\troot\t_\t_
3\tand\tand\tCCONJ\tCC\t_\t5\tcc\t_\t_
4\tyou\tyou\tPRON\tPRP\t_\t5\tnsubj\t_\t_
5\tdid\tdo\tVERB\tVBD\t_\t2\tconj\t_\t_
5.1\tate\teat\tVERB\tVBD\t_\t_\t_\t5:conj\t_
6\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_"""


def test_conllu_multiword_and_empty_nodes(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text(CONLLU)  # no final blank line
    sents = list(read_conllu_sentences(p))
    assert len(sents) == 2
    s0, s1 = sents
    assert s0.tree.words == ["Vamos", "nos", "a", "el", "mar", "."]
    assert s0.tree.heads == [0, 1, 5, 5, 1, 1]
    assert s0.multiword_tokens == [(0, 2, "Vámonos"), (2, 4, "al")]
    assert s0.text == "Vámonos al mar." and s0.sent_id == "es-1"
    assert s0.tree.xpos is None
    assert s1.tree.words == ["I", "ate", "and", "you", "did", "."]
    assert s1.tree.heads == [2, 0, 5, 5, 2, 2]
    assert s1.tree.xpos == ["PRP", "VBD", "CC", "PRP", "VBD", "."]
    assert [t for t, _ in read_conllu_with_text(p)][1] == s1.tree
    assert list(read_conllu(p)) == [s0.tree, s1.tree]


def test_conllu_write_round_trip(tmp_path):
    t = DependencyTree(words=["I", "ran"], heads=[2, 0], deprels=["nsubj", "root"],
                       upos=["PRON", "VERB"], xpos=["PRP", "VBD"], lemmas=["I", "run"])
    p = tmp_path / "out.conllu.gz"
    write_conllu([t, t], p, texts=["I ran", None])
    back = list(read_conllu_with_text(p))
    assert back == [(t, "I ran"), (t, None)]


BAD_LINE = "1\tI\tI\tPRON\t_\t_\t2\tnsubj\t_\t_\n"


@pytest.mark.parametrize("second_line, line_no, needle", [
    ("2\tran\trun\tVERB\t_\t_\tX\troot\t_\t_\n", 3, "not an integer"),
    ("2\tran\trun\tVERB\t_\t_\t7\troot\t_\t_\n", 3, "out of range"),
    ("2\tran\trun\tVERB\t_\t_\t0\troot\n", 3, "columns"),
    ("2\tran  run  VERB  _  _  0  root  _  _\n", 3, "columns"),
])
def test_conllu_bad_lines(tmp_path, second_line, line_no, needle):
    p = tmp_path / "bad.conllu"
    p.write_text("# text = I ran\n" + BAD_LINE + second_line + "\n")
    with pytest.raises(TreeFormatError) as ei:
        list(read_conllu(p))
    assert ei.value.line == line_no
    assert "bad.conllu" in str(ei.value) and f"line {line_no}" in str(ei.value) and needle in str(ei.value)


def test_conllu_cycle_and_no_root(tmp_path):
    ok = "1\tA\t_\tX\t_\t_\t0\troot\t_\t_\n\n"
    p = tmp_path / "cyc.conllu"
    p.write_text(ok + "1\tI\t_\tX\t_\t_\t0\troot\t_\t_\n"
                 "2\tb\t_\tX\t_\t_\t3\tdep\t_\t_\n3\tc\t_\tX\t_\t_\t2\tdep\t_\t_\n")
    with pytest.raises(TreeFormatError) as ei:
        list(read_conllu(p))
    assert ei.value.line == 4 and "cycle" in str(ei.value)
    q = tmp_path / "noroot.conllu"
    q.write_text(ok + "# c\n1\tI\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_\n")
    with pytest.raises(TreeFormatError) as ei:
        list(read_conllu(q))
    assert ei.value.line == 3 and "no root" in str(ei.value)


def test_real_ud_english_dev():
    if not UD_DEV.exists():
        pytest.skip(f"{UD_DEV} not present")
    sents = list(read_conllu_sentences(UD_DEV))
    assert len(sents) > 2000
    assert all(len(s.tree) > 0 and 0 in s.tree.heads for s in sents)
    assert sum(len(s.multiword_tokens) for s in sents) > 100
    assert all(s.text for s in sents)
