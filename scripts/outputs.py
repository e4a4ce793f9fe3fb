"""The committed outputs of reported models, one archive per folder: ``docs/outputs/<folder>.tar.xz``.

Translations of the same sentences by many runs compress far better together than one file at a time
(88 MB of text: 34 MiB as single gzipped files, 6 MiB as one xz stream per folder), so the repository keeps
each folder of docs/outputs as one archive and the folders themselves are git-ignored:

    python scripts/outputs.py unpack                  # every archive -> docs/outputs/<folder>/
    python scripts/outputs.py unpack cross_paper_multi30k
    python scripts/outputs.py pack cross_paper_multi30k   # after adding a run's files to the folder
    python scripts/outputs.py list synth_generalization   # what an archive holds

Unpacked, a folder holds plain text files (``test.hyp``, ``<stem>.induced.conllu``, ...): ``pack`` stores a
``.gz`` file decompressed, under its name without ``.gz``, so that xz sees the text. ``pack`` is
deterministic (names sorted, times, owners and modes fixed): packing the same files twice gives the same
bytes, so an unchanged folder leaves git's tree unchanged; it refuses a symbolic link in the folder (it would
store the bytes of the link's target). ``unpack`` never overwrites a file that differs from the archive's copy
(it says which and stops) and writes every file atomically. Members are streamed, never held in memory whole:
``pack`` writes the tar and its xz stream through temporary files, ``list`` reads only the headers, ``unpack``
copies each member in blocks into a temporary file beside its target. A damaged or truncated archive is one
sentence.
"""
from __future__ import annotations

import argparse
import gzip
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

OUTPUTS = Path(__file__).resolve().parents[1] / "docs" / "outputs"

#: bytes copied at a time: what a member costs in memory
BLOCK = 1 << 20

#: what reading a damaged or truncated .tar.xz raises
_ARCHIVE_ERRORS = (EOFError, tarfile.TarError, lzma.LZMAError)


class OutputsError(Exception):
    """A problem the user fixes: one sentence naming the file."""


def _files(folder: Path) -> list[tuple[str, Path]]:
    """Every file under ``folder`` as (name in the archive, path), sorted by name: a ``.gz`` file under its name
    without ``.gz`` (stored decompressed). A symbolic link is refused: pack stores files, not links."""
    found: dict[str, Path] = {}
    for root, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            path = Path(root) / name
            if path.is_symlink():
                raise OutputsError(f"{path}: a symbolic link (to {os.readlink(path)}); pack stores files, and would "
                                   "store the bytes of its target: put the file itself there, or remove the link, "
                                   "and pack again.")
        for name in names:
            path = Path(root) / name
            if not path.is_file():  # a pipe or a device: not an output to keep
                continue
            rel = path.relative_to(folder).as_posix().removesuffix(".gz")
            if rel in found:
                raise OutputsError(f"{folder / rel} and {folder / rel}.gz are both there; keep one of them.")
            found[rel] = path
    return sorted(found.items())


def _plain(path: Path, scratch: BinaryIO) -> tuple[BinaryIO, int]:
    """``path`` opened for reading, decompressed into ``scratch`` first if it is a ``.gz`` file; (file, size)."""
    if not path.name.endswith(".gz"):
        return open(path, "rb"), path.stat().st_size  # noqa: SIM115 (closed by the caller)
    scratch.seek(0)
    scratch.truncate()
    with gzip.open(path, "rb") as f:
        shutil.copyfileobj(f, scratch, BLOCK)
    size = scratch.tell()
    scratch.seek(0)
    return scratch, size


def write_tar(files: list[tuple[str, Path]], out: BinaryIO) -> None:
    """A deterministic tar of ``files`` into ``out``: sorted names, mtime 0, owner root, mode 0644."""
    with tempfile.TemporaryFile() as scratch, tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, path in files:
            f, size = _plain(path, scratch)
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = size, 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            try:
                tar.addfile(info, f)
            finally:
                if f is not scratch:
                    f.close()


def _compress(raw: BinaryIO, out: BinaryIO) -> None:
    """The xz stream of ``raw`` (read from its start) into ``out``, a block at a time (the bytes of one call)."""
    raw.seek(0)
    compressor = lzma.LZMACompressor(preset=9 | lzma.PRESET_EXTREME)
    while block := raw.read(BLOCK):
        out.write(compressor.compress(block))
    out.write(compressor.flush())


def _atomic(path: Path):
    """A temporary file beside ``path`` (opened for writing) and its name: renamed over ``path`` by the caller."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    return os.fdopen(fd, "wb"), tmp


def pack(folder: Path) -> Path:
    """``folder`` -> ``folder.tar.xz`` beside it (written atomically); returns the archive's path."""
    if not folder.is_dir():
        raise OutputsError(f"{folder}: no such folder to pack; unpack its archive first or give a folder of "
                           f"{OUTPUTS}.")
    files = _files(folder)
    if not files:
        raise OutputsError(f"{folder}: no files to pack.")
    target = folder.parent / f"{folder.name}.tar.xz"
    out, tmp = _atomic(target)
    try:
        with out, tempfile.TemporaryFile() as raw:
            write_tar(files, raw)
            _compress(raw, out)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _damaged(path: Path, err: BaseException) -> OutputsError:
    """The sentence for an archive that cannot be read to its end (``err``: what the reader raised)."""
    why = str(err) or type(err).__name__
    return OutputsError(f"{path}: not a readable .tar.xz, damaged or cut short ({why}); check it out again with git.")


