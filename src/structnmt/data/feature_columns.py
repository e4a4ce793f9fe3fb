"""The columns of a feature store: each part of a feature's value, for every sentence of a split, in flat files.

A feature's value for one sentence (:data:`structnmt.syntax.features.FEATURES`) is an array, a tuple whose
items are arrays or plain Python data (MG-SA's phrase labels, the PhraseTransformer's spans), or plain data.
Each such part is a *column* (:class:`Column`); for a split ``S`` a column ``c`` is the files

* ``S.c.bin``       uint8: the sentences' bytes one after the other;
* ``S.c.idx.npy``   ``(n + 1,)`` int64: where each sentence's bytes start (the last entry: the .bin's size).

An *array* column adds

* ``S.c.shape.npy`` ``(n, ndim)`` int32: each sentence's shape (``(P, P)``, ``(K, P)``, ``(N, P)``, ...);
* ``S.c.how.npy``   ``(n,)`` uint8: how the sentence's bytes encode its array (:data:`HOW_RAW` ...);
* integer columns: ``S.c.table.npy`` (the column's dtype) and ``S.c.table_idx.npy`` ``(n + 1,)`` int64: the
  sentences' tables of distinct values (empty unless the sentence is :data:`HOW_TABLE`).

Encodings, picked per sentence as the smallest (every one gives back the same dtype and values):

* ``HOW_RAW``: the array's bytes in the column's dtype (floats; integers that need their whole width);
* ``HOW_BITS``: a bool array, 8 cells a byte (``numpy.packbits``): a ``(35, 35)`` mask in 154 bytes;
* ``HOW_TABLE``: integers with at most 256 distinct values: a byte per cell indexing the sentence's sorted
  table (LPEA's positions: ``-k .. k`` and ``OUT_OF_PHRASE``, a byte a cell instead of 8);
* ``HOW_NARROW + j``: integers in :data:`NARROW` ``[j]``, the smallest type that holds their range.

A *data* column holds each value as UTF-8 JSON in which a list is ``{"l": [...]}`` and a tuple an array (a
span ``(2, 4)`` is ``[2, 4]``), so that lists and tuples come back as they were; it holds str, int, float,
bool and None inside lists and tuples.

Writing appends one sentence at a time (:class:`ColumnWriter`) and gives every file's SHA-256 and size
(:attr:`ColumnWriter.digests`: the ``.bin`` hashed as it is written, the small indexes read back once), which
the store's ``meta.json`` records and checks when the store is opened; reading maps the files
(``numpy.load(mmap_mode="r")``, ``numpy.memmap``), so a value read is decoded from the page cache that
every process shares (:class:`ColumnReader`).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..fileio.corpus import file_digest

HOW_RAW, HOW_BITS, HOW_TABLE, HOW_NARROW = 0, 1, 2, 3
NARROW = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32"))
"""The integer types an array may be narrowed to (``how = HOW_NARROW + index``)."""

TABLE_MAX = 256


class StoreValueError(UserError, ValueError):
    """A feature's value that a store cannot keep (an object array, a dict, a numpy number inside a list)."""


@dataclass(frozen=True)
class Column:
    """One part of a feature's value: ``kind`` ``"array"`` (with its ``dtype`` and ``ndim``) or ``"data"``."""

    name: str
    kind: str
    dtype: str = ""
    ndim: int = 0

    def to_json(self) -> dict:
        """The column as ``meta.json`` lists it."""
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "ndim": self.ndim}

    @classmethod
    def from_json(cls, obj: dict) -> Column:
        """The column ``meta.json`` lists."""
        return cls(str(obj["name"]), str(obj["kind"]), str(obj.get("dtype", "")), int(obj.get("ndim", 0)))


def column_of(name: str, part: Any, what: str) -> Column:
    """The column that keeps ``part`` (an array or plain data) of a feature's value; ``what`` names the feature."""
    if isinstance(part, np.ndarray):
        if part.dtype.kind not in "biuf" or not part.dtype.isnative:
            raise StoreValueError(f"{what}: its value holds a {part.dtype} array; a feature store keeps bool, integer "
                                  "and float arrays (in the machine's byte order), so return one of those.")
        return Column(name, "array", part.dtype.name, part.ndim)
    return Column(name, "data")


