"""`structnmt compare --experiment DIR --benchmark BENCH_DIR`: subject-verb agreement of the synthetic benchmark
by attractors and by construction, seed-aware, on made-up outcomes whose answer is known and on a written
benchmark with runs of known quality."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import assert_user_error, cli

from structnmt.analysis.compare import CompareConfig
from structnmt.analysis.compare_agreement import (
    ATTRACTORS,
    CLAUSE,
    SPLIT,
    AgreementRuns,
    agreement_bucketings,
    agreement_rows,
    probe_outcomes,
)


def made_up() -> AgreementRuns:
    """40 sentences, each with two probes: one without attractors (clause main), one with 2 (clause relcl).
    Sentences 0-19 are split 'test', 20-39 'attraction2'. The baseline's two seeds get every 0-attractor probe
    right and, of the 2-attractor probes, seed 1 the first 10 and seed 2 the first 12; the system's two seeds get
    every probe right but sentence 0's (seed 1) and sentence 1's (seed 2) 0-attractor probe."""
    probes = [[{"attractors": 0, "kind": "main"}, {"attractors": 2, "kind": "relcl"}] for _ in range(40)]
    splits = ["test"] * 20 + ["attraction2"] * 20
    base = [[[True, i < right] for i in range(40)] for right in (10, 12)]
    system = [[[i != wrong, True] for i in range(40)] for wrong in (0, 1)]
    return AgreementRuns(splits, probes, {"base": base, "sys": system})


def test_agreement_buckets_give_the_known_accuracies_and_a_clear_gain():
    rows = {(r.kind, r.bucket): r for r in agreement_rows(made_up(), CompareConfig(n_samples=300, min_bucket=30))}
    two = rows[(ATTRACTORS, "2")]
    assert two.sentences == 40 and not two.small
    assert two.baseline_score == pytest.approx((10 + 12) / 2 / 40 * 100)  # 27.5
    assert two.score == pytest.approx(100.0) and two.delta == pytest.approx(72.5)
    assert two.low > 0 and two.p_value < 0.01
    zero = rows[(ATTRACTORS, "0")]
    assert zero.baseline_score == pytest.approx(100.0) and zero.score == pytest.approx(39 / 40 * 100)
    assert zero.low < zero.delta < 0 < zero.high  # one miss per seed: not shown worse
    # by split: 'test' holds the 2-attractor probes of sentences 0-19, where the baseline got 10 and 12 right
    test = rows[(SPLIT, "test")]
    assert test.sentences == 40 and test.baseline_score == pytest.approx(((10 + 20) / 40 + (12 + 20) / 40) / 2 * 100)
    att = rows[(SPLIT, "attraction2")]
    assert att.baseline_score == pytest.approx(50.0) and att.score == pytest.approx(100.0)
    assert [r.bucket for r in agreement_rows(made_up(), CompareConfig(n_samples=50)) if r.kind == SPLIT] == [
        "test", "attraction2"]  # the benchmark's order
    assert rows[(CLAUSE, "relcl")].delta == pytest.approx(72.5) and rows[(CLAUSE, "main")].sentences == 40


def test_the_gain_differs_between_attractor_counts():
    """The system gains 72.5 points on the 2-attractor probes and loses 2.5 on the 0-attractor ones: the
    contrast 2 − 0 is their difference, resampling the sentences that hold both."""
    from structnmt.analysis.compare_between import CONTRAST, between_rows

    cfg = CompareConfig(n_samples=300, min_bucket=30)
    by_kind = {b.kind: b for b in agreement_bucketings(made_up())}
    assert by_kind[ATTRACTORS].strata is None and by_kind[ATTRACTORS].counts == [40, 40]
    contrast, het = between_rows(by_kind[ATTRACTORS], cfg)
    assert (contrast.test, contrast.contrast) == (CONTRAST, "2 − 0")
    assert contrast.delta_bucket == pytest.approx(72.5) and contrast.delta_rest == pytest.approx(-2.5)
    assert contrast.difference == pytest.approx(75.0) and contrast.low > 0 and contrast.p_value < 0.01
    assert het.p_value < 0.05


def test_a_bucket_of_one_sentence_is_small_and_untested():
    runs = made_up()
    runs.probes[5].append({"attractors": 7, "kind": "conj"})
    for name in runs.outcomes:
        for run in runs.outcomes[name]:
            run[5] = run[5] + [True]
    rows = [r for r in agreement_rows(runs, CompareConfig(n_samples=50, min_bucket=30)) if r.bucket == "7"]
    assert len(rows) == 1 and rows[0].small and rows[0].sentences == 1 and math.isnan(rows[0].p_value)


def test_probe_outcomes_group_the_benchmark_s_own_matching_by_sentence():
    from structnmt.data.synthetic import SynthConfig, agreement_outcomes, generate

    examples = [ex for ex in generate(SynthConfig(seed=2, n_train=5, n_valid=5, n_test=60))["test"] if ex.agreement]
    refs = [" ".join(ex.tgt) for ex in examples]
    assert all(all(s) for s in probe_outcomes(refs, examples))  # the reference agrees everywhere
    wrong = []
    for ex in examples:  # every probed verb in the other number
        toks = list(ex.tgt)
        for item in ex.agreement:
            toks[item["tgt_index"]] = item["wrong"]
        wrong.append(" ".join(toks))
    got = probe_outcomes(wrong, examples)
    assert [len(s) for s in got] == [len(ex.agreement) for ex in examples]
    assert not any(any(s) for s in got)
    assert [o for s in got for o in s] == [ok for _, ok in agreement_outcomes(wrong, examples)]


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, Path]:
    """A written benchmark and an experiment directory of two rows x 2 seeds: 'base' translates every probed
    verb in the wrong number, 'good' gives the references; seed 2 adds a word to each split's first line (two
    seeds never translate alike: compare refuses one run counted twice)."""
    from structnmt.data.generalization import (
        BenchmarkConfig,
        benchmark_splits,
        load_examples,
        write_benchmark,
    )

    root = tmp_path_factory.mktemp("bench")
    write_benchmark(BenchmarkConfig(n_train=50, n_valid=10, n_test=20, n_gen=20), root / "gen")
    for row, seed in [(r, s) for r in ("base", "good") for s in (1, 2)]:
        d = root / "exp" / "runs" / row / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "result.json").write_text("{}")
        for sp in benchmark_splits(root / "gen"):
            lines = []
            for ex in load_examples(root / "gen", sp):
                toks = list(ex.tgt)
                if row == "base":
                    for item in ex.agreement:
                        toks[item["tgt_index"]] = item["wrong"]
                lines.append(" ".join(toks))
            if seed == 2:
                lines[0] += " x"
            (d / f"bench_{sp}.hyp").write_text("\n".join(lines) + "\n")
    return root / "gen", root / "exp"


def test_compare_on_the_benchmark_joins_every_split_with_its_gold_trees(capsys, bench, tmp_path):
    gen, exp = bench
    code, out, err = cli(capsys, "compare", "--experiment", exp, "--benchmark", gen, "--row", "base", "--row",
                         "good", "--metric", "bleu", "--bootstrap", "50", "--out", tmp_path / "o")
    assert code == 0, err
    import csv

    rows = list(csv.DictReader(open(tmp_path / "o" / "compare.csv", encoding="utf-8")))
    kinds = {r["kind"] for r in rows}
    assert {ATTRACTORS, SPLIT, CLAUSE} <= kinds
    assert any("dependency" in k for k in kinds)  # the gold trees give the syntax buckets
    everything = next(r for r in rows if r["kind"] == "all sentences")
    assert int(everything["sentences"]) == 20 * 8  # the test split and the seven held-out splits, joined
    for r in rows:
        if r["kind"] in (ATTRACTORS, SPLIT, CLAUSE) and r["delta"]:
            assert float(r["baseline_score"]) == 0.0 and float(r["score"]) == 100.0  # every probe
    from structnmt.data.generalization import benchmark_splits, load_examples

    probes = sum(len(ex.agreement) for sp in benchmark_splits(gen) for ex in load_examples(gen, sp))
    assert sum(int(r["sentences"]) for r in rows if r["kind"] == SPLIT) == probes  # the sizes count probes
    assert sum(int(r["sentences"]) for r in rows if r["kind"] == ATTRACTORS) == probes


def test_benchmark_inputs_are_checked_in_one_sentence(capsys, bench, tmp_path):
    gen, exp = bench
    code, _, err = cli(capsys, "compare", "--experiment", exp, "--benchmark", tmp_path, "--row", "base", "--row",
                       "good", "--out", tmp_path / "o1")
    assert_user_error(code, err, "no generalization benchmark here", "structnmt synth --generalization")
    code, _, err = cli(capsys, "compare", "--benchmark", gen, "--src", gen / "test.src", "--ref", gen / "test.tgt",
                       "--hyp", gen / "test.tgt", gen / "test.tgt", "--hyp", gen / "test.tgt", gen / "test.tgt",
                       "--out", tmp_path / "o2")
    assert_user_error(code, err, "--benchmark reads a synthetic-benchmark grid's runs")
    hyps = []
    for k in range(4):  # four runs, each its own translation
        hyps.append(tmp_path / f"h{k}.txt")
        hyps[-1].write_text((gen / "test.tgt").read_text().replace("\n", f" w{k}\n", 1))
    code, _, err = cli(capsys, "compare", "--src", gen / "test.src", "--ref", gen / "test.tgt", "--hyp",
                       *hyps[:2], "--hyp", *hyps[2:], "--buckets", "agreement", "--out", tmp_path / "o3")
    assert_user_error(code, err, "the agreement buckets are the synthetic benchmark's", "--benchmark BENCH_DIR")
    short = exp.parent / "short"
    import shutil

    shutil.copytree(exp, short)
    hyp = short / "runs" / "good" / "seed2" / "bench_depth2.hyp"
    hyp.write_text("\n".join(hyp.read_text().splitlines()[:-1]) + "\n")
    code, _, err = cli(capsys, "compare", "--experiment", short, "--benchmark", gen, "--row", "base", "--row",
                       "good", "--out", tmp_path / "o4")
    assert_user_error(code, err, "bench_depth2.hyp has 19 lines, the benchmark's split depth2 20")
    for k in (1, 2, 3, 4):
        assert not (tmp_path / f"o{k}").exists()
