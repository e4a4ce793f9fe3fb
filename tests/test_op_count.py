"""Operator calls (what a GPU launches) of the mechanisms' hot paths: structnmt.machine.op_count and benchmarks/op_counts.py.

Counts, not timings: they do not depend on the machine or its load (torch is pinned below 2.14). The bounds
below would fail for the code they replaced (in brackets: its count), so a change that puts work back into a
loop over positions fails here."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from structnmt.config import ModelConfig, RNNConfig
from structnmt.machine.op_count import OpCounter
from structnmt.models import build_model
from structnmt.nn import matrix_tree
from structnmt.nn.matrix_tree_elimination import exact_marginals

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import op_counts  # noqa: E402
from behaviour_check import prepare_corpus  # noqa: E402
from grid_rows import grid_rows, row_trainer, step_groups  # noqa: E402

GRID = Path(__file__).resolve().parents[1] / "configs" / "grids" / "cross_paper_multi30k.yaml"


def test_the_counter_counts_calls_views_and_reads():
    x = torch.randn(3, 4, requires_grad=True)
    with OpCounter() as ops:
        y = (x * 2).t().sum()  # mul, t (a view), sum
        y.backward()  # the backward's calls are counted too
        value = y.detach().item()  # a read
        ok = bool(x.grad.amax() > 0)  # amax, gt, a read
    assert ops.counts["aten.mul"] >= 2 and ops.counts["aten.t"] >= 1 and ops.counts["aten.amax"] == 1
    assert ops.views >= 1 and ops.kernels == ops.total - ops.views
    assert ops.reads == 2 and ok and value == pytest.approx(float((x.detach() * 2).sum()))


def _marginal_calls(n: int, std: float) -> tuple[int, int]:
    """Calls of the marginals of 8 sentences of n words and the backward of a weighted sum (training's path),
    and how many of the sentences took the exact elimination."""
    gen = torch.Generator().manual_seed(n)
    scores = (torch.randn(8, n, n, dtype=torch.float64, generator=gen) * std).requires_grad_(True)
    weights = torch.randn(8, n, n, dtype=torch.float64, generator=gen)
    lengths = torch.full((8,), n)
    before = matrix_tree.STATS["exact_elimination"]
    with OpCounter() as ops:
        (matrix_tree.marginals(scores, lengths) * weights).sum().backward()
    return ops.total, matrix_tree.STATS["exact_elimination"] - before


def test_the_closed_form_costs_the_same_calls_at_every_length():
    (short, eliminated_short), (long, eliminated_long) = _marginal_calls(6, 0.1), _marginal_calls(24, 0.1)
    assert eliminated_short == eliminated_long == 0
    assert short == long


def _elimination_calls(n: int, graph: bool) -> int:
    """Calls of the exact elimination's marginals of 4 sentences of n words (with a graph: and the backward of a
    weighted sum, training's path; without: decoding's)."""
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(4, n, n, dtype=torch.float64, generator=gen) * 100
    weights = torch.randn(4, n, n, dtype=torch.float64, generator=gen)
    valid = torch.ones(4, n, dtype=torch.bool)
    with OpCounter() as ops:
        if graph:
            (exact_marginals(x.requires_grad_(True), valid) * weights).sum().backward()
        else:
            exact_marginals(x, valid)
    return ops.total


def test_the_exact_elimination_costs_few_calls_per_position():
    """The elimination is a loop over positions (forward, gradient, and training's second derivative through
    it): 50 calls a position with both derivatives written out, 25 without a graph (autograd's second
    derivative through the forward sweep took 98; an earlier elimination with a back-substitution loop, three
    slices and two masks a step took 296). And marginals() with the sentences that take it: about 100 calls
    a call besides the loop (220 when it recomputed the closed form)."""
    assert (_elimination_calls(24, True) - _elimination_calls(8, True)) / 16 <= 50
    assert (_elimination_calls(24, False) - _elimination_calls(8, False)) / 16 <= 25
    (short, eliminated_short), (long, eliminated_long) = _marginal_calls(8, 100.0), _marginal_calls(24, 100.0)
    assert eliminated_short > 0 and eliminated_long > 0 and (long - short) / 16 <= 50
    # one sentence of 6 words that fails the closed form (with a finite inverse) among 7 that pass it
    from test_matrix_tree_elimination import _failing_but_finite

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(8, 6, 6, dtype=torch.float64, generator=gen) * 0.1
    weights = torch.randn(8, 6, 6, dtype=torch.float64, generator=gen)
    calls = []
    for hard in (False, True):
        if hard:
            scores[0] = _failing_but_finite()
        x = scores.clone().requires_grad_(True)
        before = matrix_tree.STATS["exact_elimination"]
        with OpCounter() as ops:
            (matrix_tree.marginals(x, torch.full((8,), 6)) * weights).sum().backward()
        assert matrix_tree.STATS["exact_elimination"] - before == int(hard)
        calls.append(ops.total)
    assert calls[1] - calls[0] - 5 * 50 <= 120


@pytest.mark.parametrize("syntax, bound", [("none", 121), ("sa", 141)])
def test_the_rnn_decoder_step_calls(syntax, bound):
    """Calls per target position of a training step (forward and backward) of the RNN decoder: the state stays in
    the LSTM's layout, the embeddings are looked up once, S and M are read with one product (165 and 210 before)."""
    torch.manual_seed(0)
    cfg = ModelConfig(family="rnn", d_model=32, encoder_layers=2, decoder_layers=2, dropout=0.3,
                      share_all_embeddings=True, tie_output=True, rnn=RNNConfig(init_range=0.1, syntax=syntax))
    model = build_model(cfg, 50, 50)
    src = torch.randint(4, 50, (4, 7))
    totals = []
    for length in (6, 12):
        with OpCounter() as ops:
            model(src, src != 0, torch.randint(4, 50, (4, length))).logits.logsumexp(-1).sum().backward()
        totals.append(ops.total)
    assert (totals[1] - totals[0]) / 6 <= bound