def layout_of(value: Any, what: str) -> tuple[str, list[Column]]:
    """``(shape, columns)`` of a feature's value: ``"array"`` (one column), ``"tuple"`` (a column per item) or
    ``"data"`` (one JSON column)."""
    if isinstance(value, np.ndarray):
        return "array", [column_of("value", value, what)]
    if isinstance(value, tuple):
        return "tuple", [column_of(str(j), part, what) for j, part in enumerate(value)]
    return "data", [Column("value", "data")]


def parts_of(value: Any, shape: str) -> tuple:
    """The parts of ``value`` in column order (see :func:`layout_of`)."""
    return tuple(value) if shape == "tuple" else (value,)


def value_of(parts: list[Any], shape: str) -> Any:
    """The value made of its ``parts`` (the inverse of :func:`parts_of`)."""
    return tuple(parts) if shape == "tuple" else parts[0]


# ----------------------------------------------------------------------------- encoding one sentence
def encode_array(a: np.ndarray) -> tuple[int, bytes, np.ndarray | None]:
    """``(how, payload, table)`` of one sentence's array, the smallest of the encodings above."""
    if a.dtype.kind == "b":
        return HOW_BITS, np.packbits(a.ravel()).tobytes(), None
    if a.dtype.kind not in "iu" or a.size == 0:
        return HOW_RAW, a.tobytes(), None
    lo, hi = int(a.min()), int(a.max())
    narrow = next((t for t in NARROW if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), a.dtype)
    if narrow.itemsize > 1:
        table, codes = np.unique(a.ravel(), return_inverse=True)
        if len(table) <= TABLE_MAX and a.size + table.nbytes < narrow.itemsize * a.size:
            return HOW_TABLE, codes.astype(np.uint8).tobytes(), table
    if narrow.itemsize >= a.dtype.itemsize:
        return HOW_RAW, a.tobytes(), None
    return HOW_NARROW + NARROW.index(narrow), a.astype(narrow).tobytes(), None


def decode_array(how: int, payload: np.ndarray, shape: tuple[int, ...], dtype: np.dtype,
                 table: np.ndarray) -> np.ndarray:
    """The array (a new one, ``dtype``) of one sentence from its ``payload`` bytes (uint8)."""
    if how == HOW_BITS:
        return np.unpackbits(payload, count=int(np.prod(shape))).astype(dtype).reshape(shape)
    if how == HOW_TABLE:
        return table[payload].astype(dtype).reshape(shape)
    stored = dtype if how == HOW_RAW else NARROW[how - HOW_NARROW]
    return payload.view(stored).astype(dtype).reshape(shape)


