"""Generating the synthetic corpus: :class:`SynthConfig` and :func:`generate` (the train,
valid and test splits, each drawn from its own random stream by the sampler of
:mod:`.grammar` and rendered by :mod:`.render`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .grammar import _Sampler
from .lexicon import _lexicon
from .render import SynthExample, _build_example

__all__ = ["SynthConfig", "generate"]


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


def _split_rng(seed: int, split: str) -> random.Random:
    """The random stream of ``split`` ("test", "valid" or "train") of the corpus of ``seed``."""
    return random.Random(seed * 1_000_003 + _SPLIT_SALT[split])


def generate(cfg: SynthConfig) -> dict[str, list[SynthExample]]:
    """Generate the train/valid/test splits deterministically from ``cfg``.

    Each split has its own random stream (test first, then valid, then train), so the test
    set does not change when ``n_train`` changes.  Source sentences are unique across and
    within splits; samples longer than ``cfg.max_len`` words are re-drawn.
    """
    if cfg.max_depth < 0 or cfg.max_len < 3:
        raise ValueError(f"invalid config: max_depth={cfg.max_depth}, max_len={cfg.max_len}")
    lex = _lexicon(cfg.seed)
    seen: set[str] = set()
    out: dict[str, list[SynthExample]] = {}
    for split, n in (("test", cfg.n_test), ("valid", cfg.n_valid), ("train", cfg.n_train)):
        rng = _split_rng(cfg.seed, split)
        sampler = _Sampler(rng, cfg.max_depth)
        examples: list[SynthExample] = []
        misses = 0
        while len(examples) < n:
            ex = _build_example(sampler.clause(True), lex)
            key = " ".join(ex.src)
            if len(ex.src) > cfg.max_len or key in seen:
                misses += 1
                if misses > 50 * max(n, 100):
                    raise RuntimeError(f"could not draw {n} unique {split} sentences")
                continue
            seen.add(key)
            examples.append(ex)
        out[split] = examples
    return {"train": out["train"], "valid": out["valid"], "test": out["test"]}

