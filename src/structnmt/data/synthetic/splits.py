"""Generating the synthetic corpus: :class:`SynthConfig`, :func:`stream_splits` (the train, valid
and test splits as streams of examples, each drawn from its own random stream by the sampler of
:mod:`.grammar` and rendered by :mod:`.render`) and :func:`generate` (the same, held in lists)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from ...errors import UserError
from .grammar import _Sampler
from .lexicon import _lexicon
from .render import SynthExample, _build_example
from .seen import SeenSentences

__all__ = ["SynthConfig", "generate", "stream_splits", "split_sizes"]


@dataclass
class SynthConfig:
    """Configuration of the synthetic corpus (everything is a deterministic function of it)."""

    seed: int = 1
    n_train: int = 20000
    n_valid: int = 500
    n_test: int = 500
    max_depth: int = 3  # nesting limit for relative clauses / PPs
    max_len: int = 40  # source words; longer samples are re-drawn (deterministically)


# --------------------------------------------------------------------------- generation

_SPLIT_SALT = {"test": 101, "valid": 202, "train": 303}

#: the order the splits are drawn in (a sentence drawn earlier is never drawn again)
DRAW_ORDER = ("test", "valid", "train")


def _split_rng(seed: int, split: str) -> random.Random:
    """The random stream of ``split`` ("test", "valid" or "train") of the corpus of ``seed``."""
    return random.Random(seed * 1_000_003 + _SPLIT_SALT[split])


def split_sizes(cfg: SynthConfig) -> dict[str, int]:
    """Sentences per split, in the order the corpus reports them (train, valid, test)."""
    return {"train": cfg.n_train, "valid": cfg.n_valid, "test": cfg.n_test}


def _drawn(cfg: SynthConfig, split: str, lex: dict, seen: SeenSentences) -> Iterator[SynthExample]:
    """The ``split`` examples of ``cfg``, one at a time: samples longer than ``cfg.max_len`` words or
    already in ``seen`` are re-drawn; every example yielded is added to ``seen``."""
    n = split_sizes(cfg)[split]
    sampler = _Sampler(_split_rng(cfg.seed, split), cfg.max_depth)
    drawn = misses = 0
    while drawn < n:
        ex = _build_example(sampler.clause(True), lex)
        key = " ".join(ex.src)
        if len(ex.src) > cfg.max_len or key in seen:
            misses += 1
            if misses > 50 * max(n, 100):
                raise UserError(f"could not draw {n:,} different {split} sentences of at most {cfg.max_len} words "
                                f"({misses:,} draws were longer or repeats); ask for fewer {split} sentences "
                                f"(--n-{split}).")
            continue
        seen.add(key)
        drawn += 1
        yield ex


def stream_splits(cfg: SynthConfig) -> Iterator[tuple[str, Iterator[SynthExample]]]:
    """Each split of ``cfg``, in the order they are drawn (test, valid, train), with the stream of its
    examples, drawn as they are read; read each stream to its end before the next.

    Each split has its own random stream, so the test set does not change when ``n_train``
    changes. Source sentences are unique across and within splits; samples longer than
    ``cfg.max_len`` words are re-drawn. Memory: the example being read, and 12 bytes per sentence
    of the corpus for the sentences drawn so far (:class:`~.seen.SeenSentences`)."""
    if cfg.max_depth < 0 or cfg.max_len < 3:
        raise ValueError(f"invalid config: max_depth={cfg.max_depth}, max_len={cfg.max_len}")
    lex = _lexicon(cfg.seed)
    seen = SeenSentences(sum(split_sizes(cfg).values()))
    return ((split, _drawn(cfg, split, lex, seen)) for split in DRAW_ORDER)


def generate(cfg: SynthConfig) -> dict[str, list[SynthExample]]:
    """The train/valid/test splits of ``cfg`` in lists (:func:`stream_splits` without holding
    back: the whole corpus in memory, about 5.4 KB per example)."""
    drawn = {split: list(examples) for split, examples in stream_splits(cfg)}
    return {split: drawn[split] for split in split_sizes(cfg)}
