"""decode.cuda_graphs (structnmt.decode.cuda_graphs): decoding steps of fixed shapes, checked on the CPU.

A CUDA graph replays the kernels it recorded on the memory it recorded them on, so what must hold is checked
here without a GPU: the fixed-shape search translates as the ordinary one; a step runs the same operators on
tensors of the same shapes at every position and reads no device value on the host; and the capture-and-replay
logic (warm-up undone, one capture per batch or, with a pool, per bucket, replays writing into the captured
output), with the CUDA calls replaced by a stand-in that replays the recorded calls on the recorded tensors."""

from __future__ import annotations

import pytest
import torch
from conftest import random_sources
from torch.utils._python_dispatch import TorchDispatchMode

import structnmt.decode.beam as beam
import structnmt.decode.cuda_graphs as graphs
import structnmt.nn.attention as attention
from structnmt.config import AttentionPlan, AttentionSpec, Config, DecodeConfig, from_dict
from structnmt.data.vocab import EOS
from structnmt.decode.beam import beam_search, greedy_search
from structnmt.decode.translate import translate_ids
from structnmt.errors import UserError
from structnmt.machine.op_count import OpCounter
from structnmt.models import build_model

FAMILIES = {
    "transformer": {},
    "rel_pos decoder": {"attention": {"decoder_self": {"name": "rel_pos", "options": {"k": 4}}}},
    "rnn": {"family": "rnn"},
    "sa-nmt": {"family": "rnn", "rnn": {"syntax": "sa", "annotations": "shared"}},
}


def _model(family: str = "transformer", eos_scale: float = 2.5, **extra):
    """A random model whose EOS embedding is scaled so that some sentences end early and others run to their
    longest (random weights would otherwise run every sentence to its maximum length)."""
    torch.manual_seed(0)
    cfg = from_dict({"model": dict(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2,
                                   dropout=0.0, share_all_embeddings=True, **FAMILIES[family])}).model
    for key, value in extra.items():
        setattr(cfg, key, value)
    model = build_model(cfg, 40, 40).eval()
    with torch.no_grad():
        model.tgt_embed.weight[EOS] *= eos_scale
    return model


def _batch(n: int = 9, S: int = 12, seed: int = 1):
    return random_sources(seed, n, S)


def _both(model, search: str, **option):
    """(the ordinary search's n-best, the search's with ``option``) on the test batch: beam 4 (3-best) or greedy."""
    src, mask = _batch()
    if search == "beam":
        return beam_search(model, src, mask, beam=4, nbest=3), beam_search(model, src, mask, beam=4, nbest=3, **option)
    return greedy_search(model, src, mask), greedy_search(model, src, mask, **option)


def _assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        assert [h.tokens for h in x] == [h.tokens for h in y]
        assert max(abs(h.score - g.score) for h, g in zip(x, y)) < 1e-5


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("search", ["beam", "greedy"])
@pytest.mark.parametrize("attention_path", ["cpu", "sdpa"])
def test_fixed_shape_search_translates_as_the_ordinary_one(monkeypatch, family, search, attention_path):
    """``sdpa``: the attention path a GPU takes (F.scaled_dot_product_attention with the (1, capacity) key
    mask), which decoding steps on a CPU leave for two matmuls."""
    if attention_path == "sdpa":
        monkeypatch.setattr(attention, "_FEW_QUERIES", 0)
    ordinary, fixed = _both(_model(family), search, fixed_shapes=True)
    _assert_same(ordinary, fixed)
    # sentences finish at different steps (the slots of the finished ones go on computing, unread)
    assert len({len(hyps[0].tokens) for hyps in ordinary}) >= 3


def test_fixed_shapes_without_a_shared_source_translate_as_the_ordinary_search():
    model = _model("transformer")
    src, mask = _batch()
    ordinary = beam_search(model, src, mask, beam=3, share_source=False)
    _assert_same(ordinary, beam_search(model, src, mask, beam=3, share_source=False, fixed_shapes=True))


HOST_VALUES = {"aten.lift_fresh.default", "aten._local_scalar_dense.default", "aten.lift_fresh_copy.default"}
"""ATen calls that bring a host value into a step (a tensor made from Python data) or a device value out of it."""


