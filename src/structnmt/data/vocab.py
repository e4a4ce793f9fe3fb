"""Vocabularies (SentencePiece, or subword-nmt BPE: :mod:`structnmt.data.subword_nmt`) with fixed special ids.

Every vocabulary uses ``pad=0, unk=1, bos=2, eos=3`` so that models, collators and
beam search never need to ask which id is which.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import sentencepiece as spm

from ..errors import UserError
from ..fileio.files import atomic_path, atomic_write_text
from ..syntax.features import word_of_piece_from_pieces
from .moses import moses_detokenize, moses_pretokenize
from .subword_nmt import MAGIC, SubwordNmtError, SubwordNmtModel, learn_codes, word_counts

PAD, UNK, BOS, EOS = 0, 1, 2, 3


class VocabError(UserError, ValueError):
    """A vocabulary file that is missing or not a SentencePiece or subword-nmt model."""


class VocabSizeError(UserError, RuntimeError):
    """A SentencePiece size below what the text needs: its 4 special pieces (pad, unk, bos, eos) and one piece
    per distinct character. ``needed``: the smallest size SentencePiece takes for this text (None where it did not
    say). A RuntimeError too, as SentencePiece's own errors are, for the callers that catch those."""

    def __init__(self, asked: int, needed: int | None):
        self.asked, self.needed = asked, needed
        need = f"at least {needed:,}" if needed else "more than 4"
        super().__init__(f"a SentencePiece model of {asked:,} pieces is too small for this text: it needs {need} (its "
                         "4 special pieces and one for each distinct character)")


def _pieces_needed(err: RuntimeError) -> int | None:
    """The size SentencePiece's "smaller than required_chars" error asks for (``... 8 vs 41``), or None."""
    found = re.search(r"smaller than required_chars\.\s*\d+\s*vs\s*(\d+)", str(err))
    return int(found.group(1)) if found else None


