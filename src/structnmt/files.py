"""Writing output files safely: atomically, never onto an input, and checked before the work.

* :func:`atomic_path`: a temporary name beside the output, renamed over it only when the writing
  succeeded; on any failure (a full disk, an interrupt) the temporary file is removed and the old
  output, if any, stays as it was. No partial file is ever left under the output's name.
* :func:`same_file`: whether two paths are one file (also through a hard link or a symlink:
  device and inode compared), so that an output that is an input is refused.
* :func:`check_writable`: create (and remove) a file beside an output before an hour of work, so
  that a read-only directory, a full disk or a parent that is a file fails at once, as one sentence
  (``structnmt.cli.main`` turns the ``OSError`` into it).
* :data:`TRAINING_OWNED`: the checkpoint names a training owns in its save_dir.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: names the trainer writes and resumes from (``checkpoint_last.pt``, ``checkpoint_best.pt``, ``checkpoint_<N>.pt``)
TRAINING_OWNED = re.compile(r"^checkpoint_(last|best|\d+)\.pt$")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as err:
        tmp_path.unlink(missing_ok=True)
        if err.filename is not None and Path(err.filename) == tmp_path:  # name the output, not its temporary file
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one existing file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_writable(path: str | Path) -> None:
    """Raise the ``OSError`` that writing ``path`` would raise, before any work: its parent must be a
    writable directory with room for a file."""
    parent = Path(path).parent if str(Path(path).parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".check", dir=parent)
    try:
        os.write(fd, b"\n")
    finally:
        os.close(fd)
        os.unlink(tmp)
