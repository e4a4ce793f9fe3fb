"""``structnmt train`` as a function: the trainer with the hooks its config asks for.

:class:`structnmt.train.trainer.Trainer` is the training loop alone; what analyses add to a run
(the learning-curve picture, RHE's head roles) are hooks (:mod:`structnmt.train.hooks`) that live
with their analyses. :func:`training_hooks` picks them from the config and :func:`train` runs the
trainer with them, as the command line, the experiment runner and the demo do.
"""

from __future__ import annotations

from .config import Config
from .train.hooks import TrainingHook
from .train.trainer import RunState, Trainer


def training_hooks(cfg: Config) -> list[TrainingHook]:
    """The hooks of a run: its learning-curve picture, and RHE's head roles with ``train.head_roles``."""
    from .analysis.curves import LearningCurveHook
    from .analysis.head_roles import HeadRolesHook

    return [LearningCurveHook(), *([HeadRolesHook()] if cfg.train.head_roles else [])]


def train(cfg: Config, log=print, *, allow_config_change: bool = False) -> RunState:
    """Train ``cfg`` (resuming its save_dir), with :func:`training_hooks`; returns the run state."""
    import torch.distributed as dist

    trainer = Trainer(cfg, log=log, allow_config_change=allow_config_change, hooks=training_hooks(cfg))
    try:
        return trainer.train()
    finally:
        trainer.close()
        if trainer.distributed and dist.is_initialized():
            dist.destroy_process_group()
