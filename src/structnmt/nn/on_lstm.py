"""Ordered-Neurons LSTM (Shen et al. 2019), used by MG-SA's phrase interaction (eq. 11).

Formulas (DESIGN.md, "ON-LSTM"), for one step with input ``x_t`` (B, I) and state
``h_{t-1}, c_{t-1}`` (B, D); ``C`` is the chunk size and ``D / C`` the number of chunks::

    f, i, o  = sigmoid(W_{f,i,o} x_t + U_{f,i,o} h_{t-1} + b)          (B, D) each
    c_hat    = tanh(W_c x_t + U_c h_{t-1} + b_c)                         (B, D)
    f~       = cumax(W_f~ x_t + U_f~ h_{t-1} + b_f~)                     (B, D/C)   master forget
    i~       = 1 - cumax(W_i~ x_t + U_i~ h_{t-1} + b_i~)                 (B, D/C)   master input
    (f~ and i~ are broadcast over the C units of each chunk: unit j belongs to chunk j // C)
    w        = f~ * i~
    f^       = f * w + (f~ - w)
    i^       = i * w + (i~ - w)
    c_t      = f^ * c_{t-1} + i^ * c_hat
    h_t      = o * tanh(c_t)

with ``cumax(x) = cumsum(softmax(x))`` over the chunk axis.

The module is batched over B with a Python loop over time only (MG-SA runs it over
phrases, a short sequence). The input part ``W x_t + b`` of every gate is computed for all
steps in one matrix product before the loop; inside the loop only ``U h_{t-1}``.
:func:`run_on_lstms` runs several ON-LSTMs (one per MG-SA head group) in a single loop
with batched matrix products.
With a ``mask`` (B, T) (True = real step; real steps must come first, i.e. right padding)
the outputs at padded steps are zero and the returned final state is the state after the
last real step; since a step only looks back, a sequence gives the same outputs alone
and padded in a batch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def cumax(x: Tensor, dim: int = -1) -> Tensor:
    """Cumulative softmax ``cumsum(softmax(x))`` along ``dim`` (values rise from ~0 to 1)."""
    return torch.cumsum(torch.softmax(x, dim=dim), dim=dim)


class ONLSTM(nn.Module):
    """One-layer ON-LSTM over (B, T, I) inputs; returns all hidden states (B, T, D).

    ``hidden_size`` D must be a multiple of ``chunk_size`` C (D / C master-gate units).
    """

    def __init__(self, input_size: int, hidden_size: int, chunk_size: int):
        super().__init__()
        if chunk_size < 1 or hidden_size % chunk_size:
            raise ValueError(
                f"chunk_size {chunk_size} must divide hidden size {hidden_size} "
                f"(ON-LSTM master gates have hidden_size / chunk_size units); "
                f"choose a chunk_size that divides {hidden_size}."
            )
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.chunk_size = chunk_size
        self.n_chunks = hidden_size // chunk_size
        n_gates = 4 * hidden_size + 2 * self.n_chunks  # f, i, o, c_hat, master f~, master i~
        self.ih = nn.Linear(input_size, n_gates)  # W x + b
        self.hh = nn.Linear(hidden_size, n_gates, bias=False)  # U h
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        state: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (B, T, I); mask (B, T) bool, True = real step (right padding); state ((B, D), (B, D)).

        Returns ``(outputs (B, T, D), (h, c))``: the hidden state of every step (zero at
        padded steps) and the state after each sequence's last real step.
        """
        (out, final), = run_on_lstms([self], [x], [mask], [state])
        return out, final


