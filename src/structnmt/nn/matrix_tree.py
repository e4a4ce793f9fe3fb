"""Marginals of non-projective, single-root dependency trees by Kirchhoff's Matrix-Tree
theorem (SA-NMT §3.1, eqs. 10-15; Koo et al. 2007; Liu & Lapata 2017).

Layout (the paper's): ``scores`` (B, n, n) with ``scores[b, h, d]`` = phi_{h,d}, the score of
word ``h`` heading word ``d`` (h != d), and ``scores[b, d, d]`` = phi_{d,d}, the score of ``d``
being the root. The distribution over trees z is p(z) ∝ exp(sum z_{h,d} phi_{h,d}) (eq. 10)
over trees in which every word has exactly one head and exactly one word is the root.

:func:`marginals` returns beta in the same layout: ``beta[b, h, d]`` = p(z_{h,d} = 1)
(eq. 11; eq. 14), ``beta[b, d, d]`` = p(d is the root) (eq. 15); for every word d the
column ``beta[b, :, d]`` sums to 1 (one head or the root), and the diagonal sums to 1 (one
root). Positions at or beyond ``lengths[b]`` get zeros.

Computation, batched (no loop over sentences), gradients by autograd:

* A_{h,d} = exp(phi_{h,d}) (h != d), r_d = exp(phi_{d,d});
* L = diag(column sums of A) - A (eq. 12), and L-hat = L with its first row replaced by r
  (eq. 13: the root row);
* beta_{h,d} = (1 - delta_{1,d}) A_{h,d} [L-hat^-1]_{d,d} - (1 - delta_{h,1}) A_{h,d}
  [L-hat^-1]_{d,h}  (eq. 14, with 1 the first word), and the root marginals
  beta_{d,d} = r_d [L-hat^-1]_{d,1}  (eq. 15).

Stability: every column d of the scores (its n - 1 head scores and its root score) has
its maximum subtracted first — exact, since each tree uses exactly one entry of each
column, so every tree's weight is divided by the same product and the marginals do not
change; the closed form is then evaluated in float64 (``torch.linalg.solve`` of L-hat
against the identity, never a determinant), and the result cast back. Padded positions
are made an identity block (no arcs in or out, L-hat_{dd} = 1), so one solve serves the
whole batch.

One limit of float64: when the single-root constraint forces a word onto an option more
than ~745 nats below its best one (say two words whose every arc is 1,000 below their root
score: one of them must take an arc), every entry of that column underflows and L-hat is
singular. The closed form's shifted scores are therefore floored at :data:`FLOOR` (-600):
this changes the weight of an option by less than e^-600 relative to its column's best, which
is invisible in any non-degenerate case (tested against enumeration with scores of ±10^4); a
sentence where the floor would decide a forced choice fails the condition gate below and goes
to the elimination path, which reads the unfloored scores.

A second limit, met in training (SA-NMT-hard with the unscaled scores of eq. 9, which grew
to hundreds within 600 updates): when the column-best choices form a cycle (or several
roots) with a margin of more than ~36 nats, the Laplacian's entries are sums like
1 + e^-64 that float64 rounds to 1, L-hat is singular to working precision, and the solve
fails, returns marginals that are not distributions, or — worse — returns a distribution
whose values or gradients are wrong. The closed form's result is therefore accepted only
where it is a distribution (solve succeeded; entries finite and non-negative; every column
and the root diagonal summing to 1 within 1e-6) **and** L-hat is well conditioned (1-norm
condition number at most :data:`COND_MAX`, 10^4, read off the inverse the solve already
gives): measured against enumeration and a high-precision reference, passing the distribution
check alone left gradients off by up to 10^3-10^4 times the largest true one (std 20-200) and
values off by 1 (std 300 and more).

Every other sentence is recomputed exactly by a second path that forms no such sums
(:func:`_gth_marginals`, :mod:`structnmt.nn.matrix_tree_elimination`): log Z = log det L-hat by Gaussian
elimination in the Grassmann-Taksar-Heyman manner, the arcs read as a Markov chain (every
pivot is a sum of the rates still there, never a difference, and the root row of eq. 13 is updated
like one more column of rates), carried out in log space — every sum a logsumexp, so nothing underflows (no
floor: it reads the unfloored shifted scores), nothing is subtracted, and the first and second
derivatives are bounded weights; O(n^3) per sentence — and the marginals as the gradient of
log Z with respect to the scores, written out by hand (a reverse sweep; training's second derivative by
forward-mode tangents of both sweeps). An elimination in
linear space was tried first and rejected: e^-800 underflows and answers for another tree, and
the double backward through pivots of e^-200 loses the training gradient to cancellation, both
while passing every check. Measured against enumeration (benchmarks/bench_matrix_tree.py: n <= 6, 100
random matrices per std, 2026-11-25): nothing is tempered at any std from 1 to 1,000; every result is within 1e-13 of
enumeration, its gradients within 1e-9 of the largest (an independent review, 9,000 matrices
and an mpmath reference up to n = 12: elimination values within 2e-12 and gradients within 3e-12,
closed-form gradients within 2e-8 relative where the largest true one is at least 1e-6). On
batches of 64 sentences of 10-30 words the elimination took 22 of 64 at std 10, 41 at std 20,
55-61 at std 50-1,000 (timings: benchmarks/results/2026-11-28-matrix-tree-hand-derivatives.txt).

A failed sentence's closed-form marginals are replaced, so no gradient reaches its closed form: where that
form's intermediates are finite its backward gives the sentence exact zeros and its graph is kept; a singular
solve would give NaN, so then the closed form is recomputed with that sentence's scores zeroed.

What neither path resolves gets the last resort: its shifted scores multiplied by the largest power 2^-k
(k >= 1) that passes the closed form's checks, the marginals of a tempered distribution (an approximation, counted
as such). What takes it: arcs scored -inf inside a sentence (ruled out), which can leave a word without a
pivot in the elimination's order. NaN or +inf scores (a diverged model) are resolved by neither, and raise
FloatingPointError. The elimination's accuracy is about |score| 2^-52 nats, float64's resolution of the scores
themselves (a float32 score carries |score| 2^-24): at scores of 10^12 and beyond its result can pass the
checks and be off by 10^-5 and more. :data:`STATS` counts the sentences of this process and how many took the
elimination path or the tempered one (the training logs them per validation). Scaling the scores
(``rnn.scale``, ``rnn.score_cap``, the Transformer's ``structured`` default) keeps them in the closed form's
range in the first place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from structnmt.nn.matrix_tree_elimination import exact_marginals

STATS = {"sentences": 0, "exact_elimination": 0, "tempered": 0}
"""Sentences of this process whose marginals were computed, and how many needed the elimination
path (:func:`_gth_marginals`) or the tempered fallback; the training logs and resets them at every
validation (:class:`structnmt.cli.training.MatrixTreeHook`)."""

COND_MAX = 1e4
"""The closed form's result is accepted only where the 1-norm condition number of L-hat is at most this
(and the result is a distribution): measured against enumeration and an mpmath reference, its marginals
are then within 3e-13 and its gradients within 2e-8 of the largest; above it a passing result's gradients
were off by up to 10^3-10^4 times the largest, its values by up to 1."""

MAX_HALVINGS = 64
"""At most this many halvings of a sentence's scores in the tempered fallback."""