def encode_data(part: Any, what: str) -> bytes:
    """One sentence's plain data as JSON bytes (lists tagged, tuples as arrays)."""
    return json.dumps(_tagged(part, what), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_data(payload: np.ndarray) -> Any:
    """A JSON part (labels, spans) from its stored bytes, lists and tuples as they were."""
    return _untagged(json.loads(payload.tobytes().decode("utf-8")))


def _tagged(x: Any, what: str) -> Any:
    if isinstance(x, list):
        return {"l": [_tagged(y, what) for y in x]}
    if isinstance(x, tuple):
        return [_tagged(y, what) for y in x]
    if x is None or type(x) in (str, int, float, bool):
        return x
    raise StoreValueError(f"{what}: its value holds a {type(x).__name__} inside its lists or tuples; a feature store "
                          "keeps str, int, float, bool and None there (and arrays as the value or its tuple's items).")


def _untagged(x: Any) -> Any:
    if isinstance(x, dict):
        return [_untagged(y) for y in x["l"]]
    if isinstance(x, list):
        return tuple(_untagged(y) for y in x)
    return x


# ----------------------------------------------------------------------------- files of one column
def column_files(directory: Path, split: str, column: Column) -> list[Path]:
    """The files of ``column`` for ``split`` (module docstring)."""
    stem = f"{split}.{column.name}"
    names = ["bin", "idx.npy"]
    if column.kind == "array":
        names += ["shape.npy", "how.npy"]
        if np.dtype(column.dtype).kind in "iu":
            names += ["table.npy", "table_idx.npy"]
    return [directory / f"{stem}.{n}" for n in names]


class ColumnWriter:
    """Appends the sentences of one split to the files of one column."""

    def __init__(self, directory: Path, split: str, column: Column, what: str):
        self.column, self.what = column, what
        self.paths = column_files(directory, split, column)
        self.out = open(self.paths[0], "wb")  # noqa: SIM115 (closed by close())
        self._bin_hash = hashlib.sha256()
        #: file name -> ``{"sha256", "bytes"}`` of every file of the column, once :meth:`close` wrote them
        self.digests: dict[str, dict] = {}
        self.offsets = array("q", [0])
        self.shapes = array("i")
        self.how = array("B")
        self.tables: list[np.ndarray] = []
        self.table_offsets = array("q", [0])

    def add(self, part: Any) -> None:
        """Append one sentence's part (checked against the column: same kind, dtype and ndim)."""
        if self.column.kind == "data":
            payload = encode_data(part, self.what)
        else:
            if column_of(self.column.name, part, self.what) != self.column:
                raise StoreValueError(f"{self.what}: sentence {len(self.offsets) - 1} gives "
                                      f"{_described(part)} where the sentences before gave a "
                                      f"{self.column.ndim}-d {self.column.dtype} array; a feature's value must keep "
                                      "its type.")
            how, payload, table = encode_array(np.ascontiguousarray(part))
            self.shapes.extend(part.shape)
            self.how.append(how)
            if table is not None:
                self.tables.append(table)
            self.table_offsets.append(self.table_offsets[-1] + (0 if table is None else len(table)))
        self.out.write(payload)
        self._bin_hash.update(payload)
        self.offsets.append(self.offsets[-1] + len(payload))

    def close(self) -> int:
        """Write the index files; returns the column's size in bytes."""
        self.out.close()
        n = len(self.offsets) - 1
        arrays = [np.frombuffer(self.offsets, dtype=np.int64)]
        if self.column.kind == "array":
            dtype = np.dtype(self.column.dtype)
            arrays += [np.frombuffer(self.shapes, dtype=np.int32).reshape(n, self.column.ndim),
                       np.frombuffer(self.how, dtype=np.uint8)]
            if dtype.kind in "iu":
                arrays += [np.concatenate(self.tables).astype(dtype) if self.tables else np.zeros(0, dtype),
                           np.frombuffer(self.table_offsets, dtype=np.int64)]
        for path, a in zip(self.paths[1:], arrays):
            np.save(path, a, allow_pickle=False)
        self.digests = {self.paths[0].name: {"sha256": self._bin_hash.hexdigest(), "bytes": self.offsets[-1]},
                        **{p.name: file_digest(p) for p in self.paths[1:]}}
        return sum(p.stat().st_size for p in self.paths)


def _described(part: Any) -> str:
    if isinstance(part, np.ndarray):
        return f"a {part.ndim}-d {part.dtype} array"
    return f"a {type(part).__name__}"


class ColumnReader:
    """One column of one split, memory-mapped: :meth:`get` decodes sentence ``i``."""

    def __init__(self, directory: Path, split: str, column: Column, n: int):
        """Raises ``ValueError`` (naming the file) when a file is missing or does not fit the others."""
        self.column = column
        self.dtype = np.dtype(column.dtype) if column.kind == "array" else None
        paths = column_files(directory, split, column)
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise ValueError(f"{missing[0]}: missing")
        size = paths[0].stat().st_size
        # plain ndarray views of the mappings (no copy): indexing them skips numpy.memmap's per-call overhead
        self.data = np.asarray(np.memmap(paths[0], dtype=np.uint8, mode="r")) if size else np.zeros(0, np.uint8)
        loaded = [np.asarray(np.load(p, mmap_mode="r", allow_pickle=False)) for p in paths[1:]]
        self.offsets = loaded[0]
        if self.offsets.shape != (n + 1,) or (n and int(self.offsets[-1]) != size):
            raise ValueError(f"{paths[1]}: does not index {n:,} sentences of {paths[0].name}")
        if column.kind == "array":
            self.shapes, self.how = loaded[1], loaded[2]
            if self.shapes.shape != (n, column.ndim) or self.how.shape != (n,):
                raise ValueError(f"{paths[2]}: does not hold the shapes of {n:,} sentences")
            self.table, self.table_offsets = (loaded[3], loaded[4]) if len(loaded) > 3 else (None, None)

    def get(self, i: int) -> Any:
        """Sentence ``i``'s part of the value, decoded."""
        payload = self.data[self.offsets[i]:self.offsets[i + 1]]
        if self.column.kind == "data":
            return decode_data(payload)
        table = None
        if self.table is not None:
            table = self.table[self.table_offsets[i]:self.table_offsets[i + 1]]
        return decode_array(int(self.how[i]), payload, tuple(self.shapes[i].tolist()), self.dtype, table)