def _scan(
    pre: list[Tensor], U: Tensor, h0: Tensor, c0: Tensor, chunk_size: int
) -> list[tuple[list[Tensor], list[Tensor]]]:
    """The time loop of G ON-LSTMs at once.

    pre[g] (B, T_g, 4D + 2m): input part ``W x_t + b`` of every gate of ON-LSTM g (order:
    master f~, master i~, f, i, o, c_hat; m = D / C), with T_0 >= T_1 >= ... (sorted);
    U (G, 4D + 2m, D); h0, c0 (G, B, D) initial states. At step t only the ON-LSTMs with
    T_g > t run (a batched product over them). Returns, per ON-LSTM, the lists of its
    hidden and cell states (B, D) for t = 0..T_g-1.
    """
    G = len(pre)
    B, D = h0.shape[1], h0.shape[2]
    m = D // chunk_size
    Ut = U.transpose(1, 2)  # (G, D, 4D + 2m)
    steps = [p.unbind(1) for p in pre]  # unbind, not indexing: its backward is one stack
    lengths = [p.shape[1] for p in pre]
    hs: list[list[Tensor]] = [[] for _ in range(G)]
    cs: list[list[Tensor]] = [[] for _ in range(G)]
    h, c = h0, c0
    for t in range(lengths[0] if G else 0):
        k = sum(n > t for n in lengths)  # the first k ON-LSTMs are still running
        if k < h.shape[0]:
            h, c = h[:k], c[:k]
        pre_t = steps[0][t].unsqueeze(0) if k == 1 else torch.stack([steps[g][t] for g in range(k)])
        gates = torch.baddbmm(pre_t, h, Ut if k == G else Ut[:k]).view(k * B, -1)
        master, fio, c_hat = gates.split([2 * m, 3 * D, D], dim=-1)
        f_master, i_master = cumax(master.view(k * B, 2, m)).unsqueeze(-1).unbind(1)  # (N, m, 1) each
        i_master = 1.0 - i_master  # master gates broadcast over the C units of each chunk
        f, i, o = torch.sigmoid(fio).chunk(3, dim=-1)
        w = f_master * i_master
        f_hat = f.view(-1, m, chunk_size) * w + (f_master - w)
        i_hat = i.view(-1, m, chunk_size) * w + (i_master - w)
        c = (f_hat * c.view(-1, m, chunk_size) + i_hat * torch.tanh(c_hat).view(-1, m, chunk_size)).view(k, B, D)
        h = o.view(k, B, D) * torch.tanh(c)
        for g, (hg, cg) in enumerate(zip(h.unbind(0), c.unbind(0))):
            hs[g].append(hg)
            cs[g].append(cg)
    return list(zip(hs, cs))


def run_on_lstms(
    modules: list[ONLSTM],
    xs: list[Tensor],
    masks: list[Tensor | None],
    states: list[tuple[Tensor, Tensor] | None] | None = None,
) -> list[tuple[Tensor, tuple[Tensor, Tensor]]]:
    """Run several ON-LSTMs of equal sizes (each with its own parameters) in one time loop.

    ``xs[g]`` (B, T_g, I) with ``masks[g]`` (B, T_g) (True = real step, right padding) or
    None; all share B. The sequences are padded to the longest T and stacked, so the loop
    runs max(T_g) steps of batched matrix products instead of sum(T_g) small ones. A
    padded step never influences a real one (steps only look back); outputs at padded
    steps are zeroed and the final state is the state at each sequence's last real step.
    Returns ``[(outputs (B, T_g, D), (h, c) (B, D) each)]`` in the order of ``modules``.
    """
    first = modules[0]
    D, C = first.hidden_size, first.chunk_size
    if any(mod.hidden_size != D or mod.chunk_size != C for mod in modules):
        raise ValueError("run_on_lstms: all ON-LSTMs must have the same hidden_size and chunk_size.")
    G = len(modules)
    B = xs[0].shape[0]
    order = sorted(range(G), key=lambda g: -xs[g].shape[1])  # longest first
    states = states or [None] * G
    zeros = xs[0].new_zeros(B, D)
    h0 = torch.stack([states[g][0] if states[g] is not None else zeros for g in order])
    c0 = torch.stack([states[g][1] if states[g] is not None else zeros for g in order])
    pre = [modules[g].ih(xs[g]) for g in order]  # input part of every step at once
    U = torch.stack([modules[g].hh.weight for g in order])
    scanned = _scan(pre, U, h0, c0, C)
    results: list = [None] * G
    for j, g in enumerate(order):
        x, mask = xs[g], masks[g]
        Tg = x.shape[1]
        h_list, c_list = scanned[j]
        if Tg == 0:
            results[g] = (x.new_zeros(B, 0, D), (h0[j], c0[j]))
            continue
        out = torch.stack(h_list, dim=1)  # (B, T_g, D)
        if mask is None:
            results[g] = (out, (h_list[-1], c_list[-1]))
            continue
        mask = mask.to(torch.bool)
        length = mask.sum(1)
        out = out * mask.unsqueeze(-1).to(out.dtype)
        last = (length - 1).clamp_min(0)
        rows = torch.arange(B, device=x.device)
        has = (length > 0).unsqueeze(-1)
        h = torch.where(has, out[rows, last], h0[j])
        c = torch.where(has, torch.stack(c_list, dim=1)[rows, last], c0[j])
        results[g] = (out, (h, c))
    return results