@pytest.fixture(scope="module")
def parsed_data(tmp_path_factory) -> Path:
    """The behaviour check's synthetic corpus with gold trees, prepared (the structure rows need trees)."""
    return prepare_corpus(tmp_path_factory.mktemp("ops"))[1]


def test_a_training_step_reads_the_device_once(parsed_data):
    """The trainer reads losses and gradient norm together, once a step; the batch's token count is read on the
    host before the batch moves (the second read counted here: on a GPU it is no sync)."""
    ((_, cfg),) = grid_rows(GRID, parsed_data, ["data.max_tokens=300"], ["Transformer"])
    with row_trainer(cfg) as trainer:
        first, second = step_groups(trainer, 2)
        trainer.train_step(first)
        with OpCounter() as ops:
            stats = trainer.train_step(second)
    assert ops.reads == 2 and stats["gnorm"] > 0 and stats["loss"] > 0


def test_the_matrix_tree_rows_against_their_baselines(parsed_data, monkeypatch):
    """benchmarks/op_counts.py's table on a small dataset: structured attention costs at most 1.5 times the
    Transformer's calls a step at initialisation, and SA-NMT at most 1.5 times the RNN's even when every step
    takes the exact elimination (its arc scorer's weights scaled up; 1.81 times before)."""
    monkeypatch.setenv("STRUCTNMT_CPU_GEMM", "mkl")  # the trainer below counts nn.Linear's calls on any CPU
    names = ["Transformer", "Structured attention (Transformer, layer 1)", "SA-NMT (shared)", "RNN (NMT)"]
    rows = {name: op_counts.count_row(cfg, 2) for name, cfg in grid_rows(GRID, parsed_data, ["data.max_tokens=300"],
                                                                          names)}
    assert rows[names[1]]["ops"] <= 1.5 * rows["Transformer"]["ops"]
    table = op_counts.table(rows, "Transformer", 2)
    assert f"| {names[2]} | initial |" in table and "(RNN (NMT))" in table
    ((_, cfg),) = grid_rows(GRID, parsed_data, ["data.max_tokens=300"], [names[2]])
    with row_trainer(cfg) as trainer:
        with torch.no_grad():
            trainer.model.w_q.weight.mul_(100.0)
            trainer.model.w_k.weight.mul_(100.0)
        first, *rest = step_groups(trainer, 3)
        trainer.train_step(first)
        before = matrix_tree.STATS["exact_elimination"]
        with OpCounter() as ops:
            for group in rest:
                trainer.train_step(group)
        eliminated = matrix_tree.STATS["exact_elimination"] - before
    assert eliminated > 0
    assert ops.total / 2 <= 1.5 * rows["RNN (NMT)"]["ops"]


def test_the_benchmark_counts_the_linear_layers_as_a_gpu_runs_them_whatever_the_cpus_library(parsed_data,
                                                                                              monkeypatch):
    ((_, cfg),) = grid_rows(GRID, parsed_data, ["data.max_tokens=300"], ["Transformer"])
    counts = {}
    for choice in ("mkl", "onednn"):
        monkeypatch.setenv("STRUCTNMT_CPU_GEMM", choice)
        counts[choice] = op_counts.count_row(copy.deepcopy(cfg), 1)["ops"]
    assert counts["onednn"] == counts["mkl"] > 0


def test_a_phrase_layout_reads_the_device_once():
    """MG-SA's layout needs its number of phrases and its longest phrase on the host (they are shapes): one read
    for both (two before)."""
    from structnmt.nn.mgsa import PhraseLayout

    ids = torch.tensor([[0, 0, 1, 2, 2, -1], [0, 1, 1, 1, -1, -1]])
    with OpCounter() as ops:
        layout = PhraseLayout.from_ids(ids)
    assert ops.reads == 1
    assert layout.num_phrases == 3 and layout.max_length == 3
    assert layout.length.tolist() == [[2, 1, 2], [1, 3, 0]]
