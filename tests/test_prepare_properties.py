"""Property: ``prepare`` keeps pair i's source with pair i's target, and counts every drop.

Random parallel text with control characters and odd separators inside lines (``\\r``
alone, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``, ``\\u2029``, tabs),
CRLF endings on some lines, a last line without a newline, empty and whitespace-only
lines on either side, and lines over ``max_len`` pieces, in train, valid and test.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structnmt.data.dataset import PreparedDataset
from structnmt.data.prepare import PrepareConfig, prepare

MAX_LEN = 24
WORDS = ["the", "cat", "sees", "a", "dog", "near", "house", "red", "old", "man", "über", "ça", "日本"]
INSIDE = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\t", " "]
BLANK = ["", " ", "\t", "\u2028", "\x0b \x0c", "\x85"]


@st.composite
def side(draw, marker: str, long: bool) -> str:
    n = draw(st.integers(3, 6)) * (12 if long else 1)
    words = [draw(st.sampled_from(WORDS)) for _ in range(n)]
    words.insert(draw(st.integers(0, len(words))), marker)
    seps = [draw(st.sampled_from(INSIDE)) if draw(st.booleans()) else " " for _ in range(len(words) - 1)]
    text = words[0] + "".join(s + w for s, w in zip(seps, words[1:]))
    return draw(st.sampled_from(["", " ", "\t", "\u2029"])) + text + draw(st.sampled_from(["", " ", "\x0c"]))


@st.composite
def corpus(draw, min_size: int, max_size: int) -> list[tuple[str, str, str]]:
    """(source line, target line, line ending) per pair; the marker ``pN``/``qN`` ties a pair."""
    pairs = []
    for i in range(draw(st.integers(min_size, max_size))):
        kind = draw(st.sampled_from(["ok", "ok", "ok", "ok", "src_blank", "tgt_blank", "long_src", "long_tgt"]))
        src = draw(side(f"p{i}", long=kind == "long_src"))
        tgt = draw(side(f"q{i}", long=kind == "long_tgt"))
        if kind == "src_blank":
            src = draw(st.sampled_from(BLANK))
        if kind == "tgt_blank":
            tgt = draw(st.sampled_from(BLANK))
        pairs.append((src, tgt, draw(st.sampled_from(["\n", "\r\n"]))))
    return pairs


def write(path: Path, lines: list[str], endings: list[str], final_newline: bool) -> None:
    data = "".join(line + end for line, end in zip(lines, endings))
    if not final_newline and lines[-1]:  # an empty last line without its newline is no line at all
        data = data[: -len(endings[-1])]
    path.write_bytes(data.encode("utf-8"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(train=corpus(25, 40), valid=corpus(3, 10), test=corpus(3, 10), final_newline=st.booleans())
def test_prepare_keeps_pairs_aligned_and_counts_every_drop(train, valid, test, final_newline):
    splits = {"train": train, "valid": valid, "test": test}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for name, pairs in splits.items():
            endings = [e for _, _, e in pairs]
            write(root / f"{name}.src", [s for s, _, _ in pairs], endings, final_newline)
            write(root / f"{name}.tgt", [t for _, t, _ in pairs], endings, final_newline)
        manifest = prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "train"),
                                         validpref=str(root / "valid"), testprefs=[str(root / "test")],
                                         vocab_size=90, max_len=MAX_LEN),
                           root / "bin", progress=False, log=lambda *_: None)
        ds = PreparedDataset(root / "bin")
        for name, pairs in splits.items():
            counts = manifest["counts"][name]
            assert counts["lines"] == len(pairs)
            assert counts["kept"] + counts["dropped_empty"] + counts["dropped_too_long"] == len(pairs)
            split = ds.split(name)
            numbers = np.fromfile(root / "bin" / f"{name}.lines", dtype=np.int64)
            assert len(numbers) == len(split) == counts["kept"]
            assert list(numbers) == sorted(set(numbers.tolist()))
            expected_dropped = set()
            for n, (src, tgt, _) in enumerate(pairs, start=1):
                s, t = src.strip(), tgt.strip()
                src_ids, tgt_ids = ds.src_vocab.encode([s])[0], ds.tgt_vocab.encode([t])[0]
                long = len(src_ids) > MAX_LEN or len(tgt_ids) > MAX_LEN
                if not s or not t or (long and name == "train"):
                    expected_dropped.add(n)
            assert set(range(1, len(pairs) + 1)) - set(numbers.tolist()) == expected_dropped
            if name != "train":
                src_text, ref_text = split.text("src"), split.text("ref")
                assert len(src_text) == len(ref_text) == len(split)
            for k, n in enumerate(numbers.tolist()):
                s, t = pairs[n - 1][0].strip(), pairs[n - 1][1].strip()
                # the stored ids are those of line n on both sides (cut to MAX_LEN in valid/test)
                assert split.get("src", k).tolist() == ds.src_vocab.encode([s])[0][:MAX_LEN]
                assert split.get("tgt", k).tolist() == ds.tgt_vocab.encode([t])[0][:MAX_LEN]
                assert f"p{n - 1}" in s and f"q{n - 1}" in t
                if name != "train":
                    assert src_text[k] == s and ref_text[k] == t
