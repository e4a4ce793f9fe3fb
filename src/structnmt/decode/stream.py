"""Streaming translation: the input read a chunk at a time, translations written in input order as each
chunk is done, so memory is bounded by the chunk, not the input, and an interrupted run can go on.

A chunk is :data:`CHUNK_BATCHES` batches of ``decode.batch_size`` lines (8,192 lines at the default 128);
sorting by length for speed happens inside a chunk. An input that fits one chunk is translated exactly as
by one :meth:`structnmt.decode.translate.Translator.translate` call; a longer one in the same chunks on every
machine and with any number of ``--workers``, so the output does not depend on how it was decoded.

With ``--output FILE`` the lines go to ``FILE.partial`` as each chunk is done, with a record beside it
(:mod:`structnmt.fileio.resumable`: the input lines done, hashes of them and of the output, the checkpoint's hash,
the decoding settings and the chunk size). When the input is done ``FILE.partial`` becomes ``FILE``. An
interrupted run leaves ``FILE.partial`` holding the complete lines of every finished chunk, and ``--resume``
goes on from the next input line, refusing an input, checkpoint, option or output that changed.
"""

from __future__ import annotations

import contextlib
import gzip
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..errors import UserError
from ..fileio.corpus import file_digest
from ..fileio.files import errors_name, is_device
from ..fileio.resumable import PartialOutput, chunked

CHUNK_BATCHES = 64
"""Batches per chunk (``--chunk-batches``): the window sorted by length, 8,192 lines at batch 128. Measured
(benchmarks/results/2026-11-28-stream-chunks/): sorting within 1 batch's lines costs about 9 % CPU, within 4
batches' as little as sorting the whole input (the same bytes every time); memory stays at a chunk's."""


@dataclass
class ChunkResult:
    """What translating one chunk gives: per input line its n-best list (``.text``, ``.score``), and the 1-based
    numbers, within the chunk, of the lines over the model's positions and of those whose parse did not fit."""

    results: list
    too_long: list[int] = field(default_factory=list)
    unaligned: list[int] = field(default_factory=list)


@dataclass
class StreamSummary:
    """A finished (or interrupted) stream: lines done, and the 1-based input line numbers to report (the first
    :data:`SHOWN` of each kind, and how many there are)."""

    lines: int = 0
    resumed_from: int = 0
    too_long: list[int] = field(default_factory=list)
    too_long_count: int = 0
    unaligned: list[int] = field(default_factory=list)
    unaligned_count: int = 0

    def add(self, offset: int, done: ChunkResult) -> None:
        """The report of a chunk whose first line is input line ``offset`` + 1."""
        self.too_long = (self.too_long + [offset + n for n in done.too_long])[:SHOWN]
        self.too_long_count += len(done.too_long)
        self.unaligned = (self.unaligned + [offset + n for n in done.unaligned])[:SHOWN]
        self.unaligned_count += len(done.unaligned)

    def notes(self) -> dict:
        """What the resume record keeps of the report, so a resumed run reports the lines before it too."""
        return {k: getattr(self, k) for k in ("too_long", "too_long_count", "unaligned", "unaligned_count")}


SHOWN = 20
"""Line numbers of each kind a report names (the rest are counted)."""

NOTE_KINDS = ("too_long", "unaligned")
"""The kinds of input line a report names: a resume record's notes are ``KIND`` (the first line numbers) and
``KIND_count`` of each, and nothing else (:func:`notes_problem`)."""


def notes_problem(notes: dict, input_lines: int) -> str | None:
    """What is wrong (one clause) with a resume record's notes for ``input_lines`` lines done, or None: only the
    keys :meth:`StreamSummary.notes` writes; each count a whole number of at most ``input_lines``; each list
    the first ``min(count, SHOWN)`` line numbers, increasing, within 1..``input_lines``."""
    known = [k for kind in NOTE_KINDS for k in (kind, f"{kind}_count")]
    unknown = sorted(k for k in notes if k not in known)
    if unknown:
        return f"notes hold {unknown[0]!r}, which is not one of {', '.join(known)}"
    for kind in NOTE_KINDS:
        count, shown = notes.get(f"{kind}_count", 0), notes.get(kind, [])
        if not (isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= input_lines):
            return f"notes {kind}_count is {str(count)[:20]}, not a count of at most the {input_lines:,} lines done"
        numbers = isinstance(shown, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in shown)
        if (not numbers or len(shown) != min(count, SHOWN) or any(not 1 <= x <= input_lines for x in shown)
                or any(a >= b for a, b in zip(shown, shown[1:]))):
            return (f"notes {kind} is {str(shown)[:40]}, not the first {min(count, SHOWN)} of {count} increasing "
                    f"line numbers within the {input_lines:,} lines done")
    return None


