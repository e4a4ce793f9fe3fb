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
singular. Shifted scores are therefore floored at :data:`FLOOR` (-600): this changes the
weight of an option by less than e^-600 relative to its column's best, which is invisible
in any non-degenerate case (tested against enumeration with scores of ±10^4), and in the
degenerate case spreads the forced choice evenly over the floored options instead of
resolving it — the marginals stay finite, non-negative and normalised.

A second limit, met in training (SA-NMT-hard with the unscaled scores of eq. 9, which grew
to hundreds within 600 updates): when the column-best choices form a cycle (or several
roots) with a margin of more than ~36 nats, the Laplacian's entries are sums like
1 + e^-64 that float64 rounds to 1, L-hat is singular to working precision, and the solve
fails or returns marginals that are not distributions. Every sentence's result is
therefore checked (solve succeeded; entries finite and non-negative; every column and the
root diagonal summing to 1 within 1e-6), and a sentence that fails is recomputed exactly by
a second path that forms no such sums (:func:`_gth_marginals`): the single-root partition
function Z = sum_r rho_r det(L^(r)) (L^(r): the arc Laplacian without root r's row and column,
trees rooted at r), each determinant by Grassmann-Taksar-Heyman elimination — every pivot is
the sum of the remaining off-diagonal magnitudes of its column plus the column's excess (the
arc from r), so no step subtracts and the determinant keeps its relative accuracy however
ill-conditioned L^(r) is — and the marginals are the gradient of log Z with respect to the
scores (autograd, with a graph when the scores need one). It costs O(n^4) per sentence, so
it runs only for the sentences that fail the check; roots whose trees weigh under e^-60 of the
best root's are left out (:data:`ROOT_MARGIN`) and options under e^-150 of their column's best
raised to it (:data:`GTH_FLOOR`), so that the gradient's reciprocals of pivots stay inside
float64. Tested against enumeration of every tree (n <= 6, scores of standard deviation
20-100) within 1e-6. A sentence that this path cannot resolve either gets the last resort: its
shifted scores divided by the smallest power of 2 that passes the check, the marginals of a
tempered distribution.

