"""Readers and writers for syntactic trees.

Formats:

* **PTB brackets** -- ``(S (NP (NNP Bush)) (VP (VBD held) ...))``. Either one tree per
  line (``.txt`` / ``.tree``) or multi-line trees as in the Penn Treebank ``.mrg`` files,
  where each tree is wrapped in an unlabelled outer bracket ``( (S ...) )``. Trees are
  delimited by bracket balance, so both layouts (and several trees on one line) are read
  by the same code. Gzipped files (``.gz``) are read and written transparently.
* **CoNLL-U** -- 10 tab-separated columns per word, sentences separated by blank lines.
  Multi-word token lines (ID ``1-2``) are *not* words of the tree: the syntactic words
  they cover are kept, and the surface token is recorded in
  :attr:`ConlluSentence.multiword_tokens` (``(start, end, form)``, 0-based half-open
  word span). Empty nodes (ID ``8.1``, enhanced UD) are skipped; basic heads never point
  at them.
* **Malt-TAB** (``.dp`` files of NLTK's ``dependency_treebank``) -- 3 or 4 tab-separated
  columns ``word tag head [relation]``; see :func:`parse_malt_tab`.
* **The PTB sample** (NLTK's ``treebank.zip`` and ``dependency_treebank.zip``) -- the two
  archives read member by member; see :class:`PtbSample`.

Malformed input raises :class:`TreeFormatError` naming the file, the line and the fix.

The file readers can start at a tree in the middle of a file (:class:`TreePosition`,
found without parsing by :func:`tree_positions`) and still number lines as in the whole
file: ``prepare --workers`` reads the trees of each part of a corpus in its own process.
"""

from __future__ import annotations

import gzip
import io
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from structnmt.errors import UserError
from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

from ..fileio.corpus import LinePosition, is_blank, raw_blocks, raw_lines, read_lines

__all__ = [
    "TreeFormatError",
    "ConlluSentence",
    "parse_ptb",
    "format_ptb",
    "read_ptb",
    "write_ptb",
    "read_conllu",
    "read_conllu_with_text",
    "read_conllu_sentences",
    "format_conllu",
    "write_conllu",
    "parse_malt_tab",
    "PtbSample",
    "TreePosition",
    "tree_positions",
]


