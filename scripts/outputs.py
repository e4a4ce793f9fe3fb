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
bytes, so an unchanged folder leaves git's tree unchanged. ``unpack`` never overwrites a file that differs
from the archive's copy (it says which and stops) and writes every file atomically.
"""
from __future__ import annotations

import argparse
import gzip
import io
import lzma
import os
import sys
import tarfile
import tempfile
from pathlib import Path

OUTPUTS = Path(__file__).resolve().parents[1] / "docs" / "outputs"


class OutputsError(Exception):
    """A problem the user fixes: one sentence naming the file."""


def _members(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` as {relative name: content}, ``.gz`` files decompressed under the plain name."""
    out: dict[str, bytes] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        data = path.read_bytes()
        if rel.endswith(".gz"):
            rel, data = rel[:-3], gzip.decompress(data)
        if rel in out:
            raise OutputsError(f"{folder / rel} and {folder / rel}.gz are both there; keep one of them.")
        out[rel] = data
    return out


def archive_bytes(members: dict[str, bytes]) -> bytes:
    """A deterministic .tar.xz of ``members``: sorted names, mtime 0, owner root, mode 0644."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(members[name]), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(members[name]))
    return lzma.compress(raw.getvalue(), preset=9 | lzma.PRESET_EXTREME)


def read_archive(path: Path) -> dict[str, bytes]:
    """{name: content} of every file of an archive ``pack`` wrote."""
    try:
        with tarfile.open(path, mode="r:xz") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError, lzma.LZMAError) as err:
        raise OutputsError(f"{path}: not a readable .tar.xz ({err}); check it out again with git.") from None
    from pathlib import PurePosixPath

    for name in members:  # pack writes plain relative names: anything else would land outside the folder
        p = PurePosixPath(name)
        if not name or p.is_absolute() or ".." in p.parts or "\\" in name:
            raise OutputsError(f"{path}: holds the member {name!r}, a path outside its folder; it was not written "
                               "by scripts/outputs.py pack: check it out again with git.")
    return members


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def pack(folder: Path) -> Path:
    """``folder`` -> ``folder.tar.xz`` beside it (written atomically); returns the archive's path."""
    if not folder.is_dir():
        raise OutputsError(f"{folder}: no such folder to pack; unpack its archive first or give a folder of "
                           f"{OUTPUTS}.")
    members = _members(folder)
    if not members:
        raise OutputsError(f"{folder}: no files to pack.")
    target = folder.parent / f"{folder.name}.tar.xz"
    _write_atomic(target, archive_bytes(members))
    return target


def unpack(archive: Path) -> tuple[int, int]:
    """``<folder>.tar.xz`` -> ``<folder>/`` beside it: (files written, files already there and identical).
    A file there that differs from the archive's is never overwritten: one sentence, and nothing is written."""
    members = read_archive(archive)
    folder = archive.parent / archive.name[: -len(".tar.xz")]
    differing = [n for n, d in members.items() if (folder / n).is_file() and (folder / n).read_bytes() != d]
    blocked = [n for n in members if (folder / n).exists() and not (folder / n).is_file()]
    if differing or blocked:
        name = (differing or blocked)[0]
        raise OutputsError(f"{folder / name} is there and differs from {archive.name}'s copy; move it away (or "
                           f"`pack` the folder if it is a newer result) and unpack again.")
    todo = [n for n in members if not (folder / n).is_file()]
    for n in todo:
        _write_atomic(folder / n, members[n])
    return len(todo), len(members) - len(todo)


def _archives(names: list[str]) -> list[Path]:
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
                for name, data in sorted(read_archive(archive).items()):
                    print(f"{len(data):>10,}  {archive.name[:-7]}/{name}")
    except (OutputsError, OSError) as err:
        print(f"outputs: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
