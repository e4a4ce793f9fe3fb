"""structnmt probe (MG-SA §4.2): config validation, scratch and frozen runs on the synthetic corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from structnmt.analysis.probe import load_probe_config, run_probe, split_indices
from structnmt.cli.training import train
from structnmt.config import Config, ConfigError, DataConfig, ModelConfig, TrainConfig
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus

QUIET = lambda *_: None  # noqa: E731


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    write_corpus(SynthConfig(seed=5, n_train=360, n_valid=20, n_test=20), root / "c")
    return root


def _base(corpus: Path, out: str) -> list[str]:
    return ["corpus.kind=text", f"corpus.path={corpus / 'c' / 'train.src'}", "corpus.parser.name=synthetic",
            "model.d_model=32", "model.ffn_dim=64", "model.heads=4", "mlp.hidden=32", "train.threads=1",
            "train.batch_size=32", f"out_dir={corpus / out}"]


def test_config_unknown_key_names_nearest(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("mode: scratch\ncorpus: {kind: conllu, path: x.conllu}\nmlp: {hiden: 3}\n")
    with pytest.raises(ConfigError, match="did you mean 'hidden'"):
        load_probe_config(p)
    with pytest.raises(ConfigError, match="did you mean 'pos'"):
        load_probe_config(None, ["corpus.path=x", "tasks=[poss]"])
    with pytest.raises(ConfigError, match="checkpoint"):
        load_probe_config(None, ["corpus.path=x", "mode=frozen"])
    for bad, fragment in (("train.epochs=0", "train.epochs=0 must be at least 1"),
                          ("train.batch_size=0", "train.batch_size=0 must be at least 1"),
                          ("train.lr=.nan", "train.lr=nan must be a positive number")):
        with pytest.raises(ConfigError, match=fragment):
            load_probe_config(None, ["corpus.path=x", "mode=scratch", bad])


def test_shipped_configs_load():
    for p in sorted(Path(__file__).resolve().parents[1].glob("configs/probe/*.yaml")):
        cfg = load_probe_config(p)
        assert cfg.split.ratios == (10, 1, 1)


def test_split_is_deterministic_10_1_1():
    a, b = split_indices(12000, (10, 1, 1), 1), split_indices(12000, (10, 1, 1), 1)
    assert a == b and [len(a[k]) for k in ("train", "valid", "test")] == [10000, 1000, 1000]
    assert sorted(a["train"] + a["valid"] + a["test"]) == list(range(12000))


def test_scratch_probe_learns_pos(corpus):
    cfg = load_probe_config(None, _base(corpus, "scratch") + [
        "mode=scratch", "tasks=[pos, tense]", "model.layers=1", "model.vocab_size=250", "train.epochs=4",
        "train.lr=0.01", "model.dropout=0.0"])
    report = run_probe(cfg, log=QUIET)
    assert report.exists() and "majority" in report.read_text()
    res = json.loads((report.parent / "probe.json").read_text())
    for t in ("pos", "tense"):
        r = res["tasks"][t]
        assert 0.0 <= r["test_acc"] <= 1.0 and 0.0 <= r["majority"] <= 1.0
    pos = res["tasks"]["pos"]
    assert pos["test_acc"] > pos["majority"] + 0.3, pos  # POS of the synthetic grammar is nearly lexical
    assert res["corpus"]["train"] + res["corpus"]["valid"] + res["corpus"]["test"] == 360


def test_frozen_probe_keeps_encoder_fixed(corpus, monkeypatch):
    root = corpus
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                          validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")], vocab_size=250),
            root / "bin", progress=False, log=QUIET)
    cfg = Config(data=DataConfig(path=str(root / "bin"), max_tokens=800),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(root / "nmt"), max_updates=4, validate_interval_updates=4,
                                   save_interval_updates=4, tensorboard=False, progress=False, threads=1))
    train(cfg, log=QUIET)
    ckpt = root / "nmt" / "checkpoint_last.pt"
    before = {k: v.clone() for k, v in torch.load(ckpt, map_location="cpu", weights_only=False)["model"].items()}

    import structnmt.analysis.probe as probe

    seen = {}
    real = probe.load_frozen

    def spy(*a, **k):
        out = real(*a, **k)
        seen["model"] = out[0]
        return out

    monkeypatch.setattr(probe, "load_frozen", spy)
    pcfg = load_probe_config(None, _base(root, "frozen") + [
        "mode=frozen", f"checkpoint={ckpt}", "tasks=[voice, tss, spc]", "train.epochs=3"])
    report = run_probe(pcfg, log=QUIET)
    res = json.loads((report.parent / "probe.json").read_text())
    assert set(res["tasks"]) == {"voice", "tss", "spc"}
    for r in res["tasks"].values():
        assert 0.0 <= r["test_acc"] <= 1.0 and "majority" in r
    assert "word_form" in res["tasks"]["spc"]
    after = seen["model"].state_dict()
    assert all(torch.equal(before[k], after[k].cpu()) for k in before)
    assert not any(p.requires_grad for p in seen["model"].parameters())
