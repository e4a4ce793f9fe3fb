"""Run by tests/test_feature_store.py under ``torchrun`` (gloo, CPU): each rank trains a config whose dataset
has no feature store, then the same config on a copy of the dataset with stores, and writes what it saw
to ``OUT/rank<R>.json``:

* ``stored``: the structure keys each run read from a store (``Trainer.stored``);
* ``kept_mb``: the structure memory each run kept in this process (``PreparedSplit.structures_kept_mb``);
* ``anon_growth_kb``: how much this process's anonymous memory (``RssAnon`` of /proc/self/status) grew while
  every train and valid sentence's structures were made ready (computed and kept, or read from the store);
* ``values_kb``: the size of those values decoded (what a process holding them would need);
* ``store_maps``: the store files this process maps, with their resident and anonymous kB
  (/proc/self/smaps): resident pages of a file mapping live in the page cache every process shares.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/feature_store_probe.py \\
        PLAIN.yaml STORED.yaml OUT
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from structnmt.config import load_config
from structnmt.train.trainer import Trainer


def rss_anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def store_maps() -> dict[str, dict[str, int]]:
    """``{path: {"Rss": kB, "Anonymous": kB}}`` of the mapped files under a ``features`` directory."""
    maps: dict[str, dict[str, int]] = {}
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line: range perms offset dev inode [path]
            current = head[5] if len(head) > 5 and "/features/" in head[5] else None
            if current is not None:
                maps.setdefault(current, {"Rss": 0, "Anonymous": 0})
        elif current is not None and head and head[0].rstrip(":") in ("Rss", "Anonymous"):
            maps[current][head[0].rstrip(":")] += int(head[1])
    return maps


def ready_structures(trainer: Trainer) -> tuple[int, int]:
    """Make every train and valid sentence's structures ready as the trainer does before its first update,
    then read each once; ``(RssAnon growth kB, decoded size kB)``."""
    splits = [sp for sp in (trainer.train_split, trainer.valid_split) if sp is not None]
    before = rss_anon_kb()
    nbytes = 0
    for sp in splits:
        sp.precompute_structures(trainer.structures)
        for start in range(0, len(sp), 8):
            values = sp.structure_values(range(start, min(len(sp), start + 8)), trainer.structures)
            nbytes += sum(_nbytes(v) for vs in values.values() for v in vs)
    return rss_anon_kb() - before, nbytes // 1024


def _nbytes(value) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return getattr(value, "nbytes", 0)


def main(plain: str, stored: str, out: str) -> None:
    rank = int(os.environ["RANK"])
    record: dict = {"rank": rank}
    for tag, path in (("computed", plain), ("stored", stored)):
        trainer = Trainer(load_config(path), log=lambda *_: None)
        try:
            growth, values_kb = ready_structures(trainer)
            trainer.train()
            record[tag] = {"stored": sorted(trainer.stored), "structures": sorted(trainer.structures),
                           "kept_mb": sum(sp.structures_kept_mb for sp in (trainer.train_split, trainer.valid_split)),
                           "anon_growth_kb": growth, "values_kb": values_kb, "store_maps": store_maps()}
        finally:
            trainer.close()
    Path(out, f"rank{rank}.json").write_text(json.dumps(record, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
