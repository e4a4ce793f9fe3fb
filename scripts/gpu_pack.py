"""Pack many (row, seed) runs of experiment grids onto one GPU, each its own process, until a deadline.

A lent GPU machine has 16 CPU cores and one GPU that a single small model leaves mostly idle; the
runs here are bound by the Python process that launches their kernels. So every (row, seed) becomes
its own ``structnmt experiment`` of a one-row grid (written next to the grid file, so its relative
paths still resolve; same row name, so same run directory), all started at once, one CPU thread each.
Start CUDA MPS first (``nvidia-cuda-mps-control -d``) so their kernels share the GPU rather than take
turns. Runs still going at the deadline get SIGTERM (the runner stops them like Ctrl-C); the runner
resumes them from their last checkpoint when the same command is run again on the same machine.
``--at-once N`` runs at most N at a time and starts the others as runs end (while ``--min-left``
seconds remain): fewer runs sharing the GPU each finish sooner, and a run that cannot finish before the
machine goes back is wasted, since checkpoints do not come back. ``ended.json`` (also printed) says how
each run ended: its exit code, the update it reached when stopped at the deadline, or "not started".
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
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from structnmt.experiment.grid import slug
from structnmt.experiment.runner import run_progress


@dataclass(frozen=True)
class Job:
    grid: str  # the grid file
    out: str  # the grid's output directory (shared by its rows and seeds)
    seeds: tuple[int, ...]
    rows: tuple[str, ...]


def parse_job(text: str) -> Job:
    """``GRID:OUT:SEEDS:ROW[:ROW...]`` -> :class:`Job` (row names may hold spaces, not colons), checked: the grid a
    readable grid file with runs, the seeds positive integers, every row named."""
    parts = text.split(":")
    example = "e.g. configs/grids/x.yaml:runs_gpu/x:1,2,3:Transformer"
    if len(parts) < 4 or not all(parts[3:]) or not parts[1]:
        raise SystemExit(f"gpu_pack: --job {text!r} is not GRID:OUT:SEEDS:ROW[:ROW...]; {example}")
    try:
        seeds = tuple(int(s) for s in parts[2].split(","))
    except ValueError:
        seeds = ()
    if not seeds or any(s < 1 for s in seeds):
        raise SystemExit(f"gpu_pack: --job {text!r}: the seeds {parts[2]!r} are not positive integers separated by "
                         f"commas; {example}")
    _grid_rows(parts[0])  # a missing, unreadable or empty grid: said now, before any run
    return Job(parts[0], parts[1], seeds, tuple(parts[3:]))


def _grid_rows(grid: str | Path) -> tuple[dict, list[dict]]:
    """The grid file's data and its runs, or one sentence."""
    path = Path(grid)
    if not path.is_file():
        raise SystemExit(f"gpu_pack: {grid}: no such grid file (a directory, or missing); give a grid YAML.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        runs = data["runs"]
        names = [r["name"] for r in runs]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        raise SystemExit(f"gpu_pack: {grid}: not a readable grid (YAML with a list of runs, each with a name).") from None
    if not names:
        raise SystemExit(f"gpu_pack: {grid}: has no runs.")
    return data, runs


#: the first line of every one-row grid gpu_pack writes: only such a file is ever replaced
ONE_ROW_HEADER = "# written by scripts/gpu_pack.py: one row of "


def one_row_grid(grid: str | Path, row: str) -> Path:
    """Write the grid with only ``row`` (its own baseline) beside ``grid``; returns the new file."""
    data, all_runs = _grid_rows(grid)
    runs = [r for r in all_runs if r["name"] == row]
    if len(runs) != 1:
        raise SystemExit(f"gpu_pack: {grid} has no row named {row!r}; rows: "
                         f"{', '.join(r['name'] for r in all_runs)}.")
    data["runs"], data["baseline"] = runs, row
    path = Path(grid).with_name(f"_pack_{Path(grid).stem}_{slug(row)}.yaml")  # the runner's directory name
    if path.exists() and not path.read_text(encoding="utf-8", errors="replace").startswith(ONE_ROW_HEADER):
        raise SystemExit(f"gpu_pack: {path} exists and was not written by gpu_pack; move it away (gpu_pack writes "
                         "its one-row grid under that name).")
    path.write_text(f"{ONE_ROW_HEADER}{grid}\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True),
                    encoding="utf-8")
    return path


def check_tar(tar: str, jobs: list[Job]) -> None:
    """The archive is written at the end, after every run: its place is checked now. A new file in an existing,
    writable directory, not a grid of the jobs."""
    path = Path(tar)
    if path.exists():
        raise SystemExit(f"gpu_pack: --tar {tar} exists; give a new file (gpu_pack never replaces a file).")
    if any(path.resolve() == Path(j.grid).resolve() for j in jobs):
        raise SystemExit(f"gpu_pack: --tar {tar} is a grid of the jobs; give another file.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise SystemExit(f"gpu_pack: --tar {tar}: its directory {parent} does not exist or is not writable; "
                         "make it first (the archive is written after every run).")


def archive_name(f: Path, root: str) -> str:
    """A member name that stays inside the archive's extraction directory: the path relative to here, or, for a
    root outside it (``../x``), the root's own name and the path below it."""
    rel = os.path.relpath(f)
    if rel.startswith(".."):  # paths as given (a link's own name, never its target's)
        rel = os.path.join(Path(os.path.abspath(root)).name, os.path.relpath(os.path.abspath(f), os.path.abspath(root)))
    return rel


@dataclass(frozen=True)
class Run:
    label: str  # one log per run: logs/<label>.log
    argv: list[str]
    run_dir: Path  # where the runner trains it (its metrics.jsonl tells how far it came: runner.run_progress)


def commands(jobs: list[Job], overrides: list[str]) -> list[Run]:
    """One :class:`Run` per (grid, row, seed), in the order given (the order a queue starts them)."""
    out = []
    for job in jobs:
        for row in job.rows:
            grid = one_row_grid(job.grid, row)
            for seed in job.seeds:
                out.append(Run(f"{grid.stem}_s{seed}",
                               [sys.executable, "-m", "structnmt.cli", "experiment", str(grid), "--out", job.out,
                                f"seeds=[{seed}]", "train.threads=1", *overrides],
                               Path(job.out) / "runs" / slug(row) / f"seed{seed}"))
    return out


def run_all(runs: list[Run], deadline_s: float, log_dir: Path, at_once: int | None = None,
            min_left_s: float = 0.0, poll_s: float = 5.0,
            clock: Callable[[], float] = time.monotonic) -> dict[str, str]:
    """Run ``runs``, at most ``at_once`` at a time (all when None): the first ``at_once`` at once, each queued
    one as another ends while at least ``min_left_s`` remain before the deadline; SIGTERM what still runs at
    the deadline. Returns label -> how it ended: "exit N", "stopped at the deadline (trained to update U)" or
    "not started"."""
    t0, env = clock(), dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log_dir.mkdir(parents=True, exist_ok=True)
    limit = len(runs) if at_once is None else at_once
    queue, procs = list(runs[limit:]), {}

    def start(run: Run) -> None:
        with open(log_dir / f"{run.label}.log", "w", encoding="utf-8") as fh:
            procs[run.label] = subprocess.Popen(run.argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)

    for run in runs[:limit]:
        start(run)
    while True:
        left = deadline_s - (clock() - t0)
        while queue and sum(p.poll() is None for p in procs.values()) < limit and left >= min_left_s:
            start(queue.pop(0))
        running = any(p.poll() is None for p in procs.values())
        if left <= 0 or not (running or (queue and left >= min_left_s)):
            break
        time.sleep(min(poll_s, max(left, 0.01)))
    stopped = [label for label, p in procs.items() if p.poll() is None]
    for label in stopped:
        os.killpg(procs[label].pid, signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    ended = {}
    for run in runs:
        if run.label not in procs:
            ended[run.label] = "not started"
        elif run.label in stopped:
            ended[run.label] = f"stopped at the deadline ({run_progress(run.run_dir)})"
        else:
            ended[run.label] = f"exit {procs[run.label].returncode}"
    return ended


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", action="append", required=True, help="GRID:OUT:SEEDS:ROW[:ROW...] (repeatable)")
    ap.add_argument("--deadline", type=float, required=True, help="seconds after which running runs are stopped")
    ap.add_argument("--tar", required=True, help="the .tar.gz to write (run directories without checkpoints, logs)")
    ap.add_argument("--logs", default="logs_pack", help="one log per run")
    ap.add_argument("--at-once", type=int, default=None,
                    help="at most this many runs at a time, the rest queued in --job order (default: all at once)")
    ap.add_argument("--min-left", type=float, default=120.0,
                    help="start a queued run (one past the first --at-once) only while at least this many seconds "
                         "remain before the deadline")
    ap.add_argument("overrides", nargs="*", help="key=value items for every run (after --)")
    args = ap.parse_args(argv)
    if args.at_once is not None and args.at_once < 1:
        raise SystemExit(f"gpu_pack: --at-once {args.at_once} starts nothing; give 1 or more.")
    if args.min_left < 0:
        raise SystemExit(f"gpu_pack: --min-left {args.min_left:g} is negative; give the seconds a queued run needs "
                         "at least (0 starts one whenever another ends).")
    if not math.isfinite(args.deadline) or args.deadline <= 0:
        raise SystemExit(f"gpu_pack: --deadline {args.deadline}: give a positive number of seconds.")
    jobs = [parse_job(j) for j in args.job]  # every argument and the archive's place: checked before any run
    check_tar(args.tar, jobs)
    ended = run_all(commands(jobs, args.overrides), args.deadline, Path(args.logs), args.at_once, args.min_left)
    print(json.dumps(ended, indent=1))
    (Path(args.logs) / "ended.json").write_text(json.dumps(ended, indent=1), encoding="utf-8")
    with tarfile.open(args.tar, "w:gz") as tar:
        for root in [*{j.out for j in jobs}, args.logs]:
            for f in sorted(Path(root).rglob("*")):
                if f.is_file() and f.suffix != ".pt":
                    tar.add(f, arcname=archive_name(f, root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
