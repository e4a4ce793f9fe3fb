"""scripts/gpu_pack.py: a row of a grid split into its own grid resolves to the same run configuration."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from structnmt.config import to_dict
from structnmt.experiment.grid import load_grid, resolve_run_config

ROOT = Path(__file__).resolve().parents[1]


def _pack():
    spec = importlib.util.spec_from_file_location("gpu_pack", ROOT / "scripts" / "gpu_pack.py")
    if "gpu_pack" not in sys.modules:  # registered first: its dataclass looks its module up while it is built
        sys.modules["gpu_pack"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["gpu_pack"])
    return sys.modules["gpu_pack"]


def _resolved(grid_path: Path, row: str, seed: int) -> dict:
    grid, over = load_grid(grid_path, ["budget.max_updates=8000"])
    run = next(r for r in grid.runs if r.name == row)
    cfg = resolve_run_config(grid, run, seed, data_path=Path("data-bin/x"), run_dir=Path("out/r"), overrides=over)
    return to_dict(cfg)


@pytest.mark.parametrize("row", ["+ DEA + RHE", "PhraseTransformer (k=2)", "Transformer"])
def test_one_row_grid_resolves_like_the_full_grid(tmp_path, row):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    grid = tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml"
    one = _pack().one_row_grid(grid, row)
    assert one.parent == grid.parent  # beside the grid: its relative config paths still resolve
    g, _ = load_grid(one)
    assert [r.name for r in g.runs] == [row] and g.baseline == row
    assert _resolved(one, row, 2) == _resolved(grid, row, 2)


def test_unknown_row_and_malformed_job_are_one_sentence(tmp_path):
    pack = _pack()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    with pytest.raises(SystemExit, match="has no row named 'Nope'"):
        pack.one_row_grid(tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml", "Nope")
    with pytest.raises(SystemExit, match="is not GRID:OUT:SEEDS:ROW"):
        pack.parse_job("configs/grids/x.yaml:out")
    grid = tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml"
    job = pack.parse_job(f"{grid}:o:1,3:Transformer:+ Rel_Pos")
    assert job.seeds == (1, 3) and job.rows == ("Transformer", "+ Rel_Pos")
    for bad, message in ((f"{grid}:o:1,a:Transformer", "are not positive integers"),
                         (f"{grid}:o::Transformer", "are not positive integers"),
                         (f"{grid}:o:0:Transformer", "are not positive integers"),
                         (f"{tmp_path}/missing.yaml:o:1:Transformer", "no such grid file"),
                         (f"{tmp_path}:o:1:Transformer", "no such grid file"),
                         (f"{grid}:o:1:", "is not GRID:OUT:SEEDS:ROW")):
        with pytest.raises(SystemExit, match=message):
            pack.parse_job(bad)
    (tmp_path / "broken.yaml").write_text("runs: [unclosed\n")
    (tmp_path / "empty.yaml").write_text("runs: []\n")
    with pytest.raises(SystemExit, match="not a readable grid"):
        pack.parse_job(f"{tmp_path}/broken.yaml:o:1:Transformer")
    with pytest.raises(SystemExit, match="has no runs"):
        pack.parse_job(f"{tmp_path}/empty.yaml:o:1:Transformer")


def test_the_archive_s_place_a_user_s_file_and_the_deadline_are_checked_before_any_run(tmp_path):
    pack = _pack()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    grid = tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml"
    job = f"{grid}:{tmp_path / 'o'}:1:Transformer"
    base = ["--job", job, "--logs", str(tmp_path / "logs")]
    for tar, message in ((tmp_path / "no_dir" / "r.tar.gz", "does not exist or is not writable"),
                         (grid, "exists; give a new file")):
        with pytest.raises(SystemExit, match=message):
            pack.main([*base, "--deadline", "10", "--tar", str(tar)])
    for deadline in ("nan", "inf", "-1"):
        with pytest.raises(SystemExit, match="give a positive number of seconds"):
            pack.main([*base, "--deadline", deadline, "--tar", str(tmp_path / "r.tar.gz")])
    assert not (tmp_path / "logs").exists()
    # the one-row grid's name taken by a file of the user's: refused, the file kept
    mine = grid.with_name("_pack_cross_paper_multi30k_transformer.yaml")
    mine.write_text("my own grid\n")
    with pytest.raises(SystemExit, match="exists and was not written by gpu_pack"):
        pack.one_row_grid(grid, "Transformer")
    assert mine.read_text() == "my own grid\n"
    mine.unlink()
    first = pack.one_row_grid(grid, "Transformer")
    assert pack.one_row_grid(grid, "Transformer") == first  # its own file: replaced


def test_archive_names_stay_inside(tmp_path, monkeypatch):
    pack = _pack()
    (tmp_path / "work").mkdir()
    (tmp_path / "outside" / "runs").mkdir(parents=True)
    f = tmp_path / "outside" / "runs" / "result.json"
    f.write_text("{}")
    monkeypatch.chdir(tmp_path / "work")
    assert pack.archive_name(f, "../outside") == "outside/runs/result.json"
    (tmp_path / "work" / "o").mkdir()
    g = tmp_path / "work" / "o" / "x.json"
    g.write_text("{}")
    assert pack.archive_name(g, "o") == "o/x.json"


def test_commands_give_every_row_and_seed_its_own_experiment(tmp_path):
    pack = _pack()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    grid = str(tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml")
    cmds = pack.commands([pack.Job(grid, "o", (1, 2), ("Transformer", "+ Localness"))], ["train.device=cuda"])
    assert len(cmds) == 4 and len({run.label for run in cmds}) == 4
    for run in cmds:
        argv = run.argv
        assert argv[argv.index("--out") + 1] == "o" and argv[-1] == "train.device=cuda"
        assert any(a in ("seeds=[1]", "seeds=[2]") for a in argv)


def _fake(tmp_path, label: str, code: str):
    """A Run whose process is ``code`` (Python) and whose run directory is tmp_path/label."""
    return _pack().Run(label, [sys.executable, "-c", code], tmp_path / label)


def test_at_once_one_runs_the_queue_one_after_another(tmp_path):
    trace = tmp_path / "trace.txt"
    code = ("import sys; f = open({t!r}, 'a'); f.write('start {l}\\n'); f.flush(); "
            "f.write('end {l}\\n'); f.close(); sys.exit({rc})")
    runs = [_fake(tmp_path, lab, code.format(t=str(trace), l=lab, rc=rc)) for lab, rc in [("a", 0), ("b", 3), ("c", 0)]]
    ended = _pack().run_all(runs, deadline_s=60, log_dir=tmp_path / "logs", at_once=1, poll_s=0.05,
                            clock=lambda: 0.0)  # the deadline never comes: the queue alone ends the loop
    assert ended == {"a": "exit 0", "b": "exit 3", "c": "exit 0"}
    assert trace.read_text().split("\n")[:-1] == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["a.log", "b.log", "c.log"]


def test_a_run_stopped_at_the_deadline_says_its_last_update_and_the_queue_says_not_started(tmp_path):
    pack = _pack()
    forever = "import time\nwhile True: time.sleep(0.05)"
    runs = [_fake(tmp_path, "slow", forever), _fake(tmp_path, "queued", "pass")]
    runs[0].run_dir.mkdir()
    (runs[0].run_dir / "metrics.jsonl").write_text(
        '{"kind": "train", "step": 6050, "loss": 3.3}\n{"kind": "valid", "step": 6150, "loss": 4.1}\n'
        '{"kind": "train", "step": 6100, "loss": 3.2}\n{"kind": "train", "st', encoding="utf-8")  # cut short
    ticks = iter([0.0, 0.0, 0.0])  # t0, the first start, one poll; then the deadline has passed
    ended = pack.run_all(runs, deadline_s=60, log_dir=tmp_path / "logs", at_once=1, poll_s=0.05,
                         clock=lambda: next(ticks, 61.0))
    assert ended == {"slow": "stopped at the deadline (trained to update 6,100)", "queued": "not started"}


def test_min_left_holds_back_the_queue_but_never_the_first_runs(tmp_path):
    runs = [_fake(tmp_path, "a", "raise SystemExit(1)"), _fake(tmp_path, "b", "pass")]
    ended = _pack().run_all(runs, deadline_s=10, log_dir=tmp_path / "logs", at_once=1, min_left_s=11, poll_s=0.05,
                            clock=lambda: 0.0)
    assert ended == {"a": "exit 1", "b": "not started"}
    # all at once (no --at-once), a deadline under --min-left still starts every run: a short resume call
    ended = _pack().run_all(runs, deadline_s=10, log_dir=tmp_path / "logs", min_left_s=120, poll_s=0.05,
                            clock=lambda: 0.0)
    assert ended == {"a": "exit 1", "b": "exit 0"}


def test_commands_point_at_the_runners_run_directory(tmp_path):
    pack = _pack()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    grid = str(tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml")
    (run,) = pack.commands([pack.Job(grid, "o", (3,), ("+ MG-SA (syntactic + ON-LSTM)",))], [])
    assert run.run_dir == Path("o") / "runs" / "mg-sa-syntactic-on-lstm" / "seed3"


@pytest.mark.parametrize("option, message", [(["--at-once", "0"], "--at-once 0 starts nothing"),
                                             (["--min-left", "-5"], "--min-left -5 is negative")])
def test_bad_queue_options_are_one_sentence_before_anything_runs(tmp_path, option, message):
    tar = tmp_path / "runs.tar.gz"
    with pytest.raises(SystemExit, match=message):
        _pack().main(["--job", "g.yaml:o:1:Transformer", "--deadline", "10", "--tar", str(tar),
                      "--logs", str(tmp_path / "logs"), *option])
    assert not tar.exists() and not (tmp_path / "logs").exists()
