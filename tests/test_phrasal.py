"""Phrase-based attentions (CONVKV / QUERYK; homogeneous / heterogeneous): docs/phrasal.md."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from random_batches import random_batch
from torch.testing import assert_close

from structnmt.config import AttentionSpec, ConfigError, ModelConfig
from structnmt.data.vocab import PAD
from structnmt.models import build_model
from structnmt.nn import (
    AttentionContext,
    AttentionDims,
    HeterogeneousPhrasalAttention,
    HomogeneousPhrasalAttention,
    IncrementalCache,
    InterleavedPhrasalAttention,
    MultiHeadAttention,
    build_attention,
    queryk_logits,
)

V = 40
D, H = 32, 4

SPECS = [
    ("phrasal_homogeneous", {"variant": "convkv", "ngram_heads": [2, 2]}),
    ("phrasal_homogeneous", {"variant": "queryk", "ngram_heads": [2, 2]}),
    ("phrasal_homogeneous", {"variant": "convkv", "ngram_heads": [1, 2, 1]}),
    ("phrasal_homogeneous", {"variant": "queryk", "ngram_heads": [1, 1, 2]}),
    ("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2]}),
    ("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]}),
    ("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2, 3]}),
    ("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2, 3, 4]}),
    ("phrasal_interleaved", {"variant": "convkv"}),
    ("phrasal_interleaved", {"variant": "queryk"}),
]
IDS = [f"{n.split('_')[1][:5]}-{o['variant']}-{o.get('ngram_heads', o.get('ngrams', [1, 2]))}" for n, o in SPECS]


def make_model(name: str, options: dict, roles=("encoder_self", "decoder_self", "cross")):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, ffn_dim=64, heads=H, encoder_layers=1, decoder_layers=2, dropout=0.0)
    for role in roles:
        setattr(cfg.attention, role, AttentionSpec(name=name, options=dict(options)))
    return build_model(cfg, V, V).eval()


def batch(B: int = 3, S: int = 7, T: int = 6, seed: int = 1):
    return random_batch(V, B, S, T, seed)


def module(name: str, options: dict, role: str = "encoder_self", seed: int = 0):
    torch.manual_seed(seed)
    return build_attention(name, options, AttentionDims(D, H, 0.0, role, f"test.{role}")).eval()


# --------------------------------------------------------------------------- inside a Transformer


@pytest.mark.parametrize(("name", "options"), SPECS, ids=IDS)
def test_incremental_equals_full_decoding(name, options):
    model = make_model(name, options)
    src, mask, tgt = batch()
    full = torch.log_softmax(model(src, mask, tgt).logits, dim=-1)
    enc = model.encode(src, mask)
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(tgt.shape[1])]
    assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "options"), SPECS, ids=IDS)
def test_incremental_with_beam_reordering_of_caches(name, options):
    model = make_model(name, options)
    src, mask, tgt = batch(B=3, T=6)
    perm = torch.tensor([2, 0, 0])
    enc = model.encode(src, mask)
    cache = IncrementalCache()
    for t in range(3):
        model.decode_step(tgt[:, : t + 1], enc, cache)
    cache.reorder(perm)
    enc = enc.reorder(perm)
    new_tgt = tgt[perm].clone()
    new_tgt[1, 3:] = tgt[1, 3:]  # different continuations of the same prefix
    got = [model.decode_step(new_tgt[:, : t + 1], enc, cache) for t in range(3, 6)]
    want = torch.log_softmax(model(src[perm], mask[perm], new_tgt).logits, dim=-1)[:, 3:]
    assert_close(torch.stack(got, 1), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "options"), SPECS, ids=IDS)
@pytest.mark.parametrize("roles", [("decoder_self",), ("cross",)])
def test_no_future_leakage(name, options, roles):
    model = make_model(name, options, roles)
    src, mask, tgt = batch()
    t = 2
    changed = tgt.clone()
    changed[:, t + 1 :] = torch.randint(4, V, changed[:, t + 1 :].shape, generator=torch.Generator().manual_seed(5))
    a = model(src, mask, tgt).logits
    b = model(src, mask, changed).logits
    assert_close(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


@pytest.mark.parametrize(("name", "options"), SPECS, ids=IDS)
def test_padding_invariance(name, options):
    model = make_model(name, options)
    src, mask, tgt = batch(B=3, S=9, T=8)
    short_src, short_tgt = src[1:2, :4].clone(), tgt[1:2, :5].clone()
    alone = model(short_src, torch.ones_like(short_src, dtype=torch.bool), short_tgt).logits
    padded_src, padded_tgt = src.clone(), tgt.clone()
    padded_src[1, 4:], padded_src[1, :4] = PAD, short_src
    padded_tgt[1, 5:], padded_tgt[1, :5] = PAD, short_tgt
    in_batch = model(padded_src, padded_src != PAD, padded_tgt).logits[1:2, :5]
    assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- module level


@pytest.mark.parametrize(("name", "options"), SPECS, ids=IDS)
def test_decoder_self_module_is_causal_and_weights_respect_phrase_ends(name, options):
    attn = module(name, options, role="decoder_self")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, D, generator=g)
    y = x.clone()
    y[:, 4:] = torch.randn(2, 2, D, generator=g)
    a = attn(x, x, AttentionContext(causal=True, need_weights=True))
    b = attn(y, y, AttentionContext(causal=True))
    assert_close(a.output[:, :4], b.output[:, :4])
    w = a.weights.detach()
    blocks = w.shape[-1] // 6
    assert w.shape[:3] == (2, 2 * H if name == "phrasal_interleaved" else H, 6)
    for blk in range(blocks):  # the phrase ending at j is visible to query t iff j <= t
        assert float(torch.triu(w[..., blk * 6 : (blk + 1) * 6], diagonal=1).abs().max()) == 0.0
    assert_close(w.sum(-1), torch.ones(w.shape[:3]))


def test_heterogeneous_phrase_key_valid_only_when_all_tokens_are():
    attn = module("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2, 3]})
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(3))
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    w = attn(x, x, AttentionContext(key_mask=key_mask, need_weights=True)).weights.detach()  # (2, H, 6, 18)
    uni, bi, tri = w[..., :6], w[..., 6:12], w[..., 12:]
    # no padding: the bigram ending at 0 and the trigrams ending at 0, 1 do not exist
    assert float(bi[..., 0].abs().max()) == 0.0 and float(tri[..., :2].abs().max()) == 0.0
    # phrases overlapping the padded tokens 4, 5 get no weight
    assert float(uni[1, ..., 4:].abs().max()) == 0.0
    assert float(bi[1, ..., 4:].abs().max()) == 0.0 and float(tri[1, ..., 4:].abs().max()) == 0.0
    assert float(bi[1, ..., 1:4].min()) > 0.0 and float(tri[1, ..., 2:4].min()) > 0.0
    assert float(bi[0, ..., 5].min()) > 0.0
    assert_close(w.sum(-1), torch.ones(2, H, 6))


def test_heterogeneous_key_shorter_than_window_has_no_phrases():
    attn = module("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2, 3]})
    x = torch.randn(2, 1, D)
    out = attn(x, x, AttentionContext(need_weights=True))
    assert torch.isfinite(out.output).all()
    assert_close(out.weights[..., 0], torch.ones(2, H, 1))


@pytest.mark.parametrize("variant", ["convkv", "queryk"])
def test_homogeneous_left_padding_and_key_mask(variant):
    attn = module("phrasal_homogeneous", {"variant": variant, "ngram_heads": [2, 1, 1]})
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(4))
    key_mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    w = attn(x, x, AttentionContext(key_mask=key_mask, need_weights=True)).weights.detach()  # (2, H, 6, 6)
    assert w.shape == (2, H, 6, 6)
    assert float(w[1, ..., 3:].abs().max()) == 0.0  # phrases ending on or overlapping padding
    assert float(w[..., 0].min()) > 0.0  # left zero-padding: position 0 keeps a phrase in every head
    assert_close(w.sum(-1), torch.ones(2, H, 6))


def test_convkv_keys_are_a_left_padded_convolution():
    attn = module("phrasal_homogeneous", {"variant": "convkv", "ngram_heads": [0, 0, 4]})
    br = attn.branches[0]
    assert br.n == 3
    x = torch.randn(2, 5, D)
    k, v, _ = br.keys_values(torch.cat([x.new_zeros(2, 2, D), x], 1), 5, None)
    # Conv_3(K, W_k) with W_k (n, D, d): a conv1d over the zero-left-padded sequence
    weight = br.k_conv.weight.view(D, 3, D).permute(0, 2, 1)  # (out, in, n)
    ref = F.conv1d(F.pad(x.transpose(1, 2), (2, 0)), weight, br.k_conv.bias).transpose(1, 2)
    assert_close(k.transpose(1, 2).reshape(2, 5, D), ref, atol=1e-5, rtol=1e-5)


def test_queryk_shifted_products_equal_explicit_convolution():
    g = torch.Generator().manual_seed(6)
    B, Hh, T, S, n, d = 2, 3, 4, 6, 3, 5
    q = torch.randn(B, Hh, T, n, d, generator=g)
    k = torch.randn(B, Hh, S, d, generator=g)
    got = queryk_logits(q, k)
    ref = torch.empty(B, Hh, T, S)
    for b in range(B):
        for h in range(Hh):
            keys = F.pad(k[b, h].T[None], (n - 1, 0))  # (1, d, S + n - 1): left zero-padding
            kernel = q[b, h].permute(0, 2, 1)  # (T, d, n): each query is a convolution kernel
            ref[b, h] = F.conv1d(keys, kernel)[0]
    assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["phrasal_homogeneous", "phrasal_heterogeneous"])
def test_queryk_module_logits_are_shifted_products(name):
    # heterogeneous attention needs unigram keys ([2] alone is refused): one softmax over [1, 2]
    options = {"variant": "queryk", **({"ngram_heads": [0, 4]} if name == "phrasal_homogeneous" else {"ngrams": [1, 2]})}
    attn = module(name, options)
    x = torch.randn(2, 5, D)
    w = attn(x, x, AttentionContext(need_weights=True)).weights.detach()
    blocks = []
    for br in attn.branches:
        n = br.n
        q = br.q_proj(x).view(2, 5, n, H, D // H).permute(0, 3, 1, 2, 4)  # (B, H, T, n, d)
        k = br.k_proj(x).view(2, 5, H, D // H).transpose(1, 2)
        logits = queryk_logits(q, k) / math.sqrt(n * D // H)
        if name == "phrasal_heterogeneous" and n == 2:  # no padding: the bigram ending at 0 does not exist
            logits[..., 0] = float("-inf")
        blocks.append(logits)
    if name == "phrasal_homogeneous":
        blocks = blocks[-1:]  # the 4 bigram heads
    assert_close(w, torch.softmax(torch.cat(blocks, -1), -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["convkv", "queryk"])
@pytest.mark.parametrize("role", ["encoder_self", "decoder_self", "cross"])
def test_heterogeneous_unigrams_only_is_multi_head_attention(variant, role):
    torch.manual_seed(0)
    mha = MultiHeadAttention(dims=AttentionDims(D, H, 0.0, role, "m")).eval()
    het = module("phrasal_heterogeneous", {"variant": variant, "ngrams": [1]}, role=role)
    br = het.branches[0]
    wk, wv = mha.kv_proj.weight.chunk(2, 0)
    bk, bv = mha.kv_proj.bias.chunk(2, 0)
    q_lin = het.q_proj if variant == "convkv" else br.q_proj
    k_lin = br.k_conv if variant == "convkv" else br.k_proj
    with torch.no_grad():
        for dst, (w, b) in [(q_lin, (mha.q_proj.weight, mha.q_proj.bias)), (k_lin, (wk, bk)),
                            (br.v_conv, (wv, bv)), (het.out_proj, (mha.out_proj.weight, mha.out_proj.bias))]:
            dst.weight.copy_(w)
            dst.bias.copy_(b)
    x, mem = torch.randn(2, 5, D), torch.randn(2, 7, D)
    key_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    if role == "cross":
        ctx = dict(key_mask=key_mask)
    elif role == "decoder_self":
        mem, ctx = x, dict(causal=True)
    else:
        mem, ctx = x, dict(key_mask=key_mask[:, :5])
    a = mha(x, mem, AttentionContext(need_weights=True, **ctx))
    b = het(x, mem, AttentionContext(need_weights=True, **ctx))
    assert_close(b.output, a.output, atol=1e-5, rtol=1e-5)
    assert_close(b.weights, a.weights, atol=1e-5, rtol=1e-5)


def test_cross_attention_builds_source_phrases_once():
    attn = module("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]}, role="cross")
    mem = torch.randn(2, 7, D)
    cache = IncrementalCache()
    x = torch.randn(2, 3, D)
    first = attn(x[:, :1], mem, AttentionContext(cache=cache)).output
    entry = dict(cache.get("test.cross"))
    # a later step ignores the memory argument: the static entry is reused
    second = attn(x[:, 1:2], torch.zeros_like(mem), AttentionContext(cache=cache, query_offset=1)).output
    full = attn(x, mem, AttentionContext()).output
    assert_close(torch.cat([first, second], 1), full[:, :2], atol=1e-5, rtol=1e-5)
    assert all(cache.get("test.cross")[k] is entry[k] for k in entry)
    assert "x_tail" not in entry and entry["k1"].shape == (2, H, 7, 2 * D // H)


def test_decoder_cache_keeps_last_n_minus_1_inputs():
    attn = module("phrasal_homogeneous", {"variant": "queryk", "ngram_heads": [1, 1, 2]}, role="decoder_self")
    x = torch.randn(2, 5, D)
    cache = IncrementalCache()
    steps = [attn(x[:, t : t + 1], x[:, t : t + 1], AttentionContext(causal=True, cache=cache, query_offset=t)).output
             for t in range(5)]
    assert_close(torch.cat(steps, 1), attn(x, x, AttentionContext(causal=True)).output, atol=1e-5, rtol=1e-5)
    entry = cache.get("test.decoder_self")
    assert_close(entry["x_tail"], x[:, -2:])
    assert entry["kt2"].shape == (2, 2, 2 * D // H) and entry["k2"].shape == (2, 2, 5, 3 * D // H)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="sum to model.heads=4"):
        module("phrasal_homogeneous", {"ngram_heads": [4, 4]})
    with pytest.raises(ConfigError, match="unknown variant"):
        module("phrasal_heterogeneous", {"variant": "conv"})
    with pytest.raises(ConfigError, match="distinct lengths"):
        module("phrasal_heterogeneous", {"ngrams": [1, 1]})
    with pytest.raises(ConfigError, match="unknown key"):
        module("phrasal_heterogeneous", {"ngram_heads": [2, 2]})
    assert [b.n for b in module("phrasal_homogeneous", {}).branches] == [1, 2]
    assert isinstance(module("phrasal_heterogeneous", {}), HeterogeneousPhrasalAttention)
    assert isinstance(module("phrasal_homogeneous", {}), HomogeneousPhrasalAttention)


@pytest.mark.parametrize("variant", ["convkv", "queryk"])
def test_interleaved_encoder_mixes_neighbouring_phrases_and_ignores_padding(variant):
    """Eq. 15: O_t = W [b_t; u_t; b_{t+1}] — token t sees the bigram query ending at t+1
    (future context in the encoder), but never one that overlaps padding."""
    attn = module("phrasal_interleaved", {"variant": variant})
    assert isinstance(attn, InterleavedPhrasalAttention) and attn.out_proj.in_features == 3 * D
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 6, D, generator=g)
    y = x.clone()
    y[:, 5] = torch.randn(D, generator=g)
    full = torch.ones(1, 6, dtype=torch.bool)
    a = attn(x, x, AttentionContext(key_mask=full)).output
    b = attn(y, y, AttentionContext(key_mask=full)).output
    assert not torch.allclose(a[:, 4], b[:, 4])  # b_5 covers tokens 4..5
    pad = torch.tensor([[True] * 4 + [False] * 2])
    alone = attn(x[:, :4], x[:, :4], AttentionContext()).output
    c = attn(x, x, AttentionContext(key_mask=pad)).output
    d = attn(y, y, AttentionContext(key_mask=pad)).output
    assert_close(c[:, :4], alone, atol=1e-5, rtol=1e-5)
    assert_close(c[:, :4], d[:, :4], atol=1e-5, rtol=1e-5)
    dec = module("phrasal_interleaved", {"variant": variant}, role="decoder_self")
    assert dec.out_proj.in_features == 2 * D


@pytest.mark.parametrize("role", ["decoder_self", "cross"])
def test_interleaved_has_no_bigram_query_at_the_first_position(role):
    """Eq. 14: I = (0, u_1, b_1, u_2, ...): position 0 has no bigram query, later ones do."""
    attn = module("phrasal_interleaved", {"variant": "queryk"}, role=role)
    x, mem = torch.randn(2, 4, D), torch.randn(2, 5, D)
    mem = x if role == "decoder_self" else mem
    ctx = AttentionContext(causal=role == "decoder_self")
    before = attn(x, mem, ctx).output
    with torch.no_grad():
        for p in attn.q_bi.parameters():
            p.add_(torch.randn_like(p))
    after = attn(x, mem, ctx).output
    assert_close(after[:, 0], before[:, 0])
    assert not torch.allclose(after[:, 1:], before[:, 1:])
