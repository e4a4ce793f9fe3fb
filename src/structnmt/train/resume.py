"""What a training writes to resume from and resumes from: its checkpoints (written atomically, the
oldest numbered ones removed), the newest readable one of its save_dir, the checks that a
checkpoint belongs to this run, and the temporary files an interrupted save left behind."""

from __future__ import annotations

from pathlib import Path

from ..config import Config, to_dict, with_defaults
from ..errors import CheckpointError, TrainingError
from ..fileio.files import atomic_save as save
from ..models.checkpoint import load_checkpoint
from .lock import config_changes


def resume_state(save_dir: Path, log) -> tuple[Path, dict] | None:
    """The newest loadable checkpoint of ``save_dir`` to resume from, or None for a new run.

    ``checkpoint_last.pt`` first, then the numbered checkpoints, newest first; every
    unreadable file is named in the log, and if none is readable the run stops with a
    :class:`CheckpointError` rather than starting over on top of them.
    """
    numbered = sorted(save_dir.glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]), reverse=True)
    candidates = [p for p in [save_dir / "checkpoint_last.pt", *numbered] if p.exists()]
    bad: list[Path] = []
    first_reason = ""
    for path in candidates:
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            log(f"resume: {err}")
            bad.append(path)
            first_reason = first_reason or str(err).removeprefix(f"{path}: ")
            continue
        if bad:
            log(f"resume: falling back to {path.name} (update {state['run']['num_updates']}) because "
                f"{', '.join(b.name for b in bad)} could not be read.")
        return path, state
    if bad:
        raise CheckpointError(f"{save_dir}: none of its checkpoints can be read ({', '.join(b.name for b in bad)}; "
                              f"{bad[0].name}: {first_reason.rstrip('.')}); move them away to start afresh, or use "
                              "another train.save_dir.")
    return None


def remove_stale_temporaries(save_dir: Path, log) -> None:
    """Delete the ``checkpoint*.pt.tmp`` files of saves that were interrupted (only the
    trainer writes them, and the caller holds the save_dir's lock)."""
    for tmp in sorted(save_dir.glob("checkpoint*.pt.tmp")):
        tmp.unlink()
        log(f"removed {tmp.name}, the temporary file of an interrupted checkpoint save.")


def atomic_save(obj, path: Path) -> None:
    """``obj`` to ``path`` through ``<path>.tmp`` (removed on failure; a killed save's is removed at the next
    start); a full disk is an ``OSError`` naming ``path``."""

    save(obj, path, tmp=path.with_name(path.name + ".tmp"))


def write_checkpoints(st: dict, save_dir: Path, update: int, is_best: bool, keep_last: int) -> None:
    """``checkpoint_<update>.pt``, ``checkpoint_last.pt`` (and ``checkpoint_best.pt``), each written
    atomically; only the newest ``keep_last`` numbered checkpoints are kept."""
    atomic_save(st, save_dir / f"checkpoint_{update}.pt")
    atomic_save(st, save_dir / "checkpoint_last.pt")
    if is_best:
        atomic_save(st, save_dir / "checkpoint_best.pt")
    numbered = sorted(save_dir.glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    for old in numbered[: max(0, len(numbered) - keep_last)]:
        old.unlink()


def resumable_changes(st: dict, cfg: Config, path: Path, allow_config_change: bool) -> list[str]:
    """What ``cfg`` changes in the config of checkpoint ``st`` (read from ``path``): a changed model is
    refused, any other change needs ``allow_config_change`` (the budget, logging and the other
    :data:`~structnmt.train.lock.RESUMABLE_KEYS` pass freely). Returns the changes allowed."""
    saved = with_defaults(st["config"])  # options added since the checkpoint was written: their defaults
    if saved["model"] != to_dict(cfg.model):
        changed = config_changes({"model": saved["model"]}, {"model": to_dict(cfg.model)})
        raise TrainingError(f"{path}: its model config differs from this run's ({'; '.join(changed[:4])}); use a "
                            "new train.save_dir or the same model settings.")
    changed = config_changes(saved, to_dict(cfg))
    if changed and not allow_config_change:
        raise TrainingError(
            f"{path}: this run's config differs from the one it would resume ({'; '.join(changed[:6])}"
            f"{'; ...' if len(changed) > 6 else ''}); use a new train.save_dir, the same settings, or "
            "--allow-config-change to resume with them.")
    return changed
