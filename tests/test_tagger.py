"""structnmt tag: corpus readers (PTB sample by WSJ file, UD CoNLL-U in file order), the
bootstrap interval, and a tagger that learns a small tagging task with and without the
PhraseTransformer (its own small data, written here)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from structnmt.config import ConfigError
from structnmt.errors import UserError
from structnmt.tasks.tagger import accuracy_ci, paired_bootstrap, read_ptb, read_ud, run_tag


@pytest.fixture(autouse=True)
def _cpus_for_every_job(monkeypatch):
    """As many CPUs as the tests ask for jobs: --jobs is capped at the CPUs (tests/test_worker_caps.py), and these
    tests train two rows at once on any machine."""
    import structnmt.machine.device as device

    monkeypatch.setattr(device, "usable_cores", lambda: 8)


NOUNS, VERBS, DETS = ["dog", "cat", "bird", "fish"], ["runs", "sleeps", "eats", "sings"], ["the", "a"]


def _sentence(i: int) -> tuple[str, str]:
    """A PTB tree and its Malt-TAB dependency lines: DT NN VBZ ."""
    d, n, v = DETS[i % 2], NOUNS[i % 4], VERBS[(i // 4) % 4]
    tree = f"( (S (NP-SBJ (DT {d}) (NN {n})) (VP (VBZ {v}) (-NONE- *T*-1)) (. .)) )"
    dp = f"{d}\tDT\t2\n{n}\tNN\t3\n{v}\tVBZ\t0\n.\t.\t3\n"
    return tree, dp


def ptb_sample(root: Path, files: int = 6, per_file: int = 8) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(root / "treebank.zip", "w") as tb, zipfile.ZipFile(root / "dependency_treebank.zip", "w") as dz:
        for f in range(1, files + 1):
            sents = [_sentence(f * per_file + i) for i in range(per_file)]
            tb.writestr(f"treebank/combined/wsj_{f:04d}.mrg", "\n".join(t for t, _ in sents) + "\n")
            dps = [dp for _, dp in sents]
            if f == 2:  # one sentence whose dependency words differ: no gold tree for it, counted
                dps[0] = dps[0].replace("\t2\n", "\t2\n", 1).replace(".\t.", "!\t.", 1)
            dz.writestr(f"dependency_treebank/wsj_{f:04d}.dp", "\n".join(dps) + "\n")
    return root


def tag_config(tmp_path: Path, files: str = "[[3, 4], [5, 5], [6, 6]]", epochs: int = 2, extra: str = "") -> Path:
    """A tiny tag YAML over a fresh PTB-like sample in ``tmp_path``."""
    root = ptb_sample(tmp_path / "ptb")
    cfg = tmp_path / "tag.yaml"
    cfg.write_text(f"corpus: {{name: ptb, path: {root}}}\nsplit: {{ptb_files: {files}}}\n"
                   f"out_dir: {tmp_path / 'out'}\n"
                   "model: {layers: 1, d_model: 16, heads: 2, ffn_dim: 32, dropout: 0.0, min_count: 1}\n"
                   f"train: {{epochs: {epochs}, patience: 0, lr: 0.01, batch_size: 8}}\n" + extra)
    return cfg


def test_read_ptb_splits_by_file_and_strips_empty_elements(tmp_path):
    root = ptb_sample(tmp_path / "ptb")
    splits, stats = read_ptb(root, [[1, 4], [5, 5], [6, 6]])
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [32, 8, 8]
    s = splits["train"][0]
    assert s.tags == ["DT", "NN", "VBZ", "."] and len(s.words) == 4  # -NONE- removed
    assert s.tree is not None and s.tree.heads == [2, 3, 0, 3]
    assert stats["without_gold_dependencies"] == 1 and splits["train"][8].tree is None  # file 2, sentence 1
    assert stats["files_train"] == 4 and stats["files_test"] == 1
    with pytest.raises(UserError, match="treebank.zip: not found"):
        read_ptb(tmp_path / "nowhere", [[1, 4], [5, 5], [6, 6]])


@pytest.mark.parametrize("damaged", ["treebank.zip", "dependency_treebank.zip"])
def test_a_damaged_ptb_archive_is_named_with_the_member_it_cannot_read(tmp_path, capsys, damaged):
    """A junk archive is named (which of the two); a member whose bytes were damaged (CRC) too, with the member."""
    from conftest import assert_user_error, cli

    cfg = tag_config(tmp_path)
    archive = tmp_path / "ptb" / damaged
    data = bytearray(archive.read_bytes())
    member = b"wsj_0003"  # the first file of the training range; stored twice: local header, central directory
    at = data.index(member) + len(member) + (4 if damaged == "treebank.zip" else 3)
    data[at + 40] ^= 0xFF  # inside the compressed bytes of that member
    archive.write_bytes(bytes(data))
    code, _, err = cli(capsys, "tag", cfg)
    assert_user_error(code, err, f"{archive}: member", "wsj_0003", "copy the PTB sample again")
    archive.write_bytes(bytes(range(128, 256)) * 3)
    code, _, err = cli(capsys, "tag", cfg)
    assert_user_error(code, err, f"{archive} is not a readable zip archive")
    assert not (tmp_path / "out" / "result.json").exists()


def test_read_ud_contiguous_blocks(tmp_path):
    lines = []
    for i in range(10):
        lines += [f"# sent_id = {i}", "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_", "2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_", ""]
    path = tmp_path / "x.conllu"
    path.write_text("\n".join(lines) + "\n")
    splits, stats = read_ud(path, [8, 1, 1])
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [8, 1, 1] and stats["sentences"] == 10
    assert splits["test"][0].tags == ["DET", "NOUN"] and splits["test"][0].tree.heads == [2, 0]


def test_accuracy_ci():
    acc, lo, hi = accuracy_ci([3, 4, 5, 2], [4, 4, 5, 4])
    assert acc == pytest.approx(100 * 14 / 17)
    assert lo <= acc <= hi and hi <= 100.0
    assert accuracy_ci([5] * 50, [5] * 50)[1:] == (100.0, 100.0)  # no variance: a point interval


def test_paired_bootstrap():
    total = [10] * 40
    a = [8] * 40
    better = [9] * 40  # one more correct word in every sentence: always better
    d, p = paired_bootstrap(a, better, total)
    assert d == pytest.approx(10.0) and p == 0.0
    d, p = paired_bootstrap(better, a, total)
    assert d == pytest.approx(-10.0) and p == 0.0
    mixed = [9, 7] * 20  # the same total, better and worse by turns: no difference
    d, p = paired_bootstrap(a, mixed, total)
    assert d == 0.0 and p > 0.4


def test_tagger_refuses_mechanisms_that_need_an_eos_slot(tmp_path):
    cfg = tag_config(tmp_path, epochs=1)
    with pytest.raises(ConfigError, match="end-of-sentence"):
        run_tag(cfg, ["model.attention={name: mgsa}", "model.heads=4"], log=lambda *_: None)


@pytest.mark.parametrize("attention", ["{name: mha}", "{name: phrase_transformer, options: {k: 2}}",
                                       "{name: phrase_transformer, options: {k: 2, hypernodes: semantic}}"])
def test_tagger_learns_the_task(tmp_path, attention):
    """Tags are a function of the word here: every row must learn them (test accuracy 100 %)."""
    cfg = tag_config(tmp_path, files="[[1, 4], [5, 5], [6, 6]]", epochs=40, extra="trees: gold\n")
    overrides = [f"model.attention={attention}"]
    if "semantic" in attention:  # file 2 has a sentence without a gold tree: refused with a clear message
        with pytest.raises(ConfigError, match="1 have none"):
            run_tag(cfg, overrides)
        overrides.append("split.ptb_files=[[3, 4], [5, 5], [6, 6]]")
    report = run_tag(cfg, overrides, log=lambda *_: None)
    result = json.loads((tmp_path / "out" / "tagger" / "result.json").read_text())
    assert result["accuracy"] == 100.0 and result["n_tags"] == 4
    assert "| tagger | 100.00 |" in report.read_text()
    pred = (tmp_path / "out" / "tagger" / "test.pred").read_text().splitlines()
    assert len(pred) == 8 and pred[0].split()[1].endswith("/NN")
    assert np.isfinite(result["history"][-1]["train_loss"])


def test_rows_resume_and_report_only_trains_nothing(tmp_path, monkeypatch):
    """A finished row is read back, not retrained; --report-only reports the finished rows and
    names the rest."""
    import structnmt.tasks.tagger as tagger_mod

    cfg = tag_config(tmp_path, extra="rows:\n  - name: Transformer\n  - name: PhraseTransformer (k=2)\n"
                                     "    overrides: ['model.attention={name: phrase_transformer, options: {k: 2}}']\n")
    run_tag(cfg, ["rows=[{name: Transformer}]"], log=lambda *_: None)  # the first row only

    def no_training(*_a, **_k):
        raise AssertionError("a row was trained")

    monkeypatch.setattr(tagger_mod, "train_row", no_training)
    lines: list[str] = []
    md = run_tag(cfg, report_only=True, log=lines.append).read_text()
    assert any("Transformer: done before" in x for x in lines)
    assert "| Transformer | " in md and "| PhraseTransformer (k=2) |" not in md
    assert "Not run yet" in md and "PhraseTransformer (k=2)." in md
    assert f"Command: `structnmt tag {cfg} --report-only`" in md  # the report says how it was written
    # the finished row under other settings (an override, another corpus): not reused as if it were the same
    with pytest.raises(ConfigError, match=r"row 'Transformer' in .* was trained with other settings"):
        run_tag(cfg, ["train.lr=0.5"], report_only=True, log=lines.append)


def test_row_selection_and_rows_in_processes(tmp_path):
    """--row trains only the named rows (an unknown name is refused with the row list);
    --jobs 2 trains the remaining rows in their own processes, each with its log, and the
    report holds every row."""
    rows = ("rows:\n  - name: Transformer\n  - name: PhraseTransformer (k=2)\n"
            "    overrides: ['model.attention={name: phrase_transformer, options: {k: 2}}']\n"
            "  - config: rows/linear.yaml\n")  # a row file: its name and mechanism
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "linear.yaml").write_text(
        "name: Linear PhraseTransformer (k=2)\nmodel: {attention: {name: phrase_transformer, "
        "options: {k: 2, nonlinear: false}}}\n")
    cfg = tag_config(tmp_path, epochs=1, extra=rows)
    with pytest.raises(ConfigError, match="no row named 'Transformr'; its rows are: Transformer; "):
        run_tag(cfg, only_rows=["Transformr"], log=lambda *_: None)
    md = run_tag(cfg, only_rows=["Transformer"], log=lambda *_: None).read_text()
    out = tmp_path / "out"
    assert (out / "Transformer" / "result.json").is_file()
    assert not (out / "PhraseTransformer_k2").exists()
    assert "--row Transformer" in md and "Not run yet" in md and "PhraseTransformer (k=2)" in md
    lines: list[str] = []
    md = run_tag(cfg, jobs=2, log=lines.append).read_text()
    for name in ("PhraseTransformer_k2", "Linear_PhraseTransformer_k2"):
        assert (out / name / "result.json").is_file()
        assert json.loads((out / name / "result.json").read_text())["params"] > json.loads(
            (out / "Transformer" / "result.json").read_text())["params"]  # phase 2's projections: not a Transformer
        assert "test accuracy" in (out / name / "tag.log").read_text()  # the child's own output
    assert not (out / "Transformer" / "tag.log").exists()  # finished before: not relaunched
    assert "Not run yet" not in md and md.count("| PhraseTransformer (k=2) |") == 1
    assert "--jobs 2" in md and sum("in its own process" in x for x in lines) == 2


def test_cli_row_and_jobs_refuse_bad_input_in_one_sentence(tmp_path, capsys):
    """Through the CLI: an unknown --row names the table's rows, --jobs 0 is refused; both
    exit with status 2 and a one-line message, and nothing is trained."""
    from structnmt.cli import main

    cfg = tag_config(tmp_path, epochs=1, extra="rows:\n  - name: Transformer\n")
    assert main(["tag", str(cfg), "--row", "Transformr", "train.epochs=1"]) != 0
    err = capsys.readouterr().err
    assert "no row named 'Transformr'; its rows are: Transformer." in err and "Traceback" not in err
    assert main(["tag", str(cfg), "--jobs", "0"]) != 0
    assert "--jobs 0: give the number of rows to train at once" in capsys.readouterr().err
    assert main(["tag", str(cfg), "train.max_batch_nodes=-5"]) == 2
    err = capsys.readouterr().err
    assert "train.max_batch_nodes=-5 must be 0 (whole batches) or a positive node count." in err
    assert "Traceback" not in err
    # a corpus too small for its three splits (no file 9 for the test split): one sentence, not a division by zero
    (tmp_path / "small").mkdir()
    small = tag_config(tmp_path / "small", files="[[3, 4], [5, 5], [9, 9]]", epochs=1)
    assert main(["tag", str(small)]) == 2
    err = capsys.readouterr().err
    assert "split(s) hold no words" in err and "raise corpus.limit" in err and "Traceback" not in err
    for bad, fragment in (("train.epochs=0", "train.epochs=0 must be at least 1"),
                          ("train.batch_size=0", "train.batch_size=0 must be at least 1"),
                          ("train.lr=0", "train.lr=0.0 must be a positive number")):
        assert main(["tag", str(cfg), bad]) == 2
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_chunked_training_runs_through_the_cli(tmp_path):
    """train.max_batch_nodes through `structnmt tag`: a PhraseTransformer row trains and scores."""
    from structnmt.cli import main

    cfg = tag_config(tmp_path, epochs=1)
    assert main(["tag", str(cfg), "model.attention={name: phrase_transformer, options: {k: 3}}",
                 "train.max_batch_nodes=12"]) == 0
    result = json.loads(next((tmp_path / "out").rglob("result.json")).read_text())
    assert 0.0 <= result["accuracy"] <= 100.0 and result["test_tokens"] > 0


def test_chunked_batches_give_the_whole_batch_gradient_and_predictions():
    """train.max_batch_nodes: a batch cut into length-sorted chunks (words + hypernodes) gives
    the same gradient as the whole batch (dropout off) and the same predictions."""
    import torch
    import torch.nn.functional as F

    from structnmt.config import AttentionSpec
    from structnmt.tasks.tagger import (
        Sentence,
        Tagger,
        TagModelConfig,
        _batch,
        _feature_values,
        _predict,
        node_chunks,
    )

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    vocab = {"<pad>": 0, "<unk>": 1, **{f"w{i}": i + 2 for i in range(20)}}
    tags = {"A": 0, "B": 1, "C": 2}
    sents = [Sentence(words=[f"w{rng.integers(20)}" for _ in range(n)], tags=[["A", "B", "C"][rng.integers(3)]
                                                                              for _ in range(n)])
             for n in (3, 11, 5, 2, 9, 7, 1, 6)]
    sents[2].tags[1] = "Z"  # a tag unseen in training: ignored in both losses
    mc = TagModelConfig(layers=2, d_model=16, heads=2, ffn_dim=32, dropout=0.0, attention_dropout=0.0,
                        attention=AttentionSpec(name="phrase_transformer", options={"k": 3}))
    model = Tagger(mc, len(vocab), len(tags))
    specs = model.required_structures()
    _feature_values(sents, specs)
    counts = {len(s.words): len(s.words) + len(s.features[next(iter(specs))][0]) for s in sents}
    assert counts[11] == 11 + 10 + 9 and counts[1] == 1  # words + bigrams + trigrams

    def grads(max_nodes: int) -> list[torch.Tensor]:
        model.zero_grad()
        n_tags = sum(sum(t in tags for t in s.tags) for s in sents)
        chunks = node_chunks(sents, specs, max_nodes)
        for chunk in chunks:
            words, mask, st, y = _batch(chunk, vocab, tags, specs, "cpu")
            (F.cross_entropy(model(words, mask, st).flatten(0, 1), y.flatten(), ignore_index=-100,
                             reduction="sum") / n_tags).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None], len(chunks)

    chunks = node_chunks(sents, specs, 40)
    assert sorted(id(s) for c in chunks for s in c) == sorted(id(s) for s in sents)  # a partition
    assert all(len(c) == 1 or len(c) * max(counts[len(s.words)] for s in c) <= 40 for c in chunks)
    assert node_chunks(sents, specs, 0) == [sents]
    whole, n1 = grads(0)
    chunked, n2 = grads(40)
    assert n1 == 1 and n2 > 2
    words, mask, st, y = _batch(sents, vocab, tags, specs, "cpu")
    model.zero_grad()
    F.cross_entropy(model(words, mask, st).flatten(0, 1), y.flatten(), ignore_index=-100).backward()
    mean_loss = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    for a, b, c in zip(whole, chunked, mean_loss):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-4)
    assert _predict(model, sents, vocab, tags, specs, "cpu", 4, 40) == _predict(model, sents, vocab, tags, specs,
                                                                                 "cpu", 128, 0)


def test_ctrl_c_of_tag_jobs_starts_no_queued_row_and_stops_the_running_ones(tmp_path, monkeypatch):
    from conftest import CtrlCDuringTwoLaunches

    import structnmt.machine.subprocesses as subprocesses_mod
    from structnmt.tasks.tagger import _train_rows_in_processes

    ctrl_c = CtrlCDuringTwoLaunches()  # a row's process runs until stopped
    monkeypatch.setattr(subprocesses_mod, "launch_cli", lambda args, log_path, live=None: ctrl_c.launch(
        args[args.index("--row") + 1], live))
    lines: list[str] = []
    with ctrl_c, pytest.raises(KeyboardInterrupt):
        _train_rows_in_processes(tmp_path / "tag.yaml", [], ["a", "b", "c"], tmp_path / "out", 2, lines.append)
    started, procs = ctrl_c.started, ctrl_c.procs
    assert sorted(started) == ["a", "b"] and all(p.poll() is not None for p in procs)
    assert any("interrupted: stopping 2 running row(s)" in x for x in lines)


def test_tag_says_its_out_dir_cannot_be_written_before_training(tmp_path, capsys):
    """An out_dir under a file used to be found only after every row had trained."""
    from conftest import assert_user_error, cli

    cfg = tag_config(tmp_path, epochs=1)
    (tmp_path / "a_file").write_text("x\n")
    code, out, err = cli(capsys, "tag", cfg, f"out_dir={tmp_path / 'a_file' / 'tg'}")
    assert_user_error(code, err, str(tmp_path / "a_file"), "is a file, not a directory")
    assert "training" not in out + err and (tmp_path / "a_file").read_text() == "x\n"
