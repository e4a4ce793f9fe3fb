"""PhraseTransformer: hypernodes through the encoder and the two-phase layer, checked
against the paper's equations written out literally (eqs. 2-7, Algorithm 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from structnmt.config import AttentionSpec, ConfigError, ModelConfig
from structnmt.models import build_model
from structnmt.nn import AttentionContext, AttentionDims, IncrementalCache, build_attention
from structnmt.nn.phrase_transformer import HypernodeSpec, dense_adjacency, within_phrase_attention
from structnmt.syntax.batching import StructureSpec, build_structures
from structnmt.syntax.features import hypernode_adjacency
from structnmt.syntax.trees import DependencyTree

D, H, V = 32, 4, 40
WOPS = [np.array([0, 0, 1, 2, 3]), np.array([0, 1, 2]), np.array([0])]  # pieces -> words; sentence 3 has 1 word


def structures(k=2, wops=WOPS, S=None, key="pt.ngram.k2.word", spec=None, trees=None):
    S = S if S is not None else max(len(w) for w in wops) + 1
    spec = spec or StructureSpec("ngram_hypernodes", {"k": k, "unit": "word"})
    trees = trees or [(None, None)] * len(wops)
    return build_structures({key: spec}, trees, list(wops), S)


def src_batch(wops=WOPS, S=None):
    S = S if S is not None else max(len(w) for w in wops) + 1
    src = torch.zeros(len(wops), S, dtype=torch.long)
    mask = torch.zeros(len(wops), S, dtype=torch.bool)
    for b, w in enumerate(wops):  # the same tokens for a sentence alone and in a batch
        src[b, : len(w)] = 4 + (torch.arange(len(w)) * 7 + len(w)) % (V - 4)
        src[b, len(w)] = 2  # EOS
        mask[b, : len(w) + 1] = True
    return src, mask


def model_cfg(layers=2, **options):
    cfg = ModelConfig(d_model=D, ffn_dim=64, heads=H, encoder_layers=layers, decoder_layers=2, dropout=0.0,
                      attention_dropout=0.0)
    cfg.attention.encoder_self = AttentionSpec(name="phrase_transformer", options=options)
    return cfg


def literal_eq5(q, k, v, adj, node_mask, form):
    """softmax(QK^T/sqrt(d) (.) A) V, per sentence in a Python loop over the real nodes only."""
    B, Hh, L, d = q.shape
    out = torch.zeros_like(q)
    weights = torch.zeros(B, Hh, L, L)
    for b in range(B):
        real = node_mask[b].nonzero().flatten()
        qb, kb, vb = q[b][:, real], k[b][:, real], v[b][:, real]
        a = adj[b][real][:, real].to(q.dtype)
        s = qb @ kb.transpose(-1, -2) / d**0.5
        if form == "hadamard":
            w = torch.softmax(s * a, -1)
        else:
            w = torch.softmax(s.masked_fill(a == 0, float("-inf")), -1)
        out[b][:, real] = w @ vb
        weights[b][:, real[:, None], real[None, :]] = w
    return out, weights


# ----------------------------------------------------------------------------- phase 2 alone


@pytest.mark.parametrize("form", ["masked", "hadamard"])
@pytest.mark.parametrize("impl", ["gathered", "dense"])
def test_within_phrase_attention_equals_literal_eq5(form, impl):
    st = structures(k=3)
    nbr, member, hmask = st["pt.ngram.k2.word.neighbours"], st["pt.ngram.k2.word"], st["pt.ngram.k2.word.mask"]
    B, L, _ = nbr.shape
    _, tok_mask = src_batch()
    node_mask = torch.cat([tok_mask, hmask], 1)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, L, 8, generator=g, requires_grad=True) for _ in range(3))
    out, w = within_phrase_attention(q, k, v, nbr, node_mask, form=form, impl=impl, need_weights=True)
    adj = dense_adjacency(nbr)
    want, want_w = literal_eq5(q, k, v, adj, node_mask, form)
    assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert_close(w, want_w, atol=1e-6, rtol=1e-5)
    assert (out[~node_mask[:, None].expand(B, H, L)] == 0).all()  # padded nodes: zero, not NaN
    # gradients agree with the literal computation too
    g_out = torch.randn_like(out)
    grads = torch.autograd.grad((out * g_out).sum(), (q, k, v))
    want_grads = torch.autograd.grad((want * g_out).sum(), (q, k, v))
    for a_, b_ in zip(grads, want_grads):
        assert torch.isfinite(a_).all()
        assert_close(a_, b_, atol=1e-5, rtol=1e-5)
    # adjacency: eq. 6 (each token with itself and its hypernodes only)
    b = 0
    n = int(hmask[b].sum())
    S = member.shape[2]
    assert torch.equal(adj[b, : S + n, : S + n], torch.from_numpy(hypernode_adjacency(member[b, :n].numpy())))
    non_adj = node_mask[b][None, :] & ~adj[b]
    if form == "masked":  # the prose: 'for' and 'her' never reach the phrase
        assert (w[b][:, non_adj] == 0).all()
    else:  # eq. 5 as printed: every real non-adjacent node keeps weight e^0 / Z > 0
        rows = node_mask[b]
        assert (w[b][:, non_adj & rows[:, None]] > 0).all()


def test_hadamard_gathered_is_stable_for_large_logits():
    """The extra key (logit log c) shares the max-shift: no overflow for logits of 1e4."""
    st = structures(k=2)
    nbr, hmask = st["pt.ngram.k2.word.neighbours"], st["pt.ngram.k2.word.mask"]
    _, tok_mask = src_batch()
    node_mask = torch.cat([tok_mask, hmask], 1)
    B, L, _ = nbr.shape
    g = torch.Generator().manual_seed(3)
    q = 40.0 + torch.randn(B, H, L, 8, generator=g)
    k = 40.0 + torch.randn(B, H, L, 8, generator=g)
    v = torch.randn(B, H, L, 8, generator=g)
    out, w = within_phrase_attention(q, k, v, nbr, node_mask, form="hadamard", impl="gathered", need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    # the same in float64 (float32 logits of ~4,500 carry rounding of ~1e-3): gathered == dense
    q64, k64, v64 = q.double(), k.double(), v.double()
    g64, wg = within_phrase_attention(q64, k64, v64, nbr, node_mask, form="hadamard", impl="gathered",
                                      need_weights=True)
    d64, wd = within_phrase_attention(q64, k64, v64, nbr, node_mask, form="hadamard", impl="dense", need_weights=True)
    assert_close(g64, d64) and assert_close(wg, wd)
    real = node_mask[:, None, :, None] & node_mask[:, None, None, :]
    assert_close(w.sum(-1)[node_mask[:, None].expand(B, H, L)], torch.ones(int(node_mask.sum()) * H))
    assert (w[~real.expand_as(w)] == 0).all()


# ----------------------------------------------------------------------------- the layer


def _mechanism(**options):
    return build_attention("phrase_transformer", options, AttentionDims(D, H, 0.0, "encoder_self", "enc.0.self")).eval()


@pytest.mark.parametrize("nonlinear", [True, False])
@pytest.mark.parametrize("output", ["own", "shared"])
def test_second_phase_is_eqs_5_to_7(nonlinear, output):
    attn = _mechanism(k=2, nonlinear=nonlinear, phase2_output=output)
    st = structures()
    nbr, hmask = st["pt.ngram.k2.word.neighbours"], st["pt.ngram.k2.word.mask"]
    _, tok_mask = src_batch()
    node_mask = torch.cat([tok_mask, hmask], 1)
    B, L, _ = nbr.shape
    x = torch.randn(B, L, D)
    got = attn.second_phase(x, AttentionContext(key_mask=node_mask, structures=st)).output
    q = attn.q2(x).view(B, L, H, -1).transpose(1, 2)
    k_, v_ = (t.view(B, L, H, -1).transpose(1, 2) for t in attn.kv2(x).chunk(2, -1))
    heads, _ = literal_eq5(q, k_, v_, dense_adjacency(nbr), node_mask, "masked")
    if nonlinear:
        heads = torch.sigmoid(heads)  # eq. 5's sigma on each head
    heads = heads * node_mask[:, None, :, None]
    proj = attn.out2 if output == "own" else attn.phase1.out_proj  # eq. 7
    want = proj(heads.transpose(1, 2).reshape(B, L, D))
    assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert (attn.out2 is None) == (output == "shared")


def test_one_sublayer_composes_the_phases():
    attn = _mechanism(k=2, sublayers="one")
    st = structures()
    _, tok_mask = src_batch()
    mask = torch.cat([tok_mask, st["pt.ngram.k2.word.mask"]], 1)
    x = torch.randn(3, mask.shape[1], D)
    ctx = AttentionContext(key_mask=mask, structures=st)
    want = attn.second_phase(attn.phase1(x, x, ctx).output, ctx).output
    assert_close(attn(x, x, ctx).output, want)
    assert not attn.has_second_phase and _mechanism(k=2).has_second_phase


def test_hypernodes_enter_with_zero_states_or_positions():
    st = structures(k=3)
    key = "pt.ngram.k2.word"
    src, mask = src_batch()
    x = torch.randn(3, src.shape[1], D)
    table = torch.randn(64, D)
    member = st[key]
    for positions in ("none", "first", "mean"):
        out, m = HypernodeSpec(key, positions, "words").append(x, mask, st, table)
        N = member.shape[1]
        assert out.shape == (3, src.shape[1] + N, D) and torch.equal(m[:, src.shape[1]:], st[key + ".mask"])
        assert torch.equal(out[:, : src.shape[1]], x)
        h = out[:, src.shape[1]:]
        assert (h[~st[key + ".mask"]] == 0).all()
        b, n = 0, 0  # sentence 0's first hypernode: words 0-1 = pieces 0, 1, 2
        assert member[b, n, :3].all() and not member[b, n, 3:].any()
        if positions == "none":
            assert (h == 0).all()  # Algorithm 1 line 2
        elif positions == "first":
            assert_close(h[b, n], table[0])
            assert member[b, 1, 2:4].all() and not member[b, 1, :2].any()  # words 1-2 = pieces 2, 3
            assert_close(h[b, 1], table[2])
        else:
            assert_close(h[b, n], table[:3].mean(0))
            assert_close(h[b, 1], table[2:4].mean(0))


def _encode_batch(model, wops, S=None, **kw):
    src, mask = src_batch(wops, S)
    st = structures(wops=wops, S=src.shape[1], **kw)
    return model.encode(src, mask, st), src, mask, st


@pytest.mark.parametrize("decoder_sees", ["words", "all"])
def test_model_runs_over_words_and_hypernodes(decoder_sees):
    torch.manual_seed(0)
    model = build_model(model_cfg(k=2, decoder_sees=decoder_sees), V, V).eval()
    enc, src, mask, st = _encode_batch(model, WOPS)
    N = st["pt.ngram.k2.word"].shape[1]
    S = src.shape[1]
    assert enc.memory.shape[1] == (S if decoder_sees == "words" else S + N)
    assert torch.isfinite(enc.memory).all()
    tgt = torch.randint(4, V, (3, 5))
    out = model(src, mask, tgt, st, need_weights=True)
    assert len(out.attentions["encoder_self"]) == 2 and out.attentions["encoder_self"][0].shape[-1] == S + N
    assert len(out.attentions["encoder_within"]) == 2
    assert out.attentions["cross"][0].shape[-1] == enc.memory.shape[1]
    # cached decoding (the memory of a beam is reordered) equals the full pass
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(tgt.shape[1])]
    assert_close(torch.stack(steps, 1), torch.log_softmax(out.logits, -1), atol=1e-5, rtol=1e-5)
    idx = torch.tensor([2, 0, 1])
    assert torch.equal(enc.reorder(idx).memory, enc.memory[idx])


def test_auto_picks_dense_for_short_and_gathered_for_long_inputs():
    from structnmt.nn.phrase_transformer import choose_impl

    assert choose_impl(60, 6) == "dense" and choose_impl(200, 3) == "dense" and choose_impl(300, 3) == "gathered"
    assert choose_impl(800, 6) == "dense" and choose_impl(1000, 6) == "gathered"


@pytest.mark.parametrize("options", [{"k": 2}, {"k": 3, "within": "hadamard", "impl": "gathered"},
                                     {"k": 2, "sublayers": "one", "impl": "gathered"},
                                     {"k": 3, "positions": "mean", "impl": "dense"}, {"k": 2, "unit": "piece"},
                                     {"k": 3, "within": "hadamard", "impl": "dense", "decoder_sees": "all"},
                                     {"k": 3, "impl": "gathered", "decoder_sees": "all"}])
def test_a_sentence_scores_the_same_alone_and_padded(options):
    """Padding tokens and padding hypernodes change nothing for a real sentence: its words and,
    when the decoder sees them, its hypernodes (at S + j in a batch of width S)."""
    torch.manual_seed(0)
    model = build_model(model_cfg(**options), V, V).eval()
    key = model.encoder.plan[1].key
    spec = model.required_structures()[key]
    enc, src, mask, st = _encode_batch(model, WOPS, key=key, spec=spec)
    S = src.shape[1]
    compared_nodes = 0
    for b, w in enumerate(WOPS):
        alone, src1, _, st1 = _encode_batch(model, [w], key=key, spec=spec)
        n = len(w) + 1
        assert_close(enc.memory[b, :n], alone.memory[0, :n], atol=1e-5, rtol=1e-5)
        if options.get("decoder_sees") == "all":
            m = int(st1[key + ".mask"][0].sum())
            assert int(st[key + ".mask"][b].sum()) == m
            S1 = src1.shape[1]
            assert_close(enc.memory[b, S:S + m], alone.memory[0, S1:S1 + m], atol=1e-5, rtol=1e-5)
            compared_nodes += m
    assert torch.isfinite(enc.memory).all()
    if options.get("decoder_sees") == "all":
        assert compared_nodes > 0


def test_k1_without_phase_2_is_a_plain_encoder_layer():
    """Issue item: with k = 1 (no hypernodes) and phase 2 off, the PhraseTransformer layer is
    the plain layer: same phase-1 (= mha), norm and feed-forward weights, same outputs."""
    torch.manual_seed(0)
    pt = build_model(model_cfg(k=1, phase2=False), V, V).eval()
    plain_cfg = model_cfg(k=1)
    plain_cfg.attention.encoder_self = AttentionSpec(name="mha")
    plain = build_model(plain_cfg, V, V).eval()
    assert not any(".q2." in n or ".kv2." in n or ".out2." in n for n, _ in pt.named_parameters())
    plain.load_state_dict({k.replace("self_attn.phase1.", "self_attn."): v for k, v in pt.state_dict().items()})
    src, mask = src_batch()
    st = structures(k=1, key=pt.encoder.plan[1].key)
    assert not st[pt.encoder.plan[1].key + ".mask"].any()  # k = 1: no hypernode
    tgt = torch.randint(4, V, (3, 5))
    assert_close(pt(src, mask, tgt, st).logits, plain(src, mask, tgt).logits, atol=1e-5, rtol=1e-5)
    # and phase 2 matters when it is on (the comparison above can fail)
    torch.manual_seed(0)
    with_p2 = build_model(model_cfg(k=2), V, V).eval()
    st2 = structures(k=2)
    assert not torch.allclose(with_p2(src, mask, tgt, st2).logits, plain(src, mask, tgt).logits, atol=1e-3)


def test_hypernode_states_reach_the_words():
    """Gradients reach the hypernode paths: a loss on the words' encoder outputs only has a
    gradient on every real hypernode state between layers 1 and 2, and on phase 2's weights."""
    torch.manual_seed(0)
    kept = {}

    def hook(_m, _i, out):
        out[0].retain_grad()
        kept["x"] = out[0]

    for options in ({"k": 2}, {"k": 3, "within": "hadamard", "impl": "gathered"}):
        model = build_model(model_cfg(layers=2, **options), V, V).eval()
        key = model.encoder.plan[1].key
        src, mask = src_batch()
        st = structures(k=options["k"], key=key)

        h = model.encoder.layers[0].register_forward_hook(hook)
        try:
            enc = model.encode(src, mask, st)
        finally:
            h.remove()
        S = src.shape[1]
        (enc.memory[:, :S] * mask[..., None]).pow(2).sum().backward()
        grad = kept["x"].grad[:, S:]  # (B, N, D) at the hypernodes
        real = st[key + ".mask"]
        assert grad[real].abs().sum(-1).gt(0).all()
        assert grad[~real].abs().sum() == 0  # padded hypernodes: nothing
        assert model.encoder.layers[0].self_attn.q2.weight.grad.abs().sum() > 0


