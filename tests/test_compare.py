"""`structnmt compare`: seed-aware differences by bucket, on made-up systems whose answer is known."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from structnmt.analysis.compare import (
    Bucketing,
    BucketRow,
    CompareConfig,
    System,
    bucket_rows,
    delta_unit,
    depth,
    differing_sentences,
    frequency_bucketing,
    frequency_rows,
    has_coordination,
    has_pp_after_noun,
    has_relative_clause,
    longest_arc,
    numeric_labels,
    plain_label,
    run_statistics_of,
    sentence_bucketings,
    sentence_buckets,
    word_counts,
)
from structnmt.analysis.compare_between import (
    CONTRAST,
    HETEROGENEITY,
    adjust_between_rows,
    adjust_bucket_rows,
    between_rows,
    marked,
)
from structnmt.cli import main
from structnmt.syntax.trees import DependencyTree

WORDS = [f"w{i}" for i in range(200)]


def corpus(seed: int = 0):
    """40 sentences: 20 short sources (5 words), 20 long (30 words); references of 8-12 words."""
    rng = np.random.default_rng(seed)
    sources = [" ".join(["s"] * (5 if i < 20 else 30)) for i in range(40)]
    refs = [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 13)))) for _ in range(40)]
    return sources, refs


def degrade(ref: str, k: int) -> str:
    """The reference with its words k, k+3, k+6, ... replaced: a translation of known imperfection."""
    words = ref.split()
    return " ".join("x" if i % 3 == k % 3 else w for i, w in enumerate(words))


def systems(refs: list[str]) -> list[System]:
    """The baseline: two seeds that each miss a third of every reference. The system: the same as the
    baseline on the short sentences (0-19), the references themselves on the long ones (20-39)."""
    base = System("base", [[degrade(r, k) for r in refs] for k in (0, 1)])
    better = System("long-better", [[(b if i < 20 else r) for i, (b, r) in enumerate(zip(run, refs))]
                                    for run in base.runs])
    return [base, better]


def test_buckets_locate_a_gain_that_exists_only_on_long_sentences():
    sources, refs = corpus()
    systems_ = systems(refs)
    cfg = CompareConfig(metric="bleu", n_samples=200, length_cutoffs=[10], min_bucket=10)
    rows = bucket_rows(refs, systems_, sentence_buckets(sources, None, cfg), cfg)
    by = {(r.kind, r.bucket): r for r in rows}
    short, long_ = by[("source length (words)", "<10")], by[("source length (words)", ">=10")]
    assert short.sentences == 20 and long_.sentences == 20 and not short.small
    assert short.delta == pytest.approx(0.0) and short.p_value == pytest.approx(1.0)
    # the long bucket's Δ is the difference of the seed means of sacreBLEU's corpus BLEU on those sentences
    base_long = np.mean([sacrebleu.corpus_bleu(run[20:], [refs[20:]]).score for run in systems_[0].runs])
    assert long_.delta == pytest.approx(100.0 - base_long) and long_.low > 0 and long_.p_value < 0.05
    assert long_.low < long_.delta < long_.high
    assert by[("all sentences", "all")].sentences == 40


def test_small_buckets_are_marked_not_hidden():
    sources, refs = corpus()
    cfg = CompareConfig(metric="bleu", n_samples=50, length_cutoffs=[10], min_bucket=25)
    rows = bucket_rows(refs, systems(refs), sentence_buckets(sources, None, cfg), cfg)
    lengths = [r for r in rows if r.kind == "source length (words)"]
    assert [(r.bucket, r.small) for r in lengths] == [("<10", True), (">=10", True)]
    assert all(np.isfinite(r.delta) for r in lengths)


def tree(words, heads, deprels, upos):
    return DependencyTree(words=words, heads=heads, deprels=deprels, upos=upos)


# "the dog that barks sees a cat on the mat and a bird" (spaCy's labels)
SPACY = tree(["the", "dog", "that", "barks", "sees", "a", "cat", "on", "the", "mat", "and", "a", "bird"],
             [2, 5, 4, 2, 0, 7, 5, 7, 10, 8, 7, 13, 7],
             ["det", "nsubj", "nsubj", "relcl", "ROOT", "det", "dobj", "prep", "det", "pobj", "cc", "det", "conj"],
             ["DET", "NOUN", "PRON", "VERB", "VERB", "DET", "NOUN", "ADP", "DET", "NOUN", "CCONJ", "DET", "NOUN"])
# "a man in a hat sleeps" (UD's labels: the PP's noun on the noun, with a case child)
UD = tree(["a", "man", "in", "a", "hat", "sleeps"], [2, 6, 5, 5, 2, 0],
          ["det", "nsubj", "case", "det", "nmod", "root"], ["DET", "NOUN", "ADP", "DET", "NOUN", "VERB"])
PLAIN = tree(["dogs", "sleep"], [2, 0], ["nsubj", "root"], ["NOUN", "VERB"])
# "a man and a boy on a beach ." with the full stop on "man", 7 words away: not the longest arc
PUNCT = tree(["a", "man", "and", "a", "boy", "on", "a", "beach", "."], [2, 0, 2, 5, 2, 2, 8, 6, 2],
             ["det", "ROOT", "cc", "det", "conj", "prep", "det", "pobj", "punct"],
             ["DET", "NOUN", "CCONJ", "DET", "NOUN", "ADP", "DET", "NOUN", "PUNCT"])


def test_syntax_features_of_hand_made_trees():
    assert longest_arc(SPACY) == 6 and longest_arc(UD) == 4 and longest_arc(PLAIN) == 1
    assert longest_arc(PUNCT) == 4  # on -> man, the full stop's 7 left out
    assert depth(PLAIN) == 2 and depth(UD) == 4 and depth(SPACY) == 5  # sees > cat > on > mat > the
    assert has_relative_clause(SPACY) and not has_relative_clause(UD)
    assert has_pp_after_noun(SPACY) and has_pp_after_noun(UD) and not has_pp_after_noun(PLAIN)
    assert has_coordination(SPACY) and not has_coordination(UD)
    labels = sentence_buckets(["x"] * 3, [SPACY, UD, PLAIN], CompareConfig())
    assert labels["relative clause"] == ["yes", "no", "no"] and labels["verbs"] == ["2", "1", "1"]
    assert numeric_labels([0, 3, 4, 9], [3, 5, 8]) == ["<3", "[3,5)", "[3,5)", ">=8"]


def test_word_frequency_buckets_find_the_rare_words():
    """The references mix frequent words (seen 500 times in training) and rare ones (seen once); the
    baseline drops every rare word, the system gets them right: its F-measure gains on the rare bucket
    only, by the amount counted by hand."""
    frequent, rare = [f"f{i}" for i in range(10)], [f"r{i}" for i in range(10)]
    train = [" ".join(frequent)] * 500 + [" ".join(rare)]
    refs = [" ".join([frequent[(i + j) % 10] for j in range(3)] + [rare[i % 10]]) for i in range(30)]
    base_run = [" ".join(r.split()[:3]) for r in refs]
    base = System("base", [base_run, base_run])
    good = System("rare-right", [refs, refs])
    rows = frequency_rows(refs, [base, good], word_counts(train), CompareConfig(n_samples=50, freq_cutoffs=[2, 100]))
    by = {r.bucket: r for r in rows}
    assert by["<2"].sentences == 30 and by["<2"].baseline_score == pytest.approx(0.0)
    assert by["<2"].delta == pytest.approx(100.0)
    assert by[">=100"].delta == pytest.approx(0.0)


def test_the_sentences_that_differ_most_come_first():
    sources, refs = corpus()
    systems_ = systems(refs)
    ex = differing_sentences(sources, refs, systems_, CompareConfig(top=3))
    assert len(ex) == 3 and all(e.index >= 20 and e.delta > 0 for e in ex)
    assert ex[0].delta >= ex[1].delta >= ex[2].delta
    assert ex[0].translations["long-better"] == [refs[ex[0].index]] * 2


def write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def test_cli_writes_the_tables_and_refuses_bad_input(tmp_path, capsys):
    sources, refs = corpus()
    base, better = systems(refs)
    src, ref = write(tmp_path / "src.txt", sources), write(tmp_path / "ref.txt", refs)
    b = [write(tmp_path / f"b{k}.txt", run) for k, run in enumerate(base.runs)]
    g = [write(tmp_path / f"g{k}.txt", run) for k, run in enumerate(better.runs)]
    args = ["compare", "--src", src, "--ref", ref, "--hyp", *b, "--hyp", *g, "--name", "base", "--name", "better",
            "--metric", "bleu", "--bootstrap", "50", "--min-bucket", "5"]
    assert main([*args, "--html", "--out", str(tmp_path / "out")]) == 0
    assert "<script" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    with open(tmp_path / "out" / "compare.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["kind"] for r in rows} == {"all sentences", "source length (words)"}
    assert {"p_holm_kind", "p_bh_kind", "p_holm_report", "p_bh_report"} <= set(rows[0])
    with open(tmp_path / "out" / "compare_between.csv", encoding="utf-8") as f:
        between = list(csv.DictReader(f))
    assert [(r["test"], r["contrast"]) for r in between] == [(CONTRAST, ">=25 − <10"), (HETEROGENEITY, "2 buckets")]
    md = (tmp_path / "out" / "compare.md").read_text(encoding="utf-8")
    assert "## source length (words)" in md and "better: Δ [95 %], p, Holm" in md
    assert "`<10` (under 10 words)" in md and "`>=25` (25 or more words)" in md and "# Does the gain differ between buckets?" in md
    assert "| &gt;=25 − &lt;10 * | better |" in md  # the long sentences' gain differs from the short ones' (marked)
    assert (tmp_path / "out" / "buckets.png").read_bytes()[:4] == b"\x89PNG"
    assert "**Line 2" in (tmp_path / "out" / "sentences.md").read_text(encoding="utf-8")
    capsys.readouterr()

    def refused(extra, message, out="bad"):
        assert main([*args, *extra, "--out", str(tmp_path / out)]) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err

    short = write(tmp_path / "short.txt", base.runs[0][:-1])
    assert main(["compare", "--src", src, "--ref", ref, "--hyp", short, b[1], "--hyp", *g,
                 "--out", str(tmp_path / "bad")]) != 0
    assert "run 1 has 39 lines, the reference 40" in capsys.readouterr().err
    refused(["--buckets", "syntax"], "the syntax buckets need parses of the source")
    refused(["--buckets", "frequency"], "--train-ref")
    refused(["--buckets", "words"], "is not one of length, syntax, frequency")
    # one seed of a system: the test cannot run
    assert main(["compare", "--src", src, "--ref", ref, "--hyp", b[0], "--hyp", *g, "--out", str(tmp_path / "b")]) != 0
    assert "at least 2 seeds" in capsys.readouterr().err
    # a directory holding a file the command did not write: refused, the file kept
    user = tmp_path / "mine"
    user.mkdir()
    (user / "compare.md").write_text("my notes", encoding="utf-8")
    assert main([*args, "--out", str(user)]) != 0
    assert (user / "compare.md").read_text(encoding="utf-8") == "my notes"


def test_committed_runs_may_keep_their_translations_gzipped(tmp_path):
    """docs/outputs keeps a run's <split>.hyp as <split>.hyp.gz: the report and compare read either."""
    import gzip

    from structnmt.fileio.files import committed_or_plain, read_lines_exact

    lines = ["ein Hund .", "", "zwei Katzen"]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test.hyp").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "test.hyp.gz").write_bytes(gzip.compress("".join(x + "\n" for x in lines).encode()))
    read = [read_lines_exact(committed_or_plain(tmp_path / d / "test.hyp")) for d in ("a", "b")]
    assert read == [lines, lines]
    assert committed_or_plain(tmp_path / "a" / "test.hyp").name == "test.hyp"
    assert committed_or_plain(tmp_path / "b" / "test.hyp").name == "test.hyp.gz"