Known limits (an independent review against enumeration and a high-precision reference):
where the elimination path is accepted its values and gradients are exact to about 1e-14,
except that GTH_FLOOR drops the mass of options more than 150 nats under their column's best
(at most 1.9e-6 in 8,591 accepted sentences of std 100-250); the floor also sends many
sentences of scores of std 300-1,000 to the tempered last resort although the elimination
without it would be exact. The closed form's check (a distribution) does not prove its result:
past std ~300 a sentence can pass it and be wrong by up to 1 (FLOOR flattening a forced choice,
or an underflowed determinant), and at std 50 a passing sentence's gradients were off by up to
8e3. Scaled or capped scores (``rnn.scale``, ``rnn.score_cap``, the ``structured`` default) stay
far from these ranges. :data:`STATS`
counts the sentences of this process and how many took each path (the training logs them per
validation). Scaling the scores (``rnn.scale``, the Transformer's ``structured`` default)
keeps them in range in the first place.
"""

from __future__ import annotations

import torch
from torch import Tensor

STATS = {"sentences": 0, "exact_elimination": 0, "tempered": 0}
"""Sentences of this process whose marginals were computed, and how many needed the elimination
path (:func:`_gth_marginals`) or the tempered fallback; the training logs and resets them at every
validation (:class:`structnmt.training.MatrixTreeHook`)."""

ROOT_MARGIN = 60.0
"""The elimination path leaves out roots whose trees weigh less than e^-60 of the best root's."""

GTH_FLOOR = -150.0
"""The elimination path raises shifted log-scores to this (options under e^-150 of their column's best
change no marginal visibly), so that no reciprocal of a pivot overflows float64 in the gradient."""

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
    shifted = (x - col_max).clamp_min(FLOOR).masked_fill(~pair, float("-inf"))
    beta, ok = _closed_form(shifted, valid, pair)
    STATS["sentences"] += int(valid.any(dim=1).sum())
    if bool(ok.all()):
        return beta.masked_fill(~pair, 0.0).to(scores.dtype)
    # some sentences fail the check: each path's graph holds only the sentences it resolves (the failed
    # closed form's non-finite intermediates would turn the gradients of the whole batch into NaN)
    good, bad = ok.nonzero().squeeze(1), (~ok).nonzero().squeeze(1)
    out = torch.zeros_like(shifted).index_put((good,), _closed_form(shifted[good], valid[good], pair[good])[0])
    with torch.no_grad():  # which sentences the elimination resolves, found without a graph
        exact, exact_ok = _gth_marginals(shifted[bad].detach(), valid[bad], pair[bad])
    sel = bad[exact_ok]
    STATS["exact_elimination"] += len(sel)
    if len(sel) and shifted.requires_grad and torch.is_grad_enabled():  # then with one, for those only
        exact = _gth_marginals(shifted[sel], valid[sel], pair[sel])[0]
    else:
        exact = exact[exact_ok]
    out = out.index_put((sel,), exact)
    rest = bad[~exact_ok]
    if len(rest):
        STATS["tempered"] += len(rest)
        out = out.index_put((rest,), _tempered(shifted[rest], valid[rest], pair[rest]))
    return out.masked_fill(~pair, 0.0).to(scores.dtype)


def _tempered(shifted: Tensor, valid: Tensor, pair: Tensor) -> Tensor:
    """The last resort for sentences neither path resolves: the closed form of their shifted scores divided
    by the smallest power of 2 that passes the check (searched without a graph, then computed with one)."""
    B = shifted.shape[0]
    temp = torch.ones(B, dtype=shifted.dtype, device=shifted.device)
    ok = torch.zeros(B, dtype=torch.bool, device=shifted.device)
    with torch.no_grad():
        for _ in range(MAX_HALVINGS):
            temp = torch.where(ok, temp, temp / 2)
            _, ok = _closed_form(shifted * temp[:, None, None], valid, pair)
            if bool(ok.all()):
                break
    if not bool(ok.all()):  # scores scaled by 2^-64 are uniform to float64: cannot happen
        raise FloatingPointError("marginals: the tempered fallback did not converge")
    return _closed_form(shifted * temp[:, None, None], valid, pair)[0]


def _gth_root_terms(shifted: Tensor, valid: Tensor) -> Tensor:
    """(B, n) log rho_r + log det L^(r), each root's share of log Z (their logsumexp), from column-shifted
    float64 log-scores (B, n, n) (-inf outside the sentence); every determinant by
    Grassmann-Taksar-Heyman elimination, batched over sentences and roots (B, n problems of n nodes
    with the root and the padding already eliminated). Eliminating node k: its pivot is the column's
    excess plus its remaining off-diagonal magnitudes, p_k = e_k + sum_i B_ik; then B_ij += B_ik B_kj / p_k
    and e_j += B_kj e_k / p_k for the remaining nodes — sums and products of non-negative numbers only."""
    B, n, _ = shifted.shape
    eye = torch.eye(n, dtype=torch.bool, device=shifted.device)
    e = torch.exp(shifted)
    arcs = e.masked_fill(eye, 0.0)  # (B, n, n) A[h, d]
    mags = arcs[:, None].expand(B, n, n, n)  # (B, R, n, n): the off-diagonal magnitudes of problem r
    excess = arcs  # (B, R, n): e_j = A[r, j], the arc from the root r into j
    ridx = torch.arange(n, device=shifted.device)
    alive = valid[:, None, :].expand(B, n, n) & (ridx[:, None] != ridx[None, :])  # (B, R, n): not yet eliminated
    logdet = shifted.new_zeros(B, n)
    for k in range(n):
        act = alive[:, :, k]  # (B, R): node k is eliminated now in these problems
        others = alive.clone()
        others[:, :, k] = False
        col = mags[:, :, :, k] * others  # (B, R, n) B_ik of the remaining i
        row = mags[:, :, k, :] * others  # (B, R, n) B_kj of the remaining j
        pivot = torch.where(act, excess[:, :, k] + col.sum(-1), torch.ones_like(logdet))
        logdet = logdet + torch.log(pivot) * act
        w = act / pivot  # (B, R): 1 / p_k where k is eliminated, 0 elsewhere
        excess = excess + row * (excess[:, :, k] * w)[..., None]
        mags = mags + col[..., :, None] * row[..., None, :] * w[..., None, None]
        alive = others
    log_root = torch.diagonal(shifted, dim1=1, dim2=2).masked_fill(~valid, float("-inf"))
    return log_root + logdet


def _gth_marginals(shifted: Tensor, valid: Tensor, pair: Tensor) -> tuple[Tensor, Tensor]:
    """The exact marginals (B, n, n) of the sentences of ``shifted`` as the gradient of
    the logsumexp of :func:`_gth_root_terms` (with a graph when ``shifted`` has one, so training differentiates
    through them), and ``ok`` (B,): finite, non-negative, columns and roots summing to 1 within 1e-6."""
    need_graph = shifted.requires_grad and torch.is_grad_enabled()
    # the roots whose trees carry weight: a root more than ROOT_MARGIN nats below the best adds less than
    # e^-ROOT_MARGIN to Z, and its elimination's tiny pivots would overflow the gradient (1/p) for nothing
    with torch.no_grad():
        terms = _gth_root_terms(shifted.clamp_min(GTH_FLOOR), valid)
        roots = valid & (terms >= terms.amax(dim=1, keepdim=True) - ROOT_MARGIN)
    with torch.enable_grad():
        x = shifted if need_graph else shifted.detach().requires_grad_(True)
        logz = torch.logsumexp(_gth_root_terms(x.clamp_min(GTH_FLOOR), valid).masked_fill(~roots, float("-inf")),
                               dim=1)
        (beta,) = torch.autograd.grad(logz.sum(), x, create_graph=need_graph)
    beta = beta.masked_fill(~pair, 0.0)
    with torch.no_grad():
        b = beta.detach()
        cols = ((b.sum(dim=1) - valid.double()).abs() <= 1e-6).all(dim=1)
        roots = (torch.diagonal(b, dim1=1, dim2=2).sum(dim=1) - 1.0).abs() <= 1e-6
        ok = torch.isfinite(b).all(dim=(1, 2)) & (b >= -1e-6).all(dim=(1, 2)) & cols & (roots | ~valid.any(dim=1))
    return beta, ok


def _closed_form(shifted: Tensor, valid: Tensor, pair: Tensor) -> tuple[Tensor, Tensor]:
    """Eqs. 12-15 on column-shifted float64 log-scores (B, n, n) (-inf outside the
    sentence) -> (beta (B, n, n), ok (B,)): ``ok`` is False for a sentence whose solve
    failed or whose marginals are not a distribution (a negative or non-finite entry, or a
    column or the root diagonal not summing to 1 within 1e-6): float64 could not resolve it."""
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
        ok = (info == 0) & finite & nonneg & cols & (roots | ~valid.any(dim=1))
    return beta, ok
