"""The mask hook of MultiHeadAttention (`logit_mask`) and a −inf in a `logit_bias`: the same masking on every
path of scaled_attention, with and without weights, and never a NaN (padded query rows, rows left without a key,
gradients)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from structnmt.nn import (
    AttentionContext,
    AttentionDims,
    MultiHeadAttention,
    merge_heads,
    split_heads,
)
from structnmt.nn.attention import masked_softmax

D, H = 16, 2


def window(T: int, S: int, w: int = 1) -> torch.Tensor:
    """(T, S) bool: query t sees keys t-w .. t+w."""
    t, s = torch.arange(T)[:, None], torch.arange(S)[None, :]
    return (s - t).abs() <= w


class Windowed(MultiHeadAttention):
    """Sees only the neighbours within one word, through the mask hook."""

    def logit_mask(self, query, q, k, ctx):
        return window(q.shape[2], k.shape[2])


class WindowedByBias(MultiHeadAttention):
    """The same restriction written as a −inf bias, the other documented route."""

    def logit_bias(self, query, q, k, ctx):
        return torch.zeros(q.shape[2], k.shape[2]).masked_fill(~window(q.shape[2], k.shape[2]), float("-inf"))


class NoKeyForRowZero(MultiHeadAttention):
    """Query 0 sees no key at all: a −inf on its whole row."""

    def logit_bias(self, query, q, k, ctx):
        b = torch.zeros(q.shape[2], k.shape[2])
        b[0] = float("-inf")
        return b


def build(cls, seed=0):
    torch.manual_seed(seed)
    return cls(dims=AttentionDims(D, H, 0.0, "encoder_self", "t")).eval()


def literal(attn: MultiHeadAttention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    q = split_heads(attn.q_proj(x), H)
    k, v = (split_heads(t, H) for t in attn.kv_proj(x).chunk(2, -1))
    w = masked_softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, allowed)
    return attn.out_proj(merge_heads(w @ v))


@pytest.mark.parametrize("cls", [Windowed, WindowedByBias])
@pytest.mark.parametrize("need_weights", [False, True])
def test_mask_hook_and_minus_inf_bias_mask_the_same_keys_on_every_path(cls, need_weights):
    x = torch.randn(2, 5, D)
    key_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    attn = build(cls)
    got = attn(x, x, AttentionContext(key_mask=key_mask, need_weights=need_weights))
    allowed = window(5, 5)[None, None] & key_mask[:, None, None, :]
    assert_close(got.output, literal(attn, x, allowed))
    assert not got.output.isnan().any()
    if need_weights:
        assert float(got.weights.detach().masked_select(~allowed.expand_as(got.weights)).abs().max()) == 0.0
    # the hook and the bias are one restriction
    other = build(WindowedByBias if cls is Windowed else Windowed)
    assert_close(other(x, x, AttentionContext(key_mask=key_mask)).output, got.output)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_row_left_without_a_key_is_zero_and_no_nan_reaches_the_gradient(need_weights):
    attn = build(NoKeyForRowZero).train()
    x = torch.randn(2, 4, D, requires_grad=True)
    key_mask = torch.tensor([[True] * 4, [True, True, False, False]])
    out = attn(x, x, AttentionContext(key_mask=key_mask, need_weights=need_weights))
    assert not out.output.isnan().any()
    # query 0 has no key: its attention output is zero, so the layer gives out_proj's bias there
    assert_close(out.output[:, 0], attn.out_proj.bias.expand(2, D))
    if need_weights:
        assert float(out.weights.detach()[:, :, 0].abs().max()) == 0.0 and not out.weights.isnan().any()
    out.output.sum().backward()
    assert all(not p.grad.isnan().any() for p in attn.parameters() if p.grad is not None)
    assert not x.grad.isnan().any()


def test_decoding_steps_take_the_mask_hook_too():
    """One query over the cached keys (the CPU's few-queries path) sees what the full pass lets it see."""

    class SeesFirstKeyOnly(MultiHeadAttention):
        def logit_mask(self, query, q, k, ctx):
            return torch.arange(k.shape[2])[None, :] == 0

    attn = SeesFirstKeyOnly(dims=AttentionDims(D, H, 0.0, "decoder_self", "t")).eval()
    x = torch.randn(1, 3, D)
    with torch.no_grad():
        full = attn(x, x, AttentionContext(causal=True)).output
        from structnmt.nn import IncrementalCache

        cache = IncrementalCache()
        steps = [attn(x[:, t : t + 1], x[:, t : t + 1], AttentionContext(causal=True, cache=cache, query_offset=t)).output
                 for t in range(3)]
    assert_close(torch.cat(steps, 1), full)
    # every position reads the first word's value only: the same output at every step
    assert_close(full[:, 1], full[:, 0])
    assert_close(full[:, 2], full[:, 0])
