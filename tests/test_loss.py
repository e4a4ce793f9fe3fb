"""The label-smoothed loss and its closed-form gradient against autograd's."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from structnmt.data.vocab import PAD
from structnmt.train.loss import label_smoothed_nll


def _autograd_reference(logits, target, eps):
    lprobs = torch.log_softmax(logits, dim=-1)
    keep = target != PAD
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    nll = nll.masked_fill(~keep, 0.0).sum()
    smooth = smooth.masked_fill(~keep, 0.0).sum()
    return (1.0 - eps) * nll + eps * smooth, nll


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_loss_nll_and_their_gradients_equal_autograd(eps):
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 7, 11, generator=g, dtype=torch.float64) * 4)
    target = torch.randint(1, 11, (3, 7), generator=g)
    target[0, 5:] = PAD
    target[2, 1] = PAD
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    loss, nll = label_smoothed_nll(a, target, eps)
    ref_loss, ref_nll = _autograd_reference(b, target, eps)
    assert_close(loss, ref_loss)
    assert_close(nll, ref_nll)
    # both outputs carry gradient, with different weights, as a caller may combine them
    (2.0 * loss + 0.5 * nll).backward()
    (2.0 * ref_loss + 0.5 * ref_nll).backward()
    assert_close(a.grad, b.grad)
    assert (a.grad[0, 5:] == 0).all() and (a.grad[2, 1] == 0).all()  # PAD positions get no gradient


def test_the_gradient_equals_finite_differences_and_half_logits_are_scored_in_float32():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[4, 1, PAD], [2, 3, 4]])
    loss, _ = label_smoothed_nll(logits, target, 0.1)
    loss.backward()
    h = 1e-6
    numeric = torch.zeros_like(logits)
    with torch.no_grad():
        for idx in torch.cartesian_prod(*(torch.arange(n) for n in logits.shape)).tolist():
            up, down = logits.detach().clone(), logits.detach().clone()
            up[tuple(idx)] += h
            down[tuple(idx)] -= h
            numeric[tuple(idx)] = (label_smoothed_nll(up, target, 0.1)[0] - label_smoothed_nll(down, target, 0.1)[0]) / (2 * h)
    assert_close(logits.grad, numeric, rtol=1e-6, atol=1e-8)
    loss, _ = label_smoothed_nll(logits.detach().to(torch.bfloat16), target, 0.1)
    assert loss.dtype == torch.float32


def test_a_second_backward_through_the_loss_is_refused_not_wrong():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    loss, _ = label_smoothed_nll(logits, torch.tensor([[4, 1, PAD], [2, 3, 4]]), 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once per forward"):
        loss.backward()