GRID_HEADER = """# Data:
#
#   structnmt prepare -s en -t de --trainpref corpus/train \\
#       --destdir data-bin/toy_en_de --vocab-size 100
name: toy
"""


def toy_dataset(path: Path, sources: list[str], refs: list[str], extra: str = "") -> Path:
    """A directory with what compare reads of a prepared dataset: the test split's text and a manifest."""
    import json

    path.mkdir(parents=True)
    write(path / "test.src.txt", sources)
    write(path / "test.ref.txt", refs)
    (path / "manifest.json").write_text(json.dumps({"config": {"trainpref": "corpus/train", "target_lang": "de"},
                                                    "inputs": {}}), encoding="utf-8")
    if extra:
        (path / "extra.txt").write_text(extra, encoding="utf-8")
    return path


def toy_experiment(root: Path) -> Path:
    """An experiment's records as the runner writes them, run from ``root``: two rows of two seeds, trained on
    ``data-bin/toy_en_de`` (resolved.yaml's data.path, dataset.json's fingerprint and grid, relative paths)."""
    import json

    from structnmt.experiment.runner import dataset_fingerprint

    sources, refs = corpus()
    data = toy_dataset(root / "data-bin" / "toy_en_de", sources, refs)
    (root / "configs" / "grids").mkdir(parents=True)
    (root / "configs" / "grids" / "toy.yaml").write_text(GRID_HEADER, encoding="utf-8")
    record = {"fingerprint": dataset_fingerprint(data), "path": "data-bin/toy_en_de", "grid": "configs/grids/toy.yaml"}
    for row, system in zip(("transformer", "rel-pos"), systems(refs)):
        for k, run in enumerate(system.runs, 1):
            d = root / "exp" / "runs" / row / f"seed{k}"
            d.mkdir(parents=True)
            write(d / "test.hyp", run)
            bleu = sacrebleu.corpus_bleu(run, [refs]).score
            (d / "result.json").write_text(json.dumps({"split": "test", "bleu": bleu}), encoding="utf-8")
            (d / "resolved.yaml").write_text("data: {path: data-bin/toy_en_de}\n", encoding="utf-8")
            (d / "dataset.json").write_text(json.dumps(record), encoding="utf-8")
    return root / "exp"


