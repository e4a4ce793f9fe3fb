"""configs/rhe/*.yaml (one per row of RHE's tables) build the mechanism their row names in the
layers it names; configs/grids/rhe_*.yaml, the cross-paper grid and the synthetic benchmark's
RHE rows load and resolve into buildable models."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from structnmt.config import load_config
from structnmt.experiment import load_grid
from structnmt.experiment.grid import resolve_run_config
from structnmt.models import build_model
from structnmt.nn.attention import MultiHeadAttention
from structnmt.nn.localness import LocalnessAttention
from structnmt.nn.relative_position import RelativePositionAttention
from structnmt.nn.rhe import RHEAttention

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "rhe"
GRIDS = ROOT / "configs" / "grids"
RECIPE = ROOT / "configs" / "multi30k_transformer_tiny.yaml"
MHA, REL, LOC, RHE = MultiHeadAttention, RelativePositionAttention, LocalnessAttention, RHEAttention


def lpea_rhe(**o):
    return {"enhancement": "lpea", "heads": "redundant", **o}


# file -> (encoder self-attention class per layer, decoder self class, RHE options of the RHE layers)
ROWS: dict[str, tuple[list[type], type, dict]] = {
    "table1_transformer": ([MHA] * 4, MHA, {}),
    "table1_rel_pos": ([REL] * 4, REL, {}),
    "table1_rel_pos_paper_count": ([REL] * 4, MHA, {}),
    "table1_localness": ([LOC, LOC, MHA, MHA], MHA, {}),
    "table1_dea": ([RHE, MHA, MHA, MHA], MHA, {"enhancement": "dea", "heads": "all"}),
    "table1_dea_rhe": ([RHE, MHA, MHA, MHA], MHA, {"enhancement": "dea", "heads": "redundant"}),
    "table1_lpea": ([RHE, MHA, MHA, MHA], MHA, {"enhancement": "lpea", "heads": "all"}),
    "table1_lpea_rhe": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe()),
    "table2_rel_pos_rhe": ([RHE, REL, REL, REL], REL, lpea_rhe(base="rel_pos")),
    "table2_localness_rhe": ([RHE, LOC, MHA, MHA], MHA, lpea_rhe(base="localness")),
    "table2_lpea_rhe_pruning": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe(enhancement="none", redundant_action="prune")),
    "table2_rel_pos_on_redundant_heads": ([RHE, MHA, MHA, MHA], MHA,
                                          {"enhancement": "rel_pos", "enhancement_options": {"k": 16}, "base": "mha"}),
    "table2_localness_on_redundant_heads": ([RHE, MHA, MHA, MHA], MHA,
                                            {"enhancement": "localness", "heads": "redundant", "base": "mha"}),
    **{f"table3_lpea_rhe_k{k}": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe(k=k)) for k in (0, 1, 2, 3, 4, 5, 6, 8, 10, 16)},
    **{f"layers_lpea_rhe_layer{n}": ([RHE if i == n - 1 else MHA for i in range(4)], MHA, lpea_rhe())
       for n in (1, 2, 3, 4)},
    "layers_lpea_rhe_layers1_4": ([RHE] * 4, MHA, lpea_rhe()),
    **{f"fig4_lpea_rhe_fixed_gate_0{g}": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe(gate="fixed", fixed_gate=g / 10))
       for g in (1, 2, 3, 4, 5)},
    "fig4_lpea_rhe_confidence_gate": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe(gate="confidence")),
    **{f"tablea3_lpea_rhe_{s}": ([RHE, MHA, MHA, MHA], MHA, lpea_rhe()) for s in ("flat", "xbar", "hybrid")},
}


def test_every_config_file_is_a_known_table_row():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(ROWS)


@pytest.mark.parametrize("stem", sorted(ROWS))
def test_config_builds_the_rows_mechanism_in_the_rows_layers(stem):
    enc, dec, rhe_opts = ROWS[stem]
    text = (CONFIGS / f"{stem}.yaml").read_text()
    assert text.startswith("# RHE (Wang et al.), ") and "paper:" in text.split("\n", 1)[0]
    cfg = load_config(CONFIGS / f"{stem}.yaml")
    model = build_model(cfg.model, 100, 100)
    for layer, cls in zip(model.encoder_layers, enc, strict=True):
        assert type(layer.self_attn) is cls, (stem, type(layer.self_attn))
        if cls is RHE:
            for key, value in rhe_opts.items():
                assert getattr(layer.self_attn.options, key) == value, (stem, key)
            if layer.self_attn.options.base == "rel_pos":
                assert layer.self_attn.options.base_options["k"] == 16
    for layer in model.decoder_layers:
        assert type(layer.self_attn) is dec and type(layer.cross_attn) is MHA
    # everything not named by the row is the Multi30k tiny recipe; the data is parsed by spaCy
    recipe, mine = yaml.safe_load(RECIPE.read_text()), yaml.safe_load(text)
    assert mine["data"]["path"].startswith("data-bin/multi30k_en_de_spacy")
    for section in ("data", "model", "train", "decode"):
        for key, value in recipe[section].items():
            if (section, key) not in {("data", "path"), ("train", "save_dir")}:
                assert mine[section][key] == value, (stem, section, key)
    assert cfg.train.head_roles, stem  # every row records its head roles (docs/rhe.md, analyses)
    if stem.startswith("tablea3_") and not stem.endswith("hybrid"):
        assert f"--conversion-style {stem.rsplit('_', 1)[1]}" in text


def test_rhe_rows_add_only_lpea_parameters():
    n = {s: sum(p.numel() for p in build_model(load_config(CONFIGS / f"{s}.yaml").model, 100, 100).parameters())
         for s in ("table1_transformer", "table1_dea", "table1_dea_rhe", "table1_lpea_rhe", "table3_lpea_rhe_k2")}
    d = 128 // 4
    assert n["table1_dea"] == n["table1_dea_rhe"] == n["table1_transformer"]  # DEA: no parameter (paper: same # Para)
    assert n["table1_lpea_rhe"] - n["table1_transformer"] == 13 * d + d * d + d + d  # table, W_P, b_P, U_P
    assert n["table3_lpea_rhe_k2"] - n["table1_transformer"] == 5 * d + d * d + d + d


def test_rel_pos_at_the_papers_parameter_count():
    """Paper size (d = 512, 8 heads, 6 + 6 layers): Rel_Pos in the 12 self-attention layers adds 50,688
    parameters, in the 6 encoder layers 25,344, the paper's +0.03M (docs/rhe.md)."""

    def added(stem: str) -> int:
        cfg = load_config(CONFIGS / f"{stem}.yaml", ["model.d_model=512", "model.heads=8", "model.ffn_dim=2048",
                                                     "model.encoder_layers=6", "model.decoder_layers=6"])
        return sum(p.numel() for p in build_model(cfg.model, 100, 100).parameters())

    base = added("table1_transformer")
    assert added("table1_rel_pos") - base == 12 * 2 * 33 * 64 == 50_688
    assert added("table1_rel_pos_paper_count") - base == 6 * 2 * 33 * 64 == 25_344