class Vocab:
    """A trained SentencePiece or subword-nmt model: text <-> piece ids.

    ``sp``: the SentencePiece processor, or for subword-nmt the model (:class:`SubwordNmtModel`), which
    has the same id/piece lookups and no encoder: text is encoded through this class (:meth:`encode`,
    :meth:`encode_spans`), so both backends read text the same way; ``bpe`` is that model, or None.

    ``lowercase``: the model was trained on lowercased text (``structnmt prepare
    --lowercase``), so every text is lowercased (``str.lower``) before it is encoded.
    ``moses``: the language of a side pre-tokenized with Moses (``structnmt prepare
    --moses``, :mod:`structnmt.data.moses`): every text is normalised and tokenized before
    it is encoded (then lowercased, fairseq's order), and :meth:`decode` detokenizes. Both
    are part of the vocabulary's identity (:attr:`sha256`) and travel with it in the
    manifest and the checkpoint (:meth:`options`), so a model never reads text in a form it
    was not trained on. A joint vocabulary of a ``--moses`` dataset is two ``Vocab``
    objects over one model, one per language.
    """

    def __init__(self, model_path: str | Path | None = None, *, proto: bytes | None = None, lowercase: bool = False,
                 moses: str | None = None):
        """From a model file (a SentencePiece ``.model`` or a subword-nmt ``bpe.model``), or from the
        bytes of one (``proto``, as a checkpoint keeps it)."""
        self.lowercase = bool(lowercase)
        self.moses = moses or None
        self.path = Path(model_path) if model_path is not None else None
        where = self.path if self.path is not None else "the checkpoint's vocabulary"
        if proto is None:
            if not self.path.is_file():
                raise VocabError(f"{self.path}: no such vocabulary model; give the directory `structnmt prepare` "
                                 "wrote (prepare it again if the file was removed).")
            try:
                proto = self.path.read_bytes()
            except OSError as err:
                raise VocabError(f"{self.path}: cannot be read ({err.strerror or type(err).__name__}); "
                                 "check its permissions.") from None
        self.bpe: SubwordNmtModel | None = None
        self.sp: spm.SentencePieceProcessor | SubwordNmtModel
        try:
            if not proto:
                raise SubwordNmtError("the file is empty")
            if proto.startswith(MAGIC):
                self.bpe = SubwordNmtModel.from_bytes(proto)
                self.sp = self.bpe
            else:
                self.sp = spm.SentencePieceProcessor(model_proto=proto)
        except (RuntimeError, OSError, SubwordNmtError) as err:
            raise VocabError(f"{where}: not a readable SentencePiece or subword-nmt model "
                             f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); "
                             "prepare the dataset again.") from None
        if self.bpe is None and (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (
                PAD, UNK, BOS, EOS):  # a subword-nmt model's specials are checked when it is read
            raise VocabError(f"{where}: a SentencePiece model with other special ids than structnmt's (pad 0, unk 1, "
                             "bos 2, eos 3); prepare the dataset with structnmt prepare.")

    @property
    def proto(self) -> bytes:
        """The serialized model: the bytes of its ``.model`` file (SentencePiece or subword-nmt)."""
        return self.bpe.to_bytes() if self.bpe is not None else self.sp.serialized_model_proto()

    @property
    def sha256(self) -> str:
        """Identity of the pieces: SHA-256 of the serialized model (and of the text's form, when set)."""
        form = (b"\0lowercase" if self.lowercase else b"") + (f"\0moses:{self.moses}".encode() if self.moses else b"")
        return hashlib.sha256(self.proto + form).hexdigest()

    def options(self) -> dict:
        """The text's form as a manifest or checkpoint entry keeps it: ``Vocab(path, **entry_options(entry))``."""
        return {**({"lowercase": True} if self.lowercase else {}), **({"moses": self.moses} if self.moses else {})}

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def normalize(self, lines: list[str]) -> list[str]:
        """The texts as the model reads them: Moses-tokenized for a ``moses`` vocabulary, then
        lowercased for a ``lowercase`` one; otherwise as given."""
        if self.moses:
            lines = [moses_pretokenize(line, self.moses) for line in lines]
        return [line.lower() for line in lines] if self.lowercase else lines

    def encode(self, lines: list[str]) -> list[list[int]]:
        lines = self.normalize(lines)
        if self.bpe is not None:
            return [self.bpe.encode(line) for line in lines]
        return self.sp.encode(lines, out_type=int)

    def encode_pieces(self, lines: list[str]) -> list[list[str]]:
        """The pieces of each text (their surface, also where the id is ``<unk>``) in SentencePiece's
        convention (a word's first piece starts with ``▁``), whatever the backend (:meth:`pieces`)."""
        lines = self.normalize(lines)
        if self.bpe is not None:
            return [self.bpe.marked(self.bpe.segment(line)) for line in lines]
        return self.sp.encode(lines, out_type=str)

    def encode_spans(self, lines: list[str]) -> list[list[tuple[int, int, int]]]:
        """``(id, begin, end)`` of every piece of each text as given (not normalized: the caller aligns
        pieces to the characters of that text), with its bytes' offsets in the text's UTF-8 encoding
        (SentencePiece's convention; :func:`structnmt.syntax.align.piece_char_spans` turns them into
        characters' offsets)."""
        if self.bpe is not None:
            return [self.bpe.spans(line) for line in lines]
        return [[(p.id, p.begin, p.end) for p in proto.pieces] for proto in self.sp.encode(lines, return_type="proto")]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The pieces of ``ids`` in SentencePiece's convention, the one the word-finding code reads (a word's
        first piece starts with ``▁``): a subword-nmt vocabulary's ``Stra@@ ße`` reads ``▁Stra ße``."""
        raw = [self.sp.id_to_piece(int(i)) for i in ids]
        return self.bpe.marked(raw) if self.bpe is not None else raw

    def word_of_piece(self, ids: Iterable[int]) -> np.ndarray:
        """``(P,)`` int64 word index of each piece of ``ids`` (:func:`structnmt.syntax.features.word_of_piece_from_pieces`)."""

        return word_of_piece_from_pieces(self.pieces(ids))

    def decode(self, ids: list[int]) -> str:
        """Detokenised text (Moses-detokenized too for a ``moses`` vocabulary); stops at the first
        EOS and skips BOS/PAD."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i in (PAD, BOS):
                continue
            out.append(int(i))
        text = self.bpe.decode(out) if self.bpe is not None else self.sp.decode(out)
        return moses_detokenize(text, self.moses) if self.moses else text


def vocab_pair(root: Path, files: dict[str, str], entries: dict) -> tuple[Vocab, Vocab]:
    """(source, target) vocabularies of the model files ``files`` (side -> file name) in ``root``, with the
    text forms of a manifest's ``entries`` (side -> entry): one object where both sides share the file and
    the form, two otherwise (a ``--moses`` joint model: one per language)."""
    options = {side: entry_options(entries.get(side, {})) for side in ("src", "tgt")}
    src = Vocab(root / files["src"], **options["src"])
    same = files["src"] == files["tgt"] and options["src"] == options["tgt"]
    return src, (src if same else Vocab(root / files["tgt"], **options["tgt"]))


def entry_options(entry: dict) -> dict:
    """The ``Vocab`` keyword arguments (``lowercase``, ``moses``) of a manifest's or checkpoint's
    vocabulary entry; an entry written before an option existed has it off."""
    return {"lowercase": bool(entry.get("lowercase", False)), "moses": entry.get("moses") or None}


def train_sentencepiece(
    lines: Iterable[str],
    model_prefix: str | Path,
    *,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    seed_sentencepiece_size: int = 1_000_000,
    num_threads: int = 2,
    lowercase: bool = False,
) -> Vocab:
    """Train a SentencePiece model from a stream of lines.

    SentencePiece samples at most ``max_sentences`` of the stream (shuffled), so memory
    stays bounded for WMT-size corpora. ``lowercase``: trained on the lowercased lines,
    and the returned vocabulary lowercases what it encodes.
    """

    if vocab_size <= EOS + 1:  # SentencePiece's own error is an internal one about inserting its eos piece
        raise VocabSizeError(vocab_size, None)
    it: Iterator[str] = (line.lower() for line in lines) if lowercase else iter(lines)
    model = io.BytesIO()  # written here, not by SentencePiece: a full disk is then an OSError naming the file
    try:
        _train_spm(it, model, vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
                   max_sentences=max_sentences, seed_sentencepiece_size=seed_sentencepiece_size,
                   num_threads=num_threads)
    except RuntimeError as err:
        needed = _pieces_needed(err)
        if needed is None:
            raise
        raise VocabSizeError(vocab_size, needed) from None

    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with atomic_path(f"{model_prefix}.model") as tmp:
        tmp.write_bytes(model.getvalue())
    # the vocabulary listing SentencePiece writes beside its model, byte for byte: piece, tab, score (%g)
    atomic_write_text(f"{model_prefix}.vocab",
                      "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size())))
    return Vocab(f"{model_prefix}.model", lowercase=lowercase)


def _train_spm(it: Iterator[str], model: io.BytesIO, *, vocab_size: int, model_type: str, character_coverage: float,
               max_sentences: int, seed_sentencepiece_size: int, num_threads: int) -> None:
    """SentencePiece's trainer on the sentences of ``it``, its model written into ``model``."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=it,
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        seed_sentencepiece_size=seed_sentencepiece_size,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        hard_vocab_limit=False,
        num_threads=num_threads,
        minloglevel=2,
    )


