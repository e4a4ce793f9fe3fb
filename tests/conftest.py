"""Shared fixtures: small datasets made by the tests themselves (the synthetic task)."""

from __future__ import annotations

from pathlib import Path

import pytest

from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus


def make_synth_dataset(root: Path, n_train: int = 1500, n_eval: int = 60, vocab_size: int = 600) -> Path:
    corpus = root / "corpus"
    write_corpus(SynthConfig(seed=3, n_train=n_train, n_valid=n_eval, n_test=n_eval), corpus)
    out = root / "data-bin"
    prepare(
        PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                      validpref=str(corpus / "valid"), testprefs=[str(corpus / "test")], vocab_size=vocab_size),
        out, progress=False, log=lambda *_: None,
    )
    return out


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory) -> Path:
    """A prepared synthetic dataset (1500 train / 60 valid / 60 test pairs)."""
    return make_synth_dataset(tmp_path_factory.mktemp("synth"))
