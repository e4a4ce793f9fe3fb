"""The decoding fast paths: few-query attention without SDPA on the CPU, bfloat16 and int8 decoding."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_sources
from torch.testing import assert_close

from structnmt.config import (
    AttentionPlan,
    AttentionSpec,
    ConfigError,
    DecodeConfig,
    ModelConfig,
    low_precision_refusal,
    validate_decode,
)
from structnmt.data.vocab import EOS
from structnmt.decode.beam import beam_search
from structnmt.decode.translate import is_int8, model_for_dtype, translate_ids
from structnmt.errors import UserError
from structnmt.models import build_model
from structnmt.nn.attention import _FEW_QUERIES, scaled_attention


def _qkv(B: int, H: int, T: int, S: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g) for n in (T, S, S)]


@pytest.mark.parametrize("case", ["plain", "key_mask_dead_row", "bias", "causal_square", "causal_offset", "mask",
                                  "mask_2d_with_key_mask_and_bias", "bias_minus_inf_row"])
@pytest.mark.parametrize("T", [1, 5, _FEW_QUERIES])
def test_few_query_path_without_gradients_equals_sdpa(case, T):
    """Decoding (no gradients, CPU, <= _FEW_QUERIES queries) takes the explicit path; it must give what the
    SDPA path gives with gradients on (the training path), dead rows included."""
    B, H, d = 3, 2, 8
    S = T if case == "causal_square" else T + 6
    q, k, v = _qkv(B, H, T, S, d)
    kw: dict = {}
    if case == "key_mask_dead_row":
        km = torch.ones(B, S, dtype=torch.bool)
        km[1, 3:] = False
        km[2] = False  # a sentence without any key: zeros, not NaN
        kw["key_mask"] = km
    elif case == "bias":
        kw["bias"] = torch.randn(B, H, T, S)
    elif case == "causal_square":
        kw["causal"] = True
    elif case == "causal_offset":
        kw.update(causal=True, query_offset=S - T)
    elif case == "mask":
        kw["mask"] = torch.rand(B, 1, T, S, generator=torch.Generator().manual_seed(1)) > 0.4
    elif case == "mask_2d_with_key_mask_and_bias":
        kw["mask"] = torch.rand(T, S, generator=torch.Generator().manual_seed(2)) > 0.3
        kw["key_mask"] = torch.arange(S)[None, :] < torch.tensor([[S], [S - 2], [3]])
        kw["bias"] = torch.randn(B, 1, T, S)
    elif case == "bias_minus_inf_row":  # every key of one query forbidden by the bias: zeros, as from SDPA
        bias = torch.randn(B, H, T, S)
        bias[1, :, 0] = float("-inf")
        kw["bias"] = bias
    with torch.enable_grad():
        ref, _ = scaled_attention(q, k, v, **kw)
    with torch.no_grad():
        fast, w = scaled_attention(q, k, v, **kw)
    assert w is None
    assert torch.isfinite(fast).all()
    assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    if case == "key_mask_dead_row":
        assert torch.equal(fast[2], torch.zeros_like(fast[2]))
    if case == "bias_minus_inf_row":
        assert torch.equal(fast[1, :, 0], torch.zeros_like(fast[1, :, 0]))


def test_few_query_path_in_bfloat16_is_as_exact_as_sdpa():
    """A bfloat16 model's decoding steps: the explicit path's scores are float32, so it is not
    less exact than SDPA (measured against float64 on the same bfloat16 inputs)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 4, n, 64, generator=g).mul(3).bfloat16() for n in (5, 30, 30))
    km = torch.ones(4, 30, dtype=torch.bool)
    km[1, 20:] = False
    ref, _ = scaled_attention(q.double(), k.double(), v.double(), key_mask=km)
    with torch.enable_grad():
        sdpa, _ = scaled_attention(q, k, v, key_mask=km)
    with torch.no_grad():
        fast, _ = scaled_attention(q, k, v, key_mask=km)
    assert fast.dtype == torch.bfloat16
    err_fast = (fast.double() - ref).abs().max().item()
    err_sdpa = (sdpa.double() - ref).abs().max().item()
    assert err_fast <= 2 * err_sdpa + 1e-3, (err_fast, err_sdpa)


