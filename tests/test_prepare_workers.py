"""`structnmt prepare --workers N`: the splits encoded (parsed, trees read and aligned) in N processes over
contiguous shards give the dataset of one process, byte for byte; bad input in any shard is one sentence
naming the file's own line, and leaves nothing behind."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
from pathlib import Path

import pytest
from conftest import assert_user_error, cli

import structnmt.data.prepare as prepare_module
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.shards import _Marks, plan_shards
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.experiment.runner import dataset_fingerprint
from structnmt.fileio.corpus import CorpusError, LinePosition, read_lines
from structnmt.syntax.io import (
    TreeFormatError,
    _conllu_starts,
    read_conllu,
    read_ptb,
    tree_positions,
)
from structnmt.syntax.parsers import ParserConfig, ParserError

WORDS = "the a red green cat dog sees chases under over with quickly".split()


def _quiet(*_):
    pass


@pytest.fixture(autouse=True)
def _cpus_for_every_worker(monkeypatch):
    """As many CPUs as the tests ask for workers: prepare caps --workers at the CPUs (tests/test_worker_caps.py),
    and these tests are about 2 and 3 shards on any machine."""
    import structnmt.machine.device as device

    monkeypatch.setattr(device, "usable_cores", lambda: 8)


def _synth(root: Path, n_train: int = 100, n_eval: int = 10) -> Path:
    """The synthetic grammar's corpus with its gold trees (CoNLL-U and brackets); train line 7's target
    emptied (its pair dropped, its tree still read)."""
    corpus = root / "corpus"
    write_corpus(SynthConfig(seed=5, n_train=n_train, n_valid=n_eval, n_test=n_eval), corpus)
    tgt = (corpus / "train.tgt").read_text(encoding="utf-8").split("\n")
    tgt[6] = ""
    (corpus / "train.tgt").write_text("\n".join(tgt), encoding="utf-8")
    return corpus


def _synth_cfg(corpus: Path, *, eval_splits: bool = False, **kw) -> PrepareConfig:
    extra = {"validpref": str(corpus / "valid"), "testprefs": [str(corpus / "test")]} if eval_splits else {}
    kw.setdefault("parser", ParserConfig(name="synthetic"))
    return PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"), vocab_size=120,
                         max_len=40, **extra, **kw)


def _contents(out: Path) -> tuple[dict[str, bytes], dict]:
    """Every file of a prepared directory (the manifest parsed, without its timing) and the manifest."""
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "manifest.json"}
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    del manifest["seconds"]
    return files, manifest


def _assert_same_dataset(a: Path, b: Path) -> None:
    files_a, manifest_a = _contents(a)
    files_b, manifest_b = _contents(b)
    assert sorted(files_a) == sorted(files_b)
    for name in files_a:
        assert files_a[name] == files_b[name], name
    assert manifest_a == manifest_b
    assert dataset_fingerprint(a) == dataset_fingerprint(b)


def _leftovers(root: Path) -> list[str]:
    """What a prepare of ``root/out`` left: the dataset, its temporary directories and lock files."""
    return sorted(p.name for p in root.iterdir() if p.name == "out" or p.name.startswith(".out"))


def test_given_trees_give_the_same_dataset_with_2_and_3_workers(tmp_path):
    corpus = _synth(tmp_path)
    cfg = _synth_cfg(corpus, eval_splits=True)
    shards = plan_shards(corpus / "train.src", corpus / "train.tgt", 3,
                         tree_files={"dependency": corpus / "train.src.conllu",
                                     "constituency": corpus / "train.src.tree"})
    assert [s.lines for s in shards] == [33, 34, 33]  # 100 lines: 3 shards of unequal size
    assert shards[1].trees.positions["constituency"].at.line == 34
    one = prepare(cfg, tmp_path / "w1", workers=1, progress=False, log=_quiet)
    train = one["counts"]["train"]
    assert train["dropped_empty"] == 1 and train["dropped_too_long"] > 10 and train["kept"] > 50
    for workers in (2, 3):
        prepare(cfg, tmp_path / f"w{workers}", workers=workers, progress=False, log=_quiet)
        _assert_same_dataset(tmp_path / "w1", tmp_path / f"w{workers}")
    assert not [p for p in (tmp_path / "w3").iterdir() if p.name.startswith(".")]  # no shard directory stays


def test_the_command_line_takes_workers(tmp_path, capsys):
    corpus = _synth(tmp_path, n_train=40)
    prepare(_synth_cfg(corpus), tmp_path / "api", progress=False, log=_quiet)
    code, out, err = cli(capsys, "prepare", "-s", "src", "-t", "tgt", "--trainpref", corpus / "train",
                         "--destdir", tmp_path / "cli", "--vocab-size", 120, "--max-len", 40,
                         "--parser", "synthetic", "--workers", 2, "--no-progress")
    assert code == 0, err
    _assert_same_dataset(tmp_path / "api", tmp_path / "cli")


def test_workers_with_spacy_processes_are_refused(tmp_path, capsys):
    corpus = _synth(tmp_path, n_train=20)
    code, _, err = cli(capsys, "prepare", "-s", "src", "-t", "tgt", "--trainpref", corpus / "train",
                       "--destdir", tmp_path / "out", "--parser", "spacy", "--workers", 2, "--spacy-processes", 2)
    assert_user_error(code, err, "--workers 2 with --spacy-processes 2", "--workers alone")
    assert _leftovers(tmp_path) == []


def _conllu_corpus(root: Path, n: int = 45) -> str:
    """A corpus whose trees are CoNLL-U only (comments, blank lines between sentences, a gzip source), with
    an empty source line (no tree) and a tree whose words are not in its line (dropped as unaligned)."""
    rng = random.Random(3)
    src, tgt, blocks = [], [], []
    for i in range(n):
        if i == 20:
            src.append("")
            tgt.append("nothing here")
            continue
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))] + ["."]
        src.append(" ".join(words[:-1]) + ".")
        tgt.append(" ".join(reversed(words)))
        forms = ["zzz"] * len(words) if i == 30 else words
        rows = [f"{k + 1}\t{w}\t_\tX\t_\t_\t{0 if k == 0 else 1}\t{'root' if k == 0 else 'dep'}\t_\t_"
                for k, w in enumerate(forms)]
        blocks.append("\n".join([f"# sent_id = {i}", *rows]) + "\n\n" + ("\n" if i % 4 == 0 else ""))
    root.mkdir(parents=True, exist_ok=True)
    with gzip.open(root / "train.en.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(src) + "\n")
    (root / "train.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    (root / "train.en.conllu").write_text("".join(blocks), encoding="utf-8")
    return str(root / "train")


def test_conllu_trees_and_a_gzip_source_give_the_same_dataset(tmp_path):
    pref = _conllu_corpus(tmp_path / "c")
    cfg = PrepareConfig(source_lang="en", target_lang="de", trainpref=pref, vocab_size=60,
                        parser=ParserConfig(name="file", dependency_file="{prefix}.{lang}.conllu"))
    one = prepare(cfg, tmp_path / "w1", progress=False, log=_quiet)
    assert one["counts"]["train"]["first_unaligned_lines"] == [31]
    assert one["counts"]["train"]["dropped_empty"] == 1
    prepare(cfg, tmp_path / "w3", workers=3, progress=False, log=_quiet)
    _assert_same_dataset(tmp_path / "w1", tmp_path / "w3")


def test_spacy_parses_give_the_same_dataset_with_2_workers(tmp_path):
    rng = random.Random(8)
    nouns, verbs = ["cat", "dog", "girl", "man", "ball", "tree"], ["sees", "chases", "likes", "finds"]
    src = [f"The {rng.choice(nouns)} {rng.choice(verbs)} a {rng.choice(nouns)} near the {rng.choice(nouns)}."
           for _ in range(27)]
    (tmp_path / "train.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("\n".join(s.lower() for s in src) + "\n", encoding="utf-8")
    cfg = PrepareConfig(source_lang="en", target_lang="de", trainpref=str(tmp_path / "train"), vocab_size=60,
                        parser=ParserConfig(name="spacy", batch_size=4))
    shards = plan_shards(tmp_path / "train.en", tmp_path / "train.de", 2, grain=4)
    assert [s.src.line for s in shards] == [1, 13]  # a shard begins at one of spaCy's batches
    prepare(cfg, tmp_path / "w1", progress=False, log=_quiet)
    prepare(cfg, tmp_path / "w2", workers=2, progress=False, log=_quiet)
    _assert_same_dataset(tmp_path / "w1", tmp_path / "w2")


def _error_of(cfg: PrepareConfig, out: Path, workers: int) -> Exception:
    with pytest.raises((CorpusError, ParserError, TreeFormatError)) as info:
        prepare(cfg, out, workers=workers, progress=False, log=_quiet)
    return info.value


def test_a_bad_tree_in_the_second_shard_names_its_line_in_the_file(tmp_path):
    corpus = _synth(tmp_path / "data")
    lines = (corpus / "train.src.conllu").read_text(encoding="utf-8").split("\n")
    firsts = [k for k, line in enumerate(lines) if line.startswith("1\t")]
    bad = firsts[80] + 1  # the second word of the 81st sentence: in the second of 2 shards
    cols = lines[bad].split("\t")
    cols[6] = "99"
    lines[bad] = "\t".join(cols)
    (corpus / "train.src.conllu").write_text("\n".join(lines), encoding="utf-8")
    cfg = _synth_cfg(corpus)
    errors = [_error_of(cfg, tmp_path / "out", workers) for workers in (1, 2)]
    assert type(errors[0]) is type(errors[1]) is TreeFormatError
    assert str(errors[0]) == str(errors[1])
    assert f"train.src.conllu, line {bad + 1}: HEAD 99 is out of range" in str(errors[1])
    assert _leftovers(tmp_path) == []


def test_a_target_shorter_in_a_later_shard_is_refused_before_any_work(tmp_path):
    corpus = _synth(tmp_path / "data")
    valid = (corpus / "valid.tgt").read_text(encoding="utf-8").split("\n")
    (corpus / "valid.tgt").write_text("\n".join(valid[:-2]) + "\n", encoding="utf-8")  # 9 lines of 10
    cfg = _synth_cfg(corpus, eval_splits=True)
    errors = [str(_error_of(cfg, tmp_path / "out", workers)) for workers in (1, 2)]
    assert errors[0] == errors[1]
    assert "valid.src has 10 lines but" in errors[1] and "valid.tgt has 9" in errors[1]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("fix", ["drop the last tree", "add a tree"])
def test_a_tree_file_of_another_count_is_refused(tmp_path, fix):
    corpus = _synth(tmp_path / "data")
    trees = (corpus / "train.src.tree").read_text(encoding="utf-8").splitlines()
    trees = trees[:-1] if fix == "drop the last tree" else [*trees, trees[0]]
    (corpus / "train.src.tree").write_text("\n".join(trees) + "\n", encoding="utf-8")
    cfg = _synth_cfg(corpus)
    errors = [str(_error_of(cfg, tmp_path / "out", workers)) for workers in (1, 3)]
    assert errors[0] == errors[1]
    assert f"train.src.tree has {len(trees)} trees but the corpus has 100 non-empty source lines" in errors[1]
    assert _leftovers(tmp_path) == []


def _killed_in_second_shard(job, advance):
    """A shard's process that dies without a word in the second shard (as one the system kills)."""
    if job.shard.index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return prepare_module._encode_shard(job, *_built(job), advance)


