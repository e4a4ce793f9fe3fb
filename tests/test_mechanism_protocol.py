"""The mechanism protocol (structnmt.nn.attention.Mechanism): defaults, registration, and the one
structure collector the Transformer, the tagger and the prober share."""

from __future__ import annotations

import pytest
from torch import nn

from structnmt.config import ConfigError
from structnmt.nn.attention import (
    ATTENTION_REGISTRY,
    AttentionDims,
    Mechanism,
    MultiHeadAttention,
    build_attention,
    collect_structures,
    register_attention,
)
from structnmt.syntax.batching import StructureSpec


def dims(role: str = "encoder_self") -> AttentionDims:
    return AttentionDims(d_model=8, heads=2, dropout=0.0, role=role, cache_key=f"{role}.0")


def test_every_registered_mechanism_follows_the_protocol():
    for name, cls in ATTENTION_REGISTRY.items():
        assert issubclass(cls, Mechanism), name
    plain = build_attention("mha", {}, dims("cross"))
    assert plain.required_structures() == {} and plain.hypernodes() is None and plain.memory_groups() is None
    assert plain.quadrant_layout() is None and plain.head_labels() is None and plain.tree_heads == 0
    assert plain.groups_memory and plain.attends_hypernodes and not plain.has_second_phase
    # a subclass of MHA changes logits or values: it opts in to sharing a memory or hypernodes itself
    rel = build_attention("rel_pos", {}, dims())
    assert not rel.groups_memory and not rel.attends_hypernodes
    assert build_attention("structured", {"heads": 1}, dims()).tree_heads == 1
    mgsa = build_attention("mgsa", {"groups": [{"kind": "word", "heads": 1}, {"kind": "ngram", "heads": 1, "n": 2}]},
                           dims())
    assert [g.kind for g in mgsa.memory_groups()] == ["word", "ngram"] and mgsa.head_labels() == ["word", "2-gram"]
    het = build_attention("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2]}, dims())
    assert het.quadrant_layout()["key_blocks"] == [1, 2]


def test_registration_refuses_a_class_outside_the_protocol_and_a_name_twice():
    with pytest.raises(TypeError, match="not a subclass of structnmt.nn.attention.Mechanism"):
        register_attention("plain_module_xyz")(nn.Linear)
    assert "plain_module_xyz" not in ATTENTION_REGISTRY
    with pytest.raises(ValueError, match="registered twice"):
        register_attention("mha")(type("Again", (MultiHeadAttention,), {}))


class _Asks(Mechanism):
    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def required_structures(self):
        return {"ngram": StructureSpec("ngram_partition", {"n": self.n})}


def test_collect_structures_merges_agreeing_requests_and_refuses_conflicting_ones():
    agree = nn.ModuleList([_Asks(2), nn.Linear(2, 2), nn.Sequential(_Asks(2))])
    assert collect_structures(agree) == {"ngram": StructureSpec("ngram_partition", {"n": 2})}
    with pytest.raises(ConfigError, match="structure 'ngram' is requested with two different specs"):
        collect_structures(nn.ModuleList([_Asks(2), _Asks(3)]))


def test_the_tagger_and_the_prober_refuse_conflicting_requests_like_the_transformer():
    """Both used to let the last request win; all three now ask collect_structures."""
    from structnmt.analysis.probe import ScratchEncoder
    from structnmt.tasks.tagger import Tagger

    for owner in (Tagger, ScratchEncoder):
        holder = owner.__new__(owner)
        nn.Module.__init__(holder)
        holder.parts = nn.ModuleList([_Asks(2), _Asks(3)])
        with pytest.raises(ConfigError, match="two different specs"):
            holder.required_structures()
