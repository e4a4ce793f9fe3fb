"""The one base class of errors a user can cause (bad input, bad options, bad files).

Every such error is a single sentence naming the file (and line) or the option, and the
fix. The command line prints it as ``structnmt: error: ...`` and exits with status 2,
without a traceback; ``structnmt --debug ...`` shows the traceback as well. Anything
else that escapes a command is a bug and keeps its traceback.

The specific classes (:class:`~structnmt.config.ConfigError`,
:class:`~structnmt.data.corpus.CorpusError`, :class:`CheckpointError`, ...) derive from
:class:`UserError`, so the command line needs to know only this one.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix: one sentence naming the place and the fix."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: not a file, not a checkpoint, corrupt, or made
    for another vocabulary or model."""