FLOOR = -600.0
"""Shifted log-scores below this (more than 600 nats under their column's best entry) are
raised to it, so that L-hat stays invertible in float64 when the scores force a choice
among options float64 cannot tell apart (e^-745 underflows): see the module docstring."""


def marginals(scores: Tensor, lengths: Tensor) -> Tensor:
    """scores (B, n, n) [head, dependent] with root scores on the diagonal; lengths (B,)
    long -> marginals (B, n, n), same layout (root marginals on the diagonal), zeros
    outside each sentence's length. See the module docstring for the equations, and for the
    exact elimination path of the sentences the closed form cannot resolve in float64."""
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2]:
        raise ValueError(f"marginals: scores must be (B, n, n), got {tuple(scores.shape)}.")
    B, n, _ = scores.shape
    device = scores.device
    pos = torch.arange(n, device=device)
    valid = pos[None, :] < lengths.to(device)[:, None]  # (B, n) real words
    pair = valid[:, :, None] & valid[:, None, :]  # (B, n, n) both real
    x = scores.double().masked_fill(~pair, float("-inf"))
    # exact per-column shift (each tree takes one entry per column: head or root)
    col_max = x.amax(dim=1, keepdim=True)  # (B, 1, n)
    col_max = torch.where(torch.isfinite(col_max), col_max, torch.zeros_like(col_max)).detach()
    raw = x - col_max  # the elimination path works in log space: it needs no floor
    shifted = raw.clamp_min(FLOOR).masked_fill(~pair, float("-inf"))
    beta, ok, finite = _closed_form(shifted, valid, pair)
    all_ok, sentences = torch.stack([ok.all().long(), valid.any(dim=1).sum()]).tolist()  # one read of the device
    STATS["sentences"] += sentences
    if all_ok:
        return beta.masked_fill(~pair, 0.0).to(scores.dtype)
    # some sentences fail the check and take another path, so no gradient reaches their closed form: where its
    # intermediates are finite its backward gives them exact zeros; a non-finite one would give 0 * inf = NaN in
    # their scores' gradients, so then the closed form is recomputed with their scores replaced by zeros
    bad = (~ok).nonzero().squeeze(1)
    valid_bad = valid[bad]
    longest, all_finite = torch.stack([valid_bad.sum(dim=1).amax(), finite.all()]).tolist()  # one read
    if not all_finite:
        beta = _closed_form(shifted.masked_fill((~ok)[:, None, None] & pair, 0.0), valid, pair)[0]
    need_graph = shifted.requires_grad and torch.is_grad_enabled()
    exact, exact_ok = _gth_marginals(raw[bad], valid_bad, pair[bad], int(longest))  # with the caller's graph, if any
    sel = bad[exact_ok]
    STATS["exact_elimination"] += len(sel)
    if need_graph and len(sel) and not bool(exact_ok.all()):  # a graph holding only the sentences it resolves
        exact = _gth_marginals(raw[sel], valid[sel], pair[sel])[0]
    else:
        exact = exact[exact_ok]
    out = torch.zeros_like(shifted).index_put((sel,), exact)
    rest = bad[~exact_ok]
    if len(rest):
        STATS["tempered"] += len(rest)
        out = out.index_put((rest,), _tempered(shifted[rest], valid[rest], pair[rest]))
    out = torch.where(ok[:, None, None], beta, out)
    return out.masked_fill(~pair, 0.0).to(scores.dtype)