@pytest.mark.parametrize("T, grad, dropout, takes_sdpa", [
    (1, False, 0.0, False), (_FEW_QUERIES, False, 0.0, False),  # decoding steps: explicit
    (_FEW_QUERIES + 1, False, 0.0, True),  # a longer query (a validation pass): SDPA
    (1, True, 0.0, True),  # training: SDPA, whose backward is the tested one
    (1, False, 0.1, True),  # dropout on the weights: SDPA's
])
def test_which_path_few_queries_take(monkeypatch, T, grad, dropout, takes_sdpa):
    import structnmt.nn.attention as attention

    calls = []
    real = attention.F.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    q, k, v = _qkv(2, 2, T, T + 3, 8)
    with torch.set_grad_enabled(grad):
        scaled_attention(q, k, v, dropout_p=dropout)
    assert bool(calls) == takes_sdpa


def _model(seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      share_all_embeddings=True, **kw)
    return build_model(cfg, 40, 40).eval()


def _batch(seed: int = 0, n: int = 6, S: int = 9):
    return random_sources(seed, n, S)


def test_bfloat16_copy_leaves_the_model_alone_and_keeps_tied_weights():
    model = _model()
    copy = model_for_dtype(model, "bfloat16")
    assert copy is not model
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in copy.parameters())
    assert copy.output_proj.weight is copy.src_embed.weight  # shared embeddings stay shared
    assert model_for_dtype(model, "float32") is model


def _teacher_forced_logprob(model, src, mask, tokens: list[int]) -> float:
    """log p(tokens + EOS | src) under ``model`` in float32, one sentence."""
    tgt = torch.tensor([[2, *tokens]])  # BOS = 2
    with torch.no_grad():
        lp = torch.log_softmax(model(src, mask, tgt).logits.float(), dim=-1)[0]
    gold = [*tokens, EOS]
    return float(sum(lp[t, g] for t, g in enumerate(gold)))


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_low_precision_beam_scores_are_the_float32_model_scores_of_its_hypotheses(dtype):
    """Every hypothesis found in bfloat16 or int8 carries (within the format's rounding) the log-probability
    that the float32 model gives it: the normaliser, the scores and the cache work in the lower precision too."""
    model = _model(3)
    src, mask = _batch(3)
    low = model_for_dtype(model, dtype)
    hyps = beam_search(low, src, mask, beam=4, nbest=2, max_len_a=1.0, max_len_b=3)
    for i, nbest in enumerate(hyps):
        assert len(nbest) == 2
        n = int(mask[i].sum())
        for h in nbest:
            exact = _teacher_forced_logprob(model, src[i : i + 1, :n], mask[i : i + 1, :n], h.tokens)
            assert math.isfinite(h.logprob)
            assert abs(h.logprob - exact) <= 0.05 * (len(h.tokens) + 1), (h.logprob, exact)


def test_int8_copy_quantizes_every_linear_layer_and_leaves_the_model_alone():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    low = model_for_dtype(model, "int8")
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert "output_proj" in linears and len(linears) > 10
    quantized = dict(low.named_modules())
    for name in linears:  # every linear layer, the tied output projection included, computes in int8
        assert type(quantized[name]).__name__ == "Linear" and "quantized" in type(quantized[name]).__module__, name
        assert quantized[name].weight().dtype == torch.qint8
        assert quantized[name].weight().qscheme() == torch.per_channel_affine  # one scale per output row
    assert is_int8(low) and not is_int8(model)
    assert all(isinstance(m, torch.nn.Linear) for n, m in model.named_modules() if n in linears)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model_for_dtype(low, "int8") is low  # made once
    with pytest.raises(ValueError, match="int8 copy cannot be decoded in float32"):
        model_for_dtype(low, "float32")
    # the logits move by int8's rounding, not more
    src, mask = _batch()
    tgt = torch.full((src.shape[0], 1), 2)
    with torch.no_grad():
        a, b = model(src, mask, tgt).logits, low(src, mask, tgt).logits
    assert 0 < (a - b).abs().max() < 0.05 * a.abs().max()


def test_int8_is_refused_off_the_cpu():
    model = _model().to("meta")
    with pytest.raises(UserError, match="decode.dtype=int8 is for CPUs .* on meta"):
        model_for_dtype(model, "int8")


def test_a_training_with_int8_decoding_off_the_cpu_is_refused_before_training(monkeypatch, tmp_path):
    import structnmt.train.trainer as trainer
    from structnmt.config import Config

    cfg = Config()
    cfg.decode.dtype = "int8"
    cfg.train.save_dir = str(tmp_path / "run")
    monkeypatch.setattr(trainer, "get_device", lambda name: torch.device("meta"))
    with pytest.raises(ConfigError, match="decode.dtype=int8 decodes on CPUs only .* runs on meta"):
        trainer.Trainer(cfg, log=lambda *a: None)
    assert not (tmp_path / "run").exists()


