"""The one CoNLL-U validator (structnmt.syntax.io.read_conllu_sentences), used by induce, probe and tag:
random valid trees read back equal, every corruption refused with the file and line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structnmt.cli import main
from structnmt.syntax.io import TreeFormatError, read_conllu_sentences


@st.composite
def trees(draw) -> list[int]:
    """Heads (1-based, 0 = root) of a random projective-or-not tree: word k's head is drawn among the words
    already attached, so there is one root and no cycle."""
    n = draw(st.integers(1, 12))
    order = draw(st.permutations(list(range(n))))
    heads = [0] * n
    for pos, w in enumerate(order[1:], start=1):
        heads[w] = order[draw(st.integers(0, pos - 1))] + 1
    return heads


def conllu(heads: list[int], head_cells: list[str] | None = None) -> str:
    cells = head_cells or [str(h) for h in heads]
    return "".join(f"{i + 1}\tw{i}\t_\tNOUN\t_\t_\t{c}\tdep\t_\t_\n" for i, c in enumerate(cells)) + "\n"


@settings(max_examples=60, deadline=None)
@given(trees())
def test_a_valid_tree_reads_back_equal(tmp_path_factory, heads):
    path = tmp_path_factory.mktemp("ok") / "t.conllu"
    path.write_text("# text = x\n" + conllu(heads))
    (sent,) = list(read_conllu_sentences(path))
    assert sent.tree.heads == heads and sent.words == [f"w{i}" for i in range(len(heads))]


CORRUPTIONS = ["cycle", "two_roots", "no_root", "out_of_range", "self", "not_an_integer", "columns"]


@settings(max_examples=80, deadline=None)
@given(trees(), st.sampled_from(CORRUPTIONS), st.data())
def test_every_corruption_is_refused_naming_the_file_and_a_line(tmp_path_factory, heads, corruption, data):
    n = len(heads)
    cells = [str(h) for h in heads]
    if corruption == "cycle":
        if n < 2:
            return
        a, b = data.draw(st.permutations(list(range(n))))[:2]
        cells[a], cells[b] = str(b + 1), str(a + 1)  # a and b head each other (if the root was one: no root)
    elif corruption == "two_roots":
        if n < 2:
            return
        cells[data.draw(st.sampled_from([i for i in range(n) if heads[i] != 0]))] = "0"
    elif corruption == "no_root":
        if n < 2:
            return
        root = heads.index(0)
        cells[root] = str((root + 1) % n + 1)
    elif corruption == "out_of_range":
        cells[data.draw(st.integers(0, n - 1))] = str(data.draw(st.sampled_from([n + 1, n + 7, -1])))
    elif corruption == "self":
        i = data.draw(st.integers(0, n - 1))
        cells[i] = str(i + 1)
    elif corruption == "not_an_integer":
        cells[data.draw(st.integers(0, n - 1))] = data.draw(st.sampled_from(["x", "1.5", "one", "_"]))
    text = conllu(heads, cells)
    if corruption == "columns":
        lines = text.splitlines()
        i = data.draw(st.integers(0, n - 1))
        lines[i] = lines[i].rsplit("\t", 1)[0]  # 9 columns
        text = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("bad") / "t.conllu"
    path.write_text(text)
    with pytest.raises(TreeFormatError) as info:
        list(read_conllu_sentences(path))
    assert str(path) in str(info.value) and "line" in str(info.value)


@pytest.mark.parametrize("cells,fragment", [
    (["2", "3", "1"], "no root"),
    (["0", "0", "2"], "has 2 roots"),
    (["0", "3", "2"], "cycle in the heads through words 2, 3"),
    (["0", "9", "1"], "HEAD 9 is out of range 0..3"),
    (["0", "one", "1"], "HEAD 'one' is not an integer"),
])
def test_induce_refuses_bad_gold_trees_in_one_sentence(tmp_path, capsys, cells, fragment):
    gold = tmp_path / "gold.conllu"
    gold.write_text(conllu([0, 0, 0], cells))
    # the checkpoint is never reached: the gold file is read and refused first
    code = main(["induce", "--checkpoint", str(tmp_path / "missing.pt"), "--conllu", str(gold), "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and str(gold) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_induce_does_not_replace_a_report_it_did_not_write(tmp_path, capsys):
    gold = tmp_path / "gold.conllu"
    gold.write_text(conllu([0, 1, 1]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "induce.md").write_text("my analysis")
    code = main(["induce", "--checkpoint", str(tmp_path / "missing.pt"), "--conllu", str(gold), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "induce.md: exists and was not written by a structnmt command" in err
    assert (out / "induce.md").read_text() == "my analysis"
