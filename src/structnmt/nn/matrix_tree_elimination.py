"""The exact path of the matrix-tree marginals (SA-NMT §3.1, eqs. 12-15): log Z = log det L-hat by Gaussian
elimination in the Grassmann-Taksar-Heyman manner, carried out in log space, and its first and second
derivatives written out by hand, so that a sentence the float64 closed form cannot resolve costs few operator
calls a position (:mod:`structnmt.nn.matrix_tree` says when this path is taken and why it is exact).

The elimination (:func:`_sweep`, the forward sweep; :func:`log_partition`). Read the arcs as a Markov chain in
which word d moves to h at rate A[h, d] (R[d, h] = A[h, d]), with one more destination column, "the root",
R[d, root] = r_d (eq. 13's row of root scores). Eliminate the words n-1, ..., 1: eliminating word k (the last row of the
(k+1) x (k+2) block of the words still there, columns [root, word 0, ..., word k]) takes its pivot, the rate out of
k into the words still there, s_k = sum_{j<k} R[k, j] (never a difference: the Laplacian's diagonal read off the
off-diagonal rates), and moves its mass on, R[i, j] += R[i, k] R[k, j] / s_k for i < k and j in [root, 0, ..., k-1]
(what returns to i itself is a self-loop, never counted as a rate). After the last step the block is 1 x 2, its
first entry r_0, and Z = det L-hat = r_0 prod_k s_k. Every quantity is a logarithm and every sum a logsumexp:

    lp_k = logsumexp_{j<k} M[k, 1 + j]                   (the log pivot; M[k, 0] is the root column)
    moved = M[i, k + 1] + M[k, j] - lp_k                 (i < k, j <= k: the columns root, 0, ..., k-1)
    M'[i, j] = logsumexp(M[i, j], moved[i, j])
    log Z = M_final[0, 0] + sum_k lp_k

Its gradient, the marginals (:func:`_adjoint_sweep`, reverse mode by hand: a step's adjoint is a handful of
calls, where autograd's generic backward of the same step is about twice as many). With w = exp(moved - M'),
the weight the logsumexp gives the moved mass, and G = d log Z / d M':

    d/d moved = G w,  d/d M (kept) = G (1 - w),  d/d M[i, k+1] = sum_j G w,  d/d M[k, j] = sum_i G w,
    d/d lp_k = 1 - sum_{i,j} G w,  and lp_k's share of d/d M[k, 1 + j]: (d/d lp_k) softmax_j(M[k, 1 + j]).

Training differentiates the marginals once more (the loss reads them): :class:`ExactMarginals` computes the
backward's Hessian-vector product by forward-mode tangents of both sweeps, by hand (:func:`_tangent_sweeps`;
the Hessian of log Z is symmetric, so the backward of the marginals at a gradient v is the tangent of the
marginals in the direction v). Operator calls per position: 50 forward and backward together (40 of them
kernels; 98 with autograd's second derivative through the forward sweep), 25 without a graph
(``tests/test_op_count.py``). Values and gradients agree with autograd's within float64 rounding (the same
arithmetic in another order; ``tests/test_matrix_tree_elimination.py``) and with enumeration
(``tests/test_matrix_tree.py``).

A padding word (k at or past its sentence's length) has one arc, rate 1 to word 0, no arc into it and no root
score, so eliminating it is exactly a no-op (pivot log 1 = 0, and what it moves is at or below log 0's stand-in
:data:`NEG`, which a logsumexp drops bit for bit); no mask is read inside the loops.

Shapes: ``x`` (B, n, n) float64 column-shifted log-scores in the paper's layout ([head, dependent], root
scores on the diagonal), anything outside a sentence ignored; ``valid`` (B, n) bool, a prefix mask. Accurate for
finite scores to about |score| 2^-52 nats (float64's resolution of the scores themselves; float32 scores carry
|score| 2^-24); an arc scored -inf inside a sentence can leave a word without a pivot in this order, and the
result is then not a distribution (:mod:`structnmt.nn.matrix_tree` checks, and tempers it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

NEG = -1e30
"""A finite stand-in for log 0 (its derivatives stay finite where -inf gives NaN)."""


def _layout_masks(valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What :func:`_to_rates` fills for a batch: (no_arc (B, n, n): a word to itself or anything outside the
    sentence, pad_to_first (B, n, n): a padding word's rate to word 0, no_root (B, n): a padding word's root,
    outside (B, n, n): the entries outside the sentence, whose marginals and gradients are 0)."""
    n = valid.shape[1]
    no_root = ~valid
    outside = no_root[:, :, None] | no_root[:, None, :]
    no_arc = torch.eye(n, dtype=torch.bool, device=valid.device) | outside
    pad_to_first = no_root[:, :, None] & (torch.arange(n, device=valid.device) == 0)[None, None, :]
    return no_arc, pad_to_first, no_root, outside


