"""Experiment grids: typed, strictly loaded YAML describing a set of comparable runs.

A grid names one prepared dataset, one base config, one training budget, a list of
seeds and a list of runs (rows of a paper's table), each a config file and/or dotted
overrides on top of the base. Every run gets the same data, the same budget and the
same seeds; :func:`resolve_run_config` builds the exact :class:`~structnmt.config.Config`
of one (run, seed).

Path rules: YAML files a grid refers to (``base`` and every ``runs[].config``) are
resolved against the directory of the grid file, so a grid travels with its configs;
data and output paths (``data.path``, ``data.prepare.*pref``, ``data.prepare.destdir``,
``out_dir``) are resolved against the current working directory, like ``data.path``
and ``train.save_dir`` in every structnmt config.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import (
    Config,
    ConfigError,
    _nearest,
    apply_overrides,
    build_dataclass,
    deep_merge,
    from_dict,
    naming_override,
    read_yaml_mapping,
)
from ..evaluate.score import bootstrap_refusal

#: Train keys a grid owns: they define the shared budget, seeds and layout of the runs.
BUDGET_KEYS = ("max_updates", "max_target_tokens", "max_time_minutes")
_GRID_OWNED = {f"train.{k}" for k in (*BUDGET_KEYS, "max_epochs", "patience", "seed", "save_dir")} | {"data.path"}
#: Top-level grid keys a command-line override may set directly (``budget.max_updates=200``);
#: ``grid.<key>=...`` reaches every grid key, including ``grid.data.path``.
_GRID_TOP = ("name", "out_dir", "budget", "seeds", "baseline", "evaluate", "runs", "base", "overrides")


class ExperimentError(ConfigError):
    """A grid cannot run (a failed training run, missing split, stale run directory)."""


@dataclass
class DataSpec:
    """The one dataset every run trains and is evaluated on.

    Exactly one of ``path`` (a prepared dataset directory) or ``prepare`` (the fields of
    :class:`structnmt.data.prepare.PrepareConfig` plus ``destdir``; prepared once, reused
    while up to date) must be given.
    """

    path: str = ""
    prepare: dict[str, Any] = field(default_factory=dict)


@dataclass
class BudgetSpec:
    """The training budget of every run: exactly one of the three is non-zero.

    ``patience`` > 0 trains to convergence: a run stops after that many validations
    without a lower validation loss, the budget being the cap."""

    max_updates: int = 0
    max_target_tokens: int = 0
    max_time_minutes: float = 0.0
    patience: int = 0

    def which(self) -> tuple[str, float]:
        set_ = [(k, getattr(self, k)) for k in BUDGET_KEYS if getattr(self, k)]
        return set_[0]

    def describe(self) -> str:
        key, value = self.which()
        if key == "max_updates":
            text = f"{int(value):,} updates per run (train.max_updates={int(value)})"
        elif key == "max_target_tokens":
            text = f"{int(value):,} training target tokens per run (train.max_target_tokens={int(value)})"
        else:
            text = f"{value:g} minutes of training wall-clock per run (train.max_time_minutes={value:g})"
        if self.patience:
            text = (f"until the validation loss has not improved for {self.patience} validations "
                    f"(train.patience={self.patience}), at most {text}")
        return text


@dataclass
class RunSpec:
    """One row of the table: ``name`` as in the paper's table, a config and overrides."""

    name: str = ""
    config: str = ""  # optional YAML merged over the base (relative to the grid file)
    overrides: list[str] = field(default_factory=list)


