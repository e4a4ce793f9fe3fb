"""structnmt.machine.cpu_gemm: the linear layers on oneDNN instead of MKL (the choice made on AMD CPUs)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from conftest import random_sources
from torch import nn

from structnmt.config import Config, DecodeConfig, ModelConfig
from structnmt.decode.translate import decoding_model, is_int8, translate_ids
from structnmt.machine import cpu_gemm, gemm_choice
from structnmt.machine.cpu_gemm import (
    OneDNNLinear,
    choose,
    to_onednn,
    to_plain,
    uses_onednn,
    with_cpu_gemm,
)
from structnmt.models import build_model


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      share_all_embeddings=True)
    return build_model(cfg, 40, 40).eval()


@pytest.mark.parametrize("shape, bias, transposed", [((37, 24), True, False), ((3, 11, 24), False, False),
                                                     ((5, 7, 24), True, True)])
def test_the_onednn_layer_computes_what_nn_linear_does_with_its_gradients(shape, bias, transposed):
    torch.manual_seed(0)
    plain = nn.Linear(24, 48, bias=bias)
    fast = to_onednn(nn.Sequential(plain), in_place=False)[0]
    assert type(fast) is OneDNNLinear and fast.weight is plain.weight
    x = torch.randn(*shape)
    if transposed:  # a strided input (as after a transpose)
        x = torch.randn(shape[1], shape[0], shape[2]).transpose(0, 1)
    outs, grads = [], []
    for layer in (plain, fast):
        xi = x.detach().clone().requires_grad_(True)
        y = layer(xi)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append(y.detach())
        grads.append([xi.grad, *(p.grad.clone() for p in layer.parameters())])
        layer.zero_grad()
    assert outs[1].shape == (*shape[:-1], 48)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("grads", [(True, True, True), (True, False, False), (False, True, False),
                                   (False, False, True), (False, True, True)])
def test_every_gradient_asked_for_comes_from_the_kernels_it_should(monkeypatch, grads):
    """Forward and input gradient on oneDNN (two kernel calls when x needs its gradient, one otherwise), the
    weight's and bias's gradients as nn.Linear's, whichever of x, weight and bias require one."""
    calls = []
    real = cpu_gemm._onednn
    monkeypatch.setattr(cpu_gemm, "_onednn", lambda *a: calls.append(a[0].shape) or real(*a))
    torch.manual_seed(1)
    plain = nn.Linear(6, 5)
    fast = to_onednn(nn.Sequential(plain), in_place=False)[0]
    x = torch.randn(4, 3, 6)
    results = []
    for layer in (plain, fast):
        xi = x.clone().requires_grad_(grads[0])
        layer.weight.requires_grad_(grads[1])
        layer.bias.requires_grad_(grads[2])
        layer(xi).pow(2).sum().backward()
        results.append([t.grad.clone() if t.grad is not None else None for t in (xi, layer.weight, layer.bias)])
        layer.zero_grad(set_to_none=True)
    assert len(calls) == 1 + grads[0]
    for got, want, asked in zip(results[1], results[0], grads, strict=True):
        assert (got is None) == (not asked)
        if asked:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_other_dtypes_and_autocast_take_nn_linear(monkeypatch):
    layer = to_onednn(nn.Sequential(nn.Linear(8, 4)), in_place=True)[0]
    calls = []
    monkeypatch.setattr(cpu_gemm, "_onednn", lambda *a: calls.append(1) or torch.zeros(a[0].shape[0], 4))
    layer(torch.randn(2, 8))
    assert calls == [1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(torch.randn(2, 8))
    layer.to(torch.bfloat16)(torch.randn(2, 8, dtype=torch.bfloat16))
    assert calls == [1]


def test_a_swapped_model_shares_its_parameters_ties_and_state_dict():
    model = _model()
    view = to_onednn(model, in_place=False)
    assert not uses_onednn(model) and uses_onednn(view)
    assert all(a is b for a, b in zip(model.parameters(), view.parameters(), strict=True))
    assert view.output_proj.weight is view.tgt_embed.weight  # the tied output projection stays tied
    assert list(view.state_dict()) == list(model.state_dict())
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert sum(type(m) is OneDNNLinear for m in view.modules()) == n_linear > 10
    to_plain(view)
    assert not uses_onednn(view) and sum(type(m) is nn.Linear for m in view.modules()) == n_linear


@pytest.mark.parametrize("value, chosen", [("mkl", "mkl"), ("onednn", "onednn"), (" MKL ", "mkl")])
def test_a_fixed_library_is_taken_as_given_and_measures_nothing(monkeypatch, value, chosen):
    monkeypatch.setenv(cpu_gemm.ENV, value)
    monkeypatch.setattr(cpu_gemm, "measured_choice", lambda *a, **k: pytest.fail("measured under a fixed library"))
    choice = choose(_model())
    assert choice.library == chosen and f"STRUCTNMT_CPU_GEMM={chosen}" in choice.why
    assert uses_onednn(with_cpu_gemm(_model(), in_place=False)) == (chosen == "onednn")


def _per_shape(model, mkl: float, onednn: float, big: tuple[float, float] | None = None):
    """A fake measurement: every shape mkl/onednn seconds, the output projection (out 40) ``big`` if given."""
    def measure(shapes, rows, purpose, onednn_fn):
        return {s: ({"mkl": big[0], "onednn": big[1]} if big and s[1] == 40 else {"mkl": mkl, "onednn": onednn})
                for s in shapes}
    return measure


@pytest.mark.parametrize("mkl, onednn, chosen", [(2.0, 1.0, "onednn"), (1.0, 2.0, "mkl"), (1.0, 0.99, "mkl"),
                                                 (1.0, 0.96, "onednn")])
def test_auto_keeps_the_library_the_measurement_finds_faster(monkeypatch, tmp_path, mkl, onednn, chosen):
    """The decision from measured seconds: oneDNN only when it saves at least MARGIN (3 %) of MKL's time."""
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(tmp_path))
    seen = []
    model = _model()

    def measure(shapes, rows, purpose, onednn_fn):
        seen.append((sum(shapes.values()), rows, purpose))
        return _per_shape(model, mkl, onednn)(shapes, rows, purpose, onednn_fn)

    choice = gemm_choice.measured_choice(model, "decode", 640, cpu_gemm._onednn, measure_fn=measure)
    assert choice.library == chosen and choice.onednn_shapes is None
    assert seen == [(sum(isinstance(m, nn.Linear) for m in model.modules()), 640, "decode")]
    assert choice.why.startswith("oneDNN:" if chosen == "onednn" else "MKL:") and "measured now" in choice.why
    assert uses_onednn(with_cpu_gemm(model, in_place=False, choice=choice)) == (chosen == "onednn")


