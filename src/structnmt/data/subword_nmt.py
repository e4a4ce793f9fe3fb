"""subword-nmt BPE (Sennrich et al. 2016), the segmentation the papers and fairseq's example
scripts use, as a vocabulary backend beside SentencePiece.

The merges are learned and applied by the ``subword-nmt`` package itself (``learn_bpe``,
``apply_bpe.BPE``), on whitespace-separated tokens; a piece that a word continues ends with the
separator ``@@`` ("Stra@@ ße"). The pieces are subword-nmt's own, so ``Stra@@`` and ``Stra``
are two pieces and ``the`` as a word and as the end of ``ba@@ the`` are one, exactly as in a
fairseq dictionary built from the same BPE'd text.

The inventory is what fairseq's ``preprocess`` keeps: every piece of the BPE'd training text
(both sides for a joint vocabulary), most frequent first (ties in code-point order), after the
four special pieces ``<pad>`` ``<unk>`` ``<s>`` ``</s>`` at ids 0-3 (fairseq also pads its dictionary
to a multiple of 8 with entries no text reaches; those are not added). A piece not in it (a character
never seen in training as that piece) reads as ``<unk>``, and so does a literal ``<s>``, ``</s>`` or
``<pad>`` in the text, never the control id.

Tokens are split at any whitespace (``str.split``); subword-nmt's scripts split at spaces only, which
is the same on space-separated text such as Moses-tokenized text, the pipeline it is meant for. A
literal ``@@`` ending a word is read as subword-nmt and fairseq read it: the word continues into the
next one (``decode`` joins them).

The model travels as one byte string (:meth:`SubwordNmtModel.to_bytes`: a header line, then JSON
with the codes and the pieces), which is what a dataset's ``bpe.model`` file holds and a
checkpoint keeps, like a SentencePiece ``.model``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterable

from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

MAGIC = b"structnmt subword-nmt 1\n"
"""The first line of a subword-nmt model's bytes (a SentencePiece model starts with a protobuf tag)."""

SEPARATOR = "@@"
"""subword-nmt's mark of a piece that the next piece continues."""

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
"""The pieces at ids 0-3 (pad, unk, bos, eos), as in every structnmt vocabulary."""

WORD_START = "\u2581"
"""SentencePiece's word-start mark, which :meth:`SubwordNmtModel.marked` puts on each word's first piece."""

_WORD = re.compile(r"\S+")


class SubwordNmtError(ValueError):
    """Bytes or codes that are not a subword-nmt model this module wrote."""


def word_counts(lines: Iterable[str]) -> Counter[str]:
    """How often each whitespace-separated token of ``lines`` occurs: all that learning the merges and
    the inventory read, so the training text is streamed once and never held."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(line.split())
    return counts


def learn_codes(words: Counter[str], merges: int, *, progress: bool = False) -> tuple[str, int]:
    """``merges`` BPE merge operations learned by subword-nmt's ``learn_bpe`` from the token counts
    ``words`` (:func:`word_counts`; minimum pair frequency 2, its default): (the codes file's text, the
    number of merges learned, fewer when no pair occurs twice any more)."""
    listing = io.StringIO("".join(f"{w} {c}\n" for w, c in words.items()))
    out = io.StringIO()
    quiet = contextlib.redirect_stderr(io.StringIO()) if not progress else contextlib.nullcontext()
    with quiet:
        try:
            learn_bpe(listing, out, merges, is_dict=True)
        except ValueError:  # no pair at all (every token a single character): no merges
            out = io.StringIO("#version: 0.2\n")
    codes = out.getvalue()
    return codes, len(_code_lines(codes))


def _code_lines(codes: str) -> list[str]:
    """The merge lines of a codes file's text (without its ``#version`` header)."""
    lines = codes.rstrip("\n").split("\n") if codes.strip() else []
    return [line for line in lines if not line.startswith("#version:")]


