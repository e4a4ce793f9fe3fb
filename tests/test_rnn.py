"""The RNN translator (SA-NMT §2, eqs. 1-5): cached decoding equals the teacher-forced pass,
padding changes nothing, attention ignores padding, the paper's initialisation, and it
trains and translates through the shared trainer and beam search."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from structnmt.config import ConfigError, ModelConfig, RNNConfig
from structnmt.decode.beam import beam_search
from structnmt.models import build_model
from structnmt.nn.attention import IncrementalCache

V = 30


def cfg(**kw) -> ModelConfig:
    base = dict(family="rnn", d_model=16, encoder_layers=2, decoder_layers=2, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


def batch():
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]])
    mask = src != 0
    tgt = torch.tensor([[1, 12, 13, 14], [1, 15, 16, 17], [1, 18, 19, 20]])
    return src, mask, tgt


@pytest.mark.parametrize("layers", [(2, 2), (1, 2)])
def test_cached_decoding_equals_teacher_forcing(layers):
    torch.manual_seed(0)
    model = build_model(cfg(encoder_layers=layers[0], decoder_layers=layers[1]), V, V).eval()
    src, mask, tgt = batch()
    full = torch.log_softmax(model(src, mask, tgt).logits, -1)
    enc = model.encode(src, mask)
    assert (enc.init is None) == (layers[0] != layers[1])
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(tgt.shape[1])]
    assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    # a beam permutation of the cache and the encoder output keeps them consistent
    idx = torch.tensor([2, 2, 0])
    cache2 = IncrementalCache()
    for t in range(2):
        model.decode_step(tgt[:, : t + 1], enc, cache2)
    cache2.reorder(idx)
    got = model.decode_step(tgt[idx, :3], enc.reorder(idx), cache2)
    assert_close(got, full[idx, 2], atol=1e-5, rtol=1e-5)


def test_padding_changes_nothing_and_attention_ignores_it():
    torch.manual_seed(0)
    model = build_model(cfg(), V, V).eval()
    src, mask, tgt = batch()
    out = model(src, mask, tgt, need_weights=True)
    alpha = out.attentions["cross"][0]  # (B, 1, T, n)
    assert alpha.shape == (3, 1, 4, 5)
    assert (alpha[1, :, :, 3:] == 0).all() and (alpha[2, :, :, 2:] == 0).all()
    assert_close(alpha.sum(-1), torch.ones(3, 1, 4))
    for b, n in enumerate(mask.sum(-1).tolist()):
        alone = model(src[b: b + 1, :n], mask[b: b + 1, :n], tgt[b: b + 1]).logits
        assert_close(out.logits[b: b + 1], alone, atol=1e-5, rtol=1e-5)


def test_paper_initialisation_and_tied_output():
    model = build_model(cfg(rnn=RNNConfig(init_range=0.04), tie_output=True), V, V)
    for name, p in model.named_parameters():
        assert p.abs().max() <= 0.04, name
    assert model.output_proj.weight is model.tgt_embed.weight
    assert (model.tgt_embed.weight[0] == 0).all()
    with pytest.raises(ConfigError, match="even size"):
        build_model(cfg(d_model=15), V, V)


def test_beam_search_runs_on_the_rnn():
    torch.manual_seed(0)
    model = build_model(cfg(), V, V).eval()
    src, mask, _ = batch()
    hyps = beam_search(model, src, mask, beam=3, max_len_a=1.0, max_len_b=4, max_positions=64)
    assert len(hyps) == 3 and all(len(h) >= 1 for h in hyps)
    assert all(len(h[0].tokens) <= 4 + src.shape[1] for h in hyps)


def test_trains_and_translates_through_the_shared_machinery(synth_data, tmp_path):
    from structnmt.config import Config, DataConfig, DecodeConfig, TrainConfig
    from structnmt.decode.translate import Translator
    from structnmt.train.trainer import train

    c = Config(data=DataConfig(path=str(synth_data), max_tokens=600),
               model=cfg(d_model=32, rnn=RNNConfig(init_range=0.1)),
               train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=6, validate_interval_updates=3,
                                 lr=0.001, warmup_updates=0, tensorboard=False, progress=False),
               decode=DecodeConfig(beam=2, max_len_b=5))
    state = train(c, log=lambda *_: None)
    assert state.num_updates == 6 and state.history[-1]["loss"] < state.history[0]["loss"] + 1.0
    tr = Translator(tmp_path / "m" / "checkpoint_last.pt")
    out = tr.translate(["a b c", ""])
    assert len(out) == 2 and out[1][0].text == ""
