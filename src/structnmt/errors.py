"""The one base class of errors a user can cause (bad input, bad options, bad files).

Every such error is a single sentence naming the file (and line) or the option, and the
fix. The command line prints it as ``structnmt: error: ...`` and exits with status 2,
without a traceback; ``structnmt --debug ...`` shows the traceback as well. Anything
else that escapes a command is a bug and keeps its traceback.

The specific classes (:class:`~structnmt.config.ConfigError`,
:class:`~structnmt.fileio.corpus.CorpusError`, :class:`CheckpointError`, ...) derive from
:class:`UserError`, so the command line needs to know only this one.
"""

from __future__ import annotations

import errno
import os


class UserError(Exception):
    """An error the user can fix: one sentence naming the place and the fix."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: not a file, not a checkpoint, corrupt, or made
    for another vocabulary or model."""


class TrainingError(UserError, RuntimeError):
    """A training run cannot start or continue (a config it cannot resume, repeated non-finite losses)."""


class NoNewFilesError(FileNotFoundError):
    """Creating a file failed with ENOENT in a directory that exists: one that takes no new files
    (``/proc``, ``/sys``). ``filename`` is the output the user gave, ``directory`` the one refusing."""

    def __init__(self, output: str, directory: str):

        super().__init__(errno.ENOENT, os.strerror(errno.ENOENT), output)
        self.directory = directory


def os_error_sentence(err: OSError) -> str:
    """One sentence for a file-system fault a user can cause or fix: the path, what is wrong, the fix.

    Read-only file systems, a full disk, permissions, a path that is a file where a directory is
    needed (or the reverse) and missing parents are named as such; any other ``OSError`` keeps the
    system's wording after the path."""

    path = err.filename if err.filename is not None else ""
    if err.filename2 is not None:
        path = f"{path} -> {err.filename2}"
    fixes = {
        errno.EROFS: "the file system is read-only; write the output somewhere writable (--output, --out, --destdir "
                     "or train.save_dir)",
        errno.ENOSPC: "no space left on the device; free some space or write the output to another disk, then run "
                      "the same command again",
        errno.EDQUOT: "the disk quota is exceeded; free some space or write elsewhere, then run the same command again",
        errno.EACCES: "permission denied; choose a path you may write (or read), or change its permissions",
        errno.EPERM: "operation not permitted; choose a path you may write (or read), or change its permissions",
        errno.ENOTDIR: "a part of this path is a file, not a directory; give a path whose parents are directories",
        errno.EISDIR: "this is a directory where a file is expected; give a file path",
        errno.ENOENT: "no such file or directory; check the path (its parent directory must exist)",
        errno.EEXIST: "this path exists already; remove it or give another path",
        errno.ENAMETOOLONG: "the file name is too long for the file system; give a shorter path",
        errno.EMFILE: "too many open files; raise the limit (ulimit -n) or use fewer worker processes",
    }
    if err.errno == errno.EEXIST and err.filename is not None and not os.path.isdir(err.filename):
        # mkdir of a directory whose name a file already has (a parent of an output, or --out itself)
        fixes[errno.EEXIST] = ("this is a file where a directory is needed; give a path whose parents are directories, "
                               "or move the file away")
    if isinstance(err, NoNewFilesError):
        fixes[errno.ENOENT] = (f"no file can be made in {err.directory}, a directory that takes no new files (like "
                               "/proc or /sys); write the output somewhere else")
    what = fixes.get(err.errno or 0, (err.strerror or str(err)).rstrip(".").lower() if err.strerror else str(err))
    return f"{path}: {what}." if path else f"{what[0].upper()}{what[1:]}."
