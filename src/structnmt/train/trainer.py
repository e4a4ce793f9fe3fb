"""``structnmt train``: the training loop.

Adam with inverse-sqrt warm-up; label-smoothed cross entropy plus every auxiliary
loss the attention mechanisms return; gradient accumulation (``update_freq``);
clipping; bf16 autocast on CUDA; several processes through ``torchrun`` and
DistributedDataParallel (gloo on CPU, NCCL on GPU).

Loss normalisation: the gradient of one update is the sum of the token losses of all
its batches (all accumulation steps, all ranks) divided by their total number of target
tokens, so 2 ranks x 1 batch equals 1 rank x 2 accumulated batches.

Checkpoints (written atomically: temporary file, then ``os.replace``) hold the model,
optimiser, step, epoch and position in the epoch, every RNG state, the config and the
run's bookkeeping; the order of batches is a pure function of ``(seed, epoch)``, so
resuming from ``checkpoint_last.pt`` reproduces the uninterrupted run exactly.

A NaN or infinite loss or gradient skips the update and is counted; more than
``max_consecutive_nonfinite`` in a row stop the run with :class:`TrainingError`.

Safety: a run holds a lock on its save_dir (:mod:`structnmt.train.lock`), so a second
process on the same directory is refused; a resume must keep the saved config except
budget, logging, threads and device (``allow_config_change`` lifts that) and the
vocabulary (checked by the SentencePiece model's hash); an unreadable
``checkpoint_last.pt`` falls back to the newest readable numbered checkpoint
(:mod:`structnmt.train.resume`). A run without any budget is refused.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from .. import plugins
from ..config import Config, ConfigError, to_dict
from ..data.dataset import EpochBatchIterator, PreparedDataset, collate, make_batches
from ..data.lock import hold_dataset
from ..decode.translate import check_decode_cuda_graphs, check_dtype_speed
from ..errors import TrainingError
from ..fileio.files import METRICS_RECORD, TORCH_FILE, OutputDir
from ..machine.cpu_gemm import choose, with_cpu_gemm
from ..machine.device import get_device, set_threads, trains_in_bf16
from ..models import build_model
from ..models.checkpoint import check_same_vocab, load_model_state, vocab_entry
from .cuda_graphs import bucketed, check_cuda_graphs, compiled_step
from .hooks import TrainingHook
from .lock import SaveDirLock
from .loss import label_smoothed_nll
from .resume import remove_stale_temporaries, resumable_changes, resume_state, write_checkpoints
from .schedule import ScheduleError, make_schedule, schedule_warning
from .validation import validation_bleu, validation_loss


@dataclass
class RunState:
    """Bookkeeping saved with every checkpoint."""

    num_updates: int = 0
    epoch: int = 1
    batches_done: int = 0  # batches of this rank consumed in the current epoch
    best_metric: float | None = None
    bad_validations: int = 0  # validations without improvement (early stopping)
    nonfinite_total: int = 0
    nonfinite_consecutive: int = 0
    train_seconds: float = 0.0  # wall-clock of training, validation included
    valid_seconds: float = 0.0  # of which validation
    tgt_tokens: int = 0
    peak_memory_mb: float = 0.0  # peak resident memory of the process (CPU) or allocated GPU memory
    history: list[dict] = field(default_factory=list)
    lr_scale: float = 1.0  # train.lr_schedule halve_on_rise: 0.5 ** (number of rises so far)
    last_valid_nll: float | None = None  # the previous validation's nll (perplexity = exp(nll))
    device: str = ""  # the device the latest launch trained on (cpu, cuda:0, ...): the run's records
    # whether any launch trained under bf16 autocast (train.bf16 on CUDA); None: not known (a checkpoint from before
    # this record, whose earlier launches may have)
    bf16_autocast: bool | None = False


# --------------------------------------------------------------------------- helpers


def rng_state() -> dict:
    """Every generator's state, as plain data and tensors only (a checkpoint loads with ``weights_only``): numpy's
    key array as an int64 tensor."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    st = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st: dict) -> None:
    random.setstate(st["python"])
    name, keys, pos, has_gauss, cached = st["numpy"]  # keys: a tensor, or an ndarray in older checkpoints
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    np.random.set_state((name, keys.astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


#: the files a run writes into its save_dir besides checkpoints and logs (its hooks add theirs, e.g. pictures)
RUN_FILES = ("config.yaml",)


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


class MetricsLog:
    """JSONL metrics (``metrics.jsonl``) and, optionally, TensorBoard scalars."""

    def __init__(self, save_dir: Path, tensorboard: bool, enabled: bool):
        self.enabled = enabled
        self.path = save_dir / "metrics.jsonl"
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(save_dir / "tensorboard"))
            except ImportError:  # tensorboard is a dependency; tolerate minimal installs
                self.tb = None

    def log(self, kind: str, step: int, values: dict) -> None:
        if not self.enabled:
            return
        rec = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def keep_earlier_metrics(path: Path, log) -> Path | None:
    """A run that starts from update 0 (no checkpoint to resume from) beside the ``metrics.jsonl`` of an earlier
    one (stopped before its first checkpoint, or whose checkpoints were removed) starts its own: the earlier file
    is renamed to ``metrics.jsonl.1`` (``.2``, ... the first name free), never removed, and said; the new curve is
    not appended to the old one. Returns the kept file's path (None when there was nothing to keep)."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    n = 1
    while (kept := path.with_name(f"{path.name}.{n}")).exists() or kept.is_symlink():
        n += 1
    os.rename(path, kept)  # never over a file: the name was free
    log(f"train: no checkpoint to resume from, so this run starts at update 0 with a metrics.jsonl of its own; "
        f"the earlier run's is kept as {kept}.")
    return kept


# --------------------------------------------------------------------------- trainer


def budget_text(tc) -> str:
    """The run's budget in words ("8,000 updates or 3 minutes, whichever comes first");
    :class:`TrainingError` when there is none."""
    parts = [f"{tc.max_updates:,} updates" if tc.max_updates else "",
             f"{tc.max_epochs:,} epochs" if tc.max_epochs else "",
             f"{tc.max_time_minutes:g} minutes" if tc.max_time_minutes else "",
             f"{tc.max_target_tokens:,} target tokens" if tc.max_target_tokens else ""]
    parts = [p for p in parts if p]
    if not parts:
        raise TrainingError("the run has no budget (train.max_updates, max_epochs, max_time_minutes and "
                            "max_target_tokens are all 0) and would train forever; set one, e.g. "
                            "train.max_updates=8000.")
    text = " or ".join(parts) + (", whichever comes first" if len(parts) > 1 else "")
    return text + (f"; early stop after {tc.patience} validations without improvement" if tc.patience else "")


def budget_fraction(tc, state: RunState, elapsed: float, epoch_fraction: float) -> float:
    """How far the run is through its budget, in [0, 1]: the largest fraction over the
    budgets that are set (the one that binds first), for the progress bar.

    ``elapsed`` is the training wall-clock in seconds, ``epoch_fraction`` the share of
    the current epoch's batches consumed."""
    fractions = [0.0]
    if tc.max_updates:
        fractions.append(state.num_updates / tc.max_updates)
    if tc.max_epochs:
        fractions.append((state.epoch - 1 + epoch_fraction) / tc.max_epochs)
    if tc.max_time_minutes:
        fractions.append(elapsed / (tc.max_time_minutes * 60))
    if tc.max_target_tokens:
        fractions.append(state.tgt_tokens / tc.max_target_tokens)
    return min(1.0, max(fractions))


class Trainer:
    def __init__(self, cfg: Config, *, log=print, allow_config_change: bool = False,
                 hooks: Sequence[TrainingHook] = ()):
        """``hooks``: what analyses add to the run (:mod:`structnmt.train.hooks`), called in order."""
        self.cfg = cfg
        self.log = log
        self.hooks = list(hooks)
        tc = cfg.train
        self.budget = budget_text(tc)
        try:
            self.schedule = make_schedule(tc)
        except ScheduleError as err:
            raise TrainingError(str(err)) from None
        self.allow_config_change = allow_config_change
        self.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if self.distributed and not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and tc.device != "cpu" else "gloo"
            dist.init_process_group(backend=backend)
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        self.is_main = self.rank == 0
        warning = schedule_warning(tc)
        if warning and self.is_main:
            self.log(f"warning: {warning}")
        self.device = get_device(tc.device)
        if self.device.type == "cuda" and self.distributed:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        if cfg.decode.dtype == "int8" and self.device.type != "cpu":  # refused now, not at the first BLEU validation
            raise ConfigError(f"decode.dtype=int8 decodes on CPUs only (PyTorch's int8 kernels) and this training "
                              f"runs on {self.device}; set decode.dtype=float32 or bfloat16.")
        if tc.validate_bleu or tc.early_stop_metric == "bleu":  # refused now, not at the first BLEU validation

            check_dtype_speed(cfg.decode, self.device)
        set_threads(tc.threads)
        self.save_dir = Path(tc.save_dir)
        if self.save_dir.exists() and not self.save_dir.is_dir():
            raise TrainingError(f"train.save_dir={self.save_dir} is a file; give a directory.")
        self.lock = None
        self.data_lock = None  # shared lock on the dataset's manifest while the run lives
        # the files of the save_dir the run writes besides its checkpoints and logs: a file of the user's under one
        # of these names is refused (a save_dir with a checkpoint or metrics but no manifest is an earlier run's)
        self.outputs = OutputDir(self.save_dir, "train", expect=(*RUN_FILES, *(f for h in self.hooks for f in h.files)),
                                 marker=(("checkpoint_last.pt", TORCH_FILE), ("metrics.jsonl", METRICS_RECORD)))
        if self.is_main:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            self.lock = SaveDirLock(self.save_dir, log)
            remove_stale_temporaries(self.save_dir, log)
        try:
            self._setup(cfg, log)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the save_dir's and the dataset's locks (the run is over)."""
        if self.lock is not None:
            self.lock.release()
        if self.data_lock is not None:
            self.data_lock.close()
            self.data_lock = None

    def _setup(self, cfg: Config, log) -> None:
        tc = cfg.train

        random.seed(tc.seed)
        np.random.seed(tc.seed)
        torch.manual_seed(tc.seed)

        # held before the data is read: `prepare` does not rebuild it under this run, nor while it is being read
        self.data_lock = hold_dataset(cfg.data.path)
        self.data = PreparedDataset(cfg.data.path)
        self._setup_batches(cfg, log)

        syntax = self.data.manifest.get("syntax") or {}
        self.label_ids = {label: i for i, label in enumerate(syntax.get("labels", []))}
        self.vocab_models = vocab_entry(self.data.src_vocab, self.data.tgt_vocab)
        self.model = build_model(cfg.model, len(self.data.src_vocab), len(self.data.tgt_vocab)).to(self.device)
        # the linear layers on the library this CPU runs faster for this model (measured once, cached)
        self.gemm = choose(self.model, "train", cfg.data.max_tokens) if self.device.type == "cpu" else None
        if self.gemm is not None:
            self.model = with_cpu_gemm(self.model, in_place=True, choice=self.gemm)
        self.n_params = param_count(self.model)
        if tc.validate_bleu or tc.early_stop_metric == "bleu":  # refused now, not at the first BLEU validation
            check_decode_cuda_graphs(self.model, cfg.decode)
        # what the collator builds: the config's structures plus what the attention asks for
        self.structures = {**cfg.data.structures, **self.model.required_structures()}
        for hook in self.hooks:
            self.structures.update(hook.required_structures(self))
        # the requests with a feature store (structnmt features) are read from it, memory-mapped; a store made
        # for another dataset or feature code is refused now, before the model is trained
        self.stored: dict[str, Path] = {}
        for split in (self.train_split, self.valid_split):
            if split is not None:
                self.stored.update(split.open_feature_stores(self.structures))
        self.ddp = (torch.nn.parallel.DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            if self.distributed else self.model)
        check_cuda_graphs(cfg, self.device, self.structures)
        # what a training step calls: the model (through DDP), or its CUDA-graph compilation (train.cuda_graphs)
        self.step_model = compiled_step(self.ddp) if tc.cuda_graphs else self.ddp
        groups = self.model.optimizer_groups()
        # fused: one kernel per step over all parameters instead of ~10 small ops per tensor
        # (1.02-1.05x a CPU step, benchmarks/bench_train.py); the same update rule
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for g in groups for p in g["params"])
        self.optimizer = torch.optim.Adam(groups, lr=tc.lr, betas=tc.betas, eps=tc.eps,
                                          weight_decay=tc.weight_decay, fused=fused or None)
        self.state = RunState()
        self.metrics = MetricsLog(self.save_dir, tc.tensorboard, self.is_main)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                         if self.device.type == "cuda" and tc.bf16 else nullcontext())
        found = resume_state(self.save_dir, log if self.is_main else (lambda _msg: None))
        if found is not None:
            path, state = found
            self.load(state, path)
            if self.is_main:
                log(f"resumed from {path} at update {self.state.num_updates} (epoch {self.state.epoch}).")
        elif self.is_main:
            keep_earlier_metrics(self.metrics.path, log)
        self.state.device = str(self.device)  # what trains this run, for its records (structnmt.experiment)
        if trains_in_bf16(self.state.device, tc.bf16):
            self.state.bf16_autocast = True

    def _setup_batches(self, cfg: Config, log) -> None:
        """The train and valid splits, their token-budget batches (pairs longer than the model's positions or
        data.max_len are filtered and counted, never truncated) and the epoch iterator of this rank."""
        tc = cfg.train
        cache = cfg.data.structure_cache_mb
        self.train_split = self.data.split("train", structure_cache_mb=cache)
        self.valid_split = self.data.split("valid", structure_cache_mb=cache) if "valid" in self.data.splits else None
        # a pair (with EOS or BOS) must fit the model's positions as well as data.max_len
        positions = cfg.model.max_positions
        self.max_len = min(cfg.data.max_len, positions) if cfg.data.max_len else positions
        limit = (f"data.max_len={cfg.data.max_len}" if self.max_len == cfg.data.max_len
                 else f"model.max_positions={positions}")
        batches, filtered = make_batches(
            self.train_split.src_lens, self.train_split.tgt_lens, max_tokens=cfg.data.max_tokens,
            max_sentences=cfg.data.max_sentences, max_len=self.max_len, seed=tc.seed)
        if filtered and self.is_main:
            log(f"train: filtered {filtered} of {len(self.train_split)} pairs longer than {limit}.")
        if not batches:
            raise TrainingError(f"{cfg.data.path}: every training pair is longer than {limit}; raise it.")
        self.filtered = filtered
        self.valid_batches: list[np.ndarray] = []
        if self.valid_split is not None:
            self.valid_batches, valid_long = make_batches(
                self.valid_split.src_lens, self.valid_split.tgt_lens, max_tokens=cfg.data.max_tokens,
                max_len=self.max_len, seed=tc.seed)
            if valid_long and self.is_main:
                log(f"valid: {valid_long} of {len(self.valid_split)} pairs are longer than {limit} and left out "
                    "of the validation loss.")
            if not self.valid_batches:
                self.valid_split = None
        self.batches = EpochBatchIterator(batches, seed=tc.seed, rank=self.rank, world_size=self.world)

    # ---------------------------------------------------------------- checkpoints

    def checkpoint_state(self) -> dict:
        files = self.data.manifest["vocab"]
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "config": to_dict(self.cfg),
            "run": to_dict(self.state),
            "rng": rng_state(),
            "vocab": {"src": files["src"]["file"], "tgt": files["tgt"]["file"]},
            "vocab_models": self.vocab_models,
            "data_syntax": {"parser": self.data.manifest["config"].get("parser"),
                            "labels": list(self.label_ids)} if self.data.manifest.get("syntax") else None,
            "n_params": self.n_params,
            "plugins": plugins.loaded(),
        }

    def _peak_memory_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    def save(self, is_best: bool = False) -> None:
        self.state.peak_memory_mb = max(self.state.peak_memory_mb, self._peak_memory_mb())
        if self.is_main:
            write_checkpoints(self.checkpoint_state(), self.save_dir, self.state.num_updates, is_best,
                              self.cfg.train.keep_last)

    def load(self, st: dict, path: Path) -> None:
        """Resume from checkpoint ``st`` (read from ``path``) after checking that it is this run's."""
        changed = resumable_changes(st, self.cfg, path, self.allow_config_change)
        if changed and self.is_main:
            self.log(f"resuming with a changed config (--allow-config-change): {'; '.join(changed)}.")
        check_same_vocab(st, self.data.src_vocab, self.data.tgt_vocab, checkpoint=path, data=self.cfg.data.path)
        load_model_state(self.model, st, path)
        self.optimizer.load_state_dict(st["optimizer"])
        run = dict(st["run"])
        run.setdefault("bf16_autocast", None)  # a checkpoint from before the record: how it trained is not known
        self.state = RunState(**run)
        set_rng_state(st["rng"])

    # ---------------------------------------------------------------- steps

    def _lr(self) -> float:
        return self.schedule.lr(self.state.num_updates + 1, self.state)

    def _all_reduce(self, values: list[float]) -> list[float]:
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def train_step(self, group: list[np.ndarray]) -> dict | None:
        """One update over the batches of ``group``; returns stats, or None if skipped.

        The host reads the device's numbers once a step (the losses, the auxiliary losses and the gradient norm
        together, after clipping): on a GPU every read waits for the kernels launched before it."""
        tc = self.cfg.train
        self.ddp.train()
        batches = [collate(self.train_split, ids, self.structures, self.label_ids) for ids in group]
        local_tokens = sum(b.n_tgt_tokens for b in batches)  # counted on the CPU, before the batches move
        batches = [(bucketed(b, max_len=self.cfg.model.max_positions) if tc.cuda_graphs else b).to(self.device)
                   for b in batches]
        (total_tokens,) = self._all_reduce([float(local_tokens)])
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # label-smoothed loss, nll
        aux_sums: dict[str, torch.Tensor] = {}
        for i, batch in enumerate(batches):
            sync = i == len(batches) - 1
            ctx = self.ddp.no_sync() if (self.distributed and not sync) else nullcontext()
            with ctx:
                with self.autocast:
                    out = self.step_model(batch.src, batch.src_mask, batch.tgt_in, batch.structures)
                loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, tc.label_smoothing)
                objective = loss * (self.world / total_tokens)
                for name, aux in out.aux_losses.items():
                    objective = objective + aux / len(batches)
                    aux_sums[name] = aux_sums.get(name, 0.0) + aux.detach().double() / len(batches)
                objective.backward()
            sums = sums + torch.stack([loss.detach(), nll.detach()]).double()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), tc.clip_norm if tc.clip_norm > 0 else float("inf"))
        loss_sum, nll_sum, grad_norm, *aux = torch.cat(  # the step's one read of the device
            [sums, grad_norm.detach().double().reshape(1), *(v.reshape(1) for v in aux_sums.values())]).tolist()
        aux_totals = dict(zip(aux_sums, aux))
        loss_all, nll_all = self._all_reduce([loss_sum, nll_sum])
        finite = math.isfinite(loss_all) and math.isfinite(grad_norm)
        (finite_all,) = self._all_reduce([1.0 if finite else 0.0])
        if finite_all < self.world:
            self.optimizer.zero_grad(set_to_none=True)
            self.state.nonfinite_total += 1
            self.state.nonfinite_consecutive += 1
            if self.state.nonfinite_consecutive > tc.max_consecutive_nonfinite:
                raise TrainingError(
                    f"{self.state.nonfinite_consecutive} consecutive updates had a NaN or infinite loss or gradient "
                    f"(at update {self.state.num_updates}); lower train.lr, set train.clip_norm, or check the data."
                )
            if self.is_main:
                self.log(f"update {self.state.num_updates + 1}: non-finite loss or gradient, update skipped "
                         f"({self.state.nonfinite_total} so far).")
            return None
        self.state.nonfinite_consecutive = 0
        lr = self._lr()
        for g in self.optimizer.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.num_updates += 1
        return {"loss": loss_all / total_tokens / math.log(2), "nll": nll_all / total_tokens / math.log(2),
                "lr": lr, "gnorm": grad_norm, "tokens": total_tokens,
                **{f"aux_{k}": v for k, v in aux_totals.items()}}

    # ---------------------------------------------------------------- validation

    def validate(self) -> tuple[dict, bool]:
        """Returns (metrics, improved)."""
        tc = self.cfg.train
        start = time.time()
        values = validation_loss(self.model, self.valid_split, self.valid_batches[self.rank :: self.world],
                                 self.structures, self.label_ids, self.device, tc.label_smoothing, self.autocast,
                                 self._all_reduce)
        if tc.validate_bleu or tc.early_stop_metric == "bleu":
            if self.is_main:
                values.update(validation_bleu(self.model, self.valid_split, self.structures, self.label_ids,
                                              self.cfg, self.device, self.data.tgt_vocab))
            if self.distributed:
                obj = [values.get("bleu")]
                dist.broadcast_object_list(obj, src=0)
                values["bleu"] = obj[0]
        if self.is_main:
            for hook in self.hooks:
                hook.on_validation(self)
        self.state.valid_seconds += time.time() - start
        self.schedule.after_validation(values, self.state, self.log if self.is_main else (lambda _msg: None))
        metric = values["bleu"] if tc.early_stop_metric == "bleu" else values["loss"]
        better = (self.state.best_metric is None or
                  (metric > self.state.best_metric if tc.early_stop_metric == "bleu" else metric < self.state.best_metric))
        if better:
            self.state.best_metric = metric
            self.state.bad_validations = 0
        else:
            self.state.bad_validations += 1
        return values, better

    # ---------------------------------------------------------------- loop

    def _stop_reason(self, start_time: float) -> str | None:
        tc = self.cfg.train
        if tc.max_updates and self.state.num_updates >= tc.max_updates:
            return f"reached train.max_updates={tc.max_updates}"
        if tc.max_target_tokens and self.state.tgt_tokens >= tc.max_target_tokens:
            return f"reached train.max_target_tokens={tc.max_target_tokens}"
        if tc.max_epochs and self.state.epoch > tc.max_epochs:
            return f"reached train.max_epochs={tc.max_epochs}"
        if tc.max_time_minutes:
            elapsed = self.state.train_seconds + (time.time() - start_time)
            (elapsed,) = self._all_reduce([elapsed / self.world]) if self.distributed else (elapsed,)
            if elapsed >= tc.max_time_minutes * 60:
                return f"reached train.max_time_minutes={tc.max_time_minutes}"
        if tc.patience and self.state.bad_validations >= tc.patience:
            return f"no improvement of validation {tc.early_stop_metric} in {tc.patience} validations (early stop)"
        return None

    def _precompute_structures(self) -> None:
        """Compute the requests without a feature store for every train and valid sentence before the first
        update (kept up to data.structure_cache_mb), and say where each request comes from."""
        t0 = time.time()
        splits = [sp for sp in (self.train_split, self.valid_split) if sp is not None]
        progress = self.is_main and self.cfg.train.progress
        kept = [(sp, sp.precompute_structures(self.structures, progress=progress)) for sp in splits]
        if self.is_main:
            for line in self._structure_lines(kept, time.time() - t0):
                self.log(line)

    def _structure_lines(self, kept: list[tuple], seconds: float) -> list[str]:
        """The log lines on the structures: read from a store, or computed (``kept``: (split, sentences kept))."""
        lines = [f"structures {key}: read from the feature store {self.stored[key]} (memory-mapped, shared by every "
                 "process; nothing computed)." for key in sorted(self.stored)]
        computed = sorted(set(self.structures) - set(self.stored))
        if not computed:
            return lines
        kept_mb = sum(sp.structures_kept_mb for sp, _ in kept)
        head = (f"structures {', '.join(computed)}: no feature store (`structnmt features --data {self.cfg.data.path} "
                "...` makes one); ")
        if all(n == len(sp) for sp, n in kept):
            return [*lines, f"{head}computed for every sentence in {seconds:.1f} s ({kept_mb:.1f} MB kept)."]
        lines += [f"structures: data.structure_cache_mb={self.cfg.data.structure_cache_mb:g} holds {n:,} of "
                  f"{len(sp):,} {sp.split} sentences; the others are computed per batch (raise it to keep all)."
                  for sp, n in kept if n < len(sp)]
        done = ", ".join(f"{n:,} of {len(sp):,} {sp.split}" for sp, n in kept)
        return [*lines, f"{head}computed and kept for {done} sentences in {seconds:.1f} s ({kept_mb:.1f} MB); the "
                        "others are computed in every batch that holds them."]

    def train(self) -> RunState:
        tc = self.cfg.train
        if self.is_main:
            self.log(f"model: {self.cfg.model.family}, {self.n_params:,} parameters; {len(self.train_split):,} training "
                     f"pairs in {len(self.batches.batches):,} batches; device {self.device}, {self.world} process(es)"
                     + (f"; linear layers on {self.gemm.why}." if self.gemm is not None else "."))
            self.log(f"budget: {self.budget}.")
            self.outputs.write_text("config.yaml", __import__("yaml").safe_dump(to_dict(self.cfg), sort_keys=False))
        if self.structures:  # structures are data: computed once, before the first update
            self._precompute_structures()
        bar = None
        if self.is_main and tc.progress:
            # progress against whichever budget binds first (updates, epochs, time or tokens)
            bar = tqdm(total=100.0, desc="train", mininterval=2.0, dynamic_ncols=True,
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
        seg_start = time.time()
        reason = self._stop_reason(seg_start)
        window_tokens, window_start, window_loss = 0, time.time(), 0.0
        shown_train = ""  # the last logged training statistics (progress bar or log line)
        while reason is None:
            order = self.batches.epoch_order(self.state.epoch)
            while self.state.batches_done < len(order) and reason is None:
                group = order[self.state.batches_done : self.state.batches_done + tc.update_freq]
                self.state.batches_done += len(group)
                stats = self.train_step(group)
                if stats is None:
                    continue
                self.state.tgt_tokens += int(stats["tokens"])
                window_tokens += int(stats["tokens"])
                window_loss += stats["loss"] * stats["tokens"]
                n = self.state.num_updates
                if n % tc.log_interval == 0 or n == 1:
                    now = time.time()
                    stats["tok_per_s"] = window_tokens / max(now - window_start, 1e-9)
                    stats["loss"] = window_loss / window_tokens  # mean over the updates since the last log
                    window_tokens, window_start, window_loss = 0, now, 0.0
                    self.metrics.log("train", n, {k: v for k, v in stats.items() if k != "tokens"})
                    shown_train = (f"loss {stats['loss']:.3f}, lr {stats['lr']:.2e}, "
                                   f"{stats['tok_per_s']:,.0f} tok/s")
                    if bar is None and self.is_main:  # no bar (--no-progress, logs): one line per interval
                        self.log(f"update {n}: {shown_train}, gnorm {stats.get('gnorm', float('nan')):.3f}")
                if bar is not None:
                    elapsed = self.state.train_seconds + time.time() - seg_start
                    done = 100 * budget_fraction(tc, self.state, elapsed, self.state.batches_done / len(order))
                    bar.set_postfix_str(f"upd {n}, {shown_train}" if shown_train else f"upd {n}", refresh=False)
                    bar.update(max(0.0, done - bar.n))
                reason = self._stop_reason(seg_start)
                validate_now = self.valid_split is not None and (
                    n % tc.validate_interval_updates == 0 or reason is not None)
                improved = False
                if validate_now:
                    values, improved = self.validate()
                    self.state.history.append({"step": n, **values})
                    self.metrics.log("valid", n, values)
                    if self.is_main:
                        shown = ", ".join(f"{k} {v:.3f}" for k, v in values.items())
                        self.log(f"valid @ {n}: {shown}{' (best)' if improved else ''}")
                    reason = self._stop_reason(seg_start)
                if n % tc.save_interval_updates == 0 or reason is not None or improved:
                    self.state.train_seconds += time.time() - seg_start
                    self.save(is_best=improved)
                    seg_start = time.time()  # checkpoint writing is not training time
            if self.state.batches_done >= len(order):
                self.state.epoch += 1
                self.state.batches_done = 0
                reason = reason or self._stop_reason(seg_start)
        if bar is not None:
            bar.close()
        if self.is_main:
            for hook in self.hooks:
                hook.on_end(self)
            self.log(f"training stopped: {reason}; {self.state.num_updates} updates, "
                     f"{self.state.nonfinite_total} skipped non-finite, {self.state.train_seconds:.0f} s.")
        self.metrics.close()
        if self.distributed:
            dist.barrier()
        return self.state
