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
