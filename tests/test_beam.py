"""Beam search against a scripted decoder with hand-computed probabilities."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from conftest import random_sources
from hypothesis import given, settings
from hypothesis import strategies as st

from structnmt.config import AttentionSpec, ModelConfig
from structnmt.data.vocab import EOS
from structnmt.decode.beam import beam_search, greedy_search
from structnmt.models import build_model

A, B, C = 4, 5, 6  # token ids after the specials PAD=0 UNK=1 BOS=2 EOS=3
VOCAB = 7


class _Enc:
    """Encoder output of the scripted model: the sentence id of every row."""

    def __init__(self, sid: torch.Tensor):
        self.sid = sid

    def reorder(self, index: torch.Tensor) -> _Enc:
        return _Enc(self.sid.index_select(0, index))


class ScriptedModel:
    """next-token distribution = table[sentence][prefix] (a dict token -> probability)."""

    def __init__(self, tables: list[dict[tuple, dict[int, float]]]):
        self.tables = tables

    def encode(self, src, src_mask, structures):
        return _Enc(torch.arange(src.shape[0]))

    def decode_step(self, tokens, enc, cache, log_probs=True):  # its log-probs are logits too
        out = torch.full((tokens.shape[0], VOCAB), float("-inf"))
        for row in range(tokens.shape[0]):
            prefix = tuple(tokens[row, 1:].tolist())
            dist = self.tables[int(enc.sid[row])].get(prefix, {EOS: 1.0})
            for tok, p in dist.items():
                out[row, tok] = math.log(p)
        return out


# sentence 0: greedy takes a, a; the best unnormalised hypothesis is "b".
TABLE0 = {
    (): {A: 0.6, B: 0.4},
    (A,): {A: 0.5, EOS: 0.3, B: 0.2},
    (B,): {EOS: 0.9, A: 0.1},
}
# sentence 1: a different script in the same batch (rows must not be mixed up)
TABLE1 = {(): {C: 0.7, EOS: 0.3}, (C,): {EOS: 0.8, C: 0.2}}


def _src(n: int, length: int = 5):
    src = torch.full((n, length), 4)
    return src, torch.ones(n, length, dtype=torch.bool)


def test_beam_finds_hand_computed_best_and_nbest_order():
    model = ScriptedModel([TABLE0, TABLE1])
    src, mask = _src(2)
    # length penalty 0: raw log-probabilities. "b" = .4*.9 = .36 beats "a a" = .6*.5 = .30
    out = beam_search(model, src, mask, beam=2, lenpen=0.0, nbest=3)
    # a sentence is finished once it holds `beam` hypotheses: "a b" (.12) is not kept
    assert [h.tokens for h in out[0]] == [[B], [A, A]]
    assert out[0][0].score == pytest.approx(math.log(0.36))
    assert out[0][1].score == pytest.approx(math.log(0.30))
    # "a" + EOS (.18) ranked third among 2K candidates at step 1: never finalised
    assert [A] not in [h.tokens for h in out[0]]
    # sentence 1: "c" = .7*.8 = .56 vs "" = .3
    assert out[1][0].tokens == [C] and out[1][0].score == pytest.approx(math.log(0.56))


def test_length_penalty_normalises_by_length_with_eos():
    model = ScriptedModel([TABLE0])
    src, mask = _src(1)
    out = beam_search(model, src, mask, beam=3, lenpen=1.0, nbest=3)
    # beam 3: at step 1 "b"+EOS (.36) and "a"+EOS (.18) rank within the top 3 and are
    # finalised; at step 2 "a a"+EOS (.30) completes the 3 and "a b" (.12) is not kept.
    # lenpen 1: "a a" ln(.30)/3 = -0.401 > "b" ln(.36)/2 = -0.511 > "a" ln(.18)/2 = -0.857
    assert [h.tokens for h in out[0]] == [[A, A], [B], [A]]
    assert out[0][0].score == pytest.approx(math.log(0.30) / 3)
    assert out[0][0].logprob == pytest.approx(math.log(0.30))


def test_greedy_follows_the_argmax():
    model = ScriptedModel([TABLE0, TABLE1])
    src, mask = _src(2)
    out = greedy_search(model, src, mask, lenpen=0.0)
    assert out[0][0].tokens == [A, A] and out[0][0].logprob == pytest.approx(math.log(0.30))
    assert out[1][0].tokens == [C]


def test_max_length_forces_eos():
    model = ScriptedModel([{(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}}])
    src, mask = _src(1, length=4)
    out = beam_search(model, src, mask, beam=2, max_len_a=0.5, max_len_b=1)  # 0.5*4+1 = 3 with EOS
    assert out[0][0].tokens == [A, A]
    out = greedy_search(model, src, mask, max_len_a=0.5, max_len_b=1)
    assert out[0][0].tokens == [A, A]


def _random_table(seed: int, depth: int) -> dict[tuple, dict[int, float]]:
    g = torch.Generator().manual_seed(seed)
    table = {}
    for n in range(depth):
        for prefix in itertools.product([A, B, C], repeat=n):
            p = torch.rand(4, generator=g) + 0.05
            p = p / p.sum()
            table[prefix] = dict(zip([A, B, C, EOS], p.tolist()))
    return table


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), lenpen=st.sampled_from([0.0, 0.6, 1.0]))
def test_wide_beam_equals_brute_force(seed, lenpen):
    """With a beam wider than the number of hypotheses, beam search is exhaustive."""
    depth = 3  # max 3 tokens incl. EOS: 0.5 * 4 + 1
    table = _random_table(seed, depth)
    model = ScriptedModel([table])
    src, mask = _src(1, length=4)
    best = None
    for n in range(depth):
        for seq in itertools.product([A, B, C], repeat=n):
            lp = sum(math.log(table[seq[:i]][seq[i]]) for i in range(n))
            lp += math.log(table[seq][EOS])  # at the maximum length EOS is forced, with its own score
            score = lp / (n + 1) ** lenpen
            if best is None or score > best[0]:
                best = (score, list(seq))
    out = beam_search(model, src, mask, beam=30, lenpen=lenpen, max_len_a=0.5, max_len_b=1)
    assert out[0][0].tokens == best[1]
    assert out[0][0].score == pytest.approx(best[0])


def test_beam_one_equals_greedy_on_a_transformer():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = build_model(cfg, 30, 30).eval()
    src = torch.randint(4, 30, (6, 9))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[2, 5:] = False
    src[~mask] = 0
    g = greedy_search(model, src, mask, max_len_a=1.0, max_len_b=3)
    b = beam_search(model, src, mask, beam=1, max_len_a=1.0, max_len_b=3)
    assert [h[0].tokens for h in g] == [h[0].tokens for h in b]
    for hg, hb in zip(g, b):
        assert hg[0].logprob == pytest.approx(hb[0].logprob, abs=1e-4)


def test_batched_beam_equals_one_sentence_at_a_time():
    torch.manual_seed(1)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = build_model(cfg, 30, 30).eval()
    src = torch.randint(4, 30, (4, 8))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 6:] = False
    src[~mask] = 0
    batched = beam_search(model, src, mask, beam=3, nbest=2, max_len_a=1.0, max_len_b=2)
    for i in range(4):
        n = int(mask[i].sum())
        single = beam_search(model, src[i : i + 1, :n], mask[i : i + 1, :n], beam=3, nbest=2,
                             max_len_a=1.0, max_len_b=2)
        assert [h.tokens for h in single[0]] == [h.tokens for h in batched[i]]
        for hs, hb in zip(single[0], batched[i]):
            assert hs.score == pytest.approx(hb.score, abs=1e-4)


def test_first_step_decodes_one_row_per_sentence_then_beam_rows():
    """Every hypothesis is the empty prefix at the first step: one row per sentence is decoded there."""
    torch.manual_seed(2)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=2, dropout=0.0)
    model = build_model(cfg, 30, 30).eval()
    rows = []
    step = model.decode_step

    def counting_step(tokens, enc, cache, log_probs=True):
        rows.append(tokens.shape[0])
        return step(tokens, enc, cache, log_probs=log_probs)

    model.decode_step = counting_step
    src, mask = _varied_batch(4, n=3)
    beam_search(model, src, mask, beam=4, max_len_a=1.0, max_len_b=3)
    assert rows[0] == 3 and rows[1] == 12


@pytest.mark.parametrize("share_source", [True, False])
def test_a_sentence_that_ends_at_the_first_step_leaves_the_others_unchanged(share_source):
    """Rows leave the batch right after the one-row-per-sentence first step (the cache's sentences)."""
    torch.manual_seed(3)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=2, dropout=0.0)
    model = build_model(cfg, 30, 30).eval()
    src, mask = _varied_batch(5, n=4, S=6)
    mask[1, 1:] = False  # one source token: maximum length 1.0 * 1 + 0 = 1, EOS forced at the first step
    src[~mask] = 0
    kw = dict(beam=3, nbest=3, max_len_a=1.0, max_len_b=0, share_source=share_source)
    batched = beam_search(model, src, mask, **kw)
    assert all(h.tokens == [] for h in batched[1])
    for i in range(4):
        n = int(mask[i].sum())
        single = beam_search(model, src[i : i + 1, :n], mask[i : i + 1, :n], **kw)
        assert [h.tokens for h in single[0]] == [h.tokens for h in batched[i]]
        for hs, hb in zip(single[0], batched[i]):
            assert hs.score == pytest.approx(hb.score, abs=1e-4)


