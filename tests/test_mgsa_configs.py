"""configs/mgsa/*.yaml (MG-SA Tables 1-3) load, build, and place MG-SA as their table row says;
configs/grids/mgsa_*.yaml load as experiment grids."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from structnmt.config import load_config
from structnmt.experiment import load_grid
from structnmt.models import build_model
from structnmt.nn.mgsa import MGSAAttention

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "mgsa"
GRIDS = ROOT / "configs" / "grids"
RECIPE = ROOT / "configs" / "multi30k_transformer_tiny.yaml"
PLAIN, SPACY = "data-bin/multi30k_en_de", "data-bin/multi30k_en_de_spacy"
ALL = [0, 1, 2, 3]

# file -> (encoder layers with MG-SA, heads per granularity kind, composition, interaction, tag weight, data)
ROWS = {
    # Table 1: composition strategies, n-gram partition, MG-SA in every encoder layer
    "table1_transformer_base": ([], None, None, None, None, PLAIN),
    "table1_max_pooling": (ALL, "ngram", "max", "none", None, PLAIN),
    "table1_san": (ALL, "ngram", "san", "none", None, PLAIN),
    "table1_lstm": (ALL, "ngram", "lstm", "none", None, PLAIN),
    # Table 2: which layers ([1-6] = all 4 of ours, [1-3], [1]); SANs, n-gram
    "table2_layers_1_6": (ALL, "ngram", "san", "none", None, PLAIN),
    "table2_layers_1_3": ([0, 1, 2], "ngram", "san", "none", None, PLAIN),
    "table2_layers_1": ([0], "ngram", "san", "none", None, PLAIN),
    # Table 3: bottom layer; partition, tag loss, interaction
    "table3_transformer_base": ([], None, None, None, None, SPACY),
    "table3_n_gram_phrase": ([0], "ngram", "san", "none", None, SPACY),
    "table3_syntactic_phrase": ([0], "syntax", "san", "none", 0.0, SPACY),
    "table3_syntactic_phrase_l_tag": ([0], "syntax", "san", "none", 0.001, SPACY),
    "table3_lstm_interaction": ([0], "syntax", "san", "lstm", 0.001, SPACY),
    "table3_on_lstm_interaction": ([0], "syntax", "san", "on_lstm", 0.001, SPACY),
}


def test_every_config_file_is_a_known_table_row():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(ROWS)


@pytest.mark.parametrize("stem", sorted(ROWS))
def test_config_builds_and_places_mgsa_as_its_row(stem):
    layers, kind, composition, interaction, tag_weight, data = ROWS[stem]
    path = CONFIGS / f"{stem}.yaml"
    text = path.read_text()
    assert text.startswith("# MG-SA (Hao et al. 2019), Table") and "Row: \"" in text and "BLEU" in text.split("\n", 4)[2]
    cfg = load_config(path)
    assert cfg.data.path == data
    model = build_model(cfg.model, 100, 100)
    placed = [i for i, layer in enumerate(model.encoder_layers) if isinstance(layer.self_attn, MGSAAttention)]
    assert placed == layers
    assert not any(isinstance(m, MGSAAttention) for m in model.decoder_layers.modules())
    for i in layers:
        attn = model.encoder_layers[i].self_attn
        o = attn.options
        assert (o.composition, o.interaction) == (composition, interaction)
        groups = [(g.kind, g.heads, g.n, g.level) for g in attn.groups]
        if kind == "ngram":  # a quarter of the 4 heads each: word, 2-, 3-, 4-grams
            assert groups == [("word", 1, 0, 0), ("ngram", 1, 2, 0), ("ngram", 1, 3, 0), ("ngram", 1, 4, 0)]
        else:  # word + the top three constituency levels
            assert groups == [("word", 1, 0, 0), ("syntax", 1, 0, 1), ("syntax", 1, 0, 2), ("syntax", 1, 0, 3)]
            assert o.tag_loss_weight == tag_weight
            assert (attn.tagger is not None) == (tag_weight > 0)
    # everything else is the Multi30k tiny recipe
    recipe = yaml.safe_load(RECIPE.read_text())
    mine = yaml.safe_load(text)
    for section in ("data", "model", "train", "decode"):
        for key, value in recipe[section].items():
            if (section, key) in {("data", "path"), ("train", "save_dir")}:
                continue
            assert mine[section][key] == value, (stem, section, key)


def test_mgsa_structures_match_the_partition():
    need = {stem: set(build_model(load_config(CONFIGS / f"{stem}.yaml").model, 100, 100).required_structures())
            for stem in ("table3_n_gram_phrase", "table3_on_lstm_interaction", "table1_transformer_base")}
    assert need["table3_n_gram_phrase"] == {"mgsa.ngram2", "mgsa.ngram3", "mgsa.ngram4"}
    assert need["table3_on_lstm_interaction"] == {"mgsa.syntax"}
    assert need["table1_transformer_base"] == set()


EXPECTED_RUNS = {
    "mgsa_table1": ["Transformer-Base", "MAX-POOLING", "SANS", "LSTM"],
    "mgsa_table2": ["Transformer-Base", "[1-6]", "[1-3]", "[1]"],
    "mgsa_table3": ["Transformer-Base", "+ N-gram Phrase", "+ Syntactic Phrase", "+ Syntactic Phrase + L_tag",
                    "+ LSTM Interaction", "+ ON-LSTM Interaction"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_RUNS))
def test_grid_loads_with_the_paper_rows(name, tmp_path):
    from structnmt.experiment.grid import resolve_run_config

    path = GRIDS / f"{name}.yaml"
    grid, run_over = load_grid(path)
    assert run_over == []
    assert [r.name for r in grid.runs] == EXPECTED_RUNS[name]
    assert grid.baseline == "Transformer-Base"
    assert grid.budget.which() == ("max_updates", 2000)
    assert grid.data.path == (SPACY if name == "mgsa_table3" else PLAIN)
    assert "budget.max_updates=8000" in path.read_text()
    for run in grid.runs:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        assert cfg.train.max_updates == 2000 and cfg.data.path == str(tmp_path / "d")
        build_model(cfg.model, 100, 100)
    scaled, _ = load_grid(path, ["budget.max_updates=8000"])
    assert scaled.budget.which() == ("max_updates", 8000)
