"""Training: resume reproduces, non-finite losses, early stopping, checkpoints, DDP on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from structnmt.cli.training import train
from structnmt.config import Config, DataConfig, ModelConfig, TrainConfig, save_config
from structnmt.errors import UserError
from structnmt.train import trainer as trainer_mod
from structnmt.train.trainer import Trainer, TrainingError


def small_config(data: Path, save_dir: Path, **train_kw) -> Config:
    tk = dict(seed=7, save_dir=str(save_dir), lr=2e-3, warmup_updates=4, max_updates=8, save_interval_updates=4,
              validate_interval_updates=4, log_interval=1, keep_last=3, tensorboard=False, progress=False)
    tk.update(train_kw)
    return Config(
        data=DataConfig(path=str(data), max_tokens=600),
        model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1, dropout=0.2,
                          share_all_embeddings=True),
        train=TrainConfig(**tk),
    )


def quiet(*_a, **_k):
    return None


def final_params(save_dir: Path) -> dict:
    return torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["model"]


def test_resume_reproduces_uninterrupted_run(synth_data, tmp_path):
    full = tmp_path / "full"
    train(small_config(synth_data, full, max_updates=8), log=quiet)
    part = tmp_path / "part"
    train(small_config(synth_data, part, max_updates=4), log=quiet)  # "killed" after update 4
    state = train(small_config(synth_data, part, max_updates=8), log=quiet)  # resumes from checkpoint_last
    assert state.num_updates == 8
    a, b = final_params(full), final_params(part)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    opt_a = torch.load(full / "checkpoint_last.pt", weights_only=False)["optimizer"]["state"]
    opt_b = torch.load(part / "checkpoint_last.pt", weights_only=False)["optimizer"]["state"]
    for k in opt_a:
        assert torch.equal(opt_a[k]["exp_avg_sq"], opt_b[k]["exp_avg_sq"])
    def losses(d: Path) -> list[float]:
        records = map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
        return [r["loss"] for r in records if r["kind"] == "train"]

    assert losses(full) == losses(part)


def test_resume_crosses_epoch_boundary(synth_data, tmp_path):
    """A run long enough to roll over an epoch resumes mid-epoch-2 identically."""
    cfg = small_config(synth_data, tmp_path / "x")
    n_batches = len(Trainer(cfg, log=quiet).batches)
    total = n_batches + 3
    full, part = tmp_path / "full", tmp_path / "part"
    train(small_config(synth_data, full, max_updates=total, save_interval_updates=1000,
                       validate_interval_updates=1000), log=quiet)
    train(small_config(synth_data, part, max_updates=n_batches + 1, save_interval_updates=1000,
                       validate_interval_updates=1000), log=quiet)
    st = train(small_config(synth_data, part, max_updates=total, save_interval_updates=1000,
                            validate_interval_updates=1000), log=quiet)
    assert st.epoch == 2
    a, b = final_params(full), final_params(part)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_keep_last_best_and_config(synth_data, tmp_path):
    save = tmp_path / "run"
    train(small_config(synth_data, save, max_updates=12, save_interval_updates=2, keep_last=3), log=quiet)
    numbered = sorted(p.name for p in save.glob("checkpoint_[0-9]*.pt"))
    assert numbered == ["checkpoint_10.pt", "checkpoint_12.pt", "checkpoint_8.pt"]
    assert (save / "checkpoint_best.pt").exists() and (save / "config.yaml").exists()
    st = torch.load(save / "checkpoint_last.pt", weights_only=False)
    assert st["config"]["model"]["d_model"] == 32 and st["run"]["num_updates"] == 12
    assert not list(save.glob("*.tmp"))
    records = [json.loads(x) for x in (save / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"train", "valid"}
    assert all({"loss", "lr", "tok_per_s"} <= set(r) for r in records if r["kind"] == "train")


def test_resume_refuses_a_different_model(synth_data, tmp_path):
    save = tmp_path / "run"
    train(small_config(synth_data, save, max_updates=2), log=quiet)
    cfg = small_config(synth_data, save, max_updates=4)
    cfg.model.d_model = 64
    with pytest.raises(TrainingError, match="model config differs"):
        Trainer(cfg, log=quiet)


def test_resume_reads_a_checkpoint_older_than_an_option_as_its_default(synth_data, tmp_path):
    """A checkpoint written before an option existed (here model.rnn.score_cap and train.bf16
    removed from its saved config) resumes: the missing option is its default, not a change."""
    save = tmp_path / "run"
    train(small_config(synth_data, save, max_updates=2), log=quiet)
    last = save / "checkpoint_last.pt"
    st = torch.load(last, weights_only=False)
    del st["config"]["model"]["rnn"]["score_cap"]
    del st["config"]["train"]["bf16"]
    torch.save(st, last)
    tr = Trainer(small_config(synth_data, save, max_updates=4), log=quiet)
    assert tr.state.num_updates == 2
    tr.close()
    st["config"]["model"]["rnn"]["score_cap"] = 3.0  # a real change is still refused
    torch.save(st, last)
    with pytest.raises(TrainingError, match="score_cap"):
        Trainer(small_config(synth_data, save, max_updates=4), log=quiet)


def _nan_on_calls(monkeypatch, bad_calls: set[int]):
    real = trainer_mod.label_smoothed_nll
    calls = {"n": 0}

    def fake(logits, target, eps):
        calls["n"] += 1
        loss, nll = real(logits, target, eps)
        if calls["n"] in bad_calls:
            loss = loss * float("nan")
        return loss, nll

    monkeypatch.setattr(trainer_mod, "label_smoothed_nll", fake)


def test_nonfinite_loss_skips_the_update_and_counts(synth_data, tmp_path, monkeypatch):
    _nan_on_calls(monkeypatch, {2, 3})
    cfg = small_config(synth_data, tmp_path / "run", max_updates=3, validate_interval_updates=100,
                       save_interval_updates=100)
    tr = Trainer(cfg, log=quiet)
    tr.train_step(tr.batches.epoch_order(1)[:1])
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    assert tr.train_step(tr.batches.epoch_order(1)[1:2]) is None
    after = tr.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert tr.state.nonfinite_total == 1 and tr.state.num_updates == 1
    state = tr.train()
    assert state.num_updates == 3 and state.nonfinite_total == 2 and state.nonfinite_consecutive == 0


def test_repeated_nonfinite_losses_stop_with_a_clear_error(synth_data, tmp_path, monkeypatch):
    _nan_on_calls(monkeypatch, set(range(1, 100)))
    cfg = small_config(synth_data, tmp_path / "run", max_consecutive_nonfinite=3)
    with pytest.raises(TrainingError, match="4 consecutive updates had a NaN or infinite loss"):
        train(cfg, log=quiet)


def test_early_stopping_on_validation_loss(synth_data, tmp_path):
    # lr 0: the validation loss never improves after the first validation
    cfg = small_config(synth_data, tmp_path / "run", lr=0.0, warmup_updates=0, warmup_init_lr=0.0,
                       max_updates=100, validate_interval_updates=2, patience=2)
    lines = []
    state = train(cfg, log=lines.append)
    assert state.num_updates == 6 and state.bad_validations == 2
    assert any("early stop" in line for line in lines)


def test_validation_bleu_and_time_budget(synth_data, tmp_path, monkeypatch):
    import itertools
    import types

    import structnmt.train.trainer as trainer_mod

    # the trainer's clock advances 50 ms per reading: the 3-second budget binds after a few updates on
    # any machine, however fast or busy
    ticks = itertools.count(1_000_000)
    monkeypatch.setattr(trainer_mod, "time", types.SimpleNamespace(time=lambda: next(ticks) / 20))
    cfg = small_config(synth_data, tmp_path / "run", max_updates=1000, max_time_minutes=0.05,
                       validate_bleu=True, validate_bleu_max_sentences=10, early_stop_metric="bleu",
                       validate_interval_updates=3)
    cfg.decode.beam = 2
    lines = []
    state = train(cfg, log=lines.append)
    assert 3 <= state.num_updates < 1000, state.num_updates
    assert any("max_time_minutes" in line for line in lines)
    assert state.history and all("bleu" in h for h in state.history)


def test_ddp_two_processes_equals_accumulation(synth_data, tmp_path):
    """torchrun with 2 CPU processes (gloo): each update sees 2 batches, exactly like one
    process accumulating them with update_freq=2."""
    common = dict(max_updates=3, save_interval_updates=100, validate_interval_updates=100)
    single = small_config(synth_data, tmp_path / "single", update_freq=2, **common)
    single.model.dropout = 0.0
    train(single, log=quiet)
    ddp = small_config(synth_data, tmp_path / "ddp", **common)
    ddp.model.dropout = 0.0
    yaml_path = tmp_path / "ddp.yaml"
    save_config(ddp, yaml_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "structnmt.cli", "train", str(yaml_path), "--no-progress"],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout + proc.stderr
    a, b = final_params(tmp_path / "single"), final_params(tmp_path / "ddp")
    for k in a:
        assert_close(a[k], b[k], atol=2e-5, rtol=1e-4)
    # and the updates did move the parameters
    init = Trainer(small_config(synth_data, tmp_path / "fresh"), log=quiet).model.state_dict()
    assert any(not torch.allclose(init[k], b[k]) for k in b)


def test_without_a_progress_bar_training_statistics_are_logged_every_interval(synth_data, tmp_path):
    """--no-progress (the experiment runner's training logs): one line per log_interval."""
    lines: list[str] = []
    train(small_config(synth_data, tmp_path / "m", max_updates=6, log_interval=3), log=lines.append)
    logged = [x for x in lines if x.startswith("update ")]
    assert [x.split(":")[0] for x in logged] == ["update 1", "update 3", "update 6"]
    assert all("loss " in x and "tok/s" in x and "lr " in x for x in logged)


def test_hooks_are_called_at_every_validation_and_once_at_the_end(synth_data, tmp_path):
    """What an analysis adds to a run is a hook: the trainer calls it after every validation (its
    structures in every batch) and once at the end, and refuses a user's file under a name it writes."""
    from structnmt.syntax.batching import StructureSpec
    from structnmt.train.hooks import TrainingHook

    class Recorder(TrainingHook):
        files = ("recorder.txt",)

        def __init__(self):
            self.seen: list[tuple[str, int]] = []

        def required_structures(self, trainer):
            return {"wb": StructureSpec("word_boundaries")}

        def on_validation(self, trainer):
            assert "wb" in trainer.structures
            self.seen.append(("valid", trainer.state.num_updates))

        def on_end(self, trainer):
            trainer.outputs.write_text("recorder.txt", f"{len(self.seen)} validations\n")
            self.seen.append(("end", trainer.state.num_updates))

    hook = Recorder()
    trainer = Trainer(small_config(synth_data, tmp_path / "run"), log=quiet, hooks=[hook])
    try:
        trainer.train()
    finally:
        trainer.close()
    assert hook.seen == [("valid", 4), ("valid", 8), ("end", 8)]
    assert (tmp_path / "run" / "recorder.txt").read_text() == "2 validations\n"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "recorder.txt").write_text("my notes\n")
    with pytest.raises(UserError, match="recorder.txt: exists and was not written by a structnmt command"):
        Trainer(small_config(synth_data, tmp_path / "mine"), log=quiet, hooks=[Recorder()])
    assert (tmp_path / "mine" / "recorder.txt").read_text() == "my notes\n"


def test_the_run_state_records_how_it_trained_and_a_checkpoint_without_the_record_stays_unknown(synth_data,
                                                                                                 tmp_path):
    """Every launch records its device; bf16_autocast is False on a CPU, and a checkpoint written before the record
    (no bf16_autocast) resumes as not known (None), since its earlier launches may have used bf16 on a GPU."""
    save = tmp_path / "run"
    st = train(small_config(synth_data, save, max_updates=2), log=quiet)
    assert (st.device, st.bf16_autocast) == ("cpu", False)
    last = torch.load(save / "checkpoint_last.pt", weights_only=False)
    assert (last["run"]["device"], last["run"]["bf16_autocast"]) == ("cpu", False)
    del last["run"]["bf16_autocast"], last["run"]["device"]  # as a checkpoint from before the record
    torch.save(last, save / "checkpoint_last.pt")
    st = train(small_config(synth_data, save, max_updates=4), log=quiet)
    assert st.num_updates == 4 and (st.device, st.bf16_autocast) == ("cpu", None)