@dataclass
class EvaluateSpec:
    split: str = "test"  # dataset split to decode and score (the report's first table)
    # further dataset splits every run also decodes and scores, one table each in the report (e.g. [test1]:
    # the second --testpref of `structnmt prepare`); added to a finished grid, they are decoded on the next
    # invocation from the runs' average.pt
    extra_splits: list[str] = field(default_factory=list)
    # test sets of one domain read as one (docs/experiments.md, "Joined test sets"): the report's first table
    # and test are on these splits concatenated ("test+test1"), each split's table beside it. Unset: split and
    # extra_splits joined when the dataset prepared them from files of one domain (names equal but for digits,
    # test_2016_flickr and test_2017_flickr); [] joins nothing; [test, test1] names them
    join: list[str] | None = None
    average_last: int = 5  # average the last N numbered checkpoints
    beam: int = 5
    lenpen: float = 1.0
    batch_size: int = 0  # sentences per decoding batch; 0 = the run's decode.batch_size
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 12345
    # the seed-aware test's form (structnmt.evaluate.seeds): decomposed (each noise counted once) or
    # double-count (Clark et al.'s sum, kept for comparison); `structnmt experiment --seed-test`
    seed_test: str = "decomposed"
    lc_tok: bool = False  # the BLEU column is lowercased BLEU on Moses-tokenized text
    lang: str = "en"  # target language for the Moses tokenizer (lc_tok)
    device: str = "auto"  # decoding device: auto | cpu | cuda
    # a synthetic generalization benchmark directory (`structnmt synth --generalization`):
    # every run also translates its i.i.d. and held-out splits, scored per split
    benchmark: str = ""
    # files (one sentence per line, .gz ok; relative to the working directory) that every run
    # also translates with its averaged model and the evaluation's beam, e.g. the blind test
    # sets: <run>/<file name without .gz>.hyp, listed in result.json (not scored)
    translate: list[str] = field(default_factory=list)
    # CoNLL-U files (IDs and forms are enough; .gz ok) that every tree-inducing run (an RNN with
    # model.rnn.syntax sa or fa, a Transformer with a structured encoder layer) parses with its averaged model,
    # as `structnmt induce` does: <run>/induce/<file stem>/<file stem>.induced.conllu (and induce.json)
    induce: list[str] = field(default_factory=list)
    # the parses of everything a parse-reading run translates (the splits above and `translate`), made beforehand
    # with `structnmt parse` (spaCy-parsed datasets): read instead of running spaCy, e.g. on a GPU machine
    # without it; checked to cover every line before any training
    parse_cache: str = ""


@dataclass
class GridConfig:
    name: str = ""
    out_dir: str = ""
    data: DataSpec = field(default_factory=DataSpec)
    base: Any = None  # path of a config YAML (relative to the grid file) or an inline mapping
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    seeds: list[int] = field(default_factory=lambda: [1])
    baseline: str = ""  # row name of the baseline; default: the first run
    # dotted overrides every run gets (the grid's recipe, e.g. its learning-rate schedule): applied after each
    # run's config and before the run's own overrides, so a row may still set a key differently
    overrides: list[str] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)
    evaluate: EvaluateSpec = field(default_factory=EvaluateSpec)
    # where the grid came from (set by load_grid, not read from YAML)
    source: str = field(default="", metadata={"internal": True})


def _yaml_file(path: Path, what: str) -> dict:
    return read_yaml_mapping(path, what)


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(grid overrides, run-config overrides) of a command line's ``key=value`` items."""
    grid, run = [], []
    for item in overrides:
        key = item.split("=", 1)[0]
        if key.startswith("grid."):
            grid.append(item[len("grid."):])
        elif key.split(".")[0] in _GRID_TOP:
            grid.append(item)
        else:
            run.append(item)
    return grid, run


def _check_not_owned(overrides: list[str], where: str) -> None:
    for item in overrides:
        key = item.split("=", 1)[0]
        if key in _GRID_OWNED:
            hint = {"train.seed": "set the grid's seeds (seeds=[1,2,3])",
                    "train.save_dir": "set the grid's out_dir (or --out)",
                    "data.path": "set the grid's data.path (grid.data.path=...)"}.get(
                key, "set the grid's budget instead, e.g. budget.max_updates=2000")
            raise ConfigError(f"{where}: '{key}' is fixed by the grid so that every run shares it; {hint}.")


