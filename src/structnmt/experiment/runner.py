"""Run a grid: prepare once, train every (run, seed) in a subprocess, decode, score, report.

Layout of the output directory::

    OUT/experiment.log                 progress lines of every invocation
    OUT/data-bin/                      the dataset, when the grid prepares it (default destdir)
    OUT/runs/<row-slug>/seed<k>/       one training run (train.save_dir)
        resolved.yaml                  the exact config it trains with
        dataset.json                   the fingerprint of the dataset it trains on
        train.log                      the training subprocess's output (appended on resume)
        checkpoint_*.pt, metrics.jsonl written by the trainer
        train_done.json                the training subprocess finished its budget
        average.pt                     the average of the last N checkpoints
        <split>.hyp                    its translations of the evaluation split (and of every extra split)
        result.json                    scores and measurements: the run is finished
    OUT/results.md, results.csv, learning_curves.png, ngram_gain.png

Resume: a (run, seed) with ``result.json`` is skipped; one with ``train_done.json`` is
only decoded and scored; any other is (re)launched, and the trainer resumes from
``checkpoint_last.pt`` when the directory holds one. A run directory whose
``resolved.yaml`` differs from the config the grid now asks for (other than speed-only
keys such as ``train.threads``) is refused rather than silently mixed; a different
``data.path`` is accepted when the run's ``dataset.json`` records the same dataset
fingerprint (:func:`dataset_fingerprint`), so the small files of finished runs
(``result.json``, ``resolved.yaml``, ``dataset.json``, ``metrics.jsonl``, the ``.hyp``
files) can be copied to another machine and the grid continued there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shlex
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from .. import plugins
from ..analysis.curves import read_curves
from ..config import Config, ConfigError, build_dataclass, from_dict, to_dict, with_defaults
from ..data.dataset import PreparedDataset
from ..data.generalization import benchmark_splits, load_examples
from ..data.prepare import PrepareConfig, prepare
from ..data.subword_nmt import MAGIC
from ..decode.translate import Translator, check_dtype_speed
from ..errors import UserError
from ..evaluate.generalization import split_metrics
from ..evaluate.score import corpus_scores
from ..fileio.corpus import CorpusError, read_lines
from ..fileio.files import OutputDir, atomic_write_text
from ..machine.device import (
    cap_workers,
    device_type,
    get_device,
    set_threads,
    trains_in_bf16,
    use_threads,
)
from ..machine.subprocesses import interrupt_pool, launch_cli
from ..models import build_model
from ..models.checkpoint import load_checkpoint
from ..syntax.parse_cache import cached_parses, dataset_parser, read_parse_cache
from ..syntax.parsers import ParserError, SpacyParser, resolve_pipeline
from ..tasks.induce import induces_trees, run_induce
from ..train.average import average_checkpoints, last_checkpoints
from ..train.lock import RESUMABLE_KEYS
from .datasets import prepare_command, recorded_path
from .grid import (
    BUDGET_KEYS,
    ExperimentError,
    GridConfig,
    load_grid,
    resolve_run_config,
    slug,
    split_prefix,
)
from .report import DamagedResult, hardware, headline_score, read_result, report_dir, write_report

#: Config keys that change speed, logging or hardware only: a finished or started run may be reported and
#: resumed with other values. The trainer's resumable keys, less the budget (a run trained for another
#: budget is another result); train.save_dir is the run directory itself, which the grid sets to where the
#: run is, so an output directory may be moved or copied (from a GPU machine, say) and still resume/report.
_SPEED_ONLY = RESUMABLE_KEYS - {f"train.{k}" for k in (*BUDGET_KEYS, "max_epochs", "patience")}


def launch_training(config_path: Path, log_path: Path, live: set | None = None) -> int:
    """Train ``config_path`` (a run's ``resolved.yaml``, with :func:`location_overrides`) in a fresh Python
    process; its output is appended to ``log_path``.

    A subprocess gives every run its own peak-memory measurement and leaves a resumable
    checkpoint when the runner is interrupted. Returns the exit status.
    """
    return launch_cli(["train", str(config_path), *location_overrides(config_path), "--no-progress"], log_path, live)


def location_overrides(config_path: Path) -> list[str]:
    """``data.path`` and ``train.save_dir`` of a run's ``resolved.yaml`` as absolute overrides (JSON strings
    are YAML): the record keeps them relative to the directory the grid is run from (:func:`record_config`),
    the trainer, and so its checkpoints, get this machine's absolute locations, as before records were
    relative (a run started then resumes on the same data.path)."""
    recorded = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    data, save_dir = Path(recorded["data"]["path"]), Path(recorded["train"]["save_dir"])
    return [f"data.path={json.dumps(str(data.resolve()))}", f"train.save_dir={json.dumps(str(save_dir.resolve()))}"]


def record_config(config: dict) -> dict:
    """A run's config (plain data) as ``resolved.yaml`` records it: ``data.path`` and ``train.save_dir``
    relative to the current directory (:func:`structnmt.experiment.datasets.recorded_path`), so that no record
    holds a path of the machine that wrote it."""
    out = {**config, "data": dict(config["data"]), "train": dict(config["train"])}
    out["data"]["path"] = recorded_path(out["data"]["path"])
    out["train"]["save_dir"] = recorded_path(out["train"]["save_dir"])
    return out


# --------------------------------------------------------------------------- helpers


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def dataset_fingerprint(path: Path, *, raw: bool = False) -> str:
    """SHA-256 over the content of every file of a prepared dataset but its manifest (which records paths
    and timings): two preparations with this fingerprint hold the same pieces, trees and references.

    A SentencePiece model (``*.model``) is hashed without the one field that names where it was trained
    (``trainer_spec.model_prefix``, a temporary directory), so preparing the same inputs again, on this
    machine or another, gives the same fingerprint. ``raw``: the bytes as they are (the fingerprint of
    runs recorded before this rule)."""

    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).iterdir() if p.is_file() and p.name != "manifest.json"):
        h.update(f.name.encode())
        if f.suffix == ".model" and not raw:
            h.update(_sentencepiece_content(f.read_bytes()))
            continue
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _sentencepiece_content(data: bytes) -> bytes:
    """A SentencePiece model's bytes without its training path (pieces, scores and normalizer kept)."""
    from sentencepiece import sentencepiece_model_pb2

    if data.startswith(MAGIC):  # a subword-nmt model holds no path
        return data
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception:  # not a SentencePiece model: its bytes as they are
        return data
    proto.trainer_spec.ClearField("model_prefix")
    return proto.SerializeToString(deterministic=True)


