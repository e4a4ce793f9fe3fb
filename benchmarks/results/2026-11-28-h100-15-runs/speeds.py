"""Per-run training speed of the 12 runs that shared one H100 80GB HBM3 under CUDA MPS, 2026-11-28 (docs/experiments.md,
"Many runs on one GPU"; 15 were started, the three PhraseTransformer runs stopped before training for want of
parses). Each file is a run's metrics.jsonl as the first command (a 530 s deadline) left it; the speed is over the
last 150 s of training in it (the baseline's runs finished before the deadline).

    python benchmarks/results/2026-11-28-h100-15-runs/speeds.py [FOLDER]

FOLDER (default: this script's own) holds another pack's ``*.metrics.jsonl.gz``, e.g.
benchmarks/results/2026-11-28-h200-6-runs.
"""
import gzip
import json
import sys
from pathlib import Path

folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
for f in sorted(folder.glob("*.metrics.jsonl.gz")):
    recs = [json.loads(line) for line in gzip.open(f, "rt", encoding="utf-8")]
    train = [r for r in recs if r["kind"] == "train"]
    seg = [r for r in train if r["time"] > train[-1]["time"] - 150]
    rate = (seg[-1]["step"] - seg[0]["step"]) / (seg[-1]["time"] - seg[0]["time"])
    print(f"{f.name.split('.')[0]}: {rate:.2f} updates/s, reached update {train[-1]['step']}, "
          f"8,000 updates would take {8000 / rate / 60:.1f} min")
