"""structnmt induce (SA-NMT §6): eq. 24's collapse, single-root Chu-Liu-Edmonds against
brute force, the evaluation protocol and the branching baselines, and the command end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from structnmt.tasks.induce import (
    Sentence,
    attachment,
    branching,
    collapse,
    eval_view,
    induce_table,
    productions,
    read_words,
    single_root_tree,
    tree_shape,
)

sys.path.insert(0, str(Path(__file__).parent))
from test_matrix_tree import trees  # noqa: E402


def tree_score(s: np.ndarray, heads) -> float:
    return sum(s[d, d] if h == 0 else s[h - 1, d] for d, h in enumerate(heads))


def test_single_root_tree_is_the_best_single_root_tree():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        s = rng.normal(size=(n, n)) * 3
        best = max(tree_score(s, h) for h in trees(n))
        got = single_root_tree(s)
        assert sum(h == 0 for h in got) == 1
        assert tree_score(s, got) == pytest.approx(best)
    # every word prefers the root: still exactly one root, the best one
    s = np.full((4, 4), -5.0)
    np.fill_diagonal(s, 10.0)
    s[3, 3] = 11.0
    got = single_root_tree(s)
    assert got[3] == 0 and sum(h == 0 for h in got) == 1


def test_collapse_is_eq_24():
    phi = np.arange(16, dtype=float).reshape(4, 4)  # pieces 0 | 1 2 | 3 -> words 0, 1, 2
    w = np.array([0, 1, 1, 2])
    got = collapse(phi, w)
    assert got[0, 1] == phi[0, 1] + phi[0, 2]  # j = k, i outside: sum over the dependent's pieces
    assert got[1, 0] == phi[1, 0] + phi[2, 0]  # i = k: sum over the head's pieces
    assert got[1, 1] == phi[1:3, 1:3].sum()  # the word's block (its root score)
    assert got[0, 2] == phi[0, 3] and got.shape == (3, 3)


def test_read_words_handles_multiword_tokens_and_blind_files(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text("# text = don't go.\n"
                    "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
                    "1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_\n2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_\n"
                    "3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\n\n"
                    "1\tHi\t_\t_\t_\t_\t_\t_\t_\t_\n\n")
    a, b = read_words(path)
    assert a.words == ["do", "n't", "go", "."] and a.heads == [3, 3, 0, 3] and a.upos[3] == "PUNCT"
    assert b.words == ["Hi"] and b.heads is None and b.upos is None
    v = eval_view(a)
    assert v.keep == [0, 1, 2] and v.heads == [3, 3, 0]


def test_attachment_and_baselines():
    s = Sentence(["the", "dog", "barks", "."], [2, 3, 0, 3], ["DET", "NOUN", "VERB", "PUNCT"])
    v = eval_view(s)
    assert branching(3, "L") == [2, 3, 0] and branching(3, "R") == [0, 1, 2]
    left = attachment([branching(3, "L")], [v])
    assert left == {"DA": 100.0, "UA": 100.0, "scored": 3}  # this sentence is left-branching
    right = attachment([branching(3, "R")], [v])
    assert right["DA"] == 0.0 and right["UA"] == pytest.approx(200 / 3)  # the two arcs reversed
    prod = productions([v.heads], [v])
    assert prod == {"NOUN": {"DET": 100.0}, "VERB": {"NOUN": 100.0}}


def test_punctuation_protocols_when_a_gold_head_is_punctuation():
    """'a , b': gold head of 'b' is the comma (as some treebank arcs are). reduce: 'b' is headed
    by a removed word, so no tree can attach it; skip: the comma is a valid head."""
    from structnmt.tasks.induce import full_view

    s = Sentence(["a", ",", "b"], [0, 1, 2], ["NOUN", "PUNCT", "NOUN"])
    v = eval_view(s)
    assert v.keep == [0, 2] and v.heads == [0, -1]
    assert attachment([[0, 1]], [v]) == {"DA": 50.0, "UA": 50.0, "scored": 2}  # 'b' unattainable
    f = full_view(s)
    gold_tree = [0, 1, 2]
    assert attachment([gold_tree], [f], skip_punct=True) == {"DA": 100.0, "UA": 100.0, "scored": 2}
    # the comma's own arc is not scored: a wrong head for it changes nothing
    assert attachment([[0, 3, 2]], [f], skip_punct=True)["DA"] == 100.0
    # the reversed arc a-, counts undirected; a word predicted as the root where gold has another
    # head ('b') is wrong in both directions, as is 'a' under 'b' (no a-b arc in gold)
    assert attachment([[2, 0, 2]], [f], skip_punct=True) == {"DA": 50.0, "UA": 100.0, "scored": 2}
    assert attachment([[3, 3, 0]], [f], skip_punct=True) == {"DA": 0.0, "UA": 0.0, "scored": 2}
    # skip: the baselines over the whole sentence (L: heads 2, 3, 0)
    assert attachment([branching(3, "L")], [f], skip_punct=True)["DA"] == 0.0
    assert productions([gold_tree], [f], skip_punct=True) == {"PUNCT": {"NOUN": 100.0}}


def test_induce_end_to_end(synth_data, tmp_path):
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, ModelConfig, RNNConfig, TrainConfig
    from structnmt.tasks.induce import run_induce

    cfg = Config(data=DataConfig(path=str(synth_data), max_tokens=600),
                 model=ModelConfig(family="rnn", d_model=16, encoder_layers=1, decoder_layers=1, dropout=0.0,
                                   rnn=RNNConfig(syntax="sa")),
                 train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=2, validate_interval_updates=2,
                                   lr=0.001, warmup_updates=0, tensorboard=False, progress=False))
    train(cfg, log=lambda *_: None)
    gold = tmp_path / "g.conllu"
    lines = []
    for words in (["a", "b", "c", "."], ["d", "e"], ["f"]):
        for i, w in enumerate(words, start=1):
            upos = "PUNCT" if w == "." else "NOUN"
            lines.append(f"{i}\t{w}\t_\t{upos}\t_\t_\t{0 if i == 1 else 1}\tdep\t_\t_")
        lines.append("")
    gold.write_text("\n".join(lines) + "\n")
    written = run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=gold, out_dir=tmp_path / "out")
    induced = read_words(tmp_path / "out" / "g.induced.conllu")
    assert [s.words for s in induced] == [["a", "b", "c", "."], ["d", "e"], ["f"]]
    assert all(sum(h == 0 for h in s.heads) == 1 for s in induced)  # one root each, every sentence kept
    report = (tmp_path / "out" / "induce.md").read_text()
    assert "L (head = right neighbour)" in report and any(p.name == "induce.json" for p in written)
    import json

    from structnmt.errors import UserError

    red = json.loads((tmp_path / "out" / "induce.json").read_text())
    assert red["punct"] == "reduce" and red["model"]["scored"] == 6  # the '.' removed
    run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=gold, out_dir=tmp_path / "skip", punct="skip")
    skip = json.loads((tmp_path / "skip" / "induce.json").read_text())
    assert skip["punct"] == "skip" and skip["model"]["scored"] == 6
    # skip scores the very trees it wrote
    written_trees = [t.heads for t in read_words(tmp_path / "skip" / "g.induced.conllu")]
    from structnmt.tasks.induce import attachment as att
    from structnmt.tasks.induce import full_view

    assert att(written_trees, [full_view(t) for t in read_words(gold)], True) == skip["model"]
    with pytest.raises(UserError, match="--punct"):
        run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=gold, out_dir=tmp_path / "x",
                   punct="drop")
    # --layer/--head select a Transformer layer's attention: an RNN would ignore them, so they are refused
    with pytest.raises(UserError, match="is an RNN, whose one arc scorer gives the trees; .* drop them"):
        run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=gold, out_dir=tmp_path / "y", layer=1)
    assert not (tmp_path / "y").exists()
    # Figs. 4 and 5: only sentences of at least 3 words are drawn (here the first), trees as written
    drawn = run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=gold, out_dir=tmp_path / "pic",
                       draw=3)
    pngs = sorted(p.name for p in drawn if p.suffix == ".png")
    assert pngs == ["sent1_heads.png", "sent1_tree.png"]
    assert all((tmp_path / "pic" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in pngs)
    # run again into the same directory, on another file and drawing nothing: what the first run wrote and
    # this one did not is gone (induce-table reads the one *.induced.conllu), a user's file there stays
    (tmp_path / "pic" / "notes.png").write_bytes(b"mine")
    (tmp_path / "h.conllu").write_text(gold.read_text())
    run_induce(checkpoint=tmp_path / "m" / "checkpoint_last.pt", conllu=tmp_path / "h.conllu",
               out_dir=tmp_path / "pic")
    assert sorted(p.name for p in (tmp_path / "pic").iterdir() if not p.name.startswith(".")) == [
        "h.induced.conllu", "induce.json", "induce.md", "notes.png"]

    # Tables 3 and 4 across models: the same report twice under two labels, and a mismatched protocol refused
    from structnmt.cli import main

    assert main(["induce-table", f"SA={tmp_path / 'out'}", f"again={tmp_path / 'out'}", "--out",
                 str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text()
    row = f"| SA | {red['model']['DA']:.1f} | {red['model']['UA']:.1f} |"
    assert row in table and f"| again | {red['model']['DA']:.1f}" in table
    assert f"| L (head = right neighbour) | {red['left_branching']['DA']:.1f} |" in table
    verb_noun = [line for line in table.splitlines() if line.startswith("| NOUN → NOUN |")]
    assert verb_noun == [f"| NOUN → NOUN | {red['productions']['gold']['NOUN']['NOUN']:.1f} | "
                         f"{red['productions']['left'].get('NOUN', {}).get('NOUN', 0.0):.1f} | "
                         f"{red['productions']['model'].get('NOUN', {}).get('NOUN', 0.0):.1f} | "
                         f"{red['productions']['model'].get('NOUN', {}).get('NOUN', 0.0):.1f} |"]
    with pytest.raises(UserError, match="same --punct protocol"):
        induce_table([("a", tmp_path / "out"), ("b", tmp_path / "skip")], tmp_path / "t2.md")
    with pytest.raises(UserError, match="not found"):
        induce_table([("a", tmp_path / "nowhere")], tmp_path / "t3.md")
    with pytest.raises(UserError, match="at least one LABEL=DIR"):
        induce_table([], tmp_path / "t4.md")
    assert not (tmp_path / "t4.md").exists()
    assert main(["induce-table", "no-equals-sign", "--out", str(tmp_path / "t4.md")]) == 2
    # BLEU column and the rank correlation of DA/UA with BLEU (here every model has the same trees: undefined)
    assert main(["induce-table", f"SA={tmp_path / 'out'}", f"again={tmp_path / 'out'}", f"third={tmp_path / 'out'}",
                 "--bleu", "SA=20.5", "--bleu", "again=22", "--bleu", "third=1e1", "--out", str(tmp_path / "tb.md")]) == 0
    tb = (tmp_path / "tb.md").read_text()
    assert f"| SA | {red['model']['DA']:.1f} | {red['model']['UA']:.1f} |" in tb and "| 20.50 |" in tb
    assert "| 10.00 |" in tb and "- DA vs BLEU: rho undefined (a constant column, n = 3)" in tb
    assert main(["induce-table", f"SA={tmp_path / 'out'}", f"again={tmp_path / 'out'}", "--bleu", "SA=20",
                 "--out", str(tmp_path / "tc.md")]) == 0
    assert "not computed: 1 models with a BLEU" in (tmp_path / "tc.md").read_text()
    with pytest.raises(UserError, match="--bleu 'nope': no run has that label"):
        induce_table([("SA", tmp_path / "out")], tmp_path / "td.md", bleu={"nope": 1.0})
    assert main(["induce-table", f"SA={tmp_path / 'out'}", "--bleu", "SA=high", "--out", str(tmp_path / "te.md")]) == 2
    # a BLEU that is not a finite number, a label given twice, a BLEU given twice: refused, nothing written
    for argv in (["--bleu", "SA=nan"], ["--bleu", "SA=inf"], [f"SA={tmp_path / 'out'}"], ["--bleu", "SA=20", "--bleu", "SA=21"]):
        assert main(["induce-table", f"SA={tmp_path / 'out'}", *argv, "--out", str(tmp_path / "tf.md")]) == 2
        assert not (tmp_path / "tf.md").exists()
    # the shape columns: from the report, or (a report older than them) from the written trees, the same
    assert red["shape"]["trees"] >= 1
    import json as _json

    old = {k: v for k, v in red.items() if k != "shape"}
    (tmp_path / "out" / "induce.json").write_text(_json.dumps(old))
    induce_table([("SA", tmp_path / "out")], tmp_path / "t5.md")
    shape_cells = [line.split("|")[4:6] for line in (tmp_path / "t5.md").read_text().splitlines()
                   if line.startswith("| SA |")]
    assert shape_cells == [[f" {red['shape']['star']:.1f} ", f" {100 * red['shape']['top_head_share']:.1f} "]]
    # a copy of such a report without its trees: the cells say so (n/r) and the table names the row, not a crash
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "induce.json").write_text(_json.dumps(old))
    induce_table([("SA", tmp_path / "out"), ("kept", tmp_path / "copy")], tmp_path / "t6.md")
    t6 = (tmp_path / "t6.md").read_text()
    assert f"| kept | {red['model']['DA']:.1f} | {red['model']['UA']:.1f} | n/r | n/r |" in t6
    assert f"| SA | {red['model']['DA']:.1f} | {red['model']['UA']:.1f} | {red['shape']['star']:.1f} |" in t6
    assert "n/r: not recorded — the report of kept holds no tree shapes" in t6


def test_tree_shape_counts_stars_and_roots():
    star = [0, 1, 1, 1]  # word 1 heads all
    left = branching(4, "L")  # [2, 3, 4, 0]
    right = branching(4, "R")  # [0, 1, 2, 3]
    sh = tree_shape([star, left, right, [0, 1]])  # the 2-word tree is not counted
    assert sh["trees"] == 3
    assert sh["star"] == pytest.approx(100 / 3)
    assert sh["root_first"] == pytest.approx(200 / 3) and sh["root_last"] == pytest.approx(100 / 3)
    assert sh["top_head_share"] == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)
    assert tree_shape([[2, 0, 2, 2]])["star"] == 100.0  # a star rooted in the middle
    assert tree_shape([[2, 0, 2, 3]])["star"] == 0.0
    assert tree_shape([])["trees"] == 0


def test_head_weight_picture_moves_the_diagonal_to_the_root_row(monkeypatch, tmp_path):
    """Fig. 4's matrix: ROOT row = the diagonal (root / within-word mass), heads below, zero diagonal."""
    from structnmt.analysis import trees

    seen = {}
    real = trees._figure

    def spy(w, h):
        fig = real(w, h)
        orig = fig.subplots

        def subplots(*a, **k):
            ax = orig(*a, **k)
            imshow = ax.imshow
            ax.imshow = lambda mat, **kw: (seen.setdefault("mat", mat), imshow(mat, **kw))[1]
            return ax

        fig.subplots = subplots
        return fig

    monkeypatch.setattr(trees, "_figure", spy)
    beta = np.array([[0.5, 0.3, 0.0], [0.2, 0.6, 0.9], [0.3, 0.1, 0.1]])
    trees.draw_head_weights(["a", "b", "c"], beta, tmp_path / "h.png")
    mat = seen["mat"]
    assert mat.shape == (4, 3)
    np.testing.assert_allclose(mat[0], [0.5, 0.6, 0.1])
    np.testing.assert_allclose(mat[1:], [[0.0, 0.3, 0.0], [0.2, 0.0, 0.9], [0.3, 0.1, 0.0]])
    np.testing.assert_allclose(mat.sum(0), beta.sum(0))  # every column keeps its mass
    trees.draw_tree(["a", "b", "c"], [2, 0, 2], tmp_path / "t.png", gold=[2, 0, 1])
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