class TreeFormatError(UserError, ValueError):
    """Malformed tree input. ``path`` and ``line`` (1-based) locate the problem."""

    def __init__(self, path: str, line: int, problem: str, fix: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        self.fix = fix
        super().__init__(f"{self.path}, line {line}: {problem}; {fix}.")

    def __reduce__(self):
        """Pickled by its parts, so that it crosses from a process (``prepare --workers``) whole."""
        return type(self), (self.path, self.line, self.problem, self.fix)


# ---------------------------------------------------------------------------- files


def _read_lines(path: str, start: LinePosition | None = None) -> Iterator[str]:
    """Lines without endings, read like parallel text (only ``\\n`` ends a line, gzip by
    its magic bytes); a missing file, invalid UTF-8 or broken gzip data raise
    :class:`~structnmt.fileio.corpus.CorpusError` naming the file and line. ``start``: from that line on."""

    return read_lines(path, start)


def _open_text(path: str | Path, mode: str = "rt"):
    p = str(path)
    if p.endswith(".gz"):
        return gzip.open(p, mode, encoding="utf-8")
    return open(p, mode, encoding="utf-8", newline=None)


# ---------------------------------------------------------------------------- PTB

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")
_ROOT_LABELS = {"ROOT", "TOP"}


@dataclass
class _Raw:
    """A bracket before spans are assigned: a preterminal has ``word`` set."""

    label: str
    line: int
    children: list[_Raw] = field(default_factory=list)
    word: str | None = None


def _tokens_of_line(text: str, lineno: int) -> list[tuple[str, int]]:
    return [(tok, lineno) for tok in _TOKEN_RE.findall(text)]  # the pattern has no groups: whole matches


def _tokenize(text: str, first_line: int = 1) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for k, line in enumerate(text.split("\n")):
        out.extend(_tokens_of_line(line, first_line + k))
    return out


def _parse_tokens(toks: list[tuple[str, int]], path: str, start_line: int) -> _Raw:
    """Parse the tokens of exactly one bracketed tree (balanced, starting with '(')."""
    where = f"tree starting at line {start_line}"
    stack: list[_Raw] = []
    result: _Raw | None = None
    i = 0
    n = len(toks)
    while i < n:
        tok, line = toks[i]
        if result is not None:
            raise TreeFormatError(path, line, f"text {tok!r} after the end of the {where}",
                                  "put one tree per bracket group and remove stray text")
        if tok == "(":
            label = ""
            if i + 1 < n and toks[i + 1][0] not in ("(", ")"):
                label = toks[i + 1][0]
                i += 1
            node = _Raw(label=label, line=line)
            if stack:
                parent = stack[-1]
                if parent.word is not None:
                    raise TreeFormatError(path, line, f"bracket {label!r} inside preterminal "
                                          f"({parent.label} {parent.word}) ({where})",
                                          "a preterminal holds exactly one word; close it first")
                parent.children.append(node)
            stack.append(node)
        elif tok == ")":
            if not stack:
                raise TreeFormatError(path, line, f"unbalanced ')' ({where})",
                                      "remove the extra closing bracket")
            node = stack.pop()
            if node.word is None and not node.children:
                raise TreeFormatError(path, line, f"constituent ({node.label} ) has no word and no "
                                      f"children ({where}, bracket opened at line {node.line})",
                                      "give the preterminal its word, e.g. (NN dog)")
            if not stack:
                result = node
        else:  # a word
            if not stack:
                raise TreeFormatError(path, line, f"text {tok!r} outside any bracket ({where})",
                                      "wrap words in (TAG word) brackets")
            node = stack[-1]
            if node.children or node.word is not None:
                raise TreeFormatError(path, line, f"stray word {tok!r} in ({node.label} ...) "
                                      f"({where})", "give every word its own (TAG word) bracket")
            if not node.label:
                raise TreeFormatError(path, line, f"word {tok!r} has no POS label ({where})",
                                      "write the word as (TAG word)")
            node.word = tok
        i += 1
    if stack:
        raise TreeFormatError(path, start_line, f"unbalanced brackets: {len(stack)} '(' not closed "
                              f"({where}, innermost opened at line {stack[-1].line})",
                              "add the missing ')' or remove the extra '('")
    if result is None:
        raise TreeFormatError(path, start_line, "no tree found", "give a bracketed tree such as (S (NN x))")
    return result


def _strip_function_tag(label: str) -> str:
    # -LRB-, -NONE-, -RRB- start with '-' and are kept whole.
    if not label or label.startswith("-"):
        return label
    base = re.split(r"[-=]", label, maxsplit=1)[0]
    return base or label


def _strip_empty(raw: _Raw) -> _Raw | None:
    if raw.word is not None:
        return None if raw.label == "-NONE-" else raw
    kids = [k for k in (_strip_empty(c) for c in raw.children) if k is not None]
    if not kids:
        return None
    raw.children = kids
    return raw


def _to_node(raw: _Raw, words: list[str], strip_ft: bool) -> Node:
    if raw.word is not None:
        words.append(raw.word)
        return Node(raw.label, len(words) - 1, len(words))
    start = len(words)
    kids = [_to_node(c, words, strip_ft) for c in raw.children]
    label = _strip_function_tag(raw.label) if strip_ft else raw.label
    return Node(label, start, len(words), kids)


def _build_tree(raw: _Raw, path: str, start_line: int, strip_empty: bool,
                strip_function_tags: bool) -> ConstituencyTree:
    # the outer unlabelled bracket of .mrg files, and ROOT/TOP, are wrappers, not constituents
    while raw.word is None and (raw.label == "" or raw.label in _ROOT_LABELS) and len(raw.children) == 1 \
            and raw.children[0].word is None:
        raw = raw.children[0]
    if strip_empty:
        stripped = _strip_empty(raw)
        if stripped is None:
            raise TreeFormatError(path, start_line, "tree has no words once -NONE- elements are removed",
                                  "drop this tree or read it with strip_empty=False")
        raw = stripped
    words: list[str] = []
    root = _to_node(raw, words, strip_function_tags)
    return ConstituencyTree(words=words, root=root)


def parse_ptb(text: str, *, strip_empty: bool = False, strip_function_tags: bool = False,
              path: str = "<string>", first_line: int = 1) -> ConstituencyTree:
    """Parse one bracketed tree.

    The unlabelled outer bracket of ``.mrg`` files and a single-child ``ROOT``/``TOP``
    wrapper are removed. ``strip_empty`` drops ``-NONE-`` preterminals and constituents
    left without words; ``strip_function_tags`` turns ``NP-SBJ-1`` / ``NP=2`` into ``NP``
    (labels beginning with ``-`` such as ``-LRB-`` and ``-NONE-`` are kept). Unary chains
    are kept as nested nodes.
    """
    toks = _tokenize(text, first_line)
    if not toks:
        raise TreeFormatError(path, first_line, "empty input", "give a bracketed tree such as (S (NN x))")
    if toks[0][0] != "(":
        raise TreeFormatError(path, toks[0][1], f"text {toks[0][0]!r} outside any bracket",
                              "start the tree with '('")
    raw = _parse_tokens(toks, path, toks[0][1])
    return _build_tree(raw, path, toks[0][1], strip_empty, strip_function_tags)


def format_ptb(tree: ConstituencyTree) -> str:
    """One-line bracket string; ``parse_ptb(format_ptb(t)) == t``."""
    words = tree.words
    out: list[str] = []

    def emit(node: Node) -> None:
        if node.is_preterminal:
            out.append(f"({node.label} {words[node.start]})")
            return
        out.append(f"({node.label}" if node.label else "(")
        for c in node.children:
            out.append(" ")
            emit(c)
        out.append(")")

    emit(tree.root)
    return "".join(out)


def read_ptb(path: str | Path, *, strip_empty: bool = False, strip_function_tags: bool = False,
             start: TreePosition | None = None) -> Iterator[ConstituencyTree]:
    """Yield the trees of a bracket file (one per line, or multi-line ``.mrg``; ``.gz`` ok).
    ``start``: from that tree on (:func:`tree_positions`)."""
    p = str(path)
    start = start or TreePosition()
    trees = _iter_ptb_lines(_read_lines(p, start.at), p, strip_empty, strip_function_tags, start.at.line)
    yield from islice(trees, start.skip, None)


def _stray_close(path: str, line: int) -> TreeFormatError:
    return TreeFormatError(path, line, "unbalanced ')' outside any tree", "remove the extra closing bracket")


def _unclosed_at_end(path: str, start: int, depth: int) -> TreeFormatError:
    return TreeFormatError(path, start, f"unbalanced brackets: tree starting at line {start} has "
                           f"{depth} '(' not closed at the end of the file",
                           "add the missing ')' or remove the extra '('")


def _iter_ptb_lines(lines: Iterable[str], path: str, strip_empty: bool,
                    strip_function_tags: bool, first_line: int = 1) -> Iterator[ConstituencyTree]:
    buf: list[tuple[str, int]] = []
    depth = 0
    start = 0
    for lineno, line in enumerate(lines, first_line):
        for tok, ln in _tokens_of_line(line, lineno):
            if depth == 0:
                if tok == ")":
                    raise _stray_close(path, ln)
                if tok != "(":
                    raise TreeFormatError(path, ln, f"text {tok!r} outside any bracket",
                                          "wrap each tree in brackets and remove stray text")
                start = ln
            buf.append((tok, ln))
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth -= 1
                if depth == 0:
                    raw = _parse_tokens(buf, path, start)
                    buf = []
                    yield _build_tree(raw, path, start, strip_empty, strip_function_tags)
    if depth > 0:
        raise _unclosed_at_end(path, start, depth)


def write_ptb(trees: Iterable[ConstituencyTree], path: str | Path) -> int:
    """Write one tree per line (gzip if ``path`` ends in ``.gz``); returns the count."""
    n = 0
    with _open_text(path, "wt") as fh:
        for t in trees:
            fh.write(format_ptb(t) + "\n")
            n += 1
    return n


# ---------------------------------------------------------------------------- dependencies


def _check_tree(heads: list[int], lines: list[int], path: str, start_line: int) -> None:
    """Heads are in range already; require exactly one root and no cycle."""
    n = len(heads)
    if 0 not in heads:
        raise TreeFormatError(path, start_line, f"sentence starting at line {start_line} has no root "
                              "(no word with HEAD 0)", "attach the main predicate to 0")
    roots = [i for i, h in enumerate(heads) if h == 0]
    if len(roots) > 1:
        raise TreeFormatError(path, lines[roots[1]], f"sentence starting at line {start_line} has {len(roots)} roots "
                              f"(words {', '.join(str(r + 1) for r in roots)} have HEAD 0)",
                              "attach all but the main predicate to a word of the sentence")
    state = [0] * n  # 0 unseen, 1 on current path, 2 reaches root
    for i in range(n):
        path_nodes = []
        j = i
        while j >= 0 and state[j] == 0:
            state[j] = 1
            path_nodes.append(j)
            j = heads[j] - 1
        if j >= 0 and state[j] == 1:  # came back onto the current path: cycle
            cyc = [j]
            k = heads[j] - 1
            while k != j:
                cyc.append(k)
                k = heads[k] - 1
            first = min(cyc)
            raise TreeFormatError(path, lines[first], "cycle in the heads through words "
                                  + ", ".join(str(c + 1) for c in sorted(cyc)),
                                  "fix the HEAD column so that every word leads to the root")
        for q in path_nodes:
            state[q] = 2


@dataclass
class ConlluSentence:
    """A CoNLL-U sentence: the tree plus what the tree has no room for."""

    tree: DependencyTree | None  # None: a sentence without heads (read with heads_optional)
    text: str | None = None
    sent_id: str | None = None
    comments: list[str] = field(default_factory=list)
    multiword_tokens: list[tuple[int, int, str]] = field(default_factory=list)
    start_line: int = 0
    words: list[str] = field(default_factory=list)  # the syntactic words (FORM), also without a tree
    upos: list[str] = field(default_factory=list)


def _parse_conllu_block(block: list[tuple[int, str]], path: str, heads_optional: bool = False) -> ConlluSentence:
    start_line = block[0][0]
    comments: list[str] = []
    text = sent_id = None
    words: list[str] = []
    lemmas: list[str] = []
    upos: list[str] = []
    xpos: list[str] = []
    heads: list[int | None] = []  # None: HEAD "_" (words without a tree, where heads_optional)
    deprels: list[str] = []
    lines: list[int] = []
    mwt: list[tuple[int, int, str]] = []
    for lineno, line in block:
        if line.startswith("#"):
            comments.append(line)
            body = line[1:].strip()
            if body.startswith("text") and "=" in body and body.split("=", 1)[0].strip() == "text":
                text = body.split("=", 1)[1].strip()
            elif body.startswith("sent_id") and "=" in body:
                sent_id = body.split("=", 1)[1].strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise TreeFormatError(path, lineno, f"{len(cols)} tab-separated columns instead of 10",
                                  "write ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC separated "
                                  "by single tabs")
        wid = cols[0]
        if "." in wid:  # empty node of enhanced UD: not part of the basic tree
            continue
        if "-" in wid:
            a, _, b = wid.partition("-")
            if not (a.isdigit() and b.isdigit() and int(a) <= int(b)):
                raise TreeFormatError(path, lineno, f"bad multi-word token range {wid!r}",
                                      "write the range as FIRST-LAST, e.g. 1-2")
            mwt.append((int(a) - 1, int(b), cols[1]))
            continue
        if not wid.isdigit() or int(wid) != len(words) + 1:
            raise TreeFormatError(path, lineno, f"word ID {wid!r} where {len(words) + 1} was expected",
                                  "number the words 1, 2, 3, ... in order")
        try:
            h = None if heads_optional and cols[6] == "_" else int(cols[6])
        except ValueError:
            raise TreeFormatError(path, lineno, f"HEAD {cols[6]!r} is not an integer",
                                  "give the 1-based ID of the head word, or 0 for the root") from None
        words.append(cols[1])
        lemmas.append(cols[2])
        upos.append(cols[3])
        xpos.append(cols[4])
        heads.append(h)
        deprels.append(cols[7])
        lines.append(lineno)
    if not words:
        raise TreeFormatError(path, start_line, "sentence has comments but no words",
                              "remove the comments or add the word lines")
    n = len(words)
    if heads_optional and None in heads:  # words only (HEAD "_"): no tree to check, unless some word has a head
        if any(h is not None for h in heads):
            i = next(k for k, h in enumerate(heads) if h is None)
            raise TreeFormatError(path, lines[i], "HEAD '_' in a sentence whose other words have heads",
                                  "give every word of the sentence a head, or none (all '_')")
        return ConlluSentence(tree=None, text=text, sent_id=sent_id, comments=comments, multiword_tokens=mwt,
                              start_line=start_line, words=words, upos=upos)
    for i, h in enumerate(heads):
        if h < 0 or h > n or h == i + 1:
            what = "points at the word itself" if h == i + 1 else f"is out of range 0..{n}"
            raise TreeFormatError(path, lines[i], f"HEAD {h} {what}",
                                  "give the 1-based ID of a word of this sentence, or 0 for the root")
    for a, b, form in mwt:
        if b > n:
            raise TreeFormatError(path, start_line, f"multi-word token {a + 1}-{b} ({form!r}) goes "
                                  f"past the last word {n}", "fix the token range")
    _check_tree(heads, lines, path, start_line)
    tree = DependencyTree(
        words=words, heads=heads, deprels=deprels, upos=upos,
        xpos=None if all(x == "_" for x in xpos) else xpos,
        lemmas=None if all(x == "_" for x in lemmas) else lemmas,
    )
    return ConlluSentence(tree=tree, text=text, sent_id=sent_id, comments=comments,
                          multiword_tokens=mwt, start_line=start_line, words=words, upos=upos)


def read_conllu_sentences(path: str | Path, *, heads_optional: bool = False,
                          start: TreePosition | None = None) -> Iterator[ConlluSentence]:
    """Yield every sentence with its comments, text and multi-word tokens, each checked: 10 columns,
    word IDs in order, integer heads in range, exactly one root, no cycle (:class:`TreeFormatError`
    names the file and line). ``heads_optional``: a sentence whose HEAD column is all ``_`` (a file of
    IDs and forms to be parsed) is yielded with ``tree=None`` and its words. ``start``: from that
    sentence on (:func:`tree_positions`)."""
    p = str(path)
    start = start or TreePosition()
    yield from islice(_conllu_sentences(p, heads_optional, start.at), start.skip, None)


def _conllu_sentences(p: str, heads_optional: bool, at: LinePosition) -> Iterator[ConlluSentence]:
    block: list[tuple[int, str]] = []
    for lineno, line in enumerate(_read_lines(p, at), at.line):
        if not line.strip():
            if block:
                yield _parse_conllu_block(block, p, heads_optional)
                block = []
            continue
        block.append((lineno, line))
    if block:  # no final blank line: fine
        yield _parse_conllu_block(block, p, heads_optional)


def read_conllu_with_text(path: str | Path) -> Iterator[tuple[DependencyTree, str | None]]:
    """Yield ``(tree, text)``; ``text`` is the ``# text =`` comment or None."""
    for s in read_conllu_sentences(path):
        yield s.tree, s.text


def read_conllu(path: str | Path, start: TreePosition | None = None) -> Iterator[DependencyTree]:
    """Yield the dependency trees of a CoNLL-U file (plain or ``.gz``), from ``start`` on."""
    for s in read_conllu_sentences(path, start=start):
        yield s.tree


# ---------------------------------------------------------------------------- positions


@dataclass(frozen=True)
class TreePosition:
    """Where to start reading a tree file to reach one of its trees: at the line ``at``, one that no earlier
    tree runs into, then past ``skip`` trees (those beginning from there before it: several trees on a line)."""

    at: LinePosition = LinePosition()
    skip: int = 0


#: every byte but the brackets, deleted to leave a bracket file's structure
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"()")


