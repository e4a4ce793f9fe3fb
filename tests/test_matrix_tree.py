"""Matrix-tree marginals (SA-NMT eqs. 10-15) against brute-force enumeration of every
single-root non-projective tree, with padding, extreme scores and gradients."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.testing import assert_close

from structnmt.nn.matrix_tree import marginals


def trees(n: int):
    """Every head vector (0 = root, else 1-based head) of a single-root tree over n words."""
    for heads in itertools.product(range(n + 1), repeat=n):
        if sum(h == 0 for h in heads) != 1 or any(h == d + 1 for d, h in enumerate(heads)):
            continue
        ok = True
        for d in range(n):  # follow heads to the root without a cycle
            seen, x = set(), d
            while heads[x] != 0:
                if x in seen:
                    ok = False
                    break
                seen.add(x)
                x = heads[x] - 1
            if not ok:
                break
        if ok:
            yield heads


def brute(scores: torch.Tensor) -> torch.Tensor:
    """(n, n) scores -> (n, n) marginals in the same layout, by enumeration (float64, log-space)."""
    n = scores.shape[0]
    s = scores.double()
    logw, arcs = [], []
    for heads in trees(n):
        z = torch.zeros(n, n, dtype=torch.float64)
        for d, h in enumerate(heads):
            z[d if h == 0 else h - 1, d] = 1.0
        logw.append((z * s).sum())
        arcs.append(z)
    logw = torch.stack(logw)
    p = torch.softmax(logw, 0)
    return (p[:, None, None] * torch.stack(arcs)).sum(0)


def test_number_of_trees_is_cayley():
    # single-root trees over n labelled words: n^(n-1) (rooted labelled trees)
    assert [len(list(trees(n))) for n in (1, 2, 3, 4)] == [1, 2, 9, 64]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_marginals_equal_enumeration(n):
    g = torch.Generator().manual_seed(n)
    s = torch.randn(n, n, generator=g, dtype=torch.float64) * 2
    got = marginals(s[None], torch.tensor([n]))[0]
    assert_close(got, brute(s), atol=1e-10, rtol=1e-8)
    assert_close(got.sum(0), torch.ones(n, dtype=torch.float64))  # one head (or the root) per word
    assert_close(torch.diagonal(got).sum(), torch.tensor(1.0, dtype=torch.float64))  # one root


def test_padding_and_batching():
    g = torch.Generator().manual_seed(0)
    n = 6
    s = torch.randn(3, n, n, generator=g)
    lengths = torch.tensor([6, 4, 1])
    s_padded = s.clone()
    s_padded[1, 4:, :] = 1e4  # garbage in padded rows and columns changes nothing
    s_padded[1, :, 4:] = -1e4
    got = marginals(s_padded, lengths)
    for b, m in enumerate(lengths.tolist()):
        alone = marginals(s[b: b + 1, :m, :m], torch.tensor([m]))[0]
        assert_close(got[b, :m, :m], alone, atol=1e-6, rtol=1e-5)
        assert (got[b, m:, :] == 0).all() and (got[b, :, m:] == 0).all()
    assert got[2, 0, 0] == 1.0  # a one-word sentence: it is the root
    assert got.dtype == s.dtype


@pytest.mark.parametrize("offset", [1e4, -1e4, 3e4])
def test_extreme_scores_equal_enumeration(offset):
    """Very large and very negative scores (an offset of +-10^4, scores spread with std 5,
    arcs ruled out at -10^4 below the rest): finite and equal to enumeration. (With a std
    of 20 the closed form loses precision to ill-conditioning, ~3e-6 absolute, while the
    marginals are nearly one-hot; with 10, ~3e-11.)"""
    g = torch.Generator().manual_seed(1)
    n = 5
    s = torch.randn(n, n, generator=g, dtype=torch.float64) * 5 + offset
    s[0, 1] = s[2, 3] = offset - 1e4  # very negative arcs
    got = marginals(s[None], torch.tensor([n]))[0]
    assert torch.isfinite(got).all()
    assert_close(got, brute(s), atol=1e-9, rtol=1e-7)
    assert got[0, 1] < 1e-200 and got[2, 3] < 1e-200  # ruled out (floored at e^-600, see FLOOR)
    got32 = marginals(s[None].float(), torch.tensor([n]))[0]
    assert got32.dtype == torch.float32 and torch.isfinite(got32).all()
    assert_close(got32.double(), brute(s.float().double()), atol=1e-5, rtol=1e-4)  # the same rounded scores


@pytest.mark.parametrize("scale", [1e3, 1e4])
def test_degenerate_scores_stay_distributions(scale):
    """Scores so far apart that float64 cannot resolve the forced choices (see FLOOR):
    still finite, non-negative, one head per word and one root."""
    g = torch.Generator().manual_seed(3)
    s = torch.randn(4, 6, 6, generator=g) * scale
    got = marginals(s, torch.tensor([6, 5, 2, 1]))
    assert torch.isfinite(got).all() and (got >= -1e-6).all()
    for b, m in enumerate([6, 5, 2, 1]):
        assert_close(got[b, :m, :m].sum(0), torch.ones(m), atol=1e-4, rtol=1e-4)
        assert_close(torch.diagonal(got[b])[:m].sum(), torch.tensor(1.0), atol=1e-4, rtol=1e-4)


def test_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(2, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 3])
    w = torch.randn(2, 4, 4, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: (marginals(x, lengths) * w).sum(), (s,))
    # no gradient reaches scores outside the sentence
    (marginals(s, lengths) * w).sum().backward()
    assert (s.grad[1, 3, :] == 0).all() and (s.grad[1, :, 3] == 0).all()


def test_bad_shape():
    with pytest.raises(ValueError, match=r"\(B, n, n\)"):
        marginals(torch.zeros(2, 3, 4), torch.tensor([3, 3]))


def test_structured_attention_mechanism_is_the_tree_marginals():
    """The Transformer mechanism: query j's weight on key i is beta[i, j] (i heads j), root on j."""
    from structnmt.nn import AttentionContext, AttentionDims, build_attention
    from structnmt.nn.attention import split_heads

    torch.manual_seed(0)
    dims = AttentionDims(16, 2, 0.0, "encoder_self", "enc.0.self")
    attn = build_attention("structured", {"heads": 1}, dims).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out = attn(x, x, AttentionContext(key_mask=mask, need_weights=True))
    q = split_heads(attn.q_proj(x), 2)
    k = split_heads(attn.kv_proj(x).chunk(2, -1)[0], 2)
    phi = torch.matmul(k[:, 0], q[:, 0].transpose(-1, -2)) / 8**0.5  # [head i, dependent j]
    beta = marginals(phi, mask.sum(-1))
    assert_close(out.extras["arcs"][:, 0], beta)
    assert_close(out.weights[:, 0], beta.transpose(1, 2))
    assert_close(out.weights[0, 0].sum(-1), torch.ones(5))  # each word: one head or the root
    assert (out.weights[1, :, :, 3:] == 0).all()  # padding is never a head
    assert_close(out.weights[:, 1].sum(-1)[0], torch.ones(5))  # head 2 stays plain softmax attention
    # padding invariance of the real words' outputs
    alone = attn(x[1:, :3], x[1:, :3], AttentionContext()).output
    assert_close(out.output[1:, :3], alone, atol=1e-5, rtol=1e-5)
    out.output.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters() if p.grad is not None)


