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
functions are generators over lines. A reader can start at any line whose place in the
file is known (:class:`LinePosition`, found by :func:`raw_lines`), numbering lines as
the whole file does, so that several processes can read parts of one file and still
name the line of the file in their errors (``prepare --workers``).
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
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

    def add(self, other: PairStats) -> None:
        """Count ``other``, the stats of the lines that follow, in these (examples: still the first 10)."""
        self.lines += other.lines
        self.kept += other.kept
        self.empty += other.empty
        self.too_long += other.too_long
        self.no_pieces += other.no_pieces
        self.empty_examples = (self.empty_examples + other.empty_examples)[:10]
        self.no_pieces_examples = (self.no_pieces_examples + other.no_pieces_examples)[:10]

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


@dataclass(frozen=True)
class LinePosition:
    """Where a line starts in a file: its byte offset in the (decompressed) text and its 1-based number."""

    offset: int = 0
    line: int = 1


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


def read_lines(path: str | Path, start: LinePosition | None = None) -> Iterator[str]:
    """Yield the lines of a text file (plain or gzip) without the line ending.

    Only ``\\n`` ends a line (``\\r``, ``\\u2028``, ``\\x0b``... stay inside it, so that
    parallel files stay aligned); a trailing ``\\r`` is removed, and a UTF-8 byte-order mark at the start of
    the file, with a one-line note (:func:`note_bom`). Gzip is recognised by
    its magic bytes. Raises :class:`CorpusError` naming the file (and the line and
    column) on invalid UTF-8, on truncated or corrupt gzip data, and on a file named
    ``.gz`` that is not gzip. ``start``: begin at that line (errors number lines as in the whole file).
    """
    path = Path(path)
    start = start or LinePosition()
    with _open_binary(path) as f:
        if start.offset:
            f.seek(start.offset)  # gzip: decompressed and skipped
        yield from decode_lines(f, path, first_line=start.line)


def decode_lines(f, path: str | Path, first_line: int = 1) -> Iterator[str]:
    """The lines of the binary stream ``f`` (a file, gzip data, standard input's ``sys.stdin.buffer``) as
    :func:`read_lines` yields them; errors name ``path`` (``<stdin>`` for standard input) and number the
    lines from ``first_line``, the number of the stream's first line."""
    lineno = first_line - 1
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
        raise _gzip_error(path, lineno, err) from None


def _gzip_error(path: str | Path, lineno: int, err: Exception) -> CorpusError:
    where = f"after line {lineno}" if lineno else "in its first line"
    return CorpusError(
        f"{path} {where}: the gzip data is truncated or corrupt ({err}); re-download or re-compress the file."
    )


def raw_lines(path: str | Path) -> Iterator[bytes]:
    """Every line of a text file (plain or gzip) as its bytes, line ending included and nothing decoded: for
    finding places in a file fast (the sum of the lengths before a line is its :class:`LinePosition` offset);
    :func:`read_lines` reads the text from any of them."""
    path = Path(path)
    lineno = 0
    with _open_binary(path) as f:
        try:
            for raw in f:
                lineno += 1
                yield raw
        except (EOFError, OSError, zlib.error) as err:
            raise _gzip_error(path, lineno, err) from None


def raw_blocks(path: str | Path, size: int = 1 << 22) -> Iterator[bytes]:
    """The bytes of a text file (plain or gzip) in blocks of whole lines (each ends with a line's ``\\n``, or
    at the end of the file) of about ``size`` bytes: for scanning a file of many short lines fast."""
    path = Path(path)
    with _open_binary(path) as f:
        try:
            while block := f.read(size):
                yield block + (b"" if block.endswith(b"\n") else f.readline())
        except (EOFError, OSError, zlib.error) as err:
            raise _gzip_error(path, 0, err) from None


#: the ASCII characters ``str.strip`` removes (the separators 0x1c-0x1f included)
_ASCII_SPACE = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "


def is_blank(raw: bytes, first: bool = False) -> bool:
    """Whether a raw line (:func:`raw_lines`) is empty once read and stripped as :func:`read_lines` and
    ``str.strip`` do (``first``: the file's first line, whose byte-order mark is not text)."""
    if first and raw.startswith(BOM.encode("utf-8")):
        raw = raw[len(BOM.encode("utf-8")):]
    if raw.isascii():
        return not raw.strip(_ASCII_SPACE)
    return not raw.decode("utf-8", errors="replace").strip()


def count_lines(path: str | Path, limit: int | None = None) -> int:
    """How many lines ``path`` (plain or gzip) has, each decoded (checked) as :func:`read_lines` reads it; with
    ``limit``, counted no further than that, reading only those lines' bytes (nothing decoded)."""
    if limit is not None:
        return sum(1 for _ in islice(raw_lines(path), max(0, limit)))
    return sum(1 for _ in read_lines(path))


def read_pairs(src_path: str | Path, tgt_path: str | Path, stats: PairStats, *,
               start: tuple[LinePosition, LinePosition] | None = None,
               count: int | None = None) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line_number, source, target)`` for non-empty pairs, in order.

    Empty pairs are dropped and counted in ``stats``. Files of different lengths
    raise :class:`CorpusError` with both names and both line counts. ``start``: where
    to begin in the source and target files (the same line of both); ``count``: how many
    lines to read from there (None: to the end).
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_at, tgt_at = start or (LinePosition(), LinePosition())
    src_it = islice(read_lines(src_path, src_at), count)
    tgt_it = islice(read_lines(tgt_path, tgt_at), count)
    lineno = src_at.line - 1
    while True:
        s = next(src_it, None)
        t = next(tgt_it, None)
        if s is None or t is None:
            if s is None and t is None:
                break
            n_src = lineno + (0 if s is None else 1 + sum(1 for _ in src_it))
            n_tgt = lineno + (0 if t is None else 1 + sum(1 for _ in tgt_it))
            raise line_count_error(src_path, n_src, tgt_path, n_tgt)
        lineno += 1
        stats.lines += 1
        s, t = s.strip(), t.strip()
        if not s or not t:
            stats.empty += 1
            if len(stats.empty_examples) < 10:
                stats.empty_examples.append(lineno)
            continue
        yield lineno, s, t


def line_count_error(src_path: Path, n_src: int, tgt_path: Path, n_tgt: int) -> CorpusError:
    """The error of parallel files whose line counts differ."""
    return CorpusError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; parallel files must be "
                       "aligned line by line — fix or re-extract the shorter one.")


def file_digest(path: str | Path) -> dict:
    """SHA-256 and size of a file's bytes (streamed), for the dataset manifest."""
    h = hashlib.sha256()
    path = Path(path)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"sha256": h.hexdigest(), "bytes": path.stat().st_size}
