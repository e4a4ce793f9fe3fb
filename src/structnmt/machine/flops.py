"""Model FLOPs of the Transformer encoder-decoder, for model FLOPs utilisation (MFU) figures.

Counted: the matrix products, two FLOPs per multiply-add, over the real (unpadded) tokens of each sentence; not
counted: embeddings, layer norms, softmax, dropout, the loss (a few per cent at these sizes). For a model of width
``d``, feed-forward width ``f``, ``L_e`` encoder and ``L_d`` decoder layers, vocabulary ``V``, and a sentence pair
of ``S`` source and ``T`` target tokens, one forward pass costs

    encoder:  L_e * (S * (8 d^2 + 4 d f) + 4 S^2 d)              Q, K, V, O projections; FFN; Q K^T and A V
    decoder:  L_d * (T * (8 d^2 + 4 d^2 + 4 d f) + S * 4 d^2      self-attention projections; cross-attention
                     + 4 T^2 d + 4 T S d)                         Q and O on the target, K and V on the source
              + T * 2 d V                                        the output projection

and a training step three times that (the backward pass computes two products for each of the forward's).
tests/test_flops.py checks the formula against torch's own count (``torch.utils.flop_counter``) of a small model.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import ModelConfig


def transformer_forward_flops(cfg: ModelConfig, src_lens: Sequence[int], tgt_lens: Sequence[int],
                              vocab: int) -> int:
    """FLOPs of one forward pass over sentence pairs of ``src_lens`` / ``tgt_lens`` tokens (EOS and BOS included,
    padding not) through a plain Transformer of ``cfg`` with a ``vocab``-word output projection."""
    d, f = cfg.d_model, cfg.ffn_dim
    total = 0
    for S, T in zip(src_lens, tgt_lens, strict=True):
        encoder = cfg.encoder_layers * (S * (8 * d * d + 4 * d * f) + 4 * S * S * d)
        decoder = cfg.decoder_layers * (T * (12 * d * d + 4 * d * f) + S * 4 * d * d + 4 * T * T * d + 4 * T * S * d)
        total += encoder + decoder + T * 2 * d * vocab
    return total


def transformer_training_flops(cfg: ModelConfig, src_lens: Sequence[int], tgt_lens: Sequence[int],
                               vocab: int) -> int:
    """FLOPs of one training step (forward and backward) over the batch: three forward passes' worth."""
    return 3 * transformer_forward_flops(cfg, src_lens, tgt_lens, vocab)


def mfu(flops_per_second: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the model's FLOPs per second over the hardware's dense peak."""
    return flops_per_second / peak_flops
