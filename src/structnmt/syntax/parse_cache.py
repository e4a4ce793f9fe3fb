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
import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..config import build_dataclass
from ..errors import UserError
from ..files import atomic_path
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


def write_parse_cache(cfg: ParserConfig, texts: Iterable[str], path: str | Path, progress: bool = False) -> int:
    """Parse every distinct stripped, non-empty line of ``texts`` with ``cfg`` into ``path`` (written whole
    or not at all: a temporary file renamed at the end); returns the number of parses written."""

    lines = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    settings = settings_key(cfg)
    parsed = build_parser(cfg).parse(iter(lines))
    if progress:
        from tqdm import tqdm

        parsed = tqdm(parsed, total=len(lines), desc="parse", unit=" lines", mininterval=1.0)
    path, n = Path(path), 0
    with atomic_path(path) as tmp:
        with _open_text(tmp, "w", gz=path.name.endswith(".gz")) as f:
            for text, p in zip(lines, parsed, strict=True):
                f.write(json.dumps(parsed_to_json(line_key(settings, text), p), ensure_ascii=False) + "\n")
                n += 1
    return n


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


def read_parse_cache(path: str | Path) -> dict[str, Parsed]:
    """key -> parse of a file written by :func:`write_parse_cache`; a bad line is one sentence naming it."""
    path = Path(path)
    if not path.is_file():
        raise ParseCacheError(f"{path}: no such parse cache; make it with `structnmt parse --data DATASET "
                              "--input FILE ... --out FILE`.")
    out: dict[str, Parsed] = {}
    n = 0
    try:
        with _open_text(path, "r", gz=path.name.endswith(".gz")) as f:
            for line in f:
                n += 1  # the line a bad one is reported at
                d = json.loads(line)
                out[d["key"]] = parsed_from_json(d)
    except (ValueError, KeyError, TypeError, gzip.BadGzipFile, EOFError) as err:
        raise ParseCacheError(f"{path}{f', line {n}' if n else ''}: not a parse of "
                              f"`structnmt parse` ({type(err).__name__}: {err}); make the file again with "
                              "`structnmt parse`.") from None
    return out


def cached_parses(cache: dict[str, Parsed], where: str, cfg: ParserConfig, texts: list[str]) -> list[Parsed]:
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
