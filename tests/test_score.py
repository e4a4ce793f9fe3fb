"""Tests for structnmt.evaluate.score (sacreBLEU wrapper)."""

from __future__ import annotations

import gzip
import math
import os

import pytest
import sacrebleu  # noqa: E402

from structnmt.evaluate.score import (  # noqa: E402
    Score,
    corpus_scores,
    format_report,
    paired_bootstrap,
    read_lines,
)

REFS = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "i like green apples very much",
    "she reads a book every night",
    "we went to the beach yesterday",
] * 4
BASE = [
    "the cat sat on mat",
    "a dog run in park",
    "i like apples very much",
    "she read a book each night",
    "we go to the beach yesterday",
] * 4


def _by_name(scores: list[Score]) -> dict[str, Score]:
    return {s.name: s for s in scores}


# ----------------------------------------------------------------- scoring


def test_identical_hyps_and_refs_score_100():
    scores = _by_name(corpus_scores(REFS, REFS))
    assert set(scores) == {"BLEU", "chrF"}
    assert scores["BLEU"].score == pytest.approx(100.0)
    assert scores["chrF"].score == pytest.approx(100.0)
    assert scores["BLEU"].precisions == pytest.approx([100.0] * 4)
    assert scores["chrF"].precisions is None


def test_metric_order_and_selection():
    scores = corpus_scores(BASE, REFS, metrics=("chrf", "bleu"))
    assert [s.name for s in scores] == ["chrF", "BLEU"]
    assert [s.name for s in corpus_scores(BASE, REFS, metrics=("bleu",))] == ["BLEU"]
    with pytest.raises(ValueError, match="unknown metric"):
        corpus_scores(BASE, REFS, metrics=("meteor",))


def test_matches_sacrebleu_corpus_functions():
    scores = _by_name(corpus_scores(BASE, REFS))
    ref_bleu = sacrebleu.corpus_bleu(BASE, [REFS])
    ref_chrf = sacrebleu.corpus_chrf(BASE, [REFS])
    assert scores["BLEU"].score == pytest.approx(ref_bleu.score)
    assert scores["BLEU"].precisions == pytest.approx(ref_bleu.precisions)
    assert scores["chrF"].score == pytest.approx(ref_chrf.score)
    assert 0.0 < scores["BLEU"].score < 100.0


def test_hand_computed_single_sentence():
    # hyp: the cat sat on the mat / ref: the cat sat on a mat (6 tokens each)
    # 1-grams 5/6 ("the" clipped to 1), 2-grams 3/5, 3-grams 2/4, 4-grams 1/3,
    # BP = 1  ->  BLEU = (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = (1/12) ** 0.25
    (bleu,) = corpus_scores(["the cat sat on the mat"], ["the cat sat on a mat"], metrics=("bleu",))
    assert bleu.score == pytest.approx(100 * (1 / 12) ** 0.25, abs=1e-6)  # 53.7285...
    assert bleu.precisions == pytest.approx([500 / 6, 60.0, 50.0, 100 / 3])
    assert "BP = 1.000" in bleu.detail
    assert "hyp_len = 6" in bleu.detail and "ref_len = 6" in bleu.detail


def test_hand_computed_brevity_penalty():
    # all n-gram precisions are 1, hyp_len 5 < ref_len 6 -> BP = exp(1 - 6/5)
    (bleu,) = corpus_scores(["the cat sat on the"], ["the cat sat on the mat"], metrics=("bleu",))
    assert bleu.score == pytest.approx(100 * math.exp(1 - 6 / 5), abs=1e-6)  # 81.87
    assert "BP = 0.819" in bleu.detail
    assert "ratio = 0.833" in bleu.detail


def test_signatures():
    scores = _by_name(corpus_scores(BASE, REFS, lowercase_tokenized=True))
    bleu_sig = scores["BLEU"].signature
    assert "nrefs:1" in bleu_sig and "tok:13a" in bleu_sig and "case:mixed" in bleu_sig
    assert f"version:{sacrebleu.__version__}" in bleu_sig
    assert "conv:" not in bleu_sig
    assert "nrefs:1" in scores["chrF"].signature and "nc:6" in scores["chrF"].signature
    lc_sig = scores["BLEU (lc,tok)"].signature
    assert "nrefs:1" in lc_sig and "tok:none" in lc_sig
    assert lc_sig.endswith("|conv:lc+moses-tok(en)")