def test_cache_reorder_with_the_sentences_that_stay():
    from structnmt.nn.attention import IncrementalCache

    cache = IncrementalCache(beam=2)
    src_k = torch.arange(3.0).view(3, 1)
    cache.set("x", {"k": src_k}, per_sentence=True)
    cache.set("self", {"k": torch.arange(3.0).view(3, 1)})  # one row per sentence (a first step)
    # sentence 1 leaves; the others' two rows each come from their one row
    cache.reorder(torch.tensor([0, 0, 2, 2]), sentences=torch.tensor([0, 2]))
    assert torch.equal(cache.get("x")["k"], src_k[[0, 2]])
    assert torch.equal(cache.get("self")["k"].view(-1), torch.tensor([0.0, 0.0, 2.0, 2.0]))


# --------------------------------------------------------------------------- one source row per sentence


def _varied_batch(seed: int, n: int = 5, S: int = 9, vocab: int = 30):
    return random_sources(seed, n, S, vocab, shortest=2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_source_beam_equals_a_copied_source_per_hypothesis(seed):
    """Keeping one encoder row per sentence (and cross K/V per sentence) changes no hypothesis."""
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = build_model(cfg, 30, 30).eval()
    assert model.shares_source_across_beam()
    src, mask = _varied_batch(seed)
    kw = dict(beam=4, nbest=4, max_len_a=1.5, max_len_b=3)
    shared = beam_search(model, src, mask, **kw)
    copied = beam_search(model, src, mask, share_source=False, **kw)
    # sentences finish at different steps (rows leave the batch), so the per-sentence reorder is exercised
    assert len({len(h[0].tokens) for h in copied}) > 1
    for hs, hc in zip(shared, copied):
        assert [h.tokens for h in hs] == [h.tokens for h in hc]
        for a, b in zip(hs, hc):
            assert a.score == pytest.approx(b.score, abs=1e-5)


def test_grouped_cross_attention_equals_a_memory_copied_per_query_row():
    from structnmt.nn.attention import (
        AttentionContext,
        AttentionDims,
        IncrementalCache,
        MultiHeadAttention,
    )

    torch.manual_seed(0)
    mha = MultiHeadAttention(dims=AttentionDims(16, 4, 0.0, "cross", "x")).eval()
    n, g, S = 3, 4, 7
    memory = torch.randn(n, S, 16)
    key_mask = torch.ones(n, S, dtype=torch.bool)
    key_mask[1, 4:] = False
    query = torch.randn(n * g, 1, 16)
    expand = torch.arange(n).repeat_interleave(g)
    ref = mha(query, memory[expand], AttentionContext(key_mask=key_mask[expand], need_weights=True))
    cache = IncrementalCache(beam=g)
    got = mha(query, memory, AttentionContext(key_mask=key_mask, need_weights=True, cache=cache, memory_group=g))
    torch.testing.assert_close(got.output, ref.output, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.weights, ref.weights, atol=1e-6, rtol=1e-5)
    assert cache.get("x")["k"].shape[0] == n  # one row per sentence, not per query row
    # a beam move inside the sentences leaves the per-sentence keys alone ...
    k0 = cache.get("x")["k"]
    cache.reorder(torch.tensor([1, 1, 0, 3, 4, 4, 6, 7, 8, 9, 11, 10]))
    assert cache.get("x")["k"] is k0
    # ... and a sentence leaving the batch (the middle one) drops its row
    cache.reorder(torch.tensor([0, 1, 2, 3, 8, 8, 9, 10]))
    torch.testing.assert_close(cache.get("x")["k"], k0[[0, 2]])
    # per-sentence entries only exist in a beam cache
    with pytest.raises(ValueError, match="per-sentence cache entries need"):
        IncrementalCache().set("y", {"k": k0}, per_sentence=True)


def test_a_decoder_that_cannot_share_the_source_still_decodes_each_hypothesis_against_its_copy():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=2, dropout=0.0)
    cfg.attention.cross = AttentionSpec(name="phrasal_homogeneous", options={"variant": "convkv"})
    model = build_model(cfg, 30, 30).eval()
    assert not model.shares_source_across_beam()
    src, mask = _varied_batch(3, n=3)
    a = beam_search(model, src, mask, beam=3, max_len_a=1.0, max_len_b=2)
    b = beam_search(model, src, mask, beam=3, max_len_a=1.0, max_len_b=2, share_source=False)
    assert [h[0].tokens for h in a] == [h[0].tokens for h in b]


