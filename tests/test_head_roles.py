"""RHE analyses: head roles recorded over training, compared across runs, and the per-head
before/after-enlivening pictures of `structnmt analyze`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from structnmt.analysis.head_roles import (
    HeadRoleCounter,
    encoder_head_roles,
    head_roles_table,
    read_head_roles,
)
from structnmt.cli import main as cli_main
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
from structnmt.errors import UserError
from structnmt.models.checkpoint import load_checkpoint
from structnmt.syntax.parsers import ParserConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _train(root: Path, name: str, rhe: bool, parser: str = "synthetic") -> Path:
    model = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=1)
    if rhe:
        model.attention.overrides["encoder_self.0"] = AttentionSpec("rhe", {"enhancement": "lpea", "k": 2})
    cfg = Config(data=DataConfig(path=str(root / f"bin-{parser}"), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(root / name), max_updates=6, validate_interval_updates=3,
                                   tensorboard=False, progress=False, head_roles=True, head_roles_sentences=7),
                 decode=DecodeConfig(beam=1, max_len_b=5))
    train(cfg, log=lambda *_: None)
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("head_roles")
    write_corpus(SynthConfig(seed=5, n_train=200, n_valid=12, n_test=10), root / "c")
    for parser in ("synthetic", "none"):
        prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                              validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")],
                              vocab_size=200, parser=ParserConfig(name=parser)),
                root / f"bin-{parser}", progress=False, log=lambda *_: None)
    _train(root, "plain", rhe=False)
    _train(root, "rhe", rhe=True)
    return root


def test_trainer_records_the_redundant_fraction_of_every_head_at_every_validation(runs):
    for name in ("plain", "rhe"):
        recs = read_head_roles(runs / name / "head_roles.jsonl")
        assert [r["step"] for r in recs] == [3, 6]
        for r in recs:
            assert r["sentences"] == 7
            assert len(r["redundant"]) == 2 and all(len(row) == 4 for row in r["redundant"])
            assert all(0.0 <= x <= 1.0 for row in r["redundant"] for x in row)
            # fractions of 7 sentences
            assert all(abs(x * 7 - round(x * 7)) < 1e-3 for row in r["redundant"] for x in row)
        png = (runs / name / "head_roles.png").read_bytes()
        assert png[:8] == PNG_MAGIC


def test_validation_pairs_longer_than_the_model_reads_are_left_out_of_the_head_roles_too(runs, tmp_path):
    """One long validation pair used to stop the whole training in the head-roles hook (a ValueError from
    the position table); it is left out, as the validation loss leaves it out."""
    import numpy as np

    from structnmt.data.dataset import PreparedDataset

    valid = PreparedDataset(runs / "bin-synthetic").split("valid")
    size = np.maximum(valid.src_lens, valid.tgt_lens) + 1
    limit = int(np.sort(size)[len(size) // 2])  # about half the validation pairs are longer
    fits = int((size <= limit).sum())
    assert 0 < fits < len(size)
    model = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=1, max_positions=limit)
    cfg = Config(data=DataConfig(path=str(runs / "bin-synthetic"), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(tmp_path / "short"), max_updates=3, validate_interval_updates=3,
                                   tensorboard=False, progress=False, head_roles=True, head_roles_sentences=50),
                 decode=DecodeConfig(beam=1, max_len_b=5))
    train(cfg, log=lambda *_: None)
    assert (tmp_path / "short" / "checkpoint_last.pt").exists()
    assert [r["sentences"] for r in read_head_roles(tmp_path / "short" / "head_roles.jsonl")] == [fits]


def test_recorded_fractions_equal_a_recount_with_the_checkpoint(runs):
    """The RHE layer's own identification (pre-enhancement) and the plain layer's recount agree with the log."""
    from structnmt.config import from_dict
    from structnmt.data.dataset import PreparedDataset, collate
    from structnmt.models import build_model
    from structnmt.nn.sea import dep_mask_spec

    state = load_checkpoint(runs / "rhe" / "checkpoint_last.pt")
    cfg = from_dict(state["config"])
    ds = PreparedDataset(runs / "bin-synthetic")
    model = build_model(cfg.model, len(ds.src_vocab), len(ds.tgt_vocab))
    model.load_state_dict(state["model"])
    model.eval()
    split = ds.split("valid")
    structures = {**model.required_structures(), **dep_mask_spec()}
    b = collate(split, list(range(7)), structures)
    roles = encoder_head_roles(model, b.src, b.src_mask, b.structures)
    counter = HeadRoleCounter()
    counter.add(roles)
    last = read_head_roles(runs / "rhe" / "head_roles.jsonl")[-1]
    got, want = counter.fractions(), last["redundant"]
    assert [x for row in got for x in row] == pytest.approx([x for row in want for x in row], abs=1e-4)
    assert roles[0].dtype == torch.bool and roles[0].shape == (7, 4)


def test_head_roles_need_parsed_data(runs):
    from structnmt.config import ConfigError

    with pytest.raises(ConfigError, match="head_roles needs dependency trees"):
        _train(runs, "none", rhe=False, parser="none")


def test_head_roles_command_compares_runs(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli_main(["head-roles", str(runs / "plain"), str(runs / "rhe"), "--labels", "Transformer", "LPEA + RHE",
                     "--out", str(out)]) == 0
    assert (out / "head_roles.png").read_bytes()[:8] == PNG_MAGIC
    table = (out / "head_roles.md").read_text()
    assert table.count("| Transformer | 6 | 7 |") == 2 and table.count("| LPEA + RHE | 6 | 7 |") == 2
    rows = [line for line in table.splitlines() if line.startswith("| Transformer")]
    recorded = read_head_roles(runs / "plain" / "head_roles.jsonl")[-1]["redundant"]
    assert rows[0].split("|")[5].split() == [f"{x:.2f}" for x in recorded[0]]
    assert cli_main(["head-roles", str(runs / "plain"), "--labels", "a", "b", "--out", str(out)]) == 2
    assert cli_main(["head-roles", str(tmp_path), "--out", str(out)]) == 2
    assert "no head-role records" in capsys.readouterr().err
    # a report directory: the command replaces what it wrote, never a file it did not write
    assert cli_main(["head-roles", str(runs / "plain"), "--out", str(out)]) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "head_roles.md").write_text("my notes")
    capsys.readouterr()
    assert cli_main(["head-roles", str(runs / "plain"), "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "head_roles.md: exists and was not written by a structnmt command" in err and "Traceback" not in err
    assert (mine / "head_roles.md").read_text() == "my notes" and not (mine / "head_roles.png").exists()


def test_counter_and_table_on_hand_made_roles():
    c = HeadRoleCounter()
    c.add([torch.tensor([[True, False], [True, True]]), None])
    c.add([torch.tensor([[False, False]]), None])
    assert c.sentences == 3
    assert c.fractions() == [[pytest.approx(1 / 3, abs=1e-4), pytest.approx(2 / 3, abs=1e-4)], None]
    md = head_roles_table([("x", [{"step": 5, "sentences": 3, "redundant": [[0.25, 0.75], None]}])])
    assert "| x | 5 | 3 | 1 | 0.25 0.75 | 1/2 |" in md and "not comparable" in md
    with pytest.raises(UserError):
        read_head_roles(Path("/nonexistent/head_roles.jsonl"))


def test_analyze_draws_each_rhe_head_before_and_after_enlivening(runs, tmp_path):
    from structnmt.analysis.heatmaps import run_analyze

    c = runs / "c"
    written = run_analyze(checkpoint=runs / "rhe" / "checkpoint_last.pt", input_path=c / "test.src",
                          out_dir=tmp_path / "an", sentences=1, stats_sentences=1,
                          parse_dependency=str(c / "test.src.conllu"), parse_constituency=str(c / "test.src.tree"),
                          progress=False)
    names = {p.name for p in written}
    assert "sent1_rhe_layer1.png" in names and "sent1_rhe_layer2.png" not in names
    assert (tmp_path / "an" / "sent1_rhe_layer1.png").read_bytes()[:8] == PNG_MAGIC
    stats = json.loads((tmp_path / "an" / "attention_stats.json").read_text())
    assert len(stats["encoder_self"]) == 2
