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
    text = (tmp_path / "gpu_check.md").read_text()
    assert text == capsys.readouterr().out
    assert "smoke model training, 1,024 tokens/batch" in text and "decoding, beam 5, batch 8" in text


def test_mfu_is_the_model_flops_over_the_devices_peak():
    info = {"device": "NVIDIA H200", "torch": "x", "cuda": "y", "date": "d", "peak_bf16": 1e15}
    results = {"base_name": "B", "tiny_name": "T", "decode_batch": 128, "decode": {"sentences_s": 1.0},
               "tiny_train": {"updates_s": 1.0},
               "base_train": [{"tokens_per_batch": 4096, "target_tok_s": 1.0, "model_flops_s": 2.5e14}]}
    assert "| B training, 4,096 tokens/batch | 1 target tok/s | 25.0% |" in gpu_check.table(info, results)
    assert gpu_check.PEAK_BF16["H200"] == 989e12
    batches = gpu_check.make_batches(2, 1000, 50, gpu_check.torch.device("cpu"))
    assert all(b.target_tokens >= 1000 and int((b.tgt_out != 0).sum()) == b.target_tokens for b in batches)