def test_lowercase_tokenized_convention():
    hyps = ["The dog's ball is red , and the cat is black ."]
    refs = ["the dog's ball is red, and the cat is black."]
    scores = _by_name(corpus_scores(hyps, refs, lowercase_tokenized=True))
    assert list(scores) == ["BLEU", "chrF", "BLEU (lc,tok)"]
    assert scores["BLEU (lc,tok)"].score == pytest.approx(100.0)
    assert scores["BLEU"].score < 100.0
    # the lang keyword reaches the tokenizer signature
    (de,) = corpus_scores(hyps, refs, metrics=(), lowercase_tokenized=True, lang="de")
    assert de.signature.endswith("conv:lc+moses-tok(de)")


def test_lowercase_tokenized_is_not_just_lowercasing():
    # Case-only differences: lc,tok = 100 while default (cased) BLEU drops.
    hyps = ["THE CAT SAT ON THE MAT TODAY"]
    refs = ["the cat sat on the mat today"]
    scores = _by_name(corpus_scores(hyps, refs, lowercase_tokenized=True))
    assert scores["BLEU (lc,tok)"].score == pytest.approx(100.0)
    assert scores["BLEU"].score < 1.0


def test_length_mismatch_names_both_counts():
    with pytest.raises(ValueError) as err:
        corpus_scores(["a b c"] * 3, ["a b c"] * 5)
    assert "3" in str(err.value) and "5" in str(err.value)


def test_empty_corpus_rejected():
    with pytest.raises(ValueError):
        corpus_scores([], [])


def test_format_report():
    scores = corpus_scores(BASE, REFS)
    report = format_report(scores)
    lines = report.splitlines()
    assert len(lines) == 2
    bleu = scores[0]
    assert lines[0].startswith(f"BLEU = {bleu.score:.2f} ({bleu.signature}) ")
    assert bleu.detail in lines[0]
    assert lines[1].startswith("chrF = ")


# ----------------------------------------------------------------- I/O


