"""The hook after the softmax (`MultiHeadAttention.reweight`): applied on every path a layer takes (training, with
weights, with a value term, CPU decoding with few queries, incremental decoding with the cache, beam search's
grouped cross-attention), never called for plain MHA, whose paths stay those of before; and `masked_softmax` in
float64 for float64 scores."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import structnmt.nn.attention as attention
from structnmt.nn import (
    AttentionContext,
    AttentionDims,
    IncrementalCache,
    MultiHeadAttention,
    masked_softmax,
    merge_heads,
    scaled_attention,
    split_heads,
)

D, H = 16, 2


def decay(T: int, S: int, offset: int, dtype: torch.dtype) -> torch.Tensor:
    """(T, S): 1 / (1 + |i - j|) for query i (at absolute position offset + i) and key j."""
    i = torch.arange(T)[:, None] + offset
    return 1.0 / (1.0 + (i - torch.arange(S)[None, :]).abs().to(dtype))


class Decayed(MultiHeadAttention):
    """Weights scaled down with the distance between query and key, after the softmax; counts its calls."""

    calls = 0

    def reweight(self, weights, query, q, k, ctx):
        Decayed.calls += 1
        T, S = weights.shape[-2:]
        return weights * decay(T, S, int(ctx.query_offset), weights.dtype)


class DecayedGrouped(Decayed):
    groups_memory = True


class DecayedValueTerm(Decayed):
    """A value term read from the (reweighted, dropped) weights, as Rel_Pos's eq. 3 is."""

    uses_value_term = True

    def __init__(self, *, dims):
        super().__init__(dims=dims)
        self.seen = []

    def value_term(self, weights, ctx):
        self.seen.append(weights)
        return weights.sum(-1, keepdim=True).expand(-1, -1, -1, D // H)


def build(cls, role="encoder_self", seed=0):
    torch.manual_seed(seed)
    return cls(dims=AttentionDims(D, H, 0.0, role, "t")).eval()


def literal(attn, x, mem, allowed, offset=0):
    """out_proj(merge(reweight(masked_softmax(q k^T / sqrt(d))) v)) and the reweighted weights, written out."""
    q = split_heads(attn.q_proj(x), H)
    k, v = (split_heads(t, H) for t in attn.kv_proj(mem).chunk(2, -1))
    w = masked_softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, allowed).to(x.dtype)
    w = w * decay(q.shape[2], k.shape[2], offset, x.dtype)
    return attn.out_proj(merge_heads(w @ v)), w


def test_plain_mha_never_calls_the_hook_and_keeps_its_sdpa_path(monkeypatch):
    assert MultiHeadAttention.uses_reweight is False and Decayed.uses_reweight is True
    monkeypatch.setattr(MultiHeadAttention, "reweight", lambda *a: pytest.fail("plain MHA called reweight"))
    sdpa = []
    real = attention._sdpa
    monkeypatch.setattr(attention, "_sdpa", lambda *a: sdpa.append(1) or real(*a))
    attn = build(MultiHeadAttention).train()
    x = torch.randn(2, 12, D)
    attn(x, x, AttentionContext(key_mask=torch.ones(2, 12, dtype=torch.bool)))
    assert sdpa == [1]


@pytest.mark.parametrize("path", ["training", "need_weights", "few_queries"])
def test_the_hook_is_applied_on_the_training_weights_and_cpu_decoding_paths(path, monkeypatch):
    attn = build(Decayed)
    T = 5 if path == "few_queries" else 12
    x = torch.randn(2, T, D)
    mask = torch.tensor([[True] * T, [True] * (T - 2) + [False] * 2])
    sdpa, few = [], []
    real, real_few = attention._sdpa, attention._few_queries
    monkeypatch.setattr(attention, "_sdpa", lambda *a: sdpa.append(1) or real(*a))
    monkeypatch.setattr(attention, "_few_queries", lambda *a: few.append(1) or real_few(*a))
    Decayed.calls = 0
    if path == "training":  # dropout 0: the same weights, with gradients (this was SDPA's path before the hook)
        attn.train()
        out = attn(x, x, AttentionContext(key_mask=mask))
        out.output.sum().backward()
        assert attn.q_proj.weight.grad is not None and torch.isfinite(attn.q_proj.weight.grad).all()
    else:
        with torch.no_grad():
            out = attn(x, x, AttentionContext(key_mask=mask, need_weights=path == "need_weights"))
    want, w = literal(attn, x, x, mask[:, None, None, :])
    assert_close(out.output, want, atol=1e-6, rtol=1e-5)
    if path == "need_weights":
        assert_close(out.weights, w)
        assert float(out.weights[1, :, :, T - 2:].abs().sum()) == 0.0  # the padded keys stay at 0
    assert Decayed.calls == 1 and sdpa == [] and len(few) == (path == "few_queries")


