"""What a training resumes from: the newest readable checkpoint of its save_dir, and the
temporary files an interrupted save left behind."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import load_checkpoint
from ..errors import CheckpointError


def resume_state(save_dir: Path, log) -> tuple[Path, dict] | None:
    """The newest loadable checkpoint of ``save_dir`` to resume from, or None for a new run.

    ``checkpoint_last.pt`` first, then the numbered checkpoints, newest first; every
    unreadable file is named in the log, and if none is readable the run stops with a
    :class:`CheckpointError` rather than starting over on top of them.
    """
    numbered = sorted(save_dir.glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]), reverse=True)
    candidates = [p for p in [save_dir / "checkpoint_last.pt", *numbered] if p.exists()]
    bad: list[Path] = []
    for path in candidates:
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            log(f"resume: {err}")
            bad.append(path)
            continue
        if bad:
            log(f"resume: falling back to {path.name} (update {state['run']['num_updates']}) because "
                f"{', '.join(b.name for b in bad)} could not be read.")
        return path, state
    if bad:
        raise CheckpointError(f"{save_dir}: none of its checkpoints can be read ({', '.join(b.name for b in bad)}); "
                              "move them away to start afresh, or use another train.save_dir.")
    return None


def remove_stale_temporaries(save_dir: Path, log) -> None:
    """Delete the ``checkpoint*.pt.tmp`` files of saves that were interrupted (only the
    trainer writes them, and the caller holds the save_dir's lock)."""
    for tmp in sorted(save_dir.glob("checkpoint*.pt.tmp")):
        tmp.unlink()
        log(f"removed {tmp.name}, the temporary file of an interrupted checkpoint save.")