def test_each_shape_goes_to_its_faster_library(monkeypatch, tmp_path):
    """oneDNN faster only for the output projection (40 pieces out): that layer on oneDNN, the others on MKL."""
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(tmp_path))
    model = _model()
    choice = gemm_choice.measured_choice(model, "decode", 640, cpu_gemm._onednn,
                                         measure_fn=_per_shape(model, 1.0, 2.0, big=(3.0, 1.0)))
    assert choice.library == "mixed" and choice.onednn_shapes == {(32, 40)}
    assert "oneDNN for 32->40 (in->out), MKL for the other shapes" in choice.why
    assert dict(choice.seconds)["chosen"] < min(dict(choice.seconds)["mkl"], dict(choice.seconds)["onednn"])
    view = with_cpu_gemm(model, in_place=False, choice=choice)
    on = {(m.in_features, m.out_features) for m in view.modules() if type(m) is OneDNNLinear}
    assert on == {(32, 40)} and any(type(m) is nn.Linear for m in view.modules())
    src, mask = random_sources(2, n=4, S=7)
    sources = [src[i, : int(mask[i].sum())].tolist() for i in range(4)]
    dcfg = DecodeConfig(beam=3, batch_size=2, max_len_a=1.0, max_len_b=4)
    mixed = translate_ids(view, sources, dcfg, device=torch.device("cpu"), max_positions=64)
    monkeypatch.setenv(cpu_gemm.ENV, "mkl")
    plain = translate_ids(model, sources, dcfg, device=torch.device("cpu"), max_positions=64)
    for a, b in zip(mixed, plain, strict=True):  # the same translations, scores within float32 rounding
        assert a[0].tokens == b[0].tokens and abs(a[0].score - b[0].score) < 1e-4


