"""Feature stores (`structnmt features`): stored values equal computed ones, training reads them (one process
and two torchrun ranks) with identical losses, and a store made for another dataset or feature code is refused."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, cli

from structnmt.cli.store_features import store_features
from structnmt.config import (
    AttentionSpec,
    Config,
    DataConfig,
    ModelConfig,
    TrainConfig,
    save_config,
)
from structnmt.data.dataset import PreparedDataset
from structnmt.data.feature_columns import (
    HOW_BITS,
    HOW_NARROW,
    HOW_RAW,
    HOW_TABLE,
    Column,
    ColumnReader,
    ColumnWriter,
    StoreValueError,
)
from structnmt.data.feature_store import (
    FeatureStoreError,
    feature_code_version,
    open_store,
    store_dir,
)
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.syntax.batching import StructureSpec, feature_values
from structnmt.syntax.features import FEATURES, Feature, Padding
from structnmt.syntax.parsers import ParserConfig
from structnmt.train.trainer import Trainer

PROBE = Path(__file__).with_name("feature_store_probe.py")


def parsed_dataset(root: Path, seed: int = 4, n_train: int = 200) -> Path:
    """A synthetic dataset with its gold trees (dependency and constituency)."""
    write_corpus(SynthConfig(seed=seed, n_train=n_train, n_valid=16, n_test=16), root / "corpus")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "corpus" / "train"),
                          validpref=str(root / "corpus" / "valid"), testprefs=[str(root / "corpus" / "test")],
                          vocab_size=300, parser=ParserConfig(name="synthetic")),
            root / "bin", progress=False, log=lambda *_: None)
    return root / "bin"


@pytest.fixture
def data(tmp_path) -> Path:
    return parsed_dataset(tmp_path / "ds")


def structured_config(data: Path, save_dir: Path, **train) -> Config:
    """A tiny model reading five features: RHE with LPEA (LPEA positions, DEA mask), MG-SA (n-gram and syntactic
    partitions, with the tag loss's labels) and the semantic PhraseTransformer (dependency hypernodes)."""
    model = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=3, decoder_layers=1, dropout=0.1)
    groups = [{"kind": "word", "heads": 2}, {"kind": "ngram", "heads": 1, "n": 2}, {"kind": "syntax", "heads": 1, "level": 2}]
    model.attention.overrides = {
        "encoder_self.0": AttentionSpec("rhe", {"enhancement": "lpea"}),
        "encoder_self.1": AttentionSpec("mgsa", {"groups": groups, "composition": "san"}),
        "encoder_self.2": AttentionSpec("phrase_transformer", {"k": 3, "hypernodes": "semantic"}),
    }
    options = dict(seed=3, save_dir=str(save_dir), max_updates=4, warmup_updates=2, validate_interval_updates=2,
                   log_interval=1, tensorboard=False, progress=False, validate_bleu=False)
    return Config(data=DataConfig(path=str(data), max_tokens=600), model=model, train=TrainConfig(**{**options, **train}))


def same(a, b) -> bool:
    """Equal values of equal types: arrays of the same dtype and shape, tuples as tuples, lists as lists."""
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def run_records(save_dir: Path) -> list[dict]:
    """metrics.jsonl without what depends on the clock."""
    records = [json.loads(line) for line in (save_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("time", "tok_per_s")} for r in records]


# ----------------------------------------------------------------------------- values
def test_columns_give_back_every_kind_of_part(tmp_path):
    """Each encoding (bits, a table of values, a narrower integer type, raw bytes) and plain data come back
    with their dtype, shape, values and container types."""
    arrays = {
        "b": [np.array([[True, False, True]] * 3), np.zeros((0, 4), dtype=bool), np.eye(9, dtype=bool)],
        "i": [np.array([[0, -10**9], [2, -2]] * 20, dtype=np.int64), np.arange(-300, 300, dtype=np.int64).reshape(2, -1),
              np.array([2**40, -(2**40)], dtype=np.int64).reshape(1, 2), np.zeros((0, 3), dtype=np.int64),
              np.array([[5]], dtype=np.int64)],
        "u": [np.array([1, 255, 0], dtype=np.uint8)],
        "f": [np.array([0.5, -1e-30, np.inf], dtype=np.float32)],
    }
    data = [[("NP", "VP"), ["S"]], None, [(0, 2), (1, 3)], "ünïcode", [], [[], ()], (1.5, True)]
    for name, values in arrays.items():
        column = Column(name, "array", values[0].dtype.name, values[0].ndim)
        writer = ColumnWriter(tmp_path, "train", column, "test")
        for v in values:
            writer.add(v)
        writer.close()
        reader = ColumnReader(tmp_path, "train", column, len(values))
        assert all(same(v, reader.get(i)) for i, v in enumerate(values)), name
        if name == "i":
            assert {HOW_TABLE, HOW_NARROW + 2, HOW_RAW} <= set(reader.how.tolist())
        if name == "b":
            assert set(reader.how.tolist()) == {HOW_BITS}
    column = Column("d", "data")
    writer = ColumnWriter(tmp_path, "valid", column, "test")
    for v in data:
        writer.add(v)
    writer.close()
    reader = ColumnReader(tmp_path, "valid", column, len(data))
    assert all(same(v, reader.get(i)) for i, v in enumerate(data))
    with pytest.raises(StoreValueError, match="numpy.int64|int64 inside its lists"):
        ColumnWriter(tmp_path, "test", column, "feature x").add([np.int64(3)])
    int_column = Column("x", "array", "int64", 1)
    with pytest.raises(StoreValueError, match="must keep its type"):
        ColumnWriter(tmp_path, "test", int_column, "feature x").add(np.zeros((2, 2), dtype=np.int64))


VARIANTS = {"lpea_positions": [{"k": 2}, {"k": 3, "rule": "rule2_literal"}],
            "ngram_hypernodes": [{"k": 3}, {"k": 2, "unit": "piece"}],
            "dep_hypernodes": [{"k": 3, "mode": m} for m in ("edges", "subtrees", "edges_ngrams")]}


def test_stored_values_equal_computed_values_for_every_registered_feature(data):
    builtin = [name for name, f in FEATURES.items() if f.func.__module__ == "structnmt.syntax.features"]
    assert len(builtin) >= 7
    specs = [StructureSpec(name, params) for name in builtin for params in VARIANTS.get(name, [FEATURES[name].example])]
    stores = store_features(data, specs, progress=False, log=lambda *_: None)
    assert len(stores) == len(specs) and all((p / "meta.json").is_file() for p in stores)
    ds = PreparedDataset(data)
    for spec in specs:
        for name in ds.splits:
            split = ds.split(name)
            store = open_store(ds.root, spec, name, len(split))
            trees, wops = split.structure_inputs(range(len(split)), {"x": spec})
            computed = feature_values(spec, trees, wops)
            assert all(same(v, store.value(i)) for i, v in enumerate(computed)), (spec, name)


# ----------------------------------------------------------------------------- training
def test_training_with_the_store_gives_identical_losses_and_says_where_structures_come_from(data, tmp_path, capsys):
    cfg = structured_config(data, tmp_path / "computed")
    lines: list[str] = []
    trainer = Trainer(cfg, log=lines.append)
    try:
        assert trainer.stored == {}
        trainer.train()
    finally:
        trainer.close()
    assert any("no feature store" in x and "computed for every sentence" in x for x in lines), lines

    save_config(cfg, tmp_path / "run.yaml")
    code, out, err = cli(capsys, "features", "--for", tmp_path / "run.yaml", "--no-progress")
    assert code == 0, err
    assert out.count("features: ") == 5, out  # dep_mask, lpea_positions, ngram/syntax partitions, dep hypernodes

    stored_cfg = structured_config(data, tmp_path / "stored")
    lines = []
    trainer = Trainer(stored_cfg, log=lines.append)
    try:
        assert set(trainer.stored) == set(trainer.structures) and len(trainer.structures) == 5
        trainer.train()
        assert trainer.train_split.structures_kept_mb == 0 and trainer.valid_split.structures_kept_mb == 0
    finally:
        trainer.close()
    assert sum("read from the feature store" in x for x in lines) == 5, lines
    assert not any("no feature store" in x for x in lines)
    assert run_records(tmp_path / "computed") == run_records(tmp_path / "stored")
    assert len(run_records(tmp_path / "stored")) == 6  # 4 updates, 2 validations


def test_a_small_cache_limit_is_logged_as_what_was_kept(data, tmp_path):
    lines: list[str] = []
    cfg = structured_config(data, tmp_path / "m", max_updates=1)
    cfg.data.structure_cache_mb = 0.5
    trainer = Trainer(cfg, log=lines.append)
    try:
        trainer.train()
    finally:
        trainer.close()
    text = "\n".join(lines)
    assert "holds" in text and "computed for every sentence" not in text, text
    assert "computed and kept for " in text and " of 200 train" in text, text


# ----------------------------------------------------------------------------- refusals
def test_a_store_made_for_another_dataset_is_refused(tmp_path, capsys):
    one, other = parsed_dataset(tmp_path / "one"), parsed_dataset(tmp_path / "other", seed=5)
    cfg = structured_config(one, tmp_path / "m")
    save_config(cfg, tmp_path / "run.yaml")
    assert cli(capsys, "features", "--for", tmp_path / "run.yaml", "--no-progress")[0] == 0
    shutil.copytree(one / "features", other / "features")
    with pytest.raises(FeatureStoreError) as err:
        Trainer(structured_config(other, tmp_path / "m2"), log=lambda *_: None)
    assert str(err.value).startswith(str(other / "features"))
    assert "made for another dataset" in str(err.value) and f"rerun `structnmt features --data {other}" in str(err.value)
    save_config(structured_config(other, tmp_path / "m3"), tmp_path / "other.yaml")
    code, _, stderr = cli(capsys, "train", tmp_path / "other.yaml", "--no-progress")
    assert_user_error(code, stderr, "made for another dataset", "rerun `structnmt features")
    code, out, _ = cli(capsys, "features", "--for", tmp_path / "other.yaml", "--no-progress")  # the fix
    assert code == 0 and "up to date" not in out
    trainer = Trainer(structured_config(other, tmp_path / "m4"), log=lambda *_: None)
    trainer.close()
    assert len(trainer.stored) == 5


