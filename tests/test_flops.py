"""The MFU formula (structnmt.machine.flops) against torch's own count of a small model's matrix products."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from structnmt.config import ModelConfig
from structnmt.machine.flops import mfu, transformer_forward_flops, transformer_training_flops
from structnmt.models import build_model


def _counted(model, B: int, S: int, T: int, V: int, *, backward: bool) -> int:
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, V, (B, S), generator=g), torch.randint(4, V, (B, T), generator=g)
    with FlopCounterMode(display=False) as counter:
        # need_weights: attention on the explicit path, whose products torch counts (its CPU SDPA kernel has none)
        out = model(src, torch.ones(B, S, dtype=torch.bool), tgt, need_weights=True)
        if backward:
            out.logits.sum().backward()
    return counter.get_total_flops()


def test_the_forward_formula_equals_torchs_count_of_every_matrix_product():
    cfg = ModelConfig(d_model=32, ffn_dim=48, heads=4, encoder_layers=2, decoder_layers=3, dropout=0.0)
    model = build_model(cfg, 100, 100)
    for B, S, T in ((3, 7, 5), (1, 11, 13)):
        assert transformer_forward_flops(cfg, [S] * B, [T] * B, 100) == _counted(model, B, S, T, 100, backward=False)


def test_a_training_step_is_three_forward_passes_and_lengths_count_per_sentence():
    cfg = ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1, dropout=0.0)
    model = build_model(cfg, 50, 50)
    assert transformer_training_flops(cfg, [6, 6], [4, 4], 50) == _counted(model, 2, 6, 4, 50, backward=True)
    # a batch's FLOPs are its sentences' (padding not counted): the sum over a split batch
    both = transformer_forward_flops(cfg, [6, 9], [4, 2], 50)
    assert both == transformer_forward_flops(cfg, [6], [4], 50) + transformer_forward_flops(cfg, [9], [2], 50)
    assert mfu(2.5e14, 1e15) == 0.25