def test_translate_ids_decodes_in_int8_with_one_copy(monkeypatch):
    import structnmt.decode.translate as translate

    seen = []
    real = translate.decode_batch
    monkeypatch.setattr(translate, "decode_batch", lambda m, *a, **k: seen.append(m) or real(m, *a, **k))
    model = _model(4)
    src, mask = _batch(4, n=5)
    sources = [src[i, : int(mask[i].sum())].tolist() for i in range(5)]
    d8 = DecodeConfig(beam=3, batch_size=2, max_len_a=1.0, max_len_b=3, dtype="int8")
    d32 = DecodeConfig(beam=3, batch_size=2, max_len_a=1.0, max_len_b=3)
    out8 = translate_ids(model, sources, d8, device=torch.device("cpu"), max_positions=64)
    out32 = translate_ids(model, sources, d32, device=torch.device("cpu"), max_positions=64)
    assert [is_int8(m) for m in seen] == [True] * 3 + [False] * 3 and seen[0] is seen[1] is seen[2]
    assert not is_int8(model)
    for a, b in zip(out32, out8):
        assert len(a) == len(b) == 1
        assert abs(a[0].score - b[0].score) < 0.25


def test_translate_ids_decodes_in_the_configured_dtype(monkeypatch):
    import structnmt.decode.translate as translate

    seen = []
    real = translate.decode_batch
    monkeypatch.setattr(translate, "decode_batch",
                        lambda m, *a, **k: seen.append(next(m.parameters()).dtype) or real(m, *a, **k))
    model = _model(4)
    src, mask = _batch(4, n=5)
    sources = [src[i, : int(mask[i].sum())].tolist() for i in range(5)]
    d32 = DecodeConfig(beam=3, batch_size=2, max_len_a=1.0, max_len_b=3)
    d16 = DecodeConfig(beam=3, batch_size=2, max_len_a=1.0, max_len_b=3, dtype="bfloat16", allow_slow_dtype=True)
    out32 = translate_ids(model, sources, d32, device=torch.device("cpu"), max_positions=64)
    out16 = translate_ids(model, sources, d16, device=torch.device("cpu"), max_positions=64)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the caller's model is not cast
    assert seen == [torch.float32] * 3 + [torch.bfloat16] * 3  # 5 sentences in batches of 2, each way
    # random weights give flat distributions, so hypotheses may differ; their scores may not, much
    for a, b in zip(out32, out16):
        assert len(a) == len(b) == 1
        assert abs(a[0].score - b[0].score) < 0.25


@pytest.mark.parametrize("kw, named", [
    ({"attention": AttentionPlan(encoder_self=AttentionSpec("localness"))}, "encoder_self is localness"),
    ({"attention": AttentionPlan(decoder_self=AttentionSpec("rel_pos"))}, "decoder_self is rel_pos"),
])
@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_low_precision_is_refused_for_mechanisms_with_a_sentence(kw, named, dtype):
    model = _model(**kw)
    assert named in low_precision_refusal(model.cfg)
    with pytest.raises(UserError, match=f"decode.dtype={dtype}: model.attention {named}.*decode this one in float32"):
        model_for_dtype(model, dtype)
    src, mask = _batch()
    with pytest.raises(UserError, match=f"decode.dtype={dtype}"):
        translate_ids(model, [src[0].tolist()], DecodeConfig(dtype=dtype), device=torch.device("cpu"),
                      max_positions=64)


def test_bfloat16_is_refused_for_the_rnn_family():
    torch.manual_seed(0)
    model = build_model(ModelConfig(family="rnn", d_model=16, dropout=0.0), 20, 20)
    assert "model.family is rnn" in low_precision_refusal(model.cfg)
    assert low_precision_refusal(_model().cfg) is None


def test_a_decode_dtype_other_than_float32_bfloat16_or_int8_is_refused_by_the_config():
    with pytest.raises(ConfigError, match="decode.dtype.*must be float32, bfloat16 or int8"):
        validate_decode(DecodeConfig(dtype="float16"))
    validate_decode(DecodeConfig(dtype="bfloat16"))
    validate_decode(DecodeConfig(dtype="int8"))


