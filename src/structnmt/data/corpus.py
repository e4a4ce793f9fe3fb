"""Reading parallel text, streaming, with validation that never loses data silently.

Every problem with an input file is reported in one sentence naming the file, the
line and the fix (:class:`CorpusError`), or counted in :class:`PairStats` and written to
the dataset manifest:

* a missing file                             -> error naming the path
* files with different line counts           -> error naming both files and both counts
* invalid UTF-8                              -> error naming the file and the line
* an empty line on either side               -> the pair is dropped and counted
* an over-long pair (if a limit is given)    -> filtered by the caller and counted
* an empty corpus (nothing left)             -> error

Files ending in ``.gz`` are decompressed on the fly. Nothing is held in memory: the
functions are generators over lines.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class CorpusError(ValueError):
    """A user-facing data error: one sentence naming the file, the line and the fix."""


@dataclass
class PairStats:
    lines: int = 0  # lines read per side
    kept: int = 0
    empty: int = 0  # dropped: empty on either side
    too_long: int = 0  # dropped: over the length limit (counted by the caller)
    empty_examples: list[int] = field(default_factory=list)  # first few 1-based line numbers

    def as_dict(self) -> dict:
        return {
            "lines": self.lines,
            "kept": self.kept,
            "dropped_empty": self.empty,
            "dropped_too_long": self.too_long,
            "first_empty_lines": self.empty_examples,
        }


def resolve(prefix: str | Path, lang: str) -> Path:
    """``{prefix}.{lang}`` or ``{prefix}.{lang}.gz``, whichever exists."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.exists():
        return plain
    if gz.exists():
        return gz
    raise CorpusError(f"{plain}: file not found (nor {gz.name}); check --{{train,valid,test}}pref and the language codes.")


def _open_binary(path: Path):
    if not path.exists():
        raise CorpusError(f"{path}: file not found; check the path.")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a text file (plain or gzip) without the line ending.

    Raises :class:`CorpusError` on invalid UTF-8, naming the file and line.
    """
    path = Path(path)
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorpusError(
                    f"{path} line {lineno}: invalid UTF-8 (byte {err.start}); re-encode the file as UTF-8 "
                    "(e.g. iconv -f latin1 -t utf-8)."
                ) from None
            yield text.rstrip("\r\n")


def count_lines(path: str | Path) -> int:
    with _open_binary(Path(path)) as f:
        return sum(1 for _ in f)


def read_pairs(src_path: str | Path, tgt_path: str | Path, stats: PairStats) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line_number, source, target)`` for non-empty pairs, in order.

    Empty pairs are dropped and counted in ``stats``. Files of different lengths
    raise :class:`CorpusError` with both names and both line counts.
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_it, tgt_it = read_lines(src_path), read_lines(tgt_path)
    lineno = 0
    while True:
        s = next(src_it, None)
        t = next(tgt_it, None)
        if s is None or t is None:
            if s is None and t is None:
                break
            n_src = lineno + (0 if s is None else 1 + sum(1 for _ in src_it))
            n_tgt = lineno + (0 if t is None else 1 + sum(1 for _ in tgt_it))
            raise CorpusError(
                f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; parallel files must be "
                "aligned line by line — fix or re-extract the shorter one."
            )
        lineno += 1
        stats.lines = lineno
        s, t = s.strip(), t.strip()
        if not s or not t:
            stats.empty += 1
            if len(stats.empty_examples) < 10:
                stats.empty_examples.append(lineno)
            continue
        yield lineno, s, t


def file_digest(path: str | Path) -> dict:
    """SHA-256 and size of a file's bytes (streamed), for the dataset manifest."""
    h = hashlib.sha256()
    path = Path(path)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"sha256": h.hexdigest(), "bytes": path.stat().st_size}