class _Trace(TorchDispatchMode):
    """Every ATen call with its arguments: a tensor as its shape and dtype, anything else as it is (an int that
    changed between steps would be frozen into a graph)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        self.calls.append((str(func), tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t)
                                            for t in flat)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_step_runs_the_same_operators_on_the_same_shapes_at_every_position_and_reads_nothing(family):
    """What a CUDA graph needs of the step it replays (checked here on the CPU)."""
    model = _model(family)
    src, mask = _batch(n=3)
    enc = model.encode(src, mask, {})
    shared = family in ("transformer", "rel_pos decoder")
    steps = graphs.StaticSteps(model, enc, sentences=3, beam=2, capacity=20, shared=shared, graphs=False)
    with torch.inference_mode():
        steps.logits(torch.full((3, 1), 2), 0)  # the first step (eager everywhere): fills the source entries
        traces = []
        for position in (1, 4, 17):
            steps.cache.position.fill_(position)
            with OpCounter() as ops, _Trace() as trace:
                out = steps._step()
            assert ops.reads == 0
            traces.append(trace.calls)
            assert out.shape == (6, 40)
    assert traces[0] == traces[1] == traces[2]
    assert len(traces[0]) > 20 and not HOST_VALUES & {name for name, _ in traces[0]}


def test_the_cache_writes_each_position_in_place_and_the_reorder_moves_slots():
    cache = graphs.StaticCache(beam=1, capacity=4, device=torch.device("cpu"))
    first = cache.extend("k", {"x": torch.ones(3, 2, 1, 5)}, dim=2)["x"]
    cache.position.fill_(2)
    second = cache.extend("k", {"x": torch.full((3, 2, 1, 5), 7.0)}, dim=2)["x"]
    assert second is first and second.shape == (3, 2, 4, 5)
    assert (second[:, :, 0] == 1).all() and (second[:, :, 1] == 0).all() and (second[:, :, 2] == 7).all()
    assert cache.self_key_mask().tolist() == [[True, True, True, False]]
    cache.set("state", {"h": torch.arange(3.0)[:, None].expand(3, 2)})
    state = cache.get("state")["h"]
    cache.set("state", {"h": torch.zeros(3, 2)})
    assert cache.get("state")["h"] is state and (state == 0).all()  # copied into, not replaced
    cache.set("state", {"h": torch.arange(3.0)[:, None].expand(3, 2)})
    cache.reorder_slots(torch.tensor([2, 2, 0]))
    assert state[:, 0].tolist() == [2.0, 2.0, 0.0]
    with pytest.raises(TypeError, match="reorder_slots"):
        cache.reorder(torch.tensor([0, 1, 2]))


class _Recording(TorchDispatchMode):
    """Every ATen call of a step with the very tensors it read and wrote."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}, out))
        return out


class _ReplayedGraph:
    """What a CUDA graph does, on the CPU: a replay reruns the recorded calls on the recorded tensors, each
    result written into the tensor the recording produced (the same memory every time), without running the
    step's Python again. A step that hands the graph a new tensor between replays (instead of writing into
    the recorded one), or that decides on the host, is not seen by the replays, as on a GPU."""

    def __init__(self, calls, steps=None):
        self.calls, self.replays, self.steps = calls, 0, steps
        produced = {id(t) for *_, out in calls for t in torch.utils._pytree.tree_leaves(out)}
        self.inputs = [t for _, args, kwargs, _ in calls for t in torch.utils._pytree.tree_leaves((args, kwargs))
                       if isinstance(t, torch.Tensor) and id(t) not in produced]

    def _check_inputs_are_owned(self):
        """A graph reads its inputs at the addresses it recorded: each must still belong to the steps' tensors or
        the model's (a tensor the steps replaced would be freed memory on a GPU; here the recording keeps it)."""
        steps = self.steps
        owned = [steps.tokens, steps.cache.position, steps.cache._positions, *graphs._leaves(steps.enc),
                 *(t for entry in steps.cache.entries.values() for t in entry.values()),
                 *steps.model.parameters(), *steps.model.buffers()]
        storages = {t.untyped_storage().data_ptr() for t in owned}
        assert all(t.untyped_storage().data_ptr() in storages for t in self.inputs if t.numel())

    def replay(self):
        self.replays += 1
        if self.steps is not None:
            self._check_inputs_are_owned()
        for func, args, kwargs, out in self.calls:
            result = func(*args, **kwargs)
            for recorded, new in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(result)):
                if isinstance(recorded, torch.Tensor) and recorded is not new:
                    recorded.copy_(new)


