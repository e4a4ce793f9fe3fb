"""Invariants of the Transformer and the attention contract (DESIGN.md)."""

from __future__ import annotations

import pytest
import torch
from random_batches import random_batch
from torch import nn
from torch.testing import assert_close

from structnmt.config import AttentionSpec, ConfigError, ModelConfig
from structnmt.data.vocab import PAD
from structnmt.models import build_model
from structnmt.nn import (
    ATTENTION_REGISTRY,
    AttentionOutput,
    IncrementalCache,
    MultiHeadAttention,
    register_attention,
    scaled_attention,
)

V = 40


def make_model(pre_norm: bool = True, **kw) -> nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      pre_norm=pre_norm, **kw)
    return build_model(cfg, V, V).eval()


def batch(B: int = 3, S: int = 7, T: int = 6, seed: int = 1):
    return random_batch(V, B, S, T, seed)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_incremental_equals_full_decoding(pre_norm):
    model = make_model(pre_norm)
    src, mask, tgt = batch()
    full = torch.log_softmax(model(src, mask, tgt).logits, dim=-1)
    enc = model.encode(src, mask)
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(tgt.shape[1])]
    assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_incremental_with_beam_reordering_of_caches():
    """Reordering the cache mid-sentence gives the scores of the reordered prefixes."""
    model = make_model()
    src, mask, tgt = batch(B=3, T=6)
    perm = torch.tensor([2, 0, 0])
    enc = model.encode(src, mask)
    cache = IncrementalCache()
    for t in range(3):
        model.decode_step(tgt[:, : t + 1], enc, cache)
    cache.reorder(perm)
    enc = enc.reorder(perm)
    new_tgt = tgt[perm]
    got = [model.decode_step(new_tgt[:, : t + 1], enc, cache) for t in range(3, 6)]
    want = torch.log_softmax(model(src[perm], mask[perm], new_tgt).logits, dim=-1)[:, 3:]
    assert_close(torch.stack(got, 1), want, atol=1e-5, rtol=1e-5)


def test_no_future_leakage():
    model = make_model()
    src, mask, tgt = batch()
    t = 2
    changed = tgt.clone()
    changed[:, t + 1 :] = torch.randint(4, V, changed[:, t + 1 :].shape)
    a = model(src, mask, tgt).logits
    b = model(src, mask, changed).logits
    assert_close(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


@pytest.mark.parametrize("pre_norm", [True, False])
def test_padding_invariance(pre_norm):
    model = make_model(pre_norm)
    src, mask, tgt = batch(B=3, S=9, T=8)
    short_src = src[1:2, :4].clone()
    short_tgt = tgt[1:2, :5].clone()
    alone = model(short_src, torch.ones_like(short_src, dtype=torch.bool), short_tgt).logits
    padded_src = src.clone()
    padded_src[1, 4:] = PAD
    padded_src[1, :4] = short_src
    padded_mask = padded_src != PAD
    padded_tgt = tgt.clone()
    padded_tgt[1, 5:] = PAD
    padded_tgt[1, :5] = short_tgt
    in_batch = model(padded_src, padded_mask, padded_tgt).logits[1:2, :5]
    assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)


def test_weights_are_distributions_that_ignore_padding():
    model = make_model()
    src, mask, tgt = batch()
    out = model(src, mask, tgt, need_weights=True)
    enc_w = out.attentions["encoder_self"]
    assert len(enc_w) == 2 and enc_w[0].shape == (3, 4, 7, 7)
    assert_close(enc_w[0].sum(-1), torch.ones(3, 4, 7))
    assert float(enc_w[0][1, :, :, 5:].detach().abs().max()) == 0.0
    self_w = out.attentions["decoder_self"][0]
    assert float(torch.triu(self_w, diagonal=1).abs().max()) == 0.0
    assert out.attentions["cross"][0].shape == (3, 4, 6, 7)


def test_explicit_path_equals_sdpa_path():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    bias = torch.randn(2, 3, 5, 5, generator=g)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    for kw in ({}, {"causal": True}, {"bias": bias}, {"key_mask": key_mask, "bias": bias, "causal": True}):
        fast, none = scaled_attention(q, k, v, **kw)
        slow, w = scaled_attention(q, k, v, need_weights=True, **kw)
        assert none is None and w is not None
        assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    # a learned bias takes the explicit path and receives a gradient
    lb = bias.clone().requires_grad_(True)
    out, _ = scaled_attention(q, k, v, bias=lb)
    out.sum().backward()
    assert lb.grad is not None and float(lb.grad.abs().sum()) > 0


def test_causal_with_offset_matches_full_rows():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    full, _ = scaled_attention(q, k, v, causal=True)
    last, _ = scaled_attention(q[:, :, 3:4], k[:, :, :4], v[:, :, :4], causal=True, query_offset=3)
    assert_close(last, full[:, :, 3:4])