def _built(job):
    from structnmt.data.vocab import Vocab
    from structnmt.syntax.parsers import build_parser

    return {side: Vocab(path, **options) for side, (path, options) in job.vocabs.items()}, build_parser(job.cfg.parser)


def test_a_killed_worker_is_named_with_its_lines_and_leaves_nothing(tmp_path, monkeypatch):
    corpus = _synth(tmp_path / "data")
    monkeypatch.setattr(prepare_module, "_encode_shard_process", _killed_in_second_shard)
    with pytest.raises(CorpusError) as info:
        prepare(_synth_cfg(corpus), tmp_path / "out", workers=2, progress=False, log=_quiet)
    message = str(info.value)
    assert message.startswith(f"{corpus / 'train.src'}, lines 51-100: the process preparing these lines was killed")
    assert "SIGKILL" in message and "fewer --workers" in message
    assert _leftovers(tmp_path) == []


def test_tree_positions_start_the_readers_at_any_tree(tmp_path):
    ptb = tmp_path / "t.tree"
    ptb.write_text("(S (A a) (B b)) (S (C c))\n(S (D d)\n (E e)) (S (F f)) (S\n(G g))\n\n(S (H h))\n",
                   encoding="utf-8")
    conllu = tmp_path / "t.conllu"
    conllu.write_text("# c\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n\n\n1\ty\t_\t_\t_\t_\t0\troot\t_\t_\n"
                      "2\tz\t_\t_\t_\t_\t1\tdep\t_\t_\n \n# d\n1\tw\t_\t_\t_\t_\t0\troot\t_\t_\n", encoding="utf-8")
    for path, fmt, read, count in ((ptb, "ptb", lambda p, at: read_ptb(p, start=at), 6),
                                   (conllu, "conllu", lambda p, at: read_conllu(p, at), 3)):
        every = [t.words for t in read(path, None)]
        positions, n = tree_positions(path, fmt, range(count))
        assert n == count == len(every)
        for k, at in positions.items():
            assert [t.words for t in read(path, at)] == every[k:], (fmt, k)
    positions, _ = tree_positions(ptb, "ptb", [3, 5])
    assert (positions[3].at.line, positions[3].skip, positions[5].at.line) == (2, 1, 6)


