"""The synthetic generalization benchmark: held-out structures, gold trees, metrics."""

from __future__ import annotations

import copy
import json

import pytest

from structnmt.data.generalization import (
    SPLITS,
    BenchmarkConfig,
    check_benchmark,
    example_properties,
    generate_benchmark,
    in_training_distribution,
    write_benchmark,
)
from structnmt.data.synthetic import realize
from structnmt.evaluate.generalization import split_metrics, verb_final_outcomes, verb_forms
from structnmt.syntax.io import parse_ptb, read_conllu

CFG = BenchmarkConfig(seed=4, n_train=400, n_valid=20, n_test=20, n_gen=25)


@pytest.fixture(scope="module")
def bench():
    return generate_benchmark(CFG)


def test_generation_is_a_function_of_the_seed(bench):
    again = generate_benchmark(CFG)
    assert {k: [ex.src for ex in v[0]] for k, v in again.items()} == {k: [ex.src for ex in v[0]] for k, v in bench.items()}
    other = generate_benchmark(BenchmarkConfig(**{**CFG.__dict__, "seed": 5}))
    assert [ex.src for ex in other["attraction3"][0]] != [ex.src for ex in bench["attraction3"][0]]


def test_every_split_has_its_property_and_training_never_does(bench):
    assert set(bench) == {s.name for s in SPLITS} | {"train", "valid"}
    for split in SPLITS:
        examples, props = bench[split.name]
        assert len(examples) == (CFG.n_test if split.name == "test" else CFG.n_gen)
        assert all(split.predicate(example_properties(ex), CFG) for ex in examples)
    for name in ("train", "valid", "test"):
        props = [example_properties(ex) for ex in bench[name][0]]
        assert all(p["attractors"] <= 1 and p["subject_depth"] <= 1 and not p["subject_rc"]
                   and p["length"] <= CFG.train_max_len for p in props)
    train_props = [example_properties(ex) for ex in bench["train"][0]]
    assert max(p["attractors"] for p in train_props) == 1  # the training split does show one attractor
    assert {p["attractors"] for p in bench["attraction4"][1]} == {4}
    assert min(p["length"] for p in bench["length"][1]) > max(p["length"] for p in train_props)
    assert all(p["subject_rc"] for p in bench["recombination"][1])
    # relative clauses are seen in training, on objects only
    assert any("SBAR" in ex.tree for ex in bench["train"][0])
    sentences = [" ".join(ex.src) for v in bench.values() for ex in v[0]]
    assert len(sentences) == len(set(sentences))


def test_the_check_refuses_a_leak(bench):
    assert check_benchmark(bench, CFG)["attraction2"]["max_attractors"] == 2
    leaked = copy.copy(bench)
    leaked["train"] = (bench["train"][0] + bench["attraction2"][0][:1], bench["train"][1])
    with pytest.raises(AssertionError, match="split train: sentence"):
        check_benchmark(leaked, CFG)


def test_properties_of_hand_made_sentences():
    ex = realize("(S (NP (NP (DT the) (NN dog)) (PP (IN near) (NP (NP (DT the) (NNS cats)) (PP (IN with) "
                 "(NP (DT the) (NNS hats)))))) (VP (VBZ sleeps)))")
    assert example_properties(ex) == {"length": 9, "attractors": 2, "subject_depth": 2, "subject_rc": False}
    ex = realize("(S (NP (NP (DT the) (NN dog)) (SBAR (WHNP (WDT that)) (S (VP (VBZ sleeps))))) "
                 "(VP (VBZ sees) (NP (DT the) (NNS cats))))")
    p = example_properties(ex)
    assert p["subject_rc"] and p["subject_depth"] == 1 and not in_training_distribution(p, CFG)


def test_gold_trees_round_trip_and_cover_the_sentence(tmp_path):
    cfg = BenchmarkConfig(seed=2, n_train=30, n_valid=5, n_test=5, n_gen=5)
    meta = write_benchmark(cfg, tmp_path)
    saved = json.loads((tmp_path / "benchmark.json").read_text())
    assert saved["splits"]["depth3"]["max_subject_depth"] == 3 and saved == json.loads(json.dumps(meta))
    assert f"at most {cfg.train_max_len} words" in saved["splits"]["length"]["statement"]
    for split in ("train", "attraction4", "depth3", "recombination"):
        src = (tmp_path / f"{split}.src").read_text().splitlines()
        deps = list(read_conllu(tmp_path / f"{split}.src.conllu"))
        trees = [parse_ptb(line) for line in (tmp_path / f"{split}.src.tree").read_text().splitlines()]
        props = [json.loads(line) for line in (tmp_path / f"{split}.props.jsonl").read_text().splitlines()]
        assert len(src) == len(deps) == len(trees) == len(props) > 0
        for line, dep, tree in zip(src, deps, trees):
            words = line.split()
            assert dep.words == words and tree.words == words
            assert sum(h == 0 for h in dep.heads) == 1
            # constituency: every span contiguous and inside the sentence, children in order
            for node in tree.root.walk():
                assert 0 <= node.start < node.end <= len(words)
                kids = node.children
                assert all(a.end == b.start for a, b in zip(kids, kids[1:]))
                if kids:
                    assert kids[0].start == node.start and kids[-1].end == node.end


