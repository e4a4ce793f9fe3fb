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