@pytest.mark.parametrize("ending", ["\n1\tf\t_\t_\t_\t_\t0\troot\t_\t_", "   ", "\n\n"])
def test_conllu_sentences_are_found_block_by_block_as_the_reader_finds_them(tmp_path, ending):
    """Blank lines of white space (ASCII, a no-break space, an ideographic space, CR LF), a byte-order mark
    alone on line 1, a line of non-ASCII text, a file without a final newline; blocks of 1 to 7 bytes."""
    word = "1\t{}\t_\t_\t_\t_\t0\troot\t_\t_"
    text = "\n".join(["\ufeff", "", word.format("a"), "\xa0", " \u3000 \r", word.format("b"), "# \u00e9t\u00e9",
                      "", "", "# x", word.format("c"), "\u00e9", word.format("d"), " \t", word.format("e")]) + "\n"
    path = tmp_path / "t.conllu"
    path.write_text(text + ending, encoding="utf-8")
    lines = (text + ending).split("\n")
    blank = [not line.strip("\ufeff").strip() for line in lines]  # the reader's rule (line 1 without its mark)
    expected = [k + 1 for k in range(len(lines)) if not blank[k] and (k == 0 or blank[k - 1])]
    assert expected[:3] == [3, 6, 10] and len(expected) == 4 + ending.startswith("\n1")
    data = path.read_bytes()
    for block in (1, 2, 3, 5, 7, 1 << 22):
        starts = list(_conllu_starts(str(path), block))
        assert [line for _, line, _ in starts] == expected, block
        assert all(offset == sum(len(x) + 1 for x in data.split(b"\n")[:line - 1]) for offset, line, _ in starts)


