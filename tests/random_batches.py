"""A random source/target batch with padding, shared by the model and attention tests."""

from __future__ import annotations

import torch

from structnmt.data.vocab import BOS, PAD


def random_batch(vocab: int, B: int = 3, S: int = 7, T: int = 6, seed: int = 1):
    """(src (B, S), src_mask (B, S), tgt_in (B, T)): ids in [4, vocab), sentence 1 padded
    in its last two source positions, every target starting with BOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (B, S), generator=g)
    tgt = torch.randint(4, vocab, (B, T), generator=g)
    tgt[:, 0] = BOS
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[1, S - 2 :] = False
    src[~mask] = PAD
    return src, mask, tgt


def assert_incremental_equals_full(model, vocab: int = 40, T: int = 8, cut: int = 4) -> None:
    """Step-by-step decoding with the cache equals the full pass, also after a beam reordering of the cache at
    step ``cut`` (rows 2, 0, 0: a hypothesis dropped, one duplicated)."""
    from torch.testing import assert_close

    from structnmt.nn import IncrementalCache

    src, mask, tgt = random_batch(vocab, B=3, S=7, T=T)
    full = torch.log_softmax(model(src, mask, tgt).logits, dim=-1)
    enc = model.encode(src, mask)
    cache = IncrementalCache()
    steps = [model.decode_step(tgt[:, : t + 1], enc, cache) for t in range(T)]
    assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    perm = torch.tensor([2, 0, 0])
    cache = IncrementalCache()
    for t in range(cut):
        model.decode_step(tgt[:, : t + 1], enc, cache)
    cache.reorder(perm)
    new_tgt = tgt[perm]
    got = [model.decode_step(new_tgt[:, : t + 1], enc.reorder(perm), cache) for t in range(cut, T)]
    want = torch.log_softmax(model(src[perm], mask[perm], new_tgt).logits, dim=-1)[:, cut:]
    assert_close(torch.stack(got, 1), want, atol=1e-5, rtol=1e-5)
