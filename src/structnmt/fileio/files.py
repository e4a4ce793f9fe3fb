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
import errno
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TextIO

from ..errors import NoNewFilesError, UserError
from .corpus import note_bom

#: names the trainer writes and resumes from (``checkpoint_last.pt``, ``checkpoint_best.pt``, ``checkpoint_<N>.pt``)
TRAINING_OWNED = re.compile(r"^checkpoint_(last|best|\d+)\.pt$")


def _special(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory (a device such as /dev/stdout
    or /dev/null, a FIFO, a socket): written in place, as a Unix tool writes ``> /dev/null``."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def is_device(path: str | Path) -> bool:
    """Whether ``path`` is a device or a pipe (``/dev/stdout``, a FIFO): an output written in place, never
    replaced or given a temporary file beside it."""
    return _special(Path(path))


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` (same kind and errno) naming ``path``, the output the user gave."""
    if isinstance(err, NoNewFilesError):
        return NoNewFilesError(str(path), err.directory)
    return type(err)(err.errno, err.strerror, str(path))


def _creating(err: OSError, path: Path) -> OSError:
    """``err``, raised making a file or directory beside ``path``, naming ``path``; a missing-file error in a
    parent that exists (a directory that takes no new files, such as /proc) says so."""
    parent = path.parent if str(path.parent) else Path(".")
    if err.errno == errno.ENOENT and parent.is_dir():
        return NoNewFilesError(str(path), str(parent))
    return _naming(err, path)


def _named(err: OSError, path: Path, tmp: Path | None = None) -> OSError:
    """``err`` naming ``path``, the output, where it named nothing or only ``tmp``, its temporary file."""
    if err.filename is None or (tmp is not None and Path(err.filename) == tmp):
        return _naming(err, path)
    return err


def _plain_mode(path: Path, bits: int) -> None:
    """Give ``path`` the mode a plainly made file (0o666) or directory (0o777) gets under the umask; mkstemp
    and mkdtemp make them private (0600, 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, bits & ~umask)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed.

    A symlink keeps being a link: its target is the file replaced. A device or FIFO (``/dev/stdout``) is
    not replaced: the writer writes to it directly. A directory is refused (``IsADirectoryError``)."""
    path = Path(path)
    if _special(path):  # (through links: /dev/stdout is a link to the process's descriptor)
        try:
            yield path
        except OSError as err:
            raise _named(err, path) from err
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    # the temporary name keeps the output's extension, for writers that pick a format by it (matplotlib)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                                   dir=path.parent if str(path.parent) else ".")
    except OSError as err:  # a read-only or missing parent: name the output, not a temporary name in it
        raise _creating(err, path) from err
    os.close(fd)
    tmp_path = Path(tmp)
    _plain_mode(tmp_path, 0o666)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as err:
        tmp_path.unlink(missing_ok=True)
        raise _named(err, path, tmp_path) from err  # the output, not its temporary file (or nothing: ENOSPC)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def temp_dir_beside(out: Path, prefix: str, suffix: str = "") -> Path:
    """A new hidden directory beside ``out`` to build it in (``.<name><prefix>XXXX<suffix>``); a read-only or
    full parent is an ``OSError`` naming ``out``, not the temporary name."""
    try:
        made = Path(tempfile.mkdtemp(prefix=f".{out.name}{prefix}", suffix=suffix, dir=out.parent))
    except OSError as err:
        raise _creating(err, out) from err
    _plain_mode(made, 0o777)  # it may be swapped in whole (export)
    return made


@contextlib.contextmanager
def errors_name(out: Path, tmp: Path) -> Iterator[None]:
    """An ``OSError`` raised inside that names nothing (a full disk) or a file under ``tmp``, the directory
    ``out`` is built in, names ``out`` instead: the user knows that path."""
    try:
        yield
    except OSError as err:
        inside = err.filename is not None and str(err.filename).startswith(str(tmp))
        if err.filename is None or inside:
            raise _naming(err, out) from err
        raise


def write_torch(obj, path: str | Path) -> None:
    """``torch.save(obj)`` into ``path`` with the bytes written by Python, so that a full disk is an
    ``OSError`` (torch's own file writer reports it as a ``RuntimeError``: "unexpected pos")."""

    import torch  # noqa: PLC0415 (fileio/ loads without torch: prepare and parse use it)

    buf = io.BytesIO()
    torch.save(obj, buf)
    with open(path, "wb") as f:
        f.write(buf.getbuffer())


def atomic_save(obj, path: str | Path, tmp: str | Path | None = None) -> None:
    """:func:`write_torch` to ``tmp`` (default: a temporary name beside ``path``), then renamed over ``path``;
    on any failure ``tmp`` is removed and an ``OSError`` names ``path``."""
    path = Path(path)
    if tmp is None:
        with atomic_path(path) as t:
            write_torch(obj, t)
        return
    tmp = Path(tmp)
    try:
        write_torch(obj, tmp)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise _named(err, path, tmp) from err
    except BaseException:
        tmp.unlink(missing_ok=True)
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
    """Raise the ``OSError`` that writing ``path`` would raise, before any work, naming ``path``: it must not
    be a directory, and its parent must be a writable directory with room for a file. A device or FIFO
    (``/dev/stdout``) is written in place and not checked."""
    path = Path(path)
    if _special(path):
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=parent)
    except OSError as err:
        raise _creating(err, path) from err
    try:
        os.write(fd, b"\n")
    except OSError as err:
        raise _named(err, path, Path(tmp)) from err
    finally:
        os.close(fd)
        os.unlink(tmp)


def check_dir_writable(path: str | Path) -> None:
    """Raise the ``OSError`` that making a file in the directory ``path`` would raise (a parent that is a file, a
    read-only or full disk, a directory that takes no new files such as /proc), naming ``path``, without making
    ``path`` itself: the nearest existing ancestor is tried."""
    path = Path(path)
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(probe))
    try:
        check_writable(probe / ".structnmt-check")
    except OSError as err:
        raise _naming(err, path) from err


def _recorded_owner(path: Path) -> str | None:
    """The structnmt command that :data:`MANIFEST` beside ``path`` says wrote it, or None."""

    try:
        return json.loads((path.parent / MANIFEST).read_text(encoding="utf-8")).get("commands", {}).get(path.name)
    except (OSError, ValueError, AttributeError):
        return None


def _dataset_file(path: Path) -> bool:
    """Whether ``path`` is one of the files of the prepared dataset in its directory (its manifest lists it)."""

    try:
        return path.name in json.loads((path.parent / "manifest.json").read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return False


def check_output_file(out: str | Path, option: str, command: str, inputs=(), *, own=None,
                      example: str = "") -> None:
    """Refuse, in one sentence and before any work, a single output file ``command`` must not write: one of
    its ``inputs`` ((what, path) pairs; the same file through a link too), a name a training writes and
    resumes from, a file another structnmt command recorded as its own there, a file of a prepared dataset,
    or an existing file this command did not write. What this command wrote is known from the manifest of
    the directory (:func:`record_output_file`, called after the write) or, for a file from before manifests,
    from the file's own structnmt content (``own(path) -> bool``: an averaged checkpoint's record, a parse
    cache's key lines, a table's heading), never from magic bytes that any zip or gzip file has. Then
    :func:`check_writable`. ``example``: a name the refusals of a taken name suggest instead (``average.pt``)."""

    out = Path(out)
    another = f"another name, e.g. {example}" if example else "another name"
    for what, path in inputs:
        if path not in (None, "-") and (out.resolve() == Path(path).resolve() or same_file(out, path)):
            raise UserError(f"{option} {out} is {what} (the same file, perhaps through a link); write the output "
                            "to another file.")
    if TRAINING_OWNED.match(out.name):
        raise UserError(f"{option} {out}: {out.name} is a name a training writes and resumes from; give the "
                        f"output {another}.")
    if out.is_file():
        owner = _recorded_owner(out)
        if owner is not None and owner != command:
            raise UserError(f"{option} {out}: was written by `structnmt {owner}`, so `structnmt {command}` does not "
                            "replace it; give the output another name.")
        if _dataset_file(out):
            raise UserError(f"{option} {out}: is a file of the prepared dataset in {out.parent}; write the output "
                            "somewhere else.")
        if owner is None and not (own is not None and own(out)):
            raise UserError(f"{option} {out}: exists and is not a file `structnmt {command}` wrote, so it is not "
                            "replaced; give another name or move the file away.")
    check_writable(out)


def record_output_file(out: str | Path, command: str) -> None:
    """Record ``out``, written whole by ``command``, in its directory's :data:`MANIFEST` (so that the same command
    may replace it later, and no other command does)."""
    out = Path(out)
    if _special(out):  # a device or a pipe (/dev/stdout, a FIFO): nothing to own, and /dev takes no manifest
        return
    try:
        OutputDir(out.parent, command, check=False).record(out.name)
    except OSError as err:  # the output is written: an unrecordable directory costs only the later replacement
        print(f"note: {out.parent}: could not record {out.name} as written by `structnmt {command}` "
              f"({err.strerror or err}); a later run will not replace it without your leave.", file=sys.stderr)


def _begins(path: Path, pattern: str) -> bool:
    """Whether ``path`` is a file whose first 4 KB match ``pattern`` (bytes, latin-1 read) at its start."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("latin-1")
    except OSError:
        return False
    return re.match(pattern, head, re.S) is not None


#: markers of earlier outputs (:class:`OutputDir`): a torch checkpoint (a zip archive), a metrics log's record
TORCH_FILE = r"PK\x03\x04"
METRICS_RECORD = r'\{"kind": "(train|valid)", "step": \d+'

#: the record, in a report directory, of the files structnmt commands wrote there
MANIFEST = ".structnmt-written.json"


def same_file_pairs(paths: list[Path], *, by_content: bool = True) -> tuple[Path, Path, str] | None:
    """The first two of ``paths`` that are one file (device and inode: also through a link or another spelling),
    or, with ``by_content``, hold the same bytes (SHA-256): ``(a, b, "the same file" | "identical content")``;
    None when all differ. A path that does not exist is skipped (its reader names it)."""

    seen_inode: dict[tuple[int, int], Path] = {}
    seen_hash: dict[str, Path] = {}
    for p in paths:
        try:
            st = Path(p).stat()
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_inode:
            return seen_inode[key], Path(p), "the same file"
        seen_inode[key] = Path(p)
        if by_content:
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            if digest in seen_hash:
                return seen_hash[digest], Path(p), "identical content"
            seen_hash[digest] = Path(p)
    return None


def is_inside_name(name) -> bool:
    """Whether ``name`` (from a manifest, a config, data) names a path inside a directory: a relative path without
    ``..``, a backslash or a NUL, not empty."""

    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return False
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and p.parts != ()


def check_component(name: str, what: str) -> str:
    """``name`` as one file or directory name inside an output directory (a row of a grid or of a tag table, a
    run's name), or one sentence: no separator, no ``..``, no absolute path, not empty."""

    if not is_inside_name(name) or "/" in name or name in (".", ".."):
        raise UserError(f"{what} {name!r} cannot be a name inside the output directory (it holds a '/', a '\\', "
                        "'..', or is empty or absolute); rename it.")
    return name


def check_distinct(dirs: dict[str, str], what: str) -> None:
    """``dirs``: label -> the directory name it is kept under; two labels on one name are one sentence (the second
    would report the first's result)."""

    seen: dict[str, str] = {}
    for label, d in dirs.items():
        if d in seen and seen[d] != label:
            raise UserError(f"{what} {seen[d]!r} and {label!r} would share the directory {d!r} (their names differ "
                            "only in characters a directory name leaves out); rename one of them.")
        seen[d] = label


class OutputDir:
    """A directory a command writes its report files into, under one rule: a file there that this command
    did not write is never replaced (refused in one sentence, before the work where the names are known):
    not a user's file, nor another command's (an experiment's ``results.md`` is not replaced by
    ``sweep-plot --out results.png``'s table); a file this command wrote is replaced atomically. What was
    written, and by which command, is recorded in :data:`MANIFEST` (a name recorded without its command, by
    an older version, may be replaced by any structnmt command).

    ``expect``: the names the command will write, checked at once (the others when they are written). The
    directory is made when the first file is written, so a command refused before that leaves nothing."""

    def __init__(self, path: str | Path, command: str, expect: tuple[str, ...] = (), *,
                 marker: tuple[tuple[str, str], ...] = (), check: bool = True):
        """``marker``: ``(name, pattern)`` pairs, files only this command writes there with a beginning it writes
        (a regular expression over the file's first bytes: ``experiment.log`` starting with a time stamp and
        ``experiment``); a directory that holds such a file but no manifest is this command's output from
        before manifests, and its ``expect`` files are its own. A file of the user's under the marker's name
        but not with its content does not count. ``check``: say now (:func:`check_dir_writable`) if files
        cannot be made there; off where the directory is only read (what another command wrote)."""


        self.path, self.command = Path(path), command
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"{self.path}: is a file; give a directory for the {command} output.")
        if check:
            check_dir_writable(self.path)
        #: name -> the command that wrote it (names recorded without one are in ``written`` only)
        self.owners: dict[str, str] = {}
        try:
            manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
            self.written = set(manifest.get("files", []))
            self.owners = {k: v for k, v in manifest.get("commands", {}).items() if isinstance(v, str)}
        except (OSError, ValueError, AttributeError, TypeError):
            self.written = set()
        # this command's output from before manifests (a marker file it alone writes), in a directory with no
        # manifest or one that records none of its names (another command's single output, say): its own
        if not (self.written & set(expect)) and any(_begins(self.path / name, pattern) for name, pattern in marker):
            self.written |= set(expect)
            self.owners.update({n: command for n in expect if n not in self.owners})
        outside = sorted(repr(n) for n in self.written | set(self.owners) if not is_inside_name(n))
        if outside:
            raise UserError(f"{self.path / MANIFEST}: lists {outside[0]}, a path outside {self.path}; structnmt "
                            "records only names inside the directory, so the manifest was altered: remove that entry "
                            "(or the manifest) and run again.")
        for name in expect:
            self._check(name)

    def _check(self, name: str) -> Path:

        p = self.path / name
        if p.exists() and name not in self.written:
            raise UserError(f"{p}: exists and was not written by a structnmt command, so `structnmt {self.command}` "
                            "does not replace it; give another output directory or move the file away.")
        owner = self.owners.get(name, self.command)
        if p.exists() and owner != self.command:
            raise UserError(f"{p}: was written by `structnmt {owner}`, so `structnmt {self.command}` does not replace "
                            "it; give another output name or directory.")
        return p

    def claim(self, name: str) -> Path:
        """The path to write ``name`` to (checked; the directory made). :meth:`record` it once written."""
        p = self._check(name)
        self.path.mkdir(parents=True, exist_ok=True)  # made at the first file, not when only checked
        return p

    def record(self, *names: str) -> None:
        """``names`` were written (completely) by this command: recorded in the manifest. Recorded only after
        the write, so a write that failed (a full disk) leaves no claim on a name a user may use later."""
        self.written.update(names)
        self.owners.update(dict.fromkeys(names, self.command))
        self._save_manifest()

    def _save_manifest(self) -> None:

        record = {"files": sorted(self.written), "commands": {n: self.owners[n] for n in sorted(self.owners)}}
        atomic_write_text(self.path / MANIFEST, json.dumps(record, indent=1) + "\n")

    def remove_earlier(self, patterns: tuple[str, ...], keep: list[Path]) -> list[str]:
        """Remove the files matching ``patterns`` (glob, ``sent*_tree.png``) that this command wrote here
        earlier (the manifest says so) and this run did not (``keep``), so that a report directory never mixes
        two runs' outputs; a user's file is never touched. Returns the removed names."""

        kept = {Path(k).name for k in keep}
        # whole names only: fnmatch's * would cross a '/', so a name with one matches no pattern without one
        gone = sorted(n for n in self.written if n not in kept and self.owners.get(n, self.command) == self.command
                      and any(fnmatch.fnmatch(n, p) and n.count("/") == p.count("/") for p in patterns)
                      and is_inside_name(n))
        for name in gone:
            (self.path / name).unlink(missing_ok=True)
        if gone:
            self.written.difference_update(gone)
            for name in gone:
                self.owners.pop(name, None)
            self._save_manifest()
        return gone

    def write_text(self, name: str, text: str) -> Path:
        p = self.claim(name)
        atomic_write_text(p, text)
        self.record(name)
        return p

    @contextlib.contextmanager
    def writing(self, names: tuple[str, ...]) -> Iterator[dict[str, TextIO]]:
        """Open all of ``names`` at once for writing text (UTF-8), each as a temporary file beside its name (see
        :func:`atomic_path`), for output written as it is made rather than held in memory: ``{name: file}``.
        When the block ends normally every file is renamed over its name and recorded; on any failure (an
        error, an interrupt) every temporary file is removed, and the directory too if this call made it and
        it is empty, so that no partial file is ever left under one of the names."""
        made = not self.path.exists()
        paths = [self.claim(name) for name in names]
        try:
            with contextlib.ExitStack() as stack:
                files = {}
                for name, path in zip(names, paths):
                    tmp = stack.enter_context(atomic_path(path))
                    files[name] = stack.enter_context(open(tmp, "w", encoding="utf-8"))
                yield files
        except BaseException:
            if made:
                with contextlib.suppress(OSError):
                    self.path.rmdir()  # only when empty: a file of another writer's stays
            raise
        self.record(*names)

    def write_with(self, name: str, writer) -> Path:
        """``writer(path)`` writes the file (a picture, say) to a temporary path, renamed over ``name``."""
        p = self.claim(name)
        with atomic_path(p) as tmp:
            writer(tmp)
        self.record(name)
        return p


def committed_or_plain(path: Path) -> Path:
    """``path``, or ``<path>.gz`` where only the gzipped copy is there (how docs/outputs keeps translations)."""
    gz = path.with_name(path.name + ".gz")
    return gz if not path.is_file() and gz.is_file() else path


def read_lines_exact(path: Path) -> list[str]:
    """Lines split on "\\n" only (a hypothesis may hold other Unicode separators); a ``.gz`` file decompressed."""
    data = path.read_bytes()
    if path.suffix == ".gz":

        data = gzip.decompress(data)
    text = data.decode("utf-8")
    if text.startswith("\ufeff"):  # as every text reader: the byte-order mark removed, with a note

        text = text[1:]
        note_bom(path)
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines
