"""Typed configs: strict YAML, nearest-name suggestions, overrides, round trip."""

from __future__ import annotations

import pytest

from structnmt.config import Config, ConfigError, load_config, save_config, to_dict


def test_defaults_round_trip_through_yaml(tmp_path):
    cfg = Config()
    cfg.model.attention.overrides["encoder_self.0"] = cfg.model.attention.encoder_self
    path = tmp_path / "c.yaml"
    save_config(cfg, path)
    assert to_dict(load_config(path)) == to_dict(cfg)


def test_unknown_key_names_file_and_nearest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  max_update: 10\n")
    with pytest.raises(ConfigError, match=r"c\.yaml\.train: unknown key 'max_update'; did you mean 'max_updates'"):
        load_config(path)


def test_wrong_type_is_rejected(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: wide\n")
    with pytest.raises(ConfigError, match="d_model: expected int"):
        load_config(path)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: 0.1\n  bad: [1, 2\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line \d+: invalid YAML"):
        load_config(path)


def test_overrides_parse_yaml_scalars_and_nested_specs(tmp_path):
    cfg = load_config(None, ["train.max_updates=12", "train.lr=1e-3", "model.pre_norm=false",
                             "model.attention.cross.name=mha", "train.betas=[0.9, 0.99]"])
    assert cfg.train.max_updates == 12 and cfg.train.lr == 0.001 and cfg.model.pre_norm is False
    assert cfg.train.betas == (0.9, 0.99)
    with pytest.raises(ConfigError, match="did you mean 'lr'"):
        load_config(None, ["train.lrr=1"])
    with pytest.raises(ConfigError, match="has no '='"):
        load_config(None, ["train.lr"])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_shipped_recipes_load():
    from importlib import resources
    from pathlib import Path

    from structnmt.experiment import load_grid

    root = Path(__file__).resolve().parents[1] / "configs"
    recipes = sorted(root.glob("*.yaml"))
    grids = sorted((root / "grids").glob("*.yaml"))
    assert recipes and grids
    for path in recipes:
        load_config(path)
    for path in grids:
        load_grid(path, [])
    text = resources.files("structnmt").joinpath("recipes/demo.yaml").read_text()
    assert "model:" in text


def test_a_retired_key_loads_from_saved_configs_and_is_refused_with_another_value(tmp_path):
    """data.bucket_width was never read: saved configs still load (whatever they hold there), and a config
    being written that sets it to anything but its old default is told that it does nothing."""
    from structnmt.config import from_dict, with_defaults

    saved = to_dict(Config())
    saved["data"]["bucket_width"] = 0  # as every resolved.yaml and checkpoint written before holds it
    assert from_dict(saved).data.max_tokens == 4096
    saved["data"]["bucket_width"] = 64
    assert from_dict(saved, saved=True).data.max_tokens == 4096
    assert with_defaults(saved) == to_dict(Config())  # a resumed run sees no change in its config
    with pytest.raises(ConfigError, match=r"config\.data\.bucket_width=64: the option was removed"):
        from_dict(saved)
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  bucket_width: 64\n")
    with pytest.raises(ConfigError, match=r"c\.yaml\.data\.bucket_width=64: the option was removed \(it never had "
                                          r"an effect.*\); delete it\."):
        load_config(path)
    assert "bucket_width" not in to_dict(Config())["data"]


@pytest.mark.parametrize("overrides, named", [
    # the error is on model.lr; train.lr, applied after it, shares the last key component only
    (["model.lr=3", "train.lr=0.1"], "model.lr=3"),
    # the rule is on model.heads, the value that broke it is model.d_model
    (["train.lr=0.1", "model.d_model=30"], "model.d_model=30"),
    # a whole section set at once
    (["model={heads: 0}"], "model={heads: 0}"),
    # a key inside the one the error names
    (["model.attention.cross={name: mha, options: 3}"], "model.attention.cross={name: mha, options: 3}"),
    # the last override of a key wins, as when applied
    (["decode.beam=0", "train.lr=0.1", "decode.beam=-1"], "decode.beam=-1"),
])
def test_a_bad_value_names_the_override_that_set_it(overrides, named):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value).endswith(f"(set on the command line by '{named}').")
    assert str(err.value).count("set on the command line") == 1


def test_an_override_of_another_key_is_not_named():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["data.max_tokens=10", "train.threads=-2"])
    assert str(err.value).endswith("(set on the command line by 'train.threads=-2').")
    assert "data.max_tokens=10" not in str(err.value)
    with pytest.raises(ConfigError) as err:  # the error is about a key none of the overrides touch
        load_config(None, ["train.lr=0.1", "model.attention_init=xavier", "model.family=rnn"])
    assert "set on the command line by 'train.lr=0.1'" not in str(err.value)