def load_grid(path: str | Path, overrides: list[str] | None = None) -> tuple[GridConfig, list[str]]:
    """Load and validate a grid; returns it and the overrides meant for every run's config.

    ``overrides`` are command-line ``key=value`` items: grid keys (``budget.*``,
    ``seeds``, ``evaluate.*``, ``name``, ``out_dir``, ``baseline``, or anything as
    ``grid.<key>``) change the grid, a ``budget.*`` override replacing the grid's
    budget; the others (``model.*``, ``train.*``, ``data.*``, ``decode.*``) are applied
    to every run's config after its own overrides.
    """
    p = Path(path)
    data = _yaml_file(p, "grid file")
    grid_over, run_over = split_overrides(list(overrides or []))
    if any(o.split("=", 1)[0].startswith("budget.max_") for o in grid_over):
        # a budget given on the command line replaces the grid's (its patience stays)
        data["budget"] = {k: v for k, v in (data.get("budget") or {}).items() if k not in BUDGET_KEYS}
    data = apply_overrides(data, grid_over)
    _check_not_owned(run_over, "command line")
    if "source" in data:
        raise ConfigError(f"{p}: unknown key 'source'; {_nearest('source', [f.name for f in dataclasses.fields(GridConfig) if f.name != 'source'])}")
    grid: GridConfig = build_dataclass(GridConfig, data, str(p))
    grid.source = str(p)
    validate_grid(grid, str(p))
    return grid, run_over


def validate_grid(grid: GridConfig, where: str) -> None:
    if not grid.name:
        grid.name = Path(where).stem
    set_ = [k for k in BUDGET_KEYS if getattr(grid.budget, k)]
    if len(set_) != 1:
        found = f"got {', '.join(set_)}" if set_ else "none is set"
        raise ConfigError(f"{where}: budget needs exactly one of {', '.join(BUDGET_KEYS)} ({found}); "
                          "every run of a grid trains under the same single budget.")
    if any(getattr(grid.budget, k) < 0 for k in BUDGET_KEYS) or grid.budget.patience < 0:
        raise ConfigError(f"{where}: budget values must be positive.")
    if bool(grid.data.path) == bool(grid.data.prepare):
        raise ConfigError(f"{where}: data needs exactly one of 'path' (a prepared dataset) or 'prepare' "
                          "(PrepareConfig fields plus destdir).")
    if not grid.runs:
        raise ConfigError(f"{where}: runs is empty; list at least the baseline, e.g. runs: [{{name: Transformer-Base}}].")
    names = [r.name for r in grid.runs]
    for i, r in enumerate(grid.runs):
        if not r.name:
            raise ConfigError(f"{where}: runs[{i}] has no name; give the row label as in the paper's table.")
        _check_not_owned(r.overrides, f"{where}: run '{r.name}'")
    _check_not_owned(grid.overrides, f"{where}: overrides")
    if grid.evaluate.split in grid.evaluate.extra_splits or len(set(grid.evaluate.extra_splits)) != len(
            grid.evaluate.extra_splits):
        raise ConfigError(f"{where}: evaluate.extra_splits {grid.evaluate.extra_splits} repeats a split (or "
                          f"evaluate.split '{grid.evaluate.split}'); name each split once.")
    _check_join(grid.evaluate, where)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}: run names must be unique; '{dup[0]}' appears twice.")
    _check_run_dirs(names, where)
    if not grid.baseline:
        grid.baseline = names[0]
    if grid.baseline not in names:
        raise ConfigError(f"{where}: baseline '{grid.baseline}' is not a run name; {_nearest(grid.baseline, names)}")
    if not grid.seeds or any(not isinstance(s, int) or s <= 0 for s in grid.seeds) or len(set(grid.seeds)) != len(grid.seeds):
        raise ConfigError(f"{where}: seeds must be a non-empty list of distinct positive integers, got {grid.seeds!r}.")
    ev = grid.evaluate
    if ev.average_last < 1 or ev.beam < 1 or ev.bootstrap_seed < 1:
        raise ConfigError(f"{where}: evaluate.average_last, beam and bootstrap_seed must be >= 1.")
    if ev.bootstrap_samples < 2:
        raise ConfigError(f"{where}: evaluate.bootstrap_samples={ev.bootstrap_samples} must be >= 2 (the tests read a "
                          "spread over resamples); 1000 is usual.")
    if ev.seed_test not in ("decomposed", "double-count"):
        raise ConfigError(f"{where}: evaluate.seed_test={ev.seed_test!r}: give decomposed or double-count.")
    too_many = bootstrap_refusal(ev.bootstrap_samples, f"evaluate.bootstrap_samples={ev.bootstrap_samples}")
    if too_many:
        raise ConfigError(f"{where}: {too_many}")
    if grid.base is not None and not isinstance(grid.base, (str, dict)):
        raise ConfigError(f"{where}: base must be a config file path or a mapping, got {grid.base!r}.")