def test_compare_experiment_names_the_dataset_it_needs_and_takes_it_with_data(tmp_path, capsys, monkeypatch):
    """The runs' records hold their dataset relative to where the grid ran; in another directory (a clone)
    compare says in one sentence which dataset (name, fingerprint) it needs, the grid header's prepare command
    and --data; --data gives it; another dataset is refused, the same one prepared again is used (a note)."""
    import shutil

    from conftest import assert_user_error, cli

    from structnmt.experiment.runner import dataset_fingerprint

    exp = toy_experiment(tmp_path)
    args = ["compare", "--experiment", exp, "--row", "Transformer", "--row", "+ Rel_Pos", "--metric", "bleu",
            "--bootstrap", "50", "--min-bucket", "5"]
    monkeypatch.chdir(tmp_path)  # where the grid ran: the recorded data.path is there
    code, _, err = cli(capsys, *args, "--out", "here")
    assert code == 0, err
    elsewhere = tmp_path / "clone"  # a clone of the repository: its grid files, no dataset
    shutil.copytree(tmp_path / "configs", elsewhere / "configs")
    monkeypatch.chdir(elsewhere)
    code, _, err = cli(capsys, *args, "--out", "cmp")
    fingerprint = dataset_fingerprint(tmp_path / "data-bin" / "toy_en_de")
    assert_user_error(code, err, "the runs' dataset data-bin/toy_en_de (data.path of their resolved.yaml",
                      f"the runs trained on toy_en_de (fingerprint {fingerprint[:16]}...)",
                      "prepare it with `structnmt prepare -s en -t de --trainpref corpus/train --destdir "
                      "data-bin/toy_en_de --vocab-size 100` (the header of configs/grids/toy.yaml)", "--data DIR")
    assert not (elsewhere / "cmp").exists()
    code, _, err = cli(capsys, *args, "--data", tmp_path / "data-bin" / "toy_en_de", "--out", "cmp")
    assert code == 0 and (elsewhere / "cmp" / "compare.csv").is_file(), err
    code, _, err = cli(capsys, *args, "--data", tmp_path / "nowhere", "--out", "cmp2")
    assert_user_error(code, err, "--data", "holds no prepared dataset", "toy_en_de", "prepare it with")
    sources, refs = corpus()
    other = toy_dataset(tmp_path / "other", sources, corpus(seed=1)[1])
    code, _, err = cli(capsys, *args, "--data", other, "--out", "cmp2")
    assert_user_error(code, err, "is not the dataset the runs trained on", "toy_en_de", "not the recorded")
    again = toy_dataset(tmp_path / "again", sources, refs, extra="another parser version's trees")
    code, _, err = cli(capsys, *args, "--data", again, "--out", "cmp2")
    assert code == 0, err
    assert "not byte for byte the dataset the runs trained on" in err and "so its sources and references" in err


