"""Tests for structnmt.syntax.batching.build_structures and collate(..., structures)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from structnmt.data.dataset import PreparedDataset, collate
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.data.vocab import EOS, PAD
from structnmt.syntax.batching import IGNORE_LABEL, StructureSpec, build_structures
from structnmt.syntax.features import OUT_OF_PHRASE
from structnmt.syntax.io import parse_ptb
from structnmt.syntax.parsers import ParserConfig
from structnmt.syntax.trees import DependencyTree

# three sentences of different lengths, words with several pieces, a one-word sentence
SENTENCES = [
    (  # the cat sat ; "cat" has 2 pieces -> P = 4
        parse_ptb("(S (NP (DT the) (NN cat)) (VP (VBD sat)))"),
        DependencyTree(["the", "cat", "sat"], [2, 3, 0], ["det", "nsubj", "root"], ["DET", "NOUN", "VERB"]),
        np.array([0, 1, 1, 2]),
    ),
    (  # dogs bark very loudly today . -> P = 8
        parse_ptb("(S (NP (NNS dogs)) (VP (VBP bark) (ADVP (RB very) (RB loudly)) (NP (NN today))) (. .))"),
        DependencyTree(["dogs", "bark", "very", "loudly", "today", "."], [2, 0, 4, 2, 2, 2],
                       ["nsubj", "root", "advmod", "advmod", "npadvmod", "punct"],
                       ["NOUN", "VERB", "ADV", "ADV", "NOUN", "PUNCT"]),
        np.array([0, 0, 1, 2, 3, 3, 4, 5]),
    ),
    (  # Hi -> P = 2
        parse_ptb("(S (UH Hi))"),
        DependencyTree(["Hi"], [0], ["root"], ["INTJ"]),
        np.array([0, 0]),
    ),
]
P = [len(w) for _, _, w in SENTENCES]
S = max(P) + 1
LABEL_IDS = {"NP": 1, "VP": 2, "ADVP": 3, "NNS": 4, "VBP": 5}

SPECS = {
    "ng": StructureSpec("ngram_partition", {"n": 2}),
    "syn": StructureSpec("syntax_partition", {"K": 2}),
    "dep": StructureSpec("dep_mask"),
    "lp": StructureSpec("lpea_positions", {"k": 2}),
    "nh": StructureSpec("ngram_hypernodes", {"k": 3}),
    "dh": StructureSpec("dep_hypernodes"),
    "wb": StructureSpec("word_boundaries"),
}


def build_dataclass(indices, S_=None):
    sents = [SENTENCES[i] for i in indices]
    trees = [(dep, const) for const, dep, _ in sents]
    wops = [w for _, _, w in sents]
    S_ = S_ if S_ is not None else max(len(w) for w in wops) + 1
    return build_structures(SPECS, trees, wops, S_, LABEL_IDS)


@pytest.fixture(scope="module")
def batch():
    return build_dataclass([0, 1, 2], S)


def test_output_keys(batch):
    assert set(batch) == {"ng", "syn", "syn.labels", "dep", "lp", "nh", "nh.mask", "nh.neighbours",
                          "dh", "dh.mask", "dh.neighbours", "wb"}


def test_ngram_partition(batch):
    t = batch["ng"]
    assert t.shape == (3, S) and t.dtype == torch.long
    # sentence 1: words 0..5 -> phrases 0,0,1,1,2,2 over pieces [0,0,1,2,3,3,4,5]; EOS = 3
    assert t[1].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3]
    for b, p in enumerate(P):
        assert t[b, p] == int(t[b, :p].max()) + 1  # EOS its own phrase
        assert (t[b, p + 1:] == -1).all()
    assert t[0].tolist() == [0, 0, 0, 1, 2, -1, -1, -1, -1]


def test_syntax_partition(batch):
    t, lab = batch["syn"], batch["syn.labels"]
    assert t.shape == (3, 2, S) and t.dtype == torch.long
    assert lab.dtype == torch.long and lab.shape[:2] == (3, 2)
    # sentence 1, level 1: NP(dogs) VP(bark .. today) .(.) -> 3 phrases; EOS phrase 3
    assert t[1, 0].tolist() == [0, 0, 1, 1, 1, 1, 1, 2, 3]
    assert lab[1, 0, :3].tolist() == [1, 2, IGNORE_LABEL]  # "." has no id -> ignored
    assert (lab[1, 0, 3:] == IGNORE_LABEL).all()  # EOS's phrase and padding ignored
    # level 2: dogs (NNS), bark (VBP), ADVP, NP(today), "." (its preterminal)
    assert t[1, 1].tolist() == [0, 0, 1, 2, 2, 2, 3, 4, 5]
    assert lab[1, 1, :5].tolist() == [4, 5, 3, 1, IGNORE_LABEL]
    for b, p in enumerate(P):
        for level in range(2):
            assert t[b, level, p] == int(t[b, level, :p].max()) + 1
            assert (t[b, level, p + 1:] == -1).all()
            n_phrases = int(t[b, level, :p].max()) + 1
            assert (lab[b, level, n_phrases:] == IGNORE_LABEL).all()
    # the label dimension has room for the EOS phrase of the longest labelling
    assert lab.shape[2] == 5 + 1


def test_syntax_partition_without_label_ids_ignores_every_label():
    out = build_structures({"s": StructureSpec("syntax_partition", {"K": 1})},
                           [(SENTENCES[0][1], SENTENCES[0][0])], [SENTENCES[0][2]], 5)
    assert (out["s.labels"] == IGNORE_LABEL).all()


def test_dep_mask(batch):
    t = batch["dep"]
    assert t.shape == (3, S, S) and t.dtype == torch.bool
    # padded rows/cols: False except the diagonal, which stays True (no empty row)
    assert torch.diagonal(t, dim1=1, dim2=2).all()
    for b, p in enumerate(P):
        off = ~torch.eye(S, dtype=torch.bool)
        assert not t[b, p:, :][off[p:, :]].any()  # EOS and padding rows
        assert not t[b, :, p:][off[:, p:]].any()  # EOS and padding columns
        assert t[b, :p, :p].any(dim=1).all()
    # sentence 0: the(0) - cat(1,2) - sat(3): the<->cat, cat<->sat, not the<->sat
    m = t[0, :4, :4]
    assert m[0, 1] and m[0, 2] and m[1, 3] and m[2, 3] and m[1, 2]
    assert not m[0, 3] and not m[3, 0]


def test_lpea_positions(batch):
    t = batch["lp"]
    assert t.shape == (3, S, S) and t.dtype == torch.long
    for b, p in enumerate(P):
        assert t[b, p, p] == 0  # EOS: 0 on the diagonal
        assert (t[b, p, :p] == OUT_OF_PHRASE).all() and (t[b, :p, p] == OUT_OF_PHRASE).all()
        off = ~torch.eye(S, dtype=torch.bool)
        assert (t[b, p + 1:, :][off[p + 1:, :]] == OUT_OF_PHRASE).all()  # padding
        assert (t[b, :, p + 1:][off[:, p + 1:]] == OUT_OF_PHRASE).all()
        real = t[b, :p, :p]
        finite = real != OUT_OF_PHRASE
        assert (real[finite].abs() <= 2).all()
        assert torch.diagonal(real).eq(0).all()
    # pieces of one word: relative position 0 among themselves
    assert t[0, 1, 2] == 0 and t[0, 2, 1] == 0


def test_hypernodes(batch):
    nh, nmask = batch["nh"], batch["nh.mask"]
    # n-grams of length 2..3 over W words: W-1 + W-2 -> 3 words: 3, 6 words: 9, 1 word: 0
    assert nh.shape == (3, 9, S) and nh.dtype == torch.bool
    assert nmask.shape == (3, 9) and nmask.dtype == torch.bool
    assert nmask.sum(dim=1).tolist() == [3, 9, 0]
    dh, dmask = batch["dh"], batch["dh.mask"]
    # one hypernode per arc: W - 1
    assert dh.shape == (3, 5, S) and dmask.sum(dim=1).tolist() == [2, 5, 0]
    for t, mask in ((nh, nmask), (dh, dmask)):
        for b, p in enumerate(P):
            assert not t[b, :, p:].any()  # EOS and padding columns
            assert not t[b, ~mask[b]].any()  # padding hypernodes
            assert t[b, mask[b], :p].sum(dim=1).ge(2).all()  # each real hypernode covers >= 2 pieces
    # sentence 0, first bigram "the cat" covers pieces 0..2; dep arc the<-cat idem
    assert nh[0, 0, :4].tolist() == [True, True, True, False]
    assert dh[0, 0, :4].tolist() == [True, True, True, False]


def test_hypernode_neighbours_are_eq6(batch):
    """The neighbour lists equal eq. 6's dense adjacency over the batch's S + N nodes."""
    from structnmt.syntax.features import hypernode_adjacency

    for key in ("nh", "dh"):
        member, mask, nbr = batch[key].numpy(), batch[key + ".mask"].numpy(), batch[key + ".neighbours"]
        B, N, S_ = member.shape
        assert nbr.shape[:2] == (B, S_ + N) and nbr.dtype == torch.long
        for b in range(B):
            n = int(mask[b].sum())
            want = np.zeros((S_ + N, S_ + N), dtype=bool)
            want[: S_ + n, : S_ + n] = hypernode_adjacency(member[b, :n])
            want[np.arange(S_ + n, S_ + N), np.arange(S_ + n, S_ + N)] = True  # padded hypernodes: themselves
            got = np.zeros_like(want)
            for i in range(S_ + N):
                cols = [c for c in nbr[b, i].tolist() if c >= 0]
                assert cols == sorted(cols) and len(set(cols)) == len(cols)
                got[i, cols] = True
            assert (got == want).all()
    # sentence 0 ("the cat ..."): piece 0 is in bigram 0 and trigram (node S + 2): itself first
    assert batch["nh.neighbours"][0, 0, :3].tolist() == [0, S, S + 2]
    assert batch["nh.neighbours"].shape[2] == int(batch["nh.neighbours"].ge(0).sum(-1).max())


def test_word_boundaries(batch):
    t = batch["wb"]
    assert t.shape == (3, S) and t.dtype == torch.bool
    assert t[0].tolist() == [True, True, False, True, True, False, False, False, False]
    assert t[1].tolist() == [True, False, True, True, True, False, True, True, True]
    assert t[2].tolist() == [True, False, True, False, False, False, False, False, False]


def test_padding_invariance(batch):
    """A sentence's values in a padded batch equal those computed for it alone."""
    for b in range(3):
        alone = build_dataclass([b])
        p = P[b]
        Sa = p + 1
        for key, full in batch.items():
            one = alone[key]
            assert one.shape[0] == 1
            if key in ("ng", "wb"):
                assert torch.equal(full[b, :Sa], one[0]), key
            elif key == "syn":
                assert torch.equal(full[b, :, :Sa], one[0]), key
            elif key == "syn.labels":
                m = one.shape[2]
                assert torch.equal(full[b, :, :m], one[0]), key
                assert (full[b, :, m:] == IGNORE_LABEL).all()
            elif key in ("dep", "lp"):
                assert torch.equal(full[b, :Sa, :Sa], one[0]), key
            elif key in ("nh", "dh"):
                n = int(alone[key + ".mask"].sum())
                assert torch.equal(full[b, :n, :Sa], one[0, :n]), key
                assert not full[b, n:].any()
            elif key.endswith(".neighbours"):  # node j of the sentence alone is node j (token) or S - Sa + j
                n = int(alone[key[: -len(".neighbours")] + ".mask"].sum())
                Sb = full.shape[1] - batch[key[: -len(".neighbours")]].shape[1]
                rows_alone = list(range(Sa)) + list(range(Sa, Sa + n))
                rows_full = list(range(Sa)) + list(range(Sb, Sb + n))
                for ra, rf in zip(rows_alone, rows_full):
                    a_ = one[0, ra][one[0, ra] >= 0]
                    a_ = torch.where(a_ >= Sa, a_ - Sa + Sb, a_)
                    f_ = full[b, rf][full[b, rf] >= 0]
                    assert torch.equal(a_, f_), (key, ra)
            elif key.endswith(".mask"):
                n = int(one.sum())
                assert full[b, :n].all() and not full[b, n:].any(), key
            else:  # pragma: no cover - a new key needs a rule here
                raise AssertionError(f"no invariance rule for {key}")


