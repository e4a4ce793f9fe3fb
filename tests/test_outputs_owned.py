"""Outputs known by who wrote them: `average`, `translate` and `parse` replace a file only when their directory's
manifest (or, for files from before it, the file's own structnmt content) says they wrote it; a user's zip or gzip
file, a checkpoint copy or a training's metrics.jsonl is never replaced because of its magic bytes."""

from __future__ import annotations

import gzip
import os
import zipfile

from conftest import cli

from structnmt.fileio.files import MANIFEST


def test_average_and_translate_leave_a_user_s_zip_gzip_and_metrics_alone(capsys, tmp_path):
    zip_path = tmp_path / "conll2000.zip"
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("a.txt", "data")
    corpus = tmp_path / "corpus.de.gz"
    corpus.write_bytes(gzip.compress(b"ein satz\n"))
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"kind": "train", "step": 1, "loss": 3.0}\n')
    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(b"x")
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    before = {p: p.read_bytes() for p in (zip_path, corpus, metrics)}
    code, _, err = cli(capsys, "average", "--checkpoints", ckpt, "--output", zip_path)
    assert code == 2 and "is not a file `structnmt average` wrote" in err
    for target in (corpus, metrics, zip_path):
        code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", src, "--output", target)
        assert code == 2 and "is not a file `structnmt translate` wrote" in err, err
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / MANIFEST).exists()


def test_parse_replaces_only_a_parse_cache(tmp_path):
    from structnmt.syntax.parse_cache import is_parse_cache

    cache = tmp_path / "p.jsonl.gz"
    cache.write_bytes(gzip.compress(b'{"key": "' + b"0" * 40 + b'", "words": []}\n'))
    other = tmp_path / "other.jsonl.gz"
    other.write_bytes(gzip.compress(b"just a corpus line\n"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert is_parse_cache(cache) and is_parse_cache(empty) and not is_parse_cache(other)
    assert not is_parse_cache(tmp_path / "missing.gz")


def test_a_recorded_output_is_replaced_by_its_own_command_only(tmp_path, capsys):
    from structnmt.fileio.files import check_output_file, record_output_file

    out = tmp_path / "test.hyp"
    out.write_text("first\n")
    record_output_file(out, "translate")
    check_output_file(out, "--output", "translate")  # its own: may be replaced
    code, _, err = cli(capsys, "average", "--checkpoints", tmp_path / "x.pt", "--output", out)
    assert code == 2 and "was written by `structnmt translate`" in err


def test_a_device_output_is_written_and_nothing_recorded_beside_it(tmp_path):
    from structnmt.fileio.files import record_output_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    record_output_file(fifo, "translate")  # a FIFO (as /dev/stdout): nothing to own, no manifest made
    assert not (tmp_path / MANIFEST).exists()


def test_a_single_output_recorded_in_an_older_run_directory_keeps_the_run_s_files_its_own(tmp_path):
    """`average --output RUN/average.pt` in a save_dir from before manifests makes a manifest there: the training's
    own files (known by its marker) must stay the training's, or the run could not resume."""
    from structnmt.fileio.files import METRICS_RECORD, TORCH_FILE, OutputDir, record_output_file

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 a checkpoint")
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 3.0}\n')
    (run / "config.yaml").write_text("model: {}\n")
    (run / "average.pt").write_bytes(b"PK\x03\x04 the average")
    record_output_file(run / "average.pt", "average")
    OutputDir(run, "train", expect=("config.yaml",),
              marker=(("checkpoint_last.pt", TORCH_FILE), ("metrics.jsonl", METRICS_RECORD)))  # no refusal
