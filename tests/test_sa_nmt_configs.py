"""configs/sanmt/*.yaml (Table 2's rows at the Multi30k recipe and at the paper's settings) build the
variant their row names; the Table 2 grid, the synthetic benchmark's and the cross-paper grid's SA-NMT
rows load and build."""

from __future__ import annotations

from pathlib import Path

import pytest

from structnmt.config import load_config, validate
from structnmt.experiment import load_grid
from structnmt.experiment.grid import resolve_run_config
from structnmt.models import build_model
from structnmt.models.rnn import RNNModel
from structnmt.nn.structured_attention import StructuredAttention

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "sanmt"
GRIDS = ROOT / "configs" / "grids"
ROWS = {"nmt": ("none", "shared", False), "fa_nmt_separate": ("fa", "separate", False),
        "fa_nmt_shared": ("fa", "shared", False), "sa_nmt_separate": ("sa", "separate", False),
        "sa_nmt_shared": ("sa", "shared", False), "sa_nmt_1set": ("sa", "one_set", False),
        "sa_nmt_hard": ("sa", "shared", True)}


def test_every_config_is_a_known_row():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(
        [f"{s}_{r}" for s in ("multi30k", "paper") for r in ROWS]
        + ["multi30k_transformer_structured", "multi30k_sa_nmt_shared_scaled", "multi30k_sa_nmt_shared_capped",
           "multi30k_sa_nmt_shared_arc_lr"])


def test_scaled_row_differs_from_the_shared_row_only_by_the_scaling():
    shared = load_config(CONFIGS / "multi30k_sa_nmt_shared.yaml")
    scaled = load_config(CONFIGS / "multi30k_sa_nmt_shared_scaled.yaml")
    assert not shared.model.rnn.scale and scaled.model.rnn.scale
    scaled.model.rnn.scale = False
    scaled.train.save_dir = shared.train.save_dir
    assert scaled == shared


@pytest.mark.parametrize("name,field,value", [("capped", "score_cap", 5.0), ("arc_lr", "arc_lr_scale", 0.2)])
def test_remedy_rows_differ_from_the_shared_row_only_by_their_option(name, field, value):
    shared = load_config(CONFIGS / "multi30k_sa_nmt_shared.yaml")
    row = load_config(CONFIGS / f"multi30k_sa_nmt_shared_{name}.yaml")
    assert getattr(row.model.rnn, field) == value
    setattr(row.model.rnn, field, getattr(shared.model.rnn, field))
    row.train.save_dir = shared.train.save_dir
    assert row == shared


def test_transformer_variant_config_puts_structured_attention_in_layer_1_only():
    cfg = load_config(CONFIGS / "multi30k_transformer_structured.yaml")
    validate(cfg)
    model = build_model(cfg.model, 100, 100)
    kinds = [type(layer.self_attn) for layer in model.encoder_layers]
    assert kinds[0] is StructuredAttention and StructuredAttention not in kinds[1:]
    assert cfg.train.lr_schedule == "inverse_sqrt" and cfg.train.lr == 0.005  # the transformer_tiny recipe


def test_tuning_and_transformer_grids(tmp_path):
    grid, _ = load_grid(GRIDS / "sa_nmt_tune.yaml")
    assert grid.evaluate.split == "valid"  # tuned on validation data, never on the test set
    seen = set()
    for run in grid.runs:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        assert cfg.model.family == "rnn"
        seen.add((cfg.model.rnn.syntax, cfg.train.lr, cfg.model.dropout))
    assert seen == {("none", 0.001, 0.3), ("none", 0.002, 0.3), ("none", 0.003, 0.3), ("none", 0.005, 0.3),
                    ("sa", 0.001, 0.3)}
    grid, _ = load_grid(GRIDS / "sa_nmt_transformer.yaml")
    assert grid.baseline == "Transformer" and len(grid.runs) == 2
    plain, structured = (build_model(resolve_run_config(grid, r, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r",
                                                        overrides=[]).model, 100, 100) for r in grid.runs)
    assert isinstance(structured.encoder_layers[0].self_attn, StructuredAttention)
    assert not isinstance(plain.encoder_layers[0].self_attn, StructuredAttention)


def test_target_language_grid_is_the_en_de_arc_lr_row_toward_another_language(tmp_path):
    grid, _ = load_grid(GRIDS / "sa_nmt_target_language.yaml")
    table2, _ = load_grid(GRIDS / "sa_nmt_table2.yaml")
    (row,) = grid.runs
    same = next(r for r in table2.runs if r.name == row.name)
    a = resolve_run_config(grid, row, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
    b = resolve_run_config(table2, same, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
    assert a.model == b.model and a.train == b.train  # only the data (target language) differs
    assert a.model.rnn.syntax == "sa" and a.model.rnn.arc_lr_scale == 0.2
    assert grid.baseline == row.name and len(grid.evaluate.translate) == 2


@pytest.mark.parametrize("size", ["multi30k", "paper"])
@pytest.mark.parametrize("row", sorted(ROWS))
def test_config_builds_its_variant(size, row):
    cfg = load_config(CONFIGS / f"{size}_{row}.yaml")
    validate(cfg)
    r = cfg.model.rnn
    assert (r.syntax, r.annotations, r.hard) == ROWS[row]
    # the paper's Adam 0.001; the Multi30k recipe's rate tuned on val (configs/grids/sa_nmt_tune.yaml)
    assert cfg.train.lr_schedule == "halve_on_rise" and cfg.train.lr == (0.001 if size == "paper" else 0.005)
    if size == "paper":
        assert (cfg.model.d_model, cfg.model.encoder_layers, cfg.model.dropout, r.init_range) == (1024, 2, 0.3, 0.04)
    else:
        assert isinstance(build_model(cfg.model, 100, 100), RNNModel)


def test_table2_grid_and_shared_grid_rows(tmp_path):
    grid, _ = load_grid(GRIDS / "sa_nmt_table2.yaml")
    assert [r.name for r in grid.runs][0] == "NMT" and len(grid.runs) == 10 and grid.baseline == "NMT"
    de_en, _ = load_grid(GRIDS / "sa_nmt_table2_de_en.yaml")
    names = [r.name for r in grid.runs]
    assert [r.name for r in de_en.runs] == names[:8] + names[9:]  # the same rows (not the capped one), German source
    assert de_en.data.path == "data-bin/multi30k_de_en" and de_en.evaluate.lang == "en"
    for name in ("sa_nmt_table2", "sa_nmt_table2_de_en", "synth_generalization", "cross_paper_multi30k"):
        grid, _ = load_grid(GRIDS / f"{name}.yaml")
        rows = [r for r in grid.runs if "NMT" in r.name or "structured" in r.name]
        assert rows
        for run in rows:
            cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
            model = build_model(cfg.model, 100, 100)
            if "structured" in run.name:
                assert isinstance(model.encoder_layers[0].self_attn, StructuredAttention)
            else:
                assert isinstance(model, RNNModel)
                assert model.cfg.rnn.syntax == ("sa" if run.name.startswith("SA-NMT") else
                                                "fa" if run.name.startswith("FA") else "none")