def test_unknown_feature_name():
    with pytest.raises(ValueError) as err:
        build_structures({"x": StructureSpec("ngram_partitoin", {"n": 2})}, [(None, None)], [np.array([0])], 2)
    msg = str(err.value)
    assert "data.structures.x" in msg and "ngram_partitoin" in msg
    assert "ngram_partition" in msg and "word_boundaries" in msg


def test_missing_tree_is_an_error():
    with pytest.raises(ValueError, match="dependency"):
        build_structures({"d": StructureSpec("dep_mask")}, [(None, SENTENCES[0][0])], [SENTENCES[0][2]], 5)


# ----------------------------------------------------------------------------- collate


@pytest.fixture(scope="module")
def parsed_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    write_corpus(SynthConfig(seed=5, n_train=60, n_valid=5, n_test=5), root / "corpus")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "corpus" / "train"),
                          vocab_size=200, parser=ParserConfig(name="synthetic")),
            root / "out", progress=False, log=lambda *_: None)
    return PreparedDataset(root / "out").split("train")


def test_collate_with_structures(parsed_split):
    sp = parsed_split
    ids = np.array([int(np.argmax(sp.src_lens)), int(np.argmin(sp.src_lens)), 3])
    batch = collate(sp, ids, SPECS, LABEL_IDS)
    B, S_ = batch.src.shape
    assert B == 3
    st = batch.structures
    assert st["ng"].shape == (B, S_) and st["wb"].shape == (B, S_)
    assert st["syn"].shape == (B, 2, S_) and st["dep"].shape == (B, S_, S_) and st["lp"].shape == (B, S_, S_)
    assert st["nh"].shape[0] == B and st["nh"].shape[2] == S_ and st["dh"].shape[2] == S_
    pad = batch.src == PAD
    eos = batch.src == EOS
    assert ((st["ng"] == -1) == pad).all()
    assert (st["syn"][:, 0] == -1).eq(pad).all()
    # word boundaries: True at EOS, False at padding, one True per word otherwise
    assert st["wb"][eos].all() and not st["wb"][pad].any()
    for b, i in enumerate(ids):
        dep, const = sp.trees(int(i))
        n_words = len(dep.words)
        assert int(st["wb"][b].sum()) == n_words + 1
        wop = sp.word_of_piece(int(i))
        alone = build_structures(SPECS, [(dep, const)], [wop], len(wop) + 1, LABEL_IDS)
        Sa = len(wop) + 1
        assert torch.equal(st["dep"][b, :Sa, :Sa], alone["dep"][0])
        assert torch.equal(st["lp"][b, :Sa, :Sa], alone["lp"][0])
        assert torch.equal(st["syn"][b, :, :Sa], alone["syn"][0])
    # padding rows of the dependency mask keep their diagonal
    assert torch.diagonal(st["dep"], dim1=1, dim2=2).all()


