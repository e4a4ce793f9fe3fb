"""Reading parallel text, streaming, with validation that never loses data silently.

Every problem with an input file is reported in one sentence naming the file, the
line and the fix (:class:`CorpusError`), or counted in :class:`PairStats` and written to
the dataset manifest:

* a missing file                             -> error naming the path
* files with different line counts           -> error naming both files and both counts
* invalid UTF-8                              -> error naming the file and the line
* an empty line on either side               -> the pair is dropped and counted
* an over-long pair (if a limit is given)    -> filtered by the caller and counted
* a side with no piece after encoding        -> dropped by the caller (prepare) and counted
* an empty corpus (nothing left)             -> error

Files ending in ``.gz`` are decompressed on the fly. Nothing is held in memory: the
functions are generators over lines.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError


class CorpusError(UserError, ValueError):
    """A user-facing data error: one sentence naming the file, the line and the fix."""


@dataclass
class PairStats:
    lines: int = 0  # lines read per side
    kept: int = 0
    empty: int = 0  # dropped: empty on either side
    too_long: int = 0  # dropped: over the length limit (counted by the caller)
    no_pieces: int = 0  # dropped: a side that encodes to no piece at all, e.g. only "\u200b" (counted by the caller)
    empty_examples: list[int] = field(default_factory=list)  # first few 1-based line numbers
    no_pieces_examples: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "lines": self.lines,
            "kept": self.kept,
            "dropped_empty": self.empty,
            "dropped_too_long": self.too_long,
            "dropped_no_pieces": self.no_pieces,
            "first_empty_lines": self.empty_examples,
            "first_no_pieces_lines": self.no_pieces_examples,
        }


def resolve(prefix: str | Path, lang: str) -> Path:
    """``{prefix}.{lang}`` or ``{prefix}.{lang}.gz``, whichever exists (both: an error)."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.exists() and gz.exists():
        raise CorpusError(f"{plain} and {gz.name} both exist; it is unclear which to read: remove or rename one.")
    if plain.exists():
        return plain
    if gz.exists():
        return gz
    raise CorpusError(f"{plain}: file not found (nor {gz.name}); check --{{train,valid,test}}pref and the language codes.")


_GZIP_MAGIC = b"\x1f\x8b"


def _open_binary(path: Path):
    """The file opened for binary reading, decompressed when its bytes are gzip."""
    if not path.exists():
        raise CorpusError(f"{path}: file not found; check the path.")
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, not a text file; give the file's path.")
    # opened once and the magic bytes peeked, not read: a pipe (`--input <(cat f)`, a FIFO) can be read only once,
    # and a second open would lose what the first one buffered
    f = open(path, "rb")
    try:
        is_gzip = f.peek(2)[:2] == _GZIP_MAGIC
    except BaseException:
        f.close()
        raise
    if is_gzip:
        z = gzip.GzipFile(fileobj=f, mode="rb")
        z.myfileobj = f  # closed with it (GzipFile closes only a file it opened itself; this is the attribute it uses)
        return z
    if path.suffix == ".gz":
        f.close()
        raise CorpusError(f"{path}: named .gz but not gzip-compressed; rename it without .gz or compress it with gzip.")
    return f


def _utf8_error(path: Path, lineno: int, raw: bytes, err: UnicodeDecodeError) -> CorpusError:
    column = len(raw[: err.start].decode("utf-8", errors="replace")) + 1
    return CorpusError(
        f"{path} line {lineno} column {column}: invalid UTF-8 (byte 0x{raw[err.start]:02x}); re-encode the file "
        "as UTF-8 (e.g. iconv -f latin1 -t utf-8)."
    )


BOM = "\ufeff"


def note_bom(path: str | Path) -> None:
    """The one-line note that a file's UTF-8 byte-order mark was removed (every text reader removes it)."""

    print(f"note: {path}: the UTF-8 byte-order mark at its start was removed (it is not part of the text).",
          file=sys.stderr)


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a text file (plain or gzip) without the line ending.

    Only ``\\n`` ends a line (``\\r``, ``\\u2028``, ``\\x0b``... stay inside it, so that
    parallel files stay aligned); a trailing ``\\r`` is removed, and a UTF-8 byte-order mark at the start of
    the file, with a one-line note (:func:`note_bom`). Gzip is recognised by
    its magic bytes. Raises :class:`CorpusError` naming the file (and the line and
    column) on invalid UTF-8, on truncated or corrupt gzip data, and on a file named
    ``.gz`` that is not gzip.
    """
    path = Path(path)
    with _open_binary(path) as f:
        yield from decode_lines(f, path)


def decode_lines(f, path: str | Path) -> Iterator[str]:
    """The lines of the binary stream ``f`` (a file, gzip data, standard input's ``sys.stdin.buffer``) as
    :func:`read_lines` yields them; errors name ``path`` (``<stdin>`` for standard input)."""
    lineno = 0
    try:
        for raw in f:
            lineno += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise _utf8_error(path, lineno, raw, err) from None
            if lineno == 1 and text.startswith(BOM):  # an editor's byte-order mark is not a character of the text
                text = text[len(BOM):]
                note_bom(path)
            yield text.rstrip("\r\n")
    except (EOFError, OSError, zlib.error) as err:
        where = f"after line {lineno}" if lineno else "in its first line"
        raise CorpusError(
            f"{path} {where}: the gzip data is truncated or corrupt ({err}); re-download or re-compress the file."
        ) from None


def count_lines(path: str | Path) -> int:
    return sum(1 for _ in read_lines(path))


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