GRID_ROWS = {"rhe_table1": 7, "rhe_table1_en_cs": 7, "rhe_table2": 9, "rhe_table3": 11, "rhe_fig4": 8,
             "rhe_layers": 6, "rhe_parsers": 2, "cross_paper_multi30k": 12}


@pytest.mark.parametrize("name", sorted(GRID_ROWS))
def test_grids_load_and_every_run_builds(name, tmp_path):
    grid, run_over = load_grid(GRIDS / f"{name}.yaml")
    assert run_over == [] and len(grid.runs) == GRID_ROWS[name]
    assert grid.baseline == "Transformer" and grid.budget.which() == ("max_updates", 2000)
    for run in grid.runs:
        cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
        build_model(cfg.model, 100, 100)
    if name == "rhe_table1_en_cs":
        assert grid.data.path.endswith("en_cs_spacy") and grid.evaluate.lang == "cs"


def test_synthetic_benchmark_grid_has_rhe_table1_rows(tmp_path):
    grid, _ = load_grid(GRIDS / "synth_generalization.yaml")
    names = [r.name for r in grid.runs]
    rows = ["+ Rel_Pos", "+ Localness", "+ DEA", "+ DEA + RHE", "+ LPEA", "+ LPEA + RHE"]
    assert set(rows) <= set(names)
    for run in grid.runs:
        if run.name in rows:
            cfg = resolve_run_config(grid, run, 1, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=[])
            model = build_model(cfg.model, 100, 100)
            first = model.encoder_layers[0].self_attn
            want = {"+ Rel_Pos": REL, "+ Localness": LOC}.get(run.name, RHE)
            assert type(first) is want
            if want is RHE:
                assert first.options.heads == ("redundant" if "RHE" in run.name else "all")
