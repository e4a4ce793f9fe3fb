"""A query whose every key is masked gets a zero output, not NaN, on every attention path."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from structnmt.config import ConfigError
from structnmt.nn import AttentionContext, AttentionDims, build_attention
from structnmt.nn.attention import masked_softmax, scaled_attention

B, H, T, S, d = 2, 2, 3, 4, 8
DEAD = (0, 1)  # (batch, query) whose every key is masked


def inputs(seed: int = 0, bias_grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, d, generator=g).requires_grad_() for n in (T, S, S))
    bias = torch.randn(B, H, T, S, generator=g).requires_grad_(bias_grad)
    mask = torch.rand(B, 1, T, S, generator=g) > 0.3
    mask[..., 0] = True  # every other row keeps a key
    mask[DEAD[0], :, DEAD[1], :] = False
    return q, k, v, bias, mask


def reference(q, k, v, bias, allowed):
    """Plain softmax attention on the rows that have a key; the dead row is left out."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(d) + (0 if bias is None else bias)
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


@pytest.mark.parametrize("path", ["sdpa_bool", "sdpa_bias", "explicit", "bias_with_grad", "causal_offset"])
def test_every_path_gives_zeros_for_a_row_without_keys(path):
    q, k, v, bias, mask = inputs(bias_grad=path == "bias_with_grad")
    kw = {"mask": mask}
    allowed = mask
    if path in ("sdpa_bias", "bias_with_grad"):
        kw["bias"] = bias
    if path == "explicit":
        kw["need_weights"] = True
    if path == "causal_offset":  # query t sees keys <= t + 1; the dead row stays dead
        kw.update(causal=True, query_offset=1)
        allowed = mask & (torch.arange(S)[None, :] <= torch.arange(T)[:, None] + 1)
    out, weights = scaled_attention(q, k, v, **kw)
    assert torch.isfinite(out).all()
    assert torch.equal(out[DEAD[0], :, DEAD[1]], torch.zeros(H, d))
    live = torch.ones(B, T, dtype=torch.bool)
    live[DEAD] = False
    ref_out, ref_w = reference(q, k, v, kw.get("bias"), allowed)
    assert_close(out.permute(0, 2, 1, 3)[live], ref_out.permute(0, 2, 1, 3)[live], atol=1e-5, rtol=1e-5)
    if weights is not None:
        assert torch.isfinite(weights).all() and torch.equal(weights[DEAD[0], :, DEAD[1]], torch.zeros(H, S))
        assert_close(weights.permute(0, 2, 1, 3)[live], ref_w.permute(0, 2, 1, 3)[live], atol=1e-5, rtol=1e-5)
    out.sum().backward()
    for t in (q, k, v, bias):
        assert t.grad is None or torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[DEAD[0], :, DEAD[1]], torch.zeros(H, d))  # nothing flows from the dead row


def test_masked_softmax_is_the_softmax_on_live_rows_and_zero_elsewhere():
    scores = torch.randn(3, 5, requires_grad=True)
    allowed = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
    w = masked_softmax(scores, allowed)
    assert torch.equal(w[1], torch.zeros(5))
    assert_close(w[0], torch.softmax(scores[0].masked_fill(~allowed[0], float("-inf")), -1))
    assert_close(w[2], torch.softmax(scores[2], -1))
    w.pow(2).sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.equal(scores.grad[1], torch.zeros(5))


PHRASAL = [
    ("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2]}),
    ("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2, 3]}),
    ("phrasal_homogeneous", {"variant": "queryk", "ngram_heads": [2, 2]}),
    ("phrasal_interleaved", {"variant": "queryk"}),
    ("phrasal_interleaved", {"variant": "convkv"}),
    ("mha", {}),
]


@pytest.mark.parametrize("name,options", PHRASAL, ids=[f"{n}-{o.get('variant', '')}" for n, o in PHRASAL])
@pytest.mark.parametrize("need_weights", [False, True])
def test_phrasal_attentions_stay_finite_on_an_all_padding_sentence(name, options, need_weights):
    """Sentence 1 is all padding (every key masked), sentence 2 a single token."""
    torch.manual_seed(0)
    D = 32
    attn = build_attention(name, options, AttentionDims(D, 4, 0.0, "encoder_self", "t")).train(False)
    x = torch.randn(3, 5, D, requires_grad=True)
    key_mask = torch.ones(3, 5, dtype=torch.bool)
    key_mask[1] = False
    key_mask[2, 1:] = False
    out = attn(x, x, AttentionContext(key_mask=key_mask, need_weights=need_weights))
    assert torch.isfinite(out.output).all()
    if out.weights is not None:
        assert torch.isfinite(out.weights).all()
    out.output[key_mask].sum().backward()
    assert torch.isfinite(x.grad).all()


def test_heterogeneous_phrasal_attention_without_unigrams_is_refused():
    dims = AttentionDims(32, 4, 0.0, "decoder_self", "decoder_self.0")
    with pytest.raises(ConfigError, match=r"ngrams \[2, 3\] must include 1 .* e\.g\. \[1, 2, 3\]"):
        build_attention("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [2, 3]}, dims)
