"""RHE (Wang et al.): DEA, LPEA, redundant-head identification and enlivening, and the two
baselines Rel_Pos (Shaw et al. 2018) and Localness (Yang et al. 2018) — against the
papers' equations written out literally, on hand-built attention maps and trees."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from random_batches import assert_incremental_equals_full
from torch.testing import assert_close

from structnmt.config import AttentionPlan, AttentionSpec, ConfigError, ModelConfig
from structnmt.data.vocab import PAD
from structnmt.models import build_model
from structnmt.nn import build_attention
from structnmt.nn.attention import AttentionContext, AttentionDims, masked_softmax, scaled_attention
from structnmt.nn.localness import gaussian_bias
from structnmt.nn.relative_position import bucket_weights, relative_index
from structnmt.nn.rhe import identify_heads, query_tokens
from structnmt.nn.sea import DEP_MASK_KEY, lpea_key
from structnmt.syntax.batching import build_structures
from structnmt.syntax.features import OUT_OF_PHRASE, local_phrase_positions
from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

D, H = 16, 4


def dims(role: str = "encoder_self") -> AttentionDims:
    return AttentionDims(D, H, 0.0, role, f"{role}.0")


def build(name: str, options: dict | None = None, role: str = "encoder_self", seed: int = 0):
    torch.manual_seed(seed)
    return build_attention(name, options or {}, dims(role)).eval()


def inputs(B: int = 2, S: int = 6, seed: int = 0):
    """x (B, S, D); key mask with sentence 1 padded in its last 2 positions;
    a dependency mask (chain: word i attached to i+1) and LPEA positions per sentence."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, S, D, generator=g)
    mask = torch.ones(B, S, dtype=torch.bool)
    if B > 1:
        mask[1, S - 2:] = False
    dep = torch.zeros(B, S, S, dtype=torch.bool)
    rp = torch.full((B, S, S), OUT_OF_PHRASE, dtype=torch.long)
    for b in range(B):
        n = int(mask[b].sum())
        for i in range(n):
            dep[b, i, i] = True
            if i + 1 < n:
                dep[b, i, i + 1] = dep[b, i + 1, i] = True
        for i in range(n, S):
            dep[b, i, i] = True  # the collator's convention for padded query rows
        layer = torch.randint(0, 4, (n,), generator=g)
        phrase = torch.randint(0, 2, (n,), generator=g)
        for i in range(n):
            for j in range(n):
                if phrase[i] == phrase[j] or i == j:
                    rp[b, i, j] = layer[j] - layer[i]
    return x, mask, dep, rp


def ctx_for(mask, dep, rp, k: int = 6, need_weights: bool = True) -> AttentionContext:
    return AttentionContext(key_mask=mask, need_weights=need_weights,
                            structures={DEP_MASK_KEY: dep, lpea_key(k, "rule2"): rp.clamp(-k, k).where(
                                rp != OUT_OF_PHRASE, rp)})


