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
    # the temporary name keeps the output's extension, for writers that pick a format by it (matplotlib)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                               dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # the mode a plainly written file gets (mkstemp makes it 0600)
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


#: the record, in a report directory, of the files structnmt commands wrote there
MANIFEST = ".structnmt-written.json"


class OutputDir:
    """A directory a command writes its report files into, under one rule: a file there that no structnmt
    command wrote is never replaced (refused in one sentence, before the work where the names are known),
    a file a command wrote is replaced atomically. What was written is recorded in :data:`MANIFEST`.

    ``expect``: the names the command will write, checked at once (the others when they are written). The
    directory is made when the first file is written, so a command refused before that leaves nothing."""

    def __init__(self, path: str | Path, command: str, expect: tuple[str, ...] = ()):
        import json

        from .errors import UserError

        self.path, self.command = Path(path), command
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"--out {self.path}: is a file; give a directory for the report.")
        try:
            self.written = set(json.loads((self.path / MANIFEST).read_text(encoding="utf-8")).get("files", []))
        except (OSError, ValueError, AttributeError):
            self.written = set()
        for name in expect:
            self._check(name)

    def _check(self, name: str) -> Path:
        from .errors import UserError

        p = self.path / name
        if p.exists() and name not in self.written:
            raise UserError(f"{p}: exists and was not written by a structnmt command, so `structnmt {self.command}` "
                            "does not replace it; give another --out or move the file away.")
        return p

    def claim(self, name: str) -> Path:
        """The path to write ``name`` to (checked), recorded as written by this command."""
        import json

        p = self._check(name)
        self.path.mkdir(parents=True, exist_ok=True)  # made at the first file, not when only checked
        self.written.add(name)
        atomic_write_text(self.path / MANIFEST, json.dumps({"files": sorted(self.written)}, indent=1) + "\n")
        return p

    def write_text(self, name: str, text: str) -> Path:
        p = self.claim(name)
        atomic_write_text(p, text)
        return p

    def write_with(self, name: str, writer) -> Path:
        """``writer(path)`` writes the file (a picture, say) to a temporary path, renamed over ``name``."""
        p = self.claim(name)
        with atomic_path(p) as tmp:
            writer(tmp)
        return p
