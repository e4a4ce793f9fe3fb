"""Two runs that went on silently (issue 73): `average --num 10` over a save_dir of fewer checkpoints averages
what there is and says so; a training restarted without a checkpoint starts a `metrics.jsonl` of its own, the
earlier run's kept beside it, instead of appending its curve to the old one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli
from test_bad_inputs import write_config

from structnmt.cli import main


@pytest.fixture(scope="module")
def run(synth_data, tmp_path_factory) -> tuple[Path, Path]:
    """(config, save_dir) of a 6-update training with checkpoints at updates 2, 4 and 6."""
    work = tmp_path_factory.mktemp("avg_restart")
    cfg = write_config(work / "cfg.yaml", synth_data, work / "run", max_updates=6)
    assert main(["train", str(cfg), "--no-progress"]) == 0
    return cfg, work / "run"


def test_average_of_fewer_checkpoints_than_num_says_so(run, tmp_path, capsys):
    _, save = run
    code, out, err = cli(capsys, "average", "--inputs", save, "--num", 10, "--output", tmp_path / "avg.pt")
    assert code == 0, err
    assert (f"average: averaged 3 checkpoints, fewer than --num 10: {save} holds no more numbered checkpoints "
            "(train.keep_last keeps the last few).") in out.splitlines()
    code, out, err = cli(capsys, "average", "--inputs", save, "--num", 3, "--output", tmp_path / "avg3.pt")
    assert code == 0 and "fewer than" not in out, err  # as many as asked: nothing more to say
    code, out, err = cli(capsys, "average", "--checkpoints", save / "checkpoint_4.pt", save / "checkpoint_6.pt",
                         "--output", tmp_path / "two.pt")
    assert code == 0 and "fewer than" not in out, err  # explicit files: --num plays no part


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if '"kind": "train"' in line]


def test_a_restart_without_a_checkpoint_keeps_the_earlier_metrics_and_starts_its_own(run, tmp_path, capsys):
    cfg, save = run
    metrics = save / "metrics.jsonl"
    earlier = metrics.read_bytes()
    assert _steps(metrics) == list(range(1, 7))
    for p in save.glob("checkpoint*.pt"):  # the run's checkpoints gone (or a run stopped before its first one)
        p.unlink()
    (save / "metrics.jsonl.1").write_text("a file of the user's\n")  # a name taken: the next free one is used
    code, out, err = cli(capsys, "train", cfg, "--no-progress")
    assert code == 0, err
    kept = save / "metrics.jsonl.2"
    assert f"train: no checkpoint to resume from, so this run starts at update 0 with a metrics.jsonl of its own; " \
           f"the earlier run's is kept as {kept}." in out.splitlines()
    assert kept.read_bytes() == earlier and (save / "metrics.jsonl.1").read_text() == "a file of the user's\n"
    assert _steps(metrics) == list(range(1, 7))  # this run's curve alone, not appended to the earlier one
    # resuming from a checkpoint goes on with the same file
    code, out, err = cli(capsys, "train", cfg, "train.max_updates=8", "--no-progress")
    assert code == 0, err
    assert _steps(metrics) == list(range(1, 9)) and not (save / "metrics.jsonl.3").exists()