def test_compare_experiment_counts_every_run_once(tmp_path, capsys):
    """A row given twice, or a seed's translations copied into another seed, is refused by score's check."""
    import shutil

    from conftest import assert_user_error, cli

    exp = toy_experiment(tmp_path)
    args = ["compare", "--experiment", exp, "--metric", "bleu", "--bootstrap", "50", "--out", tmp_path / "out"]
    code, _, err = cli(capsys, *args, "--row", "Transformer", "--row", "Transformer")
    assert_user_error(code, err, "are the same file, in two systems", "give each system its own runs")
    code, _, err = cli(capsys, *args, "--row", "Transformer", "--row", "+ Nope")
    assert_user_error(code, err, "holds no finished run of row '+ Nope'")
    resolved = exp / "runs" / "transformer" / "seed1" / "resolved.yaml"
    kept = resolved.read_text(encoding="utf-8")
    resolved.write_text("x: 1\n", encoding="utf-8")
    code, _, err = cli(capsys, *args, "--row", "Transformer", "--row", "+ Rel_Pos")
    assert_user_error(code, err, "holds no data.path")
    resolved.write_text(kept, encoding="utf-8")
    shutil.copy(exp / "runs" / "rel-pos" / "seed1" / "test.hyp", exp / "runs" / "rel-pos" / "seed2" / "test.hyp")
    code, _, err = cli(capsys, *args, "--row", "Transformer", "--row", "+ Rel_Pos")
    assert_user_error(code, err, "seed1/test.hyp and", "seed2/test.hyp are identical content",
                      "give every seed its own file once")
    assert not (tmp_path / "out").exists()


