"""Joined test sets (issue 74): test sets of one domain read as one, the joined verdict first, each set beside it,
in ``structnmt experiment``'s report, ``structnmt score`` and ``structnmt compare``, all through the CLI."""

from __future__ import annotations

import csv
import json
import random
import shutil
from pathlib import Path

import pytest

from structnmt.cli import main
from structnmt.data.dataset import PreparedDataset
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.evaluate.score import corpus_scores
from structnmt.evaluate.seeds import seed_aware_test

SAMPLES = 200


def _noisy(refs: list[str], seed: int, drop: float) -> list[str]:
    """Translations of ``refs`` that lose each word with probability ``drop`` (a system's quality), drawn
    with ``seed`` (a run)."""
    rng = random.Random(seed)
    return [" ".join(w for w in r.split() if rng.random() > drop) for r in refs]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A prepared dataset with two test splits named as Multi30k's of one domain (test_2016_flickr, test_2017_flickr)."""
    root = tmp_path_factory.mktemp("two_sets")
    write_corpus(SynthConfig(seed=5, n_train=300, n_valid=30, n_test=40), root)
    for side in ("src", "tgt"):
        shutil.copy(root / f"test.{side}", root / f"test_2016_flickr.{side}")
        shutil.copy(root / f"valid.{side}", root / f"test_2017_flickr.{side}")
    dest = root / "data-bin"
    assert main(["prepare", "-s", "src", "-t", "tgt", "--trainpref", str(root / "train"), "--validpref",
                 str(root / "valid"), "--testpref", str(root / "test_2016_flickr"), "--testpref",
                 str(root / "test_2017_flickr"), "--destdir", str(dest), "--vocab-size", "300", "--no-progress"]) == 0
    return dest


def _result(hyps: list[str], refs: list[str], name: str) -> dict:
    s = {x.name: x for x in corpus_scores(hyps, refs)}
    return {"split": name, "n_sentences": len(refs), "hyp_file": f"{name}.hyp", "bleu": s["BLEU"].score,
            "bleu_signature": s["BLEU"].signature, "bleu_precisions": s["BLEU"].precisions,
            "chrf": s["chrF"].score, "chrf_signature": s["chrF"].signature, "decode_sent_per_s": 100.0}


