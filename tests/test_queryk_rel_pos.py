"""Heterogeneous QUERYK with relative positions (``queryk_rel_pos``): the combination of the two
mechanisms is each of them at its limits, its literal formula, and decodes incrementally."""

from __future__ import annotations

import math

import pytest
import torch
from random_batches import assert_incremental_equals_full
from torch.testing import assert_close

from structnmt.config import AttentionPlan, AttentionSpec, ConfigError, ModelConfig
from structnmt.models import build_model
from structnmt.nn import AttentionContext, AttentionDims, build_attention
from structnmt.nn.attention import masked_softmax

D, H = 32, 4


def build(name: str, options: dict | None = None, role: str = "encoder_self", seed: int = 0):
    torch.manual_seed(seed)
    return build_attention(name, options or {}, AttentionDims(D, H, 0.0, role, f"t.{role}")).eval()


def contexts(role: str, S: int = 6):
    key_mask = torch.tensor([[True] * S, [True] * (S - 2) + [False] * 2])
    if role == "decoder_self":
        return AttentionContext(causal=True, need_weights=True)
    return AttentionContext(key_mask=key_mask, need_weights=True)


@pytest.mark.parametrize("role", ["encoder_self", "decoder_self"])
def test_unigrams_only_is_rel_pos(role):
    rel = build("rel_pos", {"k": 2}, role)
    comb = build("queryk_rel_pos", {"ngrams": [1], "k": 2}, role, seed=1)
    br = comb.branches[0]
    wk, wv = rel.kv_proj.weight.chunk(2, 0)
    bk, bv = rel.kv_proj.bias.chunk(2, 0)
    with torch.no_grad():
        for dst, (w, b) in [(br.q_proj, (rel.q_proj.weight, rel.q_proj.bias)), (br.k_proj, (wk, bk)),
                            (br.v_conv, (wv, bv)), (comb.out_proj, (rel.out_proj.weight, rel.out_proj.bias))]:
            dst.weight.copy_(w)
            dst.bias.copy_(b)
        comb.rel.rel_k.weight.copy_(rel.rel.rel_k.weight)
        comb.rel.rel_v.weight.copy_(rel.rel.rel_v.weight)
    x = torch.randn(2, 6, D)
    a = rel(x, x, contexts(role))
    b = comb(x, x, contexts(role))
    assert_close(b.weights, a.weights, atol=1e-5, rtol=1e-5)
    assert_close(b.output, a.output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("role", ["encoder_self", "decoder_self"])
def test_zero_tables_is_heterogeneous_queryk(role):
    comb = build("queryk_rel_pos", {"ngrams": [1, 2], "k": 3}, role)
    het = build("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]}, role)
    het.load_state_dict({k: v for k, v in comb.state_dict().items() if not k.startswith("rel.")})
    x = torch.randn(2, 6, D)
    plain_w = het(x, x, contexts(role)).weights
    a = comb(x, x, contexts(role))
    assert not torch.allclose(a.weights, plain_w, atol=1e-4)  # the tables do change the weights
    with torch.no_grad():
        comb.rel.rel_k.weight.zero_()
        comb.rel.rel_v.weight.zero_()
    b = comb(x, x, contexts(role))
    want = het(x, x, contexts(role))
    assert_close(b.weights, want.weights)
    assert_close(b.output, want.output)


def test_logits_and_values_are_the_literal_formula():
    """eq. 8 with eq. 4's keys ``k_m + a^K_{clip(m - t)}`` for every token m of a phrase, and eq. 3's
    value vector of the phrase's end, written out with the (T, L, d) tensors the module never builds."""
    k, S, B = 2, 7, 2
    comb = build("queryk_rel_pos", {"ngrams": [1, 2], "k": k})
    x = torch.randn(B, S, D)
    mask = torch.tensor([[True] * S, [True] * 5 + [False] * 2])
    got = comb(x, x, AttentionContext(key_mask=mask, need_weights=True))
    d = D // H
    aK_tab, aV_tab = comb.rel.rel_k.weight, comb.rel.rel_v.weight

    def clip(m: int, t: int) -> int:
        return max(-k, min(k, m - t)) + k

    logits, values, allowed = [], [], []
    for br in comb.branches:
        n = br.n
        q = br.q_proj(x).view(B, S, n, H, d).permute(0, 3, 1, 2, 4)  # (B, H, T, n, d)
        kp = br.k_proj(x).view(B, S, H, d).transpose(1, 2)  # (B, H, S, d)
        e = torch.zeros(B, H, S, S)
        for t in range(S):
            for j in range(S):
                for i in range(n):
                    m = j - (n - 1) + i
                    if m < 0:
                        continue  # before the sentence: zero keys (and the phrase is masked anyway)
                    e[:, :, t, j] += (q[:, :, t, i] * (kp[:, :, m] + aK_tab[clip(m, t)])).sum(-1)
        logits.append(e / math.sqrt(n * d))
        win = torch.cat([torch.zeros(B, n - 1, D), x], 1).unfold(1, n, 1).transpose(2, 3).flatten(2)
        values.append(br.v_conv(win).view(B, S, H, d).transpose(1, 2))
        ok = mask.clone()
        for i in range(1, n):
            ok[:, :i] = False
            ok[:, i:] &= mask[:, :-i]
        allowed.append(ok)
    e = torch.cat(logits, -1)
    alpha = masked_softmax(e, torch.cat(allowed, -1)[:, None, None, :])
    v = torch.cat(values, 2)
    idx = torch.tensor([[clip(j, t) for j in range(S)] for t in range(S)])
    aV = aV_tab[idx].repeat(1, 2, 1)  # (T, 2S, d): each type's phrase ending at j gets a^V_{clip(j - t)}
    z = alpha @ v + (alpha[..., None] * aV).sum(-2)
    assert_close(got.weights, alpha)
    assert_close(got.output, comb.out_proj(z.transpose(1, 2).reshape(B, S, D)))


def test_incremental_equals_full_decoding_with_beam_reordering():
    spec = AttentionSpec("queryk_rel_pos", {"ngrams": [1, 2], "k": 2})
    cross = AttentionSpec("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]})
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, ffn_dim=64, heads=H, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      attention=AttentionPlan(encoder_self=spec, decoder_self=spec, cross=cross))
    assert_incremental_equals_full(build_model(cfg, 40, 40).eval())


def test_roles_and_options_are_checked():
    with pytest.raises(ConfigError, match="self-attention only"):
        build("queryk_rel_pos", role="cross")
    with pytest.raises(ConfigError, match="k must be >= 0"):
        build("queryk_rel_pos", {"k": -1})
    with pytest.raises(ConfigError, match="must include 1"):
        build("queryk_rel_pos", {"ngrams": [2]})
    with pytest.raises(ConfigError):
        build("queryk_rel_pos", {"variant": "convkv"})  # QUERYK only: no variant option
    shared = build("queryk_rel_pos", {"shared_table": True})
    assert shared.rel.rel_k is shared.rel.rel_v
