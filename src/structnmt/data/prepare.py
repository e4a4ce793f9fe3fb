"""``structnmt prepare``: parallel text -> validated, subword-encoded, memory-mapped dataset.

Layout of a prepared directory::

    manifest.json            config, input hashes, counts per split, vocabulary sizes
    spm.model | spm.src.model + spm.tgt.model     SentencePiece model(s) (with .vocab listings)
    bpe.model | bpe.src.model + bpe.tgt.model     or subword-nmt model(s) (``subword="subword-nmt"``),
                             with subword-nmt's .codes files and fairseq-style .vocab listings
    {split}.{side}.bin       int32 piece ids of all sentences, concatenated (side = src | tgt)
    {split}.{side}.idx       int64 offsets, n+1 entries: sentence i is bin[idx[i]:idx[i+1]]
    {split}.lines            int64 1-based line number in the input of every kept pair
    {split}.ref.txt          raw target text of kept pairs (valid/test only, for BLEU)
    {split}.src.txt          raw source text of kept pairs (valid/test only, for decoding)
    {split}.src.wop.bin      int32 word index of every source piece (with a parser; offsets = src.idx)
    {split}.src.trees.bin    UTF-8 JSON of the word-level trees of every kept source sentence
    {split}.src.trees.idx    int64 byte offsets into trees.bin, n+1 entries

Parsing (``parser.name`` other than ``none``) happens here and only here: the source
side is parsed by the configured backend (:mod:`structnmt.syntax.parsers`), aligned to
the pieces through character offsets (:mod:`structnmt.syntax.align`), and
stored at word level with the alignment. A source line whose parser words cannot be
found in its text is dropped with its target, counted (``dropped_unaligned``) and its
first line numbers reported; never silently misaligned.

Everything streams: files are read twice (once for the SentencePiece sample or subword-nmt's
token counts, once to encode), encoded in chunks and appended to the ``.bin`` files, so a corpus of millions
of pairs never sits in memory. Re-running with the same config on inputs with the same
SHA-256 reuses the directory; a changed input or config is detected and the dataset
is rebuilt (and the reason printed).

``workers`` (``prepare --workers N``) encodes each split in N processes, each a contiguous part of
it (:mod:`structnmt.data.shards`): the encoding, the parsing (spaCy) or the reading of the given
trees, and their alignment with the pieces. Each part is written to files of its own and the parts
are concatenated in order: the dataset is the same, byte for byte, as one process writes (the
manifest too, but for its ``seconds``), so a dataset's fingerprint does not depend on ``workers``,
which the manifest does not record.

Over-long pairs (more than ``max_len`` pieces on either side) are dropped from the
training split. In valid/test splits they are kept with their pieces cut to
``max_len`` (``eval_too_long="truncate"``, the default: the raw text stays whole, so
BLEU is computed on every reference; a pair whose parsed source is too long is dropped,
since its trees cover the whole sentence) or dropped (``"drop"``); both are counted.

The destination directory is never a place to lose files: ``prepare`` builds in a new
hidden directory beside it and then moves its files in. It replaces only files it
wrote itself (the manifest lists them under ``files``), refuses a non-empty directory
that is not a prepared dataset (no ``manifest.json``), a path that is a file, and a
new file whose name is taken by a file it did not write.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np
from tqdm import tqdm

from ..fileio.corpus import (
    CorpusError,
    PairStats,
    count_lines,
    file_digest,
    read_lines,
    read_pairs,
    resolve,
)
from ..fileio.files import errors_name, temp_dir_beside
from ..fileio.resumable import chunked
from ..syntax.align import AlignmentError, align_trees
from ..syntax.parsers import Parsed, ParserConfig, build_parser, resolve_pipeline
from ..syntax.trees import node_to_list
from .lock import claim_dataset
from .moses import has_rules, moses_pretokenize
from .shards import Shard, merge_shard_files, plan_shards, run_shards
from .vocab import Vocab, train_sentencepiece, train_subword_nmt

FORMAT_VERSION = 2


@dataclass
class PrepareConfig:
    source_lang: str
    target_lang: str
    trainpref: str
    validpref: str | None = None
    testprefs: list[str] = field(default_factory=list)
    joint_vocab: bool = True
    vocab_size: int = 10000  # joint, or per side when joint_vocab is False
    tgt_vocab_size: int = 0  # separate vocabularies only; 0 = same as vocab_size
    model_type: str = "bpe"  # bpe | unigram
    max_len: int = 256  # pieces per side; longer training pairs are dropped and counted
    eval_too_long: str = "truncate"  # valid/test pairs over max_len: truncate | drop (both counted)
    spm_max_sentences: int = 2_000_000
    chunk: int = 10000
    parser: ParserConfig = field(default_factory=ParserConfig)
    # both sides lowercased (str.lower) before SentencePiece; the vocabularies keep the flag, so
    # translation lowercases its input too. The raw references stay as they are (for BLEU).
    lowercase: bool = False
    # each side normalised and Moses-tokenized (its own language) before SentencePiece, as
    # fairseq's example scripts do (structnmt.data.moses); the vocabularies keep each side's language, so
    # translation pre-tokenizes its input and detokenizes its output. Raw references stay raw.
    moses: bool = False
    # the subword segmentation: SentencePiece (vocab_size, model_type) or subword-nmt BPE (merges), the
    # papers' and fairseq's (structnmt.data.subword_nmt); its inventory is every piece of the BPE'd training text
    subword: str = "sentencepiece"  # sentencepiece | subword-nmt
    merges: int = 10000  # subword-nmt merge operations (joint, or per side when joint_vocab is False)


SUBWORDS = ("sentencepiece", "subword-nmt")


def _split_files(cfg: PrepareConfig) -> dict[str, tuple[Path, Path]]:
    splits: dict[str, tuple[Path, Path]] = {
        "train": (resolve(cfg.trainpref, cfg.source_lang), resolve(cfg.trainpref, cfg.target_lang))
    }
    if cfg.validpref:
        splits["valid"] = (resolve(cfg.validpref, cfg.source_lang), resolve(cfg.validpref, cfg.target_lang))
    for i, pref in enumerate(cfg.testprefs):
        name = "test" if i == 0 else f"test{i}"
        splits[name] = (resolve(pref, cfg.source_lang), resolve(pref, cfg.target_lang))
    return splits


def _parser_version(cfg: ParserConfig) -> str:
    """What identifies the parser's output besides its config (package versions)."""
    if cfg.name != "spacy":
        return cfg.name
    try:
        import spacy


        package = resolve_pipeline(cfg.pipeline)
        return f"spacy {spacy.__version__}, {package} {spacy.util.get_package_version(package or cfg.pipeline)}"
    except ImportError:  # the backend reports a missing spaCy with its own message
        return "spacy (not installed)"