def test_structured_attention_in_a_transformer_encoder():
    from structnmt.config import AttentionSpec, ModelConfig
    from structnmt.models import build_model

    cfg = ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=2, decoder_layers=1, dropout=0.0)
    cfg.attention.overrides["encoder_self.0"] = AttentionSpec("structured", {"root": "learned"})
    model = build_model(cfg, 20, 20).eval()
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])
    out = model(src, src != 0, torch.tensor([[1, 8], [1, 9]]), need_weights=True)
    w = out.attentions["encoder_self"][0]
    assert_close(w[0].sum(-1), torch.ones(2, 4))
    cfg.attention.decoder_self = AttentionSpec("structured")
    with pytest.raises(Exception, match="encoder self-attention"):
        build_model(cfg, 20, 20)


# The column-best choices of this sentence form a cycle (2 <-> 3 heads each other) with a margin
# of ~64 nats: its Laplacian needs 1 + e^-64, which float64 rounds to 1, so the solve is singular
# (it raised torch.linalg.LinAlgError in an SA-NMT-hard training run before the fallback existed).
CYCLE = torch.tensor([[-40.0, -64.0, -244.0], [-114.0, -111.0, 0.0], [0.0, 0.0, -383.0]], dtype=torch.float64)


def test_sentences_the_closed_form_cannot_resolve_get_the_exact_marginals_and_the_others_are_untouched():
    from structnmt.nn import matrix_tree
    from structnmt.nn.matrix_tree import _closed_form

    good = torch.randn(3, 3, dtype=torch.float64)
    scores = torch.stack([CYCLE, good]).requires_grad_(True)
    lengths = torch.tensor([3, 3])
    pair = torch.ones(1, 3, 3, dtype=torch.bool)
    shifted = CYCLE[None] - CYCLE[None].amax(dim=1, keepdim=True)
    assert not bool(_closed_form(shifted, torch.ones(1, 3, dtype=torch.bool), pair)[1])  # float64 fails it
    before = dict(matrix_tree.STATS)
    beta = marginals(scores, lengths)
    assert matrix_tree.STATS["exact_elimination"] == before["exact_elimination"] + 1
    assert matrix_tree.STATS["tempered"] == before["tempered"]
    assert matrix_tree.STATS["sentences"] == before["sentences"] + 2
    assert torch.allclose(beta[0], brute(CYCLE), atol=1e-12)  # exact, not tempered
    assert torch.equal(beta[1], marginals(good[None], lengths[:1])[0])  # untouched
    # gradients through the elimination path: finite, and equal to the enumeration's
    w = torch.randn(3, 3, dtype=torch.float64)
    (beta[0] * w).sum().backward()
    s = CYCLE.clone().requires_grad_(True)
    (brute(s) * w).sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.allclose(scores.grad[0], s.grad, atol=1e-9)


