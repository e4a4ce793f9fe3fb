"""Property: ``prepare`` keeps pair i's source with pair i's target, and counts every drop.

Hypothesis writes random parallel corpora (train, valid and test) whose lines hold
random words, control characters and odd separators inside lines (``\\r`` alone,
``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1f``, ``\\x85``, ``\\xa0``, ``\\u2028``, ``\\u2029``,
``\\u3000``, tabs, NUL, zero-width and other characters SentencePiece removes), CRLF
endings on some lines, a last line with or without its newline, empty,
whitespace-only and invisible-only lines on either side, and lines over ``max_len``
pieces. Every pair carries the marker ``z{n}z`` (n = its 1-based line number) on both
sides, and the target is a function of the source (its words reversed and upper-cased),
so a stored pair can be traced back to its input line and its two sides to each other.
Vocabulary (joint or not, BPE or unigram, 60-200 pieces), ``max_len``, ``chunk``,
``eval_too_long`` and plain or gzip files are drawn too.

Checked for every split: the manifest's ``lines`` is the number of ``\\n``-terminated
lines (plus an unterminated last one), ``kept`` plus every ``dropped_*`` count is
``lines``; ``{split}.lines`` maps every kept pair to its input line, whose stripped
source and target encode to exactly the stored ids (cut to ``max_len`` for a truncated
valid/test pair) and whose markers the decoded ids carry; valid/test text files hold
the stripped raw lines; and the dropped lines are exactly those empty after
``str.strip()`` on either side or (train, or ``eval_too_long="drop"``) over ``max_len``.
"""

from __future__ import annotations

import gzip
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structnmt.data.dataset import PreparedDataset
from structnmt.data.prepare import PrepareConfig, prepare

LETTERS = "abcdefghéüç日本"  # source words; target words are upper case (digits and z belong to markers)
# odd characters inside lines: Python whitespace that is not a line break for prepare...
SPACES = "\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000\t "
# ...and characters that are not whitespace for str.strip() but that SentencePiece drops or does not know
INVISIBLE = "\x00\x01\x7f\u200b\ufeff\xad"
MARKER = re.compile(r"z(\d+)z")


@dataclass
class Side:
    text: str  # the line without its ending
    kind: str  # "words" (marker + words) | "blank" (empty after strip) | "invisible"
    ending: str  # "\n" | "\r\n"


def marker(n: int) -> str:
    return f"z{n}z"


def _join(draw, tokens: list[str]) -> str:
    """Tokens joined by a space or a run of odd characters, with odd characters around."""
    odd = st.text(alphabet=SPACES + INVISIBLE, min_size=1, max_size=3)
    seps = [draw(st.one_of(st.just(" "), odd)) for _ in tokens[1:]]
    text = tokens[0] + "".join(s + t for s, t in zip(seps, tokens[1:]))
    around = st.text(alphabet=SPACES + INVISIBLE, max_size=3)
    return draw(around) + text + draw(around)


@st.composite
def pair_sides(draw, n: int) -> tuple[Side, Side]:
    """Source and target line number ``n``: the target's words are the source's, reversed
    and upper-cased; either side may instead be blank or invisible."""
    words = draw(st.lists(st.text(alphabet=LETTERS, min_size=1, max_size=5), max_size=14))
    src_tokens = list(words)
    tgt_tokens = [w.upper() for w in reversed(words)]
    src_tokens.insert(draw(st.integers(0, len(src_tokens))), marker(n))
    tgt_tokens.insert(draw(st.integers(0, len(tgt_tokens))), marker(n))
    sides = []
    for tokens in (src_tokens, tgt_tokens):
        kind = draw(st.sampled_from(["words"] * 6 + ["blank", "invisible"]))
        if kind == "words":
            text = _join(draw, tokens)
        elif kind == "blank":
            text = draw(st.text(alphabet=SPACES, max_size=4))
        else:
            text = draw(st.text(alphabet=INVISIBLE, min_size=1, max_size=3))
        sides.append(Side(text, kind, draw(st.sampled_from(["\n", "\r\n"]))))
    return sides[0], sides[1]


