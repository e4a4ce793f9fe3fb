"""Streaming translation (structnmt.decode.stream): the input read a chunk at a time and written in input
order, memory bounded by the chunk, and --resume after an interruption (docs/large_data.md)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from conftest import assert_user_error, cli

from structnmt.cli.training import train
from structnmt.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.decode import stream
from structnmt.decode.stream import ChunkResult, StreamOptions, run_stream
from structnmt.decode.translate import Translator
from structnmt.errors import UserError
from structnmt.fileio.resumable import partial_paths
from structnmt.syntax.batching import StructureSpec
from structnmt.syntax.parsers import ParserConfig


def _train(save: Path, data: Path, structures: dict | None = None) -> Path:
    train(Config(data=DataConfig(path=str(data), max_tokens=600, structures=structures or {}),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(save), max_updates=4, validate_interval_updates=4, warmup_updates=1,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=2, max_len_b=4)), log=lambda *_: None)
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def plain(synth_data, tmp_path_factory) -> tuple[Path, Path]:
    """(a Transformer trained for 4 updates, an input of 60 lines with two blank ones and a repeated block)."""
    root = tmp_path_factory.mktemp("stream")
    lines = (synth_data.parent / "corpus" / "test.src").read_text().splitlines()
    lines[7] = ""
    lines[30] = "   "
    (root / "in.txt").write_text("\n".join(lines + lines[:13]) + "\n")
    return _train(root / "run", synth_data), root / "in.txt"


def _translate(capsys, ckpt, src, out, *extra):
    return cli(capsys, "translate", "--checkpoint", ckpt, "--input", src, "--output", out, "--no-progress",
               "--workers", "1", *extra)


def test_chunks_give_what_one_call_gives_and_line_numbers_stay_the_input_s(plain, tmp_path, capsys):
    ckpt, src = plain
    lines = src.read_text().splitlines()
    whole = Translator(ckpt, workers=1).translate(lines)
    for chunk_batches in ("1", "3", "100"):  # 4, 12 and every line a chunk (batches of 4)
        out = tmp_path / f"out{chunk_batches}.txt"
        code, _, err = _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", chunk_batches)
        assert code == 0, err
        got = out.read_text().splitlines()
        assert got == [w[0].text for w in whole]
        assert got[7] == "" and got[30] == ""
        assert not any(p.exists() for p in partial_paths(out))
    # n-best lines carry the input line's own 0-based number, in every chunk
    out = tmp_path / "nbest.txt"
    code, _, err = _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "1", "--nbest", "2")
    assert code == 0, err
    numbers = [int(line.split(" ||| ")[0]) for line in out.read_text().splitlines()]
    assert numbers == sorted(numbers) and numbers[-1] == len(lines) - 1 and len(set(numbers)) == len(lines)


def test_over_long_lines_are_reported_by_their_input_line_across_chunks(plain, tmp_path, capsys):
    ckpt, src = plain
    lines = src.read_text().splitlines()
    lines[41] = " ".join(["w"] * 1100)  # over the model's positions, in the 11th chunk of 4 lines
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    code, _, err = _translate(capsys, ckpt, tmp_path / "in.txt", tmp_path / "out.txt", "--batch-size", "4",
                              "--chunk-batches", "1")
    assert code == 0, err
    assert "1 input line(s) longer than model.max_positions" in err and "line 42." in err
    assert (tmp_path / "out.txt").read_text().splitlines()[41] == ""


def test_workers_give_the_same_bytes_as_one_process(plain, tmp_path, capsys):
    ckpt, src = plain
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    assert _translate(capsys, ckpt, src, one, "--batch-size", "2", "--chunk-batches", "4")[0] == 0
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", src, "--output", two, "--no-progress",
                       "--workers", "2", "--batch-size", "2", "--chunk-batches", "4")
    assert code == 0, err
    assert one.read_bytes() == two.read_bytes()


class _Stop(KeyboardInterrupt):
    pass


def _interrupt_at_chunk(monkeypatch, k: int) -> None:
    """Ctrl-C while the k-th chunk (1-based) is being translated."""
    calls = {"n": 0}
    real = Translator.translate

    def translate(self, lines, *a, **kw):
        calls["n"] += 1
        if calls["n"] == k:
            raise _Stop()
        return real(self, lines, *a, **kw)

    monkeypatch.setattr(Translator, "translate", translate)


def test_an_interrupted_run_keeps_complete_lines_and_resume_finishes_it_byte_for_byte(plain, tmp_path, capsys,
                                                                                      monkeypatch):
    ckpt, src = plain
    opts = ("--batch-size", "4", "--chunk-batches", "2")  # chunks of 8 lines
    ref = tmp_path / "ref.txt"
    assert _translate(capsys, ckpt, src, ref, *opts)[0] == 0
    out = tmp_path / "out.txt"
    partial, record = partial_paths(out)
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 4)
        code, _, err = _translate(capsys, ckpt, src, out, *opts)
    assert code != 0 and not out.exists()
    assert partial.read_text() == "".join(ref.read_text().splitlines(keepends=True)[:24])  # 3 chunks, whole lines
    assert json.loads(record.read_text())["input_lines"] == 24
    # run again without --resume: refused, nothing lost
    code, _, err = _translate(capsys, ckpt, src, out, *opts)
    assert_user_error(code, err, str(partial), "add --resume")
    # a chunk being written when the process was killed: a half line after the recorded part is cut
    with open(partial, "a", encoding="utf-8") as f:
        f.write("half a li")
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert code == 0, err
    assert "resumed after line 24" in err
    assert out.read_bytes() == ref.read_bytes()
    assert not partial.exists() and not record.exists()
    # nothing left to resume: one sentence
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, "no interrupted run writing", "it is complete", "drop --resume")


def test_resume_refuses_another_input_checkpoint_options_or_a_changed_output(plain, tmp_path, capsys, monkeypatch,
                                                                            synth_data):
    ckpt, src = plain
    opts = ("--batch-size", "4", "--chunk-batches", "2")
    out = tmp_path / "out.txt"
    partial, record = partial_paths(out)
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 3)
        assert _translate(capsys, ckpt, src, out, *opts)[0] != 0
    kept = partial.read_bytes()
    lines = src.read_text().splitlines()
    changed = tmp_path / "changed.txt"
    changed.write_text("\n".join(["other words"] + lines[1:]) + "\n")
    code, _, err = _translate(capsys, ckpt, changed, out, *opts, "--resume")
    assert_user_error(code, err, "--resume", "does not begin with the 16 lines already done")
    short = tmp_path / "short.txt"
    short.write_text("\n".join(lines[:10]) + "\n")
    code, _, err = _translate(capsys, ckpt, short, out, *opts, "--resume")
    assert_user_error(code, err, "has 10 lines, fewer than the 16")
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume", "--beam", "3")
    assert_user_error(code, err, "other settings (decode)")
    code, _, err = _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "3", "--resume")
    assert_user_error(code, err, "other settings (chunk_lines)")
    other = _train(tmp_path / "other", synth_data)
    code, _, err = _translate(capsys, other, src, out, *opts, "--resume")
    assert_user_error(code, err, "another checkpoint")
    assert partial.read_bytes() == kept  # every refusal leaves the interrupted run as it was
    partial.write_bytes(kept.replace(b"\n", b" x\n", 1))
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, "is not what the interrupted run wrote")
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", src, "--resume", "--no-progress")
    assert_user_error(code, err, "--resume goes on with an interrupted --output FILE")


def test_memory_is_bounded_by_the_chunk_the_input_is_read_as_it_goes():
    """The input is read lazily: when a chunk is translated, no line past it has been read, and each chunk's
    output is written before the next chunk is read."""
    read = {"n": 0}
    events = []

    def lines():
        for i in range(1, 10_001):
            read["n"] = i
            yield f"line {i}"

    def chunk(texts, first):
        assert first == 256 * len(events)
        events.append(("translate", len(texts), read["n"]))
        return ChunkResult([[type("H", (), {"text": t.upper(), "score": 0.0})()] for t in texts])

    written = []
    opts = StreamOptions(input=None, output=None, checkpoint="-", settings={}, chunk_lines=256, progress=False)
    got = []
    summary = stream.translate_stream(chunk, lines(), chunk_lines=opts.chunk_lines, nbest=1,
                                      write=lambda text, src, notes: (written.append(read["n"]), got.append(text)))
    assert summary.lines == 10_000 and len(events) == 40
    assert all(size <= 256 and seen <= 256 * (k + 1) for k, (_, size, seen) in enumerate(events))
    assert written == [min(256 * (k + 1), 10_000) for k in range(40)]
    assert "".join(got).splitlines()[-1] == "LINE 10000"


def test_standard_output_gets_each_chunk_as_it_is_done(capsys):
    def chunk(texts, first):
        return ChunkResult([[type("H", (), {"text": t[::-1], "score": 0.0})()] for t in texts])

    opts = StreamOptions(input="-", output=None, checkpoint="-", settings={}, chunk_lines=2, progress=False)
    summary = run_stream(chunk, opts, lambda path: iter(["ab", "", "cd"]))
    assert summary.lines == 3 and capsys.readouterr().out == "ba\n\ndc\n"


@pytest.fixture(scope="module")
def tree_model(tmp_path_factory) -> tuple[Path, Path]:
    """A model reading dependency trees from files (parser 'synthetic'), and the corpus directory."""
    root = tmp_path_factory.mktemp("trees")
    write_corpus(SynthConfig(seed=2, n_train=300, n_valid=20, n_test=20), root / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                          validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")], vocab_size=300,
                          parser=ParserConfig(name="synthetic")), root / "bin", progress=False, log=lambda *_: None)
    return _train(root / "model", root / "bin", {"dep": StructureSpec("dep_mask")}), root / "c"


def test_a_model_reading_tree_files_takes_its_trees_in_step_across_chunks_and_on_resume(tree_model, tmp_path,
                                                                                        capsys, monkeypatch):
    ckpt, corpus = tree_model
    src, trees = corpus / "test.src", ["--parse-dependency", corpus / "test.src.conllu"]
    ref = tmp_path / "ref.txt"
    assert _translate(capsys, ckpt, src, ref, *trees, "--chunk-batches", "100")[0] == 0
    out = tmp_path / "out.txt"
    code, _, err = _translate(capsys, ckpt, src, out, *trees, "--batch-size", "2", "--chunk-batches", "2")
    assert code == 0, err
    assert out.read_text() == ref.read_text()
    resumed = tmp_path / "resumed.txt"
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 3)
        assert _translate(capsys, ckpt, src, resumed, *trees, "--batch-size", "2", "--chunk-batches", "2")[0] != 0
    code, _, err = _translate(capsys, ckpt, src, resumed, *trees, "--batch-size", "2", "--chunk-batches", "2",
                              "--resume")
    assert code == 0, err
    assert resumed.read_text() == ref.read_text()
    # a tree file with a tree too few, or one too many: one sentence, as without chunks
    conllu = (corpus / "test.src.conllu").read_text().strip().split("\n\n")
    (tmp_path / "few.conllu").write_text("\n\n".join(conllu[:-1]) + "\n\n")
    code, _, err = _translate(capsys, ckpt, src, tmp_path / "few.txt", "--parse-dependency", tmp_path / "few.conllu",
                              "--batch-size", "2", "--chunk-batches", "2")
    assert_user_error(code, err, "few.conllu has 19 trees but the input has more non-empty lines")
    (tmp_path / "many.conllu").write_text("\n\n".join(conllu + conllu[:1]) + "\n\n")
    code, _, err = _translate(capsys, ckpt, src, tmp_path / "many.txt", "--parse-dependency",
                              tmp_path / "many.conllu", "--batch-size", "2", "--chunk-batches", "2")
    assert_user_error(code, err, "many.conllu has 21 trees but the corpus has 20 non-empty source lines")
    assert not (tmp_path / "many.txt").exists()  # the check comes before the output is complete
    # resuming with other trees than the interrupted run read: refused
    changed = tmp_path / "changed.conllu"
    changed.write_text((corpus / "test.src.conllu").read_text().replace("\troot\t", "\tROOT\t", 1))
    again = tmp_path / "again.txt"
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 2)
        assert _translate(capsys, ckpt, src, again, *trees, "--batch-size", "2", "--chunk-batches", "2")[0] != 0
    code, _, err = _translate(capsys, ckpt, src, again, "--parse-dependency", changed, "--batch-size", "2",
                              "--chunk-batches", "2", "--resume")
    assert_user_error(code, err, "other settings (parse)")


def test_a_line_a_tree_model_cannot_truncate_is_named_by_its_input_line(tree_model, tmp_path, capsys):
    ckpt, corpus = tree_model
    lines = (corpus / "test.src").read_text().splitlines()
    lines[9] = " ".join(["w"] * 1100)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    code, _, err = _translate(capsys, ckpt, tmp_path / "in.txt", tmp_path / "out.txt", "--parse-dependency",
                              corpus / "test.src.conllu", "--batch-size", "2", "--chunk-batches", "2",
                              "--too-long", "truncate")
    assert_user_error(code, err, "line 10: cannot be truncated")


def test_a_pipe_as_input_is_read_once_and_translated_whole(plain, tmp_path, capsys):
    ckpt, src = plain
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(src.read_bytes()))
    writer.start()
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", fifo, "--output", tmp_path / "out.txt",
                       "--workers", "1", "--batch-size", "4", "--chunk-batches", "2")  # with a progress bar
    writer.join()
    assert code == 0, err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(src.read_text().splitlines())


def test_a_run_that_fails_before_its_first_chunk_is_done_leaves_nothing(plain, tmp_path, capsys, monkeypatch):
    ckpt, src = plain
    out = tmp_path / "out.txt"

    def refuse(self, lines, *a, **kw):
        raise UserError("this input cannot be translated")

    with monkeypatch.context() as m:
        m.setattr(Translator, "translate", refuse)
        code, _, err = _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "2")
    assert_user_error(code, err, "this input cannot be translated")
    assert not any(p.exists() for p in (out, *partial_paths(out)))
    assert _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "2")[0] == 0  # no --resume


def test_lines_reported_before_the_resume_point_are_reported_after_it(plain, tmp_path, capsys, monkeypatch):
    ckpt, src = plain
    lines = src.read_text().splitlines()
    lines[2] = " ".join(["w"] * 1100)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.txt"
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 3)
        assert _translate(capsys, ckpt, tmp_path / "in.txt", out, "--batch-size", "4", "--chunk-batches", "1")[0] != 0
    code, _, err = _translate(capsys, ckpt, tmp_path / "in.txt", out, "--batch-size", "4", "--chunk-batches", "1",
                              "--resume")
    assert code == 0, err
    assert "1 input line(s) longer than model.max_positions" in err and "line 3." in err


def test_a_device_output_is_written_in_place_and_cannot_be_resumed(plain, tmp_path, capsys):
    ckpt, src = plain
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", src, "--output", "/dev/null",
                       "--resume", "--no-progress")
    assert_user_error(code, err, "--resume goes on with an interrupted --output FILE (a file, not standard output")


def test_a_damaged_resume_record_is_one_sentence(plain, tmp_path, capsys, monkeypatch):
    ckpt, src = plain
    out = tmp_path / "out.txt"
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 2)
        assert _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "2")[0] != 0
    record = partial_paths(out)[1]
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "input_lines": "eight"}))
    code, _, err = _translate(capsys, ckpt, src, out, "--batch-size", "4", "--chunk-batches", "2", "--resume")
    assert_user_error(code, err, "not a record of an interrupted `structnmt translate`", "input_lines")


def _interrupted(capsys, monkeypatch, ckpt, src, out, *opts) -> tuple[bytes, str]:
    """An interrupted run into ``out`` (stopped in its 3rd chunk): its ``.partial`` bytes and its record's text."""
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 3)
        assert _translate(capsys, ckpt, src, out, *opts)[0] != 0
    partial, record = partial_paths(out)
    return partial.read_bytes(), record.read_text()


