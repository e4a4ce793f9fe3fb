"""A split of a corpus in contiguous parts (shards) encoded by parallel processes (``prepare --workers``).

Three steps, each usable alone:

* :func:`plan_shards` reads each file once, fast, decoding and parsing nothing: the source file for its
  non-empty lines (one tree belongs to each), the target file for its line count, and the pre-parsed
  tree files for where each shard's first tree begins (:func:`structnmt.syntax.io.tree_positions`). Files
  whose counts disagree are refused there, before any process starts, with the sentence a single pass
  gives. Each :class:`Shard` then knows where it begins in every file and how many lines it holds; its
  process reads only those and numbers lines as in the whole file, so its errors name the file's line.
* :func:`run_shards` runs one spawned process per shard (spawn, not fork: safe beside torch's threads).
  Each writes its files into its own directory and its result, or the error its input caused, into a
  file there, so that nothing large goes through a pipe. The parent reports their progress, returns the
  results in order, and raises the error of the earliest failing shard (the one a single pass meets
  first), stopping the shards after it; a process that dies without a word (killed, out of memory) is
  named with its file and lines.
* :func:`merge_shard_files` concatenates the shards' files in order, the offset files (``*.idx``: int64
  offsets with a leading 0) shifted by what comes before: the bytes one pass would have written.
"""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import UserError
from ..fileio.corpus import CorpusError, LinePosition, is_blank, line_count_error, raw_lines
from ..syntax.io import tree_positions
from ..syntax.parsers import TreeStart, tree_count_error

#: the file a shard's process leaves its result in, and the one it leaves its input's error in
RESULT, ERROR = "result.pickle", "error.pickle"

#: the format of each kind of pre-parsed file
_TREE_FORMATS = {"dependency": "conllu", "constituency": "ptb"}


@dataclass(frozen=True)
class Shard:
    """A contiguous run of lines of a split's source and target files, encoded by one process.

    The default is a whole split read in one pass (nothing planned: the readers' own checks apply)."""

    index: int = 0
    src: LinePosition = LinePosition()  # where it begins in the source file
    tgt: LinePosition = LinePosition()  # where it begins in the target file (the same line)
    lines: int | None = None  # how many lines it holds (None: not counted, a whole split)
    last: bool = True  # it runs to the end of the files: read to their end (their line counts checked)
    trees: TreeStart | None = None  # where it begins in the pre-parsed files (None: at their start)

    @property
    def count(self) -> int | None:
        """How many lines to read: None (to the end of the files) for the last shard."""
        return None if self.last else self.lines

    def place(self, path: Path) -> str:
        """Its lines in ``path``, as an error names them."""
        if self.lines is None:
            return f"{path}"
        return f"{path}, lines {self.src.line:,}-{self.src.line + self.lines - 1:,}"


@dataclass
class _Marks:
    """The positions of every ``stride``-th non-empty source line (by its index among them). Past
    ``2 * keep`` marks every other one goes and the stride doubles: memory stays bounded whatever the
    corpus, and shards begin within ``stride`` non-empty lines of an even split."""

    stride: int
    keep: int = 4096
    found: dict[int, LinePosition] = field(default_factory=dict)

    def add(self, index: int, offset: int, line: int) -> None:
        """Mark the non-empty line ``index`` (0-based), at ``offset`` and ``line``, if it falls on the stride."""
        if index % self.stride:
            return
        self.found[index] = LinePosition(offset, line)
        if len(self.found) > 2 * self.keep:
            self.stride *= 2
            self.found = {i: p for i, p in self.found.items() if i % self.stride == 0}