def test_the_committed_records_name_their_dataset_in_a_clone(tmp_path, capsys, monkeypatch):
    """The documented `compare --experiment docs/outputs/cross_paper_multi30k ...` in a clone without the
    dataset: one sentence naming it (name, fingerprint), the grid header's prepare command and --data."""
    import importlib.util

    from conftest import assert_user_error, cli

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("outputs_script", root / "scripts" / "outputs.py")
    outputs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outputs)
    members = outputs.read_archive(root / "docs" / "outputs" / "cross_paper_multi30k.tar.xz")
    for name, data in members.items():
        if name.startswith(("runs/transformer/", "runs/rel-pos/")):
            (tmp_path / "exp" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "exp" / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "compare", "--experiment", "exp", "--row", "Transformer", "--row", "+ Rel_Pos",
                       "--out", "cmp")
    assert_user_error(code, err, "the runs' dataset data-bin/multi30k_en_de_spacy",
                      "multi30k_en_de_spacy (fingerprint 9962a09a94768c09...)",
                      "--destdir data-bin/multi30k_en_de_spacy", "cross_paper_multi30k.yaml)", "--data DIR")


def test_compare_counts_every_run_once(tmp_path, capsys):
    """One file as two seeds (the same path, ./path, a hard link, a byte-identical copy), one run in two systems,
    or two systems under one --name: refused by the check `score` uses, before any report is written (a zero
    seed variance would otherwise make the seed-aware test's p tiny)."""
    import os

    from conftest import assert_user_error, cli

    sources, refs = corpus()
    base, better = systems(refs)
    src, ref = write(tmp_path / "src.txt", sources), write(tmp_path / "ref.txt", refs)
    b = [write(tmp_path / f"b{k}.txt", run) for k, run in enumerate(base.runs)]
    g = [write(tmp_path / f"g{k}.txt", run) for k, run in enumerate(better.runs)]
    os.link(b[0], tmp_path / "b0_link.txt")
    (tmp_path / "b0_copy.txt").write_bytes((tmp_path / "b0.txt").read_bytes())
    common = ["compare", "--src", src, "--ref", ref, "--metric", "bleu", "--bootstrap", "50", "--out", tmp_path / "out"]
    for twin, what in ((b[0], "are the same file"), (str(tmp_path / "." / "b0.txt"), "are the same file"),
                       (tmp_path / "b0_link.txt", "are the same file"), (tmp_path / "b0_copy.txt", "identical content")):
        code, _, err = cli(capsys, *common, "--hyp", b[0], twin, "--hyp", *g)
        assert_user_error(code, err, "compare: --hyp", what, "give every seed its own file once")
    code, _, err = cli(capsys, *common, "--hyp", *b, "--hyp", g[0], b[1])
    assert_user_error(code, err, f"--hyp {b[1]} and {b[1]} are the same file, in two systems", "its own runs")
    code, _, err = cli(capsys, *common, "--hyp", *b, "--hyp", *g, "--name", "same", "--name", "same")
    assert_user_error(code, err, "two systems are named 'same'", "give each system its own --name")
    assert not (tmp_path / "out").exists()  # refused before any work
    code, _, err = cli(capsys, *common, "--hyp", *b, "--hyp", *g, "--name", "base", "--name", "better")
    assert code == 0, err




