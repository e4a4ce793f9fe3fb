"""Token/phrase quadrant statistics and pictures of phrase-based attentions (Tables 3-4, Figs. 4-6)."""

from __future__ import annotations

import json

import pytest
import torch

from structnmt.analysis.phrasal_stats import (
    QUADRANTS,
    quadrant_mass,
    quadrant_matrix,
    quadrant_percentages,
)
from structnmt.nn.attention import AttentionDims, build_attention

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _module(name: str, options: dict, role: str = "cross", heads: int = 2):
    return build_attention(name, options, AttentionDims(d_model=8, heads=heads, dropout=0.0, role=role,
                                                        cache_key=f"{role}.0"))


def test_layouts_name_token_and_phrase_rows_and_columns():
    hom = _module("phrasal_homogeneous", {"variant": "convkv", "ngram_heads": [1, 1]}).quadrant_layout()
    assert hom["key_phrase_per_head"] == [False, True] and hom["query_phrase"] == [False, False]
    het = _module("phrasal_heterogeneous", {"variant": "queryk", "ngrams": [1, 2, 3]}).quadrant_layout()
    assert het["key_blocks"] == [1, 2, 3] and het["query_phrase"] == [False, False]
    inter = _module("phrasal_interleaved", {"variant": "convkv"}).quadrant_layout()
    assert inter["query_phrase"] == [False, False, True, True] and inter["key_blocks"] == [1, 2]
    assert _module("mha", {}).quadrant_layout() is None


def test_interleaved_quadrants_by_hand():
    """2 heads -> 4 rows of heads (2 token, 2 phrase); T = 3 queries, S = 2 keys -> 4 key columns."""
    layout = _module("phrasal_interleaved", {"variant": "queryk"}).quadrant_layout()
    w = torch.zeros(4, 3, 4)
    w[0, :, 0] = 1.0  # token head 1: all on token key 0
    w[1, :, 3] = 1.0  # token head 2: all on bigram key ending at 1
    w[2, :, 1] = 1.0  # phrase head 1: on token key 1 (row t = 0 does not count)
    w[3, :, 2] = 0.5  # phrase head 2: half on bigram 0 (a left-padded phrase), half on token 0
    w[3, :, 0] = 0.5
    m = quadrant_mass(w, layout, query_len=3)
    assert m["rows_token"] == 6 and m["rows_phrase"] == 4  # bigram queries exist for t = 1, 2 only
    assert m["token_to_token"] == 3.0 and m["token_to_phrase"] == 3.0
    assert m["phrase_to_token"] == 2.0 + 1.0 and m["phrase_to_phrase"] == 1.0
    p = quadrant_percentages(m)
    assert sum(p[q] for q in QUADRANTS) == pytest.approx(100.0)
    assert p["token_to_token"] == pytest.approx(30.0) and p["phrase_to_phrase"] == pytest.approx(10.0)
    assert p["token_to_phrase_given_query"] == pytest.approx(50.0)
    assert p["phrase_to_phrase_given_query"] == pytest.approx(25.0)
    # padded query rows are ignored
    m2 = quadrant_mass(w, layout, query_len=2)
    assert m2["rows_token"] == 4 and m2["rows_phrase"] == 2