def test_pool_worker_decodes_in_the_configured_dtype_with_one_copy(monkeypatch):
    """DecodePool workers (translate --workers) cast their model once per dtype and decode with that copy."""
    import structnmt.decode.translate as translate

    seen = []
    monkeypatch.setattr(translate, "decode_batch", lambda m, *a, **k: seen.append(m) or [[]])
    monkeypatch.setattr(translate, "_POOL_MODEL", {"model": _model(5)})
    src, mask = _batch(5, n=2)
    sources = [src[i, : int(mask[i].sum())].tolist() for i in range(2)]
    for dtype in ("bfloat16", "bfloat16", "float32", "float32", "int8", "int8"):
        translate._pool_decode((sources, DecodeConfig(dtype=dtype), 64))
    assert next(seen[0].parameters()).dtype == torch.bfloat16 and seen[1] is seen[0]
    # float32: the model's own weights (on an AMD CPU in a view whose linear layers run oneDNN), made once
    assert seen[3] is seen[2]
    assert all(a is b for a, b in zip(seen[2].parameters(), translate._POOL_MODEL["model"].parameters(), strict=True))
    assert is_int8(seen[4]) and seen[5] is seen[4]


def test_pool_hands_out_the_longest_batches_first_and_translate_ids_puts_them_back(monkeypatch):
    """translate --workers: the batches (sorted shortest first) go to the workers longest first, and every
    result lands on its own sentences."""
    import structnmt.decode.translate as translate
    from structnmt.decode.beam import Hypothesis

    submitted = []

    class FakeWorkers:
        def imap(self, fn, tasks, chunksize=1):
            for sources, _dcfg, _max in tasks:
                submitted.append(len(sources[0]))
                # a worker's answer: per sentence one hypothesis that names its source's length
                yield [[Hypothesis([len(s)], 0.0, 0.0)] for s in sources]

    pool = translate.DecodePool.__new__(translate.DecodePool)
    pool.pool, pool.workers = FakeWorkers(), 2
    sources = [[5] * n + [EOS] for n in (7, 1, 4, 9, 2, 6, 3)]
    out = translate_ids(_model(), sources, DecodeConfig(beam=2, batch_size=2), device=torch.device("cpu"),
                        max_positions=64, pool=pool)
    assert submitted == [10, 7, 4, 2]  # the first source of each batch, longest batch first
    assert [h[0].tokens for h in out] == [[len(s)] for s in sources]


def test_pool_that_cannot_load_its_checkpoint_says_so_in_one_sentence(tmp_path):
    import structnmt.decode.translate as translate

    bad = tmp_path / "not_a_checkpoint.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(UserError, match=r"--workers 2: a decoding process could not load .*not_a_checkpoint\.pt.*"
                                        r"drop --workers"):
        translate.DecodePool(bad, 2)
    import multiprocessing

    assert not multiprocessing.active_children()  # the pool was stopped


class _ExitWhenUnpickled:
    """An argument whose unpickling in a spawned worker ends that process at once, before the worker
    can say anything (as a crash or a kill would)."""

    def __reduce__(self):
        import os

        return (os._exit, (3,))


def test_pool_whose_worker_dies_while_loading_says_so_without_waiting_for_the_timeout(monkeypatch, tmp_path):
    import multiprocessing

    import structnmt.decode.translate as translate

    # the start timeout's own sentence differs ("did not start ... in N s"): a pool that waited for it
    # instead of noticing the dead worker fails the match below (after an hour, on no clock of the test's)
    monkeypatch.setattr(translate.DecodePool, "START_TIMEOUT", 3600.0)
    with pytest.raises(UserError, match=r"--workers 2: a decoding process exited while loading .*drop --workers"):
        translate.DecodePool(tmp_path / "x.pt", 2, data_dir=_ExitWhenUnpickled())
    assert not multiprocessing.active_children()


def test_a_training_config_with_bfloat16_decoding_for_a_mechanism_is_refused_before_training():
    from structnmt.config import Config, validate

    cfg = Config()
    cfg.decode.dtype = "bfloat16"
    validate(cfg)  # the default model is a plain Transformer
    cfg.model.attention = AttentionPlan(encoder_self=AttentionSpec("localness"))
    with pytest.raises(ConfigError, match="decode.dtype='bfloat16' is for plain Transformers .*localness"):
        validate(cfg)