def test_the_measurement_is_cached_per_key_and_never_rewritten(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(tmp_path))
    model = _model()
    results = iter([_per_shape(model, 2.0, 1.0), _per_shape(model, 1.0, 2.0), _per_shape(model, 5.0, 1.0)])
    calls = []

    def measure(shapes, rows, purpose, onednn_fn):
        calls.append(purpose)
        return next(results)(shapes, rows, purpose, onednn_fn)

    first = gemm_choice.measured_choice(model, "train", 4096, cpu_gemm._onednn, measure_fn=measure)
    again = gemm_choice.measured_choice(model, "train", 4096, cpu_gemm._onednn, measure_fn=measure)
    assert first.library == again.library == "onednn" and calls == ["train"]  # read back, not re-measured
    assert first.seconds == again.seconds and "measured before on this machine" in again.why
    other = gemm_choice.measured_choice(model, "decode", 640, cpu_gemm._onednn, measure_fn=measure)
    assert other.library == "mkl" and calls == ["train", "decode"]  # another purpose: another key
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # a new library version: measured again
    newer = gemm_choice.measured_choice(model, "train", 4096, cpu_gemm._onednn, measure_fn=measure)
    n_shapes = len(gemm_choice.linear_shapes(model))
    assert calls == ["train", "decode", "train"] and dict(newer.seconds)["mkl"] == 5.0 * n_shapes
    shapes = gemm_choice.linear_shapes(model)
    key = gemm_choice.machine_key("train", 4096, shapes)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # an instruction set held back: another key
    assert gemm_choice.machine_key("train", 4096, shapes) != key
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)  # another thread count: another key
    assert gemm_choice.machine_key("train", 4096, shapes) != key


def test_decoding_is_measured_through_the_layers_themselves(monkeypatch, tmp_path):
    """choose() for decoding times OneDNNLinear's forward (its own cost per call included), not the bare kernel."""
    monkeypatch.setenv(cpu_gemm.ENV, "auto")
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(tmp_path))
    layers, kernel = [], []
    real_forward, real_kernel = OneDNNLinear.forward, cpu_gemm._onednn
    monkeypatch.setattr(OneDNNLinear, "forward", lambda self, x: layers.append(x.shape) or real_forward(self, x))
    monkeypatch.setattr(gemm_choice, "ROUNDS", 1)
    choice = choose(_model(), "decode", 16)
    assert layers and all(shape[0] in (16, 8) for shape in layers)  # the ladder 16, 8 through the layer
    assert choice.library in ("mkl", "onednn", "mixed") and "measured now (decode" in choice.why
    monkeypatch.setattr(cpu_gemm, "_onednn", lambda *a: kernel.append(1) or real_kernel(*a))
    layers.clear()
    choose(_model(), "train", 8)  # training: the kernel's products (forward and input gradient)
    assert kernel and not layers


def test_a_cache_that_cannot_be_written_costs_a_measurement_not_the_run(monkeypatch, tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(blocked))
    model = _model()
    choice = gemm_choice.measured_choice(model, "train", 64, cpu_gemm._onednn,
                                         measure_fn=_per_shape(model, 1.0, 3.0))
    assert choice.library == "mkl" and "not kept" in choice.why and str(blocked) in choice.why


def test_the_real_measurement_times_both_libraries_on_the_models_shapes():
    """measure() with a counting clock: every distinct shape timed at every row count of the ladder, ROUNDS
    times per library, weighted by how many layers have it (no wall-clock reading is asserted)."""
    ticks = iter(range(10**6))
    shapes = Counter({(8, 16): 3, (16, 8): 1})
    clock = lambda: float(next(ticks))  # noqa: E731
    seconds = gemm_choice.measure(shapes, 4, "train", cpu_gemm._onednn, timer=clock, rounds=3)
    # each timed call reads the clock twice, consecutive ticks: one "second" per call, times the layer count
    assert seconds == {(8, 16): {"mkl": 3.0, "onednn": 3.0}, (16, 8): {"mkl": 1.0, "onednn": 1.0}}
    assert gemm_choice.row_ladder(640, "decode") == [640, 320, 160, 80, 40, 20, 10]
    assert gemm_choice.row_ladder(640, "train") == [640]
    seconds = gemm_choice.measure(shapes, 40, "decode", cpu_gemm._onednn, timer=clock, rounds=3)
    assert seconds[(8, 16)] == {"mkl": 3.0 * 3, "onednn": 3.0 * 3}  # rows 40, 20, 10: three counts


