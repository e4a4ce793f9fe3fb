"""Commands in child processes, shared by the experiment runner and the tagger's grids: ``structnmt ARGS`` in a
fresh Python process with its output in a log (:func:`launch_cli`), and stopping them cleanly on Ctrl-C
(:func:`interrupt_pool`, :func:`stop_processes`): SIGINT first (a training exits and resumes later from its last
checkpoint), SIGTERM after a grace period."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from ..plugins import user_dirs

#: seconds an interrupted run is given to stop after SIGINT before it is terminated
STOP_GRACE_SECONDS = 30.0


def launch_cli(args: list[str], log_path: Path, live: set | None = None) -> int:
    """Run ``structnmt ARGS`` in a fresh Python process, output appended to ``log_path``;
    returns the exit status. ``live``: a set the running process is kept in (for
    :func:`stop_processes`). Interrupted (Ctrl-C) while waiting, the process is stopped too.

    The process inherits this one's plugins (``STRUCTNMT_USER_DIRS``); its command also names them
    (``--user-dir``, absolute), so that the command line the log begins with reruns it on its own."""
    cmd = [sys.executable, "-m", "structnmt.cli", *args]
    for path in user_dirs():
        cmd += ["--user-dir", path]
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if live is not None:
            live.add(proc)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            stop_processes({proc})
            raise
        finally:
            if live is not None:
                live.discard(proc)


def interrupt_pool(pool, stopping, live: set) -> None:
    """Ctrl-C while a thread pool runs subprocesses: ``stopping`` set (a queued task checks it and starts
    nothing), queued tasks cancelled, the running processes stopped (:func:`stop_processes`)."""
    stopping.set()
    pool.shutdown(wait=False, cancel_futures=True)
    stop_processes(live)


def stop_processes(procs: set) -> None:
    """SIGINT to every running process (a training saves nothing more and exits; it resumes from its last
    checkpoint), then SIGTERM to any still running after :data:`STOP_GRACE_SECONDS`."""
    for p in list(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in list(procs):
        try:
            p.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait()
