"""configs/phrasal/*.yaml (phrase-based attentions, Tables 1 and 2) load, build, and place the
mechanism their row names in every attention layer; configs/grids/phrasal_*.yaml load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from structnmt.config import load_config
from structnmt.experiment import load_grid
from structnmt.models import build_model
from structnmt.nn.attention import MultiHeadAttention
from structnmt.nn.phrasal import HeterogeneousPhrasalAttention, HomogeneousPhrasalAttention
from structnmt.nn.phrasal_interleaved import InterleavedPhrasalAttention

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "phrasal"
GRIDS = ROOT / "configs" / "grids"
RECIPE = ROOT / "configs" / "multi30k_transformer_tiny.yaml"
HOM, HET, INT = HomogeneousPhrasalAttention, HeterogeneousPhrasalAttention, InterleavedPhrasalAttention

# file -> (class in every attention layer, variant, n-gram option, layers, d_model, heads)
ROWS = {
    "table1_transformer_base": (MultiHeadAttention, None, None, 4, 128, 4),
    "table1_homogeneous_convkv_4_4": (HOM, "convkv", [2, 2], 4, 128, 4),
    "table1_homogeneous_convkv_3_2_3": (HOM, "convkv", [2, 1, 1], 4, 128, 4),
    "table1_homogeneous_queryk_4_4": (HOM, "queryk", [2, 2], 4, 128, 4),
    "table1_homogeneous_queryk_3_2_3": (HOM, "queryk", [2, 1, 1], 4, 128, 4),
    "table1_heterogeneous_convkv_1_2": (HET, "convkv", [1, 2], 4, 128, 4),
    "table1_heterogeneous_convkv_1_2_3": (HET, "convkv", [1, 2, 3], 4, 128, 4),
    "table1_heterogeneous_convkv_1_2_3_4": (HET, "convkv", [1, 2, 3, 4], 4, 128, 4),
    "table1_heterogeneous_queryk_1_2": (HET, "queryk", [1, 2], 4, 128, 4),
    "table1_heterogeneous_queryk_1_2_3": (HET, "queryk", [1, 2, 3], 4, 128, 4),
    "table1_heterogeneous_queryk_1_2_3_4": (HET, "queryk", [1, 2, 3, 4], 4, 128, 4),
    "table1_interleaved_convkv_1_2": (INT, "convkv", None, 4, 128, 4),
    "table1_interleaved_queryk_1_2": (INT, "queryk", None, 4, 128, 4),
    "table2_transformer_big": (MultiHeadAttention, None, None, 4, 256, 8),
    "table2_transformer_base_10_layers": (MultiHeadAttention, None, None, 10, 128, 4),
    "table2_transformer_base_6_layers": (MultiHeadAttention, None, None, 6, 128, 4),
    "table2_heterogeneous_convkv_4_layers": (HET, "convkv", [1, 2], 4, 128, 4),
    "table2_heterogeneous_convkv_6_layers": (HET, "convkv", [1, 2], 6, 128, 4),
    "table2_heterogeneous_queryk_6_layers": (HET, "queryk", [1, 2], 6, 128, 4),
    "table2_interleaved_queryk_6_layers": (INT, "queryk", None, 6, 128, 4),
}


def test_every_config_file_is_a_known_table_row():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(ROWS)


@pytest.mark.parametrize("stem", sorted(ROWS))
def test_config_builds_with_the_rows_mechanism_everywhere(stem):
    cls, variant, ngrams, layers, d, heads = ROWS[stem]
    text = (CONFIGS / f"{stem}.yaml").read_text()
    assert text.startswith("# Phrase-based attentions (Nguyen & Joty 2018), Table") and "BLEU" in text.split("\n", 2)[1]
    cfg = load_config(CONFIGS / f"{stem}.yaml")
    assert (cfg.model.encoder_layers, cfg.model.decoder_layers, cfg.model.d_model, cfg.model.heads) == (layers, layers, d, heads)
    model = build_model(cfg.model, 100, 100)
    attns = [layer.self_attn for layer in model.encoder_layers]
    attns += [a for layer in model.decoder_layers for a in (layer.self_attn, layer.cross_attn)]
    assert len(attns) == 3 * layers
    for a in attns:
        assert type(a) is cls, (stem, type(a))
        if variant is not None:
            assert a.options.variant == variant
        if cls is HOM:
            assert a.options.ngram_heads == ngrams
            assert sum(a.options.ngram_heads) == heads
        if cls is HET:
            assert a.options.ngrams == ngrams
    # everything not named by the row is the Multi30k tiny recipe
    recipe, mine = yaml.safe_load(RECIPE.read_text()), yaml.safe_load(text)
    changed = {("data", "path"), ("train", "save_dir"), ("model", "encoder_layers"), ("model", "decoder_layers"),
               ("model", "d_model"), ("model", "ffn_dim"), ("model", "heads")}
    for section in ("data", "model", "train", "decode"):
        for key, value in recipe[section].items():
            if (section, key) not in changed:
                assert mine[section][key] == value, (stem, section, key)


def test_homogeneous_rows_have_more_parameters_than_the_baseline():
    n = {s: sum(p.numel() for p in build_model(load_config(CONFIGS / f"{s}.yaml").model, 100, 100).parameters())
         for s in ("table1_transformer_base", "table1_homogeneous_convkv_4_4", "table1_heterogeneous_convkv_1_2",
                   "table1_heterogeneous_convkv_1_2_3", "table1_interleaved_convkv_1_2")}
    # the paper's ordering of # parameters (63M < 67M < 81M < 110M; interleaved 116M > heterogeneous 1-2)
    assert (n["table1_transformer_base"] < n["table1_homogeneous_convkv_4_4"] < n["table1_heterogeneous_convkv_1_2"]
            < n["table1_heterogeneous_convkv_1_2_3"])
    assert n["table1_interleaved_convkv_1_2"] > n["table1_heterogeneous_convkv_1_2"]


EXPECTED = {
    "phrasal_table1": 13,
    "phrasal_table1_core": 7,
    "phrasal_table2": 7,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_grid_loads_with_the_paper_rows(name, tmp_path):
    from structnmt.experiment.grid import resolve_run_config

    path = GRIDS / f"{name}.yaml"
    grid, run_over = load_grid(path)
    assert run_over == [] and len(grid.runs) == EXPECTED[name]
    assert grid.baseline in [r.name for r in grid.runs]
    assert grid.budget.which() == ("max_updates", 2000)
    for run in grid.runs:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        assert cfg.train.max_updates == 2000
    if name == "phrasal_table1_core":
        names = [r.name for r in grid.runs]
        for v in ("CONVKV", "QUERYK"):
            assert {f"Homogeneous {v} 4/4", f"Heterogeneous {v} 1-2", f"Interleaved {v} 1-2"} <= set(names)
