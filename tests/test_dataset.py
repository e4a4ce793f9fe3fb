"""Tests for memory-mapped splits, token-based batching and collation (structnmt.data.dataset)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structnmt.data.dataset import (
    DatasetError,
    EpochBatchIterator,
    PreparedDataset,
    collate,
    encode_sources,
    make_batches,
    pad_sources,
)
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.vocab import BOS, EOS, PAD

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau".split()

lengths = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=0, max_size=300)


def _arrays(pairs):
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    tgt = np.array([p[1] for p in pairs], dtype=np.int64)
    return src, tgt


# ---------------------------------------------------------------------------- make_batches


@settings(max_examples=150, deadline=None)
@given(pairs=lengths, max_tokens=st.integers(1, 400), max_sentences=st.integers(0, 20),
       max_len=st.integers(0, 70), seed=st.integers(0, 2**31))
def test_make_batches_properties(pairs, max_tokens, max_sentences, max_len, seed):
    src, tgt = _arrays(pairs)
    batches, filtered = make_batches(src, tgt, max_tokens=max_tokens, max_sentences=max_sentences,
                                     max_len=max_len, seed=seed)
    size = np.maximum(src, tgt) + 1  # EOS included
    too_long = set(np.flatnonzero(size > max_len).tolist()) if max_len > 0 else set()
    assert filtered == len(too_long)
    flat = np.concatenate(batches).tolist() if batches else []
    assert len(flat) == len(set(flat))  # no index twice
    assert set(flat) == set(range(len(pairs))) - too_long  # every kept index once
    for b in batches:
        assert len(b) >= 1
        if len(b) > 1:
            assert len(b) * int(size[b].max()) <= max_tokens
            if max_sentences:
                assert len(b) <= max_sentences
    again, _ = make_batches(src, tgt, max_tokens=max_tokens, max_sentences=max_sentences,
                            max_len=max_len, seed=seed)
    assert len(again) == len(batches) and all(np.array_equal(a, b) for a, b in zip(again, batches))


def test_make_batches_filters_exactly_the_over_long():
    src = np.array([5, 9, 10, 3, 20, 9])
    tgt = np.array([5, 3, 2, 10, 1, 9])
    batches, filtered = make_batches(src, tgt, max_tokens=1000, max_len=10)
    # sizes with EOS: 6, 10, 11, 11, 21, 10 -> indices 2, 3 and 4 are too long
    assert filtered == 3
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 5]
    _, none = make_batches(src, tgt, max_tokens=1000, max_len=0)
    assert none == 0


def test_make_batches_single_over_budget_sentence_gets_own_batch():
    src = np.array([3, 100, 3, 3])
    tgt = np.array([3, 100, 3, 3])
    batches, _ = make_batches(src, tgt, max_tokens=50)
    big = [b for b in batches if 1 in b.tolist()]
    assert len(big) == 1 and big[0].tolist() == [1]
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 2, 3]


def test_make_batches_are_length_bucketed():
    rng = np.random.default_rng(0)
    n = 5000
    tgt = rng.integers(5, 120, size=n)
    src = np.maximum(1, (tgt * rng.uniform(0.8, 1.25, size=n)).astype(np.int64))
    batches, _ = make_batches(src, tgt, max_tokens=4000, seed=3)
    # batches are cut from the (target, source)-length order: their target ranges do not overlap
    for a, b in zip(batches, batches[1:]):
        assert tgt[a].max() <= tgt[b].min()
    ratios = [tgt[b].max() / tgt[b].min() for b in batches if tgt[b].min() >= 20]
    assert len(ratios) > 20 and max(ratios) <= 1.2
    # a random (unsorted) cut would mix lengths widely
    fill = [len(b) * (np.maximum(src[b], tgt[b]).max() + 1) for b in batches]
    real = [(np.maximum(src[b], tgt[b]) + 1).sum() for b in batches]
    assert sum(real) / sum(fill) > 0.8  # little padding


def test_make_batches_seed_changes_only_tie_order():
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(1, 10, size=400), rng.integers(1, 10, size=400)
    a, _ = make_batches(src, tgt, max_tokens=200, seed=1)
    b, _ = make_batches(src, tgt, max_tokens=200, seed=2)
    fa, fb = np.concatenate(a), np.concatenate(b)
    assert not np.array_equal(fa, fb)  # ties are broken differently
    assert np.array_equal(tgt[fa], tgt[fb]) and np.array_equal(src[fa], src[fb])  # same length order


def test_make_batches_empty():
    batches, filtered = make_batches(np.zeros(0, np.int64), np.zeros(0, np.int64), max_tokens=100)
    assert batches == [] and filtered == 0


# ---------------------------------------------------------------------------- EpochBatchIterator


def _fake_batches(n: int) -> list[np.ndarray]:
    return [np.arange(3 * i, 3 * i + 3) for i in range(n)]


def _keys(batches) -> list[tuple[int, ...]]:
    return [tuple(b.tolist()) for b in batches]


def test_epoch_order_depends_on_seed_and_epoch_only():
    batches = _fake_batches(50)
    it = EpochBatchIterator(batches, seed=7)
    e1 = _keys(it.epoch_order(1))
    assert sorted(e1) == sorted(_keys(batches))
    assert e1 == _keys(EpochBatchIterator(list(batches), seed=7).epoch_order(1))  # a fresh object
    assert e1 == _keys(it.epoch_order(1))  # repeatable (e.g. on resume)
    assert e1 != _keys(it.epoch_order(2))
    assert e1 != _keys(EpochBatchIterator(batches, seed=8).epoch_order(1))
    np.random.seed(123)
    random.seed(123)
    torch.manual_seed(123)  # global RNG state plays no role
    assert e1 == _keys(it.epoch_order(1))
    assert len(it) == 50


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 50])
@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_ranks_step_together_and_cover_every_batch(n, world):
    batches = _fake_batches(n)
    for epoch in (1, 2):
        per_rank = [EpochBatchIterator(batches, seed=3, rank=r, world_size=world).epoch_order(epoch)
                    for r in range(world)]
        counts = {len(p) for p in per_rank}
        assert counts == {-(-n // world)}
        assert all(len(EpochBatchIterator(batches, seed=3, rank=r, world_size=world)) == len(per_rank[r])
                   for r in range(world))
        union = [k for p in per_rank for k in _keys(p)]
        assert set(union) == set(_keys(batches))  # together they cover every batch
        assert len(union) - n == -(-n // world) * world - n  # only the padding repeats


def test_two_ranks_partition_the_single_process_order():
    batches = _fake_batches(21)
    single = _keys(EpochBatchIterator(batches, seed=5).epoch_order(4))
    r0 = _keys(EpochBatchIterator(batches, seed=5, rank=0, world_size=2).epoch_order(4))
    r1 = _keys(EpochBatchIterator(batches, seed=5, rank=1, world_size=2).epoch_order(4))
    assert len(r0) == len(r1) == 11
    assert r0 == single[0::2] and r1[:10] == single[1::2]
    assert r1[10] == single[0]  # padded with the first batch


# ---------------------------------------------------------------------------- prepared data + collate


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ds")
    rng = random.Random(0)
    for lang in ("en", "de"):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 15))) for _ in range(300)]
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = PrepareConfig(source_lang="en", target_lang="de", trainpref=str(root / "train"), vocab_size=120)
    prepare(cfg, root / "data", progress=False, log=lambda _m: None)
    return root / "data"


def test_prepared_split_is_memory_mapped(prepared):
    ds = PreparedDataset(prepared)
    assert ds.splits == ["train"]
    sp = ds.split("train")
    assert isinstance(sp.data["src"], np.memmap) and isinstance(sp.data["tgt"], np.memmap)
    assert len(sp) == 300 and sp.src_lens.dtype == np.int64
    assert all(len(sp.get("src", i)) == sp.src_lens[i] for i in range(len(sp)))


def test_missing_dataset_is_reported(tmp_path):
    with pytest.raises(DatasetError, match=r"manifest.json: no prepared dataset here; run `structnmt prepare` first"):
        PreparedDataset(tmp_path)


def test_collate_layout(prepared):
    ds = PreparedDataset(prepared)
    sp = ds.split("train")
    ids = np.array([4, 0, 17, 250])
    batch = collate(sp, ids)
    srcs = [sp.get("src", int(i)) for i in ids]
    tgts = [sp.get("tgt", int(i)) for i in ids]
    S = max(len(s) for s in srcs) + 1
    T = max(len(t) for t in tgts) + 1
    assert batch.src.shape == (4, S) and batch.src_mask.shape == (4, S)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (4, T)
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    assert batch.src_mask.dtype == torch.bool
    assert batch.ids.tolist() == ids.tolist()
    for b, (s, t) in enumerate(zip(srcs, tgts)):
        ls, lt = len(s), len(t)
        assert batch.src[b, :ls].tolist() == s.tolist() and batch.src[b, ls] == EOS
        assert (batch.src[b, ls + 1:] == PAD).all()
        assert batch.src_mask[b, : ls + 1].all() and not batch.src_mask[b, ls + 1:].any()  # True = real
        assert batch.tgt_in[b, 0] == BOS and batch.tgt_in[b, 1: lt + 1].tolist() == t.tolist()
        assert (batch.tgt_in[b, lt + 1:] == PAD).all()
        assert batch.tgt_out[b, :lt].tolist() == t.tolist() and batch.tgt_out[b, lt] == EOS
        assert (batch.tgt_out[b, lt + 1:] == PAD).all()
        # teacher forcing: the decoder input is the label shifted right by one
        assert batch.tgt_in[b, 1: lt + 1].tolist() == batch.tgt_out[b, :lt].tolist()
        assert ds.tgt_vocab.decode(batch.tgt_out[b].tolist()) == ds.tgt_vocab.decode(t.tolist())
    assert batch.n_tgt_tokens == sum(len(t) + 1 for t in tgts)
    assert not (batch.src[batch.src_mask] == PAD).any()


def test_batches_of_a_prepared_split_collate_within_budget(prepared):
    sp = PreparedDataset(prepared).split("train")
    batches, filtered = make_batches(sp.src_lens, sp.tgt_lens, max_tokens=200, max_len=14, seed=2)
    assert filtered == int((np.maximum(sp.src_lens, sp.tgt_lens) + 1 > 14).sum())
    seen = []
    for ids in EpochBatchIterator(batches, seed=2).epoch_order(1):
        b = collate(sp, ids)
        seen.extend(b.ids.tolist())
        assert b.src.shape[1] <= 14 and b.tgt_out.shape[1] <= 14
        if len(ids) > 1:
            assert len(ids) * max(b.src.shape[1], b.tgt_out.shape[1]) <= 200
    assert len(seen) == len(set(seen)) == len(sp) - filtered


def test_encode_and_pad_sources(prepared):
    vocab = PreparedDataset(prepared).src_vocab
    seqs = encode_sources(vocab, ["alpha beta", "gamma delta epsilon zeta eta"])
    assert all(s[-1] == EOS for s in seqs)
    src, mask = pad_sources(seqs)
    assert src.shape == (2, max(len(s) for s in seqs))
    assert mask.dtype == torch.bool and mask.sum().item() == sum(len(s) for s in seqs)
    assert mask[0, : len(seqs[0])].all() and not mask[0, len(seqs[0]):].any()