def _to_rates(x: Tensor, masks: tuple[Tensor, ...], absent: float) -> Tensor:
    """The paper's layout (B, n, n) -> the elimination's (B, n, n + 1): rows the words as movers, columns
    [root, word 0, ..., word n-1] as destinations (the transpose of the arcs, the root scores as column 0).
    Entries that are no arc (:func:`_layout_masks`) get ``absent``; a padding word's rate to word 0 gets 0
    (log 1). With ``absent`` = NEG this lays out log-scores; with 0, a tangent (the constants have none)."""
    no_arc, pad_to_first, no_root, _ = masks
    rates = x.masked_fill(no_arc, absent).transpose(1, 2).masked_fill(pad_to_first, 0.0)  # [d, h] = x[h, d]
    root = torch.diagonal(x, dim1=1, dim2=2).masked_fill(no_root, absent)  # (B, n)
    return torch.cat([root[:, :, None], rates], dim=2)


def _from_rates(g: Tensor, masks: tuple[Tensor, ...]) -> Tensor:
    """The elimination's layout (B, n, n + 1) -> the paper's (B, n, n): arcs transposed back, the root column on
    the diagonal (a word's rate to itself is no arc: its entry is dropped), zeros outside the sentence."""
    return torch.diagonal_scatter(g[:, :, 1:].transpose(1, 2), g[:, :, 0], dim1=1, dim2=2).masked_fill(masks[3], 0.0)