def test_structure_values_are_computed_once_and_equal_fresh_ones(tmp_path, monkeypatch):
    """The split keeps each sentence's feature values: the second batch of the same
    sentences computes nothing, and cached, uncached (0 MB) and fresh tensors are equal."""
    import structnmt.syntax.batching as batching_mod

    root = tmp_path / "c"
    write_corpus(SynthConfig(seed=6, n_train=30, n_valid=3, n_test=3), root / "corpus")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "corpus" / "train"),
                          vocab_size=200, parser=ParserConfig(name="synthetic")),
            root / "out", progress=False, log=lambda *_: None)
    ds = PreparedDataset(root / "out")
    cached, uncached = ds.split("train"), ds.split("train", structure_cache_mb=0)
    calls: list[int] = []
    real = batching_mod.feature_values

    def counting(spec, trees, wops):
        calls.append(len(wops))
        return real(spec, trees, wops)

    import structnmt.data.dataset as dataset_mod

    monkeypatch.setattr(batching_mod, "feature_values", counting)
    monkeypatch.setattr(dataset_mod, "feature_values", counting)  # where the split calls it
    ids = np.array([0, 5, 7, 11])
    first = collate(cached, ids, SPECS, LABEL_IDS).structures
    assert sum(calls) == len(ids) * len(SPECS)
    calls.clear()
    again = collate(cached, ids[::-1].copy(), SPECS, LABEL_IDS).structures  # other order, same sentences
    assert calls == []
    calls.clear()
    plain = collate(uncached, ids, SPECS, LABEL_IDS).structures
    assert sum(calls) == len(ids) * len(SPECS)  # nothing kept at 0 MB ...
    assert not uncached._feature_cache_used and cached._feature_cache_used > 0
    for key, t in first.items():  # ... and the same tensors
        assert torch.equal(t, plain[key]), key
        assert t.dtype == plain[key].dtype, key
        assert torch.equal(again[key].flip(0), t), key
    # fresh values from the trees, without the split's machinery
    S_ = first["ng"].shape[1]
    trees = [cached.trees(int(i)) for i in ids]
    fresh = build_structures(SPECS, trees, [cached.word_of_piece(int(i)) for i in ids], S_, LABEL_IDS)
    for key, t in fresh.items():
        assert torch.equal(first[key], t), key