def train_subword_nmt(lines: Iterable[str], model_prefix: str | Path, *, merges: int, lowercase: bool = False,
                      progress: bool = False) -> tuple[Vocab, int]:
    """Learn ``merges`` subword-nmt BPE merges from a stream of lines (:mod:`structnmt.data.subword_nmt`) and
    write ``{prefix}.model`` (what :class:`Vocab` reads), ``{prefix}.codes`` (subword-nmt's codes file, for
    ``subword-nmt apply-bpe -c``) and ``{prefix}.vocab`` (each piece and its count in the BPE'd training text,
    fairseq's dictionary format). ``lowercase`` as in :func:`train_sentencepiece`. Returns the vocabulary and
    the number of merges learned."""

    words = word_counts(line.lower() for line in lines) if lowercase else word_counts(lines)
    codes, learned = learn_codes(words, merges, progress=progress)
    model, counts = SubwordNmtModel.build(codes, words)
    with atomic_path(f"{model_prefix}.model") as tmp:
        tmp.write_bytes(model.to_bytes())
    atomic_write_text(f"{model_prefix}.codes", codes)
    atomic_write_text(f"{model_prefix}.vocab", "".join(f"{p} {counts[p]}\n" for p in model.pieces[4:]))
    return Vocab(f"{model_prefix}.model", lowercase=lowercase), learned