def _step_views(m: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The block (B, k+1, k+2) of the words 0..k still there (or its tangent) -> (kept (B, k, k+1): rows 0..k-1,
    columns root and 0..k-1; into (B, k, 1): the rates into k; out (B, 1, k+1): k's rates to the root and
    0..k-1, whose word part ``out[..., 1:]`` gives the pivot)."""
    rows, last = m.split([k, 1], dim=1)
    kept, into = rows.split([k + 1, 1], dim=2)
    return kept, into, last.narrow(2, 0, k + 1)


def _sweep(x: Tensor, masks: tuple[Tensor, ...]) -> tuple[Tensor, list[Tensor], list[tuple]]:
    """The forward sweep (``masks``: :func:`_layout_masks`): the last block M_0 (B, 1, 2), the log pivots (B, 1, 1) of
    k = n-1, ..., 1, and per step what the derivatives read: the stacked [kept, moved] (2, B, k, k+1) and k's
    rates to the words (B, 1, k)."""
    m = _to_rates(x, masks, NEG)
    log_pivots, steps = [], []
    for k in range(x.shape[1] - 1, 0, -1):
        kept, into, out = _step_views(m, k)
        out_words = out.narrow(2, 1, k)  # (B, 1, k): k's rates to the words
        log_pivot = torch.logsumexp(out_words, dim=-1, keepdim=True)  # (B, 1, 1)
        # a stacked logsumexp, not logaddexp: the latter's second derivative is NaN for far-apart inputs
        stacked = torch.stack([kept, into + (out - log_pivot)])
        m = torch.logsumexp(stacked, dim=0)
        log_pivots.append(log_pivot)
        steps.append((stacked, out_words))
    return m, log_pivots, steps


def log_partition(x: Tensor, valid: Tensor) -> Tensor:
    """log Z (B,) of the single-root trees of ``x``: r_0 once every other word is eliminated, times the pivots.
    Differentiable by autograd (the reference the hand-written derivatives are tested against)."""
    m, log_pivots, _ = _sweep(x, _layout_masks(valid))
    return m[:, 0, 0] + torch.cat(log_pivots, dim=1).sum(dim=(1, 2)) if log_pivots else m[:, 0, 0]


def exact_marginals(x: Tensor, valid: Tensor) -> Tensor:
    """The marginals (B, n, n), paper's layout, zeros outside each sentence: d log Z / d x. With a graph where
    ``x`` needs one (:class:`ExactMarginals`); without, in any grad mode (decoding runs under inference mode)."""
    if x.requires_grad and torch.is_grad_enabled():
        return ExactMarginals.apply(x, valid)
    masks = _layout_masks(valid)
    return _from_rates(_adjoint_sweep(_sweep(x, masks)[2], x)[0], masks)


def _adjoint_sweep(steps: list[tuple[Tensor, Tensor]], like: Tensor) -> tuple[Tensor, list[tuple]]:
    """d log Z / d M_{n-1} (B, n, n + 1) (the marginals in the elimination's layout) from the forward sweep's
    ``steps``, and per step what the tangents read: (w (B, k, k+1) the moved mass's weight, G (B, k, k+1) the
    adjoint the step received, the pivot's weights (B, 1, k+1): 0 at the root, the softmax of k's rates to the
    words after it, d log Z / d lp_k (B, 1, 1))."""
    g = F.pad(torch.ones_like(like[:, :1, :1]), (0, 1))  # d log Z / d M_0 = [1, 0]
    saved = []
    for stacked, out_words in reversed(steps):
        weights = torch.softmax(stacked, dim=0)
        g_kept, g_moved = (g.unsqueeze(0) * weights).unbind(0)
        g_out = g_moved.sum(dim=1, keepdim=True)  # (B, 1, k+1)
        g_pivot = 1.0 - g_out.sum(dim=2, keepdim=True)  # (B, 1, 1)
        share = F.pad(torch.softmax(out_words, dim=-1), (1, 0))  # (B, 1, k+1): the pivot's weights, 0 at the root
        bottom = F.pad(g_out + g_pivot * share, (0, 1))  # (B, 1, k+2): nothing to k's rate to itself
        saved.append((weights[1], g, share, g_pivot))
        g = torch.cat([torch.cat([g_kept, g_moved.sum(dim=2, keepdim=True)], dim=2), bottom], dim=1)
    return g, saved


def _tangent_sweeps(dm: Tensor, saved: list[tuple]) -> Tensor:
    """The tangent of the marginals (B, n, n + 1), elimination layout, in the direction ``dm`` (B, n, n + 1) of
    M_{n-1}: forward-mode through the forward sweep, then through the adjoint sweep (``saved`` as
    :func:`_adjoint_sweep` returns it, the adjoint's order: k = 1, ..., n-1)."""
    n = dm.shape[1]
    forward = []
    for k, (w, _, share, _) in zip(range(n - 1, 0, -1), reversed(saved)):
        d_kept, d_into, d_out = _step_views(dm, k)
        d_out_rel = d_out - (share * d_out).sum(dim=2, keepdim=True)  # d out - d lp_k
        d_moved = d_into + d_out_rel
        dm = d_kept + w * (d_moved - d_kept)
        forward.append((d_moved - dm, d_out_rel))
    dg = torch.zeros_like(dm[:, :, :2])  # the adjoint's start [1, 0] is a constant
    for (w, g, share, g_pivot), (d_moved_rel, d_out_rel) in zip(saved, reversed(forward)):
        dg_moved = w * (dg + g * d_moved_rel)  # G w's tangent, w's own being w (d moved - d M')
        dg_out = dg_moved.sum(dim=1, keepdim=True)
        # the tangent of (d/d lp_k) softmax: -sum(dG w) softmax + (d/d lp_k) softmax (d out - d lp_k)
        d_share = share * (g_pivot * d_out_rel - dg_out.sum(dim=2, keepdim=True))
        bottom = F.pad(dg_out + d_share, (0, 1))
        dg = torch.cat([torch.cat([dg - dg_moved, dg_moved.sum(dim=2, keepdim=True)], dim=2), bottom], dim=1)
    return dg


class ExactMarginals(torch.autograd.Function):
    """x (B, n, n) float64 column-shifted log-scores, valid (B, n) bool -> the marginals (B, n, n), paper's
    layout, d log Z / d x, zeros outside each sentence: both sweeps by hand in the forward, the Hessian-vector
    product by tangents in the backward. Once differentiable: nothing in the toolkit differentiates the
    marginals twice; differentiating this backward again raises (or, where the incoming gradient has no graph,
    gives none)."""

    @staticmethod
    def forward(ctx, x: Tensor, valid: Tensor) -> Tensor:
        masks = _layout_masks(valid)
        g, saved = _adjoint_sweep(_sweep(x, masks)[2], x)
        # saved as autograd's own (freed after the backward, seen by saved-tensor hooks): 4 per step, then masks
        ctx.save_for_backward(*[t for step in saved for t in step], *masks)
        return _from_rates(g, masks)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        *flat, no_arc, pad_to_first, no_root, outside = ctx.saved_tensors
        saved = [tuple(flat[i:i + 4]) for i in range(0, len(flat), 4)]
        masks = (no_arc, pad_to_first, no_root, outside)
        return _from_rates(_tangent_sweeps(_to_rates(grad, masks, 0.0), saved), masks), None
