"""structnmt.nn.dropout: the uniform-threshold mask's distribution, scaling and gradient."""

from __future__ import annotations

import torch

from structnmt.nn.dropout import dropout, dropout_mask, residual_dropout


def test_the_mask_keeps_each_unit_with_probability_one_minus_p_and_keeps_the_expectation():
    torch.manual_seed(0)
    x = torch.ones(200_000)
    for p in (0.1, 0.3, 0.5):
        m = dropout_mask(x, p)
        kept = (m > 0).float().mean().item()
        # binomial standard deviation at n = 200,000 is below 0.0012: 5 sigma
        assert abs(kept - (1 - p)) < 0.006
        assert torch.allclose(m[m > 0], torch.full_like(m[m > 0], 1 / (1 - p)))
        assert abs(dropout(x, p, True).mean().item() - 1.0) < 0.015


def test_identity_when_not_training_or_p_zero_and_all_zeros_at_p_one():
    x = torch.randn(4, 5)
    assert dropout(x, 0.3, False) is x
    assert dropout(x, 0.0, True) is x
    assert torch.equal(residual_dropout(x, 2 * x, 0.3, False), 3 * x)
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))


def test_residual_dropout_equals_x_plus_masked_y_and_its_gradients_are_the_mask():
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    y = torch.randn(64, 32, requires_grad=True)
    state = torch.get_rng_state()
    out = residual_dropout(x, y, 0.3, True)
    torch.set_rng_state(state)
    mask = dropout_mask(y, 0.3)
    assert torch.allclose(out, x + y * mask)
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    assert torch.allclose(y.grad, mask)
    assert 0 < (mask == 0).sum() < mask.numel()


def test_half_precision_inputs_get_a_mask_drawn_in_float32():
    torch.manual_seed(2)
    x = torch.ones(100_000, dtype=torch.bfloat16)
    out = dropout(x, 0.3, True)
    assert out.dtype == torch.bfloat16
    assert abs((out > 0).float().mean().item() - 0.7) < 0.01
