"""One check for every command that takes several runs (seeds) of several systems: ``score --hyp``,
``compare --hyp`` and ``compare --experiment``/``--benchmark`` rows.

A seed-aware test reads each system's spread over its runs. One file counted as two seeds (``--hyp a a``, a
hard link, ``./a``, a byte-identical copy) makes that spread zero and the test's p-value small; one run
counted in two systems, or two systems under one name, compares a system with itself. :func:`check_runs`
refuses all of these before anything is read or computed, in one sentence naming both files.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Sequence
from pathlib import Path

from ..errors import UserError

#: one system: its name and its runs, each run the file(s) of its translations (one per split, joined)
SystemRuns = tuple[str, Sequence[Sequence[str | Path]]]


def _inode(path: Path) -> tuple[int, int] | None:
    """(device, inode) of an existing file; None for a missing one (its reader names it)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _digest(run: Sequence[Path]) -> str | None:
    """SHA-256 of a run's text (a ``.gz`` file decompressed, so a gzipped copy is the same text); None
    when a file cannot be read (its reader names it)."""
    h = hashlib.sha256()
    for path in run:
        try:
            data = path.read_bytes()
            if path.name.endswith(".gz"):
                data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
            return None
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _refusal(first: tuple[int, Path], second: tuple[int, Path], how: str, prefix: str, option: str) -> UserError:
    """The sentence for two runs that are one (``how``: "the same file" or "identical content")."""
    both = f"{prefix}{option}{first[1]} and {second[1]} are {how}"
    if first[0] == second[0]:
        return UserError(f"{both}; each run of a system is one seed's translations, so give every seed its own "
                         "file once.")
    return UserError(f"{both}, in two systems; a run belongs to one system: give each system its own runs.")


def check_runs(systems: Sequence[SystemRuns], *, prefix: str = "", option: str = "--hyp ",
               rename: str = "give every system once") -> None:
    """Refuse (:class:`~structnmt.errors.UserError`) runs that are not distinct: a file (device and inode:
    also a hard link, a symlink or another spelling of the path) in two runs, two runs of one system with the
    same text, and, where any system has several runs (the seed-aware test), two runs of different systems
    with the same text; then two systems of one name. One run in two systems with one run each is
    allowed by text (the paired bootstrap says such outputs are identical). ``prefix`` starts the sentence
    (``"compare: "``), ``option`` names the files' option (``"--hyp "``, or ``""`` for a run directory's
    files), ``rename`` is the fix for a name given twice."""

    seeds = any(len(runs) > 1 for _, runs in systems)
    files: dict[tuple[int, int], tuple[int, Path]] = {}
    texts: dict[str, tuple[int, Path]] = {}
    for i, (_, runs) in enumerate(systems):
        for run in runs:
            paths = [Path(run)] if isinstance(run, (str, Path)) else [Path(p) for p in run]
            for path in paths:
                key = _inode(path)
                if key is not None and key in files:
                    raise _refusal(files[key], (i, path), "the same file", prefix, option)
                if key is not None:
                    files[key] = (i, path)
            digest = _digest(paths) if paths else None
            if digest is not None and digest in texts and (texts[digest][0] == i or seeds):
                raise _refusal(texts[digest], (i, paths[0]), "identical content", prefix, option)
            if digest is not None:
                texts.setdefault(digest, (i, paths[0]))
    names = [name for name, _ in systems]
    twice = next((n for k, n in enumerate(names) if n in names[:k]), None)
    if twice is not None:
        raise UserError(f"{prefix}two systems are named {twice!r}; a name stands for one system's runs: {rename}.")
