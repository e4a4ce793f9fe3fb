"""Parses made once, on another machine: a file a translator reads instead of running its parser.

A model that reads parses has the text it translates parsed with the parser its dataset was prepared
with (spaCy for raw text). Where that parser is not installed (a lent GPU machine whose file transfer
has no room for spaCy, say) the parses can be made beforehand where it is:

    structnmt parse --data DATASET --input test.en.gz blind.en.gz --out parses.jsonl.gz
    structnmt translate --checkpoint ... --parse-cache parses.jsonl.gz ...
    # or, in a grid: evaluate.parse_cache: parses.jsonl.gz

The file holds one JSON object per distinct (stripped, non-empty) line: ``key`` (SHA-1 of the parser's
settings and the line, so that a parse is only used for the text and the parser it was made with),
``dependency`` (words, 1-based heads, relations, UPOS, XPOS, lemmas), ``constituency`` (the word list's
tree as nested ``[label, start, end, children]``) and ``spans`` (the words' character spans). A line the
file lacks is an error, not a silent fallback to another parser.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import itertools
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from tqdm import tqdm

from ..config import build_dataclass
from ..errors import UserError
from ..fileio.files import errors_name, is_device
from ..fileio.resumable import PartialOutput, chunked
from .parsers import Parsed, ParserConfig, build_parser
from .trees import ConstituencyTree, DependencyTree, Node

#: parser settings that do not change a parse (how it is batched and spread over processes)
_NOT_IN_KEY = ("batch_size", "n_process")


class ParseCacheError(UserError, ValueError):
    """A parse cache that cannot be read, or that lacks a line to translate."""


def dataset_parser(data_path: str | Path) -> ParserConfig | None:
    """The parser a prepared dataset was made with (its manifest's ``config.parser``); None without a manifest."""

    path = Path(data_path) / "manifest.json"
    if not path.is_file():
        return None
    saved = json.loads(path.read_text(encoding="utf-8")).get("config", {}).get("parser") or {}
    return build_dataclass(ParserConfig, saved, f"{path} parser")


def settings_key(cfg: ParserConfig) -> str:
    """The parser settings a cached parse depends on, as a canonical string."""
    return json.dumps({k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_IN_KEY}, sort_keys=True)


def line_key(settings: str, text: str) -> str:
    """The cache key of one stripped line under ``settings`` (:func:`settings_key`)."""
    return hashlib.sha1(f"{settings}\n{text}".encode()).hexdigest()


def _node_to_json(node: Node) -> list:
    return [node.label, node.start, node.end, [_node_to_json(c) for c in node.children]]


def _node_from_json(x: list) -> Node:
    label, start, end, children = x
    return Node(label, int(start), int(end), [_node_from_json(c) for c in children])


def parsed_to_json(key: str, p: Parsed) -> dict:
    dep = dataclasses.asdict(p.dependency) if p.dependency is not None else None
    const = ({"words": p.constituency.words, "root": _node_to_json(p.constituency.root)}
             if p.constituency is not None else None)
    return {"key": key, "dependency": dep, "constituency": const,
            "spans": [list(s) for s in p.spans] if p.spans is not None else None}


def parsed_from_json(d: dict) -> Parsed:
    dep = DependencyTree(**d["dependency"]) if d.get("dependency") else None
    c = d.get("constituency")
    const = ConstituencyTree(list(c["words"]), _node_from_json(c["root"])) if c else None
    spans = [(int(b), int(e)) for b, e in d["spans"]] if d.get("spans") is not None else None
    return Parsed(dep, const, spans)


def _open_text(path: Path, mode: str, gz: bool):
    return gzip.open(path, mode + "t", encoding="utf-8") if gz else open(path, mode, encoding="utf-8")


PARSE_CHUNK_LINES = 20_000
"""Input lines ``structnmt parse`` reads, parses and writes at a time (``--resume`` goes on after the last one)."""


def write_parse_cache(cfg: ParserConfig, texts: Iterable[str], path: str | Path, progress: bool = False, *,
                      resume: bool = False, input_name: str = "", chunk_lines: int = PARSE_CHUNK_LINES) -> int:
    """Parse every distinct stripped, non-empty line of ``texts`` with ``cfg`` into ``path``; returns the number
    of parses written.

    Streamed: ``chunk_lines`` input lines at a time are parsed and appended to ``path.partial``
    (:class:`structnmt.fileio.resumable.PartialOutput`; a ``.gz`` output gets one gzip member per chunk), renamed to
    ``path`` at the end. Memory holds one chunk and a 16-byte digest per distinct line written (about 80 bytes
    of Python set per line). ``resume``: go on with an interrupted run's ``path.partial`` (the same texts,
    ``input_name`` and parser settings), after the chunks it finished."""
    settings = settings_key(cfg)
    gz = str(path).endswith(".gz")
    backend = build_parser(cfg)  # a missing pipeline is said before any file is made
    if is_device(path):
        if resume:
            raise UserError(f"--resume: {path} is a device or a pipe, written as it goes; resume only a file output.")
        return _parse_in_place(backend, settings, texts, path, chunk_lines)
    out = PartialOutput(path, input_name=input_name, model_hash=hashlib.sha256(settings.encode()).hexdigest(),
                        settings={"chunk_lines": chunk_lines, "gzip": gz}, command="parse",
                        model_what="parser settings", check_lines=None if gz else _cache_lines_problem)
    texts = iter(texts)
    seen: set[int] = set()
    if resume:
        out.resume(texts)
        seen = _written_keys(out.partial, gz)
    else:
        out.start()
    written, finished = len(seen), False
    bar = tqdm(desc="parse", unit=" lines", mininterval=1.0, initial=written) if progress else None
    try:
        for text, chunk, n in _parsed_chunks(backend, settings, texts, chunk_lines, seen):
            out.append(gzip.compress(text.encode("utf-8"), mtime=0) if gz and text else text, chunk)
            written += n
            if bar is not None:
                bar.update(n)
        finished = True
    finally:
        out.close(finished=finished)
        if bar is not None:
            bar.close()
    return written


def _cache_lines_problem(input_lines: int, tally) -> str | None:
    """A resumed cache's recorded lines against the input lines done: one parse per distinct line, so at most
    one per input line (for :class:`structnmt.fileio.resumable.PartialOutput`; a ``.gz`` cache's members are not read
    here)."""
    return None if tally.lines <= input_lines else f"hold {tally.lines:,} parses, more than one per input line"


def _parsed_chunks(backend, settings: str, texts: Iterable[str], chunk_lines: int, seen: set[int]):
    """Per chunk of ``chunk_lines`` input lines: the cache's JSON lines of its distinct lines not in ``seen``
    (parsed by ``backend``; ``seen`` updated), the chunk, and how many lines were parsed."""
    for chunk in chunked(texts, chunk_lines):
        fresh = _fresh_lines(chunk, settings, seen)
        text = "".join(json.dumps(parsed_to_json(line_key(settings, line), parsed), ensure_ascii=False) + "\n"
                       for line, parsed in zip(fresh, backend.parse(iter(fresh)), strict=True))
        yield text, chunk, len(fresh)


def _parse_in_place(backend, settings: str, texts: Iterable[str], path: str | Path, chunk_lines: int) -> int:
    """``write_parse_cache`` into a device or a pipe: plain JSON lines written as each chunk is parsed."""
    written = 0
    with errors_name(Path(path), Path(path)), open(path, "w", encoding="utf-8") as f:
        for text, _, n in _parsed_chunks(backend, settings, texts, chunk_lines, set()):
            f.write(text)
            f.flush()
            written += n
    return written


def _digest(key: str) -> int:
    return int(key[:32], 16)  # the key's first 16 bytes


def _fresh_lines(chunk: list[str], settings: str, seen: set[int]) -> list[str]:
    """The distinct stripped, non-empty lines of ``chunk`` not written before (``seen`` updated)."""
    fresh = []
    for line in chunk:
        line = line.strip()
        if line:
            d = _digest(line_key(settings, line))
            if d not in seen:
                seen.add(d)
                fresh.append(line)
    return fresh


def _written_keys(partial: Path, gz: bool) -> set[int]:
    """The digests of the lines an interrupted run's ``.partial`` cache holds (read back to go on without them)."""
    with _open_text(partial, "r", gz) as f:
        return {_digest(json.loads(line)["key"]) for line in f}


def is_parse_cache(path: str | Path) -> bool:
    """Whether ``path`` holds what :func:`write_parse_cache` writes (read from its content: its first line is a
    parse's JSON record with a 40-hex key; an empty file, as an empty input gives, counts), so that ``parse``
    replaces an earlier cache of its own and no other gzip or text file."""

    path = Path(path)
    try:
        with _open_text(path, "r", gz=path.name.endswith(".gz")) as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return False
    return first == "" or re.match(r'\{"key": "[0-9a-f]{40}"', first) is not None


def read_parse_cache(path: str | Path) -> ParseCacheIndex:
    """key -> parse of a file written by :func:`write_parse_cache` (:class:`ParseCacheIndex`: read on demand); a
    bad line is one sentence naming it."""
    return ParseCacheIndex(path)


_KEY = re.compile(rb'^\{"key": "([0-9a-f]{40})"')


class ParseCacheIndex(Mapping):
    """A parse cache read on demand, for an input too large to hold every parse (about 10 KB a line) in memory:
    key -> parse, like :func:`read_parse_cache`'s dict, holding per line only where it is (a dict entry of
    about 100 bytes) and the lines of the last :data:`MEMBERS_KEPT` parts read.

    The file's parts are its gzip members (``structnmt parse`` writes one per chunk) or, for a plain ``.jsonl``
    file, blocks of :data:`BLOCK_LINES` lines; a part is decompressed when a line of it is asked for, so an input
    translated in the order it was parsed reads each part about once. A bad line is one sentence naming it,
    when it is read."""

    MEMBERS_KEPT = 2
    BLOCK_LINES = 20_000

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ParseCacheError(f"{self.path}: no such parse cache; make it with `structnmt parse --data DATASET "
                                  "--input FILE ... --out FILE`.")
        self.where: dict[str, tuple[int, int]] = {}  # key -> (part, line within the part)
        self.parts: list[tuple[int, int, int]] = []  # (byte offset, bytes, first line number) of each part
        self._kept: dict[int, list[bytes]] = {}
        self._index()

    def _raw_parts(self):
        """``(offset, size, lines)`` of each part of the file in turn, its lines as bytes (read a part at a time)."""
        with open(self.path, "rb") as f:
            if not self.path.name.endswith(".gz"):
                offset = 0
                while block := list(itertools.islice(f, self.BLOCK_LINES)):
                    size = sum(map(len, block))
                    yield offset, size, block
                    offset += size
                return
            offset, pending = 0, b""
            while buf := pending or f.read(1 << 20):
                size, text, pending = self._member(f, buf)
                yield offset, size, text.splitlines(keepends=True)
                offset += size

    def _member(self, f, buf: bytes) -> tuple[int, bytes, bytes]:
        """One gzip member starting at ``buf`` (more read from ``f`` as needed): its compressed size, its text and
        the bytes read past it."""
        d, out, size = zlib.decompressobj(wbits=31), [], 0
        try:
            while True:
                out.append(d.decompress(buf))
                if d.eof:
                    return size + len(buf) - len(d.unused_data), b"".join(out), d.unused_data
                size += len(buf)
                buf = f.read(1 << 20)
                if not buf:
                    raise zlib.error("the file ends inside a gzip member")
        except zlib.error as err:
            raise ParseCacheError(f"{self.path}: the gzip data is damaged or truncated ({err}); make the file again "
                                  "with `structnmt parse`.") from None

    def _index(self) -> None:
        line = 0
        for part, (offset, size, lines) in enumerate(self._raw_parts()):
            self.parts.append((offset, size, line))
            for i, raw in enumerate(lines):
                m = _KEY.match(raw)
                if m is None:
                    raise ParseCacheError(f"{self.path}, line {line + i + 1}: not a parse of `structnmt parse` (no "
                                          "key at its start); make the file again with `structnmt parse`.")
                self.where[m.group(1).decode()] = (part, i)
            line += len(lines)

    def _lines(self, part: int) -> list[bytes]:
        if part not in self._kept:
            offset, size, _ = self.parts[part]
            with open(self.path, "rb") as f:
                f.seek(offset)
                raw = f.read(size)
            text = gzip.decompress(raw) if self.path.name.endswith(".gz") else raw
            if len(self._kept) >= self.MEMBERS_KEPT:
                self._kept.pop(next(iter(self._kept)))
            self._kept[part] = text.splitlines()
        return self._kept[part]

    def __getitem__(self, key: str) -> Parsed:
        part, i = self.where[key]
        try:
            return parsed_from_json(json.loads(self._lines(part)[i]))
        except (ValueError, KeyError, TypeError) as err:
            raise ParseCacheError(f"{self.path}, line {self.parts[part][2] + i + 1}: not a parse of `structnmt parse` "
                                  f"({type(err).__name__}: {err}); make the file again with `structnmt parse`.") from None

    def __contains__(self, key) -> bool:
        return key in self.where

    def __iter__(self):
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)


def cached_parses(cache: Mapping[str, Parsed], where: str, cfg: ParserConfig, texts: list[str]) -> list[Parsed]:
    """The parses of ``texts`` (stripped lines) from ``cache``, in order; a line it lacks is an error."""
    settings = settings_key(cfg)
    keys = [line_key(settings, t) for t in texts]
    missing = [i for i, k in enumerate(keys) if k not in cache]
    if missing:
        raise ParseCacheError(
            f"{where}: {len(missing)} of the {len(texts)} lines to parse are not in it, or were parsed with other "
            f"parser settings (the first: {texts[missing[0]][:60]!r}); make it with `structnmt parse` from the text "
            "you translate and this model's dataset.")
    return [cache[k] for k in keys]