def test_resume_refuses_a_partial_file_or_record_that_is_a_link_or_not_a_regular_file(plain, tmp_path, capsys,
                                                                                       monkeypatch):
    """A link as FILE.partial would have the resumed run cut and append to the link's target, then rename the link
    over FILE; a fresh run refuses it (the name is taken), and so does --resume, writing nothing anywhere."""
    ckpt, src = plain
    opts = ("--batch-size", "4", "--chunk-batches", "2")
    out = tmp_path / "out.txt"
    partial, record = partial_paths(out)
    kept, _ = _interrupted(capsys, monkeypatch, ckpt, src, out, *opts)
    victim = tmp_path / "victim.txt"
    partial.rename(victim)
    partial.symlink_to(victim)
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, f"--resume: {partial} is a symbolic link", "remove it")
    assert victim.read_bytes() == kept and partial.is_symlink() and not out.exists()
    code, _, err = _translate(capsys, ckpt, src, out, *opts)  # as a fresh run refuses it
    assert_user_error(code, err, str(partial), "an interrupted `structnmt translate` is there")
    partial.unlink()
    victim.rename(partial)
    # the record as a link: its target would be replaced at every chunk
    elsewhere = tmp_path / "elsewhere.json"
    record.rename(elsewhere)
    record.symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, f"--resume: {record} is a symbolic link")
    assert elsewhere.read_bytes() == before and partial.read_bytes() == kept and not out.exists()
    record.unlink()
    elsewhere.rename(record)
    # a FIFO as the .partial file
    partial.rename(victim)
    os.mkfifo(partial)
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, f"--resume: {partial} is not a regular file")
    partial.unlink()
    victim.rename(partial)
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")  # the plain files: resumed
    assert code == 0, err
    assert len(out.read_text().splitlines()) == len(src.read_text().splitlines())


