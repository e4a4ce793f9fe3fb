"""MG-SA (Hao et al. 2019): partitions, composition, phrase memories, tag loss, end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from structnmt.config import (
    AttentionSpec,
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    TrainConfig,
)
from structnmt.nn import AttentionContext, AttentionDims, MultiHeadAttention, build_attention
from structnmt.nn.mgsa import (
    MGSAAttention,
    MGSAGroup,
    PhraseLayout,
    gather_phrases,
    phrase_attention_pool,
    phrase_max_pool,
    phrase_tokens,
)
from structnmt.syntax.batching import StructureSpec

D, H = 16, 4

# Three sentences: word_of_piece of the pieces (EOS is appended as its own phrase).
WOPS = [[0, 0, 1, 2, 3, 3, 4, 5], [0, 1, 2, 2, 3], [0, 1, 2]]
# Word-level phrase ids of the top three syntactic levels per sentence.
SYNTAX = [
    [[0, 1, 1, 1, 1, 1], [0, 1, 2, 2, 3, 3], [0, 1, 2, 3, 4, 5]],
    [[0, 1, 1, 1, 1], [0, 1, 2, 2, 3], [0, 1, 2, 3, 3]],
    [[0, 1, 1], [0, 1, 2], [0, 1, 2]],
]


def _pad_rows(rows: list[list[int]], S: int, fill: int) -> torch.Tensor:
    return torch.tensor([r + [fill] * (S - len(r)) for r in rows])


def make_batch(seed: int = 0, num_labels: int = 10) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """x (B, S, D), key mask (B, S) and structures laid out like the collator's."""
    g = torch.Generator().manual_seed(seed)
    lens = [len(w) + 1 for w in WOPS]
    S = max(lens)
    x = torch.randn(len(WOPS), S, D, generator=g)
    key_mask = torch.arange(S)[None] < torch.tensor(lens)[:, None]
    x = x * key_mask[..., None]
    st: dict[str, torch.Tensor] = {}
    for n in (1, 2, 3, 4):
        rows = []
        for w in WOPS:
            ids = [p // n for p in w]
            rows.append(ids + [ids[-1] + 1])
        st[f"mgsa.ngram{n}"] = _pad_rows(rows, S, -1)
    levels, labels = [], []
    M = max(max(lv) for s in SYNTAX for lv in s) + 2
    for w, sent in zip(WOPS, SYNTAX):
        per_level, lab_level = [], []
        for lv in sent:
            ids = [lv[p] for p in w]
            per_level.append(ids + [ids[-1] + 1] + [-1] * (S - len(w) - 1))
            n_phr = max(lv) + 1
            labs = torch.randint(0, num_labels, (n_phr,), generator=g).tolist()
            lab_level.append(labs + [-100] * (M - n_phr))  # EOS's phrase and padding ignored
        levels.append(per_level)
        labels.append(lab_level)
    st["mgsa.syntax"] = torch.tensor(levels)
    st["mgsa.syntax.labels"] = torch.tensor(labels)
    return x, key_mask, st


def make_mgsa(groups=None, seed: int = 0, **options) -> MGSAAttention:
    torch.manual_seed(seed)
    opts = dict(options)
    if groups is not None:
        opts["groups"] = groups
    return build_attention("mgsa", opts, AttentionDims(D, H, 0.0, "encoder_self", "enc.0.self")).eval()


def _phrases(ids_row: torch.Tensor) -> list[list[int]]:
    """Token positions of each phrase of one sentence, by a plain loop."""
    out: dict[int, list[int]] = {}
    for t, p in enumerate(ids_row.tolist()):
        if p >= 0:
            out.setdefault(p, []).append(t)
    return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------- partitions + composition


def test_layout_of_a_hand_built_partition():
    ids = torch.tensor([[0, 0, 1, 2, 2, 2], [0, 1, 1, -1, -1, -1]])
    lay = PhraseLayout.from_ids(ids)
    assert lay.mask.tolist() == [[True, True, True], [True, True, False]]
    assert lay.length.tolist() == [[2, 1, 3], [1, 2, 0]]
    assert lay.index.tolist() == [[0, 0, 1, 2, 2, 2], [0, 1, 1, 3, 3, 3]]
    x = torch.arange(12.0).view(2, 6, 1)
    toks = gather_phrases(x, lay)[..., 0]  # (B, M, L): slots past a phrase's end repeat its last token
    assert toks.tolist() == [[[0, 1, 1], [2, 2, 2], [3, 4, 5]], [[6, 6, 6], [7, 8, 8], toks[1, 2].tolist()]]
    assert lay.token_mask[0].tolist() == [[True, True, False], [True, False, False], [True, True, True]]


def test_max_pooling_equals_a_manual_max_per_phrase():
    x, _, st = make_batch()
    for key in ("mgsa.ngram2", "mgsa.ngram3"):
        lay = PhraseLayout.from_ids(st[key])
        g = phrase_max_pool(x, lay)
        assert g.shape == (3, lay.num_phrases, D)
        for b in range(3):
            phrases = _phrases(st[key][b])
            for m, toks in enumerate(phrases):
                torch.testing.assert_close(g[b, m], x[b, toks].max(0).values)
            assert float(g[b, len(phrases):].abs().sum()) == 0.0
    # a concrete number: the 2-gram (words 0,1) of sentence 0 holds pieces 0, 1, 2
    assert _phrases(st["mgsa.ngram2"][0])[0] == [0, 1, 2]


@pytest.mark.parametrize("key", ["mgsa.ngram2", "mgsa.ngram4"])
def test_san_composition_equals_a_per_phrase_loop(key):
    x, _, st = make_batch(1)
    att = make_mgsa([{"kind": "word", "heads": 2}, {"kind": "ngram", "heads": 2, "n": int(key[-1])}],
                    composition="san")
    pm = att.phrase_memories["1"]
    lay = PhraseLayout.from_ids(st[key])
    g = pm.compose(x, lay)
    for b in range(3):
        for m, toks in enumerate(_phrases(st[key][b])):
            X = x[b, toks]  # (l, D)
            q = pm.san(X.max(0).values)
            a = torch.softmax(X @ q / math.sqrt(D), 0)
            torch.testing.assert_close(g[b, m], a @ X)
    # the helper on its own with a hand-made query: uniform weights for a zero query
    mean = phrase_attention_pool(x, torch.zeros(3, lay.num_phrases, D), lay)
    torch.testing.assert_close(mean[0, 0], x[0, _phrases(st[key][0])[0]].mean(0))


def test_lstm_composition_equals_a_per_phrase_loop():
    x, _, st = make_batch(2)
    att = make_mgsa([{"kind": "word", "heads": 1}, {"kind": "syntax", "heads": 3, "level": 1}], composition="lstm")
    pm = att.phrase_memories["1"]
    ids = st["mgsa.syntax"][:, 0]
    lay = PhraseLayout.from_ids(ids)
    tokens, lengths, flat = phrase_tokens(x, lay)
    assert tokens.shape[0] == int(lay.mask.sum()) and int(lengths.max()) == tokens.shape[1]
    g = pm.compose(x, lay)
    for b in range(3):
        for m, toks in enumerate(_phrases(ids[b])):
            out, _ = pm.com_lstm(x[b, toks][None])
            torch.testing.assert_close(g[b, m], out[0, -1])


# --------------------------------------------------------------------------- the mechanism


def _reference_max(att: MGSAAttention, x: torch.Tensor, key_mask: torch.Tensor, st: dict) -> torch.Tensor:
    """MG-SA with max-pooling and no interaction, one sentence and one head at a time."""
    dh = D // H
    Wk, Wv = att.kv_proj.weight[:D], att.kv_proj.weight[D:]
    bk, bv = att.kv_proj.bias[:D], att.kv_proj.bias[D:]
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        n = int(key_mask[b].sum())
        xb = x[b, :n]
        heads = []
        h = 0
        for g in att.groups:
            if g.kind == "word":
                mem = xb
            else:
                ids = st[f"mgsa.ngram{g.n}"][b] if g.kind == "ngram" else st["mgsa.syntax"][b, g.level - 1]
                mem = torch.stack([xb[toks].max(0).values for toks in _phrases(ids[:n])])
            for _ in range(g.heads):
                s = slice(h * dh, (h + 1) * dh)
                q = xb @ att.q_proj.weight[s].T + att.q_proj.bias[s]
                k = mem @ Wk[s].T + bk[s]
                v = mem @ Wv[s].T + bv[s]
                heads.append(torch.softmax(q @ k.T / math.sqrt(dh), -1) @ v)
                h += 1
        out[b, :n] = att.out_proj(torch.cat(heads, -1))
    return out


@pytest.mark.parametrize("groups", [None, [{"kind": "ngram", "heads": 2, "n": 3}, {"kind": "word", "heads": 1},
                                           {"kind": "syntax", "heads": 1, "level": 2}]])
def test_batched_forward_equals_a_per_sentence_per_head_reference(groups):
    x, key_mask, st = make_batch(3)
    att = make_mgsa(groups, composition="max")
    out = att(x, x, AttentionContext(key_mask=key_mask, structures=st)).output
    ref = _reference_max(att, x, key_mask, st)
    torch.testing.assert_close(out * key_mask[..., None], ref)


@pytest.mark.parametrize("groups", [[{"kind": "word", "heads": 4}],
                                    [{"kind": "word", "heads": 1}, {"kind": "word", "heads": 3}]])
def test_every_head_word_level_equals_plain_multi_head_attention(groups):
    x, key_mask, _ = make_batch(4)
    torch.manual_seed(5)
    mha = MultiHeadAttention(dims=AttentionDims(D, H, 0.0, "encoder_self", "enc.0.self"))
    att = make_mgsa(groups, seed=9)
    att.load_state_dict(mha.state_dict())  # strict: no extra parameters for word-only groups
    ctx = AttentionContext(key_mask=key_mask, need_weights=True)
    a, b = att(x, x, ctx), mha(x, x, ctx)
    torch.testing.assert_close(a.output, b.output)
    torch.testing.assert_close(a.weights, b.weights)
    ctx = AttentionContext(key_mask=key_mask)  # SDPA fast path too
    torch.testing.assert_close(att(x, x, ctx).output, mha(x, x, ctx).output)


def test_each_group_has_its_own_memory_length_and_mask():
    x, key_mask, st = make_batch(5)
    att = make_mgsa(preset="ngram", composition="max").requires_grad_(False)  # word, 2-, 3-, 4-gram
    out = att(x, x, AttentionContext(key_mask=key_mask, structures=st, need_weights=True))
    assert out.output.shape == x.shape
    lens = [w.shape[-1] for w in out.extras["group_weights"]]
    assert lens == [9, 4, 3, 3]  # S, then ceil(6 words / n) phrases + EOS for the longest sentence
    assert [w.shape[1] for w in out.extras["group_weights"]] == [1, 1, 1, 1]
    two = out.extras["group_weights"][1]
    # sentence 2 has 3 words: 2 bigrams + EOS = 3 phrases; the 4th slot is masked
    assert float(two[2, :, :, 3:].abs().sum()) == 0.0 and float(two[2, :, :, 2].min()) > 0
    # token-level view: rows of real queries sum to one, padding gets nothing
    tw = out.weights
    assert tw.shape == (3, H, 9, 9)
    torch.testing.assert_close(tw.sum(-1)[2, :, :4], torch.ones(H, 4))
    assert float(tw[2, :, :, 4:].abs().sum()) == 0.0


@pytest.mark.parametrize("composition", ["max", "san", "lstm"])
@pytest.mark.parametrize("interaction", ["none", "lstm", "on_lstm"])
def test_padding_invariance(composition, interaction):
    x, key_mask, st = make_batch(6)
    groups = [{"kind": "word", "heads": 1}, {"kind": "ngram", "heads": 1, "n": 2},
              {"kind": "syntax", "heads": 1, "level": 1}, {"kind": "syntax", "heads": 1, "level": 3}]
    att = make_mgsa(groups, composition=composition, interaction=interaction, chunk_size=4)
    full = att(x, x, AttentionContext(key_mask=key_mask, structures=st)).output
    for b in (1, 2):
        n = int(key_mask[b].sum())
        sub = {k: v[b : b + 1, ..., :n] for k, v in st.items() if not k.endswith(".labels")}
        M = int(sub["mgsa.syntax"].max()) + 1
        sub["mgsa.syntax.labels"] = st["mgsa.syntax.labels"][b : b + 1, :, :M]
        alone = att(x[b : b + 1, :n], x[b : b + 1, :n], AttentionContext(structures=sub)).output
        torch.testing.assert_close(full[b, :n], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("composition,interaction", [("lstm", "on_lstm"), ("san", "lstm"), ("max", "on_lstm")])
def test_gradients_reach_every_parameter(composition, interaction):
    x, key_mask, st = make_batch(7)
    x.requires_grad_(True)
    groups = [{"kind": "word", "heads": 1}, {"kind": "ngram", "heads": 1, "n": 2},
              {"kind": "syntax", "heads": 1, "level": 1}, {"kind": "syntax", "heads": 1, "level": 2}]
    att = make_mgsa(groups, composition=composition, interaction=interaction, chunk_size=4, num_tags=10).train()
    out = att(x, x, AttentionContext(key_mask=key_mask, structures=st))
    assert set(out.aux_losses) == {"mgsa_tag"}
    (out.output.pow(2).sum() + out.aux_losses["mgsa_tag"]).backward()
    names = [n for n, _ in att.named_parameters()]
    assert any(n.startswith("tagger.") for n in names)
    assert any(".rec." in n for n in names)
    for name, p in att.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name
    assert float(x.grad.abs().sum()) > 0


def test_tag_loss_is_lambda_times_mean_nll_over_labelled_phrases():
    x, key_mask, st = make_batch(8)
    groups = [{"kind": "word", "heads": 2}, {"kind": "syntax", "heads": 1, "level": 1},
              {"kind": "syntax", "heads": 1, "level": 2}]
    att = make_mgsa(groups, composition="max", tag_loss_weight=0.5, num_tags=10)
    loss = att(x, x, AttentionContext(key_mask=key_mask, structures=st)).aux_losses["mgsa_tag"]
    nll, count = 0.0, 0
    for level in (1, 2):
        for b in range(3):
            phrases = _phrases(st["mgsa.syntax"][b, level - 1])
            for m, toks in enumerate(phrases):
                label = int(st["mgsa.syntax.labels"][b, level - 1, m])
                if label == -100:
                    continue
                logp = torch.log_softmax(att.tagger(x[b, toks].max(0).values), -1)
                nll, count = nll - logp[label], count + 1
    assert count == sum(max(s[0]) + 1 + max(s[1]) + 1 for s in SYNTAX)  # every phrase but EOS's
    torch.testing.assert_close(loss, 0.5 * nll / count)
    # no labels in the batch -> no tag loss; no tagger at all with lambda = 0
    no_labels = {k: v for k, v in st.items() if not k.endswith(".labels")}
    assert att(x, x, AttentionContext(key_mask=key_mask, structures=no_labels)).aux_losses == {}
    assert make_mgsa(groups, tag_loss_weight=0.0).tagger is None


def test_label_ids_beyond_num_tags_are_a_clear_error():
    x, key_mask, st = make_batch(9, num_labels=20)
    att = make_mgsa(preset="syntax", num_tags=5)
    with pytest.raises(ValueError, match="outside \\[0, num_tags=5\\).*num_tags"):
        att(x, x, AttentionContext(key_mask=key_mask, structures=st))


# --------------------------------------------------------------------------- options


def test_presets_and_required_structures():
    att = make_mgsa()
    assert [(g.kind, g.heads, g.n) for g in att.groups] == [("word", 1, 0), ("ngram", 1, 2), ("ngram", 1, 3),
                                                            ("ngram", 1, 4)]
    assert att.required_structures() == {f"mgsa.ngram{n}": StructureSpec("ngram_partition", {"n": n})
                                         for n in (2, 3, 4)}
    eight = build_attention("mgsa", {"preset": "syntax"}, AttentionDims(32, 8, 0.0, "encoder_self", "e"))
    assert [(g.kind, g.heads, g.level) for g in eight.groups] == [("word", 2, 0), ("syntax", 2, 1),
                                                                  ("syntax", 2, 2), ("syntax", 2, 3)]
    assert eight.required_structures() == {"mgsa.syntax": StructureSpec("syntax_partition", {"K": 3})}
    assert eight.groups[1] == MGSAGroup("syntax", 2, level=1)


@pytest.mark.parametrize("options,match", [
    ({"groups": [{"kind": "ngram", "heads": 3, "n": 2}]}, "sum to 3 but the layer has 4 heads"),
    ({"groups": [{"kind": "ngram", "heads": 4}]}, "needs n >= 1"),
    ({"groups": [{"kind": "syntax", "heads": 4, "n": 2, "level": 1}]}, "'n' applies to ngram groups only"),
    ({"groups": [{"kind": "phrase", "heads": 4}]}, "unknown kind 'phrase'"),
    ({"groups": [{"kind": "word", "head": 4}]}, "unknown key 'head'; did you mean 'heads'"),
    ({"compositon": "max"}, "unknown key 'compositon'; did you mean 'composition'"),
    ({"composition": "cnn"}, "unknown composition 'cnn'"),
    ({"interaction": "on_lstm", "chunk_size": 5}, "chunk_size 5 must divide hidden size 16"),
    ({"preset": "syntax", "groups": [{"kind": "word", "heads": 4}]}, "either 'groups' or 'preset'"),
])
def test_options_are_checked(options, match):
    with pytest.raises(ConfigError, match=match):
        build_attention("mgsa", options, AttentionDims(D, H, 0.0, "encoder_self", "enc.0.self"))


def test_presets_need_heads_divisible_by_four_and_the_encoder_role():
    with pytest.raises(ConfigError, match="heads=6 is not divisible by 4"):
        build_attention("mgsa", {}, AttentionDims(24, 6, 0.0, "encoder_self", "e"))
    for role in ("decoder_self", "cross"):
        with pytest.raises(ConfigError, match="encoder self-attention only"):
            build_attention("mgsa", {}, AttentionDims(D, H, 0.0, role, "d"))


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def parsed_data(tmp_path_factory) -> Path:
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus
    from structnmt.syntax.parsers import ParserConfig

    root = tmp_path_factory.mktemp("mgsa")
    write_corpus(SynthConfig(seed=4, n_train=200, n_valid=16, n_test=16), root / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                          validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")], vocab_size=300,
                          parser=ParserConfig(name="synthetic")), root / "bin", progress=False, log=lambda *_: None)
    return root


def test_transformer_with_mgsa_trains_and_logs_the_tag_loss(parsed_data):
    from structnmt.cli.training import train
    from structnmt.models.transformer import TransformerModel

    root = parsed_data
    labels = json.loads((root / "bin" / "manifest.json").read_text())["syntax"]["labels"]
    options = {"preset": "syntax", "interaction": "on_lstm", "chunk_size": 4, "num_tags": len(labels),
               "tag_loss_weight": 0.01}
    model_cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=1)
    model_cfg.attention.overrides = {"encoder_self.0": AttentionSpec(name="mgsa", options=options)}
    cfg = Config(
        data=DataConfig(path=str(root / "bin"), max_tokens=600),
        model=model_cfg,
        train=TrainConfig(save_dir=str(root / "model"), max_updates=4, validate_interval_updates=4,
                          validate_bleu=False, tensorboard=False, progress=False, log_interval=1),
    )
    model = TransformerModel(model_cfg, 100, 100)
    assert isinstance(model.encoder_layers[0].self_attn, MGSAAttention)
    assert type(model.encoder_layers[1].self_attn) is MultiHeadAttention
    assert set(model.required_structures()) == {"mgsa.syntax"}
    state = train(cfg, log=lambda *_: None)
    assert state.num_updates == 4
    records = [json.loads(line) for line in (root / "model" / "metrics.jsonl").read_text().splitlines()]
    tags = [r["aux_mgsa_tag"] for r in records if r["kind"] == "train"]
    assert len(tags) == 4 and all(math.isfinite(t) and t > 0 for t in tags)
    # it is lambda * NLL: about 0.01 * log(num_tags) at initialisation
    assert tags[0] == pytest.approx(0.01 * math.log(len(labels)), rel=0.5)