def _same_dataset(run_dir: Path, data_path: Path, fingerprint: str) -> bool:
    """Whether the run recorded (``dataset.json``) that it trained on this dataset."""
    try:
        recorded = json.loads((run_dir / "dataset.json").read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return False
    return recorded == fingerprint or recorded == dataset_fingerprint(data_path, raw=True)


def _config_diff(old: dict, new: dict) -> list[str]:
    """Keys whose values differ, speed-only keys aside. ``old`` (a run's resolved.yaml) is read
    through the current Config first, so an option added to the toolkit after the run started
    counts as its default (what that run had) instead of as a change."""
    a, b = _flat(with_defaults(old)), _flat(new)
    return sorted(k for k in set(a) | set(b) if k not in _SPEED_ONLY and a.get(k) != b.get(k))


def _resolved_device(device: str) -> str:
    """``train.device`` as the trainer resolves it here (``auto``: :func:`get_device`'s choice); a named device as
    named, even where it is not present (a run finished on another machine than it trained on)."""
    return str(get_device("auto")) if device == "auto" else device


def trained_as(run: dict, cfg: Config) -> tuple[str, str]:
    """(device, precision) a run trained on, for its result.json: the trainer's record in its checkpoint's run state
    (``device``, ``bf16_autocast``: a run may train on one machine and be finished on another), else what ``cfg``
    gives on this machine (runs from before the record). Precision: ``bf16 autocast`` or ``float32``."""
    device = run.get("device") or _resolved_device(cfg.train.device)
    bf16 = run.get("bf16_autocast")
    if bf16 is None:  # not recorded, or not known for every launch
        bf16 = trains_in_bf16(device, cfg.train.bf16)
    return device, "bf16 autocast" if bf16 else "float32"


def _same_precision(run_dir: Path, cfg: Config) -> bool:
    """Whether a finished run whose ``train.bf16`` differs from ``cfg``'s is still the run ``cfg`` asks for: it
    trained in float32 and ``cfg`` admits float32 training. ``train.bf16`` is bf16 autocast on CUDA and ignored on
    a CPU, so a run trained on a CPU with ``bf16: true`` and one trained on a GPU with ``bf16: false`` both trained
    in float32; ``cfg`` admits that unless it asks for bf16 on CUDA by name (``auto`` is float32 wherever there is
    no GPU, so the answer does not depend on the machine reading the runs). How the run trained: its
    ``result.json``'s ``train_precision``, else its ``train_device`` with its own ``train.bf16``. An unfinished
    run's is not known: refused."""
    try:
        done = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        old = with_defaults(yaml.safe_load((run_dir / "resolved.yaml").read_text(encoding="utf-8")) or {})
        float32 = (done["train_precision"] == "float32" if "train_precision" in done else
                   not trains_in_bf16(str(done["train_device"]), old["train"]["bf16"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return float32 and not (cfg.train.bf16 and device_type(cfg.train.device) == "cuda")


def _write_json(path: Path, obj) -> None:
    _write_text(path, json.dumps(obj, indent=1, ensure_ascii=False))


def _write_text(path: Path, text: str) -> None:

    atomic_write_text(path, text)


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = [x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _prepare_data(grid: GridConfig, out: Path, log, report_only: bool = False) -> Path:
    """The grid's dataset: its data.path (which must hold one), or prepared from its data.prepare block. The path
    is made absolute without following links, so a ``data-bin`` that links elsewhere is recorded and reported as
    ``data-bin/...`` (:func:`structnmt.experiment.datasets.recorded_path`), not as the place it links to; as in
    the shell, a ``..`` after a link (``data-bin/../x``) is the link's parent, not its target's."""
    if grid.data.path:
        path = Path(os.path.abspath(grid.data.path))
        if not (path / "manifest.json").exists():
            command = prepare_command(grid.source, path.name)
            how = f"prepare it with `{command}` (this grid's header)" if command else "run `structnmt prepare` first"
            raise ConfigError(f"{grid.source}: data.path {path} holds no prepared dataset;"
                              f" {how}, give where it is with grid.data.path=DIR, or give a "
                              "data.prepare block.")
        return path

    spec = dict(grid.data.prepare)
    destdir = Path(os.path.abspath(spec.pop("destdir", None) or out / "data-bin"))
    if report_only and not (destdir / "manifest.json").exists():  # --report-only prepares nothing either
        raise ConfigError(f"{grid.source}: --report-only prepares nothing, and the grid's dataset {destdir} is not "
                          "there; prepare it first (the same command without --report-only prepares it, or "
                          "`structnmt prepare` with the grid's data.prepare), then write the report.")
    missing = [k for k in ("source_lang", "target_lang", "trainpref") if k not in spec]
    if missing:
        raise ConfigError(f"{grid.source}: data.prepare needs {', '.join(missing)} (and usually validpref, testprefs).")
    pcfg = build_dataclass(PrepareConfig, spec, f"{grid.source}: data.prepare")
    prepare(pcfg, destdir, progress=False, log=log)
    return destdir


def _threads_guard(cfg: Config):
    old = torch.get_num_threads()

    set_threads(cfg.train.threads)
    return old


def _score_split(grid: GridConfig, cfg: Config, tr, dcfg, run_dir: Path, split: str, src: list[str],
                 refs: list[str]) -> dict:
    """Translate one dataset split with the averaged model into ``<run>/<split>.hyp`` and score it:
    sacreBLEU BLEU and chrF (with signatures and n-gram precisions), BLEU (lc,tok) where the grid asks."""

    ev = grid.evaluate
    prefix, lang = split_prefix(cfg, split)
    start = time.perf_counter()
    out = tr.translate(src, dcfg, parse_prefix=prefix, parse_lang=lang)
    if tr.device.type == "cuda":
        torch.cuda.synchronize(tr.device)
    seconds = time.perf_counter() - start
    hyps = [h[0].text if h else "" for h in out]
    hyp_file = run_dir / f"{split}.hyp"
    _write_text(hyp_file, "".join(h + "\n" for h in hyps))
    scores = {s.name: s for s in corpus_scores(hyps, refs, lowercase_tokenized=ev.lc_tok, lang=ev.lang)}
    bleu, chrf = scores["BLEU"], scores["chrF"]
    result = {
        "split": split, "n_sentences": len(src), "decode_seconds": seconds,
        "decode_sent_per_s": len(src) / seconds if seconds > 0 else None, "hyp_file": hyp_file.name,
        "bleu": bleu.score, "bleu_signature": bleu.signature, "bleu_detail": bleu.detail,
        "bleu_precisions": bleu.precisions, "chrf": chrf.score, "chrf_signature": chrf.signature,
    }
    if "BLEU (lc,tok)" in scores:
        s = scores["BLEU (lc,tok)"]
        result.update({"bleu_lc_tok": s.score, "bleu_lc_tok_signature": s.signature,
                       "bleu_lc_tok_precisions": s.precisions})
    return result


def _translator(grid: GridConfig, run_dir: Path, workers: int | None = 1):
    """The averaged model of a run (``average.pt``, written from the last checkpoints if absent) and the
    grid's decoding settings; ``workers`` as ``translate --workers`` (None: one process per core for inputs
    of 8 batches or more, when the grid trains one run at a time and so has the machine to itself)."""


    ev = grid.evaluate
    avg = run_dir / "average.pt"
    if not avg.exists():
        average_checkpoints(last_checkpoints(run_dir, ev.average_last), avg)
    tr = Translator(avg, device=ev.device, workers=workers, parse_cache=ev.parse_cache or None)
    dcfg = dataclasses.replace(tr.cfg.decode, beam=ev.beam, lenpen=ev.lenpen, nbest=1)
    if ev.batch_size:
        dcfg.batch_size = ev.batch_size
    return tr, dcfg


def _evaluate_run(grid: GridConfig, cfg: Config, run_dir: Path, splits: dict[str, tuple[list[str], list[str]]],
                  workers: int | None = 1) -> dict:
    """Average the last checkpoints, translate and score the evaluation split (timed) and every extra
    split, translate the grid's other files (``workers``: see :func:`_translator`)."""

    ev = grid.evaluate
    last = load_checkpoint(run_dir / "checkpoint_last.pt")
    run = last["run"]
    n_params = int(last["n_params"])
    paths = last_checkpoints(run_dir, ev.average_last)
    average_checkpoints(paths, run_dir / "average.pt")
    del last
    old_threads = _threads_guard(cfg)
    tr = None
    try:
        try:
            tr, dcfg = _translator(grid, run_dir, workers)
            main = _score_split(grid, cfg, tr, dcfg, run_dir, ev.split, *splits[ev.split])
            main["decode_workers"] = tr.workers_used  # the decoding processes of the timed split
            extra = {name: _score_split(grid, cfg, tr, dcfg, run_dir, name, *splits[name])
                     for name in ev.extra_splits}
        finally:
            use_threads(old_threads)
        return _finish_result(grid, cfg, run_dir, tr, dcfg, main, extra, n_params, paths, run)
    finally:
        if tr is not None:
            tr.close()  # stops its decoding processes, if it started any


def _finish_result(grid: GridConfig, cfg: Config, run_dir: Path, tr, dcfg, main: dict, extra: dict, n_params: int,
                   paths: list[Path], run: dict) -> dict:
    """A run's result.json: its training figures, its scores, and what the grid asks for beyond them (the
    decoding benchmark, the translated and induced files) with ``tr``."""
    ev = grid.evaluate
    # training throughput excludes the time spent validating
    train_seconds = float(run.get("train_seconds", 0.0)) - float(run.get("valid_seconds", 0.0))
    train_device, precision = trained_as(run, cfg)
    result = {
        "n_params": n_params,
        "num_updates": int(run["num_updates"]),
        "train_target_tokens": int(run["tgt_tokens"]),
        "train_seconds": train_seconds,
        "train_tok_per_s": run["tgt_tokens"] / train_seconds if train_seconds > 0 else None,
        "peak_memory_mb": float(run.get("peak_memory_mb", 0.0)),
        "train_device": train_device,
        "train_precision": precision,
        "averaged": [p.name for p in paths],
        "beam": dcfg.beam,
        "lenpen": dcfg.lenpen,
        "decode_device": str(tr.device),
        **main,
    }
    if extra:
        result["splits"] = extra
    if ev.benchmark:
        result["benchmark"] = _evaluate_benchmark(ev.benchmark, tr, dcfg, run_dir)
    if ev.translate:
        result["translated"] = _translate_files(ev.translate, tr, dcfg, run_dir)
    if ev.induce and induces_trees(cfg):
        result["induced"] = _induce_files(ev.induce, run_dir)

    result["hardware"] = hardware()  # the machine that trained and decoded it (a report may be written elsewhere)
    return result


def _complete_run(grid: GridConfig, cfg: Config, run_dir: Path, res: dict,
                  splits: dict[str, tuple[list[str], list[str]]], workers: int | None = 1) -> list[str]:
    """Decode and score the extra splits a finished run has no scores for (a split added to the grid
    after the run finished); ``res`` is updated and rewritten. Returns the splits added."""
    todo = [s for s in grid.evaluate.extra_splits if s not in res.get("splits", {})]
    if not todo:
        return []
    old_threads = _threads_guard(cfg)
    tr = None
    try:
        tr, dcfg = _translator(grid, run_dir, workers)
        for name in todo:
            res.setdefault("splits", {})[name] = _score_split(grid, cfg, tr, dcfg, run_dir, name, *splits[name])
    finally:
        use_threads(old_threads)
        if tr is not None:
            tr.close()
    stored = {k: v for k, v in res.items() if k != "run_dir"}
    _write_json(run_dir / "result.json", stored)
    return todo


def _translate_files(files: list[str], tr, dcfg, run_dir: Path) -> dict[str, str]:
    """Translate every file of ``evaluate.translate`` into ``<run>/<name>.hyp`` (one line per
    input line). A file the model cannot translate (a model that reads pre-parsed trees the
    file does not come with, say) is recorded with the reason instead of stopping the grid."""

    done: dict[str, str] = {}
    for f in files:
        name = Path(f).name
        name = name[:-3] if name.endswith(".gz") else name
        try:
            lines = list(read_lines(f))
            hyps = [h[0].text if h else "" for h in tr.translate(lines, dcfg)]
        except (UserError, ConfigError, CorpusError, OSError) as err:
            done[f] = f"not translated: {err}"
            continue
        (run_dir / f"{name}.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        done[f] = f"{name}.hyp"
    return done


def _induce_files(files: list[str], run_dir: Path) -> dict[str, str]:
    """Trees of every CoNLL-U file of ``evaluate.induce`` from the run's averaged model (``structnmt induce``
    with its defaults); a file that cannot be read is recorded with the reason instead of stopping the grid."""

    done: dict[str, str] = {}
    for f in files:
        stem = Path(f).name.replace(".gz", "").replace(".conllu", "")
        try:
            # induce.json records the checkpoint: relative to the grid's directory, as every record of a run
            written = run_induce(checkpoint=recorded_path(run_dir / "average.pt"), conllu=f,
                                 out_dir=run_dir / "induce" / stem)
        except (UserError, OSError) as err:
            done[f] = f"not induced: {err}"
            continue
        done[f] = str(written[0].relative_to(run_dir))
    return done


def _evaluate_benchmark(directory: str, tr, dcfg, run_dir: Path) -> dict:
    """Translate every evaluation split of a generalization benchmark and score it
    (:func:`structnmt.evaluate.generalization.split_metrics`); per split the summary,
    with the hypotheses in ``bench_<split>.hyp`` and the per-sentence outcomes (for the
    report's paired tests) in ``bench_<split>.json``."""

    seed = json.loads((Path(directory) / "benchmark.json").read_text(encoding="utf-8"))["config"]["seed"]
    summary = {}
    for name in benchmark_splits(directory):
        examples = load_examples(directory, name)
        hyps = [h[0].text if h else "" for h in tr.translate([" ".join(ex.src) for ex in examples], dcfg,
                                                             parse_prefix=str(Path(directory) / name), parse_lang="src")]
        (run_dir / f"bench_{name}.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        metrics = split_metrics(hyps, examples, seed=seed)
        _write_json(run_dir / f"bench_{name}.json", metrics)
        summary[name] = {k: v for k, v in metrics.items() if k != "per_sentence"}
    return summary


def _shown_path(path: str | Path) -> str:
    """A path as the report's command line shows it: an absolute path under the working directory relative to
    it (the report is read on other machines; the command is run from the directory the grid ran in)."""
    p = Path(path)
    if p.is_absolute():
        try:
            return str(p.relative_to(Path.cwd()))
        except ValueError:
            return str(p)
    return str(p)


def _command_line(grid: str | Path, out_dir, overrides: list[str], jobs_at_once: int = 1,
                  report_only: bool = False) -> str:
    """The command that reruns (resumes) this grid from the directory it runs in: the report's **Command** and
    an entry of ``training_commands.json``. It names the plugins the grid imports (``--user-dir``, from
    :func:`structnmt.plugins.user_dirs`, as a checkpoint records them), each relative to the current
    directory as a run's ``data.path`` is recorded (:func:`structnmt.experiment.datasets.recorded_path`)."""

    parts = ["structnmt", "experiment", _shown_path(grid)] + (["--report-only"] if report_only else [])
    if out_dir is not None:
        parts += ["--out", _shown_path(out_dir)]
    if jobs_at_once > 1:
        parts += ["--jobs", str(jobs_at_once)]
    for path in plugins.user_dirs():
        parts += ["--user-dir", recorded_path(path)]
    parts += list(overrides)
    env = [f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES") if k in os.environ]
    return shlex.join(env + parts) if not env else " ".join(env) + " " + shlex.join(parts)


def _training_commands(out: Path, command: str | None) -> list[str]:
    """The commands that trained or decoded runs in ``out`` (``training_commands.json``), with ``command`` added
    (None: a ``--report-only`` adds nothing), so that a report written later names how its runs were made."""

    path = out / "training_commands.json"
    try:
        known = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
        known = [c for c in known if isinstance(c, str)] if isinstance(known, list) else []
    except (OSError, ValueError):
        known = []
    if command is not None and command not in known:
        known.append(command)
        OutputDir(out, "experiment", check=False).write_text("training_commands.json", json.dumps(known, indent=1))
    return known


# --------------------------------------------------------------------------- entry point


class _Say:
    """The runner's log: each line to ``log`` and, time-stamped, to ``experiment.log`` (training threads
    announce their runs too, hence the lock)."""

    def __init__(self, log, log_file: Path):

        self.log, self.log_file, self.lock = log, log_file, threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            self.log(msg)
            with open(self.log_file, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}\n")


@dataclass
class GridPlan:
    """What a grid invocation does: the runs to train, to decode only, already finished, or missing."""

    grid: GridConfig
    out: Path
    data_path: Path
    split_data: dict[str, tuple[list[str], list[str]]]  # split -> (sources, references)
    dirs: dict[str, str]  # row name -> its directory under runs/
    configs: dict[tuple[str, int], Config] = field(default_factory=dict)
    results: dict[tuple[str, int], dict] = field(default_factory=dict)
    to_train: list[tuple[str, int, Path, str]] = field(default_factory=list)  # (row, seed, run_dir, tag)
    to_evaluate: list[tuple[str, int, Path, str]] = field(default_factory=list)
    missing: list[tuple[str, int]] = field(default_factory=list)
    #: runs whose result.json is damaged (also in ``missing``): the sentence naming the file and the fix
    damaged: dict[tuple[str, int], str] = field(default_factory=dict)


def _evaluation_splits(g: GridConfig, data_path: Path) -> dict[str, tuple[list[str], list[str]]]:

    ds = PreparedDataset(data_path)
    split_data: dict[str, tuple[list[str], list[str]]] = {}
    for name, key in [(g.evaluate.split, "split"), *((x, "extra_splits") for x in g.evaluate.extra_splits)]:
        if name not in ds.splits:
            raise ConfigError(f"{g.source}: evaluate.{key} '{name}' is not in {data_path} (splits: "
                              f"{', '.join(ds.splits)}); prepare it with --testpref or pick another split.")
        split = ds.split(name)
        split_data[name] = (split.text("src"), split.text("ref"))
    return split_data


def _run_dirs(g: GridConfig) -> dict[str, str]:
    dirs: dict[str, str] = {}
    for r in g.runs:
        d = slug(r.name)
        while d in dirs.values():
            d += "-x"
        dirs[r.name] = d
    return dirs


def plan_grid(g: GridConfig, out: Path, run_over: list[str], report_only: bool, say) -> GridPlan:
    """Prepare the data and sort every (row, seed) of ``g``: finished (its result read, the splits it
    lacks decoded), trained but not decoded, to train, or (``report_only``) missing. The baseline's
    seeds come first (every row is tested against them, and their spread is the report's noise floor),
    then seed by seed, so that an unfinished grid has every row at its first seeds."""
    data_path = _prepare_data(g, out, say, report_only)
    plan = GridPlan(g, out, data_path, _evaluation_splits(g, data_path), _run_dirs(g))
    fingerprint = dataset_fingerprint(data_path)
    base_run = next(r for r in g.runs if r.name == g.baseline)
    jobs = [(seed, base_run) for seed in g.seeds] + [(seed, r) for seed in g.seeds for r in g.runs if r is not base_run]
    for i, (seed, r) in enumerate(jobs, 1):
        tag = f"[{i}/{len(jobs)}] {r.name} (seed {seed})"
        run_dir = out / "runs" / plan.dirs[r.name] / f"seed{seed}"
        cfg = resolve_run_config(g, r, seed, data_path=data_path, run_dir=run_dir, overrides=run_over)
        plan.configs[(r.name, seed)] = cfg
        _plan_run(plan, (r.name, seed, run_dir, tag), cfg, fingerprint, report_only, say)
    check_evaluation_parser(plan)
    return plan


def check_evaluation_parser(plan: GridPlan) -> None:
    """Refuse before any training when a run still to be decoded reads parses and the dataset's parser cannot
    run here. Its translator parses what it translates (the test splits, the blind files) with the parser the
    data was prepared with; found missing only after training, it would cost the whole training."""

    pending = plan.to_train + plan.to_evaluate
    parser = dataset_parser(plan.data_path)
    if not pending or parser is None or parser.name != "spacy":
        return  # pre-parsed files (file, synthetic) come with the splits; none: nothing to parse
    if plan.grid.evaluate.parse_cache:
        _check_parse_cache(plan, parser)
        return

    if importlib.util.find_spec("spacy") is not None and resolve_pipeline(parser.pipeline):
        return

    ds = PreparedDataset(plan.data_path)
    sizes = (len(ds.src_vocab), len(ds.tgt_vocab))
    readers = [tag for name, seed, _, tag in pending if _reads_parses(plan.configs[(name, seed)], sizes)]
    if readers:
        try:
            SpacyParser(parser)
        except ParserError as err:
            raise ParserError(f"{readers[0]}{f' and {len(readers) - 1} more run(s)' if len(readers) > 1 else ''}: "
                              f"the model reads parses, and after training the runner parses the text it "
                              f"translates with the dataset's parser; {err} Install it before training.") from None


def _check_parse_cache(plan: GridPlan, parser) -> None:
    """evaluate.parse_cache must hold every line the runs will parse (``parser``: the dataset's ParserConfig): the
    splits' sources and the translated files (a line it lacks is refused now, not after training)."""

    ev = plan.grid.evaluate
    texts = [t.strip() for src, _ in plan.split_data.values() for t in src]
    texts += [t.strip() for f in ev.translate for t in read_lines(f)]
    cached_parses(read_parse_cache(ev.parse_cache), f"evaluate.parse_cache {ev.parse_cache}", parser,
                  [t for t in dict.fromkeys(texts) if t])


def _reads_parses(cfg: Config, vocab_sizes: tuple[int, int]) -> bool:
    """Whether a run's model reads structures (its data config asks for some, or one of its mechanisms does)."""
    if cfg.data.structures:
        return True

    return bool(build_model(cfg.model, *vocab_sizes).required_structures())


def run_progress(run_dir: Path, max_updates: int = 0) -> str:
    """How far an unfinished run came, for ``--report-only``: trained to its budget, stopped at an update
    (its metrics.jsonl; ``max_updates`` > 0 gives the budget beside it), or not started."""

    if (run_dir / "train_done.json").exists():
        return "trained, not yet decoded and scored"
    last = max(read_curves(run_dir / "metrics.jsonl")[0], default=None)
    if last is None:
        return "not started"
    return f"trained to update {last:,}" + (f" of {max_updates:,}" if max_updates > 0 else "")


def _plan_run(plan: GridPlan, item: tuple[str, int, Path, str], cfg: Config, fingerprint: str,
              report_only: bool, say) -> None:
    """Sort one (row, seed) into ``plan`` (see :func:`plan_grid`), after checking that a started run
    was started with this configuration on this data."""
    name, seed, run_dir, tag = item
    g, new = plan.grid, record_config(to_dict(cfg))
    resolved, result_path = run_dir / "resolved.yaml", run_dir / "result.json"
    started = result_path.exists() or (run_dir / "checkpoint_last.pt").exists()
    if resolved.exists() and started:
        diff = _config_diff(yaml.safe_load(resolved.read_text(encoding="utf-8")) or {}, new)
        if "data.path" in diff and _same_dataset(run_dir, plan.data_path, fingerprint):  # moved or re-prepared
            diff.remove("data.path")
        if "train.bf16" in diff and _same_precision(run_dir, cfg):  # bf16 acts on CUDA only
            diff.remove("train.bf16")
            if trains_in_bf16(_resolved_device(cfg.train.device), cfg.train.bf16):
                say(f"{tag}: trained in float32 (train.bf16 differs, ignored where it trained); a run this command "
                    "trains here uses bf16 autocast: give train.bf16=false to keep the grid in one precision.")
        if diff:
            raise ExperimentError(
                f"{run_dir}: this run was started with a different configuration ({', '.join(diff[:5])}); "
                "use --out for a new output directory or delete that run directory.")
    dataset = {"fingerprint": fingerprint, "path": recorded_path(plan.data_path), "grid": recorded_path(g.source)}
    if started and not (run_dir / "dataset.json").exists():  # a run from before fingerprints, on this path
        _write_json(run_dir / "dataset.json", dataset)
    if result_path.exists():
        try:
            res = read_result(result_path, g)
        except DamagedResult as err:  # said, and left out: the report of the other runs still comes out
            say(f"{tag}: left out: {err}")
            plan.missing.append((name, seed))
            plan.damaged[(name, seed)] = str(err)
            return
        res["run_dir"] = str(run_dir)  # where it is now (the directory may have been moved or copied)
        if res.get("split", g.evaluate.split) != g.evaluate.split:
            raise ExperimentError(
                f"{run_dir}: this run was scored on split '{res['split']}', the grid now asks for "
                f"'{g.evaluate.split}'; add it to evaluate.extra_splits instead, or use --out for a new "
                "output directory.")
        if resolved.exists():  # the report describes the config the run had (threads may differ)
            plan.configs[(name, seed)] = from_dict(yaml.safe_load(resolved.read_text(encoding="utf-8")),
                                                   where=str(resolved), saved=True)
        if not report_only:  # decoded with the current config: its data.path is where the data is now
            # before any training of this command: the machine is free for translate's default workers
            added = _complete_run(g, cfg, run_dir, res, plan.split_data, workers=None)
            if added:
                say(f"{tag}: finished earlier; decoded and scored the split(s) it lacked: {', '.join(added)}.")
        plan.results[(name, seed)] = res
        say(f"{tag}: finished earlier, skipped ({headline_score(g, res)}).")
    elif report_only:
        plan.missing.append((name, seed))
        say(f"{tag}: no results yet ({run_progress(run_dir, cfg.train.max_updates)}; --report-only trains nothing).")
    else:

        check_dtype_speed(cfg.decode, get_device(g.evaluate.device))  # refused before training, not after it
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_text(resolved, yaml.safe_dump(new, sort_keys=False, allow_unicode=True))
        if not started or not (run_dir / "dataset.json").exists():  # the data this run trains on from here
            _write_json(run_dir / "dataset.json", dataset)
        if (run_dir / "train_done.json").exists():
            say(f"{tag}: training finished earlier; decoding.")
            plan.to_evaluate.append(item)
        else:
            plan.to_train.append(item)


class _Runs:
    """Training (a subprocess per run) and evaluation of the planned runs; ``live`` holds the training
    processes running now, ``stopping`` is set by an interrupt so that no queued run starts."""

    def __init__(self, plan: GridPlan, say, decode_workers: int | None = 1):

        self.plan, self.say = plan, say
        self.decode_workers = decode_workers  # as translate --workers (None: translate's default)
        self.live: set = set()
        self.stopping = threading.Event()

    def train(self, item: tuple[str, int, Path, str]) -> tuple[int, float]:
        _, _, run_dir, tag = item
        if self.stopping.is_set():
            return -1, time.time()
        if (run_dir / "checkpoint_last.pt").exists():

            at = load_checkpoint(run_dir / "checkpoint_last.pt")["run"]["num_updates"]
            self.say(f"{tag}: resuming training from update {at} ({run_dir}).")
        else:
            self.say(f"{tag}: training started ({run_dir}).")
        t0 = time.time()
        if self.stopping.is_set():  # interrupted while the checkpoint was read
            return -1, t0
        return launch_training(run_dir / "resolved.yaml", run_dir / "train.log", live=self.live), t0

    def finish_training(self, item: tuple[str, int, Path, str], rc: int, t0: float) -> None:
        _, _, run_dir, tag = item
        if rc != 0:
            raise ExperimentError(
                f"{tag}: training failed with exit status {rc}; see {run_dir / 'train.log'} "
                f"(last lines: {_tail(run_dir / 'train.log')}); fix it and run the same command to resume.")
        _write_json(run_dir / "train_done.json", {"exit_status": rc, "seconds_this_launch": time.time() - t0})
        self.say(f"{tag}: training done in {time.time() - t0:.0f} s.")

    def evaluate(self, item: tuple[str, int, Path, str]) -> None:
        name, seed, run_dir, tag = item
        t0 = time.time()
        res = _evaluate_run(self.plan.grid, self.plan.configs[(name, seed)], run_dir, self.plan.split_data,
                            workers=self.decode_workers)
        res.update({"name": name, "seed": seed})
        _write_json(run_dir / "result.json", res)  # no run_dir: the record is read where the directory is then
        res["run_dir"] = str(run_dir)
        self.plan.results[(name, seed)] = res
        n = len(self.plan.split_data[self.plan.grid.evaluate.split][0])
        self.say(f"{tag}: {headline_score(self.plan.grid, res)}, chrF {res['chrf']:.2f} after {res['num_updates']} updates "
                 f"(decoded {n} sentences in {time.time() - t0:.0f} s).")


def schedule_runs(runs: _Runs, items: list[tuple[str, int, Path, str]], jobs_at_once: int) -> None:
    """Train ``items``, at most ``jobs_at_once`` at a time, each decoded and scored as soon as it finishes;
    the next training starts once that evaluation is done (with one job at a time nothing shares the
    machine with a run or its decoding). A failed run is said at once and the others go on; the first
    failure is raised at the end. Ctrl-C (or SIGTERM) starts nothing more and stops the running ones
    (they resume from their last checkpoints)."""

    if jobs_at_once > 1:
        runs.say(f"training up to {jobs_at_once} runs at once: they share the machine, so their speed and "
                 "decoding-speed columns are not those of a run alone.")
    queue = list(items)
    failure: Exception | None = None
    with ThreadPoolExecutor(max_workers=max(1, jobs_at_once)) as pool:
        pending: dict = {}
        try:
            while queue or pending:
                while queue and len(pending) < jobs_at_once and not runs.stopping.is_set():
                    item = queue.pop(0)
                    pending[pool.submit(runs.train, item)] = item
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    item = pending.pop(fut)
                    try:
                        rc, t0 = fut.result()
                        runs.finish_training(item, rc, t0)
                        runs.evaluate(item)
                    except Exception as e:  # say it now; the other runs finish (and stay resumable)
                        failure = failure or e
                        runs.say(f"{item[3]}: {type(e).__name__}: {e} (the other runs go on; run the same "
                                 "command again once it is fixed)")
        except KeyboardInterrupt:
            runs.say(f"interrupted: stopping {len(runs.live)} running training(s); run the same command to resume.")
            interrupt_pool(pool, runs.stopping, runs.live)
            raise
    if failure is not None:
        raise failure


def _check_baseline(plan: GridPlan, out: Path) -> None:
    """The report needs the baseline's first seed: without its results (``--report-only`` before it finished) or
    with a damaged record, one sentence saying which, the file and the fix."""
    g, key = plan.grid, (plan.grid.baseline, plan.grid.seeds[0])
    if key in plan.results:
        return
    needs = f"{g.source}: the report needs the results of the baseline '{g.baseline}' (seed {g.seeds[0]})"
    if key in plan.damaged:  # its record is there but cannot be read: not "has none"
        raise ExperimentError(f"{needs}, but {plan.damaged[key]}")
    raise ExperimentError(f"{needs}, which has none in {out}; train it (or restore its result.json) first.")


def _capped_jobs(jobs: int, to_train: int, say) -> int:
    """``--jobs`` capped at the CPUs and at the runs left to train (:func:`structnmt.machine.device.cap_workers`), said
    in one line when capped."""
    if jobs < 2 or not to_train:
        return jobs
    jobs, note = cap_workers(jobs, "experiment: --jobs", [(to_train, f"{to_train} run{'s' if to_train != 1 else ''} "
                                                                     "to train")])
    if note:
        say(note)
    return jobs


def run_grid(grid: str | Path, out_dir: str | Path | None = None, overrides: list[str] | None = None, *,
             jobs_at_once: int = 1, report_only: bool = False, log=print) -> Path:
    """Train, decode and score every (run, seed) of ``grid``; write the report; return results.md.

    ``overrides`` (``key=value``): grid keys such as ``budget.max_updates=200``,
    ``seeds=[1,2]`` or ``evaluate.beam=4`` change the grid (a ``budget.*`` override
    replaces the grid's budget); ``model.*``/``train.*``/``data.*``/``decode.*`` keys
    are applied to every run's config (e.g. ``train.threads=1``).

    ``jobs_at_once`` > 1 trains that many runs at the same time (one subprocess each; give
    each a share of the cores with ``train.threads``); the default trains one after the
    other, so that every run's speed is measured alone.

    ``report_only`` trains and decodes nothing: it writes the report from the runs that have
    results (a grid still running, or one whose runs were trained elsewhere and copied into
    the output directory) and names the missing ones in it.

    The steps: :func:`plan_grid`, the runs decoded only, :func:`schedule_runs`, the report.
    """

    overrides = list(overrides or [])
    g, run_over = load_grid(grid, overrides)
    out = Path(os.path.abspath(out_dir or g.out_dir or Path("experiments") / slug(g.name)))  # links kept
    report_dir(g, out)  # a file of the user's under a report name is refused now, before any training
    out.mkdir(parents=True, exist_ok=True)
    say = _Say(log, out / "experiment.log")
    t_start = time.time()
    command = _command_line(grid, out_dir, overrides, jobs_at_once, report_only)
    say(f"experiment {g.name}: {len(g.runs)} runs x {len(g.seeds)} seeds, budget {g.budget.describe()}; "
        f"output in {out}")
    plan = plan_grid(g, out, run_over, report_only, say)
    # one run at a time has the machine to itself when it is decoded: decode as translate does by default
    # (worker processes for inputs of 8 batches or more); runs trained side by side decode in one process each
    trained_with = _training_commands(out, None if report_only or not (plan.to_train or plan.to_evaluate) else command)
    jobs_at_once = _capped_jobs(jobs_at_once, len(plan.to_train), say)
    runs = _Runs(plan, say, decode_workers=None if jobs_at_once == 1 else 1)
    for item in plan.to_evaluate:
        runs.evaluate(item)
    schedule_runs(runs, plan.to_train, jobs_at_once)
    _check_baseline(plan, out)
    report = write_report(g, out, plan.results, plan.configs, plan.split_data, dirs=plan.dirs, command=command,
                          data_path=Path(recorded_path(plan.data_path)), log=say, missing=plan.missing, damaged=plan.damaged,
                          trained_with=[c for c in trained_with if c != command])
    say(f"experiment {g.name}: report {report} ({time.time() - t_start:.0f} s this invocation).")
    return report
