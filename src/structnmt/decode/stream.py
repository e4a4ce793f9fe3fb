"""Streaming translation: the input read a chunk at a time, translations written in input order as each
chunk is done, so memory is bounded by the chunk, not the input, and an interrupted run can go on.

A chunk is :data:`CHUNK_BATCHES` batches of ``decode.batch_size`` lines (8,192 lines at the default 128);
sorting by length for speed happens inside a chunk. An input that fits one chunk is translated exactly as
by one :meth:`structnmt.decode.translate.Translator.translate` call; a longer one in the same chunks on every
machine and with any number of ``--workers``, so the output does not depend on how it was decoded.

With ``--output FILE`` the lines go to ``FILE.partial`` as each chunk is done, with a record beside it
(:mod:`structnmt.resumable`: the input lines done, hashes of them and of the output, the checkpoint's hash,
the decoding settings and the chunk size). When the input is done ``FILE.partial`` becomes ``FILE``. An
interrupted run leaves ``FILE.partial`` holding the complete lines of every finished chunk, and ``--resume``
goes on from the next input line, refusing an input, checkpoint, option or output that changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..errors import UserError
from ..files import errors_name
from ..resumable import PartialOutput, chunked

CHUNK_BATCHES = 64
"""Batches per chunk (``--chunk-batches``): the window sorted by length. Measured with
``benchmarks/bench_scale.py`` (docs/large_data.md): on 8,192-line chunks decoding is as fast as with
the whole input sorted, and memory stays at a chunk's (about 2.4 KB per line in flight)."""


@dataclass
class ChunkResult:
    """What translating one chunk gives: per input line its n-best list (``.text``, ``.score``), and the 1-based
    numbers, within the chunk, of the lines over the model's positions and of those whose parse did not fit."""

    results: list
    too_long: list[int] = field(default_factory=list)
    unaligned: list[int] = field(default_factory=list)


@dataclass
class StreamSummary:
    """A finished (or interrupted) stream: lines done, and the 1-based input line numbers to report."""

    lines: int = 0
    resumed_from: int = 0
    too_long: list[int] = field(default_factory=list)
    unaligned: list[int] = field(default_factory=list)


def checkpoint_sha256(path: str | Path) -> str:
    """SHA-256 of a checkpoint file, or of every file of an export directory (names and bytes, sorted)."""
    h = hashlib.sha256()
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path)).encode() if path.is_dir() else b"")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


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


def translate_stream(translate_chunk: Callable[[list[str]], ChunkResult], lines: Iterator[str], *,
                     chunk_lines: int, nbest: int, write: Callable[[str, list[str]], None], first: int = 0,
                     progress=None) -> StreamSummary:
    """Translate ``lines`` a chunk of ``chunk_lines`` at a time with ``translate_chunk``, handing each chunk's output
    text and input lines to ``write`` in input order. ``first``: how many input lines were done before (a resumed
    run; ``lines`` starts after them). ``progress``: a tqdm bar (or None) advanced per chunk."""
    summary = StreamSummary(lines=first, resumed_from=first)
    for chunk in chunked(lines, chunk_lines):
        done = translate_chunk(chunk)
        offset = summary.lines
        summary.too_long += [offset + n for n in done.too_long]
        summary.unaligned += [offset + n for n in done.unaligned]
        write(format_results(done.results, nbest, offset), chunk)
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
    checkpoint: str
    settings: dict
    chunk_lines: int
    nbest: int = 1
    resume: bool = False
    progress: bool = True


def run_stream(translate_chunk: Callable[[list[str]], ChunkResult], opts: StreamOptions,
               read: Callable[[str | None], Iterator[str]], *,
               skip_trees: Callable[[int], None] | None = None) -> StreamSummary:
    """Translate ``opts.input`` (its lines from ``read(path)``) into ``opts.output`` a chunk at a time
    (:func:`translate_stream`): to standard output as each chunk is done, or through ``FILE.partial``
    (:class:`PartialOutput`), resumed with ``opts.resume``. ``skip_trees(n)``: told, on resuming, how many
    non-blank lines were done (a model reading pre-parsed trees skips theirs)."""
    if opts.resume and not opts.output:
        raise UserError("--resume goes on with an interrupted --output FILE; give the --output of that run.")
    lines = read(opts.input)
    total = None if opts.input in (None, "-") else sum(1 for _ in read(opts.input))
    bar = _progress_bar(total, opts.progress)
    if not opts.output or _is_device(opts.output):
        stream = open(opts.output, "w", encoding="utf-8") if opts.output else None  # noqa: SIM115
        out = stream or _stdout()

        def write(text: str, _: list[str]) -> None:
            out.write(text)
            out.flush()
        try:
            with errors_name(Path(opts.output or "<stdout>"), Path(opts.output or "<stdout>")):
                summary = translate_stream(translate_chunk, lines, chunk_lines=opts.chunk_lines, nbest=opts.nbest,
                                           write=write, progress=bar)
                if stream is not None:
                    stream.close()
                return summary
        finally:
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):  # the error being raised says what went wrong
                    stream.close()
            if bar is not None:
                bar.close()
    partial = PartialOutput(opts.output, input_name=str(opts.input), model_hash=checkpoint_sha256(opts.checkpoint),
                            settings=opts.settings)
    first = 0
    if opts.resume:
        first, non_blank = partial.resume(lines)
        if skip_trees is not None:
            skip_trees(non_blank)
        if bar is not None:
            bar.update(first)
    else:
        partial.start()
    finished = False
    try:
        with errors_name(partial.partial, partial.partial):
            summary = translate_stream(translate_chunk, lines, chunk_lines=opts.chunk_lines, nbest=opts.nbest,
                                       write=partial.append, first=first, progress=bar)
        finished = True
        return summary
    finally:
        partial.close(finished=finished)
        if bar is not None:
            bar.close()


def _progress_bar(total: int | None, show: bool):
    if not show:
        return None
    return tqdm(total=total, desc="translate", unit=" lines", mininterval=1.0)


def _is_device(path: str) -> bool:
    """Whether ``path`` is a device or a pipe (``/dev/stdout``): written in place, as a Unix tool would."""
    try:
        return not Path(path).is_file() and Path(path).exists() and not Path(path).is_dir()
    except OSError:
        return False


def _stdout():
    return sys.stdout
