"""docs/reports/synth_generalization/rebuild_runs.py: the synthetic grid's run directories from its committed
outputs (the report of 54 runs trained on two machines rests on it)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from structnmt.data.generalization import (
    BenchmarkConfig,
    benchmark_splits,
    load_examples,
    write_benchmark,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "reports" / "synth_generalization" / "rebuild_runs.py"


def read_archive(path: Path) -> dict[str, bytes]:
    """scripts/outputs.py's reader of a committed outputs archive."""
    spec = importlib.util.spec_from_file_location("outputs_script", ROOT / "scripts" / "outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.read_archive(path)


@pytest.fixture()
def rebuild(tmp_path, monkeypatch):
    """The script as a module, its outputs folder and runs.csv moved into tmp_path (the committed ones untouched)."""
    spec = importlib.util.spec_from_file_location("rebuild_runs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "here").mkdir()
    with open(tmp_path / "here" / "runs.csv", "w", encoding="utf-8", newline="") as f:
        csv.DictWriter(f, fieldnames=mod.FIELDS).writeheader()
    monkeypatch.setattr(mod, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.setattr(mod, "HERE", tmp_path / "here")
    return mod


def _finished_run(bench: Path, run_dir: Path, *, wrong_split: str | None = None) -> None:
    """A run directory as the runner leaves it: perfect translations of every split (but one, if asked)."""
    run_dir.mkdir(parents=True)
    for split in benchmark_splits(str(bench)):
        refs = [" ".join(ex.tgt) for ex in load_examples(str(bench), split)]
        if split == wrong_split:
            refs = [r.split(" ", 1)[-1] for r in refs]  # the first word dropped
        (run_dir / f"bench_{split}.hyp").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 3.0}\n', encoding="utf-8")
    result = {"name": "Transformer", "seed": 2, "bleu": 100.0, "chrf": 100.0, "n_params": 10, "num_updates": 6,
              "train_target_tokens": 60, "train_seconds": 1.5, "train_tok_per_s": 40.0,
              "decode_sent_per_s": 9.0, "peak_memory_mb": 100.0}
    (run_dir / "result.json").write_text(json.dumps(result), encoding="utf-8")


def test_a_kept_run_rebuilds_with_its_scores_and_per_item_outcomes(rebuild, tmp_path):
    bench = tmp_path / "bench"
    write_benchmark(BenchmarkConfig(seed=2, n_train=60, n_valid=5, n_test=6, n_gen=5), bench)
    _finished_run(bench, tmp_path / "run")
    rebuild.keep_run("EPYC", tmp_path / "run")
    kept = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert "transformer.seed2.attraction4.hyp" in kept and "transformer.seed2.metrics.jsonl" in kept
    assert len([k for k in kept if k.endswith(".hyp")]) == 8
    with open(tmp_path / "here" / "runs.csv", encoding="utf-8") as f:
        (rec,) = list(csv.DictReader(f))
    assert (rec["system"], rec["seed"], rec["machine"], rec["bleu"], rec["num_updates"]) == \
        ("Transformer", "2", "EPYC", "100.00", "6")
    with pytest.raises(SystemExit, match="already has Transformer"):
        rebuild.keep_run("EPYC", tmp_path / "run")
    with pytest.raises(SystemExit, match="no result.json; keep a run the runner finished"):
        rebuild.keep_run("EPYC", tmp_path / "bench")

    rebuild.main(str(bench), str(tmp_path / "out"))
    run = tmp_path / "out" / "runs" / "transformer" / "seed2"
    result = json.loads((run / "result.json").read_text(encoding="utf-8"))
    assert result["bleu"] == pytest.approx(100.0) and result["train_device"] == "cpu"
    assert result["hardware"]["cpu"] == "AMD EPYC" and result["num_updates"] == 6
    a4 = json.loads((run / "bench_attraction4.json").read_text(encoding="utf-8"))
    assert a4["agreement"] == 100.0 and all(a4["per_sentence"]["exact"])
    assert (run / "metrics.jsonl").read_text(encoding="utf-8").startswith('{"kind": "train"')
    with pytest.raises(SystemExit, match="result.json exists"):  # writes only where nothing is
        rebuild.main(str(bench), str(tmp_path / "out"))


def test_hypotheses_that_do_not_score_what_runs_csv_recorded_are_refused(rebuild, tmp_path):
    bench = tmp_path / "bench"
    write_benchmark(BenchmarkConfig(seed=2, n_train=60, n_valid=5, n_test=6, n_gen=5), bench)
    _finished_run(bench, tmp_path / "run", wrong_split="test")  # recorded as 100 BLEU, scores less
    rebuild.keep_run("H100", tmp_path / "run")
    with open(tmp_path / "here" / "runs.csv", encoding="utf-8") as f:
        rec = list(csv.DictReader(f))[0]
    rec["bleu"] = "100.00"  # what the run's result.json said; its hypotheses of test score below that
    with open(tmp_path / "here" / "runs.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=rebuild.FIELDS)
        w.writeheader()
        w.writerow(rec)
    with pytest.raises(SystemExit, match=r"Transformer \(seed 2\): the committed test hypotheses score BLEU"):
        rebuild.main(str(bench), str(tmp_path / "out"))


def test_a_hypothesis_file_shorter_than_its_split_is_refused(rebuild, tmp_path):
    bench = tmp_path / "bench"
    write_benchmark(BenchmarkConfig(seed=2, n_train=60, n_valid=5, n_test=6, n_gen=5), bench)
    _finished_run(bench, tmp_path / "run")
    rebuild.keep_run("EPYC", tmp_path / "run")
    path = tmp_path / "outputs" / "transformer.seed2.depth2.hyp"
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    path.write_text("".join(x + "\n" for x in lines[:-1]), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"depth2\.hyp has 4 lines, the benchmark's depth2 split 5"):
        rebuild.main(str(bench), str(tmp_path / "out"))


def test_the_committed_runs_csv_covers_the_committed_hypotheses():
    """Every row of runs.csv has its 8 splits' hypotheses committed, and every committed run a row."""
    with open(SCRIPT.parent / "runs.csv", encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    names = set(read_archive(SCRIPT.parents[2] / "outputs" / "synth_generalization.tar.xz"))
    from structnmt.experiment.grid import slug

    splits = ("test", "attraction2", "attraction3", "attraction4", "depth2", "depth3", "length", "recombination")
    runs = {(slug(r["system"]), int(r["seed"])) for r in records}
    committed = {(n.split(".seed")[0], int(n.split(".seed")[1].split(".")[0]))
                 for n in names if n.endswith(".hyp") and n.split(".")[-2] in splits}
    assert runs == committed and len(records) == len(runs) >= 48
    for name, seed in runs:
        assert all(f"{name}.seed{seed}.{s}.hyp" in names for s in splits), (name, seed)


@pytest.mark.parametrize("args", [[], ["--keep", "NOSUCH", "run"], ["only-one"]])
def test_the_script_names_its_usage_on_bad_arguments(args):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert proc.returncode == 1 and "usage: python docs/reports/synth_generalization/rebuild_runs.py" in proc.stderr
    assert "Traceback" not in proc.stderr
