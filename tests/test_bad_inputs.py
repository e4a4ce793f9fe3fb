"""Bad input, as a user gives it, through the command line.

Each case runs ``structnmt ...`` (``structnmt.cli.main``, the console script's entry
point, in this process; a few in a subprocess where a second process or the exit of
one matters) and asserts the one-sentence message naming the file or option, the exit
status 2 without a traceback, and that no file of the user's was lost or changed.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import assert_user_error, cli  # noqa: E402  (the shared "one sentence" checks)

from structnmt.cli import main
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.vocab import Vocab
from structnmt.models.checkpoint import load_checkpoint


def tree_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_config(path: Path, data: Path, save_dir: Path, **train) -> Path:
    train_opts = {"save_dir": str(save_dir), "lr": 0.002, "warmup_updates": 4, "max_updates": 4,
                  "save_interval_updates": 2, "validate_interval_updates": 4, "log_interval": 1, "keep_last": 5,
                  "tensorboard": False, "progress": False, "seed": 3, **train}
    import yaml

    path.write_text(yaml.safe_dump({
        "data": {"path": str(data), "max_tokens": 600},
        "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1,
                  "dropout": 0.1, "share_all_embeddings": True, "max_positions": 64},
        "train": train_opts,
        "decode": {"beam": 2, "max_len_a": 1.0, "max_len_b": 5},
    }))
    return path


@pytest.fixture(scope="module")
def trained(synth_data, tmp_path_factory):
    """A checkpoint trained for 4 updates on the shared synthetic dataset."""
    work = tmp_path_factory.mktemp("bad_inputs")
    cfg = write_config(work / "cfg.yaml", synth_data, work / "run")
    assert main(["train", str(cfg), "--no-progress"]) == 0
    return work


@pytest.fixture(scope="module")
def other_vocab_data(synth_data, tmp_path_factory):
    """The same corpus prepared with another SentencePiece model of the same size."""
    corpus = synth_data.parent / "corpus"
    out = tmp_path_factory.mktemp("other") / "data-bin"
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                          validpref=str(corpus / "valid"), vocab_size=600, model_type="unigram"),
            out, progress=False, log=lambda *_: None)
    return out


def corpus_files(folder: Path, n: int = 30, long_line: int | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    src = [f"the cat {i} sees a dog" for i in range(n)]
    tgt = [f"die katze {i} sieht einen hund" for i in range(n)]
    if long_line is not None:
        src[long_line] = " ".join(["word"] * 80)
        tgt[long_line] = " ".join(["wort"] * 80)
    (folder / "train.en").write_text("\n".join(src) + "\n")
    (folder / "train.de").write_text("\n".join(tgt) + "\n")


# --------------------------------------------------------------------------- 1. prepare never deletes


def test_prepare_refuses_the_corpus_folder_and_loses_nothing(tmp_path, capsys):
    corpus_files(tmp_path / "corpus")
    before = tree_snapshot(tmp_path / "corpus")
    code, _, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "corpus" / "train",
                       "--destdir", tmp_path / "corpus", "--vocab-size", "40", "--no-progress")
    assert_user_error(code, err, str(tmp_path / "corpus"), "no manifest.json", "new or empty directory")
    assert tree_snapshot(tmp_path / "corpus") == before


def test_prepare_rebuild_replaces_only_its_own_files(tmp_path, capsys):
    corpus_files(tmp_path / "corpus")
    dest = tmp_path / "bin"
    args = ["prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "corpus" / "train", "--destdir", dest,
            "--vocab-size", "40", "--no-progress"]
    assert cli(capsys, *args)[0] == 0
    (dest / "NOTES.md").write_text("my notes")  # the user's own file in a prepared directory
    corpus_files(tmp_path / "corpus", n=31)  # the input changes: rebuild
    code, out, _ = cli(capsys, *args)
    assert code == 0 and "31 pairs kept" in out
    assert (dest / "NOTES.md").read_text() == "my notes"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bin.prepare-")]  # no temporary left


def test_prepare_moses_through_the_cli_and_its_refusals(tmp_path, capsys):
    """--moses: a dataset whose vocabularies keep each side's language; with a parser, or a model option
    that needs a plain Transformer, one sentence with the fix."""
    corpus_files(tmp_path / "corpus")
    args = ["prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "corpus" / "train", "--vocab-size", "40",
            "--no-progress", "--moses"]
    code, out, _ = cli(capsys, *args, "--destdir", tmp_path / "bin")
    assert code == 0 and "30 pairs kept" in out
    vocab = json.loads((tmp_path / "bin" / "manifest.json").read_text())["vocab"]
    assert (vocab["src"]["moses"], vocab["tgt"]["moses"]) == ("en", "de")
    code, _, err = cli(capsys, *args, "--destdir", tmp_path / "parsed", "--parser", "synthetic")
    assert_user_error(code, err, "--moses with the parser 'synthetic'", "--parser none")
    assert not (tmp_path / "parsed").exists()
    (tmp_path / "c.yaml").write_text(f"data: {{path: {tmp_path / 'bin'}}}\nmodel: {{family: rnn}}\n"
                                     f"train: {{max_updates: 1, save_dir: {tmp_path / 'run'}}}\n")
    code, _, err = cli(capsys, "train", tmp_path / "c.yaml", "model.attention_init=xavier", "--no-progress")
    assert_user_error(code, err, "model.attention_init='xavier' is for plain Transformers", "model.family is rnn",
                      "set model.attention_init=linear")
    assert not (tmp_path / "run").exists()


def test_prepare_refuses_a_destdir_that_is_a_file(tmp_path, capsys):
    corpus_files(tmp_path / "corpus")
    (tmp_path / "dest").write_text("precious")
    code, _, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "corpus" / "train",
                       "--destdir", tmp_path / "dest", "--vocab-size", "40", "--no-progress")
    assert_user_error(code, err, "--destdir", "is a file")
    assert (tmp_path / "dest").read_text() == "precious"


def test_prepare_never_clears_a_user_folder_named_like_its_temporary(tmp_path, capsys):
    corpus_files(tmp_path / "corpus")
    (tmp_path / "bin.tmp").mkdir()
    (tmp_path / "bin.tmp" / "keep.txt").write_text("mine")
    assert cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "corpus" / "train",
               "--destdir", tmp_path / "bin", "--vocab-size", "40", "--no-progress")[0] == 0
    assert (tmp_path / "bin.tmp" / "keep.txt").read_text() == "mine"


# --------------------------------------------------------------------------- 2. one process per save_dir


def test_a_second_training_process_on_a_live_save_dir_is_refused(synth_data, tmp_path, capsys):
    save = tmp_path / "run"
    save.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from structnmt.train.lock import "
         "SaveDirLock; lock = SaveDirLock(Path(sys.argv[1]), log=lambda m: None); print('locked', flush=True); "
         "time.sleep(120)", str(save)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        cfg = write_config(tmp_path / "cfg.yaml", synth_data, save)
        code, _, err = cli(capsys, "train", cfg, "--no-progress")
        assert_user_error(code, err, str(save), "in use by a running training process", f"pid {holder.pid}")
        assert not list(save.glob("checkpoint*"))
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up: its lock is stale and the next run takes it
    code, out, _ = cli(capsys, "train", cfg, "--no-progress")
    assert code == 0
    assert "replaced the stale lock" in out and f"pid {holder.pid}" in out
    assert not (save / "train.lock").exists()  # a finished run removes its lock


def test_resume_with_another_config_names_the_keys_unless_allowed(trained, synth_data, tmp_path, capsys):
    save = tmp_path / "run"
    shutil.copytree(trained / "run", save)
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, save, max_updates=6, lr=0.01, log_interval=2)
    before = tree_snapshot(save)
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, "train.lr: 0.002 -> 0.01", "--allow-config-change")
    assert "max_updates" not in err and "log_interval" not in err  # budget and logging may change
    assert tree_snapshot(save) == before
    code, out, _ = cli(capsys, "train", cfg, "--no-progress", "--allow-config-change")
    assert code == 0 and "resuming with a changed config" in out
    assert load_checkpoint(save / "checkpoint_last.pt")["run"]["num_updates"] == 6


# --------------------------------------------------------------------------- 3. the checkpoint's vocabulary


def test_translate_and_resume_refuse_another_vocabulary(trained, other_vocab_data, synth_data, tmp_path, capsys):
    ours = Vocab(synth_data / "spm.model")
    other = Vocab(other_vocab_data / "spm.model")
    assert ours.sha256 != other.sha256
    (tmp_path / "in.txt").write_text("the dog sees the cat\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--data",
                       other_vocab_data, "--input", tmp_path / "in.txt")
    assert_user_error(code, err, "source vocabulary", str(other_vocab_data), "is not the one of")
    save = tmp_path / "run"
    shutil.copytree(trained / "run", save)
    cfg = write_config(tmp_path / "cfg.yaml", other_vocab_data, save, max_updates=6)
    code, _, err = cli(capsys, "train", cfg, "--no-progress", "--allow-config-change")
    assert_user_error(code, err, "vocabulary", "is not the one of", str(other_vocab_data))


def test_a_different_vocabulary_size_is_the_same_error(trained, synth_data, tmp_path, capsys):
    corpus = synth_data.parent / "corpus"
    small = tmp_path / "small"
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"), vocab_size=300),
            small, progress=False, log=lambda *_: None)
    (tmp_path / "in.txt").write_text("the dog sees the cat\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--data", small,
                       "--input", tmp_path / "in.txt")
    assert_user_error(code, err, "vocabulary", "is not the one of")
    assert "size mismatch" not in err


def test_translate_from_another_directory_needs_no_dataset(trained, synth_data, tmp_path, monkeypatch, capsys):
    """The checkpoint carries its vocabulary: a relative data.path elsewhere does not matter."""
    ckpt = load_checkpoint(trained / "run" / "checkpoint_last.pt")
    ckpt["config"]["data"]["path"] = "data-bin/relative/nowhere"
    torch.save(ckpt, tmp_path / "moved.pt")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text((synth_data.parent / "corpus" / "test.src").read_text().splitlines()[0] + "\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", "moved.pt", "--input", "in.txt", "--output", "out.txt",
                       "--no-progress")
    assert code == 0, err
    assert (tmp_path / "out.txt").read_text().count("\n") == 1


# --------------------------------------------------------------------------- 4. a run needs a budget


def test_a_run_without_budget_is_refused_and_a_budget_is_announced(synth_data, tmp_path, capsys):
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, tmp_path / "run")
    code, _, err = cli(capsys, "train", cfg, "train.max_updates=0")
    assert_user_error(code, err, "no budget", "train.max_updates=")
    assert not (tmp_path / "run").exists()
    code, out, _ = cli(capsys, "train", cfg, "train.max_updates=2", "train.max_time_minutes=5", "--no-progress")
    assert code == 0 and "budget: 2 updates or 5 minutes, whichever comes first." in out


# --------------------------------------------------------------------------- 5. one long line


def test_translate_gives_a_long_line_empty_output_and_translates_the_rest(trained, synth_data, tmp_path, capsys):
    lines = (synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:3]
    lines.insert(1, " ".join(lines * 8))  # far more than max_positions=64 pieces
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    ckpt = trained / "run" / "checkpoint_last.pt"
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", tmp_path / "in.txt", "--output",
                       tmp_path / "out.txt", "--no-progress")
    assert code == 0, err
    out = (tmp_path / "out.txt").read_text().split("\n")[:-1]
    assert len(out) == 4 and out[1] == "" and all(out[i] for i in (0, 2, 3))
    assert "1 input line(s) longer than model.max_positions=64" in err and "line 2." in err
    code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", tmp_path / "in.txt", "--output",
                       tmp_path / "out2.txt", "--too-long", "truncate", "--no-progress")
    assert code == 0 and "were cut" in err
    assert (tmp_path / "out2.txt").read_text().split("\n")[1] != ""


def test_a_line_of_zero_width_characters_translates_as_an_empty_line(trained, synth_data, tmp_path, capsys):
    """A line of only U+200B encodes to EOS alone, as an empty line does: it gets an empty translation, not the
    model's output for an empty source ("zu zu zu zu")."""
    lines = (synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:2]
    (tmp_path / "in.txt").write_text(lines[0] + "\n\u200b\u200b\n\n" + lines[1] + "\n", encoding="utf-8")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input",
                       tmp_path / "in.txt", "--output", tmp_path / "out.txt", "--no-progress")
    assert code == 0, err
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(out) == 4 and out[1] == "" and out[2] == "" and out[0] and out[3]


