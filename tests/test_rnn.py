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
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, DecodeConfig, TrainConfig
    from structnmt.decode.translate import Translator

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


VARIANTS = [dict(syntax="sa", annotations="shared"), dict(syntax="sa", annotations="separate"),
            dict(syntax="sa", annotations="one_set"), dict(syntax="sa", annotations="shared", hard=True),
            dict(syntax="fa", annotations="shared"), dict(syntax="fa", annotations="separate"),
            dict(syntax="sa", annotations="shared", root="learned", scale=True)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()))
def test_sa_nmt_variants_decode_consistently_and_ignore_padding(variant):
    torch.manual_seed(0)
    model = build_model(cfg(rnn=RNNConfig(**variant)), V, V).eval()
    src, mask, tgt = batch()
    out = model(src, mask, tgt)
    full = torch.log_softmax(out.logits, -1)
    enc = model.encode(src, mask, need_weights=True)
    assert (enc.syntax is None) == (variant["annotations"] == "one_set")
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(tgt.shape[1])]
    assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    for b, n in enumerate(mask.sum(-1).tolist()):
        alone = model(src[b: b + 1, :n], mask[b: b + 1, :n], tgt[b: b + 1]).logits
        assert_close(out.logits[b: b + 1], alone, atol=1e-5, rtol=1e-5)
    beta = enc.attentions["arcs"][0]
    for b, n in enumerate(mask.sum(-1).tolist()):
        assert_close(beta[b, :n, :n].sum(0), torch.ones(n), atol=1e-5, rtol=1e-5)  # one head (or root) each
        assert (beta[b, n:, :] == 0).all() and (beta[b, :, n:] == 0).all()
    model.train()
    model(src, mask, tgt).logits.logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    assert model.w_q.weight.grad.abs().sum() > 0  # the head selection is trained through the translation loss