class SubwordNmtModel:
    """Codes and a piece inventory: text <-> pieces <-> ids, with the lookups of a
    SentencePiece processor (``id_to_piece``, ``piece_to_id``, ``get_piece_size``) but no
    encoder of its own: encode with :meth:`encode` / :meth:`spans`."""

    def __init__(self, codes: str, pieces: list[str]) -> None:
        lines = _code_lines(codes)
        for i, line in enumerate(lines, 1):
            if len(line.split(" ")) != 2:
                raise SubwordNmtError(f"merge {i} of the BPE codes is not two pieces separated by a space: {line!r}")
        if tuple(pieces[:4]) != SPECIALS or len(set(pieces)) != len(pieces):
            raise SubwordNmtError("the piece inventory does not start with <pad> <unk> <s> </s> or repeats a piece")
        self.codes = codes
        self.pieces = list(pieces)
        self.index = {p: i for i, p in enumerate(self.pieces)}
        # subword-nmt reads no codes file without a merge: then every word is its characters, as its merges would leave it
        self.bpe = BPE(io.StringIO(codes), separator=SEPARATOR) if lines else None

    @classmethod
    def build(cls, codes: str, words: Counter[str]) -> tuple[SubwordNmtModel, Counter[str]]:
        """The model of ``codes`` whose inventory is every piece of the text of token counts ``words``
        BPE'd, most frequent first; and each piece's count."""
        model = cls(codes, list(SPECIALS))
        counts: Counter[str] = Counter()
        for word, n in words.items():
            for piece in model.segment(word):
                counts[piece] += n
        for special in SPECIALS:  # a literal "<s>" in the text reads as <unk>, never as the control piece
            counts.pop(special, None)
        return cls(codes, list(SPECIALS) + sorted(counts, key=lambda p: (-counts[p], p))), counts

    # serialization -----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The model as a ``bpe.model`` file and a checkpoint keep it: :data:`MAGIC`, then JSON."""
        return MAGIC + json.dumps({"codes": self.codes, "pieces": self.pieces}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> SubwordNmtModel:
        """The model of :meth:`to_bytes`'s bytes; :class:`SubwordNmtError` for anything else."""
        if not data.startswith(MAGIC):
            raise SubwordNmtError("not a subword-nmt model written by structnmt (its first line differs)")
        try:
            body = json.loads(data[len(MAGIC):].decode("utf-8"))
            return cls(body["codes"], body["pieces"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise SubwordNmtError(f"a subword-nmt model whose body cannot be read ({type(err).__name__})") from None

    # the lookups of a SentencePiece processor ---------------------------------------------------
    def get_piece_size(self) -> int:
        """The number of pieces, specials included."""
        return len(self.pieces)

    def id_to_piece(self, i: int) -> str:
        """The piece of id ``i`` as subword-nmt writes it (``stra@@``)."""
        return self.pieces[i]

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece of the inventory (a special included), ``<unk>`` (1) otherwise."""
        return self.index.get(piece, 1)

    # text <-> pieces ------------------------------------------------------------------------------
    def segment(self, line: str) -> list[str]:
        """subword-nmt's pieces of ``line`` (split at whitespace), e.g. ``["Stra@@", "ße"]``."""
        return self._segment_words(line.split())

    def _segment_words(self, words: list[str]) -> list[str]:
        """The pieces of whitespace-free ``words``."""
        if self.bpe is not None:
            return self.bpe.segment_tokens(words)
        return [piece for w in words for piece in [c + SEPARATOR for c in w[:-1]] + [w[-1]]]

    def piece_id(self, piece: str) -> int:
        """The id a piece of text reads as: its own, or ``<unk>`` (1) for a piece outside the inventory
        and for a literal special (``<s>`` in the text is not the control piece)."""
        i = self.index.get(piece, 1)
        return 1 if i < 4 else i

    def encode(self, line: str) -> list[int]:
        """The piece ids of ``line`` (without EOS)."""
        return [self.piece_id(p) for p in self.segment(line)]

    def spans(self, line: str) -> list[tuple[int, int, int]]:
        """``(id, begin, end)`` of every piece of ``line``, with its bytes' offsets in ``line``'s UTF-8
        encoding (SentencePiece's convention, which :func:`structnmt.syntax.align.piece_char_spans` reads)."""
        byte_at = [0]
        for ch in line:
            byte_at.append(byte_at[-1] + len(ch.encode("utf-8")))
        out = []
        for word in _WORD.finditer(line):
            begin = word.start()
            pieces = self._segment_words([word.group()])
            for k, piece in enumerate(pieces):  # every piece but the word's last ends with the separator
                n = len(piece) - (len(SEPARATOR) if k < len(pieces) - 1 else 0)
                end = min(begin + n, word.end())
                out.append((self.piece_id(piece), byte_at[begin], byte_at[end]))
                begin = end
        return out

    def decode(self, ids: list[int]) -> str:
        """The text of piece ids (specials skipped, ``<unk>`` kept as such), separators removed as
        fairseq's ``--remove-bpe`` does."""
        text = " ".join(self.pieces[i] for i in ids if i >= 4 or i == 1)
        return (text + " ").replace(SEPARATOR + " ", "").rstrip(" ")

    @staticmethod
    def marked(pieces: list[str]) -> list[str]:
        """The pieces in SentencePiece's convention (``▁`` on each word's first piece, no separator),
        for the code that finds words by it: ``["Stra@@", "ße", "a"]`` -> ``["▁Stra", "ße", "▁a"]``."""
        out, start = [], True
        for p in pieces:
            cont = p.endswith(SEPARATOR) and p not in SPECIALS
            text = p[: -len(SEPARATOR)] if cont else p
            out.append(WORD_START + text if start else text)
            start = not cont
        return out