def _tempered(shifted: Tensor, valid: Tensor, pair: Tensor) -> Tensor:
    """The last resort for sentences neither path resolves: the closed form of their shifted scores multiplied
    by the largest factor 2^-k (k >= 1) that passes the check (searched without a graph, then computed with one)."""
    B = shifted.shape[0]
    temp = torch.ones(B, dtype=shifted.dtype, device=shifted.device)
    ok = torch.zeros(B, dtype=torch.bool, device=shifted.device)
    with torch.no_grad():
        for _ in range(MAX_HALVINGS):
            temp = torch.where(ok, temp, temp / 2)
            ok = _closed_form(shifted * temp[:, None, None], valid, pair)[1]
            if bool(ok.all()):
                break
    if not bool(ok.all()):  # finite scores scaled by 2^-64 are uniform to float64: only NaN or +inf get here
        raise FloatingPointError("marginals: the tree scores hold NaN or +inf (a diverged model); no path resolves "
                                 "them: lower the learning rate or cap the scores (rnn.score_cap).")
    return _closed_form(shifted * temp[:, None, None], valid, pair)[0]


def _gth_marginals(shifted: Tensor, valid: Tensor, pair: Tensor, longest: int | None = None) -> tuple[Tensor, Tensor]:
    """The exact marginals (B, n, n) of the sentences of ``shifted`` (column-shifted log-scores, finite
    inside each sentence) by the elimination of :mod:`structnmt.nn.matrix_tree_elimination` (with a graph when
    ``shifted`` has one, so training differentiates through them), and ``ok`` (B,): finite, non-negative,
    columns and roots summing to 1 within 1e-6 (non-finite scores are what fails it). The elimination runs on
    the batch cut to its longest sentence, ``longest`` where the caller has read it (beyond it is padding, whose
    marginals are 0)."""
    # valid is a prefix mask (built from lengths): past the longest sentence everything is padding
    n = shifted.shape[1]
    if longest is None:
        longest = int(valid.sum(dim=1).max()) if valid.numel() else 1
    m = max(longest, 1)
    beta = F.pad(exact_marginals(shifted[:, :m, :m], valid[:, :m]), (0, n - m, 0, n - m))
    with torch.no_grad():
        b = beta.detach()
        cols = ((b.sum(dim=1) - valid.double()).abs() <= 1e-6).all(dim=1)
        roots = (torch.diagonal(b, dim1=1, dim2=2).sum(dim=1) - 1.0).abs() <= 1e-6
        ok = torch.isfinite(b).all(dim=(1, 2)) & (b >= -1e-6).all(dim=(1, 2)) & cols & (roots | ~valid.any(dim=1))
    return beta, ok


