"""Where an experiment's records say its dataset is, and how to make it again on another machine.

A run's records (``resolved.yaml``, ``dataset.json``, ``result.json``) travel: they are copied from a GPU
machine, committed under docs/outputs, read in a clone. So they hold no absolute path of the machine that
wrote them: a dataset or run directory is kept relative to the directory the grid was run from
(:func:`recorded_path`), the dataset's identity is its fingerprint, and ``dataset.json`` names the grid
file whose header comments hold the ``structnmt prepare`` command that makes it (:func:`prepare_hint`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

#: where grid files are looked for, relative to the current directory and to a source checkout's root
GRIDS = Path("configs") / "grids"


def recorded_path(path: str | Path) -> str:
    """``path`` as a record keeps it: relative to the current directory (``data-bin/multi30k_en_de``, or
    ``../shared/data-bin/x``), POSIX separators; a path given relative stays as it is."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    return Path(os.path.relpath(p, Path.cwd())).as_posix()


def _header_commands(grid_file: Path) -> list[str]:
    """The ``structnmt prepare`` commands in a grid file's leading comments, each joined into one line."""
    try:
        lines = grid_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    commands, current = [], None
    for text in header:
        if current is None and text.startswith("structnmt prepare"):
            current = []
        if current is not None:
            current.append(text.rstrip("\\").strip())
            if not text.endswith("\\"):
                commands.append(" ".join(current))
                current = None
    return commands


def prepare_command(grid_file: str | Path, name: str) -> str | None:
    """The ``structnmt prepare`` command of a grid file's header that writes the dataset called ``name`` (the
    last part of its ``--destdir``); None when its header has none."""
    for command in _header_commands(Path(grid_file)):
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        destdir = next((b for a, b in zip(words, words[1:]) if a == "--destdir"), None)
        if destdir is not None and Path(destdir).name == name:
            return command
    return None


def _checkout() -> Path:
    """The root of structnmt's source checkout (``src/structnmt/experiment/`` is three levels below it)."""
    return Path(__file__).resolve().parents[3]


def _grid_files() -> list[Path]:
    """The grid files here (``configs/grids`` of the current directory, then of structnmt's source checkout)."""
    roots = [Path.cwd(), _checkout()]
    seen, files = set(), []
    for root in roots:
        for f in sorted((root / GRIDS).glob("*.yaml")):
            if f.resolve() not in seen:
                seen.add(f.resolve())
                files.append(f)
    return files


def _shown(path: Path) -> str:
    """A grid file as a sentence names it: relative to the current directory where it is below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def prepare_hint(name: str, grid: str | None = None) -> str:
    """How to make the dataset called ``name``: the ``structnmt prepare`` command of the grid that trained the
    runs (``grid``, as ``dataset.json`` records it) or, failing that, of the first grid here whose header
    prepares a dataset of that name."""
    recorded = [Path(grid), _checkout() / grid] if grid else []
    candidates = recorded + _grid_files()
    for f in candidates:
        command = prepare_command(f, name) if f.is_file() else None
        if command:
            return f"`{command}` (the header of {_shown(f)})"
    if grid:
        return f"the `structnmt prepare` command of the grid that trained them ({grid})"
    return "the `structnmt prepare` command of the grid that trained them (the header of its file in configs/grids/)"


def fingerprint_text(fingerprint: str | None) -> str:
    """A dataset fingerprint as a sentence shows it (its first 16 hex digits)."""
    return f"fingerprint {fingerprint[:16]}..." if fingerprint else "no fingerprint recorded"