def test_translate_starts_no_more_decoding_processes_than_the_input_has_batches(monkeypatch, synth_data, tmp_path):
    """translate --workers N: one batch is decoded here (no process loads the model for nothing), k < N batches
    by k processes; a later call with more batches gets a larger pool; the translations are those of one process."""
    from conftest import decode_in_this_process, train_tiny

    import structnmt.decode.translate as translate

    train_tiny(synth_data, tmp_path / "m")
    started = decode_in_this_process(monkeypatch)  # pools record their size and decode in this process
    lines = [f"the cat {'and the dog ' * (i % 3)}sleeps" for i in range(20)]
    one = translate.Translator(tmp_path / "m" / "checkpoint_last.pt", device="cpu")
    many = translate.Translator(tmp_path / "m" / "checkpoint_last.pt", device="cpu", workers=4)
    dcfg = DecodeConfig(beam=2, max_len_b=3, batch_size=8)
    expected = [[h.text for h in hyps] for hyps in one.translate(lines, dcfg)]
    assert many.translate(lines[:8], dcfg) and started == [] and many.workers_used == 1
    assert [[h.text for h in hyps] for hyps in many.translate(lines, dcfg)] == expected
    assert started == [3] and many.workers_used == 3  # 20 sentences in batches of 8
    many.translate(lines * 2, dcfg)
    assert started == [3, 4] and many.workers_used == 4  # 40 sentences: 5 batches, the pool grows to 4
    # workers=None (translate's default): one process per usable core from AUTO_MIN_BATCHES batches on
    monkeypatch.setattr(translate, "usable_cores", lambda: 3)
    auto = translate.Translator(tmp_path / "m" / "checkpoint_last.pt", device="cpu", workers=None)
    started.clear()
    assert auto.translate(lines * 2, dcfg) and started == [] and auto.workers_used == 1  # 5 batches: here
    assert [[h.text for h in hyps] for hyps in auto.translate(lines * 4, dcfg)][:20] == expected
    assert started == [3] and auto.workers_used == 3  # 10 batches, 3 cores
    monkeypatch.setattr(translate, "usable_cores", lambda: 1)
    single = translate.Translator(tmp_path / "m" / "checkpoint_last.pt", device="cpu", workers=None)
    assert single.translate(lines * 4, dcfg) and started == [3] and single.workers_used == 1  # one core: here
    assert auto.auto_workers(translate.AUTO_MIN_BATCHES - 1) == 1 and auto.auto_workers(100) == 1  # one core now
    monkeypatch.setattr(translate, "usable_cores", lambda: 3)
    assert auto.auto_workers(translate.AUTO_MIN_BATCHES) == 3
    auto.structures = {"dependency": None}  # a model that reads parses: they are built in this process
    assert auto.auto_workers(100) == 1


def test_bfloat16_on_a_cpu_without_bfloat16_arithmetic_is_refused_unless_allowed(monkeypatch):
    """bfloat16 is emulated on a CPU without AVX512-BF16 or AMX (several times slower than float32): refused
    in one sentence naming the formats to use instead, unless decode.allow_slow_dtype; where the CPU has
    it, or its flags cannot be read, it decodes."""
    import structnmt.machine.device as device_mod
    from structnmt.decode.translate import check_dtype_speed

    cpu = torch.device("cpu")
    for flags, refused in (({"avx2", "fma"}, True), ({"avx2", "avx512_bf16"}, False), ({"amx_bf16"}, False),
                           (None, False)):
        monkeypatch.setattr(device_mod, "cpu_flags", lambda f=flags: f)
        bf16 = DecodeConfig(dtype="bfloat16")
        if refused:
            with pytest.raises(UserError, match=r"no bfloat16 arithmetic .* decode in float32 \(drop --dtype\) or "
                                                r"int8 .* --allow-slow-dtype"):
                check_dtype_speed(bf16, cpu)
            bf16.allow_slow_dtype = True
        check_dtype_speed(bf16, cpu)  # allowed
        check_dtype_speed(DecodeConfig(dtype="int8"), cpu)
        check_dtype_speed(DecodeConfig(dtype="float32"), cpu)
    model = _model(4)
    src, mask = _batch(4, n=2)
    monkeypatch.setattr(device_mod, "cpu_flags", lambda: {"avx2"})
    with pytest.raises(UserError, match="no bfloat16 arithmetic"):
        translate_ids(model, [src[0, : int(mask[0].sum())].tolist()], DecodeConfig(dtype="bfloat16"),
                      device=cpu, max_positions=64)