def test_no_future_leakage_when_the_decoder_sees_hypernodes():
    """Changing target token t + 1 leaves the logits of steps <= t unchanged."""
    torch.manual_seed(0)
    model = build_model(model_cfg(k=3, decoder_sees="all"), V, V).eval()
    src, mask = src_batch()
    st = structures(k=3, key=model.encoder.plan[1].key)
    tgt = torch.randint(4, V, (3, 6))
    base = model(src, mask, tgt, st).logits
    for t in range(5):
        changed = tgt.clone()
        changed[:, t + 1:] = (changed[:, t + 1:] + 7) % (V - 4) + 4
        out = model(src, mask, changed, st).logits
        assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])


def test_hypernodes_enter_before_the_first_phrase_layer_and_stay():
    """A plain first layer, PhraseTransformer in layer 2: nodes are added there, once."""
    cfg = model_cfg(layers=3, k=2)
    cfg.attention.encoder_self = AttentionSpec(name="mha")
    cfg.attention.overrides["encoder_self.1"] = AttentionSpec(name="phrase_transformer", options={"k": 2})
    cfg.attention.overrides["encoder_self.2"] = AttentionSpec(name="phrase_transformer", options={"k": 2})
    model = build_model(cfg, V, V).eval()
    assert model.encoder.plan[0] == 1
    src, mask = src_batch()
    st = structures()
    out = model(src, mask, torch.randint(4, V, (3, 4)), st, need_weights=True)
    S, N = src.shape[1], st["pt.ngram.k2.word"].shape[1]
    assert [w.shape[-1] for w in out.attentions["encoder_self"]] == [S, S + N, S + N]


