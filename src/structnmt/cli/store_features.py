"""``structnmt features``: structure features computed once per dataset, into feature stores.

The requests come from the command line (``--feature NAME[:k=v,...]``, :func:`parse_request`) or from a
training config (``--for CONFIG.yaml``, :func:`config_requests`: its ``data.structures``, what its model's
mechanisms ask for and what its training hooks ask for, exactly as a training would). Each is computed for
every sentence of every split and written beside the dataset (:func:`structnmt.data.feature_store.build_store`);
a training then reads it memory-mapped instead of computing it in every process.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..config import Config, ConfigError, load_config
from ..data.dataset import PreparedDataset
from ..data.feature_store import build_store, request_text, store_name
from ..data.lock import hold_dataset
from ..errors import UserError
from ..models import build_model
from ..plugins import load_plugins
from ..syntax.batching import StructureSpec
from ..syntax.features import FEATURES, Feature
from ..syntax.io import parse_ptb
from ..syntax.trees import ConstituencyTree, DependencyTree
from .training import training_hooks


def parse_request(text: str) -> StructureSpec:
    """``NAME`` or ``NAME:k=v,...`` (values read as YAML scalars: ``k=2``, ``rule=rule2``) -> a request, checked
    against the feature's parameters; one sentence naming the option for a bad one."""
    name, _, rest = text.partition(":")
    if name not in FEATURES:
        load_plugins()  # a feature of --user-dir or of an installed plugin
    if name not in FEATURES:
        raise UserError(f"--feature {text}: no feature '{name}'; valid: {', '.join(FEATURES)} (or one of --user-dir).")
    feature = FEATURES[name]
    params: dict[str, Any] = {}
    given: dict[str, str] = {}  # each parameter as written
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in feature.params:
            raise UserError(f"--feature {text}: '{item}' is not a parameter of {name}, which takes "
                            f"{', '.join(feature.params) or 'none'}; write them as {_example(name)}.")
        try:
            params[key.strip()], given[key.strip()] = yaml.safe_load(value), value.strip()
        except yaml.YAMLError:
            raise UserError(f"--feature {text}: the value of '{item}' cannot be read (YAML); write the parameters "
                            f"as {_example(name)}.") from None
    missing = [p for p in _required_params(feature.func) if p not in params]
    if missing:
        raise UserError(f"--feature {text}: {name} needs {', '.join(missing)}; write it as {_example(name)} (or give "
                        "--for CONFIG.yaml to store what a training config asks for).")
    _check_params(text, feature, params, given)
    return StructureSpec(name, params)


#: what a parameter of each kind of example value must be, in words
_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a word"}


