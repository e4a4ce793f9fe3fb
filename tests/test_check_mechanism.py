"""structnmt.testing.check_mechanism: every mechanism of the package keeps the contract, and mechanisms broken in
one way each are caught, with the rule they broke."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import structnmt.models  # noqa: F401 (registers the package's mechanisms)
from structnmt.nn.attention import (
    ATTENTION_REGISTRY,
    MultiHeadAttention,
    register_attention,
    split_heads,
)
from structnmt.testing import ContractError, check_mechanism

MGSA_GROUPS = [{"kind": "word", "heads": 1}, {"kind": "ngram", "heads": 1, "n": 2},
               {"kind": "syntax", "heads": 1, "level": 1}, {"kind": "syntax", "heads": 1, "level": 2}]

#: options to check each mechanism of the package with (its defaults and the variants its papers' rows use)
EXAMPLES: dict[str, list[dict]] = {
    "mha": [{}],
    "rel_pos": [{}, {"k": 2, "shared_table": True}],
    "localness": [{}],
    "mgsa": [{"groups": MGSA_GROUPS}, {"groups": MGSA_GROUPS, "composition": "san"}],
    "phrasal_homogeneous": [{}],
    "phrasal_heterogeneous": [{}, {"variant": "queryk", "ngrams": [1, 2]}],
    "phrasal_interleaved": [{}],
    "phrase_transformer": [{}],
    "queryk_rel_pos": [{}],
    "rhe": [{"enhancement": "dea"}, {"enhancement": "lpea", "k": 2}, {"enhancement": "dea", "heads": "all"},
            {"base": "rel_pos", "enhancement": "lpea"}, {"enhancement": "rel_pos"}, {"enhancement": "localness"},
            {"enhancement": "none", "redundant_action": "prune"}],
    "structured": [{}],
    "dea": [{}],
    "lpea": [{}, {"k": 2, "rule": "rule1"}],
}

PACKAGE = sorted(n for n, c in ATTENTION_REGISTRY.items() if c.__module__.startswith("structnmt."))


def test_every_mechanism_of_the_package_has_an_example_here():
    assert sorted(EXAMPLES) == PACKAGE, "add the new mechanism's options to EXAMPLES"


@pytest.mark.parametrize("name", PACKAGE)
def test_every_mechanism_of_the_package_keeps_the_contract(name):
    for options in EXAMPLES[name]:
        report = check_mechanism(name, options)
        assert report.checked and not report.failures
        assert report.checked[0].startswith("encoder_self")  # every mechanism works in the encoder


def test_the_report_names_the_roles_left_out_and_why():
    report = check_mechanism("rel_pos")
    assert [c.split()[0] for c in report.checked] == ["encoder_self", "decoder_self"]
    assert "self-attention only" in report.left_out["cross"]
    assert "left out cross" in str(report)


# --------------------------------------------------------------------------- broken on purpose


@register_attention("_broken_ignores_mask")
class IgnoresMask(MultiHeadAttention):
    """Attends to padding."""

    def forward(self, query, memory, ctx):
        return super().forward(query, memory, dataclasses.replace(ctx, key_mask=None))


@register_attention("_broken_nan_on_one_word")
class NaNOnOneWord(MultiHeadAttention):
    """A bias that is NaN for a sentence of one word (sqrt of a negative length)."""

    def logit_bias(self, query, q, k, ctx):
        n = ctx.key_mask.sum(-1).to(q.dtype) if ctx.key_mask is not None else q.new_full((q.shape[0],), 9.0)
        return torch.sqrt(n - 3.0)[:, None, None, None].expand(-1, q.shape[1], q.shape[2], k.shape[2])


@register_attention("_broken_stateful")
class Stateful(MultiHeadAttention):
    """Keeps a counter on the module between calls."""

    def __init__(self, *, dims):
        super().__init__(dims=dims)
        self.calls = 0

    def forward(self, query, memory, ctx):
        self.calls += 1
        out = super().forward(query, memory, ctx)
        return dataclasses.replace(out, output=out.output * (1.0 + 1e-3 * self.calls))


@register_attention("_broken_weights_path")
class WeightsPath(MultiHeadAttention):
    """Gives another output when weights are asked for."""

    def forward(self, query, memory, ctx):
        out = super().forward(query, memory, ctx)
        return dataclasses.replace(out, output=out.output * (1.5 if ctx.need_weights else 1.0))


@register_attention("_broken_no_cache")
class NoCache(MultiHeadAttention):
    """Ignores the incremental cache: step by step, a decoder self-attention sees only the newest token."""

    def forward(self, query, memory, ctx):
        return super().forward(query, memory, dataclasses.replace(ctx, cache=None))


@register_attention("_broken_extras")
class BadExtras(MultiHeadAttention):
    """Puts a statistic without the batch dimension into extras."""

    def forward(self, query, memory, ctx):
        out = super().forward(query, memory, ctx)
        return dataclasses.replace(out, extras={"mean_norm": out.output.norm(dim=-1).mean(0)})


@register_attention("_broken_reweight_padding")
class ReweightOnPadding(MultiHeadAttention):
    """A hook after the softmax that spreads some weight over every key, the padded ones too."""

    def reweight(self, weights, query, q, k, ctx):
        return 0.9 * weights + 0.1 / weights.shape[-1]


@register_attention("_broken_reweight_shape")
class ReweightShape(MultiHeadAttention):
    """A hook that drops the last key (a (B, H, T, S - 1) result)."""

    def reweight(self, weights, query, q, k, ctx):
        return weights[..., :-1]


@register_attention("_broken_reweight_nan")
class ReweightNaN(MultiHeadAttention):
    """A hook that divides by (S - 2): NaN for a one-word sentence (its word and EOS) alone."""

    def reweight(self, weights, query, q, k, ctx):
        return weights * (weights.shape[-1] - 2) / (weights.shape[-1] - 2)


@register_attention("_broken_reweight_by_length")
class ReweightByLength(MultiHeadAttention):
    """A hook that reads the number of queries of the call: the full pass and the steps of decoding disagree."""

    def reweight(self, weights, query, q, k, ctx):
        return weights * weights.shape[-2]


@register_attention("_broken_reweight_unused")
class ReweightUnused(MultiHeadAttention):
    """Overrides the hook, then writes its own forward that never applies it."""

    def reweight(self, weights, query, q, k, ctx):
        return 0.5 * weights

    def forward(self, query, memory, ctx):
        plain = MultiHeadAttention.__new__(MultiHeadAttention)
        plain.__dict__ = self.__dict__
        return MultiHeadAttention._attention_with_hooks(plain, query, split_heads(self.q_proj(query), self.heads),
                                          *self.project_kv(memory, ctx), ctx)


@pytest.mark.parametrize(("name", "role", "rule"), [
    ("_broken_reweight_padding", "encoder_self", "reweight: ReweightOnPadding.reweight gives masked keys (padding, "
                                                 "later positions under causality) weight"),
    ("_broken_reweight_padding", "decoder_self", "reweight: ReweightOnPadding.reweight gives masked keys"),
    ("_broken_reweight_shape", "cross", "reweight: ReweightShape.reweight returns a torch.float64 tensor of shape "),
    ("_broken_reweight_nan", "encoder_self", "reweight: ReweightNaN.reweight gives NaN or inf weights"),
    ("_broken_reweight_by_length", "decoder_self", "incremental decoding: step-by-step decoding with the cache"),
    ("_broken_reweight_unused", "encoder_self", "reweight: the hook is overridden but no forward pass called it"),
    ("_broken_ignores_mask", "encoder_self", "padding: sentence"),
    ("_broken_ignores_mask", "encoder_self", "masked keys: encoder_self layer 1 gives padded source positions"),
    ("_broken_ignores_mask", "cross", "masked keys: cross layer 1"),
    ("_broken_nan_on_one_word", "encoder_self", "finite: the logits hold NaN"),
    ("_broken_stateful", "encoder_self", "hidden state: a second identical call gives another output"),
    ("_broken_weights_path", "cross", "need_weights: asking for the weights changes the output"),
    ("_broken_no_cache", "decoder_self", "incremental decoding: step-by-step decoding with the cache differs"),
    ("_broken_extras", "encoder_self", "extras['mean_norm'] has shape"),
])
def test_a_broken_mechanism_is_caught_with_the_rule_it_broke(name, role, rule):
    with pytest.raises(ContractError) as err:
        check_mechanism(name, roles=(role,))
    assert rule in str(err.value), str(err.value)
    assert f"{role}: " in str(err.value)


def test_a_mechanism_no_role_accepts_is_one_sentence_per_role():
    with pytest.raises(ContractError, match="no role accepts the mechanism") as err:
        check_mechanism("localness", {"no_such_option": 1})
    assert "unknown key 'no_such_option'" in str(err.value)


def test_a_class_is_checked_under_its_registered_name_and_an_unregistered_one_refused():
    assert check_mechanism(MultiHeadAttention, roles=("cross",)).name == "mha"
    with pytest.raises(ValueError, match="not registered"):
        check_mechanism(type("Loose", (MultiHeadAttention,), {}))


def test_a_batch_of_two_parsed_sentences_is_enough():
    from structnmt.testing import example_trees

    assert check_mechanism("mha", trees=example_trees(2)).checked


def test_a_hook_that_changes_the_shape_is_one_sentence_and_stops_the_role_s_other_rules():
    with pytest.raises(ContractError) as err:
        check_mechanism("_broken_reweight_shape", roles=("encoder_self",))
    failures = [line for line in str(err.value).splitlines() if "FAILED" in line]
    assert failures == ["  FAILED: encoder_self: reweight: ReweightShape.reweight returns a torch.float64 tensor of "
                        "shape (3, 4, 5, 4) for torch.float64 weights of shape (3, 4, 5, 5); it must keep the "
                        "weights' shape (B, H, T, S) and dtype."], failures