def _example():
    ex = realize("(S (NP (NP (DT the) (NN dog)) (PP (IN near) (NP (DT the) (NNS cats)))) (VP (VBZ sleeps)))",
                 seed=3)
    return ex


def test_metrics_on_hand_built_hypotheses():
    ex = _example()
    ref = " ".join(ex.tgt)
    item = ex.agreement[0]
    assert item["attractors"] == 1 and item["distance"] == 3
    wrong_agreement = ref.replace(item["expected"], item["wrong"])
    verb = ex.tgt[item["tgt_index"]]
    verb_first = " ".join([verb] + [t for t in ex.tgt if t != verb])
    m = split_metrics([ref, wrong_agreement, verb_first, ""], [ex] * 4, seed=3)
    assert m["exact"] == 25.0
    assert m["agreement"] == pytest.approx(100 * 2 / 4)  # right in the reference and the verb-first line
    assert m["agreement_by_attractors"] == {"1": [2, 4]}
    assert m["agreement_by_distance"] == {"3-5": [2, 4]}
    assert m["verb_final"] == pytest.approx(100 * 2 / 4)  # the reference and the wrong-suffix line
    assert m["per_sentence"]["exact"] == [True, False, False, False]
    assert m["per_sentence"]["verb_final"] == [[True], [True], [False], [False]]
    assert m["bleu"] < 100 and "nrefs:1" in m["bleu_signature"]
    perfect = split_metrics([ref], [ex], seed=3)
    assert perfect["bleu"] == pytest.approx(100) and (perfect["exact"], perfect["agreement"],
                                                       perfect["verb_final"]) == (100, 100, 100)


def test_verb_final_matches_verbs_by_stem_and_rank():
    ex = realize("(S (S (NP (DT the) (NN dog)) (VP (VBZ sleeps))) (CC and) (S (NP (DT the) (NN cat)) "
                 "(VP (VBZ sleeps))))", seed=3)
    forms = verb_forms(3)
    ref = list(ex.tgt)
    assert sum(t in forms for t in ref) == 2
    assert verb_final_outcomes(" ".join(ref), ex, forms) == [True, True]
    second = max(i for i, t in enumerate(ref) if t in forms)
    moved = ref[:second] + ref[second + 1 :]
    moved.insert(second - 1, ref[second])  # the second verb before its subject noun
    assert verb_final_outcomes(" ".join(moved), ex, forms) == [True, False]


def _bench_json(path, agreement: list[list[bool]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"per_sentence": {"agreement": agreement, "verb_final": agreement,
                                                 "exact": [all(a) for a in agreement]}}), encoding="utf-8")


def test_report_accuracy_tests_are_seed_aware_with_two_seeds_and_marked_otherwise(tmp_path):
    """The report's accuracy p-values: the seed-aware test where both sides have >= 2 seeds; else the paired
    randomization test of the common seeds' items (test-set sampling only), which the table marks †."""
    import numpy as np

    from structnmt.evaluate.seeds import seed_aware_accuracy_test
    from structnmt.experiment.generalization_report import (
        _accuracy_p,
        _p_cell,
        paired_randomization,
        read_per_sentence,
        sentence_counts,
    )
    from structnmt.experiment.grid import EvaluateSpec, GridConfig, RunSpec

    rng = np.random.default_rng(3)
    grid = GridConfig(seeds=[1, 2], baseline="B", runs=[RunSpec("B"), RunSpec("A"), RunSpec("One")],
                      evaluate=EvaluateSpec(bootstrap_samples=50))
    results = {}
    for name, seeds, p_right in (("B", (1, 2), 0.5), ("A", (1, 2), 0.7), ("One", (1,), 0.7)):
        for s in seeds:
            d = tmp_path / name / f"seed{s}"
            _bench_json(d / "bench_depth2.json", [[bool(x) for x in rng.random(3) < p_right] for _ in range(40)])
            results[(name, s)] = {"run_dir": str(d)}

    def run_dir(name, seed):
        return tmp_path / name / f"seed{seed}"

    outcomes = {k: read_per_sentence(run_dir(*k), "depth2") for k in results}
    p, seed_aware = _accuracy_p(grid, results, outcomes, "A", "agreement")
    counts = {n: [sentence_counts(outcomes[(n, s)], "agreement") for s in (1, 2)] for n in ("A", "B")}
    assert counts["A"][0].shape == (40, 2) and counts["A"][0][:, 1].sum() == 120
    assert seed_aware and p == seed_aware_accuracy_test(counts["B"], {"A": counts["A"]}, n_samples=50)["A"].p_value
    p1, seed_aware1 = _accuracy_p(grid, results, outcomes, "One", "agreement")
    items = [[float(x) for sent in json.loads((run_dir(n, 1) / "bench_depth2.json").read_text())["per_sentence"]
              ["agreement"] for x in sent] for n in ("One", "B")]
    assert not seed_aware1 and p1 == paired_randomization(*items)
    assert _p_cell(p1, seed_aware1).endswith("†") and not _p_cell(p, seed_aware).endswith("†")
