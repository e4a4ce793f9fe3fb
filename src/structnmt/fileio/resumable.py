"""Outputs written a chunk at a time that an interrupted run can go on with: ``FILE.partial`` and its record.

A long command (``translate``, ``parse``) appends each finished chunk to ``FILE.partial``, flushes it to
disk and only then updates the record beside it (``FILE.partial.json``, :class:`ResumeRecord`): how many input
lines are done, hashes of those input lines and of the output bytes, what made the output (a checkpoint's
hash, a parser's settings) and the settings that change it. When the input is done the ``.partial`` file is
renamed to ``FILE`` and the record removed. An interrupted run (Ctrl-C, SIGTERM) cuts the ``.partial`` file
back to its last recorded chunk, so it holds complete lines only; after a crash mid-write, ``--resume`` cuts
it there. ``--resume`` checks the record against the input's beginning, the ``.partial`` file's bytes and the
settings, and refuses, in one sentence, any that differ.

The record is checked before anything in it is used: every field of its type and range (counts whole numbers
>= 0, hashes SHA-256 hex digests, only the notes the command writes), and its counts against the ``.partial``
file (the command's ``check_lines``: e.g. one translation line per input line done). The ``.partial`` file and
its record must be plain files, not links, on ``--resume`` as on a fresh run: the run appends to the one and
renames it over ``FILE``, so a link would have another file written and then moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from ..errors import UserError
from .files import atomic_write_text, check_writable, record_output_file

T = TypeVar("T")  # what :func:`chunked` groups

RECORD_VERSION = 1


@dataclass
class ResumeRecord:
    """The record beside ``FILE.partial``: enough to check, before going on, that the same input, checkpoint and
    settings made the lines there, and where the last complete chunk ends."""

    input: str
    input_lines: int
    input_sha256: str
    output_bytes: int
    output_sha256: str
    model_sha256: str  # the checkpoint's hash (translate), or the parser settings' (parse)
    settings: dict
    #: what the done lines left to report (e.g. ``{"too_long": [line numbers], ...}``), kept for the resumed run
    notes: dict = field(default_factory=dict)
    version: int = RECORD_VERSION

    @classmethod
    def read(cls, path: Path, command: str) -> ResumeRecord:
        """The record at ``path``, every field checked (:func:`record_problem`); one that is not a record
        (damaged, edited) is one sentence."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise bad_record(path, command, f"{type(err).__name__}: {err}") from None
        problem = record_problem(data)
        if problem:
            raise bad_record(path, command, problem)
        return cls(**data)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _count(value) -> bool:
    """Whether ``value`` is a whole number >= 0 (not a bool, which JSON's ``true`` would give)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def record_problem(data) -> str | None:
    """What is wrong with the fields of a record read from JSON (one clause), or None: exactly the fields of
    :class:`ResumeRecord`, counts whole numbers >= 0, hashes SHA-256 hex digests, settings and notes objects
    (what notes a command keeps is its own check, ``check_notes``)."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    names = [f.name for f in fields(ResumeRecord)]
    missing = [k for k in names if k not in data]
    unknown = sorted(k for k in data if k not in names)
    if missing or unknown:
        return f"field {missing[0]} is missing" if missing else f"{unknown[0]!r} is not a field of the record"
    for key, ok, want in (("input", isinstance(data["input"], str), "a text"),
                          ("input_lines", _count(data["input_lines"]), "a whole number >= 0"),
                          ("output_bytes", _count(data["output_bytes"]), "a whole number >= 0"),
                          ("version", _count(data["version"]), "a whole number >= 0"),
                          ("settings", isinstance(data["settings"], dict), "an object"),
                          ("notes", isinstance(data["notes"], dict), "an object"),
                          *((k, isinstance(data[k], str) and bool(_HEX64.fullmatch(data[k])),
                             "a SHA-256 digest (64 hex digits)")
                            for k in ("input_sha256", "output_sha256", "model_sha256"))):
        if not ok:
            return f"field {key} is {json.dumps(data[key])[:40]}, not {want}"
    return None