def test_read_lines_plain_and_gz(tmp_path):
    lines = ["ein Hund läuft", "", "  spaces kept  ", "zwölf Boxkämpfer\u2028jagen"]
    plain = tmp_path / "hyp.txt"
    plain.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    gz = tmp_path / "hyp.txt.gz"
    with gzip.open(gz, "wb") as f:
        f.write(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    assert read_lines(plain) == lines
    assert read_lines(str(gz)) == lines
    # gzip content is detected even without the suffix
    nosuffix = tmp_path / "hyp.bin"
    nosuffix.write_bytes(gz.read_bytes())
    assert read_lines(nosuffix) == lines


def test_read_lines_invalid_utf8_reports_file_and_line(tmp_path):
    bad = tmp_path / "broken_refs.de"
    bad.write_bytes(b"line one\nline two\nbad \xff byte\nline four\n")
    with pytest.raises(ValueError) as err:
        read_lines(bad)
    msg = str(err.value)
    assert "broken_refs.de" in msg
    assert "line 3" in msg


def test_read_lines_invalid_utf8_in_gz(tmp_path):
    bad = tmp_path / "x.gz"
    with gzip.open(bad, "wb") as f:
        f.write(b"ok\nok\n\xc3\x28\n")
    with pytest.raises(ValueError, match="line 3"):
        read_lines(bad)


# ----------------------------------------------------------------- bootstrap


def test_paired_bootstrap_identical_and_better():
    res = paired_bootstrap(BASE, {"same": list(BASE), "oracle": list(REFS)}, REFS, n_samples=200)
    assert list(res) == ["same", "oracle"]
    base_bleu = sacrebleu.corpus_bleu(BASE, [REFS]).score

    same = res["same"]
    assert same["delta"] == 0.0
    assert same["baseline"] == pytest.approx(base_bleu)
    assert same["p_value"] >= 0.5
    assert same["identical_to_baseline"] is True

    oracle = res["oracle"]
    assert oracle["score"] == pytest.approx(100.0)
    assert oracle["delta"] == pytest.approx(100.0 - base_bleu)
    assert oracle["p_value"] < 0.05
    assert oracle["p_value"] == oracle["sacrebleu_p_value"]
    assert oracle["identical_to_baseline"] is False
    low, high = oracle["ci"]
    assert low <= oracle["mean"] <= high

    sig = oracle["signature"]
    assert "bs:200" in sig and "seed:12345" in sig and "tok:13a" in sig


def test_paired_bootstrap_matches_sacrebleu_pairedtest():
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    noisy = [h.replace("the", "a") for h in REFS]
    ours = paired_bootstrap(BASE, {"noisy": noisy}, REFS, n_samples=300, seed=7)["noisy"]
    import os

    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = "7"
    try:
        _, table = PairedTest(
            [("b", BASE), ("n", noisy)], {"bleu": BLEU()}, [REFS], test_type="bs", n_samples=300
        )()
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED")
        else:
            os.environ["SACREBLEU_SEED"] = old
    direct = table["BLEU"][1]
    assert ours["p_value"] == pytest.approx(direct.p_value)
    assert ours["mean"] == pytest.approx(direct.mean)
    assert ours["ci_halfwidth"] == pytest.approx(direct.ci)


def test_paired_bootstrap_deterministic_and_env_restored(monkeypatch):
    monkeypatch.setenv("SACREBLEU_SEED", "999")
    noisy = [h.replace("the", "a") for h in REFS]
    systems = {"noisy": noisy, "oracle": list(REFS)}
    a = paired_bootstrap(BASE, systems, REFS, n_samples=300, seed=42)
    b = paired_bootstrap(BASE, systems, REFS, n_samples=300, seed=42)
    assert a == b
    import os

    assert os.environ["SACREBLEU_SEED"] == "999"
    c = paired_bootstrap(BASE, systems, REFS, n_samples=300, seed=43)
    assert c["noisy"]["signature"] != a["noisy"]["signature"]  # seed recorded
    assert (c["noisy"]["mean"], c["noisy"]["p_value"]) != (
        a["noisy"]["mean"],
        a["noisy"]["p_value"],
    )


def test_paired_bootstrap_chrf_and_lc_tok():
    res = paired_bootstrap(BASE, {"oracle": list(REFS)}, REFS, metric="chrf", n_samples=100)
    assert res["oracle"]["metric"].startswith("chrF")
    assert res["oracle"]["score"] == pytest.approx(100.0)
    upper = [r.upper() for r in REFS]
    res = paired_bootstrap(upper, {"x": list(REFS)}, REFS, metric="bleu_lc_tok", n_samples=100)
    # after lowercasing both are identical -> degenerate case
    assert res["x"]["delta"] == 0.0
    assert res["x"]["identical_to_baseline"] is True
    assert res["x"]["signature"].endswith("conv:lc+moses-tok(en)")


def test_paired_bootstrap_validation():
    with pytest.raises(ValueError) as err:
        paired_bootstrap(BASE, {"short": BASE[:3]}, REFS)
    assert "3" in str(err.value) and str(len(REFS)) in str(err.value)
    with pytest.raises(ValueError):
        paired_bootstrap(BASE[:2], {"x": BASE}, REFS)
    with pytest.raises(ValueError):
        paired_bootstrap(BASE, {"x": BASE}, REFS, seed=0)
    with pytest.raises(ValueError, match="seed must be a positive int"):  # a bool is an int to Python, not a seed
        paired_bootstrap(BASE, {"x": BASE}, REFS, seed=True)
    with pytest.raises(ValueError):
        paired_bootstrap(BASE, {"x": BASE}, REFS, n_samples=0)
    assert paired_bootstrap(BASE, {}, REFS) == {}


def test_bleu_lc_tok_scores_tokenized_text_without_sacrebleus_detokenize_warning(caplog):
    """BLEU (lc,tok) scores Moses-tokenized text on purpose: sacreBLEU's "forgot to detokenize" warning
    (over 100 lines ending in " .") is not logged for it, and its signature is sacreBLEU's usual one."""
    import logging

    from structnmt.evaluate.seeds import _metric

    refs = [f"the cat number {i} sat on the mat." for i in range(120)]
    hyps = [f"the cat number {i} sat on a mat." for i in range(120)]
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        scores = corpus_scores(hyps, refs, metrics=("bleu",), lowercase_tokenized=True)
        paired_bootstrap(hyps, {"x": refs}, refs, metric="bleu_lc_tok", n_samples=10)
        _metric("bleu_lc_tok").corpus_score([h.replace(".", " .") for h in hyps], [refs])
    assert not [r for r in caplog.records if "detokenize" in r.getMessage()]
    lc_tok = next(s for s in scores if s.name == "BLEU (lc,tok)")
    assert lc_tok.signature.startswith(f"nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:{sacrebleu.__version__}|")
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):  # the warning this is about, still there unforced
        sacrebleu.metrics.BLEU(tokenize="none").corpus_score([h.replace(".", " .") for h in hyps], [refs])
    assert [r for r in caplog.records if "detokenize" in r.getMessage()]