def tree_positions(path: str | Path, fmt: str, wanted: Iterable[int]) -> tuple[dict[int, TreePosition], int]:
    """Where each ``wanted`` tree (0-based index) of a CoNLL-U file (``fmt="conllu"``) or a bracket file
    (``"ptb"``) begins, and how many trees the file holds; found without parsing a tree.

    Trees are delimited as the readers delimit them (a CoNLL-U sentence is a run of non-blank lines; a
    bracketed tree begins at a '(' outside any bracket), so that :func:`read_conllu` or :func:`read_ptb`
    started at a position yields the trees from that one on. What the delimiting cannot get past (a ')'
    outside any tree, a tree still open at the end of the file) raises the reader's :class:`TreeFormatError`."""
    wanted = set(wanted)
    starts = _conllu_starts(str(path)) if fmt == "conllu" else _ptb_starts(str(path))
    positions = {}
    count = 0
    for offset, line, skip in starts:
        if count in wanted:
            positions[count] = TreePosition(LinePosition(offset, line), skip)
        count += 1
    return positions, count


#: a line that may be blank (after its newline): only ASCII white space and non-ASCII bytes (decoded to decide)
_MAYBE_BLANK = re.compile(rb"\n([\t\x0b\x0c\r\x1c-\x1f \x80-\xff]*)(?=\n|\Z)")


