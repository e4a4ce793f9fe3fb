"""Reliability: file-system faults, outputs that are not plain files, and report directories
that hold a user's file, through the command line where a user meets them (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from conftest import assert_user_error as assert_one_sentence  # noqa: E402
from conftest import cli, train_tiny  # noqa: E402


def tiny_grid(tmp_path: Path) -> Path:
    """A one-row grid whose data does not exist (the runner checks its output directory before the data)."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"name: g\ndata: {{path: {tmp_path / 'no-data'}}}\nbase: {{train: {{max_updates: 1}}}}\n"
                    "budget: {max_updates: 1}\nseeds: [1]\nbaseline: A\nruns: [{name: A}]\n")
    return grid


@pytest.fixture(scope="module")
def checkpoint(synth_data, tmp_path_factory) -> Path:
    """A Transformer trained for 2 updates on the shared synthetic dataset."""
    return train_tiny(synth_data, tmp_path_factory.mktemp("faults") / "run")


# --------------------------------------------------------------------------- outputs that are not plain files


def test_an_output_that_is_a_symlink_stays_a_link_and_its_target_gets_the_text(checkpoint, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b c\n")
    (tmp_path / "link.txt").symlink_to("real.txt")  # to where the translations should go
    for _ in range(2):  # written, then replaced (translate's own output, recorded in the manifest)
        code, _, err = cli(capsys, "translate", "--checkpoint", checkpoint, "--input", tmp_path / "in.txt",
                           "--output", tmp_path / "link.txt", "--no-progress")
        assert code == 0, err
        assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text().count("\n") == 1
    # a user's file behind a link is not translate's: not replaced
    (tmp_path / "mine.txt").write_text("my notes\n")
    (tmp_path / "link2.txt").symlink_to("mine.txt")
    code, _, err = cli(capsys, "translate", "--checkpoint", checkpoint, "--input", tmp_path / "in.txt", "--output",
                       tmp_path / "link2.txt", "--no-progress")
    assert code == 2 and "is not a file `structnmt translate` wrote" in err
    assert (tmp_path / "mine.txt").read_text() == "my notes\n"


def test_an_output_that_is_a_fifo_is_written_into_not_replaced(checkpoint, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b c\nd e\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    code, _, err = cli(capsys, "translate", "--checkpoint", checkpoint, "--input", tmp_path / "in.txt", "--output",
                       fifo, "--no-progress")
    reader.join()
    assert code == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got and got[0].count("\n") == 2


@pytest.mark.parametrize("command", ["translate", "average"])
def test_a_full_disk_is_one_sentence_naming_the_output_and_a_device_stays_a_device(checkpoint, tmp_path, capsys,
                                                                                   command):
    (tmp_path / "in.txt").write_text("a b c\n")
    args = (["translate", "--checkpoint", checkpoint, "--input", tmp_path / "in.txt", "--no-progress"]
            if command == "translate" else ["average", "--inputs", checkpoint.parent, "--num", "1"])
    code, _, err = cli(capsys, *args, "--output", "/dev/full")
    # torch.save's own writer reports a full disk as a RuntimeError; structnmt writes its bytes itself
    assert_one_sentence(code, err, "/dev/full: no space left on the device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_failed_checkpoint_write_leaves_no_temporary_file_and_names_the_checkpoint(tmp_path, monkeypatch):
    import errno

    import structnmt.fileio.files as files
    from structnmt.train.resume import atomic_save

    def full(obj, path):
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_torch", full)
    (tmp_path / "checkpoint_last.pt").write_bytes(b"the old one")
    with pytest.raises(OSError) as info:
        atomic_save({"x": 1}, tmp_path / "checkpoint_last.pt")
    assert info.value.filename == str(tmp_path / "checkpoint_last.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt"]
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == b"the old one"


def test_a_parent_that_is_a_file_is_named_as_such(capsys, tmp_path):
    (tmp_path / "a_file").write_text("x\n")
    (tmp_path / "r.csv").write_text("System,bleu\nk = 1,10\nk = 2,12\n")
    code, _, err = cli(capsys, "sweep-plot", tmp_path / "r.csv", "--pattern", r"k = (?P<x>\d+)", "--out",
                       tmp_path / "a_file" / "sub" / "x.png")
    assert_one_sentence(code, err, "a_file")
    assert "a file where a directory is needed" in err or "is a file, not a directory" in err
    assert (tmp_path / "a_file").read_text() == "x\n"


def test_a_directory_that_takes_no_new_files_is_named_as_such_not_as_a_missing_parent(capsys, tmp_path, monkeypatch):
    """/proc and /sys exist but refuse new files with ENOENT: the sentence must not send the user looking for a
    missing parent directory; a parent that is really missing keeps saying so."""
    import errno
    import tempfile

    from structnmt.fileio import files

    (tmp_path / "r.csv").write_text("System,bleu\nk = 1,10\nk = 2,12\n")

    def refuse(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(Path(kwargs["dir"]) / ".tmpname"))

    with monkeypatch.context() as m:
        m.setattr(files.tempfile, "mkstemp", refuse)
        code, _, err = cli(capsys, "sweep-plot", tmp_path / "r.csv", "--pattern", r"k = (?P<x>\d+)", "--out",
                           tmp_path / "x.png")
    assert_one_sentence(code, err, f"no file can be made in {tmp_path}, a directory that takes no new files")
    assert "parent directory must exist" not in err
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(FileNotFoundError) as missing:  # the real mkstemp in a parent that does not exist
        files.check_writable(tmp_path / "no_such_dir" / "x.txt")
    assert not isinstance(missing.value, files.NoNewFilesError)
    assert tempfile.mkstemp is not refuse


def test_a_directory_built_beside_its_destination_is_never_named_in_an_error(tmp_path):
    """prepare and export build in a hidden directory beside their destination: a read-only parent or a full
    disk names the destination the user gave, not the hidden name."""
    import errno

    from structnmt.fileio.files import errors_name, temp_dir_beside

    (tmp_path / "a_file").write_text("x\n")
    with pytest.raises(OSError) as info:
        temp_dir_beside(tmp_path / "a_file" / "bin", ".prepare-")
    assert info.value.filename == str(tmp_path / "a_file" / "bin")
    hidden = temp_dir_beside(tmp_path / "bin", ".prepare-")
    assert hidden.parent == tmp_path and hidden.name.startswith(".bin.prepare-")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(hidden.stat().st_mode) == 0o777 & ~umask  # swapped in whole (export): a plain mode
    for raised in (OSError(errno.ENOSPC, "No space left on device"),
                   OSError(errno.ENOSPC, "No space left on device", str(hidden / "spm.model"))):
        with pytest.raises(OSError) as info, errors_name(tmp_path / "bin", hidden):
            raise raised
        assert info.value.filename == str(tmp_path / "bin")
    with pytest.raises(OSError) as info, errors_name(tmp_path / "bin", hidden):  # an input's own error stays
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "train.en")
    assert info.value.filename == "train.en"


# --------------------------------------------------------------------------- report directories


def test_a_report_file_is_recorded_only_once_written():
    import tempfile

    from structnmt.fileio.files import MANIFEST, OutputDir

    with tempfile.TemporaryDirectory() as d:
        out = OutputDir(d, "sweep-plot")

        def fails(tmp):
            raise OSError(28, "No space left on device")

        with pytest.raises(OSError):
            out.write_with("x.png", fails)
        assert "x.png" not in out.written and not (Path(d) / "x.png").exists()
        (Path(d) / "x.png").write_text("the user's picture\n")  # so a later run must not replace it
        from structnmt.errors import UserError

        with pytest.raises(UserError, match="x.png: exists and was not written by a structnmt command"):
            OutputDir(d, "sweep-plot", expect=("x.png",))
        out.write_text("y.md", "table\n")
        assert json.loads((Path(d) / MANIFEST).read_text())["files"] == ["y.md"]


def test_a_command_does_not_replace_another_commands_report_file(capsys, tmp_path):
    """An experiment's results.md is a structnmt file but not sweep-plot's (nor delta-plot's): their tables of
    `--out RUN/results.png` would be RUN/results.md, so both are refused before drawing and the report stays;
    the experiment itself replaces its own; a manifest without commands (older) lets any command replace."""
    from structnmt.errors import UserError
    from structnmt.fileio.files import MANIFEST, OutputDir

    OutputDir(tmp_path, "experiment").write_text("results.md", "the experiment's report\n")
    assert json.loads((tmp_path / MANIFEST).read_text())["commands"] == {"results.md": "experiment"}
    (tmp_path / "r.csv").write_text("System,bleu\nk = 1,10\nk = 2,12\n")
    code, _, err = cli(capsys, "sweep-plot", tmp_path / "r.csv", "--pattern", r"k = (?P<x>\d+)", "--out",
                       tmp_path / "results.png")
    assert_one_sentence(code, err, "results.md", "structnmt experiment")
    assert (tmp_path / "results.md").read_text() == "the experiment's report\n"
    assert not (tmp_path / "results.png").exists()
    with pytest.raises(UserError, match="was written by `structnmt experiment`, so `structnmt delta-plot`"):
        OutputDir(tmp_path, "delta-plot", expect=("results.png", "results.md"))
    OutputDir(tmp_path, "experiment", expect=("results.md",)).write_text("results.md", "the report, again\n")
    assert (tmp_path / "results.md").read_text() == "the report, again\n"
    (tmp_path / MANIFEST).write_text('{"files": ["results.md"]}')  # written before commands were recorded
    OutputDir(tmp_path, "sweep-plot", expect=("results.md",)).write_text("results.md", "a table\n")
    assert json.loads((tmp_path / MANIFEST).read_text())["commands"] == {"results.md": "sweep-plot"}


def test_an_earlier_output_of_another_command_is_not_removed_as_stale(tmp_path):
    from structnmt.fileio.files import OutputDir

    OutputDir(tmp_path, "induce").write_text("sent1_tree.png", "induce's picture\n")
    mine = OutputDir(tmp_path, "analyze")
    mine.write_text("sent2_tree.png", "analyze's picture\n")
    assert OutputDir(tmp_path, "analyze").remove_earlier(("sent*_tree.png",), keep=[]) == ["sent2_tree.png"]
    assert (tmp_path / "sent1_tree.png").exists() and not (tmp_path / "sent2_tree.png").exists()


def test_sweep_plot_refuses_an_out_name_without_a_picture_format(capsys, tmp_path):
    (tmp_path / "r.csv").write_text("System,bleu\nk = 1,10\nk = 2,12\n")
    code, _, err = cli(capsys, "sweep-plot", tmp_path / "r.csv", "--pattern", r"k = (?P<x>\d+)", "--out",
                       tmp_path / "plot.txt")
    assert_one_sentence(code, err, "plot.txt", ".png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


def test_train_refuses_a_users_file_under_a_name_it_writes_in_its_save_dir(synth_data, tmp_path, capsys):
    save = tmp_path / "run"
    save.mkdir()
    (save / "config.yaml").write_text("# my notes\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"data: {{path: {synth_data}}}\nmodel: {{d_model: 32, ffn_dim: 64, heads: 4, encoder_layers: 1, "
                   f"decoder_layers: 1}}\ntrain: {{save_dir: {save}, max_updates: 1, tensorboard: false}}\n")
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_one_sentence(code, err, "config.yaml: exists and was not written by a structnmt command")
    assert (save / "config.yaml").read_text() == "# my notes\n"
    assert not list(save.glob("checkpoint*"))


def test_experiment_refuses_a_users_report_file_before_training(tmp_path, capsys):
    out = tmp_path / "exp"
    out.mkdir()
    (out / "results.md").write_text("my results\n")
    code, _, err = cli(capsys, "experiment", tiny_grid(tmp_path), "--out", out)
    assert_one_sentence(code, err, "results.md: exists and was not written by a structnmt command")
    assert sorted(p.name for p in out.iterdir()) == ["results.md"]  # not even experiment.log


def test_a_file_named_like_an_earlier_outputs_marker_but_not_written_so_does_not_adopt_the_directory(tmp_path, capsys):
    """A directory from before manifests is recognised by a file only the command writes, with the beginning it
    writes: a user's experiment.log (or metrics.jsonl, tag.json, synth.json) does not make their results.md the
    runner's to replace."""
    from structnmt.errors import UserError
    from structnmt.fileio.files import METRICS_RECORD, TORCH_FILE, OutputDir

    out = tmp_path / "exp"
    out.mkdir()
    (out / "experiment.log").write_text("my log\n")
    (out / "results.md").write_text("my results\n")
    code, _, err = cli(capsys, "experiment", tiny_grid(tmp_path), "--out", out)
    assert_one_sentence(code, err, "results.md: exists and was not written by a structnmt command")
    assert (out / "results.md").read_text() == "my results\n"
    (out / "experiment.log").write_text("2026-11-25 16:39:59 experiment g: 1 runs x 1 seeds\n")  # the runner's
    assert "results.md" in OutputDir(out, "experiment", expect=("results.md",),
                                     marker=(("experiment.log", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d experiment "),)).written
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("my metrics\n")
    (run / "checkpoint_last.pt").write_text("not a checkpoint\n")
    (run / "config.yaml").write_text("# mine\n")
    with pytest.raises(UserError, match="config.yaml: exists and was not written"):
        OutputDir(run, "train", expect=("config.yaml",), marker=(("checkpoint_last.pt", TORCH_FILE),
                                                                 ("metrics.jsonl", METRICS_RECORD)))
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 50, "time": 1.0}\n')
    assert OutputDir(run, "train", expect=("config.yaml",), marker=(("metrics.jsonl", METRICS_RECORD),)).written


def test_text_inputs_that_are_pipes_are_read_whole(tmp_path):
    """`translate --input <(zcat f.gz)`: a pipe is opened once (its first bytes peeked for gzip), not twice, which
    lost the lines the first opening had buffered."""
    import gzip
    import subprocess
    import sys

    lines = [f"line {i} " + "word " * (i % 7) for i in range(3000)]
    (tmp_path / "f.txt").write_text("\n".join(lines) + "\n")
    with gzip.open(tmp_path / "f.txt.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    code = ("import sys\nfrom structnmt.fileio.corpus import read_lines\n"
            "print(*[len(list(read_lines(p))) for p in sys.argv[1:]])")
    for name in ("f.txt", "f.txt.gz"):
        out = subprocess.run(["bash", "-c", f'{sys.executable} -c "$0" <(cat {tmp_path / name})', code],
                             capture_output=True, text=True, check=True).stdout
        assert out.split() == ["3000"], (name, out)


def test_synth_and_demo_refuse_a_users_file_before_writing_anything(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "train.src").write_text("my text\n")
    code, _, err = cli(capsys, "synth", "--out", tmp_path / "s", "--n-train", "5", "--n-valid", "2", "--n-test", "2")
    assert_one_sentence(code, err, "train.src: exists and was not written by a structnmt command")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["train.src"]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "test.hyp").write_text("my hypotheses\n")
    code, _, err = cli(capsys, "demo", "--workdir", tmp_path / "d", "--updates", "1")
    assert_one_sentence(code, err, "test.hyp: exists and was not written by a structnmt command")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["test.hyp"]
    # the generator's own files are replaced: a second synth into its directory works
    assert cli(capsys, "synth", "--out", tmp_path / "s2", "--n-train", "5", "--n-valid", "2", "--n-test", "2")[0] == 0
    assert cli(capsys, "synth", "--out", tmp_path / "s2", "--n-train", "6", "--n-valid", "2", "--n-test", "2")[0] == 0
    assert (tmp_path / "s2" / "train.src").read_text().count("\n") == 6


# --------------------------------------------------------------------------- inputs: gold trees, reports, records


CONLLU = "1\tthe\t_\tDET\t_\t_\t2\tdet\t_\t_\n2\tdog\t_\tNOUN\t_\t_\t3\tnsubj\t_\t_\n3\truns\t_\tVERB\t_\t_\t0\troot\t_\t_\n"
WORDS = "1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n2\tcat\t_\t_\t_\t_\t_\t_\t_\t_\n"


@pytest.mark.parametrize("text,line,fragment", [
    (CONLLU.replace("\t2\tdet", "\t-1\tdet"), 1, "HEAD -1 is out of range"),
    (CONLLU + "\n" + WORDS, 5, "a sentence without heads (HEAD all '_') in a file whose other 1 sentence(s)"),
    (WORDS + "\n" + CONLLU, 1, "a sentence without heads"),
])
def test_induce_refuses_gold_files_it_would_score_silently_wrong(tmp_path, capsys, text, line, fragment):
    (tmp_path / "gold.conllu").write_text(text)
    code, _, err = cli(capsys, "induce", "--checkpoint", tmp_path / "not-loaded.pt", "--conllu",
                       tmp_path / "gold.conllu", "--out", tmp_path / "out")
    assert_one_sentence(code, err, f"gold.conllu, line {line}", fragment)
    assert not (tmp_path / "out").exists()


def test_induce_checks_the_names_of_its_pictures_before_any_work(tmp_path, capsys):
    (tmp_path / "gold.conllu").write_text(CONLLU)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sent1_tree.png").write_text("my picture\n")
    code, _, err = cli(capsys, "induce", "--checkpoint", tmp_path / "not-loaded.pt", "--conllu",
                       tmp_path / "gold.conllu", "--out", tmp_path / "out", "--draw", "2")
    assert_one_sentence(code, err, "sent1_tree.png: exists and was not written by a structnmt command")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sent1_tree.png"]


def _induce_report(**model) -> dict:
    return {"checkpoint": "m.pt", "input": "gold.conllu", "punct": "reduce", "scores": "phi", "not_encoded": [],
            "model": {"DA": 30.0, "UA": 40.0, "scored": 100, **model}, "left_branching": {"DA": 20.0, "UA": 35.0},
            "right_branching": {"DA": 25.0, "UA": 35.0}, "shape": {"star": 0.0, "top_head_share": 0.3}}


def test_induce_table_refuses_its_own_input_as_output_and_a_hand_edited_report(tmp_path, capsys):
    for name, report in (("a", _induce_report()), ("b", _induce_report(DA="thirty"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "induce.json").write_text(json.dumps(report))
    before = (tmp_path / "a" / "induce.json").read_text()
    code, _, err = cli(capsys, "induce-table", f"A={tmp_path / 'a'}", "--out", tmp_path / "a" / "induce.json")
    assert_one_sentence(code, err, "an input of the table")
    assert (tmp_path / "a" / "induce.json").read_text() == before
    # nor over a file induce wrote beside it (its trees, which the table reads, or its report)
    (tmp_path / "a" / ".structnmt-written.json").write_text('{"files": ["g.induced.conllu", "induce.md"]}')
    (tmp_path / "a" / "g.induced.conllu").write_text("trees\n")
    code, _, err = cli(capsys, "induce-table", f"A={tmp_path / 'a'}", "--out", tmp_path / "a" / "g.induced.conllu")
    assert_one_sentence(code, err, "a file `structnmt induce` wrote in")
    assert (tmp_path / "a" / "g.induced.conllu").read_text() == "trees\n"
    code, _, err = cli(capsys, "induce-table", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--out", tmp_path / "t.md")
    assert_one_sentence(code, err, "b/induce.json: its field model.DA")
    assert cli(capsys, "induce-table", f"A={tmp_path / 'a'}", "--out", tmp_path / "t.md")[0] == 0
    assert "| A | 30.0 | 40.0 |" in (tmp_path / "t.md").read_text()
    assert cli(capsys, "induce-table", f"A={tmp_path / 'a'}", "--out", tmp_path / "t.md")[0] == 0  # its own table
    (tmp_path / "notes.md").write_text("# my notes\n")  # but not a user's file
    code, _, err = cli(capsys, "induce-table", f"A={tmp_path / 'a'}", "--out", tmp_path / "notes.md")
    assert_one_sentence(code, err, "notes.md: exists and is not a file `structnmt induce-table` wrote")
    assert (tmp_path / "notes.md").read_text() == "# my notes\n"


@pytest.mark.parametrize("content,fragment", [
    (b"\xc3\x28 not text", "not text (invalid UTF-8"),
    (b'{"step": 3, "redundant": [[0.5, "x"]]}\n', "line 1: not a complete head-role record"),
    (b'{"step": 3, "redundant": [[0.5, 0.25]]}\n{"step": 6, "redund', "line 2: not a complete head-role record"),
])
def test_head_roles_refuses_records_it_cannot_read(tmp_path, capsys, content, fragment):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "head_roles.jsonl").write_bytes(content)
    code, _, err = cli(capsys, "head-roles", tmp_path / "run", "--out", tmp_path / "out")
    assert_one_sentence(code, err, "head_roles.jsonl", fragment)
    assert not (tmp_path / "out").exists()


def test_head_roles_refuses_a_label_given_twice(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "head_roles.jsonl").write_text('{"step": 3, "redundant": [[0.5, 0.25]]}\n')
    code, _, err = cli(capsys, "head-roles", tmp_path / "run", tmp_path / "run", "--labels", "a", "a", "--out",
                       tmp_path / "out")
    assert_one_sentence(code, err, "the label 'a' is given twice")


def test_tag_names_a_result_it_cannot_read_instead_of_a_traceback(tmp_path):
    from structnmt.config import ConfigError
    from structnmt.tasks.tagger import _read_result

    (tmp_path / "result.json").write_text("")  # what a full disk left of a plain write
    with pytest.raises(ConfigError, match="result.json: not a readable row result .* remove it"):
        _read_result(tmp_path / "result.json")
    (tmp_path / "result.json").write_text('{"accuracy": 91.5}')
    assert _read_result(tmp_path / "result.json")["accuracy"] == 91.5


def test_prepare_says_when_sentencepiece_makes_fewer_pieces_than_asked(tmp_path):
    from structnmt.data.prepare import PrepareConfig, prepare

    (tmp_path / "train.en").write_text("a b c\nb c d\n" * 20)
    (tmp_path / "train.de").write_text("x y z\ny z w\n" * 20)
    lines: list[str] = []
    prepare(PrepareConfig(source_lang="en", target_lang="de", trainpref=str(tmp_path / "train"), vocab_size=500),
            tmp_path / "bin", progress=False, log=lines.append)
    said = [x for x in lines if "fewer than the 500 asked" in x]
    assert len(said) == 1 and "spm.model has" in said[0]
    manifest = json.loads((tmp_path / "bin" / "manifest.json").read_text())
    assert f"has {manifest['vocab']['src']['size']:,} pieces" in said[0]


def test_probe_names_a_corpus_with_too_few_sentences(tmp_path, capsys):
    """An empty CoNLL-U file (and one of two sentences) is named with what was read, before any model is built."""
    one = "1\tdogs\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tbark\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n"
    for name, text in (("empty.conllu", ""), ("two.conllu", ("# text = dogs bark\n" + one) * 2)):
        (tmp_path / name).write_text(text)
        code, _, err = cli(capsys, "probe", Path(__file__).parents[1] / "configs" / "probe" / "ud_scratch_mha.yaml",
                           f"corpus.path={tmp_path / name}", f"out_dir={tmp_path / 'out'}")
        assert_one_sentence(code, err, f"corpus.path={tmp_path / name}", "at least 3", "larger file")
        assert ("gave 0 usable" if name == "empty.conllu" else "gave 2 usable") in err
    assert not (tmp_path / "out" / "probe.md").exists()


def test_induce_table_knows_one_gold_file_by_its_bytes_or_the_file_its_paths_name(tmp_path, capsys, monkeypatch):
    """'g.conllu' and '/abs/g.conllu' are one file; a file whose bytes differ under one name is not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gold.conllu").write_text("x\n")
    cases = {"rel": {}, "abs": {"input": str(tmp_path / "gold.conllu")},
             "sha1": {"input": "a/gold.conllu", "input_sha256": "1" * 64},
             "sha1b": {"input": "b/elsewhere.conllu", "input_sha256": "1" * 64},
             "sha2": {"input": "a/gold.conllu", "input_sha256": "2" * 64}}
    for name, fields in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "induce.json").write_text(json.dumps({**_induce_report(), **fields}))
    assert cli(capsys, "induce-table", "A=rel", "B=abs", "--out", tmp_path / "t1.md")[0] == 0
    assert cli(capsys, "induce-table", "A=sha1", "B=sha1b", "--out", tmp_path / "t2.md")[0] == 0
    code, _, err = cli(capsys, "induce-table", "A=sha1", "B=sha2", "--out", tmp_path / "t3.md")
    assert_one_sentence(code, err, "must score the same file")