# --------------------------------------------------------------------------- adjusted p and between-bucket tests


def row(kind, bucket, p, small=False):
    return BucketRow(kind, bucket, 60, "sys", 30.0, 31.0, 1.0, 0.1, 1.9, p, small)


def test_adjusted_p_is_holm_and_bh_within_the_bucketing_and_the_report():
    """Holm and Benjamini-Hochberg counted by hand; "all sentences", small and untested rows in no family."""
    rows = [row("all sentences", "all", 0.001), row("depth", "<3", 0.01), row("depth", "[3,4)", 0.04),
            row("depth", ">=4", 0.03), row("verbs", "<1", 0.02), row("verbs", "1", 0.5, small=True),
            row("verbs", ">=2", math.nan)]
    got = adjust_bucket_rows(rows)
    # depth (3 tests): Holm 3*0.01, max(2*0.03, 0.03), max(1*0.04, 0.06); BH 0.01*3/1, then min(0.03*3/2, 0.04), 0.04
    assert [r.p_holm_kind for r in got[1:4]] == pytest.approx([0.03, 0.06, 0.06])
    assert [r.p_bh_kind for r in got[1:4]] == pytest.approx([0.03, 0.04, 0.04])
    assert got[4].p_holm_kind == pytest.approx(0.02)  # alone in its family
    # the report (4 tests): Holm 4*0.01, 3*0.02, 2*0.03 and 0.04 raised to the running maximum 0.06
    assert [got[i].p_holm_report for i in (1, 2, 3, 4)] == pytest.approx([0.04, 0.06, 0.06, 0.06])
    assert [got[i].p_bh_report for i in (1, 2, 3, 4)] == pytest.approx([0.04, 0.04, 0.04, 0.04])
    for r in (got[0], got[5], got[6]):
        assert all(math.isnan(x) for x in (r.p_holm_kind, r.p_bh_kind, r.p_holm_report, r.p_bh_report))
    assert [marked(r) for r in got] == [False, True, False, False, False, False, False]


