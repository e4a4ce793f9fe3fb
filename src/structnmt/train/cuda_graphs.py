"""CUDA graphs for the training step (``train.cuda_graphs``): fewer launches where a small model is launch-bound.

On a GPU a ``transformer_tiny`` step is bound by the Python process that launches its ~600 kernels
(benchmarks/op_counts.py), not by the kernels. A CUDA graph records the kernels of a forward and backward pass
once and replays them with one launch. Here the model's forward (with its backward, through AOTAutograd) is
compiled by TorchDynamo with the ``cudagraphs`` backend (no code generation: the recorded graph runs PyTorch's
own kernels, so nothing is compiled for minutes), ``dynamic=False``: one graph per batch shape.

Batches come in many shapes (the trainer cuts them by tokens from length-sorted sentences), so a graph is only
reused if the shapes repeat: :func:`bucketed` pads a batch's sentence count and both lengths up to multiples of
:data:`BUCKET` with padding the model masks and the loss ignores (a padding row has a source of EOS, a target of BOS and
outputs of padding only), so a run meets a few dozen shapes instead of hundreds. The losses of a padded batch equal the
unpadded one's up to float rounding (dropout draws other masks for the larger tensors: another random stream).

Where it applies (refused elsewhere, in one sentence): a CUDA device, a model that reads no source structures
(their shapes are the model's own, per sentence), not of the RNN family (its packed LSTM and its loop over target
steps break the graph at every step), and one batch an update (a replayed graph writes its gradients into memory
the next replay overwrites, so ``train.update_freq`` > 1 would lose some). A model that reads values on the
host inside its forward (the matrix-tree rows decide their path there) is compiled in pieces between those reads
(TorchDynamo's graph breaks), with less to gain. It stays off on the CPU, where compiling measured 0.82 times the
eager step (benchmarks/README.md). Whether it pays on a GPU is what benchmarks/gpu_check.py measures
(``transformer_tiny`` with and without); until a GPU run shows it does, it is off by default.
"""

from __future__ import annotations

import torch

from ..config import Config, ConfigError
from ..data.dataset import Batch
from ..data.vocab import BOS, EOS, PAD

BUCKET = 8
"""Sentence counts and lengths are padded up to multiples of this."""

RECOMPILE_LIMIT = 256
"""Shapes a compiled step may meet before TorchDynamo stops compiling it (its default, 8, is for one shape)."""


def check_cuda_graphs(cfg: Config, device: torch.device, structures: dict) -> None:
    """Refuse ``train.cuda_graphs`` where it cannot apply, in one sentence."""
    if not cfg.train.cuda_graphs:
        return
    if device.type != "cuda":
        raise ConfigError(f"train.cuda_graphs=true needs a CUDA device and this run trains on {device}; set it to "
                          "false (on a CPU compiling the step measured 0.82 times the eager one).")
    if structures:
        raise ConfigError(f"train.cuda_graphs=true: this model reads source structures ({', '.join(sorted(structures))}),"
                          " whose shapes vary with every batch; set train.cuda_graphs=false.")
    if cfg.model.family == "rnn":
        raise ConfigError("train.cuda_graphs=true: the RNN family's packed LSTM and its loop over target steps break "
                          "the recorded graph at every step, so there is nothing to replay; set train.cuda_graphs=false.")
    if cfg.train.update_freq > 1:
        raise ConfigError(f"train.cuda_graphs=true with train.update_freq={cfg.train.update_freq}: a replayed graph "
                          "writes its gradients into memory the next replay overwrites, so accumulating them over "
                          "batches would lose some; set train.update_freq=1 (and data.max_tokens for the batch size) or "
                          "train.cuda_graphs=false.")


def bucketed(batch: Batch, multiple: int = BUCKET, max_len: int | None = None) -> Batch:
    """``batch`` (without structures) padded to B, S and T that are multiples of ``multiple`` (S and T at most
    ``max_len``, the model's positions, when rounding up would pass it): extra positions are padding, extra
    sentences have a source of EOS and a target of BOS (their outputs are padding: no loss, no gradient)."""
    if batch.structures:
        raise ValueError("bucketed: a batch with structures cannot be padded here")
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    B2, S2, T2 = (-(-x // multiple) * multiple for x in (B, S, T))
    if max_len is not None:
        S2, T2 = max(S, min(S2, max_len)), max(T, min(T2, max_len))
    if (B2, S2, T2) == (B, S, T):
        return batch

    def pad(t: torch.Tensor, rows: int, cols: int, fill) -> torch.Tensor:
        out = t.new_full((rows, cols), fill)
        out[: t.shape[0], : t.shape[1]] = t
        return out

    src = pad(batch.src, B2, S2, PAD)
    src[B:, 0] = EOS  # a padding sentence: one real source token, so its attention has a key
    tgt_in = pad(batch.tgt_in, B2, T2, PAD)
    tgt_in[B:, 0] = BOS  # and a target that begins, so that its first query has a key too
    return Batch(src=src, tgt_in=tgt_in, tgt_out=pad(batch.tgt_out, B2, T2, PAD), src_mask=src != PAD,
                 ids=batch.ids, structures={})


def compiled_step(module: torch.nn.Module, backend: str = "cudagraphs") -> torch.nn.Module:
    """``module`` compiled for CUDA graphs (one graph per shape; see the module docstring). ``backend`` is for the
    tests, which run the same code on the CPU with the ``eager`` backend."""
    import torch._dynamo  # only where the option is on: importing it costs a second

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.7: the old name
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    return torch.compile(module, backend=backend, dynamic=False)
