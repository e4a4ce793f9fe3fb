"""train.cuda_graphs (structnmt.train.cuda_graphs): the shape buckets, the refusals, and the compiled step, run on
the CPU with TorchDynamo's eager backend (the same code path as the cudagraphs backend, without a GPU)."""

from __future__ import annotations

import pytest
import torch

from structnmt.config import ConfigError, from_dict
from structnmt.data.dataset import Batch
from structnmt.data.vocab import BOS, EOS, PAD
from structnmt.models import build_model
from structnmt.train import cuda_graphs, trainer
from structnmt.train.loss import label_smoothed_nll
from structnmt.train.trainer import Trainer


def _batch(B: int, S: int, T: int, vocab: int = 60) -> Batch:
    gen = torch.Generator().manual_seed(B * 100 + S)
    src = torch.randint(4, vocab, (B, S), generator=gen)
    src[1:, S - 2:] = PAD  # shorter sentences, as in a real batch
    tgt = torch.randint(4, vocab, (B, T + 1), generator=gen)
    tgt[0, T - 1:] = PAD
    return Batch(src=src, tgt_in=tgt[:, :-1], tgt_out=tgt[:, 1:], src_mask=src != PAD, ids=torch.arange(B))


def _model():
    cfg = from_dict({"model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2,
                               "dropout": 0.0, "share_all_embeddings": True, "max_positions": 64}}).model
    torch.manual_seed(0)
    return build_model(cfg, 60, 60)


def test_bucketed_pads_every_dimension_to_the_bucket_and_keeps_the_loss():
    batch = _batch(5, 11, 9)
    padded = cuda_graphs.bucketed(batch)
    assert padded.src.shape == (8, 16) and padded.tgt_in.shape == (8, 16) and padded.tgt_out.shape == (8, 16)
    assert torch.equal(padded.src[:5, :11], batch.src) and torch.equal(padded.tgt_out[:5, :9], batch.tgt_out)
    assert (padded.src[5:, 0] == EOS).all() and (padded.src[5:, 1:] == PAD).all()
    assert (padded.tgt_in[5:, 0] == BOS).all() and (padded.tgt_out[5:] == PAD).all()
    assert torch.equal(padded.src_mask, padded.src != PAD)
    model = _model()
    losses, grads = [], []
    for b in (batch, padded):
        model.zero_grad()
        loss, nll = label_smoothed_nll(model(b.src, b.src_mask, b.tgt_in).logits, b.tgt_out, 0.1)
        loss.backward()
        losses.append((float(loss.detach()), float(nll.detach())))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)
    already = _batch(8, 16, 8)
    assert cuda_graphs.bucketed(already) is already


def test_cuda_graphs_are_refused_on_a_cpu_and_for_models_with_structures():
    cfg = from_dict({"train": {"cuda_graphs": True}})
    with pytest.raises(ConfigError, match="needs a CUDA device and this run trains on cpu"):
        cuda_graphs.check_cuda_graphs(cfg, torch.device("cpu"), {})
    with pytest.raises(ConfigError, match="reads source structures \\(heads\\)"):
        cuda_graphs.check_cuda_graphs(cfg, torch.device("cuda"), {"heads": object()})
    cuda_graphs.check_cuda_graphs(from_dict({}), torch.device("cpu"), {"heads": object()})  # off: no check
    with pytest.raises(ConfigError, match="RNN family's packed LSTM"):
        cuda_graphs.check_cuda_graphs(from_dict({"model": {"family": "rnn"}, "train": {"cuda_graphs": True}}),
                                      torch.device("cuda"), {})
    with pytest.raises(ConfigError, match="train.update_freq=2: a replayed graph"):
        cuda_graphs.check_cuda_graphs(from_dict({"train": {"cuda_graphs": True, "update_freq": 2}}),
                                      torch.device("cuda"), {})
    cuda_graphs.check_cuda_graphs(cfg, torch.device("cuda"), {})  # a plain Transformer on a GPU: allowed


