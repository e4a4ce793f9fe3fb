"""Writing the synthetic corpus: the files of a split (:func:`write_examples`), the whole corpus
(:func:`write_corpus`), the names it writes (:func:`split_files`) and the output directory that
guards them (:func:`corpus_dir`). The dependency trees are written by
:func:`structnmt.syntax.io.format_conllu`, with the FEATS column of the examples."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ...files import OutputDir
from ...syntax.io import format_conllu
from .lexicon import AGREEMENT_SUFFIX, PLURAL_SUFFIX, TENSE_SUFFIX
from .render import SynthExample
from .splits import SynthConfig, generate

__all__ = ["split_files", "corpus_dir", "write_examples", "write_corpus"]


def _conllu(ex: SynthExample) -> str:
    """The CoNLL-U block of one example: its text, its dependency tree and FEATS."""
    return format_conllu(ex.dep, " ".join(ex.src), ex.feats or None)


def split_files(split: str) -> tuple[str, ...]:
    """The files :func:`write_examples` writes for ``split``."""
    return (f"{split}.src", f"{split}.tgt", f"{split}.src.tree", f"{split}.src.conllu", f"{split}.agreement.jsonl")


def corpus_dir(out, names: tuple[str, ...] = ()):
    """``out`` as the :class:`structnmt.files.OutputDir` of a synthetic corpus: a file of the user's under one
    of ``names`` is refused before anything is written; a corpus directory from before manifests (it holds
    ``synth.json`` or ``benchmark.json``) is the generator's own."""

    if isinstance(out, OutputDir):
        for name in names:
            out.claim(name)
        return out
    return OutputDir(out, "synth", expect=names, marker=(("synth.json", r'\{\s*"config": \{\s*"seed"'),
                                                         ("benchmark.json", r'\{\s*"config": \{\s*"seed"')))


def write_examples(examples: list[SynthExample], out, split: str) -> None:
    """Write one split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` and ``{split}.agreement.jsonl``, each atomically.
    ``out``: a directory or a :func:`corpus_dir`."""
    out = corpus_dir(out, split_files(split))
    texts = ("".join(" ".join(ex.src) + "\n" for ex in examples), "".join(" ".join(ex.tgt) + "\n" for ex in examples),
             "".join(ex.tree + "\n" for ex in examples), "".join(_conllu(ex) for ex in examples),
             "".join(json.dumps(ex.agreement) + "\n" for ex in examples))
    for name, text in zip(split_files(split), texts):
        out.write_text(name, text)


def write_corpus(cfg: SynthConfig, out_dir: str | Path) -> dict[str, int]:
    """Generate the corpus and write it to ``out_dir``; return the number of sentences per split.

    Files per split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` (CoNLL-U) and
    ``{split}.agreement.jsonl`` (one JSON list per line); plus ``synth.json``. A file of the user's
    under one of these names is refused before anything is written (:func:`corpus_dir`).
    """
    out = corpus_dir(out_dir, tuple(n for split in ("train", "valid", "test") for n in split_files(split))
                     + ("synth.json",))
    data = generate(cfg)
    counts: dict[str, int] = {}
    for split, examples in data.items():
        counts[split] = len(examples)
        write_examples(examples, out, split)
    meta = {
        "config": asdict(cfg),
        "counts": counts,
        "target_suffixes": {"plural": PLURAL_SUFFIX, "tense": TENSE_SUFFIX,
                            "agreement": AGREEMENT_SUFFIX},
    }
    out.write_text("synth.json", json.dumps(meta, indent=2) + "\n")
    return counts

