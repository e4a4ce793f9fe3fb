"""What an analysis adds to a training run, without a branch in the trainer.

A :class:`TrainingHook` is called by :class:`~structnmt.train.trainer.Trainer` at three points:
when the run is set up (the structures it needs in every batch, checks of the data), after every
validation, and when the run ends. It reads the trainer's documented attributes (``cfg``,
``model``, ``valid_split``, ``structures``, ``label_ids``, ``device``, ``state``, ``save_dir``,
``outputs``, ``log``, ``is_main``) and writes its files through ``trainer.outputs`` (declared in
``files``, so that a user's file under such a name is refused before the run starts).

The hooks of the package (the learning-curve picture, RHE's head roles) live beside their
analyses (:mod:`structnmt.analysis.curves`, :mod:`structnmt.analysis.head_roles`) and are
chosen from the config by :func:`structnmt.cli.training.training_hooks`.
"""

from __future__ import annotations

from typing import Any


class TrainingHook:
    """The hook protocol; every method has a default that does nothing."""

    #: files the hook writes in the save_dir
    files: tuple[str, ...] = ()

    def required_structures(self, trainer: Any) -> dict:
        """Structures every batch must hold for this hook (``{key: StructureSpec}``); none by default.
        May refuse a run whose data cannot give them (a :class:`~structnmt.errors.UserError`)."""
        return {}

    def on_validation(self, trainer: Any) -> None:
        """After each validation, in the main process."""

    def on_end(self, trainer: Any) -> None:
        """When the run stops, in the main process."""