def _manifest_key(cfg: PrepareConfig, digests: dict) -> dict:
    config = asdict(cfg)
    for option in ("lowercase", "moses"):  # datasets prepared before an option existed stay up to date
        if not config[option]:
            del config[option]
    if config["subword"] == "sentencepiece":
        del config["subword"], config["merges"]
    return {"version": FORMAT_VERSION, "config": config, "inputs": digests,
            "parser_version": _parser_version(cfg.parser)}


def _nonempty_source_lines(path: Path, numbers: deque, shard: Shard) -> Iterator[str]:
    """Stripped non-empty lines of ``path`` (of its ``shard``); their line numbers are appended to ``numbers``."""
    for lineno, line in enumerate(islice(read_lines(path, shard.src), shard.count), start=shard.src.line):
        text = line.strip()
        if text:
            numbers.append(lineno)
            yield text


def _trees_json(parsed: Parsed) -> bytes:
    dep, const = parsed.dependency, parsed.constituency
    obj: dict = {}
    if dep is not None:
        obj["dep"] = [dep.words, dep.heads, dep.deprels, dep.upos, dep.xpos]
    if const is not None:
        obj["const"] = [const.words, node_to_list(const.root)]
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def prepare(cfg: PrepareConfig, out_dir: str | Path, *, workers: int = 1, progress: bool = True, log=print) -> dict:
    """Build (or reuse) the dataset in ``out_dir``; returns the manifest.

    ``workers``: processes encoding each split, each a contiguous part (the same dataset as with 1). They
    are spawned: a script that calls this with ``workers`` above 1 needs Python's ``if __name__ ==
    "__main__":`` guard."""
    out = Path(out_dir)
    _check_workers(workers, cfg.parser)
    if cfg.eval_too_long not in ("truncate", "drop"):
        raise CorpusError(f"eval_too_long={cfg.eval_too_long!r}: choose truncate or drop.")
    if cfg.subword not in SUBWORDS:
        raise CorpusError(f"subword={cfg.subword!r}: choose {' or '.join(SUBWORDS)}.")
    if cfg.subword == "subword-nmt" and cfg.merges < 0:
        raise CorpusError(f"merges={cfg.merges}: the number of subword-nmt merge operations is 0 or more.")
    if cfg.lowercase and cfg.parser.name != "none":
        raise CorpusError(f"--lowercase with the parser {cfg.parser.name!r}: lowercasing is for unparsed data only "
                          "(a parser reads the cased text); drop --lowercase or use --parser none.")
    if cfg.moses and cfg.parser.name != "none":
        raise CorpusError(f"--moses with the parser {cfg.parser.name!r}: Moses tokenization is for unparsed data only "
                          "(the parser's words are aligned to the raw text); drop --moses or use --parser none.")
    old = existing_manifest(out)  # refuses a destination that is not ours before any work
    splits = _split_files(cfg)
    workers, n_process, notes = capped_processes(cfg, workers, splits)
    # spaCy's processes capped for this machine in the parser that runs, not in the config the manifest keeps
    backend = build_parser(replace(cfg.parser, n_process=n_process))  # fails early: an unknown parser, no pipeline
    digests = {str(p): file_digest(p) for pair in splits.values() for p in pair}
    key = _manifest_key(cfg, digests)
    if old is not None:
        if {k: old.get(k) for k in key} == key and not old.get("installing"):
            log(f"prepare: {out} is up to date with its inputs; reusing it.")
            return old
        changed = [p for p in digests if old.get("inputs", {}).get(p) != digests[p]]
        reason = f"inputs changed: {', '.join(changed)}" if changed else "the prepare config changed"
        log(f"prepare: {out} is stale ({reason}); rebuilding.")
    for note in notes:
        log(note)

    held = claim_dataset(out)  # a training that reads the old dataset: refused before any work
    out.parent.mkdir(parents=True, exist_ok=True)

    _remove_leftovers(out, log)  # a killed prepare's half-built directory (none another live prepare holds)
    tmp = temp_dir_beside(out, ".prepare-")
    alive = _hold(tmp)  # while this prepare lives, its directory is not a leftover
    try:
        with errors_name(out, tmp):
            manifest = _build_dataset(cfg, splits, backend, key, tmp, workers=workers, progress=progress, log=log)
        _install(tmp, out, old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
        alive.close()
        _lock_of(tmp).unlink(missing_ok=True)
        if held is not None:
            held.close()
    return manifest


def _check_workers(workers: int, parser: ParserConfig) -> None:
    """Refuse a worker count below 1, and spaCy's own processes beside several workers."""
    if workers < 1:
        raise CorpusError(f"--workers {workers}: give 1 or more processes.")
    if workers > 1 and parser.n_process > 1:
        raise CorpusError(f"--workers {workers} with --spacy-processes {parser.n_process}: each worker parses its "
                          "own part of the corpus with spaCy, so give --workers alone (--spacy-processes 1).")


def capped_processes(cfg: PrepareConfig, workers: int, splits: dict[str, tuple[Path, Path]]
                     ) -> tuple[int, int, list[str]]:
    """``(workers, spaCy processes, notes)``: ``workers`` and ``cfg.parser.n_process`` capped
    (:func:`structnmt.machine.device.cap_workers`) at the CPUs and at what the largest split gives them: a worker
    encodes at least a line, a spaCy process parses whole batches of ``cfg.parser.batch_size`` lines. Only
    as many lines as could matter are read. ``notes``: one line for each capped request."""
    from ..machine.device import cap_workers  # noqa: PLC0415 (it loads torch; prepare runs without it)

    notes = []
    if workers > 1:
        lines = max(count_lines(src, workers) for src, _ in splits.values())
        workers, note = cap_workers(workers, "prepare: --workers", [(lines, f"{lines:,} line{_s(lines)}")])
        notes.append(note)
    n_process = cfg.parser.n_process
    if n_process > 1 and cfg.parser.name == "spacy":
        size = max(1, cfg.parser.batch_size)
        lines = max(count_lines(src, n_process * size) for src, _ in splits.values())
        batches = -(-lines // size)
        n_process, note = cap_workers(n_process, "prepare: --spacy-processes",
                                      [(batches, f"{batches:,} batch{'es' if batches != 1 else ''} of {size:,} "
                                                 f"lines to parse")])
        notes.append(note)
    return workers, n_process, [n for n in notes if n]


def _s(n: int) -> str:
    """The plural ending for a count of ``n``."""
    return "" if n == 1 else "s"


def _lock_of(tmp: Path) -> Path:
    return tmp.parent / f"{tmp.name}.lock"


def _hold(tmp: Path):
    """An exclusive flock on ``<tmp>.lock`` for as long as the returned file is open (the kernel drops it when the
    process dies, so a killed prepare's directory is free to remove)."""
    f = open(_lock_of(tmp), "w")  # noqa: SIM115 (held open for the whole prepare)
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


#: SentencePiece's default max_sentence_length: it leaves longer training sentences out
SPM_MAX_SENTENCE_BYTES = 4192


def _remove_leftovers(out: Path, log) -> None:
    """Remove the temporary directories (``.<name>.prepare-XXXX``) a killed ``prepare`` of ``out`` left beside it:
    those whose lock (:func:`_hold`) no live process holds; another prepare building one now keeps its own."""
    for d in sorted(out.parent.glob(f".{out.name}.prepare-*")):
        if not d.is_dir() or d.is_symlink():
            continue
        lock = _lock_of(d)
        try:
            with open(lock, "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # refused while its prepare lives
                shutil.rmtree(d, ignore_errors=True)
            lock.unlink(missing_ok=True)
        except BlockingIOError:
            continue
        except OSError:
            continue
        log(f"prepare: removed {d}, left by an interrupted prepare of {out}.")


def _build_dataset(cfg: PrepareConfig, splits: dict, backend, key: dict, tmp: Path, *, workers: int, progress: bool,
                   log) -> dict:
    """Train the vocabularies and encode every split into the empty directory ``tmp``."""
    t0 = time.time()

    # 1. the subword vocabularies (SentencePiece on a bounded sample of the training stream, or subword-nmt)
    vocabs, vocab_files = _train_vocabs(cfg, splits["train"], tmp, log, progress=progress)

    # 2. encode every split, streaming to memory-mappable files
    parsing = backend.produces_trees
    labels: set[str] = set()
    prefixes = {"train": cfg.trainpref, "valid": cfg.validpref,
                **{("test" if i == 0 else f"test{i}"): p for i, p in enumerate(cfg.testprefs)}}
    counts = {}
    for split, (sp, tp) in splits.items():
        job = _ShardJob(cfg, split, sp, tp, prefixes[split], _vocab_specs(vocabs), Shard(), tmp)
        tally = _encode_split(job, vocabs, backend, workers=workers, progress=progress)
        labels |= tally.labels
        counts[split] = _split_counts(cfg, split, sp, tp, tally, parsing, log)

    manifest = {
        **key,
        "counts": counts,
        "vocab": {side: {"file": vocab_files[side], "size": len(vocabs[side]), "sha256": vocabs[side].sha256,
                         **vocabs[side].options()} for side in ("src", "tgt")},
        "joint_vocab": cfg.joint_vocab,
        "syntax": {"parser": cfg.parser.name, "labels": sorted(labels)} if parsing else None,
        "seconds": round(time.time() - t0, 2),
    }
    manifest["files"] = sorted([p.name for p in tmp.iterdir()] + ["manifest.json"])
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


# SentencePiece wraps exceptions raised by its sentence iterator in a RuntimeError and
# fails with an internal message on an empty stream: keep the CorpusError (and the
# stats) so that bad training input gets the same clear error as any other split.
@dataclass
class _TrainSample:
    """The training pairs streamed to SentencePiece or subword-nmt, with their stats and the stream's CorpusError."""

    src: Path
    tgt: Path
    moses: tuple[str, str] | None = None  # (source, target) languages to Moses-tokenize with (prepare --moses)
    stats: PairStats = field(default_factory=PairStats)
    errors: list[CorpusError] = field(default_factory=list)
    longest: tuple[int, int] = (0, 0)  # (bytes, 1-based line) of the longest training sentence
    cr_first: Path | None = None  # the side whose first line holds a \r (a \r-ended file is one line)

    def check_line_ends(self) -> None:
        """A training file that is one line holding carriage returns was written with \\r line ends (old Mac):
        read at \\n, its sentences would be one; refused with the fix (a \\r inside a line of a file of many
        lines stays part of the text, so that parallel files stay aligned)."""
        if self.cr_first is not None and self.stats.lines == 1:
            path = self.cr_first
            raise CorpusError(f"{path}, line 1: the whole file is one line holding carriage returns (\\r): it uses "
                              f"\\r line ends (old Mac), and lines end at \\n only; convert it (tr '\\r' '\\n' < "
                              f"{path.name} > NEW).")

    def pairs(self) -> Iterator[tuple[int, str, str]]:
        """The training pairs (Moses-tokenized with ``moses``); a CorpusError ends the stream and is
        kept in ``errors``."""
        try:
            for lineno, s, t in read_pairs(self.src, self.tgt, self.stats):
                if lineno == 1 and ("\r" in s or "\r" in t):  # a file of one line with \r in it: old Mac ends?
                    self.cr_first = self.src if "\r" in s else self.tgt
                size = max(len(s.encode("utf-8")), len(t.encode("utf-8")))
                if size > self.longest[0]:
                    self.longest = (size, lineno)
                if self.moses:
                    s, t = moses_pretokenize(s, self.moses[0]), moses_pretokenize(t, self.moses[1])
                yield lineno, s, t
        except CorpusError as err:
            self.errors.append(err)

    def side(self, which: int) -> Iterator[str]:
        """The source (``which`` 0) or target (1) sentences of the pairs."""
        for _, s, t in self.pairs():
            yield s if which == 0 else t

    def joint(self) -> Iterator[str]:
        """Source and target sentences of the pairs, interleaved."""
        for _, s, t in self.pairs():
            yield s
            yield t


def _train_vocabs(cfg: PrepareConfig, train: tuple[Path, Path], tmp: Path, log,
                  progress: bool = False) -> tuple[dict[str, Vocab], dict[str, str]]:
    """The vocabularies (side -> Vocab) trained into ``tmp`` (SentencePiece, or subword-nmt with
    ``subword``), and their model file names.

    With ``--moses`` each side's ``Vocab`` carries its language (a joint model is then two
    ``Vocab`` objects over one model file)."""
    langs = {"src": cfg.source_lang, "tgt": cfg.target_lang}
    for lang in sorted(set(langs.values())) if cfg.moses else ():
        if not has_rules(lang):
            log(f"prepare: sacremoses has no Moses rules of its own for the language code {lang!r}: its generic "
                "ones tokenize that side (use the language's ISO 639-1 code, e.g. en, de, where it has rules).")
    sample = _TrainSample(*train, moses=(langs["src"], langs["tgt"]) if cfg.moses else None)
    stem = "bpe" if cfg.subword == "subword-nmt" else "spm"
    if cfg.joint_vocab:
        v = _train_one(cfg, sample, sample.joint(), tmp / stem, cfg.vocab_size, log, progress)
        vocabs = {"src": v, "tgt": v}
        vocab_files = {"src": f"{stem}.model", "tgt": f"{stem}.model"}
    else:
        vs = _train_one(cfg, sample, sample.side(0), tmp / f"{stem}.src", cfg.vocab_size, log, progress)
        vt = _train_one(cfg, sample, sample.side(1), tmp / f"{stem}.tgt", cfg.tgt_vocab_size or cfg.vocab_size, log,
                        progress)
        vocabs = {"src": vs, "tgt": vt}
        vocab_files = {"src": f"{stem}.src.model", "tgt": f"{stem}.tgt.model"}
    if cfg.moses:
        vocabs = {side: Vocab(tmp / vocab_files[side], lowercase=cfg.lowercase, moses=langs[side]) for side in vocabs}
    return vocabs, vocab_files


def _train_one(cfg: PrepareConfig, sample: _TrainSample, lines: Iterator[str], prefix: Path, size: int,
               log, progress: bool = False) -> Vocab:
    """One vocabulary ``{prefix}.model`` from ``lines`` (a stream of ``sample``): SentencePiece of ``size``
    pieces, or subword-nmt BPE of ``cfg.merges`` merges (with subword-nmt's progress bar)."""
    stats = sample.stats
    stats.lines = stats.empty = 0
    stats.empty_examples.clear()
    if cfg.subword == "subword-nmt":
        vocab, learned = train_subword_nmt(lines, prefix, merges=cfg.merges, lowercase=cfg.lowercase,
                                           progress=progress)
        if sample.errors:
            raise sample.errors[0]
        sample.check_line_ends()
        if stats.lines <= stats.empty:
            raise _no_pairs(sample)
        if learned < cfg.merges:
            log(f"prepare: subword-nmt learned {learned:,} merges for {prefix.name}.model, fewer than the "
                f"{cfg.merges:,} asked: no pair of pieces occurs twice any more; the dataset uses {len(vocab):,} pieces.")
        return vocab
    try:
        vocab = train_sentencepiece(lines, prefix, vocab_size=size, model_type=cfg.model_type,
                                    max_sentences=cfg.spm_max_sentences, lowercase=cfg.lowercase)
    except RuntimeError as err:
        if sample.errors:
            raise sample.errors[0] from None
        sample.check_line_ends()
        if stats.lines > stats.empty:
            size, line = sample.longest
            why = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
            if size > SPM_MAX_SENTENCE_BYTES:  # SentencePiece left the long lines out: say which
                raise CorpusError(f"{sample.src} / {sample.tgt}: SentencePiece learned no pieces from these lines "
                                  f"({why}); it leaves out every sentence longer than {SPM_MAX_SENTENCE_BYTES:,} bytes, "
                                  f"and the longest here (line {line}) has {size:,}: give one sentence per line.") from None
            raise CorpusError(f"{sample.src} / {sample.tgt}: SentencePiece cannot train on these lines: {why} (a "
                              "smaller --vocab-size than the text's distinct characters, or too little text, are the "
                              "usual causes).") from None
        raise _no_pairs(sample) from None
    if sample.errors:
        raise sample.errors[0]
    sample.check_line_ends()
    if len(vocab) < size:  # SentencePiece stops where the text has no more pieces (hard_vocab_limit off)
        log(f"prepare: the SentencePiece model {prefix.name}.model has {len(vocab):,} pieces, fewer than the "
            f"{size:,} asked: the training text yields no more; the dataset uses {len(vocab):,}.")
    return vocab


def _no_pairs(sample: _TrainSample) -> CorpusError:
    stats = sample.stats
    return CorpusError(f"{sample.src} / {sample.tgt}: no usable sentence pairs ({stats.lines} lines, "
                       f"{stats.empty} empty); check the files.")


@dataclass
class _SplitTally:
    """What encoding one split (or a shard of it) kept, dropped, cut and merged, and what it wrote."""

    stats: PairStats = field(default_factory=PairStats)
    truncated: int = 0  # valid/test pairs kept with their pieces cut to max_len
    unaligned: int = 0  # pairs dropped: parse not aligned
    unaligned_examples: list[int] = field(default_factory=list)  # the line numbers of the first 10 of them
    merged_words: int = 0
    labels: set[str] = field(default_factory=set)  # the constituent labels of the trees written
    n_tok: dict[str, int] = field(default_factory=lambda: {"src": 0, "tgt": 0})  # pieces written per side

    def add(self, other: _SplitTally) -> None:
        """Count ``other``, the tally of the shard that follows, in this one (examples: the first 10 in order)."""
        self.stats.add(other.stats)
        self.truncated += other.truncated
        self.unaligned += other.unaligned
        self.unaligned_examples = (self.unaligned_examples + other.unaligned_examples)[:10]
        self.merged_words += other.merged_words
        self.labels |= other.labels
        self.n_tok = {side: self.n_tok[side] + other.n_tok[side] for side in self.n_tok}


@dataclass
class _SplitFiles:
    """The open output files of one split in ``tmp``, and the offsets written to them so far."""

    bins: dict[str, BinaryIO]  # side -> {split}.{side}.bin
    idx: dict[str, BinaryIO]  # side -> {split}.{side}.idx
    lines: BinaryIO
    text: dict[str, TextIO]  # side -> raw text (valid/test only; empty for train)
    trees: tuple[BinaryIO, BinaryIO, BinaryIO] | None  # src.trees.bin, src.trees.idx, src.wop.bin (with a parser)
    n_tok: dict[str, int] = field(default_factory=lambda: {"src": 0, "tgt": 0})
    tree_bytes: int = 0

    @classmethod
    def open(cls, tmp: Path, split: str, parsing: bool) -> _SplitFiles:
        """Create the files of ``split`` in ``tmp``, each offset file with its leading 0."""
        trees = None
        if parsing:
            trees = (open(tmp / f"{split}.src.trees.bin", "wb"), open(tmp / f"{split}.src.trees.idx", "wb"),
                     open(tmp / f"{split}.src.wop.bin", "wb"))
            trees[1].write(np.zeros(1, dtype=np.int64).tobytes())
        keep_text = split != "train"
        files = {side: open(tmp / f"{split}.{side}.bin", "wb") for side in ("src", "tgt")}
        idx = {side: open(tmp / f"{split}.{side}.idx", "wb") for side in ("src", "tgt")}
        lines_f = open(tmp / f"{split}.lines", "wb")
        text_f = {side: open(tmp / f"{split}.{name}.txt", "w", encoding="utf-8")
                  for side, name in (("src", "src"), ("tgt", "ref"))} if keep_text else {}
        for side in ("src", "tgt"):
            idx[side].write(np.zeros(1, dtype=np.int64).tobytes())
        return cls(files, idx, lines_f, text_f, trees)

    def write_tree(self, parsed: Parsed, word_of_piece: np.ndarray) -> None:
        """Append one sentence's trees (JSON) and the word index of its pieces."""
        tree_f, tree_idx, wop_f = self.trees  # written with a parser only
        blob = _trees_json(parsed)
        tree_f.write(blob)
        self.tree_bytes += len(blob)
        tree_idx.write(np.array([self.tree_bytes], dtype=np.int64).tobytes())
        wop_f.write(word_of_piece.astype(np.int32).tobytes())

    def write_pairs(self, chunk: list[tuple[int, str, str]], enc: dict[str, list[list[int]]], keep: list[int]) -> None:
        """Append the pieces, offsets, line numbers (and raw text) of the pairs ``keep`` of ``chunk``."""
        for side in ("src", "tgt"):
            seqs = [enc[side][i] for i in keep]
            lens = np.array([len(s) for s in seqs], dtype=np.int64)
            flat = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(lens.sum()))
            self.bins[side].write(flat.tobytes())
            self.idx[side].write((self.n_tok[side] + np.cumsum(lens)).tobytes())
            self.n_tok[side] += int(lens.sum())
            if self.text:
                self.text[side].writelines(chunk[i][1 if side == "src" else 2] + "\n" for i in keep)
        self.lines.write(np.array([chunk[i][0] for i in keep], dtype=np.int64).tobytes())

    def close(self) -> None:
        """Close every file."""
        for f in [*self.bins.values(), *self.idx.values(), self.lines, *self.text.values()]:
            f.close()
        if self.trees is not None:
            for f in self.trees:
                f.close()


def _parsed_stream(backend, path: Path, prefix: str | None, lang: str, shard: Shard) -> Iterator[tuple[int, Parsed]]:
    """(line number, Parsed) of every non-empty source line of ``path`` (of its ``shard``), from ``backend``."""
    numbers: deque = deque()
    # the backend may read ahead (spaCy batches): line numbers queue up in order
    return ((numbers.popleft(), p) for p in backend.parse(
        _nonempty_source_lines(path, numbers, shard), prefix=prefix, lang=lang, start=shard.trees))


@dataclass(frozen=True)
class _ShardJob:
    """A split, or one shard of it, to encode into the directory ``out``: all that a spawned process needs."""

    cfg: PrepareConfig
    split: str
    src: Path
    tgt: Path
    prefix: str | None  # the corpus prefix (pre-parsed file names may hold it)
    vocabs: dict[str, tuple[Path, dict]]  # side -> (model file, Vocab options)
    shard: Shard
    out: Path


def _vocab_specs(vocabs: dict[str, Vocab]) -> dict[str, tuple[Path, dict]]:
    """What rebuilds ``vocabs`` in another process: side -> (model file, options)."""
    return {side: (v.path, v.options()) for side, v in vocabs.items()}


def _encode_split(job: _ShardJob, vocabs: dict[str, Vocab], backend, *, workers: int,
                  progress: bool) -> _SplitTally:
    """Encode (and parse) the pairs of the split of ``job`` into its files in ``job.out``, in one pass or in
    ``workers`` processes (one per shard, their files merged in order); its tally."""
    shards = [Shard()]
    if workers > 1:
        shards = plan_shards(job.src, job.tgt, workers, grain=backend.grain,
                             tree_files=backend.tree_files(job.prefix, job.cfg.source_lang))
    bar = tqdm(desc=f"prepare {job.split}", unit=" pairs", mininterval=1.0, disable=not progress)
    try:
        if len(shards) == 1:
            tally = _encode_shard(job, vocabs, backend, bar.update)
        else:
            tally = _encode_shards(job, shards, bar.update)
    finally:
        bar.close()
    stats = tally.stats
    if stats.kept == 0:
        raise CorpusError(
            f"{job.src} / {job.tgt}: no usable sentence pairs ({stats.lines} lines, {stats.empty} empty, "
            f"{stats.too_long} too long); check the files or raise max_len."
        )
    return tally


def _encode_shards(job: _ShardJob, shards: list[Shard], advance: Callable[[int], None]) -> _SplitTally:
    """Encode every shard of the split of ``job`` in its own process and directory, then merge their files
    into ``job.out`` in order; the split's tally."""
    jobs = [replace(job, shard=shard, out=job.out / f".{job.split}.shard{shard.index}") for shard in shards]
    for j in jobs:
        j.out.mkdir()
    tallies = run_shards(_encode_shard_process, jobs, [j.out for j in jobs], [s.place(job.src) for s in shards],
                         advance=advance)
    merge_shard_files([j.out for j in jobs], job.out)
    for j in jobs:
        shutil.rmtree(j.out)
    tally = tallies[0]
    for other in tallies[1:]:
        tally.add(other)
    return tally


def _encode_shard_process(job: _ShardJob, advance: Callable[[int], None]) -> _SplitTally:
    """:func:`_encode_shard` in a shard's own process: the vocabularies and the parser built there."""
    vocabs = {side: Vocab(path, **options) for side, (path, options) in job.vocabs.items()}
    return _encode_shard(job, vocabs, build_parser(job.cfg.parser), advance)


def _encode_shard(job: _ShardJob, vocabs: dict[str, Vocab], backend, advance: Callable[[int], None]) -> _SplitTally:
    """Encode (and parse) the pairs of ``job``'s shard into its split's files in ``job.out``; its tally.
    ``advance(n)`` is called as ``n`` more pairs are done."""
    cfg, shard = job.cfg, job.shard
    parsing = backend.produces_trees
    tally = _SplitTally()
    parsed_stream = _parsed_stream(backend, job.src, job.prefix, cfg.source_lang, shard) if parsing else None
    out = _SplitFiles.open(job.out, job.split, parsing)
    try:
        pairs = read_pairs(job.src, job.tgt, tally.stats, start=(shard.src, shard.tgt), count=shard.count)
        for chunk in chunked(pairs, cfg.chunk):
            enc, spans, keep = _encode_chunk(cfg, job.split, chunk, vocabs, parsing, tally)
            if parsing:
                keep = _align_kept(chunk, keep, spans, parsed_stream, out, tally)
            out.write_pairs(chunk, enc, keep)
            tally.stats.kept += len(keep)
            advance(len(chunk))
        if parsing:
            for _ in parsed_stream:  # let the backend check the tree count of pre-parsed files
                pass
    finally:
        out.close()
    tally.n_tok = dict(out.n_tok)
    return tally


def _encode_chunk(cfg: PrepareConfig, split: str, chunk: list[tuple[int, str, str]], vocabs: dict[str, Vocab],
                  parsing: bool, tally: _SplitTally) -> tuple[dict[str, list[list[int]]], list | None, list[int]]:
    """Piece ids of both sides of ``chunk`` (side -> ids per pair), the source pieces' ``(id, begin, end)``
    (with a parser, for the pieces' character offsets) and the indices of the pairs kept; over-long pairs are dropped or cut."""
    stats = tally.stats
    spans = None
    if parsing:
        spans = vocabs["src"].encode_spans([c[1] for c in chunk])
        src_ids = [[i for i, _, _ in pieces] for pieces in spans]
    else:
        src_ids = vocabs["src"].encode([c[1] for c in chunk])
    enc = {"src": src_ids, "tgt": vocabs["tgt"].encode([c[2] for c in chunk])}
    keep = []
    for i in range(len(chunk)):
        if not enc["src"][i] or not enc["tgt"][i]:  # e.g. a line of zero-width characters only
            stats.no_pieces += 1
            if len(stats.no_pieces_examples) < 10:
                stats.no_pieces_examples.append(chunk[i][0])
            continue
        src_long, tgt_long = len(enc["src"][i]) > cfg.max_len, len(enc["tgt"][i]) > cfg.max_len
        if not (src_long or tgt_long):
            keep.append(i)
        elif split == "train" or cfg.eval_too_long == "drop" or (src_long and parsing):
            stats.too_long += 1
        else:  # valid/test: keep the pair, cut its pieces (the raw text stays whole)
            enc["src"][i], enc["tgt"][i] = enc["src"][i][: cfg.max_len], enc["tgt"][i][: cfg.max_len]
            tally.truncated += 1
            keep.append(i)
    return enc, spans, keep


def _align_kept(chunk: list[tuple[int, str, str]], keep: list[int], spans: list, parsed_stream,
                out: _SplitFiles, tally: _SplitTally) -> list[int]:
    """Align the parse of every kept pair's source with its pieces and write its trees; the pairs
    that aligned (the others are counted in ``tally.unaligned``)."""
    aligned_keep = []
    for i in keep:
        lineno, text = chunk[i][0], chunk[i][1]
        parsed = _parsed_for_line(parsed_stream, lineno)
        try:
            dep, const, al = align_trees(text, [(b, e) for _, b, e in spans[i]],
                                         parsed.dependency, parsed.constituency, parsed.spans)
        except AlignmentError:
            tally.unaligned += 1
            if len(tally.unaligned_examples) < 10:
                tally.unaligned_examples.append(lineno)
            continue
        tally.merged_words += al.merged
        parsed = Parsed(dep, const)
        if parsed.constituency is not None:
            tally.labels.update(n.label for n in parsed.constituency.root.walk() if not n.is_preterminal)
        out.write_tree(parsed, al.word_of_piece)
        aligned_keep.append(i)
    return aligned_keep


def _split_counts(cfg: PrepareConfig, split: str, sp: Path, tp: Path, tally: _SplitTally, parsing: bool,
                  log) -> dict:
    """The manifest's counts of one encoded split; what was dropped or cut is logged."""
    stats, truncated, unaligned = tally.stats, tally.truncated, tally.unaligned
    counts = {**stats.as_dict(), "truncated_too_long": truncated, "src_tokens": tally.n_tok["src"],
              "tgt_tokens": tally.n_tok["tgt"], "src_file": str(sp), "tgt_file": str(tp)}
    if parsing:
        counts.update(dropped_unaligned=unaligned, first_unaligned_lines=tally.unaligned_examples,
                      merged_words=tally.merged_words)
        if unaligned:
            log(f"prepare {split}: dropped {unaligned} pairs whose parse could not be aligned with the "
                f"source text (first lines {tally.unaligned_examples}).")
    if stats.empty or stats.too_long:
        log(f"prepare {split}: dropped {stats.empty} empty pairs (first lines {stats.empty_examples}) "
            f"and {stats.too_long} pairs longer than {cfg.max_len} pieces, of {stats.lines}.")
    if stats.no_pieces:
        log(f"prepare {split}: dropped {stats.no_pieces} pairs with a side that has no subword piece "
            f"(only characters the model drops, such as zero-width spaces; first lines {stats.no_pieces_examples}).")
    if truncated:
        log(f"prepare {split}: kept {truncated} pairs longer than {cfg.max_len} pieces with their pieces cut to "
            f"{cfg.max_len} (their text stays whole for BLEU; --eval-too-long drop drops them).")
    return counts


def existing_manifest(out: Path) -> dict | None:
    """The manifest of the prepared dataset in ``out``, None when ``out`` is new or
    empty; :class:`CorpusError` when ``out`` is a file or a directory of other files."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"--destdir {out}: is a file; give a directory (new, empty, or prepared before).")
    if not out.is_dir() or not any(out.iterdir()):
        return None
    path = out / "manifest.json"
    if not path.is_file():
        raise CorpusError(f"--destdir {out}: holds files but no manifest.json, so it is not a dataset prepared by "
                          "structnmt; give a new or empty directory (prepare never replaces files it did not write).")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        old = None
    if not isinstance(old, dict) or "counts" not in old or "vocab" not in old:
        raise CorpusError(f"--destdir {out}: its manifest.json is not one written by structnmt prepare; give a new "
                          "or empty directory.")
    return old


_SPLIT_FILES = ("src.bin", "src.idx", "tgt.bin", "tgt.idx", "lines", "ref.txt", "src.txt", "src.wop.bin",
                "src.trees.bin", "src.trees.idx")


def _owned_files(manifest: dict) -> set[str]:
    """Names of the files a prepared directory's build wrote; manifests older than the
    ``files`` entry get the names of the layout (module docstring), exactly."""
    if "files" in manifest:
        return set(manifest["files"])
    return {"manifest.json", *(f"{stem}.{ext}" for stem in ("spm", "spm.src", "spm.tgt") for ext in ("model", "vocab")),
            *(f"{split}.{name}" for split in manifest.get("counts", {}) for name in _SPLIT_FILES)}


def _install(tmp: Path, out: Path, old: dict | None) -> None:
    """Move the new build from ``tmp`` into ``out``, replacing only what the old build wrote.

    The manifest goes last; while files move, ``out``'s manifest lists the old and the
    new files and says ``installing``, so an interrupted install is rebuilt next time
    and every file in it stays known as ours.
    """
    if old is None:
        out.mkdir(parents=True, exist_ok=True)
        old_files: set[str] = set()
    else:
        owned = _owned_files(old)
        old_files = {p.name for p in out.iterdir() if p.name in owned}
    new_files = sorted(p.name for p in tmp.iterdir())
    foreign = [name for name in new_files if (out / name).exists() and name not in old_files]
    if foreign:
        raise CorpusError(f"--destdir {out}: holds {', '.join(foreign[:5])}, which prepare did not write and would "
                          "replace; move it away or give another directory.")
    if old is not None:
        marker = {**old, "installing": True, "files": sorted(old_files | set(new_files))}
        (tmp / ".installing.json").write_text(json.dumps(marker, indent=2))
        os.replace(tmp / ".installing.json", out / "manifest.json")
    for name in set(old_files) - set(new_files):
        (out / name).unlink(missing_ok=True)
    for name in new_files:
        if name != "manifest.json":
            os.replace(tmp / name, out / name)
    os.replace(tmp / "manifest.json", out / "manifest.json")


def _parsed_for_line(stream, lineno: int) -> Parsed:
    """Advance the (line number, Parsed) stream to ``lineno`` (skipping lines dropped for
    an empty target)."""
    for n, parsed in stream:
        if n == lineno:
            return parsed
        if n > lineno:
            break
    raise CorpusError(f"internal: no parse for source line {lineno}")
