"""ON-LSTM (Shen et al. 2019): formulas against a per-step reference, masks, errors."""

from __future__ import annotations

import pytest
import torch

from structnmt.nn.on_lstm import ONLSTM, cumax


def test_cumax_is_a_monotone_cumulative_softmax():
    x = torch.randn(3, 6)
    c = cumax(x)
    assert torch.all(c[:, 1:] >= c[:, :-1])
    torch.testing.assert_close(c[:, -1], torch.ones(3))
    torch.testing.assert_close(c[:, 0], torch.softmax(x, -1)[:, 0])


@pytest.mark.parametrize("C", [3, 5, 7])
def test_chunk_size_must_divide_the_hidden_size(C):
    with pytest.raises(ValueError, match=f"chunk_size {C} must divide hidden size 16"):
        ONLSTM(8, 16, C)


def _reference(model: ONLSTM, x: torch.Tensor) -> torch.Tensor:
    """One sentence (T, I), one step at a time, straight from the DESIGN.md formulas."""
    D, C = model.hidden_size, model.chunk_size
    m = D // C
    W, b, U = model.ih.weight, model.ih.bias, model.hh.weight
    # documented gate order: master f~ (m), master i~ (m), f, i, o, c_hat (D each)
    sl = {"mf": slice(0, m), "mi": slice(m, 2 * m), "f": slice(2 * m, 2 * m + D),
          "i": slice(2 * m + D, 2 * m + 2 * D), "o": slice(2 * m + 2 * D, 2 * m + 3 * D),
          "c": slice(2 * m + 3 * D, 2 * m + 4 * D)}

    def lin(name, xt, h):
        s = sl[name]
        return W[s] @ xt + U[s] @ h + b[s]

    h, c = torch.zeros(D), torch.zeros(D)
    outs = []
    for xt in x:
        f_master = torch.cumsum(torch.softmax(lin("mf", xt, h), 0), 0).repeat_interleave(C)
        i_master = 1 - torch.cumsum(torch.softmax(lin("mi", xt, h), 0), 0).repeat_interleave(C)
        f = torch.sigmoid(lin("f", xt, h))
        i = torch.sigmoid(lin("i", xt, h))
        o = torch.sigmoid(lin("o", xt, h))
        c_hat = torch.tanh(lin("c", xt, h))
        w = f_master * i_master
        f_hat = f * w + (f_master - w)
        i_hat = i * w + (i_master - w)
        c = f_hat * c + i_hat * c_hat
        h = o * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs)


def test_matches_a_per_step_reference_with_padding():
    torch.manual_seed(0)
    model = ONLSTM(6, 12, 4)
    lengths = [5, 3, 1]
    x = torch.randn(3, 5, 6)
    mask = torch.arange(5)[None] < torch.tensor(lengths)[:, None]
    out, (h, c) = model(x, mask)
    assert out.shape == (3, 5, 12)
    for b, n in enumerate(lengths):
        ref = _reference(model, x[b, :n])
        torch.testing.assert_close(out[b, :n], ref)
        torch.testing.assert_close(h[b], ref[-1])  # final state = state after the last real step
        assert float(out[b, n:].detach().abs().sum()) == 0.0  # padded steps are zero


def test_padding_does_not_change_a_sequence_and_gradients_reach_every_parameter():
    torch.manual_seed(1)
    model = ONLSTM(4, 8, 2)
    alone = torch.randn(1, 3, 4)
    batch = torch.cat([torch.nn.functional.pad(alone, (0, 0, 0, 4)), torch.randn(1, 7, 4)])
    mask = torch.tensor([[True] * 3 + [False] * 4, [True] * 7])
    out_alone, _ = model(alone)
    out_batch, _ = model(batch, mask)
    torch.testing.assert_close(out_batch[0, :3], out_alone[0])
    out_batch.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name


def test_state_is_threaded_through_calls():
    torch.manual_seed(2)
    model = ONLSTM(4, 8, 4)
    x = torch.randn(2, 6, 4)
    full, _ = model(x)
    first, state = model(x[:, :2])
    second, _ = model(x[:, 2:], state=state)
    torch.testing.assert_close(torch.cat([first, second], 1), full)


def test_gradients_equal_those_of_the_per_step_reference():
    """Parameter and input gradients of the batched, padded module equal those of the
    per-step autograd reference run sentence by sentence."""
    torch.manual_seed(4)
    model = ONLSTM(5, 8, 2)
    lengths = [4, 2]
    x = torch.randn(2, 4, 5, requires_grad=True)
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    weights = torch.randn(2, 4, 8)
    out, (h, _) = model(x, mask)
    ((out * weights).sum() + h.sum()).backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    ours_x = x.grad.clone()
    model.zero_grad()
    x.grad = None
    loss = sum((ref * weights[b, :n]).sum() + ref[-1].sum()
               for b, n in enumerate(lengths) for ref in [_reference(model, x[b, :n])])
    loss.backward()
    for name, p in model.named_parameters():
        assert float(ours[name].abs().sum()) > 0, name
        torch.testing.assert_close(ours[name], p.grad, msg=name)
    torch.testing.assert_close(ours_x, x.grad)
