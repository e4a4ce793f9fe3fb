"""Attention mechanisms. Importing this package fills ATTENTION_REGISTRY explicitly."""

from .attention import (  # noqa: F401
    ATTENTION_REGISTRY,
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    IncrementalCache,
    MultiHeadAttention,
    build_attention,
    register_attention,
    scaled_attention,
)
from .mgsa import MGSAAttention, MGSAGroup, PhraseLayout, PhraseMemory  # noqa: F401,E402  (registers "mgsa")
from .on_lstm import ONLSTM, cumax  # noqa: F401,E402