def test_homogeneous_and_heterogeneous_have_token_queries_only():
    hom = _module("phrasal_homogeneous", {"variant": "queryk", "ngram_heads": [1, 1]}).quadrant_layout()
    w = torch.full((2, 3, 4), 0.25)
    m = quadrant_mass(w, hom, 3)
    assert (m["token_to_token"], m["token_to_phrase"], m["rows_phrase"]) == (3.0, 3.0, 0)
    assert quadrant_percentages(m)["phrase_to_phrase_given_query"] is None
    het = _module("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2]}).quadrant_layout()
    w = torch.zeros(2, 3, 8)
    w[:, :, 4:] = 0.25  # everything on the bigram block
    m = quadrant_mass(w, het, 3)
    assert m["token_to_phrase"] == pytest.approx(6.0) and m["token_to_token"] == 0.0


def test_quadrant_matrix_rows_sum_to_one_and_are_labelled():
    inter = _module("phrasal_interleaved", {"variant": "convkv"}).quadrant_layout()
    w = torch.softmax(torch.randn(4, 3, 4), -1)
    mat, rows, cols, t_rows, starts = quadrant_matrix(w, inter, ["a", "b", "c"], ["x", "y"])
    assert mat.shape == (3 + 2, 4) and t_rows == 3 and starts == [0, 2]
    assert rows == ["a", "b", "c", "a b", "b c"] and cols == ["x", "y", "· x", "x y"]
    torch.testing.assert_close(mat.sum(1), torch.ones(5))
    torch.testing.assert_close(mat[:3], w[:2].mean(0))
    hom = _module("phrasal_homogeneous", {"variant": "convkv", "ngram_heads": [1, 1]}).quadrant_layout()
    w = torch.softmax(torch.randn(2, 3, 2), -1)
    mat, rows, cols, t_rows, starts = quadrant_matrix(w, hom, ["a", "b", "c"], ["x", "y"])
    assert mat.shape == (3, 4) and cols == ["x", "y", "· x", "x y"]
    torch.testing.assert_close(mat.sum(1), torch.ones(3))


@pytest.mark.parametrize("name,options", [("phrasal_interleaved", {"variant": "queryk"}),
                                          ("phrasal_heterogeneous", {"variant": "convkv", "ngrams": [1, 2]})])
def test_analyze_writes_quadrant_tables_and_pictures(tmp_path, name, options):
    from structnmt.analysis.heatmaps import run_analyze
    from structnmt.cli.training import train
    from structnmt.config import (
        AttentionSpec,
        Config,
        DataConfig,
        DecodeConfig,
        ModelConfig,
        TrainConfig,
    )
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus

    write_corpus(SynthConfig(seed=4, n_train=120, n_valid=6, n_test=6), tmp_path / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(tmp_path / "c" / "train"),
                          validpref=str(tmp_path / "c" / "valid"), vocab_size=120),
            tmp_path / "bin", progress=False, log=lambda *_: None)
    model = ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=2, decoder_layers=2)
    spec = AttentionSpec(name, options)
    model.attention.encoder_self = model.attention.decoder_self = model.attention.cross = spec
    cfg = Config(data=DataConfig(path=str(tmp_path / "bin"), max_tokens=600), model=model,
                 train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=2, validate_interval_updates=2,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=1, max_len_b=4))
    train(cfg, log=lambda *_: None)
    src = tmp_path / "in.txt"
    shortest = sorted((tmp_path / "c" / "valid.src").read_text().splitlines(), key=len)[:2]  # small pictures
    src.write_text("".join(line + "\n" for line in shortest))
    written = run_analyze(checkpoint=tmp_path / "m" / "checkpoint_last.pt", input_path=src,
                          out_dir=tmp_path / "out", sentences=2)
    names = {p.name for p in written}
    for role in ("encoder_self", "decoder_self", "cross"):
        for n in (1, 2):
            assert f"sent{n}_{role}_quadrants.png" in names
            assert (tmp_path / "out" / f"sent{n}_{role}_quadrants.png").read_bytes()[:8] == PNG_MAGIC
    stats = json.loads((tmp_path / "out" / "attention_stats.json").read_text())
    for role in ("encoder_self", "decoder_self", "cross"):
        assert len(stats[role]) == 2
        for entry in stats[role]:
            q = entry["quadrants"]
            assert sum(q[k] for k in QUADRANTS) == pytest.approx(100.0, abs=1e-3)
            assert entry["phrasal"] == name.split("_")[1]
            if name == "phrasal_heterogeneous":  # token queries only
                assert q["phrase_to_token"] == 0.0 and q["phrase_to_phrase"] == 0.0
            else:  # bigram queries hold (T-1)/(2T-1) of the rows
                rows = entry["quadrant_rows"]
                assert 0 < rows["rows_phrase"] < rows["rows_token"]
    md = (tmp_path / "out" / "phrase_quadrants.md").read_text()
    assert "| Layer (cross) |" in md and "token-to-phrase" in md

    # statistics over 2 sentences, pictures of the first only: same numbers, one sentence drawn
    written = run_analyze(checkpoint=tmp_path / "m" / "checkpoint_last.pt", input_path=src,
                          out_dir=tmp_path / "out1", sentences=1, stats_sentences=2)
    names = {p.name for p in written}
    assert "sent1_cross_quadrants.png" in names and not any(n.startswith("sent2_") for n in names)
    stats1 = json.loads((tmp_path / "out1" / "attention_stats.json").read_text())
    assert stats1["sentences"] == 2 and stats1["drawn_sentences"] == 1
    for role in ("encoder_self", "decoder_self", "cross"):
        for a, b in zip(stats[role], stats1[role]):
            assert a["quadrants"] == pytest.approx(b["quadrants"])
            assert a["entropy"] == pytest.approx(b["entropy"])