def test_over_long_valid_pairs_are_counted_by_prepare_and_do_not_stop_training(tmp_path, capsys):
    corpus_files(tmp_path / "c", n=200)
    corpus_files(tmp_path / "v", n=10, long_line=4)
    dest = tmp_path / "bin"
    code, out, _ = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "c" / "train",
                       "--validpref", tmp_path / "v" / "train", "--destdir", dest, "--vocab-size", "60",
                       "--max-len", "40", "--no-progress")
    assert code == 0
    assert "kept 1 pairs longer than 40 pieces with their pieces cut to 40" in out
    cfg = write_config(tmp_path / "cfg.yaml", dest, tmp_path / "run", max_updates=2, validate_interval_updates=1)
    # a model whose positions are fewer than the truncated pair's: left out of validation, said so
    code, out, err = cli(capsys, "train", cfg, "model.max_positions=24", "data.max_len=0", "--no-progress")
    assert code == 0, err
    assert "valid: 1 of 10 pairs are longer than model.max_positions=24" in out
    code, out, _ = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "c" / "train",
                       "--validpref", tmp_path / "v" / "train", "--destdir", tmp_path / "bin2", "--vocab-size", "60",
                       "--max-len", "40", "--eval-too-long", "drop", "--no-progress")
    assert code == 0 and "prepare valid: 9 pairs kept of 10 lines (0 empty, 1 too long)" in out