def _runs(out: Path, data: Path, rows: dict[str, float], seeds: list[int]) -> None:
    """Finished runs of ``rows`` (row directory -> word drop rate) in the runner's layout: test.hyp, test1.hyp and a
    result.json scored on both, as a grid trained elsewhere and copied in leaves them."""
    ds = PreparedDataset(data)
    refs = {x: ds.split(x).text("ref") for x in ("test", "test1")}
    for i, (row, drop) in enumerate(rows.items()):
        for seed in seeds:
            d = out / "runs" / row / f"seed{seed}"
            d.mkdir(parents=True)
            per = {}
            for j, x in enumerate(("test", "test1")):
                hyps = _noisy(refs[x], 100 * seed + 10 * i + j, drop)
                (d / f"{x}.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
                per[x] = _result(hyps, refs[x], x)
            res = {**per["test"], "n_params": 1000, "num_updates": 10, "train_target_tokens": 500,
                   "train_seconds": 1.0, "train_tok_per_s": 500.0, "peak_memory_mb": 10.0, "train_device": "cpu",
                   "splits": {"test1": per["test1"]}}
            (d / "result.json").write_text(json.dumps(res), encoding="utf-8")
            (d / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 5.0}\n', encoding="utf-8")


def _grid(tmp: Path, data: Path, extra: str = "") -> Path:
    path = tmp / "grid.yaml"
    path.write_text(f"""name: two test sets
data: {{path: {data}}}
base: {{model: {{d_model: 32, ffn_dim: 64, heads: 2, encoder_layers: 1, decoder_layers: 1}}}}
budget: {{max_updates: 10}}
seeds: [1, 2, 3]
runs:
  - name: Base
  - name: Better
evaluate: {{split: test, extra_splits: [test1], bootstrap_samples: {SAMPLES}{extra}}}
""")
    return path


def _csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_report_reads_the_joined_set_first_as_the_concatenated_files_give_it(tmp_path, dataset, capsys):
    """Two test splits of one domain (file names equal but for the year): the report's first table and results.csv's
    first rows are the joined set "test+test1", whose per-seed BLEU is corpus BLEU of the concatenated translations
    against the concatenated references (not the mean of the two sets') and whose p is the seed-aware test on those
    concatenated files; each set follows, and the seed planner and delta picture read the new rows."""
    out = tmp_path / "out"
    _runs(out, dataset, {"base": 0.3, "better": 0.2}, [1, 2, 3])
    assert main(["experiment", str(_grid(tmp_path, dataset)), "--report-only", "--out", str(out)]) == 0
    rows = _csv(out / "results.csv")
    assert [(r["split"], r["system"]) for r in rows] == [
        ("test+test1", "Base"), ("test+test1", "Better"), ("test", "Base"), ("test", "Better"),
        ("test1", "Base"), ("test1", "Better")]
    ds = PreparedDataset(dataset)
    refs = ds.split("test").text("ref") + ds.split("test1").text("ref")
    joined = {}  # the concatenation by hand: one file per run, as `cat test.hyp test1.hyp` writes it
    for row in ("base", "better"):
        for k in (1, 2, 3):
            d = out / "runs" / row / f"seed{k}"
            (d / "joined.hyp").write_text((d / "test.hyp").read_text() + (d / "test1.hyp").read_text())
            joined[(row, k)] = (d / "joined.hyp").read_text().splitlines()
    for r, row in zip(rows[:2], ("base", "better")):
        bleu = [corpus_scores(joined[(row, k)], refs)[0].score for k in (1, 2, 3)]
        assert [float(r[f"sacrebleu_seed{k}"]) for k in (1, 2, 3)] == pytest.approx(bleu)
        parts = [float(x["sacrebleu_seed1"]) for x in rows[2:] if x["system"] == r["system"]]
        assert float(r["sacrebleu_seed1"]) != pytest.approx(sum(parts) / 2)  # recomputed, not averaged
    expected = seed_aware_test([joined[("base", k)] for k in (1, 2, 3)], {"b": [joined[("better", k)] for k in
                               (1, 2, 3)]}, refs, n_samples=SAMPLES, aso=False)["b"]
    assert float(rows[1]["p_value"]) == pytest.approx(expected.p_value)
    assert float(rows[1]["delta"]) == pytest.approx(expected.delta) and rows[1]["test"] == "seed-aware"
    # test-set sampling (one run's bootstrap sd) shrinks on the join
    assert float(rows[1]["s_sel"]) < min(float(rows[3]["s_sel"]), float(rows[5]["s_sel"]))
    md = (out / "results.md").read_text(encoding="utf-8")
    first_table = md.index("Split test+test1 (joined: test_2016_flickr + test_2017_flickr):")
    assert first_table < md.index("## Split test (test_2016_flickr)") < md.index("## Split test1 (test_2017_flickr)")
    assert "**Joined test sets**: `test` (40) and `test1` (30)" in md
    assert "| System | test+test1 | test | test1 |" in md  # each set beside the joined one
    assert "| BLEU test | chrF | 1/2/3/4-gram precision | BLEU test+test1 | BLEU test1 | directory |" in md  # per run
    capsys.readouterr()
    assert main(["plan-seeds", str(out), "--delta", "1"]) == 0
    assert "| test+test1 | Better |" in capsys.readouterr().out
    assert main(["delta-plot", str(out / "results.csv"), "--out", str(tmp_path / "d.png")]) == 0
    assert "| test+test1 | Better |" in (tmp_path / "d.md").read_text(encoding="utf-8")


def test_join_can_be_named_or_turned_off_and_a_bad_join_is_a_sentence(tmp_path, dataset, capsys):
    """``evaluate.join: []`` leaves the report as before the joined reading (the evaluation split first);
    a join naming a split the grid does not score is one sentence, exit 2."""
    out = tmp_path / "out"
    _runs(out, dataset, {"base": 0.3, "better": 0.2}, [1, 2, 3])
    assert main(["experiment", str(_grid(tmp_path, dataset, ", join: []")), "--report-only", "--out", str(out)]) == 0
    assert [r["split"] for r in _csv(out / "results.csv")][::2] == ["test", "test1"]
    assert "(joined:" not in (out / "results.md").read_text(encoding="utf-8")
    assert main(["experiment", str(_grid(tmp_path, dataset, ", join: [test1, test]")), "--report-only", "--out",
                 str(out)]) == 0
    assert _csv(out / "results.csv")[0]["split"] == "test1+test"
    capsys.readouterr()
    assert main(["experiment", str(_grid(tmp_path, dataset, ", join: [test, valid]")), "--report-only", "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "evaluate.join ['test', 'valid']: 'valid' is not a scored split; name two or more of" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def _sets(tmp: Path) -> dict:
    """Two test sets (40 and 30 lines) with sources, references and 3 seeds of two systems, one file per set and run,
    and the same runs concatenated by hand (``cat set1 set2``)."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(60)]
    out: dict = {"ref": [], "src": [], "hyp": {"a": [[], [], []], "b": [[], [], []]}}
    cat: dict = {"ref": [], "src": [], "a": [[], [], []], "b": [[], [], []]}
    for j, n in enumerate((40, 30)):
        refs = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(n)]
        out["ref"].append(_write(tmp / f"set{j}.ref", refs))
        out["src"].append(_write(tmp / f"set{j}.src", [r.upper() for r in refs]))
        cat["ref"] += refs
        cat["src"] += [r.upper() for r in refs]
        for name, drop in (("a", 0.3), ("b", 0.2)):
            for k in range(3):
                hyps = _noisy(refs, 1000 * j + 10 * k + (name == "b"), drop)
                out["hyp"][name][k].append(_write(tmp / f"{name}{k}.set{j}.hyp", hyps))
                cat[name][k] += hyps
    files = {"ref": _write(tmp / "cat.ref", cat["ref"]), "src": _write(tmp / "cat.src", cat["src"])}
    for name in ("a", "b"):
        files[name] = [_write(tmp / f"{name}{k}.cat.hyp", cat[name][k]) for k in range(3)]
    out["cat"] = files
    return out


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _tests(text: str) -> list[str]:
    """The numbers of score's output lines, file names left out (they differ between joined and concatenated files)."""
    import re

    return [" ".join(re.findall(r"[-+]?\d+\.\d+", line)) for line in text.splitlines()
            if " = " in line or line.startswith("run ")]


def test_score_reads_several_test_sets_and_gives_the_joined_verdict_first(tmp_path, capsys):
    """``score --ref A B --hyp a1A,a1B ...``: the joined section first, equal number for number to scoring the
    concatenated files; then each set, equal to scoring it alone. Misaligned input is one sentence, exit 2."""
    s = _sets(tmp_path)
    runs = {n: [",".join(files) for files in s["hyp"][n]] for n in ("a", "b")}
    assert main(["score", "--ref", *s["ref"], "--hyp", *runs["a"], "--hyp", *runs["b"], "--bootstrap", "100"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"#### joined test set: {s['ref'][0]} + {s['ref'][1]} (70 lines")
    sections = text.split("\n#### test set ")
    assert len(sections) == 3 and sections[1].startswith(f"{s['ref'][0]} (40 lines)")
    assert main(["score", "--ref", s["cat"]["ref"], "--hyp", *s["cat"]["a"], "--hyp", *s["cat"]["b"],
                 "--bootstrap", "100"]) == 0
    by_hand = capsys.readouterr().out
    assert "p = " in by_hand and _tests(sections[0]) == _tests(by_hand)
    for j in (0, 1):
        assert main(["score", "--ref", s["ref"][j], "--hyp", *[f[j] for f in s["hyp"]["a"]], "--hyp",
                     *[f[j] for f in s["hyp"]["b"]], "--bootstrap", "100"]) == 0
        assert _tests(sections[1 + j]) == _tests(capsys.readouterr().out)

    def refused(argv, message):
        assert main(["score", "--ref", *s["ref"], *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err

    refused(["--hyp", s["hyp"]["a"][0][0], "--hyp", runs["b"][0]],
            f"--hyp {s['hyp']['a'][0][0]}: 1 file(s) for the 2 test sets of --ref; give one file per test set, "
            "comma-joined in the order of --ref")
    swapped = f"{s['hyp']['a'][0][1]},{s['hyp']['a'][0][0]}"  # the sets in the wrong order: 30 lines for 40
    refused(["--hyp", swapped, "--hyp", runs["b"][0]],
            f"{s['hyp']['a'][0][1]} has 30 lines but the references {s['ref'][0]} have 40")


def test_compare_joins_several_test_sets_and_tests_each_as_a_bucket(tmp_path, capsys):
    """``compare --src A B --ref A B --hyp a1A,a1B ...``: the all-sentences row is the test on the concatenated files,
    each set a bucket whose test is that set's alone; misaligned input is one sentence."""
    from structnmt.analysis.compare_report import TEST_SETS

    s = _sets(tmp_path)
    runs = {n: [",".join(files) for files in s["hyp"][n]] for n in ("a", "b")}
    common = ["--metric", "bleu", "--bootstrap", "50", "--buckets", "length", "--name", "A", "--name", "B"]

    def compare(src, ref, a, b, out, *more) -> list[dict]:
        assert main(["compare", "--src", *src, "--ref", *ref, "--hyp", *a, "--hyp", *b, *common, *more,
                     "--out", str(tmp_path / out)]) == 0
        return _csv(tmp_path / out / "compare.csv")

    rows = compare(s["src"], s["ref"], runs["a"], runs["b"], "joined", "--html")
    assert TEST_SETS in (tmp_path / "joined" / "report.html").read_text(encoding="utf-8")
    by_hand = compare([s["cat"]["src"]], [s["cat"]["ref"]], s["cat"]["a"], s["cat"]["b"], "cat")
    pick = lambda rs, kind: [(r["bucket"], r["delta"], r["p_value"]) for r in rs if r["kind"] == kind]  # noqa: E731
    assert pick(rows, "all sentences") == pick(by_hand, "all sentences")
    names = [Path(x).name for x in s["ref"]]
    assert [(b, int(r["sentences"])) for b, r in zip(names, [r for r in rows if r["kind"] == TEST_SETS])] == [
        (names[0], 40), (names[1], 30)]
    for j in (0, 1):
        alone = compare([s["src"][j]], [s["ref"][j]], [f[j] for f in s["hyp"]["a"]], [f[j] for f in s["hyp"]["b"]],
                        f"set{j}")
        one = next(r for r in rows if r["kind"] == TEST_SETS and r["bucket"] == names[j])
        assert (one["delta"], one["p_value"]) == pick(alone, "all sentences")[0][1:]
    capsys.readouterr()

    def refused(argv, message):
        assert main(["compare", *argv, *common, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err

    refused(["--src", s["src"][0], "--ref", *s["ref"], "--hyp", *runs["a"], "--hyp", *runs["b"]],
            "compare: 1 --src file(s) for 2 --ref file(s); give each test set's source and references in one order")
    refused(["--src", *s["src"], "--ref", *s["ref"], "--hyp", *s["hyp"]["a"][0], "--hyp", *runs["b"]],
            f"compare: --hyp {s['hyp']['a'][0][0]}: 1 file(s) for the 2 test sets of --ref")
    swapped = f"{s['hyp']['a'][0][1]},{s['hyp']['a'][0][0]}"
    refused(["--src", *s["src"], "--ref", *s["ref"], "--hyp", swapped, *runs["a"][1:], "--hyp", *runs["b"]],
            f"compare: {s['hyp']['a'][0][1]} has 30 lines, the reference {s['ref'][0]} 40; give A's translation")