def test_precompute_keeps_every_sentence_or_stops_at_the_cache_limit(parsed_split):
    ds_root = parsed_split.root
    ds = PreparedDataset(ds_root)
    full = ds.split("train")
    specs = {"dep": SPECS["dep"], "ng": SPECS["ng"]}
    assert full.precompute_structures(specs, chunk=7) == len(full)
    assert full.structures_kept_mb > 0
    tiny = ds.split("train", structure_cache_mb=full.structures_kept_mb / 4)
    kept = tiny.precompute_structures(specs, chunk=7)
    assert 0 < kept < len(tiny)
    # sentences beyond the limit are still batched correctly (computed per batch)
    ids = np.array([len(tiny) - 1, 0])
    a, b = collate(tiny, ids, specs).structures, collate(full, ids, specs).structures
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_sentence_twice_in_a_batch_past_the_memory_bound(parsed_split):
    ds = PreparedDataset(parsed_split.root)
    none_kept = ds.split("train", structure_cache_mb=0)
    specs = {"dep": SPECS["dep"]}
    a = none_kept.structure_values([4, 4, 2], specs)["dep"]
    assert len(a) == 3 and np.array_equal(a[0], a[1])
    full = ds.split("train")
    b = full.structure_values([4, 4, 2], specs)["dep"]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