# --------------------------------------------------------------------------- 6. corrupt checkpoints


@pytest.mark.parametrize("damage", ["random", "truncated", "empty"])
def test_resume_falls_back_from_a_corrupt_last_checkpoint(trained, synth_data, tmp_path, capsys, damage):
    save = tmp_path / "run"
    shutil.copytree(trained / "run", save)
    last = save / "checkpoint_last.pt"
    data = last.read_bytes()
    last.write_bytes({"random": os.urandom(4096), "truncated": data[: len(data) // 2], "empty": b""}[damage])
    (save / "checkpoint_4.pt").unlink()  # the newest readable one is then checkpoint_2.pt
    (save / "checkpoint_6.pt.tmp").write_bytes(b"half a save")
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, save, max_updates=6)
    code, out, err = cli(capsys, "train", cfg, "--no-progress")
    assert code == 0, err
    assert "checkpoint_last.pt" in out and "falling back to checkpoint_2.pt (update 2)" in out
    assert "removed checkpoint_6.pt.tmp" in out and not (save / "checkpoint_6.pt.tmp").exists()
    assert load_checkpoint(last)["run"]["num_updates"] == 6


def test_no_readable_checkpoint_stops_without_overwriting(trained, synth_data, tmp_path, capsys):
    save = tmp_path / "run"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"garbage")
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, save)
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, "none of its checkpoints can be read")
    assert (save / "checkpoint_last.pt").read_bytes() == b"garbage"


# --------------------------------------------------------------------------- 7. compressed input


