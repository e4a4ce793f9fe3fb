"""benchmarks/gpu_check.py runs on the CPU (--smoke) so that it cannot rot between GPU loans."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


def test_the_smoke_run_measures_every_row_and_writes_its_table(tmp_path, capsys):
    assert gpu_check.main(["--device", "cpu", "--smoke", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["tokens_per_batch"] for r in record["base_train"]] == [256, 512, 1024]
    assert all(r["target_tok_s"] > 0 and r["model_flops_s"] > 0 for r in record["base_train"])
    assert record["decode"]["sentences_s"] > 0 and record["tiny_train"]["updates_s"] > 0
    assert record["tiny_graphs"]["updates_s"] > 0 and record["rows"] == []
    assert all(record[k]["sentences_s"] > 0 for k in ("decode_graphs", "tiny_decode", "tiny_decode_graphs"))
    text = (tmp_path / "gpu_check.md").read_text()
    assert text == capsys.readouterr().out
    assert "smoke model training, 1,024 tokens/batch" in text and "decoding, beam 5, batch 8" in text
    assert "training, CUDA graphs (train.cuda_graphs)" in text and "not measured (give --data)" in text
    assert "decoding, beam 5, batch 8, fixed shapes (decode.cuda_graphs's steps, no capture off a GPU) |" in text
    # the fixed-shape steps translate as the ordinary search: every best hypothesis the same
    for key in ("decode_graphs", "tiny_decode_graphs"):
        assert record[key]["sentences"] > 0 and record[key]["same_best"] == record[key]["sentences"]
    n = record["decode_graphs"]["sentences"]
    assert f"best hypothesis as the ordinary search's for {n:,} of {n:,} sentences" in text


def test_the_rows_of_the_grid_are_timed_one_at_a_time_against_the_baseline(tmp_path, capsys):
    from behaviour_check import prepare_corpus

    data = prepare_corpus(tmp_path / "corpus")[1]
    rows = ["Transformer", "Structured attention (Transformer, layer 1)"]
    assert gpu_check.main(["--device", "cpu", "--smoke", "--out", str(tmp_path / "out"), "--data", str(data),
                           "--rows", *rows]) == 0
    record = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert [r["row"] for r in record["rows"]] == rows
    assert record["rows"][0]["time_x_baseline"] == 1.0 and record["rows"][1]["time_x_baseline"] > 0
    assert f"| {rows[1]} training (the toolkit's trainer) |" in capsys.readouterr().out


def test_mfu_is_the_model_flops_over_the_devices_peak():
    info = {"device": "NVIDIA H200", "torch": "x", "cuda": "y", "date": "d", "peak_bf16": 1e15}
    results = {"base_name": "B", "tiny_name": "T", "decode_batch": 128, "decode": {"sentences_s": 1.0},
               "tiny_train": {"updates_s": 1.0}, "tiny_graphs": {"updates_s": 2.5}, "rows": [],
               "decode_graphs": {"sentences_s": 3.0}, "tiny_decode": None, "tiny_decode_graphs": None,
               "graphs_name": "CUDA graphs (decode.cuda_graphs)",
               "base_train": [{"tokens_per_batch": 4096, "target_tok_s": 1.0, "model_flops_s": 2.5e14}]}
    text = gpu_check.table(info, results)
    assert "| B training, 4,096 tokens/batch | 1 target tok/s | 25.0% |" in text
    assert "| T training, CUDA graphs (train.cuda_graphs) | 2.50 updates/s (2.50x) | - |" in text
    assert "| B decoding, beam 5, batch 128, CUDA graphs (decode.cuda_graphs) | 3.0 sent/s (3.00x) | - |" in text
    assert "| T decoding, beam 5, batch 128 | not measured (past --deadline) | - |" in text
    assert gpu_check.PEAK_BF16["H200"] == 989e12
    batches = gpu_check.make_batches(2, 1000, 50, gpu_check.torch.device("cpu"))
    assert all(b.target_tokens >= 1000 and int((b.tgt_out != 0).sum()) == b.target_tokens for b in batches)


def test_past_the_deadline_nothing_more_starts_and_what_was_measured_is_kept(tmp_path, monkeypatch, capsys):
    """--deadline: the first measurement starts (the clock reads 0), the clock then reads 100 s, past a 10 s
    deadline: the rest is marked not measured, and the outputs hold the one measurement."""
    times = iter([0.0, 0.0] + [100.0] * 20)
    monkeypatch.setattr(gpu_check, "clock", lambda: next(times))
    assert gpu_check.main(["--device", "cpu", "--smoke", "--out", str(tmp_path), "--deadline", "10"]) == 0
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["tokens_per_batch"] for r in record["base_train"]] == [256]
    assert record["decode"] is None and record["tiny_train"] is None and record["tiny_graphs"] is None
    assert record["decode_graphs"] is None and record["tiny_decode_graphs"] is None
    assert record["skipped"] == ["smoke model training, 512 tokens/batch", "smoke model training, 1,024 tokens/batch"]
    text = (tmp_path / "gpu_check.md").read_text()
    assert "| smoke model training, 256 tokens/batch |" in text
    assert "| smoke model training, 1,024 tokens/batch | not measured (past --deadline) | - |" in text
    # the two sizes; base and tiny decoding, each with and without graphs; tiny training with and without
    assert text.count("not measured (past --deadline)") == 2 + 4 + 2
    assert text == capsys.readouterr().out


def test_a_measurement_whose_rounds_disagree_is_marked_unsteady():
    """A median round more than 1.5x the fastest (still compiling: the H200's CUDA-graph training rounds of 4.31,
    1.94 and 0.17 s) is marked with its rounds; steady rounds, or one slow first round, are not."""
    info = {"device": "NVIDIA H200", "torch": "x", "cuda": "y", "date": "d", "peak_bf16": 1e15}
    results = {"base_name": "B", "tiny_name": "T", "decode_batch": 128, "decode": {"sentences_s": 1.0},
               "tiny_train": {"updates_s": 24.8, "rounds_s": [9.32, 0.72, 0.81]},
               "tiny_graphs": {"updates_s": 10.3, "rounds_s": [4.31, 1.94, 0.17]}, "rows": [],
               "decode_graphs": {"sentences_s": 3.0, "rounds_s": [1.46, 1.53, 1.50]}, "tiny_decode": None,
               "tiny_decode_graphs": None, "graphs_name": "CUDA graphs (decode.cuda_graphs)", "base_train": []}
    text = gpu_check.table(info, results)
    assert "| T training, CUDA graphs (train.cuda_graphs) | 10.30 updates/s (0.42x) (unsteady: rounds 4.31 / 1.94 / " \
           "0.17 s) | - |" in text
    assert "| T training | 24.80 updates/s | - |" in text  # a cold first round: the median is the others'
    assert "| B decoding, beam 5, batch 128, CUDA graphs (decode.cuda_graphs) | 3.0 sent/s (3.00x) | - |" in text
    assert gpu_check.unsteady({"rounds_s": [1.0]}) == "" and gpu_check.unsteady(None) == ""
