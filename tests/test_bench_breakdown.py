"""benchmarks/profile_step.py (``bench_fairseq.py --breakdown``): the grouping of profiler rows into categories,
the per-update sums and the side-by-side table, from made-up rows whose table is known; and the profiled window
of a made-up step (which updates it holds, not how long they took)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ps = load("profile_step")


@pytest.mark.parametrize(("name", "context", "expected"), [
    ("aten::addmm", "", "linear GEMMs"),
    ("mkldnn::_linear_pointwise", "", "linear GEMMs"),
    ("aten::mm", "MmBackward0", "linear GEMMs"),
    ("_OneDNNLinearFn", "", "linear GEMMs"),  # a custom autograd Function's forward, by its class name
    ("aten::sum", "_OneDNNLinearFnBackward", "linear GEMMs"),  # the bias gradient inside the layer's backward
    ("aten::bmm", "", "attention (bmm, SDPA)"),
    ("aten::baddbmm", "", "attention (bmm, SDPA)"),
    ("aten::mm", "BmmBackward0", "linear GEMMs"),  # the operator's own name first
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "", "attention (bmm, SDPA)"),
    ("aten::_softmax", "", "softmax"),
    ("aten::_softmax_backward_data", "SoftmaxBackward0", "softmax"),
    ("aten::native_layer_norm_backward", "", "layer norm"),
    ("aten::uniform_", "aten::native_dropout", "dropout"),  # no category of its own: its context's
    ("aten::ge_", "breakdown::dropout", "dropout"),
    ("aten::native_dropout_backward", "", "dropout"),
    ("aten::_log_softmax", "", "loss"),
    ("aten::mul", "LogSoftmaxBackward0", "loss"),  # log-softmax's backward is the loss's, not the softmax's
    ("aten::exp_", "autograd::engine::evaluate_function: _LabelSmoothedCEBackward", "loss"),
    ("aten::nll_loss_forward", "", "loss"),
    ("aten::_foreach_addcdiv_", "", "optimizer (Adam)"),
    ("aten::_fused_adam_", "", "optimizer (Adam)"),
    ("aten::addcdiv_", "Optimizer.step#Adam.step", "optimizer (Adam)"),  # fairseq's Adam: one parameter at a time
    ("aten::empty", "Optimizer.step#Adam.step", "optimizer (Adam)"),  # an absorbing scope beats allocation
    ("Optimizer.zero_grad#Adam.zero_grad", "", "optimizer (Adam)"),
    ("aten::mul_", "breakdown::grad scale/norm", "grad scale/norm"),
    ("aten::empty", "mkldnn::_linear_pointwise", "allocation, copies"),  # a plain context does not
    ("aten::copy_", "aten::clone", "allocation, copies"),
    ("aten::mul", "", "other"),
    ("aten::add_", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "other"),
    ("aten::embedding_dense_backward", "EmbeddingBackward0", "other"),
])
def test_category_of_an_operator_in_its_context(name, context, expected):
    assert ps.category(name, context) == expected
    assert expected in ps.CATEGORIES


def test_the_context_is_the_outermost_absorbing_scope_else_the_nearest_named_one():
    # the names of the enclosing events, innermost first (uniform_ inside bernoulli_ inside native_dropout)
    assert ps.event_context(["aten::bernoulli_", "aten::native_dropout", "aten::dropout"]) == "aten::bernoulli_"
    assert ps.event_context(["aten::expand", "aten::native_dropout"]) == "aten::native_dropout"
    assert ps.event_context(["aten::add_", "aten::_foreach_add_", "Optimizer.step#Adam.step"]) == \
        "Optimizer.step#Adam.step"
    assert ps.event_context(["aten::empty", "aten::bmm", "breakdown::loss"]) == "breakdown::loss"
    assert ps.event_context(["aten::view", "aten::reshape"]) == ""
    assert ps.event_context([]) == ""


def event(name, self_us, parent=None):
    return SimpleNamespace(name=name, self_cpu_time_total=self_us, cpu_parent=parent)


def test_scoped_rows_sum_self_time_by_operator_and_context():
    adam = event("Optimizer.step#Adam.step", 5.0)
    drop = event("aten::native_dropout", 1.0)
    events = [adam, event("aten::mul_", 2.0, adam), event("aten::mul_", 3.0, adam), drop,
              event("aten::uniform_", 7.0, drop), event("aten::mul_", 11.0)]
    rows = ps.scoped_rows(events)
    assert rows[0] == {"name": "aten::mul_", "context": "", "calls": 1, "self_us": 11.0}  # largest first
    assert {"name": "aten::mul_", "context": "Optimizer.step#Adam.step", "calls": 2, "self_us": 5.0} in rows
    assert {"name": "aten::uniform_", "context": "aten::native_dropout", "calls": 1, "self_us": 7.0} in rows
    assert sum(r["calls"] for r in rows) == len(events)


def test_a_backward_node_is_inside_the_scope_of_the_forward_operator_that_made_it():
    """fairseq's loss is a plain function: its gather's backward (zeros of the vocabulary's size, a scatter) is
    the loss's; a node made outside any scope keeps its own category."""
    loss = event("breakdown::loss", 1.0)
    gather = event("aten::gather", 2.0, loss)
    gather.sequence_nr, gather.thread = 7, 1
    mm = event("aten::mm", 3.0)
    mm.sequence_nr, mm.thread = 8, 1
    nodes = []
    for seq, node_name, child_name in ((7, "GatherBackward0", "aten::new_zeros"), (8, "MmBackward0", "aten::mm")):
        node = event(f"autograd::engine::evaluate_function: {node_name}", 0.5)
        node.sequence_nr, node.fwd_thread = seq, 1
        nodes += [node, event(child_name, 4.0, event(node_name, 0.1, node))]
    rows = {(r["name"], r["context"]): r for r in ps.scoped_rows([loss, gather, mm, *nodes])}
    assert ps.category("aten::new_zeros", rows[("aten::new_zeros", "breakdown::loss")]["context"]) == "loss"
    assert ("aten::mm", "MmBackward0") in rows
    assert ps.category("aten::mm", "MmBackward0") == "linear GEMMs"


def profile_of(rows, count=2, window_s=0.2, tokens=8000.0, after=(0.09, 0.08, 0.11)):
    return {"count": count, "window_s": window_s, "tokens": tokens, "periods_after_s": list(after),
            "rows": [{"name": n, "context": c, "calls": 1, "self_us": us} for n, c, us in rows]}


FAIRSEQ = profile_of([("aten::addmm", "", 60_000.0), ("aten::mm", "MmBackward0", 40_000.0),
                      ("aten::bmm", "", 20_000.0), ("aten::_softmax", "", 10_000.0),
                      ("aten::addcdiv_", "Optimizer.step#Adam.step", 30_000.0), ("aten::add", "", 6_000.0),
                      ("aten::relu", "", 4_000.0)])
STRUCTNMT = profile_of([("mkldnn::_linear_pointwise", "", 50_000.0), ("aten::mm", "_OneDNNLinearFnBackward", 30_000.0),
                        ("aten::_scaled_dot_product_flash_attention_for_cpu", "", 16_000.0),
                        ("aten::_fused_adam_", "Optimizer.step#Adam.step", 8_000.0),
                        ("aten::mul", "", 2_000.0)], window_s=0.16, tokens=7600.0, after=(0.07, 0.075))


def test_an_operator_is_named_with_its_context_where_that_tells_more():
    assert ps.op_label("aten::copy_", "aten::addmm") == "aten::copy_ in aten::addmm"
    assert ps.op_label("aten::mul", "breakdown::loss") == "aten::mul in breakdown::loss"
    assert ps.op_label("aten::mm", "autograd::engine::evaluate_function: MmBackward0") == "aten::mm (backward)"
    assert ps.op_label("aten::addmm", "aten::linear") == "aten::addmm"
    assert ps.op_label("aten::_log_softmax", "breakdown::loss") == "aten::_log_softmax"
    assert ps.op_label("aten::mul", "") == "aten::mul"


def test_python_in_a_toolkits_own_scope_is_outside_operators():
    """fairseq's record_function("forward") holds Python time as its self time; the operators inside it keep
    their categories."""
    assert ps.category("forward") == ps.OUTSIDE
    assert ps.category("clip-grads") == ps.OUTSIDE
    assert ps.category("aten::mul", "") == "other"
    assert ps.category("MulBackward0") == "other"  # an autograd node: the engine's time, not Python
    assert ps.category("_SomeFunction") == "other"  # a custom autograd Function's forward
    b = ps.breakdown(profile_of([("aten::addmm", "", 100_000.0), ("forward", "", 40_000.0)], count=1, window_s=0.2))
    assert b["ms"]["linear GEMMs"] == pytest.approx(100.0)
    assert b["ms"][ps.OUTSIDE] == pytest.approx(100.0)  # the wall time less the operators'
    assert all(cat != ps.OUTSIDE for _, cat in b["ops"])


def test_breakdown_per_update_and_the_time_outside_operators():
    b = ps.breakdown(FAIRSEQ)
    assert b["ms"]["linear GEMMs"] == pytest.approx(50.0)  # (60 + 40) ms over 2 updates
    assert b["ms"]["attention (bmm, SDPA)"] == pytest.approx(10.0)
    assert b["ms"]["optimizer (Adam)"] == pytest.approx(15.0)
    assert b["ms"]["other"] == pytest.approx(5.0)
    assert b["wall_ms"] == pytest.approx(100.0)
    assert b["ms"][ps.OUTSIDE] == pytest.approx(100.0 - 85.0)
    assert b["free_ms"] == pytest.approx(90.0)  # the median period after the window, without the profiler
    assert b["tokens"] == pytest.approx(4000.0)
    assert list(b["ops"])[:2] == [("aten::addmm", "linear GEMMs"), ("aten::mm (backward)", "linear GEMMs")]


def test_the_side_by_side_table():
    lines = ps.table_lines(ps.breakdown(FAIRSEQ), ps.breakdown(STRUCTNMT), top=3)
    assert lines[0] == ("| category | fairseq ms/update | share | structnmt ms/update | share | "
                        "structnmt - fairseq ms/update |")
    assert lines[1] == "|---|---:|---:|---:|---:|---:|"
    body = lines[2:2 + len(ps.CATEGORIES) + 1]
    assert [row.split(" | ")[0] for row in body] == [f"| {c}" for c in ps.CATEGORIES] + \
        [f"| {ps.OUTSIDE} (Python, data, logging, profiler)"]
    assert "| linear GEMMs | 50.0 | 50.0% | 40.0 | 50.0% | -10.0 |" in lines
    assert "| softmax | 5.0 | 5.0% | 0.0 | 0.0% | -5.0 |" in lines
    assert "| other | 5.0 | 5.0% | 1.0 | 1.2% | -4.0 |" in lines
    assert f"| {ps.OUTSIDE} (Python, data, logging, profiler) | 15.0 | 15.0% | 27.0 | 33.8% | +12.0 |" in lines
    assert "| **the update, wall, under the profiler** | 100.0 | 100% | 80.0 | 100% | -20.0 |" in lines
    assert "| the update without the profiler (median, after the window) | 90.0 | | 72.5 | | -17.5 |" in lines
    assert "| target tokens per update | 4000 | | 3800 | | -200 |" in lines
    assert "| wall ms per 1,000 target tokens, under the profiler | 25.0 | | 21.1 | | -3.9 |" in lines
    assert '"other", largest (ms/update), fairseq: aten::add 3.0, aten::relu 2.0.' in lines
    assert '"other", largest (ms/update), structnmt: aten::mul 1.0.' in lines
    ranked = lines[lines.index("|---:|---|---:|---|---:|") + 1:]
    assert ranked == ["| 1 | aten::addmm (linear GEMMs) | 30.0 | mkldnn::_linear_pointwise (linear GEMMs) | 25.0 |",
                      "| 2 | aten::mm (backward) (linear GEMMs) | 20.0 | aten::mm (backward) (linear GEMMs) | 15.0 |",
                      "| 3 | aten::addcdiv_ in Optimizer.step#Adam.step (optimizer (Adam)) | 15.0 | "
                      "aten::_scaled_dot_product_flash_attention_for_cpu (attention (bmm, SDPA)) | 8.0 |"]


def test_the_window_profiles_exactly_its_updates():
    """Five updates of a made-up step, the 2nd and 3rd profiled: the loss scope and its operators are counted
    twice, the target tokens of those two updates summed, one period measured after the window."""

    def step(trainer, samples):
        x = torch.ones(4, 4)
        ps._scoped("loss", torch.log_softmax)(x @ x, -1)
        return {"tokens": float(samples)}

    window = ps.StepWindow(2, 2, ps._tokens("structnmt"))
    wrapped = window.wrap(step)
    for tokens in (10, 20, 30, 40, 50):
        wrapped(None, tokens)
    out = window.result("structnmt")
    assert (out["first"], out["count"], out["updates"], out["tokens"]) == (2, 2, 5, 50.0)
    assert len(out["periods_after_s"]) == 1
    rows = {(r["name"], r["context"]): r for r in out["rows"]}
    assert rows[("aten::mm", "")]["calls"] == 2
    assert rows[("breakdown::loss", "")]["calls"] == 2
    assert ps.category("aten::_log_softmax", rows[("aten::_log_softmax", "breakdown::loss")]["context"]) == "loss"


def test_a_run_that_ends_before_the_window_does_is_refused():
    window = ps.StepWindow(3, 5, ps._tokens("structnmt"))
    wrapped = window.wrap(lambda trainer: None)
    for _ in range(4):
        wrapped(None)
    with pytest.raises(SystemExit, match="stopped after 4 updates, before update 8 .* at least 8 updates"):
        window.result("structnmt")


def test_target_tokens_of_an_update():
    assert ps._tokens("fairseq")(([{"ntokens": 5}, None, {}, {"ntokens": 7}],), None) == 12
    assert ps._tokens("structnmt")((), {"tokens": 9.0}) == 9.0
    assert ps._tokens("structnmt")((), None) == 0.0  # a skipped (non-finite) update


def test_bench_fairseq_refuses_a_window_beyond_the_updates():
    bench = load("bench_fairseq")
    args = argparse.Namespace(updates=30, profile_first=21, profile_count=20)
    with pytest.raises(SystemExit, match=r"updates 21-40\) must lie within --updates 30.*--updates 51 or more"):
        bench.breakdown_lines(Path("/nonexistent"), Path("/nonexistent"), Path("/nonexistent"), args, {})
    parsed = bench._build_parser().parse_args(["--breakdown"])
    assert (parsed.breakdown, parsed.profile_first, parsed.profile_count) == (True, 21, 20)