def test_incremental_decoding_with_the_cache_applies_the_hook_at_every_step():
    attn = build(Decayed, role="decoder_self")
    x = torch.randn(2, 6, D)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    full = attn(x, x, AttentionContext(causal=True)).output
    assert_close(full, literal(attn, x, x, causal)[0], atol=1e-6, rtol=1e-5)
    cache, Decayed.calls = IncrementalCache(), 0
    with torch.no_grad():
        steps = [attn(x[:, t:t + 1], x[:, t:t + 1], AttentionContext(causal=True, cache=cache, query_offset=t)).output
                 for t in range(6)]
    assert Decayed.calls == 6
    assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=1e-5)


def test_the_value_term_reads_the_reweighted_weights():
    attn = build(DecayedValueTerm)
    x = torch.randn(2, 7, D)
    out = attn(x, x, AttentionContext())
    want, w = literal(attn, x, x, None)
    term = attn.out_proj(merge_heads(w.sum(-1, keepdim=True).expand(-1, -1, -1, D // H))) - attn.out_proj.bias
    assert_close(out.output, want + term, atol=1e-6, rtol=1e-5)
    assert_close(attn.seen[0], w)


def test_beam_search_s_grouped_cross_attention_applies_the_hook_or_refuses_it():
    attn = build(DecayedGrouped, role="cross")
    src = torch.randn(2, 5, D)  # one row per sentence
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    x = torch.randn(6, 1, D)  # 3 hypotheses per sentence, one step
    Decayed.calls = 0
    with torch.no_grad():
        grouped = attn(x, src, AttentionContext(key_mask=mask, memory_group=3, query_offset=2))
        copied = attn(x, src.repeat_interleave(3, 0), AttentionContext(key_mask=mask.repeat_interleave(3, 0),
                                                                       query_offset=2))
    assert Decayed.calls == 2
    assert_close(grouped.output, copied.output)
    want, _ = literal(attn, x, src.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)[:, None, None, :], offset=2)
    assert_close(grouped.output, want, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="Decayed \\(cross\\) cannot read a memory shared by 3 query rows"):
        build(Decayed, role="cross")(x, src, AttentionContext(key_mask=mask, memory_group=3))


def test_a_hook_that_changes_the_shape_is_one_sentence():
    class Cropped(MultiHeadAttention):
        def reweight(self, weights, query, q, k, ctx):
            return weights[..., :-1]

    x = torch.randn(1, 4, D)
    with pytest.raises(ValueError, match=r"Cropped.reweight returned a torch.float32 tensor of shape \(1, 2, 4, 3\) "
                                         r"for torch.float32 weights of shape \(1, 2, 4, 4\); return the weights' "
                                         r"shape \(B, H, T, S\) and dtype."):
        build(Cropped)(x, x, AttentionContext())


def test_masked_softmax_keeps_float64_and_upcasts_half_precision():
    torch.manual_seed(0)
    scores = torch.randn(3, 7, dtype=torch.float64) * 4
    allowed = torch.tensor([True] * 5 + [False] * 2)
    w = masked_softmax(scores, allowed)
    want = torch.softmax(scores[:, :5], -1)  # float64 all along
    assert w.dtype == torch.float64
    assert torch.equal(w[:, :5], want) and float(w[:, 5:].abs().sum()) == 0.0
    assert (w[:, :5] - want.float().double()).abs().max() > 0  # float32 would round: the float64 result is kept
    for half in (torch.float16, torch.bfloat16):
        assert masked_softmax(scores.to(half), allowed).dtype == torch.float32


@pytest.mark.parametrize("T", [3, 12])  # the few-queries path (CPU, no gradient) and the explicit one
def test_a_float64_reference_of_a_plugin_is_exact(T):
    """Both paths a reweighting mechanism takes compute in float64 for a float64 model: equal to the written-out
    float64 computation to 1e-12 (a float32 step anywhere would leave ~1e-7)."""
    attn = build(Decayed).double()
    x = torch.randn(2, T, D, dtype=torch.float64)
    with torch.no_grad():
        out = attn(x, x, AttentionContext()).output
        q, k, v = split_heads(x, H), split_heads(x * 0.5, H), split_heads(x * 2, H)
        few, _ = scaled_attention(q, k, v, reweight=lambda w: w * 2)
    assert_close(out, literal(attn, x, x, None)[0], atol=1e-12, rtol=1e-12)
    w = torch.softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, -1)
    assert_close(few, (w * 2) @ v, atol=1e-12, rtol=1e-12)