def plan_shards(src: Path, tgt: Path, parts: int, *, grain: int = 1,
                tree_files: dict[str, Path] | None = None) -> list[Shard]:
    """Up to ``parts`` shards of about as many non-empty source lines each, every one beginning at a
    multiple of ``grain`` of them (a parser's batch); one whole :class:`Shard` when ``parts`` is 1 or the
    split is too small. ``tree_files``: the pre-parsed files (``"dependency"`` CoNLL-U, ``"constituency"``
    brackets), one tree per non-empty source line. Raises the error of a single pass when the target's line
    count or a tree file's tree count does not match the source."""
    if parts <= 1:
        return [Shard()]
    marks, lines, nonempty = _scan_source(src, grain)
    cuts = _cuts(marks, nonempty, parts)
    tgt_at, tgt_lines = _line_positions(tgt, [at.line for _, at in cuts])
    if tgt_lines != lines:
        raise line_count_error(src, lines, tgt, tgt_lines)
    trees = {}
    for kind, path in (tree_files or {}).items():
        found, count = tree_positions(path, _TREE_FORMATS[kind], [index for index, _ in cuts])
        if count != nonempty:
            raise tree_count_error(path, count, nonempty)
        trees[kind] = found
    if not cuts:
        return [Shard()]
    starts = [(0, LinePosition(), LinePosition()), *((i, at, tgt_at[at.line]) for i, at in cuts)]
    shards = []
    for k, (index, src_at, tgt_start) in enumerate(starts):
        last = k == len(starts) - 1
        end = lines + 1 if last else starts[k + 1][1].line
        positions = {kind: found[index] for kind, found in trees.items()} if index else {}
        shards.append(Shard(k, src_at, tgt_start, end - src_at.line, last,
                            TreeStart(index, positions, last) if trees else None))
    return shards


def _scan_source(path: Path, grain: int) -> tuple[_Marks, int, int]:
    """The marks of the non-empty lines of ``path`` (a stride of a multiple of ``grain``), its line count
    and its count of non-empty lines."""
    marks = _Marks(stride=max(1, grain))
    offset = lines = nonempty = 0
    for raw in raw_lines(path):
        lines += 1
        if not is_blank(raw, lines == 1):
            marks.add(nonempty, offset, lines)
            nonempty += 1
        offset += len(raw)
    return marks, lines, nonempty


def _cuts(marks: _Marks, nonempty: int, parts: int) -> list[tuple[int, LinePosition]]:
    """Where shards 1, 2, ... begin: (index among the non-empty lines, position) of the marks nearest an
    even split, each once, in order."""
    cuts: list[tuple[int, LinePosition]] = []
    for k in range(1, parts):
        index = round(k * nonempty / parts / marks.stride) * marks.stride
        if 0 < index < nonempty and (not cuts or cuts[-1][0] < index):
            cuts.append((index, marks.found[index]))
    return cuts


def _line_positions(path: Path, wanted: list[int]) -> tuple[dict[int, LinePosition], int]:
    """The positions of the lines ``wanted`` (1-based numbers) of ``path``, and its line count."""
    wanted_set = set(wanted)
    found = {}
    offset = lines = 0
    for raw in raw_lines(path):
        lines += 1
        if lines in wanted_set:
            found[lines] = LinePosition(offset, lines)
        offset += len(raw)
    return found, lines


# ---------------------------------------------------------------------------- running


def run_shards(target: Callable[[Any, Callable[[int], None]], Any], jobs: Sequence, outs: Sequence[Path],
               places: Sequence[str], *, advance: Callable[[int], None]) -> list:
    """``target(job, advance)`` for every job, each in its own spawned process writing into its directory
    ``outs[k]``; their results, in order. ``target`` is a module-level function returning a picklable
    result; it calls ``advance(n)`` as it gets through ``n`` pairs, and the parent passes the totals on to
    ``advance``. ``places``: each job's file and lines, for the sentence about a process that dies.

    Every process is stopped before this returns or raises (Ctrl-C included)."""
    ctx = multiprocessing.get_context("spawn")
    # one count per process, each written by its process alone: no lock that a killed process could keep
    done = ctx.Array("q", len(jobs), lock=False)
    procs = [ctx.Process(target=_shard_main, args=(target, job, out, done, k), daemon=True,
                         name=f"prepare shard {k}") for k, (job, out) in enumerate(zip(jobs, outs))]
    try:
        for p in procs:
            p.start()
        return _results_in_order(procs, outs, places, done, advance)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            if p.pid is not None:
                p.join()