def _stand_in_graphs(monkeypatch) -> tuple[list[_ReplayedGraph], list]:
    """The CUDA calls replaced by the stand-in: (the graphs recorded, the warm-up runs), filled as they happen."""
    made, warm_ups = [], []

    def record(step):  # a capture records the kernels without running them: no write may remain
        cache = step.__self__.cache
        saved = cache.snapshot()
        with _Recording() as recording:
            out = step()
        cache.restore(saved)
        made.append(_ReplayedGraph(recording.calls, step.__self__))
        return made[-1], out.zero_()

    monkeypatch.setattr(graphs, "_warm_up", lambda step: warm_ups.append(step()))
    monkeypatch.setattr(graphs, "_record", record)
    monkeypatch.setattr(beam, "cuda_graphs_refusal", lambda model, device: None)
    return made, warm_ups


@pytest.mark.parametrize("family", ["transformer", "rel_pos decoder", "rnn", "sa-nmt"])
@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_one_capture_per_batch_then_replays_give_the_same_translations(monkeypatch, family, search):
    made, warm_ups = _stand_in_graphs(monkeypatch)
    ordinary, graphed = _both(_model(family), search, cuda_graphs=True)
    # the warm-up advances an RNN's state in place: undone before the capture, or every output would differ
    _assert_same(ordinary, graphed)
    longest = max(len(h[0].tokens) for h in ordinary)
    assert len(made) == len(warm_ups) == 1
    assert made[0].replays >= longest  # every step after the first (EOS's included) is a replay


