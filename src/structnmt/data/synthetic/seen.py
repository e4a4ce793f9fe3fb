"""The sentences drawn so far, in little memory: :class:`SeenSentences`.

The generator keeps every source sentence unique across the splits of a corpus. Holding the
sentences themselves would cost their size for the whole corpus; this set holds a 64-bit key of
each one (BLAKE2b of its text) in one preallocated table, 12 bytes per sentence. Two equal
sentences always have equal keys, so no sentence is ever written twice; two different ones share a
key with probability 2^-64, so that in a corpus of 4.5 million sentences the chance that any draw
is wrongly taken for a repeat (and skipped) is about one in a million.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["SeenSentences"]

#: table slots per sentence it is sized for (open addressing stays fast below 2/3 full)
_SLOTS_PER_SENTENCE = 1.5


def _key(sentence: str) -> int:
    """The 64-bit key of ``sentence``, never 0 (the table's mark of an empty slot)."""
    digest = hashlib.blake2b(sentence.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


class SeenSentences:
    """A set of sentences, as their 64-bit keys in a NumPy table with linear probing.

    ``capacity``: the most sentences it will hold (the corpus's size); the table of
    ``1.5 * capacity`` 8-byte slots is allocated at once and never grows."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._slots = np.zeros(int(capacity * _SLOTS_PER_SENTENCE) + 1, dtype=np.uint64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """The memory its table holds, in bytes (about 12 per sentence of ``capacity``)."""
        return self._slots.nbytes

    def _find(self, key: int) -> tuple[int, bool]:
        """The slot of ``key`` and True, or the empty slot where it would go and False."""
        slots, n = self._slots, len(self._slots)
        i = key % n
        while True:
            here = int(slots[i])
            if here == 0 or here == key:
                return i, here == key
            i = i + 1 if i + 1 < n else 0

    def __contains__(self, sentence: str) -> bool:
        return self._find(_key(sentence))[1]

    def add(self, sentence: str) -> None:
        """Add ``sentence`` (nothing changes if it is there already)."""
        key = _key(sentence)
        i, found = self._find(key)
        if found:
            return
        if self._size >= self.capacity:
            raise RuntimeError(f"SeenSentences was sized for {self.capacity} sentences; add no more")
        self._slots[i] = key
        self._size += 1