def test_tied_and_shared_embeddings():
    m = make_model(share_all_embeddings=True)
    assert m.src_embed is m.tgt_embed and m.output_proj.weight is m.tgt_embed.weight
    m = make_model(tie_output=True)
    assert m.src_embed is not m.tgt_embed and m.output_proj.weight is m.tgt_embed.weight
    m = make_model(tie_output=False)
    assert m.output_proj.weight is not m.tgt_embed.weight
    with pytest.raises(ValueError, match="joint vocabulary"):
        build_model(ModelConfig(share_all_embeddings=True), 10, 12)


def test_unknown_mechanism_names_the_nearest():
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1)
    cfg.attention.encoder_self = AttentionSpec(name="mhaa")
    with pytest.raises(ConfigError, match="did you mean 'mha'"):
        build_model(cfg, V, V)


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="registered twice"):
        register_attention("mha")(MultiHeadAttention)


class _ToyLoss(MultiHeadAttention):
    """Test mechanism: plain MHA that also returns an auxiliary loss."""

    def forward(self, query, memory, ctx):
        out = super().forward(query, memory, ctx)
        return AttentionOutput(out.output, out.weights, {"toy": out.output.pow(2).mean()}, {})


def test_contract_hosts_aux_losses():
    """A mechanism can return an auxiliary loss without any change to the model (the MG-SA
    tag loss's hook); appended nodes (PhraseTransformer) are in tests/test_phrase_transformer.py."""
    name = "_test_toy_loss"
    if name not in ATTENTION_REGISTRY:
        register_attention(name)(_ToyLoss)
    try:
        cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0)
        cfg.attention.overrides["encoder_self.1"] = AttentionSpec(name=name)
        model = build_model(cfg, V, V).eval()
        src, mask, tgt = batch()
        out = model(src, mask, tgt)
        assert "toy" in out.aux_losses and out.aux_losses["toy"].requires_grad
    finally:
        ATTENTION_REGISTRY.pop(name, None)


def test_xavier_attention_init_is_fairseqs_and_linear_stays_the_default():
    """model.attention_init=xavier: fairseq's MultiheadAttention.reset_parameters. At d=128 the standard
    deviations tell the rules apart: Glorot with gain 1/sqrt(2) on each d x d matrix 0.0625 (W_K and W_V
    each on its own: Glorot over the fused 2d x d kv_proj would give 0.051), Glorot on W_O 0.088,
    nn.Linear's default 0.051."""
    import math

    d = 128
    xavier = build_model(ModelConfig(d_model=d, ffn_dim=256, heads=4, encoder_layers=1, decoder_layers=1,
                                     attention_init="xavier"), V, V)
    attns = [m for m in xavier.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attns) == 3  # encoder self, decoder self, cross
    qkv_std, out_std, linear_std = (2 ** -0.5) * math.sqrt(2 / (2 * d)), math.sqrt(2 / (2 * d)), 1 / math.sqrt(3 * d)
    for a in attns:
        for w in (a.q_proj.weight, *a.kv_proj.weight.chunk(2, dim=0)):
            assert abs(w.std().item() - qkv_std) < 0.03 * qkv_std
            assert w.abs().max().item() <= math.sqrt(3) * qkv_std + 1e-6  # uniform on [-bound, bound]
        assert abs(a.out_proj.weight.std().item() - out_std) < 0.03 * out_std
        assert torch.count_nonzero(a.out_proj.bias) == 0
        assert torch.count_nonzero(a.q_proj.bias) > 0 and torch.count_nonzero(a.kv_proj.bias) > 0  # nn.Linear's
    default = build_model(ModelConfig(d_model=d, ffn_dim=256, heads=4, encoder_layers=1, decoder_layers=1), V, V)
    assert ModelConfig().attention_init == "linear"
    for a in (m for m in default.modules() if isinstance(m, MultiHeadAttention)):
        assert abs(a.out_proj.weight.std().item() - linear_std) < 0.03 * linear_std
        assert torch.count_nonzero(a.out_proj.bias) > 0


@pytest.mark.parametrize(("model", "named"), [({"family": "rnn"}, "model.family is rnn"),
                                              ({"attention": {"encoder_self": {"name": "localness"}}}, "localness")])
def test_xavier_attention_init_is_refused_where_a_mechanism_has_projections_of_its_own(model, named):
    from structnmt.config import from_dict

    with pytest.raises(ConfigError, match=f"model.attention_init='xavier' is for plain Transformers.*{named}"):
        from_dict({"model": {"attention_init": "xavier", **model}})
    with pytest.raises(ConfigError, match="model.attention_init='glorot' must be linear or xavier"):
        from_dict({"model": {"attention_init": "glorot"}})
