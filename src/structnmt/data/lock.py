"""A prepared dataset is not rebuilt under a training that reads it.

A training holds a shared ``fcntl.flock`` on the dataset's ``manifest.json`` for its life
(:func:`hold_dataset`); ``structnmt prepare`` takes the exclusive lock before it replaces a
dataset (:func:`claim_dataset`) and is refused while a training holds the shared one. The
kernel drops a lock when its process dies, however it dies.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import UserError


class DatasetInUse(UserError):
    """``prepare`` was asked to rebuild a dataset a live training reads."""


def hold_dataset(data_dir: str | Path):
    """A shared lock on a prepared dataset (its ``manifest.json``) for as long as the returned file is open:
    a training holds it, so that ``structnmt prepare`` does not replace the data under it. Returns None
    for a directory without a manifest (nothing to protect)."""
    manifest = Path(data_dir) / "manifest.json"
    while True:
        try:
            f = open(manifest, "rb")  # noqa: SIM115 (held open for the run's life)
        except OSError:
            return None
        fcntl.flock(f, fcntl.LOCK_SH)
        try:
            if os.fstat(f.fileno()).st_ino == os.stat(manifest).st_ino:
                return f
        except OSError:
            pass
        f.close()  # a prepare replaced the manifest while this waited: lock the new one


def claim_dataset(data_dir: str | Path):
    """An exclusive lock on a prepared dataset before ``prepare`` replaces it (returned open; None when
    the directory has no manifest); :class:`DatasetInUse` when a training holds it."""
    manifest = Path(data_dir) / "manifest.json"
    try:
        f = open(manifest, "rb")  # noqa: SIM115
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise DatasetInUse(f"--destdir {data_dir}: a running training reads this dataset, so it is not rebuilt "
                           "under it; wait for the training to end or prepare into another --destdir.") from None
    return f
