"""One training process per ``save_dir``: an advisory lock, and what a resume may change.

:class:`SaveDirLock` holds ``fcntl.flock`` on ``<save_dir>/train.lock`` for the life of a
run. The kernel drops the lock when its process dies, however it dies, so the lock of a
killed run is never in the way: the next run takes it and says that it replaced the
stale lock of the dead process (whose pid the file still names). A second process on
a live run's directory is refused with the other's pid.

:func:`config_changes` lists what a resumed run changes in the saved config; only the
budget, logging, threads, device and memory or batch knobs that leave the results alone
(:data:`RESUMABLE_KEYS`) may change without
``--allow-config-change``.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from pathlib import Path

from ..errors import UserError

#: config keys a resume may change: the budget, logging, and the hardware it runs on
RESUMABLE_KEYS = frozenset({
    "train.max_updates", "train.max_epochs", "train.max_time_minutes", "train.max_target_tokens", "train.patience",
    "train.log_interval", "train.tensorboard", "train.progress", "train.head_roles", "train.head_roles_sentences",
    "train.threads", "train.device", "train.cuda_graphs", "train.save_dir", "data.structure_cache_mb",
    "decode.batch_size", "decode.cuda_graphs",
})


class SaveDirBusy(UserError):
    """Another live process trains in this save_dir."""


class SaveDirLock:
    """Exclusive lock on a save_dir for one training process (see the module docstring)."""

    NAME = "train.lock"

    def __init__(self, save_dir: Path, log=print):
        self.path = save_dir / self.NAME
        self._file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "another process"
            self._file.close()
            raise SaveDirBusy(f"{save_dir} is in use by a running training process ({holder}); wait for it to "
                              "finish or stop it, or give this run another train.save_dir.") from None
        self._file.seek(0)
        previous = self._file.read().strip()
        if previous and not re.fullmatch(r"pid \d+ on .*, since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", previous):
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            raise UserError(f"{self.path}: exists and is not a training's lock file (it holds other text), so "
                            "`structnmt train` does not replace it; move it away or give another train.save_dir.")
        if previous:
            log(f"{save_dir}: replaced the stale lock of a training process that is no longer running ({previous}).")
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        self._file.flush()

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._file.closed:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


def _flatten(data, prefix: str = "") -> dict[str, object]:
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): data}


def config_changes(saved: dict, current: dict) -> list[str]:
    """Dotted keys whose values differ between two plain configs, other than
    :data:`RESUMABLE_KEYS`, each as ``key: old -> new``."""
    a, b = _flatten(saved), _flatten(current)
    changed = []
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE_KEYS or a.get(key) == b.get(key):
            continue
        # tuples become lists in a saved config: compare as lists
        if isinstance(a.get(key), (list, tuple)) and isinstance(b.get(key), (list, tuple)) \
                and list(a[key]) == list(b[key]):
            continue
        changed.append(f"{key}: {a.get(key, '(absent)')!r} -> {b.get(key, '(absent)')!r}")
    return changed