def test_hypernode_states_are_carried_from_layer_to_layer():
    """Algorithm 1: layer 2 receives layer 1's hypernode states (not fresh zeros)."""
    torch.manual_seed(0)
    model = build_model(model_cfg(layers=2, k=2), V, V).eval()
    src, mask = src_batch()
    st = structures()
    seen = {}

    def keep(n):
        def hook(_module, inputs, output):
            seen[n] = (inputs[0], output[0])  # returns None: the output is left as it is
        return hook

    hooks = [layer.register_forward_hook(keep(n)) for n, layer in enumerate(model.encoder.layers)]
    try:
        model.encode(src, mask, st)
    finally:
        for h in hooks:
            h.remove()
    S = src.shape[1]
    real = st["pt.ngram.k2.word.mask"]
    first_in, first_out = seen[0]
    second_in, _ = seen[1]
    assert (first_in[:, S:] == 0).all()  # zero states enter layer 1
    assert torch.equal(second_in, first_out)  # and layer 2 gets what layer 1 made of them
    assert second_in[:, S:][real].abs().sum(-1).gt(0).all()


def test_configuration_errors():
    cfg = model_cfg(k=2)
    cfg.attention.decoder_self = AttentionSpec(name="phrase_transformer", options={"k": 2})
    with pytest.raises(ConfigError, match="encoder self-attention"):
        build_model(cfg, V, V)
    cfg = model_cfg(layers=2, k=2)
    cfg.attention.overrides["encoder_self.1"] = AttentionSpec(name="phrase_transformer", options={"k": 3})
    with pytest.raises(ConfigError, match="different hypernodes"):
        build_model(cfg, V, V)
    cfg = model_cfg(layers=2, k=2)
    cfg.attention.overrides["encoder_self.1"] = AttentionSpec(name="rel_pos")
    with pytest.raises(ConfigError, match="cannot attend over nodes that are not tokens"):
        build_model(cfg, V, V)
    for bad in ({"k": 0}, {"within": "product"}, {"impl": "sparse"}, {"positions": "last"}):
        with pytest.raises(ConfigError):
            build_model(model_cfg(**bad), V, V)


