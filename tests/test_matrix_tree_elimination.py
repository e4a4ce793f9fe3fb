"""The exact elimination's hand-written derivatives (structnmt.nn.matrix_tree_elimination) against autograd's
first and second derivatives of the same log partition, against finite differences, and how marginals() picks
its graph for the sentences the closed form cannot resolve."""

from __future__ import annotations

import pytest
import torch

from structnmt.nn import matrix_tree
from structnmt.nn.matrix_tree import marginals
from structnmt.nn.matrix_tree_elimination import ExactMarginals, exact_marginals, log_partition


def _batch(std: float, seed: int, lengths=(7, 4, 1, 6)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Column-shifted log-scores (B, n, n) as marginals() hands them over (-inf outside each sentence), the
    valid mask and random weights for a training-like loss. The scores are multiples of ``std`` plus a jitter
    of 1 nat: entries hundreds of nats apart, and ties among the largest, so the marginals are not all 0 or 1
    and the gradients not all 0 whatever the scale."""
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    pair = valid[:, :, None] & valid[:, None, :]
    x = (torch.randint(-2, 3, (len(lengths), n, n), generator=gen).double() * std
         + torch.randn(len(lengths), n, n, dtype=torch.float64, generator=gen)).masked_fill(~pair, float("-inf"))
    shifted = x - x.amax(dim=1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)
    return shifted, valid, torch.randn(len(lengths), n, n, dtype=torch.float64, generator=gen)


def _autograd_reference(shifted, valid, w):
    """The marginals as autograd's gradient of log Z and the training gradient as its second derivative (the
    elimination's earlier way, differentiating the forward sweep twice)."""
    pair = valid[:, :, None] & valid[:, None, :]
    x = shifted.masked_fill(~pair, 0.0).requires_grad_(True)
    (beta,) = torch.autograd.grad(log_partition(x, valid).sum(), x, create_graph=True)
    beta = beta.masked_fill(~pair, 0.0)
    (grad,) = torch.autograd.grad((beta * w).sum(), x)
    return beta.detach(), grad.masked_fill(~pair, 0.0)


@pytest.mark.parametrize("std", [1.0, 30.0, 300.0, 1000.0])
def test_the_hand_written_derivatives_equal_autograds_within_float64_rounding(std):
    shifted, valid, w = _batch(std, seed=int(std))
    want_beta, want_grad = _autograd_reference(shifted, valid, w)
    x = shifted.clone().requires_grad_(True)
    beta = ExactMarginals.apply(x, valid)
    (beta * w).sum().backward()
    assert (beta.detach() - want_beta).abs().max() <= 1e-12
    assert (x.grad - want_grad).abs().max() <= 1e-11 * (1 + want_grad.abs().max())
    assert want_grad.abs().max() > 1e-3  # the comparison is not of zeros
    pair = valid[:, :, None] & valid[:, None, :]
    assert not beta[~pair].any() and not x.grad[~pair].any()  # nothing outside a sentence
    assert torch.allclose(beta.detach().sum(dim=1), valid.double(), atol=1e-9)  # every word: one head or the root


def test_the_backward_equals_finite_differences_of_the_forward():
    """gradcheck: the tangent sweeps against central differences of the hand-written marginals themselves."""
    shifted, valid, _ = _batch(3.0, seed=5, lengths=(5, 3))
    pair = valid[:, :, None] & valid[:, None, :]
    x = shifted.masked_fill(~pair, 0.0).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: ExactMarginals.apply(t, valid), (x,), eps=1e-6, atol=1e-7)


def test_decoding_without_a_graph_gives_the_same_marginals_bit_for_bit():
    shifted, valid, _ = _batch(50.0, seed=2)
    with_graph = ExactMarginals.apply(shifted.clone().requires_grad_(True), valid).detach()
    with torch.inference_mode():
        without = exact_marginals(shifted, valid)
    assert torch.equal(with_graph, without)


def test_a_padding_word_changes_nothing_in_its_sentence():
    """The loops read no mask: a sentence padded with words past its length has its own marginals (within the
    last bit of the pivots' sum, added in another order) and its own training gradients."""
    shifted, valid, w = _batch(20.0, seed=9, lengths=(5,))
    padded = torch.full((1, 9, 9), float("-inf"), dtype=torch.float64)
    padded[:, :5, :5] = shifted
    w9 = torch.zeros(1, 9, 9, dtype=torch.float64)
    w9[:, :5, :5] = w
    results = []
    for x, v, weights in ((shifted, valid, w), (padded, torch.arange(9)[None] < 5, w9)):
        x = x.clone().requires_grad_(True)
        beta = ExactMarginals.apply(x, v)
        (beta * weights).sum().backward()
        results.append((beta.detach()[:, :5, :5], x.grad[:, :5, :5]))
    (beta5, grad5), (beta9, grad9) = results
    assert torch.allclose(beta9, beta5, atol=1e-15, rtol=0) and torch.allclose(grad9, grad5, atol=1e-14, rtol=0)