def lines_problem(nbest: int) -> Callable:
    """The check of a ``.partial`` file's recorded lines against the input lines done (for
    :class:`~structnmt.fileio.resumable.PartialOutput`): one line per input line, or with ``nbest`` > 1 at most ``nbest``
    lines per input line, the last one's INDEX that of the last input line done."""

    def problem(input_lines: int, tally) -> str | None:
        if nbest == 1:
            return None if tally.lines == input_lines else f"hold {tally.lines:,} translation lines"
        if tally.lines > nbest * input_lines:
            return f"hold {tally.lines:,} lines, more than {nbest} per input line"
        index = tally.last.split(b" ||| ")[0]
        if input_lines and (not index.isdigit() or int(index) != input_lines - 1):
            return f"end with the translations of input line {index[:20].decode('utf-8', 'replace')!r} (0-based)"
        return None

    return problem


def format_results(results: list, nbest: int, first: int) -> str:
    """The output lines of one chunk: one translation per line, or with ``nbest`` > 1 fairseq's
    ``INDEX ||| TEXT ||| SCORE`` lines, INDEX the 0-based input line (``first`` + position in the chunk)."""
    out = []
    for i, hyps in enumerate(results, start=first):
        if nbest > 1:
            out.extend(f"{i} ||| {h.text} ||| {h.score:.4f}\n" for h in hyps)
        else:
            out.append((hyps[0].text if hyps else "") + "\n")
    return "".join(out)


def translate_stream(translate_chunk: Callable[[list[str], int], ChunkResult], lines: Iterator[str], *,
                     chunk_lines: int, nbest: int, write: Callable[[str, list[str], dict], None],
                     summary: StreamSummary | None = None, progress=None) -> StreamSummary:
    """Translate ``lines`` a chunk of ``chunk_lines`` at a time with ``translate_chunk(chunk, first)`` (``first``: the
    0-based input line number of the chunk's first line), handing each chunk's output text, its input lines and the
    report so far (:meth:`StreamSummary.notes`) to ``write``, in input order. ``summary``: a resumed run's (its
    ``lines`` done before; ``lines`` starts after them). ``progress``: a tqdm bar (or None) advanced per chunk."""
    summary = summary or StreamSummary()
    for chunk in chunked(lines, chunk_lines):
        offset = summary.lines
        done = translate_chunk(chunk, offset)
        summary.add(offset, done)
        write(format_results(done.results, nbest, offset), chunk, summary.notes())
        summary.lines += len(chunk)
        if progress is not None:
            progress.update(len(chunk))
    return summary


@dataclass
class StreamOptions:
    """How :func:`run_stream` reads and writes: ``input`` a file or None/``-`` for standard input, ``output`` a
    file or None for standard output; ``settings`` everything that changes the output (decoding options, the
    chunk size), kept in the resume record."""

    input: str | None
    output: str | None
    checkpoint: str  # the file identifying the model (a checkpoint; an export's structnmt_export.json)
    settings: dict
    chunk_lines: int
    nbest: int = 1
    resume: bool = False
    progress: bool = True