def _conllu_starts(path: str, block_size: int = 1 << 22) -> Iterator[tuple[int, int, int]]:
    """``(offset, line, 0)`` of the first line of every sentence of a CoNLL-U file: the first non-blank line
    after a blank one. Found block by block (the blank lines by a regular expression, the line numbers by
    counting newlines), not line by line: a CoNLL-U file has a line per word."""
    base, line = 0, 1  # the offset of the block in the file, and the number of its first line
    in_sentence = False
    for block in raw_blocks(path, block_size):
        start = counted = 0  # the first line of the block not yet looked at; where ``line`` is counted to
        for m in _MAYBE_BLANK.finditer(b"\n" + block):  # m.start(): where the line begins in the block
            text = m.group(1)
            if m.start() == len(block) or not (text.isascii() or is_blank(text, base + m.start() == 0)):
                continue  # no line (after the block's last newline), or a line of non-ASCII text
            if m.start() > start and not in_sentence:  # non-blank lines from ``start``: a sentence
                line += block.count(b"\n", counted, start)
                counted = start
                yield base + start, line, 0
            in_sentence = False
            start = m.end()
        if start < len(block) and not in_sentence:
            line += block.count(b"\n", counted, start)
            counted = start
            yield base + start, line, 0
        in_sentence = in_sentence or start < len(block)
        line += block.count(b"\n", counted)
        base += len(block)


