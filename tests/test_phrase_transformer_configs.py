"""configs/phrasetransformer/*.yaml (one per row of the paper's Table 1, at the tuned recipe and at
the paper's size, and one per row of Table 2, the tagging tables' row files) build the mechanism
their row names; the grids (both directions, the paper's size), the tagging tables, the cross-paper
grid and the synthetic benchmark's PhraseTransformer rows load and build."""

from __future__ import annotations

from pathlib import Path

import pytest

from structnmt.config import load_config
from structnmt.experiment import load_grid
from structnmt.experiment.grid import resolve_run_config
from structnmt.models import build_model
from structnmt.nn.attention import MultiHeadAttention
from structnmt.nn.phrase_transformer import PhraseTransformerAttention

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "phrasetransformer"
GRIDS = ROOT / "configs" / "grids"

# row -> PhraseTransformer options (None: the plain Transformer)
ROWS = {"transformer": None, "linear_k2": {"k": 2, "nonlinear": False}, "linear_k3": {"k": 3, "nonlinear": False},
        "pt_k2": {"k": 2, "nonlinear": True}, "pt_k3": {"k": 3, "nonlinear": True}}
SIZES = {"table1": (4, 128, 4), "table1_paper_size": (6, 512, 8)}


# Table 2 row file -> (row name, trees, PhraseTransformer options or None)
TAG_ROWS = {
    "transformer": ("Transformer", "none", None),
    "semantic_spacy_k2": ("Semantic PhraseTransformer (k=2), spaCy trees", "spacy", {"k": 2, "hypernodes": "semantic"}),
    "semantic_spacy_k3": ("Semantic PhraseTransformer (k=3), spaCy trees", "spacy", {"k": 3, "hypernodes": "semantic"}),
    "semantic_gold_k2": ("Semantic PhraseTransformer (k=2), gold trees", "gold", {"k": 2, "hypernodes": "semantic"}),
    "semantic_gold_k3": ("Semantic PhraseTransformer (k=3), gold trees", "gold", {"k": 3, "hypernodes": "semantic"}),
    "linear_k2": ("Linear PhraseTransformer (k=2)", "none", {"k": 2, "nonlinear": False}),
    "linear_k3": ("Linear PhraseTransformer (k=3)", "none", {"k": 3, "nonlinear": False}),
    "pt_k2": ("PhraseTransformer (k=2)", "none", {"k": 2}),
    "pt_k3": ("PhraseTransformer (k=3)", "none", {"k": 3}),
}


def test_every_config_file_is_a_known_row():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(
        [f"{s}_{r}" for s in SIZES for r in ROWS] + [f"table2_{r}" for r in TAG_ROWS])


@pytest.mark.parametrize("table", ["ptb_table2", "ud_ewt_table2"])
def test_tagging_tables_are_their_row_files(table):
    """Each tagging table lists the nine Table 2 row files; every row resolves to the table's
    corpus, split and sizes with the row's trees and mechanism, and the tagger builds it."""
    from structnmt.tasks.tagger import Tagger, load_tag_config, row_name

    path = ROOT / "configs" / "tag" / f"{table}.yaml"
    base = load_tag_config(path)
    assert [r.config for r in base.rows] == [f"../phrasetransformer/table2_{r}.yaml" for r in TAG_ROWS]
    for row, (stem, (name, trees, options)) in zip(base.rows, TAG_ROWS.items()):
        assert row_name(path, row) == name
        cfg = load_tag_config(path, ["train.threads=1"], row)
        assert (cfg.corpus, cfg.split, cfg.out_dir) == (base.corpus, base.split, base.out_dir)
        assert cfg.trees == trees and cfg.train.threads == 1
        assert (cfg.model.layers, cfg.model.d_model, cfg.model.heads) == (2, 300, 6)
        tagger = Tagger(cfg.model, 50, 10)
        attns = [layer.self_attn for layer in tagger.encoder.layers]
        if options is None:
            assert attns and all(type(a) is MultiHeadAttention for a in attns)
        else:
            assert attns and all(isinstance(a, PhraseTransformerAttention) for a in attns)
            for a in attns:
                assert all(getattr(a.options, k) == v for k, v in options.items())
                assert a.options.nonlinear == options.get("nonlinear", True)
        # on its own, a row file tags the PTB sample with the defaults
        alone = load_tag_config(CONFIGS / f"table2_{stem}.yaml")
        assert alone.name == name and alone.corpus.name == "ptb" and alone.model == cfg.model