@st.composite
def corpus(draw, min_size: int, max_size: int, *, coverage: bool) -> list[tuple[Side, Side]]:
    """Pairs of one split. One pair is only its marker (so every split keeps a pair);
    with ``coverage``, one pair holds every letter and digit (so the vocabulary learnt
    from this split knows every character the other splits use)."""
    size = draw(st.integers(min_size, max_size))
    safe = draw(st.integers(0, size))
    special = {safe: "safe"}
    if coverage:
        at = draw(st.integers(0, size))
        special[at + (at >= safe)] = "coverage"
    pairs = []
    for i in range(size + len(special)):
        n = i + 1
        if special.get(i) == "safe":
            pairs.append((Side(marker(n), "words", "\n"), Side(marker(n), "words", "\n")))
        elif special.get(i) == "coverage":
            pairs.append((Side(f"{marker(n)} {LETTERS} 0123456789", "words", "\n"),
                          Side(f"{marker(n)} 0123456789 {LETTERS.upper()}", "words", "\n")))
        else:
            pairs.append(draw(pair_sides(n)))
    return pairs


def write_side(path: Path, sides: list[Side], final_newline: bool, gz: bool) -> Path:
    data = "".join(s.text + s.ending for s in sides)
    if not final_newline and sides[-1].text:  # an empty last line without its newline is no line at all
        data = data[: -len(sides[-1].ending)]
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data.encode("utf-8")))
    else:
        path.write_bytes(data.encode("utf-8"))
    return path


