"""A dataset's vocabulary model is the one prepare wrote: its SHA-256 is in the manifest, and training on a
replaced model (other pieces, an edited file, a smaller model) is one sentence, never silent or a traceback."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import cli

from structnmt.data.dataset import DatasetError, PreparedDataset
from structnmt.data.vocab import train_sentencepiece


@pytest.fixture()
def dataset(synth_data, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(synth_data, d)
    return d


def test_the_manifest_records_the_model_s_hash(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    ds = PreparedDataset(dataset)
    assert manifest["vocab"]["src"]["sha256"] == ds.src_vocab.sha256 and len(manifest["vocab"]["src"]["sha256"]) == 64


def _replacement(dataset, tmp_path, vocab_size: int):
    lines = [f"word{i} other{i % 7} thing{i % 13}" for i in range(3000)]
    train_sentencepiece(iter(lines), tmp_path / "other", vocab_size=vocab_size, num_threads=1)
    name = json.loads((dataset / "manifest.json").read_text())["vocab"]["src"]["file"]
    shutil.copyfile(tmp_path / "other.model", dataset / name)
    return dataset / name


def test_a_replaced_model_of_the_same_size_is_refused_by_its_hash(dataset, tmp_path, capsys):
    size = json.loads((dataset / "manifest.json").read_text())["vocab"]["src"]["size"]
    path = _replacement(dataset, tmp_path, size)
    with pytest.raises(DatasetError, match="not the vocabulary model this dataset was prepared with"):
        PreparedDataset(dataset)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: {{path: {dataset}}}\nmodel: {{d_model: 16, ffn_dim: 32, heads: 2, encoder_layers: 1, "
                   f"decoder_layers: 1}}\ntrain: {{save_dir: {tmp_path / 'run'}, max_updates: 2, tensorboard: false}}\n")
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert code == 2 and "Traceback" not in err and f"{path}: not the vocabulary model" in err
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


def test_an_older_manifest_without_a_hash_still_checks_the_size(dataset, tmp_path):
    manifest = json.loads((dataset / "manifest.json").read_text())
    for side in ("src", "tgt"):
        manifest["vocab"][side].pop("sha256")
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    PreparedDataset(dataset)  # the prepared model itself: loads
    _replacement(dataset, tmp_path, 200)
    with pytest.raises(DatasetError, match="pieces but the manifest says"):
        PreparedDataset(dataset)


def test_an_unreadable_model_is_a_sentence(dataset):
    name = json.loads((dataset / "manifest.json").read_text())["vocab"]["src"]["file"]
    (dataset / name).write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="not a readable SentencePiece or subword-nmt model"):  # a VocabError
        PreparedDataset(dataset)