def _toy_module(path: Path, name: str, helper_body: str):
    """A plugin module whose feature calls a helper; only the helper's code differs between versions."""
    path.write_text("import numpy as np\n\n\n"
                    f"def helper(w):\n    {helper_body}\n\n\n"
                    "def toy(word_of_piece, trees):\n    return helper(np.asarray(word_of_piece, dtype=np.int64))\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Feature("toy_feature", module.toy, (), (), "toy", Padding("sequence", np.int64, pad=-1))


def test_a_store_made_by_another_version_of_the_feature_code_is_refused(data, tmp_path, monkeypatch):
    v1 = _toy_module(tmp_path / "toy_v1.py", "toy_v1", "return w * 2")
    v1_again = _toy_module(tmp_path / "toy_v1b.py", "toy_v1b", "return w * 2")
    v2 = _toy_module(tmp_path / "toy_v2.py", "toy_v2", "return w + w  # the same values, other code")
    assert feature_code_version(v1) == feature_code_version(v1_again)
    assert feature_code_version(v1) != feature_code_version(v2)  # a change in a function the feature calls
    spec = StructureSpec("toy_feature")
    monkeypatch.setitem(FEATURES, "toy_feature", v1)
    store_features(data, [spec], progress=False, log=lambda *_: None)
    assert open_store(data, spec, "train", 200) is not None
    monkeypatch.setitem(FEATURES, "toy_feature", v2)
    with pytest.raises(FeatureStoreError) as err:
        PreparedDataset(data).split("train").open_feature_stores({"toy": spec})
    assert str(err.value).startswith(str(store_dir(data, spec)))
    assert "another version of the feature's code" in str(err.value)
    assert f"rerun `structnmt features --data {data} --feature toy_feature`" in str(err.value)


def test_the_command_keeps_up_to_date_stores_and_never_replaces_a_directory_it_did_not_write(data, capsys):
    code, out, _ = cli(capsys, "features", "--data", data, "--feature", "lpea_positions:k=2", "--no-progress")
    assert code == 0 and "lpea_positions.k=2" in out
    written = (data / "features" / "lpea_positions.k=2" / "meta.json").stat().st_mtime_ns
    code, out, _ = cli(capsys, "features", "--data", data, "--feature", "lpea_positions:k=2", "--no-progress")
    assert code == 0 and "up to date; kept" in out
    assert (data / "features" / "lpea_positions.k=2" / "meta.json").stat().st_mtime_ns == written
    code, out, _ = cli(capsys, "features", "--data", data, "--feature", "lpea_positions:k=2", "--force", "--no-progress")
    assert code == 0 and "up to date" not in out
    mine = data / "features" / "dep_mask"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    code, _, err = cli(capsys, "features", "--data", data, "--feature", "dep_mask", "--no-progress")
    assert_user_error(code, err, str(mine), "was not written by a structnmt command")
    assert (mine / "notes.txt").read_text() == "mine\n"
    code, _, err = cli(capsys, "features", "--data", data, "--feature", "lpea_positions")
    assert_user_error(code, err, "lpea_positions needs k", "lpea_positions:k=2")
    code, _, err = cli(capsys, "features", "--data", data, "--feature", "no_such_feature")
    assert_user_error(code, err, "no feature 'no_such_feature'")
    assert not list((data / "features").glob(".*tmp-*"))


# ----------------------------------------------------------------------------- two processes
def test_two_torchrun_ranks_read_the_store_and_train_as_without_it(tmp_path, capsys):
    """Each of two gloo ranks reads every structure from the store's mapped files (resident pages, no
    anonymous ones), keeps nothing, does not grow its anonymous memory by the values it reads, and the
    losses equal a run that computes them."""
    plain = parsed_dataset(tmp_path / "ds", n_train=400)
    stored = tmp_path / "with-store"
    shutil.copytree(plain, stored)
    save_config(structured_config(plain, tmp_path / "computed"), tmp_path / "plain.yaml")
    save_config(structured_config(stored, tmp_path / "stored"), tmp_path / "stored.yaml")
    assert cli(capsys, "features", "--for", tmp_path / "stored.yaml", "--no-progress")[0] == 0
    out = tmp_path / "probe"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(PROBE), str(tmp_path / "plain.yaml"), str(tmp_path / "stored.yaml"), str(out)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        rec = json.loads((out / f"rank{rank}.json").read_text())
        computed, read = rec["computed"], rec["stored"]
        assert computed["stored"] == [] and computed["kept_mb"] > 0
        assert read["stored"] == read["structures"] and len(read["structures"]) == 5
        assert read["kept_mb"] == 0
        maps = read["store_maps"]
        assert any(p.endswith("lpea_positions.k=6.rule=rule2/train.value.bin") for p in maps), sorted(maps)
        assert all(m["Anonymous"] == 0 for m in maps.values())
        assert sum(m["Rss"] for m in maps.values()) > 0
        assert read["anon_growth_kb"] < read["values_kb"] / 4, rec
    assert run_records(tmp_path / "computed") == run_records(tmp_path / "stored")


def test_a_dataset_being_rebuilt_is_refused_and_a_partial_feature_is_versioned_by_its_arguments(data, tmp_path):
    import functools

    spec = StructureSpec("dep_mask")
    store_features(data, [spec], progress=False, log=lambda *_: None)
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "installing": True}))
    with pytest.raises(FeatureStoreError, match="being rebuilt by `structnmt prepare`"):
        open_store(data, spec, "train", 200)

    def scaled(word_of_piece, trees, k=1):
        return np.asarray(word_of_piece, dtype=np.int64) * k

    versions = [feature_code_version(Feature("toy_feature", functools.partial(scaled, k=k), (), (), "toy",
                                             Padding("sequence", np.int64, pad=-1))) for k in (1, 2, 2)]
    assert versions[0] != versions[1] and versions[1] == versions[2]