CHUNKS_OF_8 = ("--batch-size", "4", "--chunk-batches", "2")


@pytest.fixture(scope="module")
def interrupted(plain, tmp_path_factory) -> tuple[bytes, str]:
    """The ``.partial`` bytes and the record's text of a run in chunks of 8 lines stopped in its 3rd chunk."""
    from structnmt.cli import main

    ckpt, src = plain
    out = tmp_path_factory.mktemp("interrupted") / "out.txt"
    with pytest.MonkeyPatch.context() as m:
        _interrupt_at_chunk(m, 3)
        assert main(["translate", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out),
                     "--no-progress", "--workers", "1", *CHUNKS_OF_8]) != 0
    partial, record = partial_paths(out)
    assert json.loads(record.read_text())["input_lines"] == 16
    return partial.read_bytes(), record.read_text()


def _sha256(lines: list[str]) -> str:
    import hashlib

    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


@pytest.mark.parametrize(("edit", "says"), [
    ({"input_lines": -3, "input_sha256": "EMPTY"}, "field input_lines is -3, not a whole number >= 0"),
    ({"input_lines": 0, "input_sha256": "EMPTY"}, "hold 16 translation lines"),
    ({"input_lines": 8, "input_sha256": "FIRST8"}, "hold 16 translation lines"),
    ({"input_lines": True}, "field input_lines is true, not a whole number >= 0"),
    ({"output_bytes": -1}, "field output_bytes is -1, not a whole number >= 0"),
    ({"output_bytes": 2.5}, "field output_bytes is 2.5"),
    ({"input_sha256": "abc"}, "field input_sha256 is \"abc\", not a SHA-256 digest"),
    ({"model_sha256": 7}, "field model_sha256 is 7, not a SHA-256 digest"),
    ({"settings": []}, "field settings is [], not an object"),
    ({"version": "1"}, "field version is \"1\""),
    ({"notes": {"lines": 5000}}, "notes hold 'lines', which is not one of too_long"),
    ({"notes": {"add": 1}}, "notes hold 'add'"),
    ({"notes": {"too_long_count": -1}}, "notes too_long_count is -1"),
    ({"notes": {"too_long_count": 99}}, "notes too_long_count is 99, not a count of at most the 16 lines done"),
    ({"notes": {"too_long_count": 1, "too_long": [40]}}, "notes too_long is [40], not the first 1 of 1"),
    ({"notes": {"unaligned_count": 2, "unaligned": [3]}}, "notes unaligned is [3]"),
    ({"notes": {"unaligned_count": 2, "unaligned": [5, 3]}}, "notes unaligned is [5, 3]"),
    ({"notes": []}, "field notes is [], not an object"),
    ({"extra": 1}, "'extra' is not a field of the record"),
    ({"input": None}, "field input is null, not a text"),
], ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else None)
def test_resume_refuses_an_edited_record_in_one_sentence_naming_it(plain, interrupted, tmp_path, capsys, edit, says):
    """Every field of FILE.partial.json is checked for its type and range, and its counts against the .partial
    file, before any is used: never a traceback, never a wrong count or a line translated twice."""
    ckpt, src = plain
    out = tmp_path / "out.txt"
    partial, record = partial_paths(out)
    kept, text = interrupted
    partial.write_bytes(kept)
    lines = src.read_text().splitlines()
    hashes = {"EMPTY": _sha256([]), "FIRST8": _sha256(lines[:8])}
    data = {**json.loads(text), **{k: hashes.get(v, v) if isinstance(v, str) else v for k, v in edit.items()}}
    record.write_text(json.dumps(data))
    code, _, err = _translate(capsys, ckpt, src, out, *CHUNKS_OF_8, "--resume")
    assert_user_error(code, err, f"{record}: not a record of an interrupted `structnmt translate`", says,
                      "remove it and out.txt.partial to start over")
    assert partial.read_bytes() == kept and not out.exists()