def test_bucketed_never_pads_past_the_models_positions():
    """A batch as long as the model's positions (100, not a multiple of 8) keeps its length: padded to 104 the
    model would refuse it."""
    batch = _batch(3, 100, 100)
    padded = cuda_graphs.bucketed(batch, max_len=100)
    assert padded.src.shape == (8, 100) and padded.tgt_in.shape == (8, 100)
    assert cuda_graphs.bucketed(_batch(3, 90, 90), max_len=100).src.shape == (8, 96)


def test_the_option_may_change_when_a_run_resumes_as_the_device_may():
    from structnmt.train.lock import RESUMABLE_KEYS

    assert {"train.cuda_graphs", "train.device"} <= RESUMABLE_KEYS


def test_the_command_line_refuses_the_option_on_a_cpu_in_one_sentence(synth_data, tmp_path, capsys):
    import yaml
    from conftest import assert_user_error, cli

    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({
        "data": {"path": str(synth_data), "max_tokens": 300},
        "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
        "train": {"save_dir": str(tmp_path / "run"), "device": "cpu", "tensorboard": False, "max_updates": 2}}))
    code, _, err = cli(capsys, "train", config, "train.cuda_graphs=true", "--no-progress")
    assert_user_error(code, err, "train.cuda_graphs=true needs a CUDA device", "set it to false")
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


def test_training_with_the_option_on_a_cpu_is_one_sentence(synth_data, tmp_path):
    cfg = from_dict({"data": {"path": str(synth_data), "max_tokens": 300},
                     "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
                     "train": {"save_dir": str(tmp_path / "run"), "device": "cpu", "cuda_graphs": True,
                               "tensorboard": False, "progress": False}})
    with pytest.raises(ConfigError, match="train.cuda_graphs=true needs a CUDA device"):
        Trainer(cfg, log=lambda *_: None)


def test_the_compiled_step_trains_as_the_eager_one_and_reuses_its_graphs(synth_data, tmp_path, monkeypatch):
    """The trainer with train.cuda_graphs (the device check lifted, the eager backend in the cudagraphs backend's
    place): its losses over 8 updates equal the eager trainer's up to rounding (its batches are padded to the
    buckets), and TorchDynamo compiled one graph per bucketed shape, not one per batch."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(trainer, "check_cuda_graphs", lambda *_: None)
    monkeypatch.setattr(trainer, "compiled_step", lambda m: cuda_graphs.compiled_step(m, backend="eager"))
    stats = {}
    for on in (False, True):
        torch._dynamo.reset()
        counters.clear()
        cfg = from_dict({"data": {"path": str(synth_data), "max_tokens": 300},
                         "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1,
                                   "dropout": 0.0, "share_all_embeddings": True, "max_positions": 64},
                         "train": {"save_dir": str(tmp_path / f"run{on}"), "device": "cpu", "cuda_graphs": on,
                                   "tensorboard": False, "progress": False, "warmup_updates": 2, "lr": 1e-3}})
        tr = Trainer(cfg, log=lambda *_: None)
        try:
            groups = [[b] for b in tr.batches.epoch_order(1)[:8]]
            stats[on] = [tr.train_step(g)["loss"] for g in groups]
            shapes = {(*cuda_graphs.bucketed(_collated(tr, g[0])).src.shape, cuda_graphs.bucketed(
                _collated(tr, g[0])).tgt_in.shape[1]) for g in groups}
            raw = {(*_collated(tr, g[0]).src.shape, _collated(tr, g[0]).tgt_in.shape[1]) for g in groups}
        finally:
            tr.close()
        graphs = counters["stats"]["unique_graphs"]
    assert stats[True] == pytest.approx(stats[False], rel=1e-4)
    assert graphs == len(shapes) < len(raw)


def _collated(tr: Trainer, ids) -> Batch:
    from structnmt.data.dataset import collate

    return collate(tr.train_split, ids, tr.structures, tr.label_ids)
