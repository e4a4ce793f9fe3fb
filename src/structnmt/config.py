"""Typed configuration: dataclasses loaded from YAML, unknown keys rejected.

A run is described by one :class:`Config` with four sections::

    data:   where the prepared dataset lives and how batches are made
    model:  the architecture, including which attention mechanism sits in every
            layer and role (encoder self, decoder self, cross)
    train:  optimisation, checkpoints, validation, logging
    decode: beam search settings used for validation BLEU and ``translate``

YAML files are loaded strictly: an unknown key raises :class:`ConfigError` naming the
file, the key and the nearest valid name. Command-line overrides use dotted paths
(``train.max_updates=2000 model.layers.encoder=6``); values are parsed as YAML
scalars. The full config is saved inside every checkpoint so a checkpoint rebuilds its
model without the YAML file.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError


class ConfigError(UserError, ValueError):
    """A user-facing configuration error (one sentence naming the place and the fix).

    ``keys``: the dotted config keys the error is about (``("model.heads",)``; empty when it is
    about no one key), so that :func:`naming_override` can name the override that set one.
    """

    def __init__(self, message: str, keys: tuple[str, ...] = ()):
        super().__init__(message)
        self.keys = keys



@dataclass
class StructureSpec:
    """One structure tensor the collator builds (``data.structures.<key>``): a registered feature
    (``structnmt.syntax.features.FEATURES``, built by ``structnmt.syntax.batching``) and its parameters."""

    feature: str  # a key of structnmt.syntax.features.FEATURES
    params: dict[str, Any] = field(default_factory=dict)

@dataclass
class AttentionSpec:
    """Which attention mechanism a layer uses in one role, and its options.

    ``name`` is a key of :data:`structnmt.nn.attention.ATTENTION_REGISTRY`;
    ``options`` is passed to the mechanism's own typed option dataclass.
    """

    name: str = "mha"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AttentionPlan:
    """The attention mechanism per role, with per-layer exceptions.

    ``encoder_self``/``decoder_self``/``cross`` are the defaults for every layer of
    that role; ``overrides`` maps ``"encoder_self.0"`` (role.layer index) to a spec
    that replaces the default for that layer only (e.g. MG-SA in the bottom layer).
    """

    encoder_self: AttentionSpec = field(default_factory=AttentionSpec)
    decoder_self: AttentionSpec = field(default_factory=AttentionSpec)
    cross: AttentionSpec = field(default_factory=AttentionSpec)
    overrides: dict[str, AttentionSpec] = field(default_factory=dict)

    def spec(self, role: str, layer: int) -> AttentionSpec:
        key = f"{role}.{layer}"
        if key in self.overrides:
            return self.overrides[key]
        return getattr(self, role)


@dataclass
class RNNConfig:
    """Settings of ``model.family: rnn`` (SA-NMT's translator, structnmt.models.rnn)."""

    init_range: float = 0.0  # > 0: every parameter from U(-r, r) (SA-NMT §4.3: 0.04); 0: PyTorch's defaults
    syntax: str = "none"  # none: the NMT baseline | sa: structured attention (§3.1) | fa: flat self-attention (§4.2)
    annotations: str = "shared"  # shared (eqs. 16-18) | separate (eqs. 19-20) | one_set (eq. 22)
    hard: bool = False  # eq. 21: one-hot heads (argmax of each column, root included), straight-through
    root: str = "self"  # root scores: self (phi_jj = q_j . k_j, the paper) | learned (a root query r . k_j)
    scale: bool = False  # divide the arc scores by sqrt(d)
    score_cap: float = 0.0  # > 0: every arc and root score becomes cap * tanh(score / cap), in (-cap, cap)
    arc_lr_scale: float = 1.0  # the arc scorer's (W_Q, W_K, root query) learning rate: train.lr x this


@dataclass
class ModelConfig:
    family: str = "transformer"  # key of structnmt.models.MODEL_REGISTRY
    d_model: int = 128
    ffn_dim: int = 256
    heads: int = 4
    encoder_layers: int = 4
    decoder_layers: int = 4
    dropout: float = 0.3
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"  # relu | gelu
    pre_norm: bool = True  # False = post-norm (Vaswani et al. 2017)
    # attention projections' initialisation: linear (PyTorch's nn.Linear default) | xavier (fairseq's: Glorot-
    # uniform q, k, v with gain 1/sqrt(2), Glorot output projection, zero output bias; plain Transformers only)
    attention_init: str = "linear"
    share_all_embeddings: bool = False  # source, target and output (needs a joint vocabulary)
    tie_output: bool = True  # decoder input embedding == output projection
    max_positions: int = 1024
    attention: AttentionPlan = field(default_factory=AttentionPlan)
    rnn: RNNConfig = field(default_factory=RNNConfig)  # family rnn only


@dataclass
class DataConfig:
    path: str = ""  # prepared dataset directory (``structnmt prepare``)
    max_tokens: int = 4096  # target+source tokens per batch (the larger side, padded)
    max_sentences: int = 0  # 0 = no limit
    max_len: int = 256  # pairs longer than this (in pieces, either side) are filtered, and counted
    # structure tensors the collator builds: key -> {feature, params} (structnmt.syntax.batching)
    structures: dict[str, StructureSpec] = field(default_factory=dict)
    # per-sentence structure features are computed once and kept up to this size (per split, per process)
    structure_cache_mb: float = 1024


@dataclass
class DecodeConfig:
    beam: int = 5
    lenpen: float = 1.0  # score / length**lenpen
    max_len_a: float = 1.2  # max output length = a * source length + b
    max_len_b: int = 10
    nbest: int = 1
    batch_size: int = 64  # sentences per decoding batch
    # float32 | bfloat16 | int8: the number format of the decoder (attention scores, the normaliser and the
    # scores stay float32). bfloat16: weights and activations, level in BLEU on Multi30k (docs/results/,
    # "bfloat16 decoding"); its speed is the CPU's: 1.23x at 1 thread on an AMD Zen 4, no consistent gain at
    # 2 threads. int8 (CPU only): the linear layers in 8-bit integers, activations float32 between them
    # (docs/results/, "int8 decoding"). Both for plain Transformers only (benchmarks/README.md)
    dtype: str = "float32"
    # bfloat16 on a CPU without bfloat16 arithmetic (no AVX512-BF16 or AMX) is refused, being several times
    # slower than float32; true decodes in it anyway (to study its numbers, say)
    allow_slow_dtype: bool = False
    # CUDA only: every decoding step after the first replays one CUDA graph of the decoder over fixed-shape slots
    # (structnmt.decode.cuda_graphs): one launch instead of a few hundred a step. Transformer decoders of plain
    # attention or Rel_Pos, and the RNN family; 2.7-2.8x on an H200, off by default until its translations there are
    # compared with the ordinary search's (docs/speed.md)
    cuda_graphs: bool = False


@dataclass
class TrainConfig:
    seed: int = 1
    save_dir: str = "runs/default"
    lr: float = 5e-3
    warmup_updates: int = 2000
    warmup_init_lr: float = 1e-7
    lr_schedule: str = "inverse_sqrt"  # inverse_sqrt (warm-up, then lr * sqrt(warmup / step)) | halve_on_rise
    #   | linear | cosine. halve_on_rise: lr after the warm-up, halved whenever the validation perplexity rises
    #   (SA-NMT §4.3); linear, cosine: budget-aware, warm-up then decay to zero at train.max_updates
    #   (Li et al. 2020; structnmt.train.schedule)
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping
    label_smoothing: float = 0.1
    update_freq: int = 1  # gradient accumulation
    max_updates: int = 8000
    max_epochs: int = 0  # 0 = no limit
    max_time_minutes: float = 0.0  # wall-clock budget, 0 = no limit
    max_target_tokens: int = 0  # budget in training target tokens, 0 = no limit
    save_interval_updates: int = 500
    keep_last: int = 10
    validate_interval_updates: int = 500
    validate_bleu: bool = False  # decode the validation set and compute sacreBLEU
    validate_bleu_max_sentences: int = 0  # 0 = whole validation set
    early_stop_metric: str = "loss"  # loss | bleu
    patience: int = 0  # validations without improvement before stopping; 0 = never
    max_consecutive_nonfinite: int = 5  # NaN/inf losses in a row before the run stops
    bf16: bool = True  # autocast to bf16 on CUDA (ignored on CPU)
    # CUDA graphs for the training step: batches padded to shape buckets, the forward and backward recorded once
    # per shape and replayed (structnmt.train.cuda_graphs); CUDA only, models without source structures
    cuda_graphs: bool = False
    device: str = "auto"  # auto | cpu | cuda
    threads: int = 0  # torch.set_num_threads on CPU; 0 = leave the default
    log_interval: int = 50
    tensorboard: bool = True
    progress: bool = True
    # RHE analysis: at every validation, the redundant fraction of every encoder head on up to
    # head_roles_sentences validation sentences -> head_roles.jsonl / .png (needs parsed data)
    head_roles: bool = False
    head_roles_sentences: int = 500


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)


