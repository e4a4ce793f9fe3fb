"""Tests for streaming, validating corpus reading (structnmt.fileio.corpus)."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from structnmt.fileio.corpus import (
    CorpusError,
    PairStats,
    count_lines,
    file_digest,
    read_lines,
    read_pairs,
    resolve,
)


def _write(path: Path, lines: list[str | bytes], *, gz: bool = False) -> Path:
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode("utf-8")) + b"\n" for ln in lines)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def test_read_lines_plain_and_gzip_agree(tmp_path):
    lines = ["one two", "", "  three  ", "vier fünf"]
    plain = _write(tmp_path / "a.en", lines)
    gz = _write(tmp_path / "b.en.gz", lines, gz=True)
    assert list(read_lines(plain)) == lines
    assert list(read_lines(gz)) == lines
    assert count_lines(plain) == count_lines(gz) == 4


def test_read_lines_strips_crlf_and_keeps_last_line_without_newline(tmp_path):
    p = tmp_path / "x.en"
    p.write_bytes(b"a b\r\nc d\r\nlast")
    assert list(read_lines(p)) == ["a b", "c d", "last"]
    assert count_lines(p) == 3


def test_invalid_utf8_names_file_and_line(tmp_path):
    p = _write(tmp_path / "bad.en", [b"fine", b"also fine", b"caf\xe9 latin1", b"more"])
    with pytest.raises(CorpusError) as info:
        list(read_lines(p))
    msg = str(info.value)
    assert str(p) in msg and "line 3" in msg and "UTF-8" in msg


def test_invalid_utf8_in_gzip_names_file_and_line(tmp_path):
    p = _write(tmp_path / "bad.en.gz", [b"ok", b"\xff\xfe"], gz=True)
    with pytest.raises(CorpusError, match="line 2"):
        list(read_lines(p))


def test_missing_file(tmp_path):
    p = tmp_path / "nope.en"
    with pytest.raises(CorpusError, match="not found") as info:
        list(read_lines(p))
    assert str(p) in str(info.value)
    with pytest.raises(CorpusError, match="not found"):
        count_lines(p)


def test_resolve_finds_plain_or_gz_refuses_both_and_names_missing(tmp_path):
    _write(tmp_path / "train.de.gz", ["x"], gz=True)
    assert resolve(tmp_path / "train", "de") == tmp_path / "train.de.gz"
    _write(tmp_path / "train.en", ["x"])
    assert resolve(tmp_path / "train", "en") == tmp_path / "train.en"
    _write(tmp_path / "train.de", ["x"])  # both train.de and train.de.gz: which one is meant?
    with pytest.raises(CorpusError, match="train.de and train.de.gz both exist"):
        resolve(tmp_path / "train", "de")
    with pytest.raises(CorpusError) as info:
        resolve(tmp_path / "train", "fr")
    assert str(tmp_path / "train.fr") in str(info.value)


@pytest.mark.parametrize("n_src,n_tgt", [(10, 7), (7, 10), (0, 3)])
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, n_src, n_tgt):
    s = _write(tmp_path / "c.en", [f"s{i}" for i in range(n_src)])
    t = _write(tmp_path / "c.de", [f"t{i}" for i in range(n_tgt)])
    with pytest.raises(CorpusError) as info:
        list(read_pairs(s, t, PairStats()))
    msg = str(info.value)
    assert str(s) in msg and str(t) in msg
    assert f"{s} has {n_src} lines" in msg and f"{t} has {n_tgt}" in msg


def test_mismatch_is_not_hidden_by_empty_lines(tmp_path):
    # the extra lines at the end are empty: still a mismatch, not "dropped empty"
    s = _write(tmp_path / "c.en", ["a", "b", "", ""])
    t = _write(tmp_path / "c.de", ["a", "b"])
    with pytest.raises(CorpusError, match="has 4 lines.*has 2"):
        list(read_pairs(s, t, PairStats()))


def test_empty_pairs_dropped_and_counted_with_line_numbers(tmp_path):
    src = ["a", "", "c", "d", "   ", "f", "g"]
    tgt = ["A", "B", "", "D", "E", "F", "\t"]
    s = _write(tmp_path / "e.en", src)
    t = _write(tmp_path / "e.de", tgt)
    stats = PairStats()
    pairs = list(read_pairs(s, t, stats))
    assert pairs == [(1, "a", "A"), (4, "d", "D"), (6, "f", "F")]
    assert stats.lines == 7 and stats.empty == 4 and stats.empty_examples == [2, 3, 5, 7]
    d = stats.as_dict()
    assert d["dropped_empty"] == 4 and d["first_empty_lines"] == [2, 3, 5, 7] and d["lines"] == 7


def test_empty_examples_are_capped_but_count_is_exact(tmp_path):
    src = ["" if i % 2 else f"w{i}" for i in range(100)]
    s = _write(tmp_path / "e.en", src)
    t = _write(tmp_path / "e.de", [f"v{i}" for i in range(100)])
    stats = PairStats()
    kept = list(read_pairs(s, t, stats))
    assert len(kept) == 50 and stats.empty == 50
    assert stats.empty_examples == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]


def test_read_pairs_strips_whitespace_and_streams(tmp_path):
    s = _write(tmp_path / "s.en", [" a b ", "c"])
    t = _write(tmp_path / "s.de", ["x\t", " y"])
    it = read_pairs(s, t, PairStats())
    assert next(it) == (1, "a b", "x")  # a generator: nothing read ahead is required
    assert list(it) == [(2, "c", "y")]


def test_invalid_utf8_through_read_pairs(tmp_path):
    s = _write(tmp_path / "u.en", ["a", "b", "c"])
    t = _write(tmp_path / "u.de", [b"a", b"b", b"\xc3("])
    with pytest.raises(CorpusError) as info:
        list(read_pairs(s, t, PairStats()))
    assert str(t) in str(info.value) and "line 3" in str(info.value)


def test_file_digest(tmp_path):
    p = _write(tmp_path / "d.en", ["hello", "world"])
    d = file_digest(p)
    assert d == {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size}
    _write(p, ["hello", "World"])
    assert file_digest(p)["sha256"] != d["sha256"]