def test_a_model_whose_decode_step_gives_only_log_probs_still_decodes():
    """The decoding protocol's log_probs flag is optional: log-probabilities are logits too."""

    class OldStyle(ScriptedModel):
        def decode_step(self, tokens, enc, cache):
            return super().decode_step(tokens, enc, cache)

    src, mask = _src(2)
    new = beam_search(ScriptedModel([TABLE0, TABLE1]), src, mask, beam=3, nbest=3)
    old = beam_search(OldStyle([TABLE0, TABLE1]), src, mask, beam=3, nbest=3)
    assert [[h.tokens for h in x] for x in new] == [[h.tokens for h in x] for x in old]
    assert [[round(h.score, 6) for h in x] for x in new] == [[round(h.score, 6) for h in x] for x in old]


@pytest.mark.parametrize("V", [40, 4096])  # one top-k, and the two-stage top-k (where NaN ranks first)
def test_top_extensions_equal_log_softmax_topk_with_pad_and_bos_excluded(V):
    """The normaliser is the log-sum-exp over the whole vocabulary (PAD and BOS included); the
    candidates never contain PAD or BOS; an all -inf row stays -inf, not NaN."""
    from structnmt.data.vocab import BOS, PAD
    from structnmt.decode.beam import _top_extensions

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, V, generator=g) * 4
    logits[1, PAD] = 30.0  # PAD the most likely token: it takes mass but is never a candidate
    logits[2, BOS] = 25.0
    logits[3] = float("-inf")
    logits[4, 10:] = float("-inf")
    ref_lp = torch.log_softmax(logits, dim=-1)
    masked = ref_lp.clone()
    masked[:, [PAD, BOS]] = float("-inf")
    ref_v, ref_i = masked.topk(5, dim=1)
    v, i, eos = _top_extensions(logits.clone(), 5)
    live = [0, 1, 2, 4, 5]
    torch.testing.assert_close(v[live], ref_v[live], rtol=0, atol=1e-5)
    assert torch.equal(i[live], ref_i[live])
    torch.testing.assert_close(eos[live, 0], ref_lp[live, EOS], rtol=0, atol=1e-5)
    assert not (i == PAD).any() and not (i == BOS).any()
    assert torch.isneginf(v[3]).all() and not torch.isnan(eos).any()
    assert v[1, 0] < -10  # PAD (logit 30, the others below 20) holds almost all the mass


