"""The rows of an experiment grid as trainers, one at a time: what benchmarks/op_counts.py counts and
benchmarks/gpu_check.py times. Each row's config is the runner's (:func:`structnmt.experiment.grid.resolve_run_config`:
the grid's base, the row's config, the grid's overrides, seed 1), trained in a temporary directory that is
removed afterwards; the steps are the first batches of the run's first epoch, so every row sees the same ones."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from structnmt.cli.training import training_hooks
from structnmt.config import Config
from structnmt.experiment.grid import load_grid, resolve_run_config, slug
from structnmt.models.checkpoint import load_model_state
from structnmt.train.trainer import Trainer


def grid_rows(grid_path: str | Path, data: str | Path, overrides: list[str] | None = None,
              names: list[str] | None = None) -> list[tuple[str, Config]]:
    """``(row name, config)`` of the grid's rows (``names``: only these, in the grid's order), seed 1, the
    dataset ``data``; ``overrides`` as on the command line (``train.device=cuda``)."""
    grid, _ = load_grid(grid_path)
    known = [run.name for run in grid.runs]
    missing = [n for n in names or [] if n not in known]
    if missing:
        raise SystemExit(f"{grid_path}: no row named {', '.join(repr(m) for m in missing)}; its rows: "
                         f"{', '.join(repr(k) for k in known)}.")
    work = Path(tempfile.gettempdir()) / "structnmt-grid-rows"
    rows = []
    for run in grid.runs:
        if names and run.name not in names:
            continue
        cfg = resolve_run_config(grid, run, 1, data_path=Path(data).resolve(), run_dir=work / slug(run.name),
                                 overrides=["train.tensorboard=false", "train.validate_bleu=false",
                                            *(overrides or [])])
        rows.append((run.name, cfg))
    return rows


@contextmanager
def row_trainer(cfg: Config, checkpoint: Path | None = None) -> Iterator[Trainer]:
    """A :class:`Trainer` of ``cfg`` saving into a fresh temporary directory (removed on exit), with the model
    weights of ``checkpoint`` when given (a run's checkpoint_N.pt: to measure a step where training is)."""
    save_dir = Path(tempfile.mkdtemp(prefix="structnmt-row-"))
    cfg.train.save_dir = str(save_dir / "run")
    trainer = Trainer(cfg, log=lambda *_: None, hooks=training_hooks(cfg))
    try:
        if checkpoint is not None:
            load_model_state(trainer.model, torch.load(checkpoint, map_location=trainer.device,
                                                       weights_only=False), checkpoint)
        yield trainer
    finally:
        trainer.close()
        shutil.rmtree(save_dir, ignore_errors=True)


def step_groups(trainer: Trainer, count: int) -> list[list[np.ndarray]]:
    """The first ``count`` updates' batch groups of the run's first epoch (``train.update_freq`` batches an
    update, as the trainer groups them; cycled when the epoch is shorter)."""
    order, freq = trainer.batches.epoch_order(1), trainer.cfg.train.update_freq
    return [[order[(i * freq + j) % len(order)] for j in range(freq)] for i in range(count)]