def bad_record(path: Path, command: str, problem: str) -> UserError:
    """The sentence for a record that cannot be trusted: it names the record and the fix."""
    partial = path.with_suffix("")
    return UserError(f"{path}: not a record of an interrupted `structnmt {command}` that can be trusted ({problem}); "
                     f"remove it and {partial.name} to start over (a run without --resume then writes {partial.name} "
                     "afresh).")


class LineTally:
    """Newlines counted in bytes fed a block at a time, and the beginning of the last complete line (its
    first :data:`KEPT` bytes: enough for an n-best line's ``INDEX |||``), in memory that does not grow."""

    KEPT = 64

    def __init__(self) -> None:
        self.lines = 0
        self.last = b""  # the beginning of the last complete line
        self._current = b""  # the beginning of the line being read

    def update(self, block: bytes) -> None:
        """Count ``block``'s newlines and keep the beginnings of its lines."""
        parts = block.split(b"\n")
        self.lines += len(parts) - 1
        if len(parts) == 1:
            self._current = (self._current + block)[: self.KEPT]
            return
        self.last = (self._current + parts[0])[: self.KEPT] if len(parts) == 2 else parts[-2][: self.KEPT]
        self._current = parts[-1][: self.KEPT]


class GunzipTally:
    """A :class:`LineTally` fed the decompressed lines of gzip bytes (one or more members, as ``translate
    --output FILE.gz`` appends one a chunk), a block at a time."""

    def __init__(self, tally: LineTally) -> None:
        self.tally = tally
        self._member = zlib.decompressobj(wbits=31)

    def update(self, block: bytes) -> None:
        while block:
            self.tally.update(self._member.decompress(block))
            block = b""
            if self._member.eof:  # the next member starts in what is left
                block, self._member = self._member.unused_data, zlib.decompressobj(wbits=31)