def _failing_but_finite() -> torch.Tensor:
    """A 6-word score matrix (std 20) whose closed form fails the condition gate with a finite inverse."""
    from structnmt.nn.matrix_tree import _closed_form

    gen = torch.Generator().manual_seed(0)
    valid = torch.ones(1, 6, dtype=torch.bool)
    pair = valid[:, :, None] & valid[:, None, :]
    for _ in range(200):
        s = torch.randn(1, 6, 6, dtype=torch.float64, generator=gen) * 20
        _, ok, finite = _closed_form(s - s.amax(dim=1, keepdim=True), valid, pair)
        if not bool(ok) and bool(finite):
            return s[0]
    raise AssertionError("no such matrix in 200 draws")


@pytest.mark.parametrize("case", ["finite", "singular"])
def test_the_closed_form_is_recomputed_only_when_a_failed_sentence_has_non_finite_intermediates(case, monkeypatch):
    """A failed sentence's closed form receives no gradient: with finite intermediates its backward gives exact
    zeros, so its graph is kept (one closed form); a singular solve (the 64-nat cycle) would give NaN, so the
    closed form is recomputed with that sentence's scores zeroed. Either way the other sentences' marginals and
    gradients are those they have alone, and the failed one's gradient is finite."""
    from test_matrix_tree import CYCLE

    hard = _failing_but_finite() if case == "finite" else torch.nn.functional.pad(CYCLE, (0, 3, 0, 3))
    calls = []
    real = matrix_tree._closed_form
    monkeypatch.setattr(matrix_tree, "_closed_form", lambda *a: calls.append(1) or real(*a))
    gen = torch.Generator().manual_seed(1)
    good = torch.randn(2, 6, 6, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([6 if case == "finite" else 3, 6, 5])
    w = torch.randn(3, 6, 6, dtype=torch.float64, generator=gen)
    scores = torch.cat([hard[None], good]).requires_grad_(True)
    before = matrix_tree.STATS["exact_elimination"]
    (marginals(scores, lengths) * w).sum().backward()
    assert matrix_tree.STATS["exact_elimination"] == before + 1
    assert len(calls) == (1 if case == "finite" else 2)
    alone = good.clone().requires_grad_(True)
    (marginals(alone, lengths[1:]) * w[1:]).sum().backward()
    assert torch.allclose(scores.grad[1:], alone.grad, atol=1e-15, rtol=0)
    assert torch.isfinite(scores.grad).all() and scores.grad[0].abs().max() > 0
    hard_alone = hard[None].clone().requires_grad_(True)  # its own gradient: no share from its closed form's graph
    (marginals(hard_alone, lengths[:1]) * w[:1]).sum().backward()
    assert torch.equal(scores.grad[0], hard_alone.grad[0])


def test_the_saved_tensors_are_autograds_own():
    """Saved with save_for_backward: saved-tensor hooks (torch.autograd.graph.save_on_cpu, ...) see every step's
    four tensors, and autograd frees them after the backward."""
    shifted, valid, w = _batch(20.0, seed=4)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        x = shifted.clone().requires_grad_(True)
        beta = ExactMarginals.apply(x, valid)
    assert len(packed) >= 4 * (shifted.shape[1] - 1)
    (beta * w).sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        (beta * w).sum().backward()


def test_scores_no_path_resolves_are_one_sentence():
    scores = torch.randn(1, 4, 4, dtype=torch.float64)
    scores[0, 1, 2] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN or \\+inf .*rnn.score_cap"):
        marginals(scores, torch.tensor([4]))


def test_the_benchmarks_memory_part_runs_and_refuses_a_bad_argument_in_one_sentence():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_matrix_tree.py"
    ok = subprocess.run([sys.executable, str(script), "--memory", "0.1"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("std 0.1: peak memory grew ") and "0 of 16 eliminated" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "--memory", "abc"], capture_output=True, text=True)
    assert bad.returncode == 1 and "--memory STD (a number), not --memory abc" in bad.stderr
    assert "Traceback" not in bad.stderr
