"""Per-run training speed and matrix-tree paths of the 15 runs that shared one H200 (docs/experiments.md,
"Many runs on one GPU"). Each file is a run's metrics.jsonl after the first command (515 s), its resume
(195 s) and, for the PhraseTransformer, a second resume (58 s); the speed is over the last 150 s of the
first command, which ends at the first restart.

    python benchmarks/results/2026-11-27-h200-15-runs/speeds.py
"""
import gzip
import json
from pathlib import Path

for f in sorted(Path(__file__).parent.glob("*.metrics.jsonl.gz")):
    recs = [json.loads(line) for line in gzip.open(f, "rt", encoding="utf-8")]
    train = [r for r in recs if r["kind"] == "train"]
    # the first restart: the first pause of over 25 s after the first few records (the start is slow too)
    cut = next(i for i in range(3, len(train)) if train[i]["time"] - train[i - 1]["time"] > 25)
    first = train[:cut]  # the first command, up to the restart
    seg = [r for r in first if r["time"] > first[-1]["time"] - 150]
    rate = (seg[-1]["step"] - seg[0]["step"]) / (seg[-1]["time"] - seg[0]["time"])
    trees = [r for r in recs if r["kind"] == "matrix_tree"]
    tree = f", last matrix_tree record {trees[-1]}" if trees else ""
    print(f"{f.name.split('.')[0]}: {rate:.2f} updates/s, reached update {train[-1]['step']}{tree}")