# --------------------------------------------------------------------------- loading


def _nearest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.4)
    return f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(options)}"


# keys the toolkit no longer has: (class, key) -> (their default, why they went). A saved config (a
# checkpoint's, a run's resolved.yaml: ``saved=True``) loads whatever it holds there (the key had no effect);
# a config being written is refused any value but the default, so that nobody sets it expecting an effect.
_RETIRED = {("DataConfig", "bucket_width"): (0, "it never had an effect: batches are always cut from sentences "
                                                "sorted by length (structnmt.data.dataset.make_batches)")}


def build_dataclass(cls: type, data: Any, where: str, saved: bool = False, path: str = "") -> Any:
    """Build dataclass ``cls`` from nested plain data (YAML, a checkpoint's saved config, a mechanism's
    ``options``), checking every key and type against the dataclass's annotations: an unknown key is a
    :class:`ConfigError` naming the nearest known one; a retired key (``_RETIRED``) is refused unless
    ``saved`` (a checkpoint written before it was retired). Nested dataclasses, ``list[...]``,
    ``dict[str, ...]``, ``tuple[...]`` and ``X | None`` are built recursively.

    ``where`` names the place in messages (a file, then the keys); ``path`` is the dotted key of
    ``data`` in the whole config (``"model.attention"``), carried by the errors (``ConfigError.keys``).
    A plugin builds its typed options with it: ``build_dataclass(MyOptions, options, "my_mechanism")``.
    """
    def sub(key: str) -> str:
        return f"{path}.{key}" if path else key

    keys = (path,) if path else ()
    if dataclasses.is_dataclass(cls):
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping for {cls.__name__}, got {data!r}.", keys)
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        kwargs = {}
        for key, value in data.items():
            retired = _RETIRED.get((cls.__name__, key))
            if key not in names and retired is not None:
                if value != retired[0] and not saved:
                    raise ConfigError(f"{where}.{key}={value!r}: the option was removed ({retired[1]}); delete it.",
                                      (sub(key),))
                continue
            if key not in names:
                raise ConfigError(f"{where}: unknown key '{key}'; {_nearest(str(key), names)}", (sub(str(key)),))
            kwargs[key] = build_dataclass(hints[key], value, f"{where}.{key}", saved, sub(key))
        return cls(**kwargs)
    origin = typing.get_origin(cls)
    args = typing.get_args(cls)
    if origin is dict:
        if data == [] or data is None:  # an empty list for an empty mapping (configs saved by version 0.1.0)
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {data!r}.", keys)
        return {k: build_dataclass(args[1], v, f"{where}.{k}", saved, sub(str(k))) for k, v in data.items()}
    if origin is list:
        if not isinstance(data, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {data!r}.", keys)
        return [build_dataclass(args[0], v, f"{where}[{i}]", saved, f"{path}[{i}]") for i, v in enumerate(data)]
    if origin is tuple:
        if not isinstance(data, (list, tuple)) or len(data) != len(args):
            raise ConfigError(f"{where}: expected a list of {len(args)} values, got {data!r}.", keys)
        return tuple(build_dataclass(a, v, where, saved, path) for a, v in zip(args, data))
    if cls is Any:
        return data
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if cls is float and isinstance(data, str):
        try:  # YAML 1.1 reads "1e-3" (no dot) as a string
            return float(data)
        except ValueError:
            pass
    if cls in (int, float, str, bool) and not isinstance(data, cls):
        raise ConfigError(f"{where}: expected {cls.__name__}, got {data!r}.", keys)
    if cls is int and isinstance(data, bool):
        raise ConfigError(f"{where}: expected int, got {data!r}.", keys)
    return data


def to_dict(cfg: Any) -> Any:
    """Plain nested data (dicts, lists, scalars) of a config, for YAML or checkpoints."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    return cfg


def from_dict(data: dict, where: str = "config", *, saved: bool = False) -> Config:
    """A validated :class:`Config` from plain data; ``saved``: a config the toolkit wrote (a checkpoint's, a
    run's resolved.yaml), which may hold keys it has retired since (``_RETIRED``)."""
    cfg = build_dataclass(Config, data, where, saved)
    validate(cfg, where)
    return cfg


def with_defaults(data: dict) -> dict:
    """A saved plain config (a checkpoint's, a run's resolved.yaml) read through the current
    :class:`Config`, so that an option added to the toolkit after it was written appears
    with its default — what that run had — instead of as missing. Returned unchanged where
    it cannot be read (an option the toolkit no longer has), so that a comparison reports it."""
    try:
        return to_dict(build_dataclass(Config, data, "saved config", saved=True))
    except (ConfigError, TypeError, ValueError):
        return data


# --------------------------------------------------------------------------- values


def _need(ok: bool, where: str, key: str, value: Any, rule: str, also: tuple[str, ...] = ()) -> None:
    """Raise a :class:`ConfigError` on ``key`` unless ``ok``; ``also``: other keys the rule relates it to."""
    if not ok:
        raise ConfigError(f"{where}: {key}={value!r} {rule}.", (key, *also))


def check_seed(seed: Any, where: str, key: str = "train.seed") -> None:
    """The one check of a random seed, for every command that seeds numpy (train, demo, experiment, tag, probe):
    a whole number in [0, 2**32), else a :class:`ConfigError` on ``key``."""
    ok = isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32
    _need(ok, where, key, seed, "must be in [0, 2**32) (numpy's range of seeds)")


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def first_mechanism(plan: AttentionPlan) -> tuple[str, str] | None:
    """(role, name) of the first attention that is not plain multi-head attention (mha), or None."""
    for role, spec in [("encoder_self", plan.encoder_self), ("decoder_self", plan.decoder_self),
                       ("cross", plan.cross), *plan.overrides.items()]:
        if spec.name != "mha":
            return role, spec.name
    return None


def not_plain_transformer(m: ModelConfig) -> str | None:
    """Why a model with this config is not a plain Transformer (multi-head attention in every layer), or
    None when it is: what ``model.attention_init=xavier`` (fairseq's initialisation of that attention's
    projections) needs."""
    if m.family != "transformer":
        return f"model.family is {m.family}, not transformer"
    other = first_mechanism(m.attention)
    return f"model.attention {other[0]} is {other[1]}, not plain multi-head attention (mha)" if other else None


def low_precision_refusal(m: ModelConfig) -> str | None:
    """Why a model with this config cannot decode in bfloat16 or int8 (``decode.dtype``), or None when it can.

    Only the plain Transformer (multi-head attention in every layer) is decoded and checked in
    bfloat16 and int8 (docs/results/, "bfloat16 decoding", "int8 decoding"); a mechanism's own
    arithmetic (matrix-tree marginals, phrase compositions, learned biases) is not, nor are the RNN
    family's recurrences.
    """
    return not_plain_transformer(m)


def validate_decode(d: DecodeConfig, where: str = "config") -> None:
    """Reject decoding settings that cannot work (raises :class:`ConfigError`)."""
    _need(d.beam >= 1, where, "decode.beam", d.beam, "must be at least 1 (1 = greedy)")
    _need(d.nbest >= 1, where, "decode.nbest", d.nbest, "must be at least 1")
    _need(d.nbest <= d.beam, where, "decode.nbest", d.nbest,
          f"cannot exceed decode.beam={d.beam} (a beam of {d.beam} keeps {d.beam} hypotheses); raise the beam",
          ("decode.beam",))
    _need(d.batch_size >= 1, where, "decode.batch_size", d.batch_size, "must be at least 1")
    _need(_finite(d.lenpen), where, "decode.lenpen", d.lenpen, "must be a finite number")
    _need(_finite(d.max_len_a) and d.max_len_a >= 0, where, "decode.max_len_a", d.max_len_a, "must be >= 0")
    _need(d.max_len_a > 0 or d.max_len_b >= 1, where, "decode.max_len_b", d.max_len_b,
          "must be at least 1 when decode.max_len_a is 0 (no output could be produced)", ("decode.max_len_a",))
    _need(d.dtype in ("float32", "bfloat16", "int8"), where, "decode.dtype", d.dtype,
          "must be float32, bfloat16 or int8")


def validate(cfg: Config, where: str = "config") -> None:
    """Reject values that cannot work, each with one sentence naming the key and the rule.

    Types and unknown keys are checked while building; this checks ranges and
    relations (``model.heads`` divides ``model.d_model``, a positive learning rate...).
    Whether a run has a budget at all is checked by the trainer (a config for
    ``translate`` needs none).
    """
    m, t, d = cfg.model, cfg.train, cfg.data
    _need(m.d_model >= 1, where, "model.d_model", m.d_model, "must be positive")
    _need(m.heads >= 1, where, "model.heads", m.heads, "must be positive")
    _need(m.d_model % m.heads == 0, where, "model.heads", m.heads,
          f"must divide model.d_model={m.d_model} (each head gets d_model / heads dimensions)", ("model.d_model",))
    _need(m.ffn_dim >= 1, where, "model.ffn_dim", m.ffn_dim, "must be at least 1")
    _need(m.encoder_layers >= 1, where, "model.encoder_layers", m.encoder_layers, "must be at least 1")
    _need(m.decoder_layers >= 1, where, "model.decoder_layers", m.decoder_layers, "must be at least 1")
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        value = getattr(m, key)
        _need(_finite(value) and 0 <= value < 1, where, f"model.{key}", value, "must be in [0, 1)")
    _need(m.activation in ("relu", "gelu"), where, "model.activation", m.activation, "must be relu or gelu")
    _need(m.attention_init in ("linear", "xavier"), where, "model.attention_init", m.attention_init,
          "must be linear or xavier")
    if m.attention_init != "linear":  # the mechanisms' own projections have no fairseq initialisation to copy
        why = not_plain_transformer(m)
        _need(why is None, where, "model.attention_init", m.attention_init,
              f"is for plain Transformers ({why}); set model.attention_init=linear", ("model.family", "model.attention"))
    _need(m.max_positions >= 2, where, "model.max_positions", m.max_positions, "must be at least 2")
    _need(d.max_tokens >= 1, where, "data.max_tokens", d.max_tokens, "must be at least 1")
    _need(d.max_sentences >= 0, where, "data.max_sentences", d.max_sentences, "must be >= 0 (0 = no limit)")
    _need(d.max_len >= 0, where, "data.max_len", d.max_len, "must be >= 0 (0 = no limit)")
    _need(_finite(t.lr) and t.lr > 0, where, "train.lr", t.lr, "must be a positive number")
    _need(_finite(t.warmup_init_lr) and t.warmup_init_lr >= 0, where, "train.warmup_init_lr", t.warmup_init_lr,
          "must be >= 0")
    _need(t.warmup_updates >= 0, where, "train.warmup_updates", t.warmup_updates, "must be >= 0")
    _need(t.lr_schedule in ("inverse_sqrt", "halve_on_rise", "linear", "cosine"), where, "train.lr_schedule",
          t.lr_schedule, "must be inverse_sqrt, halve_on_rise, linear or cosine")
    _need(_finite(t.label_smoothing) and 0 <= t.label_smoothing < 1, where, "train.label_smoothing",
          t.label_smoothing, "must be in [0, 1)")
    _need(_finite(t.clip_norm) and t.clip_norm >= 0, where, "train.clip_norm", t.clip_norm, "must be >= 0 (0 = off)")
    for key in ("update_freq", "save_interval_updates", "validate_interval_updates", "log_interval", "keep_last",
                "head_roles_sentences"):
        value = getattr(t, key)
        _need(value >= 1, where, f"train.{key}", value, "must be at least 1")
    check_seed(t.seed, where)
    for key in ("max_updates", "max_epochs", "max_target_tokens", "patience", "threads"):
        value = getattr(t, key)
        _need(value >= 0, where, f"train.{key}", value, "must be >= 0 (0 = no limit)")
    _need(_finite(t.max_time_minutes) and t.max_time_minutes >= 0, where, "train.max_time_minutes",
          t.max_time_minutes, "must be >= 0 (0 = no limit)")
    _need(t.early_stop_metric in ("loss", "bleu"), where, "train.early_stop_metric", t.early_stop_metric,
          "must be loss or bleu")
    validate_decode(cfg.decode, where)
    if cfg.decode.dtype != "float32":  # refused before training, not at its first BLEU validation
        why = low_precision_refusal(m)
        _need(why is None, where, "decode.dtype", cfg.decode.dtype,
              f"is for plain Transformers ({why}); set decode.dtype=float32", ("model.family", "model.attention"))


def deep_merge(base: dict, over: dict) -> dict:
    """``base`` with ``over`` on top, nested mappings merged key by key (copies; inputs untouched)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_overrides(data: dict, overrides: list[str], where: str = "command line") -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to nested plain data."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"{where}: override '{item}' has no '='; write it as section.key=value, "
                "e.g. train.max_updates=1000."
            )
        path, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"{where}: the value of override '{item}' is not valid YAML ({err.__class__.__name__}); "
                              "close its brackets or quotes, e.g. 'seeds=[1, 2]' or 'name=\"a: b\"'.") from None
        node = data
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: cannot set '{path}': '{key}' is not a section.")
        node[keys[-1]] = value
    return data


def read_yaml_mapping(path: str | Path, what: str = "config file", expect: str = "a mapping") -> dict:
    """Read a YAML file whose top level is a mapping; errors name the file and line."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: {what} not found; check the path.")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); the "
                          f"{what.split(' (')[0]} must be a YAML text file.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}{line}: invalid YAML ({err.__class__.__name__}); fix the syntax.") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be {expect}.")
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (or the defaults when ``path`` is None) plus overrides."""
    data = {} if path is None else read_yaml_mapping(path, expect="a mapping with data/model/train/decode sections")
    data = apply_overrides(data, overrides or [])
    try:
        return from_dict(data, where=str(path) if path else "config")
    except ConfigError as err:
        raise naming_override(err, overrides or []) from None


def naming_override(err: ConfigError, overrides: list[str]) -> ConfigError:
    """``err`` saying which command-line override set the value it names, where one did (the message
    names the file the rest of the config came from).

    An override matches when its key is one of ``err.keys``, a section holding it (``model={...}``
    for ``model.heads``) or a key inside it (``model.attention.cross.name=x`` for
    ``model.attention.cross``); the last such override wins, as it does when applied.
    """
    def sets(key: str, target: str) -> bool:
        return key == target or target.startswith((f"{key}.", f"{key}[")) or key.startswith(f"{target}.")

    for item in reversed(overrides):
        key = item.split("=", 1)[0].strip()
        if any(sets(key, target) for target in err.keys):
            return ConfigError(f"{str(err).rstrip('.')} (set on the command line by '{item}').", err.keys)
    return err


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
