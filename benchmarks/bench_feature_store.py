"""Start-up memory of a training with and without feature stores (``structnmt features``).

Each process (one, or every ``torchrun`` rank) sets up the trainer of CONFIG, makes the structures of
every train and valid sentence ready as the trainer does before its first update (computed and kept up to
``data.structure_cache_mb``, or read from the store), then trains ``train.max_updates`` updates, and
prints one JSON line: its anonymous memory (``RssAnon`` of /proc/self/status, MB) after the set-up, after
the structures and after the updates, the seconds the structures took, what it kept and which keys it read
from a store. Run it once without and once with the stores (``structnmt features --for CONFIG`` between):

    python benchmarks/bench_feature_store.py CONFIG data.path=DATA train.save_dir=/tmp/run1 train.max_updates=2
    python -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/bench_feature_store.py CONFIG ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from structnmt.config import load_config
from structnmt.train.trainer import Trainer


def rss_anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def main(config: str, overrides: list[str]) -> None:
    cfg = load_config(config, overrides)
    cfg.train.progress = False
    trainer = Trainer(cfg, log=lambda *_: None)
    try:
        setup = rss_anon_mb()
        t0 = time.time()
        splits = [sp for sp in (trainer.train_split, trainer.valid_split) if sp is not None]
        kept = [sp.precompute_structures(trainer.structures) for sp in splits]
        seconds = time.time() - t0
        ready = rss_anon_mb()
        trainer.train()
        print(json.dumps({
            "rank": int(os.environ.get("RANK", "0")), "world": trainer.world,
            "anon_setup_mb": round(setup, 1), "anon_structures_mb": round(ready, 1),
            "anon_after_updates_mb": round(rss_anon_mb(), 1), "structures_s": round(seconds, 1),
            "kept_sentences": kept, "kept_mb": round(sum(sp.structures_kept_mb for sp in splits), 1),
            "stored": sorted(trainer.stored), "structures": sorted(trainer.structures)}), flush=True)
    finally:
        trainer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