def test_head_selection_is_eqs_6_to_8():
    from structnmt.nn.matrix_tree import marginals

    torch.manual_seed(0)
    model = build_model(cfg(rnn=RNNConfig(syntax="sa")), V, V).eval()
    S = torch.randn(2, 4, 16)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    m, beta, phi = model.head_selection(S, mask)
    q, k, v = model.w_q(S), model.w_k(S), model.w_v(S)
    assert_close(phi[0, 1, 2], q[0, 1] @ k[0, 2])  # word 1 heading word 2
    assert_close(beta, marginals(phi, mask.sum(-1)))
    want = sum(beta[0, i, 3] * v[0, i] for i in range(4))  # M's column 3 = S_v beta[:, 3]
    assert_close(m[0, 3], want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_hard_attention_is_straight_through(seed):
    torch.manual_seed(seed)
    soft = build_model(cfg(rnn=RNNConfig(syntax="sa")), V, V)
    hard = build_model(cfg(rnn=RNNConfig(syntax="sa", hard=True)), V, V)
    hard.load_state_dict(soft.state_dict())
    S = torch.randn(1, 5, 16, requires_grad=True)
    mask = torch.ones(1, 5, dtype=torch.bool)
    _, b_soft, _ = soft.head_selection(S, mask)
    _, b_hard, _ = hard.head_selection(S, mask)
    assert set(b_hard.detach().unique().tolist()) <= {0.0, 1.0}  # forward: exactly one-hot per column
    assert (b_hard.detach().sum(1) == 1).all()
    assert (b_hard.detach().argmax(1) == b_soft.detach().argmax(1)).all()  # eq. 21, root entry included
    w = torch.randn(1, 5, 5)
    g_soft = torch.autograd.grad((b_soft * w).sum(), S)[0]
    g_hard = torch.autograd.grad((b_hard * w).sum(), S)[0]
    assert_close(g_hard, g_soft)  # backward: the marginals' gradient


def test_score_cap_bounds_every_score_softly():
    torch.manual_seed(0)
    free = build_model(cfg(rnn=RNNConfig(syntax="sa")), V, V).eval()
    capped = build_model(cfg(rnn=RNNConfig(syntax="sa", score_cap=2.0)), V, V).eval()
    capped.load_state_dict(free.state_dict())
    S = torch.randn(2, 4, 16) * 10  # scores of hundreds
    mask = torch.ones(2, 4, dtype=torch.bool)
    _, _, phi = free.head_selection(S, mask)
    _, beta, phi_c = capped.head_selection(S, mask)
    assert phi.abs().max() > 20
    assert_close(phi_c, 2.0 * torch.tanh(phi / 2.0))
    assert phi_c.abs().max() <= 2.0
    assert_close(beta.sum(1), torch.ones(2, 4))


def test_arc_lr_scale_puts_the_arc_scorer_in_its_own_group(synth_data, tmp_path):
    """rnn.arc_lr_scale: W_q, W_k (and a learned root query) step with lr x scale, the rest with lr."""
    from structnmt.config import Config, DataConfig, TrainConfig
    from structnmt.train.trainer import Trainer

    model = build_model(cfg(rnn=RNNConfig(syntax="sa", root="learned", arc_lr_scale=0.2)), V, V)
    groups = model.optimizer_groups()
    assert [g["lr_scale"] for g in groups] == [1.0, 0.2]
    arc_ids = {id(p) for p in groups[1]["params"]}
    assert arc_ids == {id(model.w_q.weight), id(model.w_k.weight), id(model.root_query)}
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    assert len(build_model(cfg(rnn=RNNConfig(syntax="sa")), V, V).optimizer_groups()) == 1
    c = Config(data=DataConfig(path=str(synth_data), max_tokens=600),
               model=cfg(rnn=RNNConfig(syntax="sa", arc_lr_scale=0.2)),
               train=TrainConfig(save_dir=str(tmp_path / "m"), lr=1e-3, warmup_updates=0, tensorboard=False,
                                 progress=False, max_updates=1))
    tr = Trainer(c, log=lambda *_: None)
    tr.train()
    lrs = [g["lr"] for g in tr.optimizer.param_groups]
    assert lrs == pytest.approx([1e-3, 2e-4])


def test_bad_rnn_option_through_the_cli_is_one_sentence(synth_data, tmp_path, capsys):
    from structnmt.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: {{path: {synth_data}}}\nmodel: {{family: rnn, d_model: 16, encoder_layers: 1, "
                   "decoder_layers: 1, rnn: {syntax: sa}}\n"
                   f"train: {{save_dir: {tmp_path / 'm'}, max_updates: 1, tensorboard: false}}\n")
    assert main(["train", str(cfg), "model.rnn.score_cap=-1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "model.rnn: score_cap=-1.0 must be >= 0" in err and "Traceback" not in err


def test_bad_rnn_options():
    for bad in (dict(syntax="tree"), dict(annotations="both"), dict(root="first"), dict(score_cap=-1.0),
                dict(arc_lr_scale=0.0)):
        with pytest.raises(ConfigError, match="model.rnn"):
            build_model(cfg(rnn=RNNConfig(**bad)), V, V)


def test_halve_on_rise_schedule(synth_data, tmp_path, monkeypatch):
    """SA-NMT §4.3: constant lr after the warm-up, halved each time the validation perplexity rises."""
    import structnmt.train.trainer as trainer_module
    from structnmt.config import Config, DataConfig, TrainConfig
    from structnmt.train.schedule import halve_on_rise_lr
    from structnmt.train.trainer import Trainer

    assert halve_on_rise_lr(5, lr=1e-3, warmup=10, scale=1.0, warmup_init_lr=0.0) == pytest.approx(5e-4)
    assert halve_on_rise_lr(50, lr=1e-3, warmup=10, scale=0.25) == pytest.approx(2.5e-4)
    c = Config(data=DataConfig(path=str(synth_data), max_tokens=600), model=cfg(),
               train=TrainConfig(save_dir=str(tmp_path / "m"), lr=1e-3, warmup_updates=0, lr_schedule="halve_on_rise",
                                 tensorboard=False, progress=False))
    tr = Trainer(c, log=lambda *_: None)
    nlls = iter([2.0, 1.5, 1.7, 1.6, 1.9])
    monkeypatch.setattr(trainer_module, "validation_loss", lambda *a: (lambda v: {"loss": v, "nll": v})(next(nlls)))
    scales = []
    for _ in range(5):
        tr.validate()
        scales.append(tr.state.lr_scale)
    assert scales == [1.0, 1.0, 0.5, 0.5, 0.25]  # rises at the 3rd and 5th validation
    assert tr._lr() == pytest.approx(2.5e-4)
    with pytest.raises(ConfigError, match="lr_schedule"):
        from structnmt.config import validate

        c.train.lr_schedule = "step"
        validate(c)


@pytest.mark.parametrize("annotations", ["shared", "separate"])
def test_syntax_gate_norm_of_eq_23(annotations):
    """attentions["syntax_gate"] is z_t = ||sigmoid(W_gate h_t)||_2 per target position: with
    W_gate = 0 every gate is 0.5, so z_t = 0.5 sqrt(d); a plain RNN has no gate."""
    torch.manual_seed(0)
    src, mask, tgt = batch()
    plain = build_model(cfg(), V, V).eval()
    assert "syntax_gate" not in plain(src, mask, tgt, need_weights=True).attentions
    model = build_model(cfg(rnn=RNNConfig(syntax="sa", annotations=annotations)), V, V).eval()
    z = model(src, mask, tgt, need_weights=True).attentions["syntax_gate"]
    assert z.shape == (3, 4)
    assert ((z > 0) & (z < 16 ** 0.5)).all() and z.std() > 0  # sqrt(d) bounds, and it varies
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "w_gate") and m.w_gate is not None:
                m.w_gate.weight.zero_()
    z0 = model(src, mask, tgt, need_weights=True).attentions["syntax_gate"]
    assert_close(z0, torch.full((3, 4), 0.5 * 16 ** 0.5))
    assert "syntax_gate" not in model(src, mask, tgt).attentions  # only when weights are asked for