def _ptb_starts(path: str) -> Iterator[tuple[int, int, int]]:
    """For every tree of a bracket file: ``(offset, line, skip)`` of the last line before it that began
    outside any tree, and how many trees begin from there before it."""
    offset = depth = 0
    clean, skip = (0, 1), 0
    opened_at = 0  # the line of the latest tree's '('
    for lineno, raw in enumerate(raw_lines(path), 1):
        if depth == 0:
            clean, skip = (offset, lineno), 0
        if b"(" in raw or b")" in raw:
            for bracket in raw.translate(None, _NOT_BRACKETS):
                if bracket == 41:  # ')'
                    if depth == 0:
                        raise _stray_close(path, lineno)
                    depth -= 1
                    continue
                if depth == 0:
                    opened_at = lineno
                    yield clean[0], clean[1], skip
                    skip += 1
                depth += 1
        offset += len(raw)
    if depth > 0:
        raise _unclosed_at_end(path, opened_at, depth)


def format_conllu(tree: DependencyTree, text: str | None = None, feats: list[str] | None = None) -> str:
    """One sentence as CoNLL-U: a ``# text =`` line if ``text`` is given, one line per word
    (LEMMA and XPOS ``_`` where the tree has none; FEATS from ``feats``, one string per
    word, else ``_``), then the blank line that ends the sentence."""
    if feats is not None and len(feats) != len(tree):
        raise ValueError(f"format_conllu: {len(feats)} FEATS for {len(tree)} words")
    lines = [f"# text = {text}\n"] if text is not None else []
    for i in range(len(tree)):
        lines.append("\t".join([
            str(i + 1), tree.words[i], tree.lemmas[i] if tree.lemmas else "_", tree.upos[i] or "_",
            tree.xpos[i] if tree.xpos else "_", feats[i] if feats else "_", str(tree.heads[i]),
            tree.deprels[i] or "_", "_", "_",
        ]) + "\n")
    return "".join(lines) + "\n"