def _results_in_order(procs: list, outs: Sequence[Path], places: Sequence[str], done,
                      advance: Callable[[int], None]) -> list:
    """Wait for the processes; their results in order, or the error of the earliest one that failed
    (the shards after it are stopped as soon as it is known, those before it are waited for)."""
    outcomes: dict[int, tuple[Any, BaseException | None]] = {}
    reported = 0
    while True:
        failed = min((k for k, (_, err) in outcomes.items() if err is not None), default=len(procs))
        for p in procs[failed + 1:]:
            if p.is_alive():
                p.terminate()
        waiting = [k for k in range(failed) if k not in outcomes]
        if not waiting:
            break
        wait([procs[k].sentinel for k in waiting], timeout=1.0)
        reported = _pass_on(done, reported, advance)
        for k in waiting:
            if procs[k].exitcode is not None:
                outcomes[k] = _outcome(procs[k].exitcode, outs[k], places[k])
    if failed < len(procs):
        raise outcomes[failed][1]
    _pass_on(done, reported, advance)
    return [outcomes[k][0] for k in range(len(procs))]


def _pass_on(done, reported: int, advance: Callable[[int], None]) -> int:
    """Give ``advance`` the pairs the processes got through (``done``, one count each) since ``reported``;
    the new total."""
    total = sum(done)
    if total > reported:
        advance(total - reported)
    return total


def _outcome(exitcode: int, out: Path, place: str) -> tuple[Any, BaseException | None]:
    """(result, None) or (None, error) of a process that ended with ``exitcode``."""
    if exitcode == 0 and (out / ERROR).is_file():
        return None, pickle.loads((out / ERROR).read_bytes())
    if exitcode == 0 and (out / RESULT).is_file():
        return pickle.loads((out / RESULT).read_bytes()), None
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
        return None, CorpusError(f"{place}: the process preparing these lines was killed ({name}; often the "
                                 "system running out of memory); run prepare again with fewer --workers, or "
                                 "--workers 1.")
    return None, RuntimeError(f"the process preparing {place} ended with exit status {exitcode} and no result "
                              "(its traceback is above)")


def _shard_main(target: Callable, job: Any, out: Path, done, k: int) -> None:
    """Process ``k``: ``target(job, advance)``, its result, or the error its input caused (a
    :class:`UserError` or an ``OSError``), pickled into ``out``; the pairs it got through counted in
    ``done[k]``. Any other exception is a bug: it keeps its traceback. Ctrl-C is the parent's to handle (it
    stops every shard); a process whose parent died (killed, out of memory) stops at its next progress count."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()

    def advance(n: int) -> None:
        done[k] += n
        if parent is not None and not parent.is_alive():  # prepare itself was killed: nobody will merge this
            raise SystemExit(1)

    try:
        result = target(job, advance)
    except (UserError, OSError) as err:
        (out / ERROR).write_bytes(_pickled_error(err))
        return
    (out / RESULT).write_bytes(pickle.dumps(result))


def _pickled_error(err: BaseException) -> bytes:
    """``err`` pickled, or its sentence as a :class:`CorpusError` if the error does not survive pickling."""
    try:
        data = pickle.dumps(err)
        pickle.loads(data)
        return data
    except Exception:  # an exception class whose constructor pickling cannot call again
        return pickle.dumps(CorpusError(str(err)))


# ---------------------------------------------------------------------------- merging


def merge_shard_files(dirs: Sequence[Path], dest: Path) -> None:
    """Concatenate the files of the shards' directories ``dirs`` (the same names in each) into ``dest``, in
    order, removing each shard's file once copied; offset files (``*.idx``) shifted to follow on."""
    names = sorted(p.name for p in dirs[0].iterdir() if p.name not in (RESULT, ERROR))
    for name in names:
        with open(dest / name, "wb") as out:
            if name.endswith(".idx"):
                out.write(np.zeros(1, dtype=np.int64).tobytes())
                base = 0
                for d in dirs:
                    base = _append_offsets(out, d / name, base)
                    (d / name).unlink()
            else:
                for d in dirs:
                    with open(d / name, "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 20)
                    (d / name).unlink()


def _append_offsets(out: BinaryIO, path: Path, base: int, block: int = 1 << 20) -> int:
    """Append the int64 offsets of ``path`` after its leading 0, each plus ``base``; the last one written."""
    last = base
    with open(path, "rb") as f:
        f.seek(8)
        while True:
            offsets = np.fromfile(f, dtype=np.int64, count=block)
            if not offsets.size:
                return last
            offsets += base
            out.write(offsets.tobytes())
            last = int(offsets[-1])
