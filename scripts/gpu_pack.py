"""Pack many (row, seed) runs of experiment grids onto one GPU, each its own process, until a deadline.

A lent GPU machine has 16 CPU cores and one GPU that a single small model leaves mostly idle; the
runs here are bound by the Python process that launches their kernels. So every (row, seed) becomes
its own ``structnmt experiment`` of a one-row grid (written next to the grid file, so its relative
paths still resolve; same row name, so same run directory), all started at once, one CPU thread each.
Start CUDA MPS first (``nvidia-cuda-mps-control -d``) so their kernels share the GPU rather than take
turns. Runs still going at the deadline get SIGTERM (the runner stops them like Ctrl-C); the runner
resumes them from their last checkpoint when the same command is run again on the same machine.
At the end everything the runs wrote except checkpoints goes into one ``.tar.gz`` to bring back
(copy it into the grid's output directory elsewhere and run ``--report-only`` there).

    nvidia-cuda-mps-control -d
    python scripts/gpu_pack.py --deadline 530 --tar $OUT/runs.tar.gz \\
        --job configs/grids/cross_paper_multi30k.yaml:runs_gpu/cross_paper_8k:1,2,3:Transformer:+ Rel_Pos \\
        -- budget.max_updates=8000 train.device=cuda

A ``--job`` is ``GRID:OUT:SEEDS:ROW[:ROW...]``; the overrides after ``--`` go to every run.
Rows whose models read parses need the parses of what they translate: spaCy there, or a parse cache made
here (`structnmt parse`, then the override evaluate.parse_cache=FILE); without either the runner refuses
them before training.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Job:
    grid: str  # the grid file
    out: str  # the grid's output directory (shared by its rows and seeds)
    seeds: tuple[int, ...]
    rows: tuple[str, ...]


def parse_job(text: str) -> Job:
    """``GRID:OUT:SEEDS:ROW[:ROW...]`` -> :class:`Job` (row names may hold spaces, not colons)."""
    parts = text.split(":")
    if len(parts) < 4:
        raise SystemExit(f"gpu_pack: --job {text!r} is not GRID:OUT:SEEDS:ROW[:ROW...]; "
                         "e.g. configs/grids/x.yaml:runs_gpu/x:1,2,3:Transformer")
    return Job(parts[0], parts[1], tuple(int(s) for s in parts[2].split(",")), tuple(parts[3:]))


def one_row_grid(grid: str | Path, row: str) -> Path:
    """Write the grid with only ``row`` (its own baseline) beside ``grid``; returns the new file."""
    data = yaml.safe_load(Path(grid).read_text(encoding="utf-8"))
    runs = [r for r in data["runs"] if r["name"] == row]
    if len(runs) != 1:
        raise SystemExit(f"gpu_pack: {grid} has no row named {row!r}; rows: "
                         f"{', '.join(r['name'] for r in data['runs'])}.")
    data["runs"], data["baseline"] = runs, row
    slug = re.sub(r"[^a-z0-9]+", "-", row.lower()).strip("-")
    path = Path(grid).with_name(f"_pack_{Path(grid).stem}_{slug}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def commands(jobs: list[Job], overrides: list[str]) -> list[tuple[str, list[str]]]:
    """(label, argv) of every (grid, row, seed)."""
    out = []
    for job in jobs:
        for row in job.rows:
            grid = one_row_grid(job.grid, row)
            for seed in job.seeds:
                out.append((f"{grid.stem}_s{seed}",
                            [sys.executable, "-m", "structnmt.cli", "experiment", str(grid), "--out", job.out,
                             f"seeds=[{seed}]", "train.threads=1", *overrides]))
    return out


def run_all(cmds: list[tuple[str, list[str]]], deadline_s: float, log_dir: Path) -> dict[str, str]:
    """Start every command at once; SIGTERM what still runs at the deadline; label -> how it ended."""
    t0, env = time.time(), dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = {}
    for label, argv in cmds:
        with open(log_dir / f"{label}.log", "w", encoding="utf-8") as fh:
            procs[label] = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
    while time.time() - t0 < deadline_s and any(p.poll() is None for p in procs.values()):
        time.sleep(5)
    ended = {}
    for label, p in procs.items():
        ended[label] = f"exit {p.returncode}" if p.poll() is not None else "stopped at the deadline"
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    return ended


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", action="append", required=True, help="GRID:OUT:SEEDS:ROW[:ROW...] (repeatable)")
    ap.add_argument("--deadline", type=float, required=True, help="seconds after which running runs are stopped")
    ap.add_argument("--tar", required=True, help="the .tar.gz to write (run directories without checkpoints, logs)")
    ap.add_argument("--logs", default="logs_pack", help="one log per run")
    ap.add_argument("overrides", nargs="*", help="key=value items for every run (after --)")
    args = ap.parse_args(argv)
    jobs = [parse_job(j) for j in args.job]
    ended = run_all(commands(jobs, args.overrides), args.deadline, Path(args.logs))
    print(json.dumps(ended, indent=1))
    (Path(args.logs) / "ended.json").write_text(json.dumps(ended, indent=1), encoding="utf-8")
    with tarfile.open(args.tar, "w:gz") as tar:
        for root in [*{j.out for j in jobs}, args.logs]:
            for f in sorted(Path(root).rglob("*")):
                if f.is_file() and f.suffix != ".pt":
                    tar.add(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
