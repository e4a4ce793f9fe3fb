"""Outputs written a chunk at a time that an interrupted run can go on with: ``FILE.partial`` and its record.

A long command (``translate``, ``parse``) appends each finished chunk to ``FILE.partial``, flushes it to
disk and only then updates the record beside it (``FILE.partial.json``, :class:`ResumeRecord`): how many input
lines are done, hashes of those input lines and of the output bytes, what made the output (a checkpoint's
hash, a parser's settings) and the settings that change it. When the input is done the ``.partial`` file is
renamed to ``FILE`` and the record removed. An interrupted run (Ctrl-C, SIGTERM) cuts the ``.partial`` file
back to its last recorded chunk, so it holds complete lines only; after a crash mid-write, ``--resume`` cuts
it there. ``--resume`` checks the record against the input's beginning, the ``.partial`` file's bytes and the
settings, and refuses, in one sentence, any that differ.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import UserError
from .files import atomic_write_text, check_writable, record_output_file

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
        """The record at ``path``; one that is not a record (damaged, edited) is one sentence."""
        types = {"input": str, "input_lines": int, "input_sha256": str, "output_bytes": int, "output_sha256": str,
                 "model_sha256": str, "settings": dict, "notes": dict, "version": int}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            wrong = [k for k, kind in types.items() if k in data and not isinstance(data[k], kind)]
            if not isinstance(data, dict) or wrong:
                raise TypeError(f"field {wrong[0] if wrong else ''} has the wrong type")
            return cls(**data)
        except (OSError, ValueError, TypeError) as err:
            raise UserError(f"{path}: not a record of an interrupted `structnmt {command}` ({err}); remove it and "
                            f"{path.with_suffix('')} to start over.") from None


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
                 command: str = "translate", model_what: str = "checkpoint"):
        self.command, self.model_what = command, model_what
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
        if self.partial.exists() or self.record_path.exists():
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
        if not self.record_path.is_file() or not self.partial.is_file():
            done = " (it is complete)" if self.output.is_file() and not self.partial.exists() else ""
            raise UserError(f"--resume: {self.partial} and its record {self.record_path.name} are not both there, so "
                            f"there is no interrupted run writing {self.output}{done} to go on with; drop --resume.")
        saved = ResumeRecord.read(self.record_path, self.command)
        self._check_same(saved)
        non_blank = self._check_input(saved, lines)
        self._check_output(saved)
        self.record = saved
        self._file = open(self.partial, "r+b")
        self._file.truncate(saved.output_bytes)  # a chunk being written when the run was killed
        self._file.seek(saved.output_bytes)
        return saved.input_lines, non_blank

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
        """The ``.partial`` file's first recorded bytes hash as the record says, or one sentence."""
        size = self.partial.stat().st_size
        if size >= saved.output_bytes:
            with open(self.partial, "rb") as f:
                left = saved.output_bytes
                while left:
                    block = f.read(min(left, 1 << 20))
                    self._out.update(block)
                    left -= len(block)
        if size < saved.output_bytes or self._out.hexdigest() != saved.output_sha256:
            raise UserError(f"--resume: {self.partial} is not what the interrupted run wrote (its lines were changed "
                            "since); remove it and its .json record to start over.")

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


def chunked(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    """``lines`` in lists of ``size`` (the last shorter), read lazily."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