def test_a_sentence_no_exact_path_resolves_gets_the_tempered_marginals(monkeypatch):
    """The last resort, kept for what neither path resolves: the scores divided by the smallest power of 2
    the closed form resolves (forced here by making the elimination path fail)."""
    from structnmt.nn import matrix_tree
    from structnmt.nn.matrix_tree import _closed_form

    monkeypatch.setattr(matrix_tree, "_gth_marginals",
                        lambda shifted, valid, pair, longest=None: (torch.zeros_like(shifted),
                                                                    torch.zeros(len(shifted), dtype=torch.bool)))
    beta = marginals(CYCLE[None], torch.tensor([3]))[0]
    pair = torch.ones(1, 3, 3, dtype=torch.bool)
    shifted = CYCLE[None] - CYCLE[None].amax(dim=1, keepdim=True)
    k = next(k for k in range(1, 65) if bool(_closed_form(shifted * 2.0**-k, torch.ones(1, 3, dtype=torch.bool),
                                                          pair)[1]))
    assert torch.allclose(beta, brute(CYCLE * 2.0**-k), atol=1e-9)


def one_sentence(s: torch.Tensor) -> torch.Tensor:
    """marginals of one (n, n) score matrix."""
    return marginals(s[None], torch.tensor([s.shape[0]]))[0]