def test_tree_positions_raise_the_readers_error_on_brackets_they_cannot_follow(tmp_path):
    path = tmp_path / "t.tree"
    for text in ("(S (A a))\n(S (B b)))\n", "(S (A a))\n(S (B b)\n(S (C c))\n"):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(TreeFormatError) as scanned:
            tree_positions(path, "ptb", [1])
        with pytest.raises(TreeFormatError) as read:
            list(read_ptb(path))
        assert str(scanned.value) == str(read.value)


def test_reading_from_a_line_numbers_lines_as_the_whole_file(tmp_path):
    path = tmp_path / "f.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"one\ntwo\nthree\nbad \xff\n")
    lines = read_lines(path, LinePosition(4, 2))
    assert [next(lines), next(lines)] == ["two", "three"]
    with pytest.raises(CorpusError, match="line 4"):
        list(read_lines(path, LinePosition(8, 3)))


def test_marks_stay_bounded_and_on_their_stride():
    marks = _Marks(stride=3, keep=4)
    for index in range(500):
        marks.add(index, offset=10 * index, line=index + 1)
    assert marks.stride == 3 * 2 ** 5 and len(marks.found) <= 8
    assert all(i % marks.stride == 0 and at.line == i + 1 for i, at in marks.found.items())
    assert list(marks.found) == list(range(0, 500, marks.stride))


def test_a_shard_whose_prepare_died_stops_at_its_next_progress_count(tmp_path, monkeypatch):
    import multiprocessing

    from structnmt.data import shards

    class Dead:
        def is_alive(self):
            return False

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: Dead())
    reached = []

    def target(job, advance):
        advance(1)
        reached.append("after")  # not reached: the parent is gone
        return job

    try:
        with pytest.raises(SystemExit):
            shards._shard_main(target, "job", tmp_path, [0], 0)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert reached == [] and not any(tmp_path.iterdir())  # no result written for nobody