def test_gzip_problems_name_the_file(tmp_path, capsys):
    corpus_files(tmp_path / "c", n=200)
    src = (tmp_path / "c" / "train.en").read_bytes()
    packed = gzip.compress(src * 20)
    (tmp_path / "c" / "train.en").unlink()
    (tmp_path / "c" / "train.en.gz").write_bytes(packed[: len(packed) // 2])  # truncated download
    args = ["prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "c" / "train", "--destdir", tmp_path / "bin",
            "--vocab-size", "40", "--no-progress"]
    code, _, err = cli(capsys, *args)
    assert_user_error(code, err, "train.en.gz", "truncated or corrupt")
    (tmp_path / "c" / "train.en.gz").write_bytes(src)  # plain text named .gz
    code, _, err = cli(capsys, *args)
    assert_user_error(code, err, "train.en.gz", "not gzip-compressed")
    (tmp_path / "c" / "train.en.gz").write_bytes(packed[:30])  # cut inside its first line: no 'line 0'
    code, _, err = cli(capsys, *args)
    assert_user_error(code, err, "train.en.gz in its first line: the gzip data is truncated or corrupt")
    (tmp_path / "c" / "train.en").write_bytes(src)  # and both names present
    code, _, err = cli(capsys, *args)
    assert_user_error(code, err, "train.en and train.en.gz both exist")
    assert not (tmp_path / "bin").exists()


# --------------------------------------------------------------------------- 8. errors, not tracebacks


def test_score_errors_name_the_file(tmp_path, capsys):
    (tmp_path / "ref.txt").write_text("a b\nc d\n")
    (tmp_path / "short.txt").write_text("a b\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.txt").write_bytes(b"a b\nc \xff d\n")
    code, _, err = cli(capsys, "score", "--hyp", tmp_path / "short.txt", "--ref", tmp_path / "ref.txt")
    assert_user_error(code, err, "short.txt has 1 lines", "ref.txt have 2")
    code, _, err = cli(capsys, "score", "--hyp", tmp_path / "ref.txt", "--ref", tmp_path / "empty.txt")
    assert_user_error(code, err, "empty.txt", "empty")
    code, _, err = cli(capsys, "score", "--hyp", tmp_path / "bad.txt", "--ref", tmp_path / "ref.txt")
    assert_user_error(code, err, "bad.txt line 2 column 3", "invalid UTF-8")
    # several runs per system: the same number of runs (seeds) for every system, at least 2 for the test
    (tmp_path / "b.txt").write_text("a b\nc e\n")
    (tmp_path / "b2.txt").write_text("a b\nc f\n")
    code, _, err = cli(capsys, "score", "--hyp", tmp_path / "ref.txt", tmp_path / "b.txt", "--hyp", tmp_path / "b2.txt",
                       "--ref", tmp_path / "ref.txt", "--bootstrap", "10")
    assert_user_error(code, err, "b2.txt: this system has 1 run but", "ref.txt has 2", "at least 2 runs (seeds)")


@pytest.mark.parametrize("override,fragment", [
    ("train.lr=0", "train.lr=0.0 must be a positive number"),
    ("train.lr=.nan", "train.lr=nan must be a positive number"),
    ("train.save_interval_updates=0", "train.save_interval_updates=0 must be at least 1"),
    ("model.heads=3", "model.heads=3 must divide model.d_model=32"),
    ("train.max_updates", "override 'train.max_updates' has no '='"),
    ("train.lr=[0.1", "override 'train.lr=[0.1' is not valid YAML"),
    ("train.lr=abc", "set on the command line by 'train.lr=abc'"),
    ("model.d_model=-32", "model.d_model=-32 must be positive (set on the command line by 'model.d_model=-32')"),
])
def test_bad_config_values_are_one_sentence(synth_data, tmp_path, capsys, override, fragment):
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, tmp_path / "run")
    code, _, err = cli(capsys, "train", cfg, override)
    assert_user_error(code, err, fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage,fragment", [
    ("cut:train.tgt.bin", "train.tgt.bin: holds"),
    ("empty:train.src.idx", "train.src.idx: not an index of sentence offsets"),
    ("cut:manifest.json", "manifest.json: not a dataset manifest"),
    ("remove:valid.tgt.bin", "valid.tgt.bin: missing"),
    ("cut:spm.model", "spm.model: not a readable SentencePiece or subword-nmt model"),
])
def test_a_damaged_dataset_is_one_sentence_not_a_silent_truncation(synth_data, tmp_path, capsys, damage, fragment):
    """A cut .bin would otherwise train on empty targets without a word; the others were tracebacks."""
    import shutil

    how, name = damage.split(":")
    data = tmp_path / "data"
    shutil.copytree(synth_data, data)
    target = data / name
    if how == "cut":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    elif how == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    cfg = write_config(tmp_path / "cfg.yaml", data, tmp_path / "run")
    code, _, err = cli(capsys, "train", cfg)
    assert_user_error(code, err, fragment, "prepare")
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("options,fragment", [
    (["--beam", "0"], "decode.beam=0 must be at least 1"),
    (["--batch-size", "0"], "decode.batch_size=0 must be at least 1"),
    (["--beam", "2", "--nbest", "3"], "decode.nbest=3 cannot exceed decode.beam=2"),
])
def test_bad_decoding_options_are_refused(trained, tmp_path, capsys, options, fragment):
    (tmp_path / "in.txt").write_text("the dog\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input",
                       tmp_path / "in.txt", *options)
    assert_user_error(code, err, fragment)


def test_bad_checkpoints_are_named(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the dog\n")
    (tmp_path / "cfg.yaml").write_text("train: {lr: 0.1}\n")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "plain.pt")
    for ckpt, fragment in [(trained / "run", "is a directory"), (tmp_path / "cfg.yaml", "not a readable checkpoint"),
                           (tmp_path / "plain.pt", "not a structnmt checkpoint"), (tmp_path / "nope.pt", "not found")]:
        code, _, err = cli(capsys, "translate", "--checkpoint", ckpt, "--input", tmp_path / "in.txt")
        assert_user_error(code, err, str(ckpt), fragment)


def test_average_needs_checkpoints_and_keeps_them(trained, tmp_path, capsys):
    code, _, err = cli(capsys, "average", "--output", tmp_path / "avg.pt")
    assert_user_error(code, err, "--inputs SAVE_DIR", "--checkpoints")
    ckpt = tmp_path / "mine.pt"  # a checkpoint under a name no training owns
    shutil.copy(trained / "run" / "checkpoint_2.pt", ckpt)
    before = ckpt.read_bytes()
    code, _, err = cli(capsys, "average", "--checkpoints", ckpt, "--output", ckpt)
    assert_user_error(code, err, "is one of the checkpoints being averaged")
    assert ckpt.read_bytes() == before


def test_translate_refuses_to_write_over_its_input(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the dog\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input",
                       tmp_path / "in.txt", "--output", tmp_path / "in.txt")
    assert_user_error(code, err, "is the input file")
    assert (tmp_path / "in.txt").read_text() == "the dog\n"