def test_an_nbest_record_must_end_where_its_partial_file_ends(plain, tmp_path, capsys, monkeypatch):
    ckpt, src = plain
    opts = ("--batch-size", "4", "--chunk-batches", "2", "--beam", "2", "--nbest", "2")
    out = tmp_path / "out.txt"
    partial, record = partial_paths(out)
    kept, text = _interrupted(capsys, monkeypatch, ckpt, src, out, *opts)
    lines = src.read_text().splitlines()
    record.write_text(json.dumps({**json.loads(text), "input_lines": 20, "input_sha256": _sha256(lines[:20])}))
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, str(record), "end with the translations of input line '15'")
    record.write_text(json.dumps({**json.loads(text), "input_lines": 0, "input_sha256": _sha256([])}))
    code, _, err = _translate(capsys, ckpt, src, out, *opts, "--resume")
    assert_user_error(code, err, str(record), "more than 2 per input line")
    assert partial.read_bytes() == kept
    record.write_text(text)
    assert _translate(capsys, ckpt, src, out, *opts, "--resume")[0] == 0
    numbers = [int(line.split(" ||| ")[0]) for line in out.read_text().splitlines()]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(lines)


def test_an_output_named_gz_is_gzip_and_resumes_as_one(plain, tmp_path, capsys, monkeypatch):
    """translate --output FILE.gz wrote plain text under the .gz name: it is compressed, a gzip member per chunk
    (renamed in when done, as every output), read by score and resumed after an interruption; an interrupted run
    that wrote plain text under the .gz name is not resumed into it."""
    import gzip

    ckpt, src = plain
    opts = ("--batch-size", "4", "--chunk-batches", "2")  # chunks of 8 lines
    ref = tmp_path / "ref.txt"
    assert _translate(capsys, ckpt, src, ref, *opts)[0] == 0
    out = tmp_path / "out.hyp.gz"
    code, _, err = _translate(capsys, ckpt, src, out, *opts)
    assert code == 0, err
    assert out.read_bytes()[:2] == b"\x1f\x8b" and gzip.decompress(out.read_bytes()) == ref.read_bytes()
    code, text, err = cli(capsys, "score", "--hyp", out, "--ref", ref)
    assert code == 0 and "BLEU = 100.00" in text, err
    # interrupted in its fourth chunk and resumed: the same bytes as one run
    resumed = tmp_path / "resumed.hyp.gz"
    partial, record = partial_paths(resumed)
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 4)
        assert _translate(capsys, ckpt, src, resumed, *opts)[0] != 0
    assert gzip.decompress(partial.read_bytes()) == "".join(ref.read_text().splitlines(keepends=True)[:24]).encode()
    code, _, err = _translate(capsys, ckpt, src, resumed, *opts, "--resume")
    assert code == 0, err
    assert resumed.read_bytes() == out.read_bytes()
    # an interrupted run of a version that wrote plain text under the .gz name: refused, kept as it was
    plain_out = tmp_path / "plain.txt"
    with monkeypatch.context() as m:
        _interrupt_at_chunk(m, 2)
        assert _translate(capsys, ckpt, src, plain_out, *opts)[0] != 0
    old = tmp_path / "old.hyp.gz"
    for was, now in zip(partial_paths(plain_out), partial_paths(old)):
        was.rename(now)
    kept = partial_paths(old)[0].read_bytes()
    code, _, err = _translate(capsys, ckpt, src, old, *opts, "--resume")
    assert_user_error(code, err, "other settings (gzip)", "remove it and its .json record to start over")
    assert partial_paths(old)[0].read_bytes() == kept
    # an empty input: an empty gzip file, which score reads as no lines
    (tmp_path / "empty.txt").write_text("")
    code, _, err = _translate(capsys, ckpt, tmp_path / "empty.txt", tmp_path / "empty.hyp.gz")
    assert code == 0, err
    assert gzip.decompress((tmp_path / "empty.hyp.gz").read_bytes()) == b""