def test_semantic_hypernodes_from_dependency_trees():
    # "she ate the apple": ate root; she<-ate, apple<-ate, the<-apple
    tree = DependencyTree(["She", "ate", "the", "apple"], [2, 0, 4, 2], ["nsubj", "root", "det", "obj"], ["X"] * 4)
    wops = [np.array([0, 1, 2, 3])]
    torch.manual_seed(0)
    model = build_model(model_cfg(k=3, hypernodes="semantic"), V, V).eval()
    key = model.encoder.plan[1].key
    spec = model.required_structures()[key]
    assert spec.feature == "dep_hypernodes" and spec.params == {"k": 3, "mode": "subtrees"}
    st = structures(wops=wops, key=key, spec=spec, trees=[(tree, None)])
    # k = 3 subtrees: 3 arcs + {She, ate, apple}, {ate, the, apple}
    assert int(st[key + ".mask"].sum()) == 5
    src, mask = src_batch(wops)
    out = model(src, mask, torch.randint(4, V, (1, 3)), st)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("impl", ["dense", "gathered"])
def test_training_step_has_finite_gradients_everywhere(impl):
    torch.manual_seed(0)
    cfg = model_cfg(k=3, within="hadamard", impl=impl)
    cfg.dropout = cfg.attention_dropout = 0.1
    model = build_model(cfg, V, V).train()
    src, mask = src_batch()
    st = structures(k=3, key="pt.ngram.k3.word")
    out = model(src, mask, torch.randint(4, V, (3, 4)), st)
    out.logits.logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    phase2 = model.encoder.layers[0].self_attn.q2.weight.grad
    assert phase2 is not None and phase2.abs().sum() > 0  # phase 2 is trained