@pytest.mark.parametrize("family", ["transformer", "rel_pos decoder", "rnn", "sa-nmt"])
@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_a_pool_records_once_a_bucket_and_its_later_batches_replay_that_graph(monkeypatch, family, search):
    """Batches of other sizes and lengths in one bucket (up to 8 sentences, 16 source positions, 24 output
    positions) replay the graph the first recorded, on its tensors written in place: a tensor handed over anew
    would not be seen by the stand-in's replays, and the translations would differ from the ordinary search."""
    made, _ = _stand_in_graphs(monkeypatch)
    pool = graphs.GraphPool()
    model = _model(family)
    buckets = set()
    for n, S, seed in [(7, 12, 1), (5, 11, 2), (8, 10, 3), (11, 12, 4), (3, 12, 5)]:
        src, mask = random_sources(seed, n, S)
        if search == "beam":
            ordinary = beam_search(model, src, mask, beam=4, nbest=3)
            pooled = beam_search(model, src, mask, beam=4, nbest=3, cuda_graphs=True, graph_pool=pool)
        else:
            ordinary, pooled = greedy_search(model, src, mask), greedy_search(model, src, mask, cuda_graphs=True,
                                                                              graph_pool=pool)
        _assert_same(ordinary, pooled)
        capacity = int(beam._max_lens(mask, 1.2, 10, 1023).max())
        buckets.add((-(-n // 8), -(-src.shape[1] // 8), -(-capacity // 8)))
    assert len(made) == len(buckets) < 5  # one recording a bucket, and some batch replayed another's
    assert len(pool._steps) == len(buckets)


def test_a_pool_keeps_its_buckets_within_the_models_positions_its_size_and_grad_modes(monkeypatch):
    """The output capacity rounds up to a multiple of 8 but never past the model's position table (20 here); a
    pool of one bucket drops the other when a batch needs it; beam search (inference mode) and greedy search
    (no_grad) keep buckets apart (inference tensors cannot be written outside inference mode)."""
    made, _ = _stand_in_graphs(monkeypatch)
    model = _model(max_positions=20)
    src, mask = random_sources(1, 6, 8)  # outputs of up to 19 positions: a capacity of 19, not 24
    pool = graphs.GraphPool()
    _assert_same(beam_search(model, src, mask, beam=3, max_positions=1024),
                 beam_search(model, src, mask, beam=3, max_positions=1024, cuda_graphs=True, graph_pool=pool))
    assert next(iter(pool._steps.values())).cache.capacity == 20
    small = graphs.GraphPool(size=1)
    other, other_mask = random_sources(2, 11, 8)  # 16 sentences: another bucket
    for batch in [(src, mask), (other, other_mask), (src, mask)]:
        _assert_same(greedy_search(model, *batch), greedy_search(model, *batch, cuda_graphs=True, graph_pool=small))
        assert len(small._steps) == 1
    assert len(made) == 1 + 3  # the first pool's, then one each time the one-bucket pool switched
    beam_search(model, src, mask, beam=1, cuda_graphs=True, graph_pool=small)
    greedy_search(model, src, mask, cuda_graphs=True, graph_pool=small)  # would write into inference tensors
    small.clear()
    assert not small._steps


def test_an_encoder_output_is_padded_with_masked_positions_and_repeated_sentences():
    from structnmt.models.rnn import RNNEncoderOutput
    from structnmt.models.transformer import EncoderOutput

    memory, mask = torch.randn(2, 3, 4), torch.tensor([[True, True, False], [True, True, True]])
    enc = RNNEncoderOutput(memory, mask, init=(torch.randn(2, 1, 4), torch.randn(2, 1, 4)), syntax=torch.randn(2, 3, 4))
    out = enc.padded(4, 8)
    assert out.memory.shape == (4, 8, 4) and out.syntax.shape == (4, 8, 4) and out.init[0].shape == (4, 1, 4)
    assert torch.equal(out.memory[:2, :3], memory) and not out.memory[:, 3:].any() and not out.mask[:, 3:].any()
    assert torch.equal(out.mask[2, :3], mask[0]) and torch.equal(out.init[1][3], enc.init[1][0])
    assert EncoderOutput(memory, mask, structures={"tags": torch.zeros(2, 3)}).padded(4, 8) is None  # not ours to pad


def test_a_decoding_longer_than_the_models_positions_is_refused_before_any_step():
    model = _model(max_positions=16)
    src, mask = _batch()
    with pytest.raises(ValueError, match="sequence of length 24 exceeds model.max_positions=16"):
        beam_search(model, src, mask, fixed_shapes=True)


def test_cuda_graphs_are_refused_on_the_cpu_with_a_sentence():
    model = _model()
    src, mask = _batch(n=2)
    with pytest.raises(UserError, match=r"decode.cuda_graphs: CUDA graphs are a CUDA feature .* decodes on cpu.*"
                                        r"set decode.cuda_graphs=false; translate: --no-cuda-graphs"):
        translate_ids(model, [src[0, :3].tolist()], DecodeConfig(cuda_graphs=True), device=torch.device("cpu"),
                      max_positions=64)
    with pytest.raises(ValueError, match="CUDA graphs are a CUDA feature"):
        beam_search(model, src, mask, cuda_graphs=True)


def test_a_decoder_with_another_mechanism_is_refused_naming_it():
    phrasal = AttentionSpec("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]})
    model = _model(attention=AttentionPlan(decoder_self=phrasal))
    refusal = model.static_decoding_refusal()
    assert "decoder layer 0's self-attention is phrasal_heterogeneous (model.attention.decoder_self)" in refusal
    src, mask = _batch(n=2)
    with pytest.raises(ValueError, match="decoding in fixed shapes: decoder layer 0's self-attention"):
        beam_search(model, src, mask, fixed_shapes=True)
    # an encoder-side mechanism leaves the decoder plain
    assert _model(attention=AttentionPlan(encoder_self=AttentionSpec("localness"))).static_decoding_refusal() is None


def test_a_subclass_of_plain_attention_must_opt_in_to_fixed_shapes():
    from structnmt.nn.attention import MultiHeadAttention
    from structnmt.nn.relative_position import RelativePositionAttention

    class Biased(MultiHeadAttention):
        pass

    assert MultiHeadAttention.decodes_in_fixed_shapes and RelativePositionAttention.decodes_in_fixed_shapes
    assert not Biased.decodes_in_fixed_shapes


def test_a_training_that_would_validate_with_cuda_graphs_on_the_cpu_is_refused_before_training(tmp_path, synth_data):
    import structnmt.train.trainer as trainer

    cfg = Config()
    cfg.data.path = str(synth_data)
    cfg.decode.cuda_graphs = True
    cfg.train.validate_bleu = True
    cfg.train.max_updates = 1
    cfg.train.save_dir = str(tmp_path / "run")
    with pytest.raises(UserError, match="decode.cuda_graphs: CUDA graphs are a CUDA feature"):
        trainer.Trainer(cfg, log=lambda *a: None)
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


def test_translating_many_batches_records_a_graph_once_a_bucket(monkeypatch):
    """translate_ids with decode.cuda_graphs: its batches share one pool, so each bucket's graph is recorded once;
    the translations are those decoded without the option."""
    import structnmt.decode.translate as translate

    made, _ = _stand_in_graphs(monkeypatch)
    monkeypatch.setattr(translate, "cuda_graphs_refusal", lambda model, device: None)
    model = _model()
    src, mask = random_sources(7, 40, 14, shortest=10)
    sources = [row[m].tolist() for row, m in zip(src, mask)]
    kw = dict(device=torch.device("cpu"), max_positions=64)
    plain = translate_ids(model, sources, DecodeConfig(beam=3, batch_size=5), **kw)
    graphed = translate_ids(model, sources, DecodeConfig(beam=3, batch_size=5, cuda_graphs=True), **kw)
    assert [[h.tokens for h in x] for x in graphed] == [[h.tokens for h in x] for x in plain]
    assert len(made) == 2  # 8 batches of 5 sentences of 10-14 pieces, sorted by length: 2 buckets of source length


def test_the_translate_option_sets_decode_cuda_graphs():
    import argparse

    from structnmt.cli.commands import _apply_decode_options

    d = DecodeConfig()
    args = argparse.Namespace(beam=None, lenpen=None, max_len_a=None, max_len_b=None, nbest=None, batch_size=None,
                              dtype=None, greedy=False, allow_slow_dtype=False, cuda_graphs=True)
    _apply_decode_options(args, d)
    assert d.cuda_graphs


def test_the_option_may_change_when_a_run_resumes():
    from structnmt.train.lock import RESUMABLE_KEYS

    assert "decode.cuda_graphs" in RESUMABLE_KEYS


@pytest.fixture(scope="module")
def graphs_checkpoint(synth_data, tmp_path_factory):
    """(a checkpoint trained through `structnmt train ... decode.cuda_graphs=true`, an input of 12 lines)."""
    import yaml

    work = tmp_path_factory.mktemp("graphs_ckpt")
    cfg = {"data": {"path": str(synth_data), "max_tokens": 600},
           "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
           "train": {"save_dir": str(work / "run"), "max_updates": 2, "warmup_updates": 1,
                     "validate_interval_updates": 2, "tensorboard": False, "progress": False},
           "decode": {"beam": 2, "max_len_b": 4}}
    (work / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    from structnmt.cli import main

    assert main(["train", str(work / "cfg.yaml"), "--no-progress", "decode.cuda_graphs=true"]) == 0
    lines = (synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:12]
    (work / "in.txt").write_text("\n".join(lines) + "\n")
    return work / "run" / "checkpoint_last.pt", work / "in.txt"


def test_a_checkpoint_trained_with_cuda_graphs_translates_on_a_cpu_without_them(graphs_checkpoint, tmp_path, capsys):
    """decode.cuda_graphs stored in a checkpoint is a default: on a CPU the decoding falls back to the ordinary
    search (one line on stderr); --no-cuda-graphs asks for that (no line); --cuda-graphs, asked for here, is
    refused in one sentence whose advice translate takes."""
    from conftest import assert_user_error, cli

    from structnmt.models.checkpoint import load_checkpoint

    ckpt, src = graphs_checkpoint
    assert load_checkpoint(ckpt)["config"]["decode"]["cuda_graphs"] is True
    base = ("translate", "--checkpoint", ckpt, "--input", src, "--no-progress", "--device", "cpu", "--workers", "1")
    code, _, err = cli(capsys, *base, "--output", tmp_path / "default.txt")
    assert code == 0, err
    notes = [line for line in err.splitlines() if "decode.cuda_graphs" in line]
    assert len(notes) == 1 and "stores decode.cuda_graphs=true, which cannot run here" in notes[0], err
    assert "decoding without CUDA graphs" in notes[0] and "decodes on cpu" in notes[0]
    code, _, err = cli(capsys, *base, "--output", tmp_path / "eager.txt", "--no-cuda-graphs")
    assert code == 0 and "cuda_graphs" not in err, err
    assert (tmp_path / "default.txt").read_text() == (tmp_path / "eager.txt").read_text()
    assert len((tmp_path / "eager.txt").read_text().splitlines()) == 12
    code, _, err = cli(capsys, *base, "--output", tmp_path / "graphs.txt", "--cuda-graphs")
    assert_user_error(code, err, "--cuda-graphs: CUDA graphs are a CUDA feature", "drop --cuda-graphs")
    assert not (tmp_path / "graphs.txt").exists()
    # the advice the refusal gives is an option translate takes
    assert cli(capsys, *base, "--output", tmp_path / "again.txt", "--no-cuda-graphs")[0] == 0


def test_cuda_graphs_with_a_ctranslate2_export_is_refused(graphs_checkpoint, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    from conftest import assert_user_error, cli

    ckpt, src = graphs_checkpoint
    assert cli(capsys, "export", "--checkpoint", ckpt, "--out", tmp_path / "ct2")[0] == 0
    base = ("translate", "--checkpoint", tmp_path / "ct2", "--input", src, "--no-progress")
    code, _, err = cli(capsys, *base, "--output", tmp_path / "out.txt", "--cuda-graphs")
    assert_user_error(code, err, "--cuda-graphs is for structnmt checkpoints", "CTranslate2 export",
                      "drop --cuda-graphs")
    assert not (tmp_path / "out.txt").exists()
    code, _, err = cli(capsys, *base, "--output", tmp_path / "out.txt", "--no-cuda-graphs")
    assert code == 0, err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 12
