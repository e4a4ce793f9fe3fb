"""Model families. ``model.family`` in the config picks one from MODEL_REGISTRY."""

from __future__ import annotations

from torch import nn

from ..config import ConfigError, ModelConfig
from .rnn import RNNModel
from .transformer import EncoderOutput, ModelOutput, TransformerModel

MODEL_REGISTRY: dict[str, type[nn.Module]] = {"transformer": TransformerModel, "rnn": RNNModel}


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    if cfg.family not in MODEL_REGISTRY:
        raise ConfigError(f"model.family: unknown family '{cfg.family}'; valid: {', '.join(MODEL_REGISTRY)}.")
    return MODEL_REGISTRY[cfg.family](cfg, src_vocab_size, tgt_vocab_size)


__all__ = ["MODEL_REGISTRY", "EncoderOutput", "ModelOutput", "RNNModel", "TransformerModel", "build_model"]