def test_decoding_on_onednn_translates_as_on_mkl_and_leaves_the_model_alone(monkeypatch):
    model = _model(3)
    src, mask = random_sources(2, n=6, S=9)
    sources = [src[i, : int(mask[i].sum())].tolist() for i in range(6)]
    dcfg = DecodeConfig(beam=4, batch_size=3, max_len_a=1.0, max_len_b=4)
    out = {}
    for choice in ("mkl", "onednn"):
        monkeypatch.setenv(cpu_gemm.ENV, choice)
        assert uses_onednn(decoding_model(model, "float32")) == (choice == "onednn")
        out[choice] = translate_ids(model, sources, dcfg, device=torch.device("cpu"), max_positions=64)
    assert not uses_onednn(model)
    for a, b in zip(out["mkl"], out["onednn"], strict=True):
        assert a[0].tokens == b[0].tokens and abs(a[0].score - b[0].score) < 1e-4


def test_an_int8_copy_of_a_onednn_model_quantizes_every_linear_layer(monkeypatch):
    monkeypatch.setenv(cpu_gemm.ENV, "onednn")
    model = to_onednn(_model(), in_place=True)
    low = decoding_model(model, "int8")
    assert is_int8(low) and not uses_onednn(low)
    assert not any(isinstance(m, nn.Linear) for m in low.modules())  # every one quantized
    assert uses_onednn(model)  # the caller's model is not changed


@pytest.mark.parametrize("choice", ["onednn", "mkl"])
def test_the_trainer_puts_its_cpu_model_on_the_chosen_library(monkeypatch, tmp_path, synth_data, choice):
    import structnmt.train.trainer as trainer

    monkeypatch.setenv(cpu_gemm.ENV, choice)
    cfg = Config()
    cfg.data.path = str(synth_data)
    cfg.model = ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1)
    cfg.train.max_updates = 2
    cfg.train.save_dir = str(tmp_path / "run")
    cfg.train.validate_interval_updates = 2
    lines = []
    t = trainer.Trainer(cfg, log=lines.append)
    assert uses_onednn(t.model) == (choice == "onednn")
    t.train()
    (summary,) = [line for line in lines if line.startswith("model: ")]
    name = "oneDNN" if choice == "onednn" else "MKL"
    assert summary.endswith(f"; linear layers on {name}: STRUCTNMT_CPU_GEMM={choice}.")
    assert t.state.num_updates == 2


def test_the_training_log_says_what_auto_measured_and_chose(monkeypatch, tmp_path, synth_data):
    import structnmt.train.trainer as trainer

    monkeypatch.setenv(cpu_gemm.ENV, "auto")
    monkeypatch.setenv("STRUCTNMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gemm_choice, "measure", lambda shapes, rows, purpose, fn, **kw: {
        s: {"mkl": 0.004 / len(shapes), "onednn": 0.002 / len(shapes)} for s in shapes})
    cfg = Config()
    cfg.data.path = str(synth_data)
    cfg.model = ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1)
    cfg.train.max_updates = 1
    cfg.train.save_dir = str(tmp_path / "run")
    lines = []
    t = trainer.Trainer(cfg, log=lines.append)
    assert uses_onednn(t.model)
    t.train()
    (summary,) = [line for line in lines if line.startswith("model: ")]
    assert "linear layers on oneDNN: the model's linear products took 4.00 ms with MKL alone, 2.00 ms with " \
           "oneDNN alone, 2.00 ms as chosen, measured now" in summary and str(tmp_path / "cache") in summary


def test_the_gemm_benchmark_times_every_product_and_checks_they_agree(monkeypatch, tmp_path, capsys):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_gemm

    monkeypatch.setattr(bench_gemm, "SHAPES", [("small", 16, 8, 12)])
    assert bench_gemm.main(["--threads", "1", "--rounds", "1", "--calls", "2", "--out", str(tmp_path / "t.md")]) == 0
    rows = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| small")]
    assert [r.split("|")[1].strip() for r in rows] == ["small: forward", "small: input gradient",
                                                      "small: weight gradient"]
    assert all(float(r.split("|")[-2]) < 1e-5 for r in rows)  # the two libraries agree within float32 rounding