def test_the_contrast_between_buckets_is_the_difference_of_their_gains():
    """The system gains on the long sentences only: the contrast long − short is the two buckets' Δ apart,
    its interval excludes 0, and the heterogeneity test finds it; per-bucket Δ and contrast agree."""
    sources, refs = corpus()
    systems_ = systems(refs)
    cfg = CompareConfig(metric="bleu", n_samples=200, length_cutoffs=[10], min_bucket=10)
    rs = run_statistics_of(refs, systems_, cfg)
    buckets = sentence_buckets(sources, None, cfg)
    by = {r.bucket: r for r in bucket_rows(refs, systems_, buckets, cfg, rs)}
    [b] = sentence_bucketings(rs, buckets)
    contrast, het = between_rows(b, cfg)
    assert (contrast.test, contrast.contrast, het.test) == (CONTRAST, ">=10 − <10", HETEROGENEITY)
    assert contrast.delta_bucket == pytest.approx(by[">=10"].delta)
    assert contrast.delta_rest == pytest.approx(by["<10"].delta)
    assert contrast.difference == pytest.approx(by[">=10"].delta - by["<10"].delta)
    assert 0 < contrast.low < contrast.difference < contrast.high and contrast.p_value < 0.001
    assert het.p_value == pytest.approx(1 / 201) and het.contrast == "2 buckets" and het.size == 40


def test_buckets_of_the_same_gain_do_not_differ():
    """Buckets by odd and even line hold as many long sentences each: the gain is the same in both, so
    neither the contrast nor the heterogeneity test finds a difference; three buckets give one contrast
    per bucket against the rest."""
    sources, refs = corpus()
    systems_ = systems(refs)
    cfg = CompareConfig(metric="bleu", n_samples=200, min_bucket=10)
    rs = run_statistics_of(refs, systems_, cfg)
    [parity] = sentence_bucketings(rs, {"parity": ["odd" if i % 2 else "even" for i in range(40)]})
    contrast, het = between_rows(parity, cfg)
    assert contrast.low < 0 < contrast.high and contrast.p_value > 0.2 and het.p_value > 0.2
    thirds = ["a"] * 20 + ["b"] * 10 + ["c"] * 10  # a: short (no gain); b, c: long (the gain)
    rows = adjust_between_rows(between_rows(sentence_bucketings(rs, {"thirds": thirds})[0], cfg))
    by = {r.contrast: r for r in rows}
    assert set(by) == {"a − rest", "b − rest", "c − rest", "3 buckets"}
    assert by["a − rest"].high < 0 and marked(by["a − rest"]) and by["3 buckets"].p_value < 0.05
    rest = [i for i, x in enumerate(thirds) if x != "b"]  # b's rest: a and c pooled, scored as one corpus
    mean_bleu = lambda s: np.mean([sacrebleu.corpus_bleu([run[i] for i in rest], [[refs[i] for i in rest]]).score  # noqa: E731
                                   for run in s.runs])
    assert by["b − rest"].delta_rest == pytest.approx(mean_bleu(systems_[1]) - mean_bleu(systems_[0]))
    assert by["a − rest"].p_holm_kind == pytest.approx(min(1.0, 3 * by["a − rest"].p_value))


def test_a_small_bucket_is_left_out_of_the_heterogeneity_test():
    sources, refs = corpus()
    systems_ = systems(refs)
    cfg = CompareConfig(metric="bleu", n_samples=50, min_bucket=8)
    rs = run_statistics_of(refs, systems_, cfg)
    labels = ["a"] * 20 + ["b"] * 15 + ["c"] * 5  # c: 5 sentences, small
    rows = between_rows(sentence_bucketings(rs, {"x": labels})[0], cfg)
    by = {r.contrast: r for r in rows}
    assert by["c − rest"].small and not by["a − rest"].small
    assert by["2 buckets"].size == 35  # a and b
    assert math.isnan(adjust_between_rows(rows)[2].p_holm_kind)  # c's contrast: in no family