def run_stream(translate_chunk: Callable[[list[str], int], ChunkResult], opts: StreamOptions,
               read: Callable[[str | None], Iterator[str]], *, skip_trees: Callable[[int], None] | None = None,
               finish: Callable[[], None] | None = None) -> StreamSummary:
    """Translate ``opts.input`` (its lines from ``read(path)``) into ``opts.output`` a chunk at a time
    (:func:`translate_stream`): to standard output (or a device, a pipe) as each chunk is done, or through
    ``FILE.partial`` (:class:`PartialOutput`), resumed with ``opts.resume``. ``skip_trees(n)``: told, on resuming,
    how many non-blank lines were done (a model reading pre-parsed trees skips theirs). ``finish()``: the last
    checks once the input is done, before the output is complete (tree files with trees left over)."""
    device = not opts.output or is_device(opts.output)
    if opts.resume and device:
        raise UserError("--resume goes on with an interrupted --output FILE (a file, not standard output or a "
                        "device); give the --output of that run.")
    # the total only for a file a bar is shown for: a pipe (--input <(...)) can be read once
    total = (sum(1 for _ in read(opts.input)) if opts.progress and opts.input not in (None, "-")
             and Path(opts.input).is_file() else None)
    bar = _progress_bar(total, opts.progress)
    try:
        if device:
            return _to_stream(translate_chunk, opts, read(opts.input), bar, finish)
        return _to_partial(translate_chunk, opts, read(opts.input), bar, skip_trees, finish)
    finally:
        if bar is not None:
            bar.close()


def _to_stream(translate_chunk, opts: StreamOptions, lines: Iterator[str], bar, finish) -> StreamSummary:
    """:func:`run_stream` to standard output, or written in place into a device or a pipe."""
    stream = open(opts.output, "w", encoding="utf-8") if opts.output else None  # noqa: SIM115
    out = stream or _stdout()

    def write(text: str, *_) -> None:
        out.write(text)
        out.flush()
    name = Path(opts.output or "<stdout>")
    try:
        with errors_name(name, name):
            summary = translate_stream(translate_chunk, lines, chunk_lines=opts.chunk_lines, nbest=opts.nbest,
                                       write=write, progress=bar)
            if finish is not None:
                finish()
            if stream is not None:
                stream.close()
            return summary
    finally:
        if stream is not None and not stream.closed:
            with contextlib.suppress(OSError):  # the error being raised says what went wrong
                stream.close()


def _to_partial(translate_chunk, opts: StreamOptions, lines: Iterator[str], bar, skip_trees, finish) -> StreamSummary:
    """:func:`run_stream` into ``FILE.partial``, renamed to ``FILE`` once the input is done and checked. A ``FILE``
    named ``.gz`` is gzip-compressed, one gzip member per chunk (a multi-member gzip file is one gzip file to
    every reader), so a resumed run appends members after the last finished one; the resume record says
    ``gzip``, so an interrupted run that wrote plain text under a ``.gz`` name is not resumed into it."""
    gz = str(opts.output).endswith(".gz")
    settings = {**opts.settings, "gzip": True} if gz else opts.settings
    partial = PartialOutput(opts.output, input_name=str(opts.input), model_hash=file_digest(opts.checkpoint)["sha256"],
                            settings=settings, check_lines=lines_problem(opts.nbest), check_notes=notes_problem)
    summary = StreamSummary()
    if opts.resume:
        summary.lines, non_blank = partial.resume(lines)
        summary.resumed_from = summary.lines
        notes = partial.record.notes  # checked by notes_problem: the keys StreamSummary.notes writes
        for kind in NOTE_KINDS:
            setattr(summary, kind, list(notes.get(kind, [])))
            setattr(summary, f"{kind}_count", notes.get(f"{kind}_count", 0))
        if skip_trees is not None:
            skip_trees(non_blank)
        if bar is not None:
            bar.update(summary.lines)
    else:
        partial.start()
    finished = False
    write = partial.append
    if gz:
        def write(text: str, chunk: list[str], notes: dict) -> None:
            partial.append(gzip.compress(text.encode("utf-8", "surrogatepass"), mtime=0), chunk, notes)
    try:
        with errors_name(partial.partial, partial.partial):
            translate_stream(translate_chunk, lines, chunk_lines=opts.chunk_lines, nbest=opts.nbest,
                             write=write, summary=summary, progress=bar)
            if gz and partial.record.output_bytes == 0:  # an empty input: an empty gzip file, not an empty file
                partial.append(gzip.compress(b"", mtime=0), [])
        if finish is not None:
            finish()
        finished = True
        return summary
    finally:
        partial.close(finished=finished)


def _progress_bar(total: int | None, show: bool):
    if not show:
        return None
    return tqdm(total=total, desc="translate", unit=" lines", mininterval=1.0)


def _stdout():
    return sys.stdout