def test_old_checkpoint_keys_load():
    """Checkpoints from before EncoderStack (encoder_layers.*, encoder_norm.*) still load."""
    from structnmt.models.checkpoint import load_model_state

    cfg = ModelConfig(d_model=D, ffn_dim=64, heads=H, encoder_layers=1, decoder_layers=1)
    model = build_model(cfg, V, V)
    old = {k.replace("encoder.layers.", "encoder_layers.").replace("encoder.norm.", "encoder_norm."): v.clone()
           for k, v in model.state_dict().items()}
    assert any(k.startswith("encoder_layers.") for k in old)
    fresh = build_model(cfg, V, V)
    load_model_state(fresh, {"model": old}, "old.pt")
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_analyze_draws_both_phases_over_words_and_hypernodes(tmp_path):
    """Fig. 3: structnmt analyze writes phase 1 and phase 2 of every PhraseTransformer layer."""
    from structnmt.analysis.heatmaps import run_analyze
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, DecodeConfig, TrainConfig
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus

    write_corpus(SynthConfig(seed=4, n_train=150, n_valid=10, n_test=10), tmp_path / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(tmp_path / "c" / "train"),
                          validpref=str(tmp_path / "c" / "valid"), testprefs=[str(tmp_path / "c" / "test")],
                          vocab_size=200), tmp_path / "bin", progress=False, log=lambda *_: None)
    model = ModelConfig(d_model=32, ffn_dim=64, heads=2, encoder_layers=2, decoder_layers=1)
    model.attention.overrides["encoder_self.1"] = AttentionSpec("phrase_transformer", {"k": 2})
    cfg = Config(data=DataConfig(path=str(tmp_path / "bin"), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(tmp_path / "model"), max_updates=2, validate_interval_updates=2,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=1, max_len_b=3))
    train(cfg, log=lambda *_: None)
    short = min((tmp_path / "c" / "test.src").read_text().splitlines(), key=len)
    (tmp_path / "in.txt").write_text(short + "\n")
    written = {p.name: p for p in run_analyze(checkpoint=tmp_path / "model" / "checkpoint_last.pt",
                                              input_path=tmp_path / "in.txt", out_dir=tmp_path / "out", sentences=1)}
    assert "sent1_phrase_transformer_layer2.png" in written and "sent1_phrase_transformer_layer1.png" not in written
    assert written["sent1_phrase_transformer_layer2.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "sent1_encoder_self.png" in written