def test_word_frequency_contrast_and_plain_labels():
    frequent, rare = [f"f{i}" for i in range(10)], [f"r{i}" for i in range(10)]
    train = [" ".join(frequent)] * 500 + [" ".join(rare)]
    refs = [" ".join([frequent[(i + j) % 10] for j in range(3)] + [rare[i % 10]]) for i in range(30)]
    base_run = [" ".join(r.split()[:3]) for r in refs]
    cfg = CompareConfig(n_samples=50, freq_cutoffs=[2, 100], min_bucket=5)
    b = frequency_bucketing(refs, [System("base", [base_run, base_run]), System("rare-right", [refs, refs])],
                            word_counts(train), cfg)
    by = {r.contrast: r for r in between_rows(b, cfg)}
    assert by["<2 − rest"].difference == pytest.approx(100.0) and by["<2 − rest"].delta_rest == pytest.approx(0)
    assert by["[2,100) − rest"].size == 0 and by["[2,100) − rest"].small
    kind = b.kind
    assert [plain_label(kind, x) for x in b.labels] == ["seen under 2 times", "seen 2–99 times",
                                                         "seen 100 or more times"]
    assert [plain_label("verbs", x) for x in ("<1", "1", "2", ">=3")] == ["no verb", "1 verb", "2 verbs",
                                                                         "3 or more verbs"]
    assert plain_label("source length (words)", "[10,15)") == "10–14 words"
    assert plain_label("relative clause", "no") == "without a relative clause"
    assert delta_unit(kind, "BLEU") == "Δ word F-measure" and delta_unit("verbs", "BLEU") == "Δ BLEU"


def simulated_bucketing(rng, gain_in_last: float) -> Bucketing:
    """4 buckets of 100 sentences, 5 agreement-like probes each; baseline and system of 3 seeds, each seed a
    shift of the log-odds shared by every sentence; the system gains ``gain_in_last`` log-odds in bucket 3."""
    from structnmt.analysis.compare_agreement import _accuracy

    strata = np.repeat(np.arange(4), 100)
    difficulty = rng.normal(0, 1.0, 400)
    runs = []
    for gain in (0.0, gain_in_last):
        for _ in range(3):
            logit = difficulty + rng.normal(0, 0.15) + gain * (strata == 3)
            runs.append(np.stack([rng.binomial(5, 1 / (1 + np.exp(-logit))), np.full(400, 5)], 1))
    stats = [[r * (strata == j)[:, None] for r in runs] for j in range(4)]
    return Bucketing("sim", ["a", "b", "c", "d"], stats, [3, 3], ["sys"], _accuracy, strata, [100] * 4)


def test_the_between_bucket_tests_hold_their_level_and_find_a_real_difference():
    """On 40 simulated comparisons without any difference between buckets the heterogeneity test and the
    contrasts reject at 5 % no more often than 5 %; with a gain in one bucket alone they find it."""
    rng = np.random.default_rng(7)
    cfg = CompareConfig(n_samples=200, min_bucket=10)
    null = [between_rows(simulated_bucketing(rng, 0.0), cfg) for _ in range(40)]
    het = np.array([r.p_value for rows in null for r in rows if r.test == HETEROGENEITY])
    contrasts = np.array([r.p_value for rows in null for r in rows if r.test == CONTRAST])
    assert len(het) == 40 and len(contrasts) == 160
    assert (het < 0.05).mean() <= 0.05 and (contrasts < 0.05).mean() <= 0.05
    found = [between_rows(simulated_bucketing(rng, 0.8), cfg) for _ in range(10)]
    # the omnibus test reads the seeds' few degrees of freedom (a multivariate t): it finds the gain in most
    # comparisons (9 of these 10), the contrast of the bucket that holds it in every one
    assert sum(next(r for r in rows if r.test == HETEROGENEITY).p_value < 0.05 for rows in found) >= 8
    assert all(next(r for r in rows if r.contrast == "d − rest").low > 0 for rows in found)
