"""``structnmt train`` as a function: the trainer with the hooks its config asks for.

:class:`structnmt.train.trainer.Trainer` is the training loop alone; what analyses add to a run
(the learning-curve picture, RHE's head roles) are hooks (:mod:`structnmt.train.hooks`) that live
with their analyses. :func:`training_hooks` picks them from the config and :func:`train` runs the
trainer with them, as the command line, the experiment runner and the demo do.
"""

from __future__ import annotations

import torch.distributed as dist

from ..analysis.curves import LearningCurveHook
from ..analysis.head_roles import HeadRolesHook
from ..config import Config
from ..nn import matrix_tree
from ..train.hooks import TrainingHook
from ..train.trainer import RunState, Trainer


class MatrixTreeHook(TrainingHook):
    """At every validation, how many sentences' matrix-tree marginals (SA-NMT, the ``structured``
    mechanism) were computed since the last one, and how many of them needed the exact elimination
    path or the tempered last resort (:data:`structnmt.nn.matrix_tree.STATS`), as a ``matrix_tree``
    record of metrics.jsonl; nothing for a model without matrix-tree attention."""

    def on_validation(self, trainer) -> None:

        counts = dict(matrix_tree.STATS)
        for key in matrix_tree.STATS:
            matrix_tree.STATS[key] = 0
        if counts["sentences"]:
            trainer.metrics.log("matrix_tree", trainer.state.num_updates, counts)


def training_hooks(cfg: Config) -> list[TrainingHook]:
    """The hooks of a run: its learning-curve picture, the matrix-tree path counts, and RHE's head roles
    with ``train.head_roles``."""

    return [LearningCurveHook(), MatrixTreeHook(), *([HeadRolesHook()] if cfg.train.head_roles else [])]


def train(cfg: Config, log=print, *, allow_config_change: bool = False) -> RunState:
    """Train ``cfg`` (resuming its save_dir), with :func:`training_hooks`; returns the run state."""
    trainer = Trainer(cfg, log=log, allow_config_change=allow_config_change, hooks=training_hooks(cfg))
    try:
        return trainer.train()
    finally:
        trainer.close()
        if trainer.distributed and dist.is_initialized():
            dist.destroy_process_group()