def test_errors_exit_2_without_traceback_in_a_real_process_and_debug_shows_it(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    proc = subprocess.run([sys.executable, "-m", "structnmt.cli", "score", "--hyp", str(tmp_path / "a.txt"),
                           "--ref", str(tmp_path / "missing.txt")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "missing.txt" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "structnmt.cli", "--debug", "score", "--hyp",
                           str(tmp_path / "a.txt"), "--ref", str(tmp_path / "missing.txt")],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


# --------------------------------------------------------------------------- 10. the progress bar


def test_progress_follows_the_budget_that_binds():
    from structnmt.config import TrainConfig
    from structnmt.train.trainer import RunState, budget_fraction

    demo = TrainConfig(max_updates=100_000, max_time_minutes=3.0)
    state = RunState(num_updates=300, tgt_tokens=10_000)
    assert budget_fraction(demo, state, elapsed=90.0, epoch_fraction=0.1) == pytest.approx(0.5)  # time binds
    by_updates = TrainConfig(max_updates=400, max_time_minutes=60.0)
    assert budget_fraction(by_updates, state, elapsed=90.0, epoch_fraction=0.1) == pytest.approx(0.75)
    by_epochs = TrainConfig(max_updates=0, max_epochs=2)
    assert budget_fraction(by_epochs, RunState(epoch=2), elapsed=1.0, epoch_fraction=0.5) == pytest.approx(0.75)
    by_tokens = TrainConfig(max_updates=0, max_target_tokens=40_000)
    assert budget_fraction(by_tokens, state, elapsed=1.0, epoch_fraction=0.0) == pytest.approx(0.25)


def test_the_lock_file_names_its_holder_and_goes_with_the_run():
    """The lock names its holder: pid, host and start time."""
    import tempfile

    from structnmt.train.lock import SaveDirLock

    with tempfile.TemporaryDirectory() as d:
        lock = SaveDirLock(Path(d), log=lambda m: None)
        text = (Path(d) / "train.lock").read_text()
        assert f"pid {os.getpid()}" in text and time.strftime("%Y-%m-%d") in text
        lock.release()
        assert not (Path(d) / "train.lock").exists()


def test_a_users_file_named_train_lock_is_neither_replaced_nor_removed(tmp_path):
    """A dead run's lock (its line) is taken over; a file of other text under the name is the user's."""
    from structnmt.errors import UserError
    from structnmt.train.lock import SaveDirLock

    (tmp_path / "train.lock").write_text("pid 999999 on elsewhere, since 2026-01-01 10:00:00")
    said = []
    SaveDirLock(tmp_path, log=said.append).release()
    assert "replaced the stale lock" in said[0] and not (tmp_path / "train.lock").exists()
    (tmp_path / "train.lock").write_text("my notes on locks\n")
    with pytest.raises(UserError, match="train.lock: exists and is not a training's lock file"):
        SaveDirLock(tmp_path, log=said.append)
    assert (tmp_path / "train.lock").read_text() == "my notes on locks\n"


def test_synth_and_demo_refuse_empty_sizes_before_writing(tmp_path, capsys):
    code, _, err = cli(capsys, "synth", "--out", tmp_path / "s", "--n-train", "0")
    assert_user_error(code, err, "--n-train 0")
    code, _, err = cli(capsys, "demo", "--workdir", tmp_path / "d", "--minutes", "0")
    assert_user_error(code, err, "--minutes 0")
    # a bad override is said before the corpus is written, and named as the command line's
    code, _, err = cli(capsys, "demo", "--workdir", tmp_path / "d", "--updates", "1", "bogus.x=1")
    assert_user_error(code, err, "unknown key 'bogus'", "set on the command line by 'bogus.x=1'")
    assert not (tmp_path / "s").exists() and not (tmp_path / "d").exists()


def test_shared_embeddings_with_separate_vocabularies_is_a_config_error(tmp_path, capsys):
    corpus_files(tmp_path / "c", n=60)
    assert cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "c" / "train", "--destdir",
               tmp_path / "bin", "--vocab-size", "40", "--tgt-vocab-size", "45", "--separate-vocab",
               "--no-progress")[0] == 0
    cfg = write_config(tmp_path / "cfg.yaml", tmp_path / "bin", tmp_path / "run")
    code, _, err = cli(capsys, "train", cfg)
    assert_user_error(code, err, "share_all_embeddings needs one joint vocabulary", "--separate-vocab")


def test_a_broken_gzip_parse_file_names_the_file(tmp_path, capsys):
    corpus_files(tmp_path / "c", n=40)
    rows = "".join(f"# text = the cat {i} sees a dog\n" + "".join(
        f"{j + 1}\t{w}\t_\tX\tX\t_\t{0 if j == 0 else 1}\t{'root' if j == 0 else 'dep'}\t_\t_\n"
        for j, w in enumerate(f"the cat {i} sees a dog".split())) + "\n" for i in range(40))
    packed = gzip.compress(rows.encode())
    (tmp_path / "c" / "train.en.conllu.gz").write_bytes(packed[: len(packed) // 2])
    code, _, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", tmp_path / "c" / "train",
                       "--destdir", tmp_path / "bin", "--vocab-size", "40", "--parser", "file", "--parse-dependency",
                       str(tmp_path / "c" / "train.en.conllu.gz"), "--no-progress")
    assert_user_error(code, err, "train.en.conllu.gz", "truncated or corrupt")
    assert not (tmp_path / "bin").exists()


def test_repeated_nan_losses_and_a_missing_gpu_are_one_sentence(synth_data, tmp_path, capsys, monkeypatch):
    from structnmt.train import trainer as trainer_mod

    real = trainer_mod.label_smoothed_nll
    monkeypatch.setattr(trainer_mod, "label_smoothed_nll", lambda *a: tuple(x * float("nan") for x in real(*a)))
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, tmp_path / "run", max_consecutive_nonfinite=2)
    code, _, err = cli(capsys, "train", cfg, "--no-progress")
    assert_user_error(code, err, "3 consecutive updates had a NaN or infinite loss", "lower train.lr")
    assert not (tmp_path / "run" / "train.lock").exists()  # the failed run let go of its save_dir
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = cli(capsys, "train", cfg, "train.device=cuda", "train.save_dir=" + str(tmp_path / "r2"))
    assert_user_error(code, err, "'cuda'", "no CUDA GPU")


def test_a_budget_aware_schedule_without_an_update_budget_is_one_sentence(synth_data, tmp_path, capsys):
    cfg = write_config(tmp_path / "cfg.yaml", synth_data, tmp_path / "run")
    code, _, err = cli(capsys, "train", cfg, "train.lr_schedule=linear", "train.max_updates=0",
                       "train.max_time_minutes=5")
    assert_user_error(code, err, "train.lr_schedule=linear", "train.max_updates")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- file-system faults, from one place


def test_a_path_that_is_a_file_is_one_sentence(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x\n")
    code, _, err = cli(capsys, "synth", "--out", tmp_path / "a_file" / "corpus", "--n-train", "5", "--n-valid", "2",
                       "--n-test", "2")
    assert_user_error(code, err, str(tmp_path / "a_file"), "is a file, not a directory")
    assert (tmp_path / "a_file").read_text() == "x\n"


@pytest.mark.parametrize("errno_name,fragment", [
    ("ENOSPC", "no space left on the device; free some space"),
    ("EROFS", "the file system is read-only; write the output somewhere writable"),
    ("EACCES", "permission denied; choose a path you may write"),
])
def test_file_system_faults_are_one_sentence_from_any_command(tmp_path, capsys, monkeypatch, errno_name, fragment):
    import builtins
    import errno
    import io

    real_open = builtins.open
    target = tmp_path / "corpus"

    def faulty_open(file, mode="r", *args, **kwargs):  # as a read-only or full disk answers a write
        if str(file).startswith(str(target)) and any(c in mode for c in "wax"):
            code = getattr(errno, errno_name)
            raise OSError(code, os.strerror(code), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", faulty_open)
    monkeypatch.setattr(io, "open", faulty_open)  # Path.write_text's (atomic writes write a temporary file so)
    code, _, err = cli(capsys, "synth", "--out", target, "--n-train", "5", "--n-valid", "2", "--n-test", "2")
    assert_user_error(code, err, str(target), fragment)


def test_a_closed_pipe_ends_quietly(tmp_path, capsys, monkeypatch):
    import structnmt.cli.commands as cli_mod

    def reader_gone(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_mod, "cmd_score", reader_gone)
    monkeypatch.setattr(cli_mod, "_silence_stdout", lambda: None)  # pytest owns this process's stdout
    (tmp_path / "a.txt").write_text("x\n")
    code = main(["score", "--hyp", str(tmp_path / "a.txt"), "--ref", str(tmp_path / "a.txt")])
    out, err = capsys.readouterr()
    assert code == 141 and err == "" and "Traceback" not in out



@pytest.mark.parametrize("argv,fragment", [
    (["gate", "--checkpoint", "x.pt", "--input", "x.txt", "--out", "o", "--beam", "0"], "--beam: 0: give a whole number of at least 1"),
    (["gate", "--checkpoint", "x.pt", "--input", "x.txt", "--out", "o", "--batch-size", "0"], "--batch-size: 0: give"),
    (["gate", "--checkpoint", "x.pt", "--input", "x.txt", "--out", "o", "--max-sentences", "-1"], "--max-sentences: -1"),
    (["induce", "--checkpoint", "x.pt", "--conllu", "x.conllu", "--out", "o", "--head", "-2"], "--head: -2"),
    (["analyze", "--checkpoint", "x.pt", "--input", "x.txt", "--out", "o", "--sentences", "two"], "'two' is not a whole number"),
    (["demo", "--workdir", "d", "--updates", "0"], "--updates: 0: give a whole number of at least 1"),
    (["prepare", "-s", "a", "-t", "b", "--trainpref", "x", "--destdir", "d", "--vocab-size", "0"], "--vocab-size: 0"),
    (["prepare", "-s", "a", "-t", "b", "--trainpref", "x", "--destdir", "d", "--spacy-processes", "0"],
     "--spacy-processes: 0"),
    (["prepare", "-s", "a", "-t", "b", "--trainpref", "x", "--destdir", "d", "--merges", "-3"], "--merges: -3"),
    (["experiment", "grid.yaml", "--jobs", "0"], "--jobs: 0: give a whole number of at least 1"),
])
def test_option_values_out_of_range_are_refused_before_any_work(tmp_path, capsys, argv, fragment):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and fragment in err and "Traceback" not in err


# --------------------------------------------------------------------------- outputs: never onto an input, never partial


def test_translate_refuses_an_output_that_is_its_input_through_a_hard_link(trained, synth_data, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join((synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:2]) + "\n")
    before = src.read_bytes()
    os.link(src, tmp_path / "out.txt")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input", src,
                       "--output", tmp_path / "out.txt", "--no-progress")
    assert_user_error(code, err, "out.txt is the input file", "perhaps through a link")
    assert src.read_bytes() == before


def test_single_file_outputs_never_replace_a_file_they_did_not_write(trained, synth_data, tmp_path, capsys):
    """translate, average and induce-table refuse, before any work, an output that is a training's checkpoint
    name, another command's recorded file, a file of a prepared dataset, or (average, induce-table) an
    existing file that is not their own kind of output; their own earlier output is replaced."""
    import shutil

    run, data = tmp_path / "run", tmp_path / "data"
    shutil.copytree(trained / "run", run)
    shutil.copytree(synth_data, data)
    (tmp_path / "in.txt").write_text("\n".join((synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:2])
                                     + "\n")
    before_run, before_data = tree_snapshot(run), tree_snapshot(data)
    translate = ["translate", "--checkpoint", run / "checkpoint_last.pt", "--input", tmp_path / "in.txt", "--no-progress"]
    for out, fragment in ((run / "checkpoint_best.pt", "a name a training writes and resumes from"),
                          (run / "config.yaml", "was written by `structnmt train`"),
                          (data / "spm.model", "is a file of the prepared dataset")):
        code, _, err = cli(capsys, *translate, "--output", out)
        assert_user_error(code, err, str(out), fragment)
    code, _, err = cli(capsys, *translate, "--data", data, "--output", data / "spm.model")
    assert_user_error(code, err, "is a file of the prepared dataset")
    assert tree_snapshot(run) == before_run and tree_snapshot(data) == before_data

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, _, err = cli(capsys, "average", "--inputs", run, "--num", "2", "--output", notes)
    assert_user_error(code, err, "notes.txt", "not a file `structnmt average` wrote")
    assert notes.read_text() == "my notes\n"
    for _ in range(2):  # its own earlier average is replaced
        code, _, err = cli(capsys, "average", "--inputs", run, "--num", "2", "--output", tmp_path / "avg.pt")
        assert code == 0, err


def test_translate_checks_its_output_before_decoding(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x\n")
    (tmp_path / "in.txt").write_text("a b\n")
    # the checkpoint does not exist: the output's fault must be said first, before any loading or decoding
    code, _, err = cli(capsys, "translate", "--checkpoint", tmp_path / "missing.pt", "--input", tmp_path / "in.txt",
                       "--output", tmp_path / "a_file" / "out.txt")
    assert_user_error(code, err, str(tmp_path / "a_file"), "is a file, not a directory")


def test_average_refuses_a_training_owned_name_and_leaves_nothing_partial_on_a_full_disk(trained, tmp_path, capsys,
                                                                                       monkeypatch):
    import errno

    run = trained / "run"
    before = tree_snapshot(run)
    code, _, err = cli(capsys, "average", "--inputs", run, "--num", "2", "--output", run / "checkpoint_last.pt")
    assert_user_error(code, err, "checkpoint_last.pt is a name a training writes and resumes from", "average.pt")
    assert tree_snapshot(run) == before

    def full_disk(obj, f, *a, **k):  # the disk fills while the checkpoint's bytes are written (no file named)
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    import structnmt.fileio.files

    monkeypatch.setattr(structnmt.fileio.files, "write_torch", full_disk)
    (tmp_path / "avg.pt").write_bytes(b"PK\x03\x04 an older average")  # an earlier output of average, recorded
    from structnmt.fileio.files import record_output_file

    record_output_file(tmp_path / "avg.pt", "average")
    code, _, err = cli(capsys, "average", "--inputs", run, "--num", "2", "--output", tmp_path / "avg.pt")
    assert_user_error(code, err, f"{tmp_path / 'avg.pt'}: no space left on the device")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".structnmt-written.json", "avg.pt"]  # no temporary left
    assert (tmp_path / "avg.pt").read_bytes() == b"PK\x03\x04 an older average"  # the old output stays whole


def test_translate_refuses_parses_a_plain_model_would_ignore(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b\n")
    (tmp_path / "in.conllu").write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2\tb\t_\t_\t_\t_\t1\tdep\t_\t_\n\n")
    code, _, err = cli(capsys, "translate", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input",
                       tmp_path / "in.txt", "--output", tmp_path / "out.txt", "--parse-dependency", tmp_path / "in.conllu")
    assert_user_error(code, err, "--parse-dependency", "reads no parses", "drop --parse-dependency")
    assert not (tmp_path / "out.txt").exists()


def test_analyze_an_empty_file_and_a_long_line(trained, synth_data, tmp_path, capsys):
    import json

    (tmp_path / "empty.txt").write_text("\n\n")
    code, _, err = cli(capsys, "analyze", "--checkpoint", tmp_path / "missing.pt", "--input", tmp_path / "empty.txt",
                       "--out", tmp_path / "maps")
    assert_user_error(code, err, "empty.txt: no non-empty lines to analyse")  # said before any model is loaded
    lines = (synth_data.parent / "corpus" / "test.src").read_text().splitlines()[:2]
    (tmp_path / "in.txt").write_text("\n".join([" ".join(lines * 10), *lines]) + "\n")  # line 1: over 64 pieces
    code, _, err = cli(capsys, "analyze", "--checkpoint", trained / "run" / "checkpoint_last.pt", "--input",
                       tmp_path / "in.txt", "--out", tmp_path / "maps", "--sentences", "2")
    assert code == 0, err
    stats = json.loads((tmp_path / "maps" / "attention_stats.json").read_text())
    assert stats["skipped_too_long"] == [1] and stats["sentences"] == 2
    assert "analyze: 1 line(s) longer than model.max_positions=64 pieces skipped" in err and "line 1." in err


def test_prepare_does_not_rebuild_a_dataset_a_training_reads(synth_data, tmp_path, capsys):
    from structnmt.train.trainer import Trainer

    data = tmp_path / "data-bin"
    shutil.copytree(synth_data, data)
    corpus = synth_data.parent / "corpus"
    cfg = write_config(tmp_path / "cfg.yaml", data, tmp_path / "run")
    from structnmt.config import load_config

    trainer = Trainer(load_config(cfg), log=lambda *_: None)  # a live training of this dataset
    before = tree_snapshot(data)
    argv = ["prepare", "-s", "src", "-t", "tgt", "--trainpref", corpus / "train", "--validpref", corpus / "valid",
            "--testpref", corpus / "test", "--destdir", data, "--vocab-size", "500", "--no-progress"]
    try:
        code, _, err = cli(capsys, *argv)
        assert_user_error(code, err, "a running training reads this dataset", "another --destdir")
        assert tree_snapshot(data) == before
    finally:
        trainer.close()
    code, _, err = cli(capsys, *argv)  # the training ended: the dataset is rebuilt
    assert code == 0, err
    assert tree_snapshot(data) != before


@pytest.mark.parametrize("case", ["binary_csv", "binary_grid", "truncated_induce_json", "corrupt_ptb_zip"])
def test_corrupt_inputs_are_one_sentence(tmp_path, capsys, case):
    junk = bytes(range(128, 256)) * 3  # not UTF-8, not a zip
    if case == "binary_csv":
        (tmp_path / "r.csv").write_bytes(junk)
        argv, fragment = ["sweep-plot", tmp_path / "r.csv", "--pattern", "x(?P<x>1)", "--out", tmp_path / "o.png"], \
            "r.csv: not a CSV text file"
    elif case == "binary_grid":
        (tmp_path / "g.yaml").write_bytes(junk)
        argv, fragment = ["experiment", tmp_path / "g.yaml"], "g.yaml: not UTF-8 text"
    elif case == "truncated_induce_json":
        (tmp_path / "ind").mkdir()
        (tmp_path / "ind" / "induce.json").write_text('{"model": {"DA": 1')
        argv, fragment = ["induce-table", f"A={tmp_path / 'ind'}", "--out", tmp_path / "t.md"], \
            "induce.json: not a readable induce report"
    else:
        (tmp_path / "ptb").mkdir()
        for name in ("treebank.zip", "dependency_treebank.zip"):
            (tmp_path / "ptb" / name).write_bytes(junk)
        (tmp_path / "tag.yaml").write_text(f"corpus: {{name: ptb, path: {tmp_path / 'ptb'}}}\nout_dir: {tmp_path / 'o'}\n")
        argv, fragment = ["tag", tmp_path / "tag.yaml"], "is not a readable zip archive"
    code, _, err = cli(capsys, *argv)
    assert_user_error(code, err, fragment)


def test_sigterm_ends_a_command_like_ctrl_c_without_a_traceback(tmp_path):
    import signal

    (tmp_path / "ref.txt").write_text("a b\n")
    # `score` reading its hypotheses from a pipe that stays open: the command waits inside main()
    proc = subprocess.Popen([sys.executable, "-m", "structnmt.cli", "score", "--hyp", "/dev/stdin", "--ref",
                             str(tmp_path / "ref.txt")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def catches_sigterm() -> bool:  # the handler is installed: bit 15 of the caught-signals mask
        status = Path(f"/proc/{proc.pid}/status").read_text()
        mask = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        return bool(mask & (1 << (signal.SIGTERM - 1)))

    while proc.poll() is None and not catches_sigterm():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    assert proc.returncode == 2 and "structnmt: error: interrupted" in err and "Traceback" not in err, \
        f"exit {proc.returncode}; stderr:\n{err}"


def test_sigterm_inside_code_run_by_pyrun_string_still_ends_with_exit_status_2(tmp_path):
    """CPython ends `python -m` by SIGINT when a plain KeyboardInterrupt left code run through PyRun_String (as some
    extension modules run Python code), even if it was caught later; SIGTERM's interrupt has its own type, so the
    command keeps its exit status. A --user-dir plugin runs such code and waits in it for the signal."""
    import signal

    ready = tmp_path / "ready"
    (tmp_path / "ref.txt").write_text("a b\n")
    inner = f"import pathlib, time\npathlib.Path({str(ready)!r}).touch()\nwhile True: time.sleep(0.05)\n"
    (tmp_path / "embedded.py").write_text(
        "import ctypes\n"
        "run = ctypes.pythonapi.PyRun_String\n"
        "run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]\n"
        "run.restype = ctypes.py_object\n"
        f"run({inner.encode()!r}, 257, {{'__builtins__': __builtins__}}, {{}})  # 257: Py_file_input\n")
    proc = subprocess.Popen([sys.executable, "-m", "structnmt.cli", "score", "--hyp", "/dev/stdin", "--ref",
                             str(tmp_path / "ref.txt"), "--user-dir", str(tmp_path / "embedded.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and not ready.exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    assert proc.returncode == 2 and "structnmt: error: interrupted" in err and "Traceback" not in err, \
        f"exit {proc.returncode}; stderr:\n{err}"


def test_atomic_writes_keep_the_usual_file_mode(tmp_path):
    from structnmt.fileio.files import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "out.txt", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize(("override", "fragment"), [
    ("train.seed=-1", "train.seed=-1 must be in [0, 2**32)"),
    ("train.seed=4294967296", "train.seed=4294967296 must be in [0, 2**32)"),
    ("train.threads=100000", "train.threads=100000: this machine gives this process"),
])
def test_seeds_and_thread_counts_out_of_range_are_one_sentence(synth_data, tmp_path, capsys, override, fragment):
    """A seed numpy cannot take was a traceback; a thread count in the thousands a segmentation fault."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: {{path: {synth_data}}}\nmodel: {{d_model: 16, ffn_dim: 32, heads: 2, "
                   f"encoder_layers: 1, decoder_layers: 1}}\ntrain: {{save_dir: {tmp_path / 'run'}, max_updates: 1, "
                   "tensorboard: false}\n")
    code, _, err = cli(capsys, "train", cfg, override, "--no-progress")
    assert_user_error(code, err, fragment)
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()