def write_conllu(trees: Iterable[DependencyTree], path: str | Path,
                 texts: Iterable[str | None] | None = None) -> int:
    """Write trees as CoNLL-U (gzip if ``.gz``); ``texts`` adds ``# text =`` lines (:func:`format_conllu`)."""
    text_iter = iter(texts) if texts is not None else None
    n = 0
    with _open_text(path, "wt") as fh:
        for t in trees:
            fh.write(format_conllu(t, next(text_iter, None) if text_iter is not None else None))
            n += 1
    return n


def parse_malt_tab(text: str, path: str = "<string>",
                   upos_of: dict[str, str] | None = None) -> list[DependencyTree]:
    """Parse Malt-TAB text (NLTK ``dependency_treebank`` ``.dp`` files).

    Each word line is ``word<TAB>tag<TAB>head`` with an optional 4th column, the
    relation (``_`` when absent); sentences are separated by blank lines. The tag becomes
    ``xpos``; ``upos`` is ``upos_of[tag]`` when a mapping is given, else the tag itself.
    """
    trees: list[DependencyTree] = []
    block: list[tuple[int, list[str]]] = []

    def flush() -> None:
        if not block:
            return
        start = block[0][0]
        n = len(block)
        words, tags, heads, rels, lines = [], [], [], [], []
        for lineno, cols in block:
            try:
                h = int(cols[2])
            except ValueError:
                raise TreeFormatError(path, lineno, f"head {cols[2]!r} is not an integer",
                                      "give the 1-based position of the head word, or 0 for the root") from None
            if h < 0 or h > n or h == len(words) + 1:
                raise TreeFormatError(path, lineno, f"head {h} out of range 0..{n} or self-attached",
                                      "give the position of another word of this sentence, or 0")
            words.append(cols[0])
            tags.append(cols[1])
            heads.append(h)
            rels.append(cols[3] if len(cols) > 3 else "_")
            lines.append(lineno)
        _check_tree(heads, lines, path, start)
        upos = [upos_of.get(t, "X") for t in tags] if upos_of is not None else list(tags)
        trees.append(DependencyTree(words=words, heads=heads, deprels=rels, upos=upos, xpos=tags))
        block.clear()

    for lineno, line in enumerate(io.StringIO(text), 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            flush()
            continue
        cols = line.split("\t")
        if len(cols) not in (3, 4):
            raise TreeFormatError(path, lineno, f"{len(cols)} tab-separated columns instead of 3 or 4",
                                  "write word, tag, head (and relation) separated by tabs")
        block.append((lineno, cols))
    flush()
    return trees


class PtbSample:
    """NLTK's Penn Treebank sample: ``treebank.zip`` (``treebank/combined/wsj_NNNN.mrg``, gold
    constituency trees) and ``dependency_treebank.zip`` (``wsj_NNNN.dp``, Malt-TAB).

    A missing archive, one that is not a zip, or a member that cannot be read (a truncated copy) is a
    :class:`~structnmt.errors.UserError` naming the archive (and the member).
    """

    NAMES = ("treebank.zip", "dependency_treebank.zip")

    def __init__(self, folder: str | Path):

        self.folder = Path(folder)
        self._zips = {}
        for name in self.NAMES:
            path = self.folder / name
            if not path.is_file():
                raise UserError(f"{path}: not found; give the PTB sample folder (../shared/data/ptb_sample), "
                                f"which holds {' and '.join(self.NAMES)}.")
            try:
                self._zips[name] = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as err:
                raise UserError(f"{path} is not a readable zip archive ({err}); copy the PTB sample again "
                                "(../shared/data/ptb_sample).") from None

    def mrg_names(self) -> list[str]:
        """The ``.mrg`` members of ``treebank/combined/``, sorted (``wsj_0001`` first)."""
        names = self._zips["treebank.zip"].namelist()
        return sorted(n for n in names if n.startswith("treebank/combined/") and n.endswith(".mrg"))

    def dp_names(self) -> dict[str, str]:
        """``{stem: member}`` of the ``.dp`` files (``wsj_0001`` -> its member name)."""
        return {Path(n).stem: n for n in self._zips["dependency_treebank.zip"].namelist() if n.endswith(".dp")}

    def _text(self, archive: str, member: str) -> str:

        try:
            data = self._zips[archive].read(member)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
            raise UserError(f"{self.folder / archive}: member {member} cannot be read ({err}); the archive is "
                            "damaged or truncated: copy the PTB sample again (../shared/data/ptb_sample).") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"{self.folder / archive}: member {member} is not UTF-8 text ({err}); copy the PTB "
                            "sample again (../shared/data/ptb_sample).") from None

    def constituency(self, member: str) -> list[ConstituencyTree]:
        """The gold trees of one ``.mrg`` member, ``-NONE-`` elements and function tags removed."""
        return list(_iter_ptb_lines(self._text("treebank.zip", member).splitlines(),
                                    f"treebank.zip:{member}", True, True))

    def dependency(self, member: str, upos_of: dict[str, str] | None = None) -> list[DependencyTree]:
        """The trees of one ``.dp`` member (:func:`parse_malt_tab`)."""
        return parse_malt_tab(self._text("dependency_treebank.zip", member),
                              f"dependency_treebank.zip:{member}", upos_of=upos_of)
