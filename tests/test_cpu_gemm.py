"""structnmt.machine.cpu_gemm: the linear layers on oneDNN instead of MKL (the choice made on AMD CPUs)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_sources
from torch import nn

from structnmt.config import Config, DecodeConfig, ModelConfig
from structnmt.decode.translate import decoding_model, is_int8, translate_ids
from structnmt.errors import UserError
from structnmt.machine import cpu_gemm
from structnmt.machine.cpu_gemm import (
    OneDNNLinear,
    backend,
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


@pytest.mark.parametrize("value, vendor, chosen", [("", "AuthenticAMD", "onednn"), ("auto", "GenuineIntel", "mkl"),
                                                   ("mkl", "AuthenticAMD", "mkl"), ("onednn", "GenuineIntel", "onednn"),
                                                   ("auto", None, "mkl")])
def test_the_backend_follows_the_variable_and_the_cpu(monkeypatch, value, vendor, chosen):
    monkeypatch.setenv(cpu_gemm.ENV, value)
    monkeypatch.setattr(cpu_gemm, "cpu_vendor", lambda: vendor)
    assert backend() == chosen
    assert uses_onednn(with_cpu_gemm(_model(), in_place=False)) == (chosen == "onednn")


def test_an_unknown_backend_is_one_sentence(monkeypatch):
    monkeypatch.setenv(cpu_gemm.ENV, "openblas")
    with pytest.raises(UserError, match="STRUCTNMT_CPU_GEMM='openblas': give auto .*, onednn or mkl"):
        backend()


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
    assert summary.endswith("; linear layers on oneDNN (STRUCTNMT_CPU_GEMM).") == (choice == "onednn")
    assert summary.endswith("process(es).") == (choice == "mkl")
    assert t.state.num_updates == 2


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