def _kind(path: Path) -> str | None:
    """``"a symbolic link"`` or ``"not a regular file"`` for a path that is there but is not a plain file
    itself (not followed: a link is a link); None for a plain file or nothing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return None if stat.S_ISREG(mode) else "not a regular file"


def partial_paths(output: str | Path) -> tuple[Path, Path]:
    """``(FILE.partial, FILE.partial.json)`` of the output ``FILE``."""
    output = Path(output)
    partial = output.with_name(output.name + ".partial")
    return partial, partial.with_name(partial.name + ".json")


def _line_bytes(line: str) -> bytes:
    """A line as it is hashed: UTF-8 with its newline."""
    return line.encode("utf-8", "surrogatepass") + b"\n"


class PartialOutput:
    """``FILE.partial`` and its record: appended a chunk at a time, each chunk flushed to disk before the record
    says it is there, renamed to ``FILE`` when the input is done and recorded as ``command``'s output.
    ``model_hash`` identifies what makes the output (``model_what``: a checkpoint, a parser's settings)."""

    def __init__(self, output: str | Path, *, input_name: str, model_hash: str, settings: dict,
                 command: str = "translate", model_what: str = "checkpoint",
                 check_lines: Callable[[int, LineTally], str | None] | None = None,
                 check_notes: Callable[[dict, int], str | None] | None = None):
        """``check_lines(input_lines, tally)``: what is wrong (one clause) with a ``.partial`` file whose recorded
        bytes have ``tally``'s lines for ``input_lines`` input lines done, or None; ``check_notes(notes,
        input_lines)`` the same for a record's notes (without it, a record must hold none)."""
        self.command, self.model_what = command, model_what
        self.check_lines, self.check_notes = check_lines, check_notes
        output = self.given = Path(output)  # recorded under the name given (a link's name)
        # a link stays a link: its target gets the translations, and the .partial file is written beside it
        self.output = Path(os.path.realpath(output)) if output.is_symlink() else output
        self.partial, self.record_path = partial_paths(self.output)
        self.record = ResumeRecord(input=input_name, input_lines=0, input_sha256=hashlib.sha256().hexdigest(),
                                   output_bytes=0, output_sha256=hashlib.sha256().hexdigest(),
                                   model_sha256=model_hash, settings=settings)
        self._in = hashlib.sha256()
        self._out = hashlib.sha256()
        self._file = None

    def start(self) -> None:
        """A new ``FILE.partial``; refused when one is there (an interrupted run: ``--resume`` goes on with it). A
        record left without its ``.partial`` file (a run stopped while it finished) is removed."""
        if self.record_path.is_file() and not self.partial.exists() and self.output.is_file():
            ResumeRecord.read(self.record_path, self.command)  # ours, or a sentence
            self.record_path.unlink()
        if os.path.lexists(self.partial) or os.path.lexists(self.record_path):  # a link too, even a broken one
            raise UserError(f"{self.partial}: an interrupted `structnmt {self.command}` is there; add --resume to go on "
                            "with it, or remove it (and its .json record) to start over.")
        check_writable(self.partial)
        self._file = open(self.partial, "xb")
        self._save()

    def resume(self, lines: Iterator[str]) -> tuple[int, int]:
        """Check the record against the input (whose first lines ``lines`` yields), the ``.partial`` file, the
        checkpoint and the settings; cut the ``.partial`` file after the last recorded chunk; return how many
        input lines were done (consumed from ``lines``) and how many of them are not blank (the lines that had
        pre-parsed trees). Any mismatch is refused in one sentence."""
        self._refuse_links()
        if not self.record_path.is_file() or not self.partial.is_file():
            done = " (it is complete)" if self.output.is_file() and not self.partial.exists() else ""
            raise UserError(f"--resume: {self.partial} and its record {self.record_path.name} are not both there, so "
                            f"there is no interrupted run writing {self.output}{done} to go on with; drop --resume.")
        saved = ResumeRecord.read(self.record_path, self.command)
        self._check_notes(saved)
        self._check_same(saved)
        non_blank = self._check_input(saved, lines)
        self._check_output(saved)
        self.record = saved
        # not followed if a link was put there since the check above
        self._file = os.fdopen(os.open(self.partial, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)), "r+b")
        self._file.truncate(saved.output_bytes)  # a chunk being written when the run was killed
        self._file.seek(saved.output_bytes)
        return saved.input_lines, non_blank

    def _refuse_links(self) -> None:
        """The ``.partial`` file and its record must be plain files, as a fresh run makes them: a link (or a
        device, a FIFO) would have the run cut and append to another file, then rename the link over ``FILE``."""
        for path in (self.partial, self.record_path):
            kind = _kind(path)
            if kind:
                raise UserError(f"--resume: {path} is {kind}, not the plain file an interrupted `structnmt "
                                f"{self.command}` leaves, so nothing is written through it; remove it (and "
                                f"{self.record_path.name if path == self.partial else self.partial.name}) to start "
                                "over.")

    def _check_notes(self, saved: ResumeRecord) -> None:
        """The record's notes are the command's (``check_notes``; none without it), or one sentence naming it."""
        if self.check_notes is not None:
            problem = self.check_notes(saved.notes, saved.input_lines)
        else:
            problem = f"notes {json.dumps(saved.notes)[:40]}: `structnmt {self.command}` keeps none" if saved.notes else None
        if problem:
            raise bad_record(self.record_path, self.command, problem)

    def _check_same(self, saved: ResumeRecord) -> None:
        """The same record version, model and settings as this run's, or one sentence naming what differs."""
        why = None
        if saved.version != RECORD_VERSION:
            why = f"was written by another version of structnmt (record version {saved.version})"
        elif saved.model_sha256 != self.record.model_sha256:
            why = f"was made with another {self.model_what}"
        elif saved.settings != self.record.settings:
            changed = sorted(k for k in {**saved.settings, **self.record.settings}
                             if saved.settings.get(k) != self.record.settings.get(k))
            why = f"was made with other settings ({', '.join(changed)})"
        if why:
            raise UserError(f"--resume: {self.partial} {why}; resume with the same {self.model_what} and options, or "
                            "remove it and its .json record to start over.")

    def _check_input(self, saved: ResumeRecord, lines: Iterator[str]) -> int:
        """Read the done lines off ``lines`` and compare their hash with the record's; the non-blank ones' count."""
        n = non_blank = 0
        while n < saved.input_lines:
            line = next(lines, None)
            if line is None:
                break
            self._in.update(_line_bytes(line))
            n += 1
            non_blank += bool(line.strip())
        if n < saved.input_lines or self._in.hexdigest() != saved.input_sha256:
            what = (f"has {n} lines, fewer than the {saved.input_lines} already done" if n < saved.input_lines
                    else f"does not begin with the {saved.input_lines} lines already done (they changed)")
            raise UserError(f"--resume: the input {self.record.input} {what} into {self.partial}; resume with the "
                            "input of the interrupted run, or remove the .partial file and its record to start over.")
        return non_blank

    def _check_output(self, saved: ResumeRecord) -> None:
        """The ``.partial`` file's first recorded bytes hash as the record says and hold the lines its input lines
        give (``check_lines``), or one sentence."""
        size = self.partial.stat().st_size
        tally = LineTally()
        feed = GunzipTally(tally) if saved.settings.get("gzip") else tally  # count the lines, not the gzip bytes
        if size >= saved.output_bytes:
            with open(self.partial, "rb") as f:
                left = saved.output_bytes
                while left:
                    block = f.read(min(left, 1 << 20))
                    if not block:  # cut short while being read
                        break
                    self._out.update(block)
                    feed.update(block)
                    left -= len(block)
        if size < saved.output_bytes or self._out.hexdigest() != saved.output_sha256:
            raise UserError(f"--resume: {self.partial} is not what the interrupted run wrote (its lines were changed "
                            "since); remove it and its .json record to start over.")
        problem = self.check_lines(saved.input_lines, tally) if self.check_lines is not None else None
        if problem:
            raise bad_record(self.record_path, self.command, f"input_lines {saved.input_lines:,}, but the "
                             f"{saved.output_bytes:,} recorded bytes of {self.partial.name} {problem}")

    def append(self, text: str | bytes, input_lines: list[str], notes: dict | None = None) -> None:
        """One finished chunk: its output (text, or bytes such as a gzip member) written and flushed to disk, then
        the record updated (with ``notes``, what the lines done so far leave to report, when given)."""
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        for line in input_lines:
            self._in.update(_line_bytes(line))
        self._out.update(data)
        self.record.input_lines += len(input_lines)
        self.record.output_bytes += len(data)
        self.record.input_sha256 = self._in.hexdigest()
        self.record.output_sha256 = self._out.hexdigest()
        if notes is not None:
            self.record.notes = notes
        self._save()

    def _save(self) -> None:
        """The record, written atomically."""
        atomic_write_text(self.record_path, json.dumps(asdict(self.record), indent=1) + "\n")

    def close(self, *, finished: bool) -> None:
        """Close; when ``finished``, ``FILE.partial`` becomes ``FILE`` (recorded as the command's) and the record
        goes. Interrupted, whatever followed the last recorded chunk is cut, so only complete lines stay; a run
        that failed before finishing any chunk leaves nothing (there is nothing to go on with)."""
        if self._file is None:
            return
        if not finished:
            self._file.truncate(self.record.output_bytes)
        self._file.close()
        self._file = None
        if finished:
            os.replace(self.partial, self.output)
            record_output_file(self.given, self.command)
            self.record_path.unlink(missing_ok=True)
        elif self.record.input_lines == 0:
            self.partial.unlink(missing_ok=True)
            self.record_path.unlink(missing_ok=True)


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` (lines of an input, ``prepare``'s numbered sentence pairs) in lists of ``size`` (the last
    shorter), read lazily."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
