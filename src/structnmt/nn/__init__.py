"""Attention mechanisms. Importing this package fills ATTENTION_REGISTRY explicitly."""

from .attention import (  # noqa: F401
    ATTENTION_REGISTRY,
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    IncrementalCache,
    MultiHeadAttention,
    build_attention,
    masked_softmax,
    merge_heads,
    register_attention,
    scaled_attention,
    split_heads,
)
from .localness import LocalnessAttention  # noqa: F401,E402  (registers "localness")
from .matrix_tree import marginals  # noqa: F401,E402
from .mgsa import MGSAAttention, MGSAGroup, PhraseLayout, PhraseMemory  # noqa: F401,E402  (registers "mgsa")
from .on_lstm import ONLSTM, cumax  # noqa: F401,E402
from .phrasal import (  # noqa: F401,E402  (registers "phrasal_homogeneous", "phrasal_heterogeneous")
    HeterogeneousPhrasalAttention,
    HomogeneousPhrasalAttention,
    PhraseBranch,
    queryk_logits,
)
from .phrasal_interleaved import InterleavedPhrasalAttention  # noqa: F401,E402  (registers "phrasal_interleaved")
from .phrase_transformer import HypernodeSpec, PhraseTransformerAttention  # noqa: F401,E402  (registers "phrase_transformer")
from .queryk_rel_pos import QueryKRelativePositionAttention  # noqa: F401,E402  (registers "queryk_rel_pos")
from .relative_position import RelativePositionAttention  # noqa: F401,E402  (registers "rel_pos")
from .rhe import RHEAttention, identify_heads  # noqa: F401,E402  (registers "rhe")
from .sea import LocalPhraseBias  # noqa: F401,E402
from .structured_attention import StructuredAttention  # noqa: F401,E402  (registers "structured")