class _Member:
    """A member's bytes as read from the archive: a damaged or truncated stream is one sentence naming it."""

    def __init__(self, f: BinaryIO, archive: Path):
        self.f, self.archive = f, archive

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of the member (all that is left with -1)."""
        try:
            return self.f.read(n)
        except _ARCHIVE_ERRORS as err:
            raise _damaged(self.archive, err) from None


def members(path: Path) -> Iterator[tuple[tarfile.TarInfo, _Member]]:
    """Each file of an archive ``pack`` wrote, as (its header, its bytes to read), streamed in the archive's order:
    the bytes are there until the next member is asked for. A name outside the folder (absolute, ``..``) is
    refused before its bytes are read."""
    try:
        with lzma.open(path, "rb") as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
            it = iter(tar)
            while (member := _next(it, path)) is not None:
                _check_name(member.name, path)
                if member.isfile():
                    yield member, _Member(tar.extractfile(member), path)
            while xz.read(BLOCK):  # to the xz stream's end: its checksums, and a cut after the last member
                pass
    except _ARCHIVE_ERRORS as err:
        raise _damaged(path, err) from None


def _next(it: Iterator[tarfile.TarInfo], path: Path) -> tarfile.TarInfo | None:
    """The next member's header (None at the end), or the sentence for a damaged archive."""
    try:
        return next(it, None)
    except _ARCHIVE_ERRORS as err:
        raise _damaged(path, err) from None


def _check_name(name: str, path: Path) -> None:
    """pack writes plain relative names: anything else would land outside the folder."""
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\\" in name:
        raise OutputsError(f"{path}: holds the member {name!r}, a path outside its folder; it was not written "
                           "by scripts/outputs.py pack: check it out again with git.")


def list_archive(path: Path) -> list[tuple[str, int]]:
    """(name, size) of every file of an archive, sorted by name; no member's bytes are kept."""
    return sorted((m.name, m.size) for m, _ in members(path))


def read_archive(path: Path) -> dict[str, bytes]:
    """{name: content} of every file of an archive (each member in memory: for small archives and tests;
    ``list`` and ``unpack`` stream)."""
    return {m.name: f.read() for m, f in members(path)}


def _same(f: _Member, path: Path) -> bool:
    """Whether the member's bytes are those of the file ``path``, compared a block at a time."""
    with open(path, "rb") as mine:
        while block := f.read(BLOCK):
            if block != mine.read(len(block)):
                return False
        return not mine.read(1)


def unpack(archive: Path) -> tuple[int, int]:
    """``<folder>.tar.xz`` -> ``<folder>/`` beside it: (files written, files already there and identical).
    A file there that differs from the archive's is never overwritten: one sentence, and nothing is written.
    Each new member is copied, a block at a time, into a temporary file beside its target; they are renamed in
    once every member has been read and compared."""
    folder = archive.parent / archive.name[: -len(".tar.xz")]
    staged: dict[Path, str] = {}
    made: list[Path] = []  # directories made for the temporary files, removed again when nothing is written
    done = False
    try:
        kept = _stage_members(archive, folder, staged, made)
        for target, tmp in staged.items():
            os.replace(tmp, target)
        done = True
        return len(staged), kept
    finally:
        if not done:
            for tmp in staged.values():
                if os.path.exists(tmp):
                    os.remove(tmp)
            for d in reversed(made):
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()


def _stage_members(archive: Path, folder: Path, staged: dict[Path, str], made: list[Path]) -> int:
    """Compare each member with its file in ``folder`` or copy it into a temporary file beside it (``staged``:
    target -> temporary name); the number of identical files there. A differing file is refused."""
    kept = 0
    for member, f in members(archive):
        target = folder / member.name
        if target.exists() and target.is_file() and _same(f, target):
            kept += 1
            continue
        if target.exists() or target.is_symlink():
            raise OutputsError(f"{target} is there and differs from {archive.name}'s copy; move it away (or "
                               "`pack` the folder if it is a newer result) and unpack again.")
        missing = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
        made.extend(reversed(missing))
        out, tmp = _atomic(target)
        staged[target] = tmp
        with out:
            shutil.copyfileobj(f, out, BLOCK)
    return kept


def _archives(names: list[str]) -> list[Path]:
    """The archives of the folders ``names`` (every archive of docs/outputs when none is named)."""
    if not names:
        found = sorted(OUTPUTS.glob("*.tar.xz"))
        if not found:
            raise OutputsError(f"{OUTPUTS}: no .tar.xz archives here; run this from a clone of the repository.")
        return found
    paths = [OUTPUTS / f"{n.removesuffix('.tar.xz').rstrip('/')}.tar.xz" for n in names]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise OutputsError(f"{missing[0]}: no such archive; `python scripts/outputs.py unpack` with no name "
                           "unpacks every one.")
    return paths


def main(argv: list[str] | None = None) -> int:
    """``python scripts/outputs.py unpack|pack|list [FOLDER ...]``; 2 with one sentence on a user's error."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["unpack", "pack", "list"])
    ap.add_argument("folders", nargs="*", help="folder names under docs/outputs (default: every archive)")
    args = ap.parse_args(argv)
    try:
        if args.action == "pack":
            if not args.folders:
                raise OutputsError("pack: name the folder(s) of docs/outputs to pack.")
            for name in args.folders:
                print(f"outputs: wrote {pack(OUTPUTS / name.rstrip('/'))}")
        elif args.action == "unpack":
            for archive in _archives(args.folders):
                written, kept = unpack(archive)
                print(f"outputs: {archive.name}: {written} files written, {kept} already there")
        else:
            for archive in _archives(args.folders):
                for name, size in list_archive(archive):
                    print(f"{size:>10,}  {archive.name[:-7]}/{name}")
    except (OutputsError, OSError) as err:
        print(f"outputs: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