def test_two_different_systems_that_both_score_zero_are_not_significantly_different():
    """Every resample scores both at BLEU 0.00: sacreBLEU's strict count gives its minimum p; the toolkit says 1.0."""
    from structnmt.evaluate.score import paired_bootstrap

    refs = ["ein hund läuft schnell"] * 20
    res = paired_bootstrap(["x"] * 20, {"s": ["z"] * 20}, refs, n_samples=200)["s"]
    assert res["score"] == res["baseline"] == 0.0 and res["constant"] and not res["identical_to_baseline"]
    assert res["p_value"] == 1.0 and res["sacrebleu_p_value"] == pytest.approx(1 / 201)
    better = paired_bootstrap(["x"] * 20, {"s": refs}, refs, n_samples=200)["s"]
    assert not better["constant"] and better["p_value"] < 0.01


def test_score_refuses_one_file_as_two_runs_and_a_run_in_two_systems(capsys, tmp_path):
    """`--hyp A1 A1 --hyp B1 B2` would count one file as two seeds (std 0.00, a small p): refused, by inode (a
    hard link, another spelling) and by content; one run in two systems too; a BOM is removed with a note."""
    from conftest import assert_user_error, cli

    ref = tmp_path / "ref.txt"
    ref.write_text("ein hund läuft\nzwei katzen schlafen\n", encoding="utf-8")
    a1, a2, b1, b2 = (tmp_path / n for n in ("a1", "a2", "b1", "b2"))
    a1.write_text("ein hund\nzwei katzen\n", encoding="utf-8")
    a2.write_text("ein hund läuft\nkatzen\n", encoding="utf-8")
    b1.write_text("hund läuft\nzwei katzen schlafen\n", encoding="utf-8")
    b2.write_text("ein läuft\nzwei schlafen\n", encoding="utf-8")
    os.link(a1, tmp_path / "a1_link")
    (tmp_path / "a1_copy").write_bytes(a1.read_bytes())
    for twin, what in ((a1, "the same file"), (tmp_path / "a1_link", "the same file"),
                       (tmp_path / "." / "a1", "the same file"), (tmp_path / "a1_copy", "identical content")):
        code, _, err = cli(capsys, "score", "--ref", ref, "--hyp", a1, twin, "--hyp", b1, b2)
        assert_user_error(code, err, f"are {what}", "give every seed its own file once")
    code, _, err = cli(capsys, "score", "--ref", ref, "--hyp", a1, a2, "--hyp", b1, a2)
    assert_user_error(code, err, "in two systems", "give each system its own runs")
    code, out, err = cli(capsys, "score", "--ref", ref, "--hyp", a1, a2, "--hyp", b1, b2)
    assert code == 0, err
    # a byte-order mark: removed with a note, so identical texts score 100
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeff".encode() + ref.read_bytes())
    code, out, err = cli(capsys, "score", "--ref", ref, "--hyp", bom)
    assert code == 0 and "chrF = 100.00" in out and "byte-order mark at its start was removed" in err


def test_average_refuses_a_checkpoint_given_twice(capsys, tmp_path):
    from conftest import assert_user_error, cli

    c = tmp_path / "checkpoint_10.pt"
    c.write_bytes(b"x")
    for twice in ([c, c], [c, tmp_path / "." / c.name]):
        code, _, err = cli(capsys, "average", "--checkpoints", *twice, "--output", tmp_path / "avg.pt")
        assert_user_error(code, err, "are the same file", "give each checkpoint once")
    assert not (tmp_path / "avg.pt").exists()