def file_lines(path: Path) -> list[str]:
    """The lines of a file as prepare must see them: only b"\\n" ends a line, and a byte-order mark at the start of
    the file is not part of its text (every reader removes it)."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    out = [line.decode("utf-8") for line in lines]
    if out and out[0].startswith("\ufeff"):
        out[0] = out[0][1:]
    return out


def markers(text: str) -> list[int]:
    return [int(m) for m in MARKER.findall(text)]


def letters(text: str) -> Counter:
    return Counter(c for c in text.lower() if c in LETTERS)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(train=corpus(5, 40, coverage=True), valid=corpus(1, 15, coverage=False), test=corpus(1, 15, coverage=False),
       final_newline=st.tuples(st.booleans(), st.booleans()), max_len=st.integers(5, 30),
       vocab_size=st.integers(60, 200), model_type=st.sampled_from(["bpe", "unigram"]), joint=st.booleans(),
       eval_too_long=st.sampled_from(["truncate", "drop"]), chunk=st.integers(1, 12),
       gz=st.fixed_dictionaries({name: st.booleans() for name in ("train", "valid", "test")}))
def test_prepare_keeps_pairs_aligned_and_counts_every_drop(train, valid, test, final_newline, max_len, vocab_size,
                                                           model_type, joint, eval_too_long, chunk, gz):
    splits = {"train": train, "valid": valid, "test": test}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        files = {}
        for name, pairs in splits.items():
            files[name] = (write_side(root / f"{name}.src", [s for s, _ in pairs], final_newline[0], gz[name]),
                           write_side(root / f"{name}.tgt", [t for _, t in pairs], final_newline[1], gz[name]))
        cfg = PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "train"),
                            validpref=str(root / "valid"), testprefs=[str(root / "test")], joint_vocab=joint,
                            vocab_size=vocab_size, model_type=model_type, max_len=max_len,
                            eval_too_long=eval_too_long, chunk=chunk)
        manifest = prepare(cfg, root / "bin", progress=False, log=lambda *_: None)
        ds = PreparedDataset(root / "bin")
        src_vocab, tgt_vocab = ds.src_vocab, ds.tgt_vocab
        for name, pairs in splits.items():
            src_lines, tgt_lines = file_lines(files[name][0]), file_lines(files[name][1])
            assert len(src_lines) == len(tgt_lines) == len(pairs)  # (the generator's own invariant)
            counts = manifest["counts"][name]
            dropped = {k: v for k, v in counts.items() if k.startswith("dropped_")}
            assert counts["lines"] == len(pairs), (name, counts)
            assert counts["kept"] + sum(dropped.values()) == counts["lines"], (name, counts)

            split = ds.split(name)
            numbers = np.fromfile(root / "bin" / f"{name}.lines", dtype=np.int64).tolist()
            assert len(numbers) == len(split) == counts["kept"], (name, counts)
            assert numbers == sorted(set(numbers)) and all(1 <= n <= len(pairs) for n in numbers), (name, numbers)
            if name != "train":
                src_text, ref_text = split.text("src"), split.text("ref")
                assert len(src_text) == len(ref_text) == len(split), name

            # every kept pair k is input line n = numbers[k], on both sides
            truncated = 0
            for k, n in enumerate(numbers):
                src_side, tgt_side = pairs[n - 1]
                s, t = src_lines[n - 1].strip(), tgt_lines[n - 1].strip()
                assert s and t, (name, n, s, t)
                src_ids, tgt_ids = src_vocab.encode([s])[0], tgt_vocab.encode([t])[0]
                assert src_ids and tgt_ids, (name, n, s, t)  # a side without pieces is dropped
                too_long = len(src_ids) > max_len or len(tgt_ids) > max_len
                assert not too_long or (name != "train" and eval_too_long == "truncate"), (name, n)
                truncated += too_long
                stored_src, stored_tgt = split.get("src", k).tolist(), split.get("tgt", k).tolist()
                assert stored_src == src_ids[:max_len], (name, k, n, s)
                assert stored_tgt == tgt_ids[:max_len], (name, k, n, t)
                if not too_long:
                    dec_src, dec_tgt = src_vocab.decode(stored_src), tgt_vocab.decode(stored_tgt)
                    for side, dec in ((src_side, dec_src), (tgt_side, dec_tgt)):
                        assert markers(dec) == ([n] if side.kind == "words" else []), (name, k, n, dec)
                    if src_side.kind == tgt_side.kind == "words":  # the target is the source's words reversed
                        assert letters(dec_src) == letters(dec_tgt), (name, k, n, dec_src, dec_tgt)
                if name != "train":  # the raw text of line n, whole
                    assert src_text[k] == s and ref_text[k] == t, (name, k, n)
            assert counts.get("truncated_too_long", 0) == truncated, (name, counts)
            assert int(split.src_lens.sum()) == counts["src_tokens"] and int(split.tgt_lens.sum()) == counts["tgt_tokens"]
            assert len(split) == 0 or max(split.src_lens.max(), split.tgt_lens.max()) <= max_len

            # the dropped lines are exactly the empty ones and (where they are dropped) the over-long ones
            empty, too_long, no_pieces = [], [], []
            for n, (src, tgt) in enumerate(zip(src_lines, tgt_lines), start=1):
                s, t = src.strip(), tgt.strip()
                if not s or not t:
                    empty.append(n)
                elif not src_vocab.encode([s])[0] or not tgt_vocab.encode([t])[0]:
                    no_pieces.append(n)
                elif (name == "train" or eval_too_long == "drop") and (
                        len(src_vocab.encode([s])[0]) > max_len or len(tgt_vocab.encode([t])[0]) > max_len):
                    too_long.append(n)
            assert set(range(1, len(pairs) + 1)) - set(numbers) == set(empty) | set(too_long) | set(no_pieces), name
            assert counts["dropped_no_pieces"] == len(no_pieces), (name, counts)
            assert counts["first_no_pieces_lines"] == no_pieces[:10], (name, counts)
            assert counts["dropped_empty"] == len(empty) and counts["first_empty_lines"] == empty[:10], (name, counts)
            assert counts["dropped_too_long"] == len(too_long), (name, counts)