def _same_kind(value: Any, example: Any) -> bool:
    """Whether ``value`` is of the kind of ``example`` (a whole number for an int, any number for a float)."""
    if isinstance(example, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(example, bool)
    if isinstance(example, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(example))


def _sample_sentence() -> tuple[np.ndarray, ConstituencyTree, DependencyTree]:
    """"the cat sat" in four pieces (cat in two), with its constituency and dependency trees: what a request's
    parameters are tried on."""
    const = parse_ptb("(S (NP (DT the) (NN cat)) (VP (VBD sat)))")
    dep = DependencyTree(["the", "cat", "sat"], [2, 3, 0], ["det", "nsubj", "root"], ["DET", "NOUN", "VERB"])
    return np.array([0, 1, 1, 2]), const, dep


def _check_params(text: str, feature: Feature, params: dict[str, Any], given: dict[str, str]) -> None:
    """Refuse, in one sentence naming ``--feature``, parameters the feature cannot be computed with, before any
    data is read: a value of another kind than the feature's example (``k=abc`` where the example is ``k=2``),
    or one the feature itself refuses (an unknown ``rule=``), found by computing it on a three-word sentence."""
    name = feature.name
    for key, value in params.items():
        example = feature.example.get(key)
        if example is not None and not _same_kind(value, example):
            kind = _KINDS.get(type(example), f"a {type(example).__name__}")
            raise UserError(f"--feature {text}: {key}={given[key]} is not {kind}; write it as {_example(name)}.")
    pieces, const, dep = _sample_sentence()
    try:
        feature(pieces, constituency=const, dependency=dep, **params)
    except ValueError as err:
        why = str(err).strip().rstrip(".")
        raise UserError(f"--feature {text}: {why[:1].lower()}{why[1:]}.") from None
    except TypeError as err:
        raise UserError(f"--feature {text}: {name} cannot be computed with these parameters ({err}); write them "
                        f"as {_example(name)}.") from None


def _example(name: str) -> str:
    return request_text(StructureSpec(name, dict(FEATURES[name].example)))


def _required_params(func: Callable) -> list[str]:
    """The parameters of a feature function (after the pieces' alignment and the trees) without a default."""
    try:
        params = list(inspect.signature(func).parameters.values())[2:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


@dataclass
class RunView:
    """What a training hook may read of a run before it starts (its config, its dataset, its model), so that
    ``--for`` asks the hooks for their structures as the trainer does."""

    cfg: Config
    data: PreparedDataset
    model: Any


def config_requests(cfg: Config, dataset: PreparedDataset) -> dict[str, StructureSpec]:
    """The structure requests a training of ``cfg`` on ``dataset`` makes (as :class:`~structnmt.train.trainer.
    Trainer` gathers them): ``data.structures``, the model's ``required_structures()`` and its hooks'."""
    model = build_model(cfg.model, len(dataset.src_vocab), len(dataset.tgt_vocab))
    structures = {**cfg.data.structures, **model.required_structures()}
    view = RunView(cfg, dataset, model)
    for hook in training_hooks(cfg):
        structures.update(hook.required_structures(view))
    return structures


def store_features(data: str | Path, requests: list[StructureSpec], *, force: bool = False, progress: bool = True,
                   log: Callable[[str], None] = print) -> list[Path]:
    """Build the store of every request (one per distinct request) for ``data``; returns their directories.
    The dataset is held (:func:`~structnmt.data.lock.hold_dataset`) so that ``prepare`` does not replace it
    meanwhile."""
    held = hold_dataset(data)  # before the dataset is read, so that a rebuild under way ends first
    dataset = PreparedDataset(data)
    unique = {store_name(spec): spec for spec in requests}
    try:
        out = []
        for spec in unique.values():
            t0 = time.time()
            path, meta = build_store(dataset, spec, force=force, progress=progress, log=log)
            out.append(path)
            if meta is not None:
                n = sum(meta.splits.values())
                log(f"features: {request_text(spec)} -> {path}: {n:,} sentences of {len(meta.splits)} splits, "
                    f"{meta.bytes / 2**20:.1f} MB ({meta.bytes / max(n, 1):,.0f} bytes a sentence), "
                    f"{time.time() - t0:.1f} s.")
        return out
    finally:
        if held is not None:
            held.close()


def requests_of(features: list[str], config: str | None, overrides: list[str], data: str | None
                ) -> tuple[str, list[StructureSpec]]:
    """``(dataset, requests)`` of the command line: ``--feature`` items and/or ``--for CONFIG`` (whose
    ``data.path`` is the dataset unless ``--data`` names one)."""
    if not features and not config:
        raise UserError("structnmt features: name what to store, --feature NAME[:k=v,...] (e.g. "
                        f"{_example('lpea_positions')}) or --for CONFIG.yaml (what a training of it reads).")
    requests = [parse_request(text) for text in features]
    if config:
        cfg = load_config(config, overrides)
        data = data or cfg.data.path
        if not data:
            raise ConfigError(f"--for {config}: the config has no data.path; give the dataset with --data DIR.")
        requests += config_requests(cfg, PreparedDataset(data)).values()
    elif overrides:
        raise UserError(f"structnmt features: '{overrides[0]}' overrides a config; give the config with --for.")
    if not data:
        raise UserError("structnmt features: give the dataset with --data DIR (a directory structnmt prepare wrote).")
    return data, requests
