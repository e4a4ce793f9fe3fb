"""What the commands of the README write in a clone is git-ignored, so `git status` of a clone stays clean:
every `--output`, `--destdir`, `--out`, `--workdir` and `save_dir=` path the README's commands name, each
command's record of what it wrote (`.structnmt-written.json`), the defaults (`runs/`, `data/synth`, a grid's
`experiments/<name>`) and an interrupted translation's `FILE.partial`; the committed reports under docs/ keep
their records."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: an output option of a README command and its value
OUTPUT = re.compile(r"(?:--output|--out|--destdir|--workdir|save_dir=|out_dir=)[ =]?([^\s`'\"]+)")


def _in_a_clone() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True)
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == ROOT


pytestmark = pytest.mark.skipif(not _in_a_clone(), reason="not a git clone of the repository")


def ignored(path: str) -> bool:
    """Whether git ignores ``path`` (relative to the clone; it need not exist, and tracked or not)."""
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert done.returncode in (0, 1), f"git check-ignore failed on {path}"
    return done.returncode == 0


def readme_outputs() -> list[str]:
    """The relative output paths the README's commands write (placeholders in capitals and paths outside the
    clone left out), with a file inside each directory."""
    found = []
    for value in OUTPUT.findall((ROOT / "README.md").read_text(encoding="utf-8")):
        if value.startswith(("/", "..", "$")) or re.search(r"[A-Z]{2,}", value):
            continue
        found.append(value.rstrip("/") + ("/manifest.json" if "." not in Path(value).name else ""))
    return found


def test_what_the_readme_commands_write_is_ignored():
    paths = readme_outputs()
    assert any(p.endswith(".hyp") for p in paths) and any(p.startswith("data-bin/") for p in paths), paths
    assert [p for p in paths if not ignored(p)] == []


@pytest.mark.parametrize("path", [
    ".structnmt-written.json", "runs/demo/.structnmt-written.json", "test.hyp", "test.hyp.gz",
    "test.hyp.partial", "test.hyp.partial.json", "parses.jsonl.gz", "data/synth/train.src",
    "data-bin/multi30k_en_de/train.src.bin", "runs/demo/model/checkpoint_last.pt", "experiments/tiny-grid/results.md",
    "cmp/compare.md", "docs/outputs/cross_paper_multi30k/runs/transformer/seed1/test.hyp",
])
def test_files_the_commands_write_in_a_clone_are_ignored(path):
    assert ignored(path)


@pytest.mark.parametrize("path", [
    "docs/reports/compare_2k/.structnmt-written.json", "docs/reliability.md", "src/structnmt/cli/commands.py",
    "configs/grids/multi30k_transformer.yaml", "tests/test_gitignore.py", "README.md",
])
def test_the_repository_s_own_files_are_not_ignored(path):
    assert not ignored(path)