# ----------------------------------------------------------------------------- damaged files
def _dea_config(data: Path, save_dir: Path, path: Path) -> Path:
    """A one-update RHE-DEA config (reads the dependency mask) written to ``path``."""
    model = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1)
    model.attention.overrides = {"encoder_self.0": AttentionSpec("rhe", {"enhancement": "dea"})}
    train = TrainConfig(seed=3, save_dir=str(save_dir), max_updates=1, warmup_updates=1, validate_interval_updates=1,
                        tensorboard=False, progress=False, validate_bleu=False)
    save_config(Config(data=DataConfig(path=str(data), max_tokens=600), model=model, train=train), path)
    return path


def test_a_column_file_with_flipped_bytes_is_refused_by_training_and_rebuilt_by_the_command(data, tmp_path, capsys):
    """Every column file's SHA-256 is recorded when the store is written and checked when it is opened: 64 flipped
    bytes in the middle of the train split's mask file are one sentence naming the file and the command that
    rebuilds the store, not a training on other masks; `structnmt features` sees it and rebuilds."""
    cfg = _dea_config(data, tmp_path / "run", tmp_path / "dea.yaml")
    code, out, err = cli(capsys, "features", "--for", cfg, "--no-progress")
    assert code == 0, err
    store = data / "features" / "dep_mask"
    meta = json.loads((store / "meta.json").read_text())
    assert set(meta["files"]) == {p.name for p in store.iterdir() if p.name != "meta.json"}
    column = store / "train.value.bin"
    original = column.read_bytes()
    middle = len(original) // 2
    column.write_bytes(original[:middle] + bytes(b ^ 0xFF for b in original[middle:middle + 64])
                       + original[middle + 64:])
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, f"{column}: this column file of the feature store was changed or damaged",
                      "its SHA-256 is not the one recorded", f"rerun `structnmt features --data {data} --feature "
                      "dep_mask` to rebuild it")
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()
    code, out, err = cli(capsys, "features", "--for", cfg, "--no-progress")  # the fix
    assert code == 0, err
    assert f"rebuilding {store}: {column}: this column file" in out and "up to date" not in out
    assert column.read_bytes() == original
    # a file cut short: its size says so
    index = store / "valid.value.idx.npy"
    index.write_bytes(index.read_bytes()[:-8])
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, f"{index}: this column file", "bytes where", "were written", "rerun `structnmt")
    assert cli(capsys, "features", "--for", cfg, "--no-progress")[0] == 0
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert code == 0, err


def test_a_store_written_before_the_hashes_is_refused_with_the_rebuild_and_the_command_rebuilds_it(data, tmp_path,
                                                                                                   capsys):
    cfg = _dea_config(data, tmp_path / "run", tmp_path / "dea.yaml")
    assert cli(capsys, "features", "--for", cfg, "--no-progress")[0] == 0
    store = data / "features" / "dep_mask"
    meta = json.loads((store / "meta.json").read_text())
    del meta["files"]  # as written before the hashes existed
    (store / "meta.json").write_text(json.dumps(meta))
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, f"{store}: this store was written before feature stores recorded their files' "
                      "SHA-256", "rerun `structnmt features")
    code, out, err = cli(capsys, "features", "--for", cfg, "--no-progress")
    assert code == 0 and f"rebuilding {store}: {store}: this store was written before" in out, (out, err)
    assert "files" in json.loads((store / "meta.json").read_text())
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert code == 0, err
