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
    job = pack.parse_job("g.yaml:o:1,3:Transformer:+ Rel_Pos")
    assert job.seeds == (1, 3) and job.rows == ("Transformer", "+ Rel_Pos")


def test_commands_give_every_row_and_seed_its_own_experiment(tmp_path):
    pack = _pack()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    grid = str(tmp_path / "configs" / "grids" / "cross_paper_multi30k.yaml")
    cmds = pack.commands([pack.Job(grid, "o", (1, 2), ("Transformer", "+ Localness"))], ["train.device=cuda"])
    assert len(cmds) == 4 and len({label for label, _ in cmds}) == 4
    for _, argv in cmds:
        assert argv[argv.index("--out") + 1] == "o" and argv[-1] == "train.device=cuda"
        assert any(a in ("seeds=[1]", "seeds=[2]") for a in argv)