def plain_scores(module, x):
    """q k^T / sqrt(d) of the module's base (B, H, S, S), recomputed from its parameters."""
    base = getattr(module, "base", module)
    B, S, _ = x.shape
    q = base.q_proj(x).view(B, S, H, -1).transpose(1, 2)
    k, _ = base.kv_proj(x).chunk(2, -1)
    k = k.view(B, S, H, -1).transpose(1, 2)
    return q @ k.transpose(-1, -2) / math.sqrt(D // H)


# ----------------------------------------------------------------------------- DEA


def test_dea_with_a_full_mask_equals_plain_attention():
    x, mask, dep, rp = inputs()
    full = torch.ones_like(dep)
    dea = build("rhe", {"enhancement": "dea", "heads": "all"})
    mha = build("mha")
    mha.load_state_dict({k.removeprefix("base."): v for k, v in dea.state_dict().items()})
    a = dea(x, x, ctx_for(mask, full, rp))
    b = mha(x, x, AttentionContext(key_mask=mask, need_weights=True))
    assert_close(a.output, b.output)
    assert_close(a.weights, b.weights)


def test_dea_puts_weight_only_on_dependency_neighbours():
    x, mask, dep, rp = inputs()
    dea = build("rhe", {"enhancement": "dea", "heads": "all"})
    w = dea(x, x, ctx_for(mask, dep, rp)).weights
    assert (w[~dep[:, None].expand_as(w)] == 0).all()
    rows = w.sum(-1)[:, :, :][mask[:, None, :].expand(-1, H, -1)]
    assert_close(rows, torch.ones_like(rows))
    # eq. 4 literally: softmax(scores + D) with D in {0, -inf}, on the real rows
    scores = plain_scores(dea, x)
    add = torch.where(dep & mask[:, None, :], 0.0, float("-inf"))[:, None]
    want = torch.softmax(scores + add, -1)
    real = mask[:, None, :, None].expand_as(w)
    assert_close(w[real], want[real])


# ----------------------------------------------------------------------------- LPEA


def test_lpea_with_k0_equals_local_phrase_masking_alone():
    x, mask, dep, rp = inputs()
    lpea = build("rhe", {"enhancement": "lpea", "heads": "all", "k": 0})
    w = lpea(x, x, ctx_for(mask, dep, rp, k=0)).weights
    inside = (rp != OUT_OF_PHRASE) & mask[:, None, :]
    want = masked_softmax(plain_scores(lpea, x), inside[:, None])
    assert_close(w, want)


def test_gathered_lpea_bias_equals_literal_eq8():
    k = 3
    lpea = build("rhe", {"enhancement": "lpea", "heads": "all", "k": k}).lpea
    _, _, _, rp = inputs(S=7)
    bias, inside = lpea(rp, 7, 7)
    # eq. 7 (as the prose means it) and eq. 8, with the full (n, n, d) tensor M
    w_table = lpea.table.weight
    W_P, b_P, U_P = lpea.w_p.weight, lpea.w_p.bias, lpea.u_p.weight
    for b in range(rp.shape[0]):
        n = rp.shape[1]
        M = torch.zeros(n, n, w_table.shape[1])
        for i in range(n):
            for j in range(n):
                r = int(rp[b, i, j])
                if r != OUT_OF_PHRASE:
                    M[i, j] = w_table[max(-k, min(k, r)) + k]
        P = -torch.abs(torch.tanh(M @ W_P.t() + b_P) @ U_P.t()).squeeze(-1)
        ins = rp[b] != OUT_OF_PHRASE
        assert_close(bias[b, 0][ins], P[ins])
        assert (inside[b, 0] == ins).all()
    assert lpea.values().shape == (2 * k + 1,)
    assert (lpea.values() <= 0).all()


def bush_trees():
    def N(label, s, e, *c):
        return Node(label, s, e, list(c))

    words = "Bush held a talk with Sharon".split()
    cons = ConstituencyTree(words, N("S", 0, 6, N("NP", 0, 1, N("NNP", 0, 1)), N(
        "VP", 1, 6, N("VBD", 1, 2), N("NP", 2, 4, N("DT", 2, 3), N("NN", 3, 4)),
        N("PP", 4, 6, N("IN", 4, 5), N("NP", 5, 6, N("NNP", 5, 6))))))
    dep = DependencyTree(words=words, heads=[2, 0, 4, 2, 2, 5], deprels=["nsubj", "root", "det", "obj", "obl", "pobj"],
                         upos=["PROPN", "VERB", "DET", "NOUN", "ADP", "PROPN"])
    return cons, dep


def test_lpea_on_the_papers_fig3_example():
    """Fig. 3: 'held'/'talk' get the vector of RP = +1, 'talk'/'Sharon' are masked."""
    cons, dep = bush_trees()
    k = 2
    rp = torch.from_numpy(local_phrase_positions(cons, np.arange(6), k))[None]
    lpea = build("rhe", {"enhancement": "lpea", "heads": "all", "k": k}).lpea
    bias, inside = lpea(rp, 6, 6)
    vals = lpea.values()
    assert not inside[0, 0, 3, 5] and not inside[0, 0, 5, 3]  # talk / Sharon: different local phrases
    assert_close(bias[0, 0, 1, 3], vals[1 + k])  # held -> talk: layer 3 -> 4, RP = +1
    assert_close(bias[0, 0, 3, 1], vals[-1 + k])
    assert_close(bias[0, 0, 0, 5], vals[2 + k])  # Bush -> Sharon: RP = 2 (= k; clipping is tested below)
    assert_close(bias[0, 0, 2, 2], vals[k])


# ----------------------------------------------------------------------------- identification


def test_identification_on_constructed_maps():
    """Head 0 attends to dependency neighbours (important), head 1 to a far word
    (redundant), head 2 uniformly (redundant under the dynamic gate, important under a low
    fixed gate), head 3 to itself (important: self is in the DEA mask)."""
    n = 5
    dep = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        dep[i, i] = True
        if i + 1 < n:
            dep[i, i + 1] = dep[i + 1, i] = True
    w = torch.zeros(1, 4, n, n)
    for i in range(n):
        w[0, 0, i, min(i + 1, n - 1)] = 1.0
        w[0, 1, i, (i + 3) % n if abs((i + 3) % n - i) > 1 else (i + 2) % n] = 1.0
        w[0, 3, i, i] = 1.0
    w[0, 2] = 1.0 / n
    queries = torch.ones(1, n, dtype=torch.bool)
    roles = identify_heads(w, dep[None, None], queries)
    assert roles.important[0].tolist() == [True, False, False, True]
    assert_close(roles.h_conf[0], torch.tensor([1.0, 1.0, 1 / n, 1.0]))
    syn_uniform = dep.sum().item() / (n * n)
    assert_close(roles.syn_attn[0, 2], torch.tensor(syn_uniform))
    assert_close(roles.gate[0], torch.sigmoid(roles.h_conf[0]))
    fixed = identify_heads(w, dep[None, None], queries, gate="fixed", fixed_gate=0.3)
    assert fixed.important[0].tolist() == [True, False, True, True]  # uniform: syn 0.52 > 0.3
    prose = identify_heads(w, dep[None, None], queries, gate="confidence")
    assert prose.important[0].tolist() == [False, False, True, False]  # 1.0 > 1.0 is false
    # padding and EOS rows do not count
    q = query_tokens(torch.tensor([[True, True, True, False]]), exclude_eos=True)
    assert q.tolist() == [[True, True, False, False]]
    assert query_tokens(torch.tensor([[True, False]]), exclude_eos=True).tolist() == [[True, False]]


def test_identification_uses_pre_enhancement_weights():
    x, mask, dep, rp = inputs()
    rhe = build("rhe", {"enhancement": "dea"})
    out = rhe(x, x, ctx_for(mask, dep, rp))
    plain = masked_softmax(plain_scores(rhe, x), mask[:, None, None, :])
    assert_close(out.extras["plain_weights"], plain)
    want = identify_heads(plain, dep[:, None], query_tokens(mask, True))
    assert (out.extras["head_important"] == want.important).all()
    # the enhanced weights would make every head look syntactic: all of them put their mass on dep
    after = identify_heads(masked_softmax(plain_scores(rhe, x), (dep & mask[:, None, :])[:, None]), dep[:, None],
                           query_tokens(mask, True))
    assert after.important.all() and not want.important.all()


@pytest.mark.parametrize("enhancement", ["dea", "lpea"])
@pytest.mark.parametrize("base", ["mha", "rel_pos", "localness"])
def test_selection_per_sentence_and_head_equals_the_two_mechanisms(enhancement, base):
    x, mask, dep, rp = inputs(B=3, S=7)
    opts = {"enhancement": enhancement, "base": base}
    rhe = build("rhe", opts)
    all_heads = build("rhe", {**opts, "heads": "all"})
    plain = build("rhe", {**opts, "heads": "all", "enhancement": "none"})
    sd = rhe.state_dict()
    all_heads.load_state_dict(sd)
    plain.load_state_dict({k: v for k, v in sd.items() if not k.startswith("lpea.")})
    ctx = ctx_for(mask, dep, rp)
    r, a, p = rhe(x, x, ctx), all_heads(x, x, ctx), plain(x, x, ctx)
    imp = r.extras["head_important"]
    assert imp.any() and not imp.all(), "the random heads should include both roles"
    sel = imp[:, :, None, None]
    assert_close(r.weights, torch.where(sel, p.weights, a.weights))
    # the output is the per-head mix: rebuild it from the two mechanisms' weights (Rel_Pos: plus
    # its value term, sum_j alpha_ij a^V_clip(j-i), written out)
    B, S, _ = x.shape
    _, v = rhe.base.kv_proj(x).chunk(2, -1)
    v = v.view(B, S, H, -1).transpose(1, 2)
    mixed = torch.where(sel, p.weights, a.weights)
    heads = mixed @ v
    if base == "rel_pos":
        kk = rhe.base.rel.k
        table = rhe.base.rel.rel_v.weight
        idx = torch.tensor([[max(-kk, min(kk, j - i)) + kk for j in range(S)] for i in range(S)])
        heads = heads + torch.einsum("bhij,ijd->bhid", mixed, table[idx])
    want = rhe.base.out_proj(heads.transpose(1, 2).reshape(B, S, D))
    assert_close(r.output, want)


def test_pruning_zeroes_exactly_the_redundant_heads():
    x, mask, dep, rp = inputs(B=3, S=7)
    pruned = build("rhe", {"enhancement": "none", "redundant_action": "prune"})
    assert not any(n.startswith(("lpea.", "rel.", "loc.")) for n, _ in pruned.named_parameters())
    assert set(pruned.required_structures()) == {DEP_MASK_KEY}
    out = pruned(x, x, ctx_for(mask, dep, rp))
    w, imp = out.weights, out.extras["head_important"]
    assert imp.any() and not imp.all(), "the random heads should include both roles"
    assert (w[~imp] == 0).all()
    plain = out.extras["plain_weights"]
    assert_close(w[imp], plain[imp])  # important heads keep their plain attention
    # the output: the important heads' plain outputs, zero for the pruned heads, through W_O
    B, S, _ = x.shape
    _, v = pruned.base.kv_proj(x).chunk(2, -1)
    v = v.view(B, S, H, -1).transpose(1, 2)
    heads = (plain @ v) * imp[:, :, None, None]
    assert_close(out.output, pruned.base.out_proj(heads.transpose(1, 2).reshape(B, S, D)))
    with pytest.raises(ConfigError, match="prune"):
        build("rhe", {"redundant_action": "prune", "enhancement": "none", "heads": "all"})
    with pytest.raises(ConfigError, match="enhancement: none"):
        build("rhe", {"redundant_action": "prune"})  # the default enhancement lpea would be unused


def test_rhe_refuses_a_second_copy_of_its_base_and_unknown_rules():
    for mech in ("rel_pos", "localness"):
        with pytest.raises(ConfigError, match="both"):
            build("rhe", {"base": mech, "enhancement": mech})
    with pytest.raises(ConfigError, match="rule"):
        build("rhe", {"rule": "rule3"})


def test_confidence_without_the_eos_key():
    """exclude_eos_key: a head parking its mass on EOS (Fig. 5 (a)) loses its confidence."""
    n = 4  # 3 words + EOS
    w = torch.zeros(1, 2, n, n)
    w[0, 0, :, n - 1] = 1.0  # head 1: everything on EOS
    w[0, 1] = torch.eye(n)  # head 2: each token on itself
    dep = torch.eye(n, dtype=torch.bool)[None, None]
    q = query_tokens(torch.ones(1, n, dtype=torch.bool), exclude_eos=True)
    keys = torch.tensor([[True, True, True, False]])
    both = identify_heads(w, dep, q)
    no_eos = identify_heads(w, dep, q, confidence_keys=keys)
    assert_close(both.h_conf[0], torch.tensor([1.0, 1.0]))
    assert_close(no_eos.h_conf[0], torch.tensor([0.0, 1.0]))
    # through the layer: the option reaches eq. 3 (confidence can only drop)
    x, mask, dep_b, rp = inputs(B=2, S=6)
    a = build("rhe", {"enhancement": "dea"})(x, x, ctx_for(mask, dep_b, rp)).extras["h_conf"]
    b = build("rhe", {"enhancement": "dea", "exclude_eos_key": True})(x, x, ctx_for(mask, dep_b, rp)).extras["h_conf"]
    assert (b <= a + 1e-7).all() and (b < a - 1e-4).any()


# ----------------------------------------------------------------------------- Rel_Pos


def test_rel_pos_k0_equals_plain_attention_plus_a_constant_value_vector():
    x, mask, _, _ = inputs()
    rel = build("rel_pos", {"k": 0})
    mha = build("mha")
    mha.load_state_dict({k: v for k, v in rel.state_dict().items() if not k.startswith("rel.")})
    a = rel(x, x, AttentionContext(key_mask=mask, need_weights=True))
    b = mha(x, x, AttentionContext(key_mask=mask, need_weights=True))
    # k = 0: one relative vector a^K for every pair shifts all logits of a row equally
    assert_close(a.weights, b.weights)
    const = rel.rel.rel_v.weight[0].repeat(H)  # the same a^V added to every head's output
    assert_close(a.output, b.output + const @ rel.out_proj.weight.t())


def test_rel_pos_gather_equals_the_literal_formula():
    x, mask, _, _ = inputs(S=8)
    k = 2
    rel = build("rel_pos", {"k": k})
    got = rel(x, x, AttentionContext(key_mask=mask, need_weights=True))
    B, S, _ = x.shape
    q = rel.q_proj(x).view(B, S, H, -1).transpose(1, 2)
    kk, vv = rel.kv_proj(x).chunk(2, -1)
    kk, vv = (t.view(B, S, H, -1).transpose(1, 2) for t in (kk, vv))
    idx = torch.tensor([[max(-k, min(k, j - i)) + k for j in range(S)] for i in range(S)])
    aK, aV = rel.rel.rel_k.weight[idx], rel.rel.rel_v.weight[idx]  # (S, S, d): the literal tensor
    e = (q[:, :, :, None, :] * (kk[:, :, None, :, :] + aK)).sum(-1) / math.sqrt(D // H)
    alpha = masked_softmax(e, mask[:, None, None, :])
    z = (alpha[..., None] * (vv[:, :, None, :, :] + aV)).sum(-2)
    want = rel.out_proj(z.transpose(1, 2).reshape(B, S, D))
    assert_close(got.weights, alpha)
    assert_close(got.output, want)
    assert relative_index(1, 4, 1, query_offset=3).tolist() == [[0, 0, 0, 1]]
    w = torch.rand(1, 1, 2, 3)
    assert_close(bucket_weights(w, relative_index(2, 3, 1), 3).sum(-1), w.sum(-1))


def test_rel_pos_shared_table_and_roles():
    shared = build("rel_pos", {"shared_table": True})
    assert shared.rel.rel_k is shared.rel.rel_v
    assert build("rel_pos").rel.rel_k is not build("rel_pos").rel.rel_v
    with pytest.raises(ConfigError, match="self-attention only"):
        build("rel_pos", role="cross")


def model_with(plan: AttentionPlan):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=2, dropout=0.0,
                      attention=plan)
    return build_model(cfg, 40, 40).eval()


def test_rel_pos_incremental_equals_full_decoding_with_beam_reordering():
    spec = AttentionSpec("rel_pos", {"k": 2})
    assert_incremental_equals_full(model_with(AttentionPlan(encoder_self=spec, decoder_self=spec)))


# ----------------------------------------------------------------------------- Localness


@pytest.mark.parametrize("options", [{}, {"window": "fixed"}, {"per_head": True}])
def test_localness_padding_invariance(options):
    x, _, _, _ = inputs(B=1, S=5)
    loc = build("localness", options)
    alone = loc(x, x, AttentionContext(key_mask=torch.ones(1, 5, dtype=torch.bool), need_weights=True))
    padded = torch.cat([x, torch.randn(1, 3, D)], 1)
    pmask = torch.tensor([[True] * 5 + [False] * 3])
    got = loc(padded, padded, AttentionContext(key_mask=pmask, need_weights=True))
    assert_close(got.output[:, :5], alone.output)
    assert_close(got.weights[..., :5, :5], alone.weights)


def test_localness_bias_is_the_gaussian_of_eq5():
    centre = torch.tensor([[1.5]])
    window = torch.tensor([[4.0]])
    g = gaussian_bias(centre, window, 4)
    want = torch.tensor([[[-(j - 1.5) ** 2 / (2 * 2.0**2) for j in range(4)]]])
    assert_close(g, want)
    loc = build("localness", {"window": "fixed", "fixed_window": 10.0})
    x, mask, _, _ = inputs()
    q = loc.q_proj(x).view(2, 6, H, -1).transpose(1, 2)
    bias = loc.logit_bias(x, q, q, AttentionContext(key_mask=mask))
    # eqs. 5-7 literally, with I = 4 for sentence 1 (its unpadded length), 6 for sentence 0
    for b, length in ((0, 6), (1, 4)):
        for i in range(6):
            qi = q[b, :, i].reshape(-1)  # the full query vector of position i
            p = length * torch.sigmoid(loc.bias.u_p.weight @ torch.tanh(loc.bias.w_p.weight @ qi))
            want = torch.tensor([-((j - p.item()) ** 2) / (2 * 5.0**2) for j in range(6)])
            assert_close(bias[b, 0, i], want, atol=1e-4, rtol=1e-4)
    with pytest.raises(ConfigError, match="encoder self-attention only"):
        build("localness", role="decoder_self")


# ----------------------------------------------------------------------------- no NaN


MECHANISMS = [
    ("mha", {}),
    ("rel_pos", {"k": 2}),
    ("localness", {}),
    ("localness", {"window": "fixed", "per_head": True}),
    ("rhe", {"enhancement": "dea"}),
    ("rhe", {"enhancement": "lpea"}),
    ("rhe", {"enhancement": "dea", "heads": "all"}),
    ("rhe", {"enhancement": "lpea", "heads": "all"}),
    ("rhe", {"base": "rel_pos", "enhancement": "lpea"}),
    ("rhe", {"base": "localness", "enhancement": "dea"}),
    ("rhe", {"enhancement": "none", "redundant_action": "prune"}),
    ("rhe", {"base": "rel_pos", "enhancement": "dea"}),
    ("rhe", {"enhancement": "lpea", "gate": "fixed", "fixed_gate": 0.2}),
    ("rhe", {"enhancement": "dea", "gate": "confidence"}),
    ("rhe", {"enhancement": "none", "heads": "all"}),
    ("rhe", {"enhancement": "rel_pos", "enhancement_options": {"k": 2, "shared_table": True}}),
    ("rhe", {"enhancement": "localness", "enhancement_options": {"per_head": True}}),
    ("rel_pos", {"k": 2, "shared_table": True}),
    ("localness", {"per_head": True}),
]


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("name,options", MECHANISMS)
def test_no_nan_with_padding_and_fully_masked_rows(name, options, need_weights):
    """Padded rows (an LPEA row of a padded query has no allowed key at all), a word whose
    only allowed key is itself, and a sentence that is all padding but one token."""
    x, mask, dep, rp = inputs(B=3, S=6)
    mask[2, 1:] = False
    dep[0] = torch.eye(6, dtype=torch.bool)  # every word alone
    rp[0, 2, :] = OUT_OF_PHRASE  # a real word with no key in its phrase at all
    x.requires_grad_(True)
    m = build(name, options)
    m.train()
    out = m(x, x, ctx_for(mask, dep, rp, need_weights=need_weights))
    assert torch.isfinite(out.output).all()
    if out.weights is not None:
        assert torch.isfinite(out.weights).all()
        if options.get("enhancement") == "lpea" and options.get("heads") == "all":
            assert (out.weights[0, :, 2] == 0).all()  # the word with no key in its phrase: zero weights
            assert (out.weights[1, :, 4:] == 0).all()  # padded query rows: no key in any phrase
    out.output[mask].sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in m.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


def test_scaled_attention_need_weights_on_a_fully_masked_row_is_zero_not_nan():
    q = torch.randn(1, 1, 2, 4)
    mask = torch.tensor([[[[True, True], [False, False]]]])
    out, w = scaled_attention(q, q, q, mask=mask, need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[0, 0, 1] == 0).all() and (out[0, 0, 1] == 0).all()


def test_a_model_with_rhe_in_layer_one_is_padding_invariant_and_nan_free():
    """The whole model, its structures built by the collator's own builder
    (syntax.batching.build_structures): one sentence alone vs padded, and vs in a batch."""
    plan = AttentionPlan(overrides={"encoder_self.0": AttentionSpec("rhe", {"enhancement": "lpea", "k": 2})})
    model = model_with(plan)
    specs = model.required_structures()
    assert set(specs) == {DEP_MASK_KEY, lpea_key(2, "rule2")}
    cons, dep_tree = bush_trees()
    n = 6
    wop = np.arange(n)  # one piece per word
    src = torch.randint(4, 40, (1, n + 1))  # the words and EOS
    tgt = torch.randint(4, 40, (1, 5))
    alone = model(src, torch.ones_like(src, dtype=torch.bool), tgt,
                  build_structures(specs, [(dep_tree, cons)], [wop], n + 1)).logits
    S = n + 4
    psrc = torch.full((1, S), PAD)
    psrc[0, : n + 1] = src
    padded = model(psrc, psrc != PAD, tgt, build_structures(specs, [(dep_tree, cons)], [wop], S)).logits
    assert torch.isfinite(padded).all()
    assert_close(padded, alone, atol=1e-5, rtol=1e-5)
    # in a batch beside a longer sentence of 3 pieces per word
    wop3 = np.repeat(np.arange(n), 2)
    long_src = torch.randint(4, 40, (1, 2 * n + 1))
    bsrc = torch.full((2, 2 * n + 1), PAD)
    bsrc[0, : n + 1], bsrc[1] = src[0], long_src[0]
    batch = model(bsrc, bsrc != PAD, tgt.expand(2, -1),
                  build_structures(specs, [(dep_tree, cons)] * 2, [wop, wop3], 2 * n + 1)).logits
    assert torch.isfinite(batch).all()
    assert_close(batch[:1], alone, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- review additions


def test_lpea_bias_enters_the_rhe_layer_literally():
    """heads: all, k = 1 with relative layers beyond +-1 (clipping): the layer's weights are
    softmax(q k / sqrt(d) + P) over the local phrase, P from eq. 8 written out."""
    x, mask, dep, rp = inputs(B=2, S=7, seed=3)
    k = 1
    lpea = build("rhe", {"enhancement": "lpea", "heads": "all", "k": k})
    w = lpea(x, x, ctx_for(mask, dep, rp, k=k)).weights
    L = lpea.lpea
    table, W_P, b_P, U_P = L.table.weight, L.w_p.weight, L.w_p.bias, L.u_p.weight
    assert (rp.abs() > k).logical_and(rp != OUT_OF_PHRASE).any(), "the example must need clipping"
    P = torch.zeros(rp.shape)
    for b in range(rp.shape[0]):
        for i in range(rp.shape[1]):
            for j in range(rp.shape[2]):
                r = int(rp[b, i, j])
                if r != OUT_OF_PHRASE:
                    m = table[max(-k, min(k, r)) + k]
                    P[b, i, j] = -torch.abs(torch.tanh(W_P @ m + b_P) @ U_P.t()).squeeze()
    inside = (rp != OUT_OF_PHRASE) & mask[:, None, :]
    want = masked_softmax(plain_scores(lpea, x) + P[:, None], inside[:, None])
    assert_close(w, want)
    # and the sign matters: without P (or with +|.|) the weights differ
    assert not torch.allclose(w, masked_softmax(plain_scores(lpea, x), inside[:, None]), atol=1e-4)


@pytest.mark.parametrize("base,options", [("rel_pos", {"k": 2}), ("localness", {}), ("localness", {"per_head": True})])
def test_rhe_on_a_base_without_enhancement_equals_the_base_alone(base, options):
    x, mask, dep, rp = inputs(B=2, S=7)
    rhe = build("rhe", {"base": base, "base_options": options, "enhancement": "none", "heads": "all"})
    alone = build(base, options)
    alone.load_state_dict({k.removeprefix("base."): v for k, v in rhe.state_dict().items()})
    a = rhe(x, x, ctx_for(mask, dep, rp))
    b = alone(x, x, AttentionContext(key_mask=mask, need_weights=True))
    assert_close(a.weights, b.weights)
    assert_close(a.output, b.output)


@pytest.mark.parametrize("enh,options", [("rel_pos", {"k": 2}), ("localness", {})])
def test_baseline_as_enhancement_of_the_redundant_heads(enh, options):
    """The other reading of Table 2: Rel_Pos / Localness given to the redundant heads only.
    With heads: all it is the baseline mechanism itself; with RHE the selection per head."""
    x, mask, dep, rp = inputs(B=3, S=7)
    all_heads = build("rhe", {"enhancement": enh, "enhancement_options": options, "heads": "all"})
    alone = build(enh, options)
    sd = {}
    for k_, v in all_heads.state_dict().items():
        if k_.startswith("base."):
            sd[k_.removeprefix("base.")] = v
        elif k_.startswith("rel."):
            sd[k_] = v
        elif k_.startswith("loc."):
            sd["bias." + k_.removeprefix("loc.")] = v
    alone.load_state_dict(sd)
    a = all_heads(x, x, ctx_for(mask, dep, rp))
    b = alone(x, x, AttentionContext(key_mask=mask, need_weights=True))
    assert_close(a.weights, b.weights)
    assert_close(a.output, b.output)
    rhe = build("rhe", {"enhancement": enh, "enhancement_options": options})
    rhe.load_state_dict(all_heads.state_dict())
    r = rhe(x, x, ctx_for(mask, dep, rp))
    imp = r.extras["head_important"][:, :, None, None]
    assert imp.any() and not imp.all()
    assert_close(r.weights, torch.where(imp, r.extras["plain_weights"], a.weights))
    if enh == "rel_pos":  # the value term only on the heads that got Rel_Pos
        B, S, _ = x.shape
        _, v = rhe.base.kv_proj(x).chunk(2, -1)
        v = v.view(B, S, H, -1).transpose(1, 2)
        heads = r.weights @ v + rhe.rel.value_term(r.weights.masked_fill(imp, 0.0))
        assert_close(r.output, rhe.base.out_proj(heads.transpose(1, 2).reshape(B, S, D)))


def test_padding_and_eos_rows_do_not_count_in_identification():
    n = 4
    dep = torch.eye(n + 2, dtype=torch.bool)[None, None]
    w = torch.zeros(1, 1, n + 2, n + 2)
    for i in range(n):
        w[0, 0, i, i] = 1.0  # the real words attend to themselves: syntactic, confident
    w[0, 0, n, 0] = 1.0  # the EOS row (position n) attends far away
    w[0, 0, n + 1, 1] = 1.0  # a padding row too
    key_mask = torch.tensor([[True] * (n + 1) + [False]])
    roles = identify_heads(w, dep, query_tokens(key_mask, exclude_eos=True))
    assert_close(roles.syn_attn, torch.ones(1, 1))
    assert_close(roles.h_conf, torch.ones(1, 1))
    with_eos = identify_heads(w, dep, query_tokens(key_mask, exclude_eos=False))
    assert_close(with_eos.syn_attn, torch.full((1, 1), n / (n + 1)))


def test_rel_pos_value_term_uses_the_weights_after_dropout():
    x, mask, _, _ = inputs(S=6)
    torch.manual_seed(0)
    rel = build_attention("rel_pos", {"k": 2}, AttentionDims(D, H, 0.5, "encoder_self", "e")).train()
    torch.manual_seed(11)
    got = rel(x, x, AttentionContext(key_mask=mask))
    B, S, _ = x.shape
    q = rel.q_proj(x).view(B, S, H, -1).transpose(1, 2)
    kk, vv = rel.kv_proj(x).chunk(2, -1)
    kk, vv = (t.view(B, S, H, -1).transpose(1, 2) for t in (kk, vv))
    idx = relative_index(S, S, 2)
    aK, aV = rel.rel.rel_k.weight[idx], rel.rel.rel_v.weight[idx]
    e = (q[:, :, :, None, :] * (kk[:, :, None, :, :] + aK)).sum(-1) / math.sqrt(D // H)
    alpha = masked_softmax(e, mask[:, None, None, :])
    torch.manual_seed(11)
    dropped = torch.nn.functional.dropout(alpha, 0.5, training=True)
    z = (dropped[..., None] * (vv[:, :, None, :, :] + aV)).sum(-2)
    assert_close(got.output, rel.out_proj(z.transpose(1, 2).reshape(B, S, D)))


def test_lpea_alone_needs_no_dependency_trees():
    lpea = build("rhe", {"enhancement": "lpea", "heads": "all"})
    assert set(lpea.required_structures()) == {lpea_key(6, "rule2")}
    x, mask, dep, rp = inputs()
    out = lpea(x, x, AttentionContext(key_mask=mask, structures={lpea_key(6, "rule2"): rp}, need_weights=True))
    assert "head_important" not in out.extras and torch.isfinite(out.output).all()
    assert DEP_MASK_KEY in build("rhe", {"enhancement": "lpea"}).required_structures()
    with pytest.raises(ConfigError, match="enhancement_options"):
        build("rhe", {"enhancement": "dea", "enhancement_options": {"k": 2}})


def test_the_literal_reading_of_rule_2_is_an_lpea_option():
    """`rule: rule2_literal` (Rule 2 only from an earlier to a later word) builds an RHE layer whose
    LPEA positions are requested under that rule; an unknown rule is refused."""
    from structnmt.config import ConfigError
    from structnmt.nn.attention import AttentionDims, build_attention

    dims = AttentionDims(d_model=16, heads=2, dropout=0.0, role="encoder_self", cache_key="enc.0.self")
    rhe = build_attention("rhe", {"enhancement": "lpea", "heads": "all", "rule": "rule2_literal"}, dims)
    specs = rhe.required_structures()
    lpea = [s for s in specs.values() if s.feature == "lpea_positions"]
    assert len(lpea) == 1 and lpea[0].params["rule"] == "rule2_literal"
    with pytest.raises(ConfigError, match="unknown rule 'rule3'"):
        build_attention("rhe", {"enhancement": "lpea", "heads": "all", "rule": "rule3"}, dims)


@pytest.mark.parametrize(("hook", "options"), [("dea", {}), ("lpea", {"k": 2})])
def test_the_hook_mechanisms_give_rhe_s_all_heads_distributions(hook, options):
    """`dea` (logit_mask) and `lpea` (logit_bias, -inf outside the phrase) are the "+DEA" / "+LPEA" rows written as
    hooks of plain attention: with the same parameters they give what `rhe` with heads: all gives."""
    from structnmt.nn.attention import AttentionContext, AttentionDims, build_attention
    from structnmt.syntax.batching import build_structures
    from structnmt.testing import example_trees

    dims = AttentionDims(d_model=16, heads=4, dropout=0.0, role="encoder_self", cache_key="enc.0.self")
    torch.manual_seed(0)
    rhe = build_attention("rhe", {"enhancement": hook, "heads": "all", **options}, dims).eval()
    plain = build_attention(hook, options, dims).eval()
    plain.load_state_dict({k.removeprefix("base."): v for k, v in rhe.state_dict().items()})
    trees = example_trees()
    lengths = [len(d.words) + 1 for d, _ in trees]
    S = max(lengths)
    mask = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]
    structures = build_structures(plain.required_structures(), trees, [np.arange(n - 1) for n in lengths], S)
    x = torch.randn(len(trees), S, 16)
    ctx = AttentionContext(key_mask=mask, structures=structures, need_weights=True)
    a, b = rhe(x, x, ctx), plain(x, x, ctx)
    real = mask[:, None, :, None]
    assert_close(a.weights.masked_fill(~real, 0.0), b.weights.masked_fill(~real, 0.0), atol=1e-6, rtol=1e-5)
    assert_close(a.output[mask], b.output[mask], atol=1e-6, rtol=1e-5)