def _values_and_gradients(fn, s: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = s.clone().requires_grad_(True)
    beta = fn(s)
    (beta * w).sum().backward()
    return beta.detach(), s.grad


@pytest.mark.parametrize("std", [10.0, 20.0, 50.0, 100.0, 300.0, 1000.0])
def test_marginals_and_their_gradients_equal_enumeration_for_scores_up_to_std_1000(std):
    """Random score matrices (n <= 6) of standard deviation 10 to 1,000, where the closed form alone fails or
    is inaccurate on a share of them (a forced choice can lie hundreds of nats under a column's best,
    pivots of e^-200 and less): every value within 1e-6 of enumeration and every gradient (of the marginals
    against random weights, as training takes it) within 1e-6 of the largest, none tempered. The closed
    form's results pass its distribution check far more often than they are accurate: without the
    condition-number gate (COND_MAX) gradients at std 20-50 were off by up to 2."""
    from structnmt.nn import matrix_tree

    gen = torch.Generator().manual_seed(int(std))
    before = dict(matrix_tree.STATS)
    for _ in range(40):
        n = int(torch.randint(2, 7, (), generator=gen))
        s = torch.randn(n, n, dtype=torch.float64, generator=gen) * std
        w = torch.randn(n, n, dtype=torch.float64, generator=gen)
        got, got_grad = _values_and_gradients(one_sentence, s, w)
        want, want_grad = _values_and_gradients(brute, s, w)
        assert torch.allclose(got, want, atol=1e-6, rtol=0)
        assert (got_grad - want_grad).abs().max() <= 1e-6 * (1 + want_grad.abs().max())
    assert matrix_tree.STATS["tempered"] == before["tempered"]
    assert matrix_tree.STATS["exact_elimination"] > before["exact_elimination"]  # the second path was used


def test_a_tree_that_needs_an_arc_800_nats_under_its_column_best():
    """The best tree here: the second word is the root and heads the third through an arc of -811, 811
    nats under that column's best. e^-811 underflows in float64, and an elimination in linear space
    answered for another tree (the third word the root with probability 1: a distribution, so it passed
    every check). The log-space elimination gives the enumeration's answer."""
    s = torch.tensor([[-1789.0, 0.0, 0.0], [-1326.0, -328.0, -811.0], [0.0, -568.0, -1301.0]], dtype=torch.float64)
    got = one_sentence(s)
    assert torch.allclose(got, brute(s), atol=1e-9)
    assert float(got[1, 1]) == pytest.approx(1.0) and float(got[1, 2]) == pytest.approx(1.0)


def test_training_gradients_where_a_pivot_is_e_minus_200_equal_finite_differences():
    """A 10-word sentence of std-300 scores whose elimination meets pivots of about e^-228: the gradient
    of sum(w * beta) (what training back-propagates) equals central differences of the marginals
    themselves; through an elimination in linear space it was off by 1.7 where the truth is below 1e-5."""
    gen = torch.Generator().manual_seed(307)
    for i in range(52):  # the 52nd matrix of this stream is such a sentence
        n = int(torch.randint(2, 7, (), generator=gen)) if i % 3 else int(torch.randint(7, 13, (), generator=gen))
        s = torch.randn(n, n, dtype=torch.float64, generator=gen) * 300
        w = torch.randn(n, n, dtype=torch.float64, generator=gen)
    assert n == 10
    _, grad = _values_and_gradients(one_sentence, s, w)
    fd = torch.zeros_like(s)
    h = 1e-5
    for i, j in itertools.product(range(n), repeat=2):
        up, down = s.clone(), s.clone()
        up[i, j] += h
        down[i, j] -= h
        fd[i, j] = ((one_sentence(up) - one_sentence(down)) * w).sum() / (2 * h)
    assert (grad - fd).abs().max() <= 1e-6


def test_the_elimination_path_alone_equals_enumeration_in_a_padded_batch():
    """_gth_marginals on a batch of sentences of different lengths (padding -inf): each sentence's
    marginals equal its enumeration, zeros outside its length, whatever the scores' scale."""
    from structnmt.nn.matrix_tree import _gth_marginals

    gen = torch.Generator().manual_seed(3)
    lengths = torch.tensor([6, 4, 1, 5])
    for std in (1.0, 30.0):
        s = torch.randn(4, 6, 6, dtype=torch.float64, generator=gen) * std
        valid = torch.arange(6)[None] < lengths[:, None]
        pair = valid[:, :, None] & valid[:, None, :]
        x = s.masked_fill(~pair, float("-inf"))
        shifted = (x - x.amax(dim=1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)).masked_fill(~pair, float("-inf"))
        beta, ok = _gth_marginals(shifted, valid, pair)
        assert ok.all()
        for b, n in enumerate(lengths.tolist()):
            assert torch.allclose(beta[b, :n, :n], brute(s[b, :n, :n]), atol=1e-12)
            assert float(beta[b].sum()) == pytest.approx(n)


def test_large_unscaled_scores_never_raise_and_keep_gradients_finite():
    torch.manual_seed(0)
    for scale in (100.0, 1000.0):
        s = (torch.randn(32, 30, 30, dtype=torch.float64) * scale).requires_grad_(True)
        lengths = torch.randint(2, 31, (32,))
        b = marginals(s, lengths)
        b.sum().backward()
        assert torch.isfinite(b).all() and torch.isfinite(s.grad).all()
        real = torch.arange(30)[None, :] < lengths[:, None]
        assert torch.allclose(b.sum(dim=1), real.double(), atol=1e-6)


def test_the_training_logs_the_paths_taken_at_every_validation_and_resets_the_counts():
    from types import SimpleNamespace

    from structnmt.cli.training import MatrixTreeHook
    from structnmt.nn import matrix_tree

    logged = []
    trainer = SimpleNamespace(state=SimpleNamespace(num_updates=500),
                              metrics=SimpleNamespace(log=lambda kind, step, values: logged.append((kind, step, values))))
    for key in matrix_tree.STATS:
        matrix_tree.STATS[key] = 0
    marginals(torch.stack([CYCLE, torch.zeros(3, 3, dtype=torch.float64)]), torch.tensor([3, 2]))
    MatrixTreeHook().on_validation(trainer)
    assert logged == [("matrix_tree", 500, {"sentences": 2, "exact_elimination": 1, "tempered": 0})]
    assert all(v == 0 for v in matrix_tree.STATS.values())
    MatrixTreeHook().on_validation(trainer)  # nothing computed since: nothing logged
    assert len(logged) == 1


def test_the_exact_path_works_under_inference_mode_as_decoding_runs_it():
    """Beam search runs under torch.inference_mode, where enable_grad alone cannot build the graph the exact
    path differentiates (its log-partition's gradient is the marginals): a sentence the closed form cannot
    resolve must still get its exact marginals there, not a RuntimeError."""
    good = torch.randn(3, 3, dtype=torch.float64)
    scores, lengths = torch.stack([CYCLE, good]), torch.tensor([3, 3])
    with torch.inference_mode():
        beta = marginals(scores, lengths)
    assert torch.allclose(beta[0], brute(CYCLE), atol=1e-12)
    with torch.no_grad():
        assert torch.allclose(marginals(scores, lengths)[0], brute(CYCLE), atol=1e-12)