def _closed_form(shifted: Tensor, valid: Tensor, pair: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Eqs. 12-15 on column-shifted float64 log-scores (B, n, n) (-inf outside the sentence) -> (beta (B, n, n), ok
    (B,), finite (B,)): ``ok`` is False for a sentence whose solve failed, whose L-hat has a 1-norm condition
    number above :data:`COND_MAX` (its result, even a distribution, cannot be trusted: see there) or whose
    marginals are not a distribution (a negative or non-finite entry, or a column or the root diagonal not
    summing to 1 within 1e-6): float64 could not resolve it. ``finite``: the solve succeeded and its inverse is
    finite, so a sentence's graph gives its scores zero gradients when its marginals receive none (a non-finite
    intermediate would give NaN)."""
    B, n, _ = shifted.shape
    device = shifted.device
    pos = torch.arange(n, device=device)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    e = torch.exp(shifted)  # (B, n, n); 0 outside the sentence
    root = torch.diagonal(e, dim1=1, dim2=2)  # (B, n) r_d
    arcs = e.masked_fill(eye, 0.0)  # A_{h,d}, h != d
    lap = torch.diag_embed(arcs.sum(dim=1)) - arcs  # eq. 12: column sums on the diagonal
    lap_hat = torch.cat([root[:, None, :], lap[:, 1:, :]], dim=1)  # eq. 13: first row = root scores
    lap_hat = lap_hat + torch.diag_embed((~valid).double())  # padded positions: an identity block
    inv, info = torch.linalg.solve_ex(lap_hat, torch.eye(n, dtype=lap_hat.dtype, device=device).expand(B, n, n))
    inv_diag = torch.diagonal(inv, dim1=1, dim2=2)  # (B, n) [L-hat^-1]_{d,d}
    not_first_dep = (pos != 0).double()[None, None, :]  # (1 - delta_{1,d})
    not_first_head = (pos != 0).double()[None, :, None]  # (1 - delta_{h,1})
    beta = (not_first_dep * arcs * inv_diag[:, None, :]
            - not_first_head * arcs * inv.transpose(1, 2))  # eq. 14: [L-hat^-1]_{d,h} at [h, d]
    root_marg = root * inv[:, :, 0]  # eq. 15: r_d [L-hat^-1]_{d,1}
    beta = (beta.masked_fill(eye, 0.0) + torch.diag_embed(root_marg)).masked_fill(~pair, 0.0)
    with torch.no_grad():
        b = beta.detach()
        finite = torch.isfinite(b).all(dim=(1, 2))
        nonneg = (b >= -1e-6).all(dim=(1, 2))
        cols = ((b.sum(dim=1) - valid.double()).abs() <= 1e-6).all(dim=1)
        roots = (torch.diagonal(b, dim1=1, dim2=2).sum(dim=1) - 1.0).abs() <= 1e-6
        cond = lap_hat.abs().sum(dim=1).amax(dim=1) * inv.abs().sum(dim=1).amax(dim=1)  # 1-norm condition number
        solved = info == 0
        ok = solved & finite & nonneg & cols & (roots | ~valid.any(dim=1)) & (cond <= COND_MAX)
    return beta, ok, solved & (cond < float("inf"))  # a finite norm of the inverse: every entry finite