def _check_join(ev: EvaluateSpec, where: str) -> None:
    """evaluate.join names at least two of the grid's scored splits, each once (or none: nothing joined)."""
    if ev.join is None or ev.join == []:
        return
    scored = [ev.split, *ev.extra_splits]
    odd = next((x for x in ev.join if x not in scored), None)
    if odd is not None or len(ev.join) < 2 or len(set(ev.join)) != len(ev.join):
        what = f"'{odd}' is not a scored split" if odd is not None else "it needs two or more splits, each once"
        raise ConfigError(f"{where}: evaluate.join {ev.join}: {what}; name two or more of evaluate.split and "
                          f"evaluate.extra_splits ({', '.join(scored)}), or [] to join nothing.")


def _check_run_dirs(names: list[str], where: str) -> None:
    """Two rows whose names give one run directory (``slug``) are refused: the second would report the first's
    runs (``"a b"`` and ``"a_b"`` are both ``runs/a-b``)."""
    seen: dict[str, str] = {}
    for n in names:
        d = slug(n)
        if d in seen:
            raise ConfigError(f"{where}: runs '{seen[d]}' and '{n}' would share the run directory runs/{d} (their "
                              "names differ only in characters a directory name leaves out); rename one of them.")
        seen[d] = n


def slug(name: str) -> str:
    """A directory name for a row label ("+ MG-SA (n-gram)" -> "mg-sa-n-gram")."""
    out = "".join(c.lower() if c.isalnum() else "-" for c in name)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "run"


def base_data(grid: GridConfig) -> dict:
    if grid.base is None:
        return {}
    if isinstance(grid.base, dict):
        return copy.deepcopy(grid.base)
    return _yaml_file(Path(grid.source).parent / grid.base, "base config (relative to the grid file)")


def resolve_run_config(grid: GridConfig, run: RunSpec, seed: int, *, data_path: Path, run_dir: Path,
                       overrides: list[str]) -> Config:
    """The full config of one (run, seed): base, run config, the grid's overrides, run overrides,
    command-line overrides, then what the grid fixes (data, budget, seed, save_dir, no progress bar)."""
    where = f"{grid.source}: run '{run.name}'"
    data = base_data(grid)
    if run.config:
        data = deep_merge(data, _yaml_file(Path(grid.source).parent / run.config,
                                           f"config of run '{run.name}' (relative to the grid file)"))
    data = apply_overrides(data, list(grid.overrides), where=f"{grid.source}: overrides")
    data = apply_overrides(data, list(run.overrides), where=where)
    data = apply_overrides(data, list(overrides), where="command line")
    budget_key, budget_value = grid.budget.which()
    data.setdefault("data", {})
    data.setdefault("train", {})
    if not isinstance(data["data"], dict) or not isinstance(data["train"], dict):
        raise ConfigError(f"{where}: 'data' and 'train' must be mappings.")
    data["data"]["path"] = str(data_path)
    data["train"].update({"save_dir": str(run_dir), "seed": seed, "max_epochs": 0,
                          "patience": grid.budget.patience, "progress": False})
    data["train"].update({k: (budget_value if k == budget_key else 0) for k in BUDGET_KEYS})
    try:
        return from_dict(data, where=where)
    except ConfigError as err:
        raise naming_override(err, list(overrides)) from None


def seeds_of(grid: GridConfig, results: dict, name: str) -> list[int]:
    """The seeds of run ``name`` that have results (all of ``grid.seeds`` unless the report was
    written with ``--report-only`` on an unfinished grid)."""
    return [s for s in grid.seeds if (name, s) in results]


def split_prefix(cfg: Config, split: str) -> tuple[str | None, str | None]:
    """(corpus prefix, source language) a split was prepared from (read from the dataset's
    manifest), for models that read pre-parsed trees of their input."""
    manifest_path = Path(cfg.data.path) / "manifest.json"
    if not manifest_path.is_file():
        return None, None
    pc = json.loads(manifest_path.read_text(encoding="utf-8"))["config"]
    tests = pc.get("testprefs") or []
    prefixes = {"train": pc.get("trainpref"), "valid": pc.get("validpref"),
                **{("test" if i == 0 else f"test{i}"): p for i, p in enumerate(tests)}}
    return prefixes.get(split), pc.get("source_lang")