def test_a_row_file_may_not_move_the_table(tmp_path):
    from structnmt.config import ConfigError
    from structnmt.tasks.tagger import load_tag_config

    (tmp_path / "row.yaml").write_text("name: R\ncorpus: {name: ud, path: x.conllu}\n")
    (tmp_path / "table.yaml").write_text("rows:\n  - config: row.yaml\n")
    base = load_tag_config(tmp_path / "table.yaml")
    with pytest.raises(ConfigError, match="row.yaml: a row file may set only name, .*not corpus"):
        load_tag_config(tmp_path / "table.yaml", row=base.rows[0])


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("row", sorted(ROWS))
def test_config_builds_the_rows_mechanism(size, row):
    cfg = load_config(CONFIGS / f"{size}_{row}.yaml")
    layers, d, heads = SIZES[size]
    assert (cfg.model.encoder_layers, cfg.model.d_model, cfg.model.heads) == (layers, d, heads)
    model = build_model(cfg.model, 100, 100)
    attns = [layer.self_attn for layer in model.encoder_layers]
    want = ROWS[row]
    if want is None:
        assert all(type(a) is MultiHeadAttention for a in attns) and model.encoder.plan is None
    else:
        assert all(isinstance(a, PhraseTransformerAttention) for a in attns)  # every encoder layer (§4.1)
        for a in attns:
            assert (a.options.k, a.options.nonlinear) == (want["k"], want["nonlinear"])
            assert a.options.hypernodes == "ngram" and a.options.within == "masked"
        assert model.encoder.plan[0] == 0  # hypernodes enter before the first layer (Algorithm 1)
    assert all(type(layer.self_attn) is MultiHeadAttention for layer in model.decoder_layers)


GRID_ROWS = {"phrase_transformer_table1": 5, "phrase_transformer_table1_de_en": 5, "phrase_transformer_paper_size": 5,
             "phrase_transformer_paper_size_de_en": 5}


@pytest.mark.parametrize("name", sorted(GRID_ROWS))
def test_grids_load_and_every_run_builds(name, tmp_path):
    grid, run_over = load_grid(GRIDS / f"{name}.yaml")
    assert run_over == [] and len(grid.runs) == GRID_ROWS[name]
    assert grid.baseline == "Transformer" and grid.budget.which() == ("max_updates", 2000)
    for run in grid.runs:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        model = build_model(cfg.model, 100, 100)
        assert (model.encoder.plan is not None) == (run.name != "Transformer")
        if name.startswith("phrase_transformer_paper_size"):
            assert cfg.model.d_model == 512 and cfg.model.encoder_layers == 6
    if name.endswith("_de_en"):
        assert grid.data.path.endswith("multi30k_de_en") and grid.evaluate.lang == "en"


@pytest.mark.parametrize("grid_name", ["synth_generalization", "cross_paper_multi30k"])
def test_shared_grids_have_phrase_transformer_rows(grid_name, tmp_path):
    grid, _ = load_grid(GRIDS / f"{grid_name}.yaml")
    rows = [r for r in grid.runs if "PhraseTransformer" in r.name]
    assert len(rows) == (4 if grid_name == "synth_generalization" else 1)  # the cross-paper grid: k = 2
    for run in rows:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        model = build_model(cfg.model, 100, 100)
        first = model.encoder_layers[0].self_attn
        assert isinstance(first, PhraseTransformerAttention)
        assert first.options.nonlinear == ("Linear" not in run.name)
        assert first.options.hypernodes == ("semantic" if "Semantic" in run.name else "ngram")
