"""A checkpoint cannot run code: a crafted torch file (a pickle whose payload writes a file on load) is refused
by every command that reads a checkpoint, with one sentence, before anything of it runs; structnmt's own
checkpoints (new, and older ones with numpy's RNG state as an ndarray) load under the restricted unpickler."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_user_error, cli

from structnmt.errors import CheckpointError
from structnmt.models.checkpoint import load_checkpoint


class Payload:
    """Unpickling it calls os.system: writes ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture()
def evil(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "PAYLOAD_RAN"
    path = tmp_path / "evil.pt"
    torch.save({"config": {"model": {}}, "model": {}, "run": Payload(marker)}, path)
    assert marker.exists() is False
    return path, marker


def test_loading_a_crafted_checkpoint_runs_nothing(evil):
    path, marker = evil
    with pytest.raises(CheckpointError, match=r"refused: loading it would run code .*posix.system.*Nothing of it "
                                              "was run"):
        load_checkpoint(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the unrestricted loader runs it: the test's payload is real
    assert marker.exists()


def test_every_reading_command_refuses_it_and_writes_nothing(capsys, evil, tmp_path):
    path, marker = evil
    (tmp_path / "o").mkdir()
    src = tmp_path / "in.txt"
    src.write_text("a dog runs\n", encoding="utf-8")
    conllu = tmp_path / "in.conllu"
    conllu.write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    commands = {
        "translate": ["translate", "--checkpoint", path, "--input", src, "--output", tmp_path / "o" / "x.hyp"],
        "average": ["average", "--checkpoints", path, "--output", tmp_path / "o" / "avg.pt"],
        "export": ["export", "--format", "ctranslate2", "--checkpoint", path, "--out", tmp_path / "o" / "ct2"],
        "analyze": ["analyze", "--checkpoint", path, "--input", src, "--out", tmp_path / "o" / "maps"],
        "induce": ["induce", "--checkpoint", path, "--conllu", conllu, "--out", tmp_path / "o" / "trees"],
        "gate": ["gate", "--checkpoint", path, "--input", src, "--reference", src, "--out", tmp_path / "o" / "gate"],
    }
    for name, args in commands.items():
        code, _, err = cli(capsys, *args)
        assert_user_error(code, err, "refused: loading it would run code")
        assert not marker.exists(), name
        assert not any((tmp_path / "o").rglob("*")), name  # nothing written


def test_a_training_does_not_resume_from_a_crafted_checkpoint(capsys, evil, synth_data, tmp_path):
    path, marker = evil
    save = tmp_path / "run"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(path.read_bytes())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: {{path: {synth_data}}}\nmodel: {{d_model: 16, ffn_dim: 32, heads: 2, encoder_layers: 1, "
                   f"decoder_layers: 1}}\ntrain: {{save_dir: {save}, max_updates: 2, tensorboard: false}}\n",
                   encoding="utf-8")
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert code != 0 and "refused: loading it would run code" in err and "Traceback" not in err
    assert not marker.exists()


def test_structnmt_checkpoints_load_restricted_old_and_new(synth_data, tmp_path):
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, ModelConfig, TrainConfig
    from structnmt.train.trainer import set_rng_state

    cfg = Config(data=DataConfig(path=str(synth_data), max_tokens=400),
                 model=ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=2, validate_interval_updates=2,
                                   warmup_updates=1, tensorboard=False, progress=False))
    train(cfg, log=lambda *_: None)
    state = load_checkpoint(tmp_path / "m" / "checkpoint_last.pt")
    name, keys, *_ = state["rng"]["numpy"]
    assert name == "MT19937" and isinstance(keys, torch.Tensor) and keys.shape == (624,)
    # an older checkpoint kept numpy's state as an ndarray: it loads, and its state restores exactly
    old = dict(state)
    np.random.seed(5)
    legacy = np.random.get_state()
    old["rng"] = {**state["rng"], "numpy": legacy}
    torch.save(old, tmp_path / "old.pt")
    loaded = load_checkpoint(tmp_path / "old.pt")
    assert isinstance(loaded["rng"]["numpy"][1], np.ndarray)
    np.random.seed(99)
    set_rng_state(loaded["rng"])
    want = np.random.RandomState()
    want.set_state(legacy)
    assert np.random.random_sample() == want.random_sample()
