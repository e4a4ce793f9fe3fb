"""Writing the synthetic corpus as it is generated: the lines of one example (:func:`write_example`),
the files of a split (:func:`write_examples`), the whole corpus (:func:`write_corpus`), the names it
writes (:func:`split_files`) and the output directory that guards them (:func:`corpus_dir`). The
dependency trees are written by :func:`structnmt.syntax.io.format_conllu`, with the FEATS column of
the examples.

Every file is written to a temporary name beside its own and renamed at the end, all together
(:meth:`structnmt.fileio.files.OutputDir.writing`), so memory does not grow with the corpus and an
interrupted run leaves no partial file under a corpus name."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from ...fileio.files import OutputDir
from ...syntax.io import format_conllu
from .lexicon import AGREEMENT_SUFFIX, PLURAL_SUFFIX, TENSE_SUFFIX
from .render import SynthExample
from .splits import SynthConfig, split_sizes, stream_splits

__all__ = ["split_files", "corpus_dir", "write_example", "write_examples", "write_corpus", "progress_bar"]


def _conllu(ex: SynthExample) -> str:
    """The CoNLL-U block of one example: its text, its dependency tree and FEATS."""
    return format_conllu(ex.dep, " ".join(ex.src), ex.feats or None)


def split_files(split: str) -> tuple[str, ...]:
    """The files :func:`write_examples` writes for ``split``."""
    return (f"{split}.src", f"{split}.tgt", f"{split}.src.tree", f"{split}.src.conllu", f"{split}.agreement.jsonl")


def corpus_dir(out, names: tuple[str, ...] = ()):
    """``out`` as the :class:`structnmt.fileio.files.OutputDir` of a synthetic corpus: a file of the user's under one
    of ``names`` is refused before anything is written; a corpus directory from before manifests (it holds
    ``synth.json`` or ``benchmark.json``) is the generator's own."""

    if isinstance(out, OutputDir):
        for name in names:
            out.claim(name)
        return out
    return OutputDir(out, "synth", expect=names, marker=(("synth.json", r'\{\s*"config": \{\s*"seed"'),
                                                         ("benchmark.json", r'\{\s*"config": \{\s*"seed"')))


def progress_bar(total: int, enabled: bool) -> tqdm:
    """The progress bar of a corpus being written (on standard error; nothing unless ``enabled``)."""
    return tqdm(total=total, desc="synth", unit=" pairs", mininterval=1.0, disable=not enabled)


def write_example(files: dict[str, TextIO], split: str, ex: SynthExample) -> None:
    """Append ``ex`` to the open files of ``split`` (``files``: name -> file, the names of :func:`split_files`):
    its source and target (space-joined tokens), PTB tree, CoNLL-U block and agreement probes (JSON)."""
    lines = (" ".join(ex.src) + "\n", " ".join(ex.tgt) + "\n", ex.tree + "\n", _conllu(ex),
             json.dumps(ex.agreement) + "\n")
    for name, line in zip(split_files(split), lines):
        files[name].write(line)


def write_examples(examples: Iterable[SynthExample], out, split: str) -> None:
    """Write one split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` and ``{split}.agreement.jsonl``, each example
    as it comes, all renamed into place at the end. ``out``: a directory or a :func:`corpus_dir`."""
    names = split_files(split)
    out = corpus_dir(out, names)
    with out.writing(names) as files:
        for ex in examples:
            write_example(files, split, ex)


def write_corpus(cfg: SynthConfig, out_dir: str | Path, *, progress: bool = False) -> dict[str, int]:
    """Generate the corpus and write it to ``out_dir`` as it is generated; return the number of sentences
    per split.

    Files per split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` (CoNLL-U) and
    ``{split}.agreement.jsonl`` (one JSON list per line); plus ``synth.json``. A file of the user's
    under one of these names is refused before anything is written (:func:`corpus_dir`). Memory does
    not grow with the corpus but for 12 bytes per sentence (the sentences drawn so far, kept unique:
    :func:`.splits.stream_splits`). ``progress``: a progress bar on standard error.
    """
    names = tuple(n for split in split_sizes(cfg) for n in split_files(split)) + ("synth.json",)
    out = corpus_dir(out_dir, names)
    counts = split_sizes(cfg)
    splits = stream_splits(cfg)  # a bad config is refused here, before any file is opened
    with out.writing(names) as files, progress_bar(sum(counts.values()), progress) as bar:
        for split, examples in splits:
            for ex in examples:
                write_example(files, split, ex)
                bar.update()
        meta = {
            "config": asdict(cfg),
            "counts": counts,
            "target_suffixes": {"plural": PLURAL_SUFFIX, "tense": TENSE_SUFFIX,
                                "agreement": AGREEMENT_SUFFIX},
        }
        files["synth.json"].write(json.dumps(meta, indent=2) + "\n")
    return counts