def test_top_extensions_of_a_strided_last_position_take_the_two_stage_top_k(monkeypatch):
    """A model's (N, t, V)[:, -1] is strided: normalised into a fresh block (the chunked top-k needs
    a contiguous one), the model's output untouched; a contiguous one is normalised in place."""
    import structnmt.decode.beam as bm

    seen = []
    real = bm.topk_rows
    monkeypatch.setattr(bm, "topk_rows", lambda x, k: (seen.append(x.is_contiguous()), real(x, k))[1])
    out = torch.randn(4, 3, 4096, generator=torch.Generator().manual_seed(0))
    before = out.clone()
    v, i, eos = bm._top_extensions(out[:, -1], 10)
    assert seen == [True] and torch.equal(out, before)
    ref = torch.log_softmax(before[:, -1], dim=1)
    torch.testing.assert_close(eos[:, 0], ref[:, EOS])
    flat = before[:, -1].contiguous()
    v2, i2, _ = bm._top_extensions(flat, 10)
    assert torch.equal(v, v2) and torch.equal(i, i2)
    torch.testing.assert_close(flat[:, 7], ref[:, 7])  # written in place


@pytest.mark.parametrize("V,k", [(10000, 10), (4096, 3), (3000, 20), (2053, 10), (500, 10)])
def test_two_stage_topk_equals_topk(V, k):
    from structnmt.decode.beam import topk_rows

    g = torch.Generator().manual_seed(V + k)
    x = torch.randn(37, V, generator=g) * 3
    x[0, : V // 2] = float("-inf")
    x[1, 7] = 100.0  # one dominant entry
    x[2, :] = torch.arange(V, dtype=torch.float)  # the k largest all in the last chunk
    v, i = topk_rows(x, k)
    rv, ri = x.topk(k, dim=1)
    assert torch.equal(v, rv) and torch.equal(i, ri)


def test_cache_extend_applies_pending_reorders_in_its_copy_like_get_then_cat():
    from structnmt.nn.attention import IncrementalCache

    g = torch.Generator().manual_seed(5)
    cache = IncrementalCache()
    ref = {"k": torch.randn(6, 2, 1, 3, generator=g)}
    cache.extend("self", dict(ref), dim=2)
    for step in range(3):
        idx = torch.randint(0, 6, (6,), generator=g)
        cache.reorder(idx)
        if step == 1:
            cache.reorder(idx.flip(0))  # two permutations before the next read compose
            ref = {"k": ref["k"][idx][idx.flip(0)]}
        else:
            ref = {"k": ref["k"][idx]}
        new = torch.randn(6, 2, 1, 3, generator=g)
        got = cache.extend("self", {"k": new}, dim=2)["k"]
        ref = {"k": torch.cat([ref["k"], new], dim=2)}
        assert torch.equal(got, ref["k"])
    cache.reorder(torch.tensor([5, 0, 0]))  # rows leave the batch
    assert torch.equal(cache.get("self")["k"], ref["k"][[5, 0, 0]])
    assert not cache.pending
