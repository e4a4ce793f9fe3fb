"""Worker options are capped at what the machine and the input can use, and the cap is said in one line
(`structnmt.machine.device.cap_workers`): `prepare --workers` and `--spacy-processes`, `translate --workers`,
`experiment --jobs`. The CPU count is set by monkeypatching `structnmt.machine.device.usable_cores`, so no test depends
on the machine it runs on."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, decode_in_this_process, train_tiny

import structnmt.machine.device as device
from structnmt.data import prepare as prepare_mod
from structnmt.experiment import runner as runner_mod


def _cpus(monkeypatch, n: int) -> None:
    monkeypatch.setattr(device, "usable_cores", lambda: n)


def _corpus(folder: Path, lines: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.src").write_text("".join(f"a b c {i % 7} d\n" for i in range(lines)))
    (folder / "train.tgt").write_text("".join(f"x y {i % 5} z\n" for i in range(lines)))
    return folder / "train"


def _shards_in_this_process(monkeypatch) -> list[int]:
    """run_shards replaced by one that encodes the shards here, one after the other: what prepare would have
    started, recorded as the number of processes per split."""
    started: list[int] = []

    def run_here(target, jobs, outs, places, *, advance):
        started.append(len(jobs))
        return [target(job, advance) for job in jobs]

    monkeypatch.setattr(prepare_mod, "run_shards", run_here)
    return started


def test_prepare_workers_are_capped_at_the_cpus_and_the_lines(tmp_path, monkeypatch, capsys):
    started = _shards_in_this_process(monkeypatch)
    _cpus(monkeypatch, 2)
    pref = _corpus(tmp_path / "c300", 300)
    code, out, err = cli(capsys, "prepare", "-s", "src", "-t", "tgt", "--trainpref", pref, "--destdir",
                         tmp_path / "d300", "--vocab-size", 40, "--workers", 1000, "--no-progress")
    assert code == 0, err
    assert "prepare: --workers 1000 capped at 2 (2 CPUs, 300 lines)" in out.splitlines()
    assert started == [2]
    _cpus(monkeypatch, 64)  # now the input binds: 3 lines give 3 processes at most
    pref = _corpus(tmp_path / "c3", 3)
    code, out, err = cli(capsys, "prepare", "-s", "src", "-t", "tgt", "--trainpref", pref, "--destdir",
                         tmp_path / "d3", "--vocab-size", 30, "--workers", 5, "--no-progress")
    assert code == 0, err
    assert "prepare: --workers 5 capped at 3 (3 lines)" in out.splitlines()
    assert started == [2, 3]
    code, out, err = cli(capsys, "prepare", "-s", "src", "-t", "tgt", "--trainpref", pref, "--destdir",
                         tmp_path / "d3b", "--vocab-size", 30, "--workers", 2, "--no-progress")
    assert code == 0 and "capped" not in out and started == [2, 3, 2]  # a request that fits is not mentioned


def test_prepare_spacy_processes_are_capped_at_the_batches_to_parse(tmp_path, monkeypatch, capsys):
    from structnmt.syntax.parsers import resolve_pipeline

    pytest.importorskip("spacy")
    if resolve_pipeline("en_core_web_sm") is None:
        pytest.skip("the en_core_web_sm pipeline is not installed")
    built = []
    real = prepare_mod.build_parser
    monkeypatch.setattr(prepare_mod, "build_parser", lambda cfg: built.append(cfg.n_process) or real(cfg))
    _cpus(monkeypatch, 8)
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "train.en").write_text("The cat sleeps.\nA dog barks loudly.\n" * 5)
    (folder / "train.de").write_text("Die Katze schläft.\nEin Hund bellt laut.\n" * 5)
    code, out, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", folder / "train", "--destdir",
                         tmp_path / "d", "--vocab-size", 40, "--parser", "spacy", "--spacy-processes", 6,
                         "--no-progress")
    assert code == 0, err
    assert "prepare: --spacy-processes 6 capped at 1 (1 batch of 512 lines to parse)" in out.splitlines()
    assert built == [1]
    manifest = (tmp_path / "d" / "manifest.json").read_text()
    assert '"n_process": 6' in manifest  # the dataset records what was asked: the same dataset on any machine
    # structnmt parse: the same cap, on the lines of its inputs
    code, out, err = cli(capsys, "parse", "--data", tmp_path / "d", "--input", folder / "train.en", "--out",
                         tmp_path / "p.jsonl", "--spacy-processes", 6, "--no-progress")
    assert code == 0, err
    assert "parse: --spacy-processes 6 capped at 1 (1 batch of 512 lines to parse)" in out.splitlines()


@pytest.fixture(scope="module")
def checkpoint(synth_data, tmp_path_factory) -> Path:
    return train_tiny(synth_data, tmp_path_factory.mktemp("caps") / "run")


def _pools_in_this_process(monkeypatch) -> list[int]:
    """DecodePool replaced by one that decodes here: the sizes of the pools translate started."""
    return decode_in_this_process(monkeypatch)


def test_translate_workers_are_capped_at_the_cpus_and_the_chunk(checkpoint, synth_data, tmp_path, monkeypatch,
                                                                  capsys):
    started = _pools_in_this_process(monkeypatch)
    src = synth_data.parent / "corpus" / "test.src"  # 60 lines: 15 batches of 4
    _cpus(monkeypatch, 2)
    code, _, err = cli(capsys, "translate", "--checkpoint", checkpoint, "--input", src, "--output",
                       tmp_path / "a.hyp", "--batch-size", 4, "--workers", 1000, "--no-progress")
    assert code == 0, err
    assert ("translate: --workers 1000 capped at 2 (2 CPUs, --chunk-batches 64: the input is decoded a chunk of 64 "
            "batches at a time, one process per batch)") in err.splitlines()
    assert started == [2]
    # --chunk-batches 1: each chunk is one batch, decoded by one process before the next chunk is read
    _cpus(monkeypatch, 4)
    code, _, err = cli(capsys, "translate", "--checkpoint", checkpoint, "--input", src, "--output",
                       tmp_path / "b.hyp", "--batch-size", 4, "--workers", 2, "--chunk-batches", 1, "--no-progress")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("translate:")]
    assert lines == ["translate: --workers 2 capped at 1 (--chunk-batches 1: the input is decoded a chunk of 1 batch "
                     "at a time, one process per batch)"]  # not "the input makes 1 batch"
    assert started == [2]  # no pool for the second command
    assert (tmp_path / "a.hyp").read_bytes() == (tmp_path / "b.hyp").read_bytes()


def _grid(tmp: Path, data: Path) -> Path:
    path = tmp / "grid.yaml"
    path.write_text(f"""
name: caps
out_dir: {tmp / 'out'}
data: {{path: {data}}}
base:
  model: {{d_model: 32, ffn_dim: 64, heads: 2, encoder_layers: 1, decoder_layers: 1}}
  train: {{tensorboard: false, threads: 1}}
budget: {{max_updates: 2}}
seeds: [1, 2]
baseline: A
runs:
  - name: A
  - name: B
    overrides: [model.encoder_layers=2]
evaluate: {{split: test}}
""")
    return path


def test_experiment_jobs_are_capped_at_the_cpus_and_the_runs_to_train(synth_data, tmp_path, monkeypatch, capsys):
    asked: list[int] = []
    monkeypatch.setattr(runner_mod, "schedule_runs", lambda runs, items, jobs: asked.append(jobs))  # trains nothing
    grid = _grid(tmp_path, synth_data)
    _cpus(monkeypatch, 2)
    code, out, err = cli(capsys, "experiment", grid, "--jobs", 8)
    assert code == 2 and "needs the results of the baseline" in err  # nothing was trained
    assert any(line.endswith("experiment: --jobs 8 capped at 2 (2 CPUs, 4 runs to train)") for line in out.splitlines()), out
    _cpus(monkeypatch, 16)
    code, out, err = cli(capsys, "experiment", grid, "--jobs", 8)
    assert any(line.endswith("experiment: --jobs 8 capped at 4 (4 runs to train)") for line in out.splitlines()), out
    assert asked == [2, 4]


def test_tag_jobs_are_capped_at_the_cpus_and_the_rows_to_train(tmp_path, monkeypatch, capsys):
    from test_tagger import tag_config

    from structnmt.tasks import tagger

    launched: list[str] = []
    monkeypatch.setattr(tagger.subprocesses, "launch_cli",  # each row's process fails at once: nothing trains
                        lambda argv, log, live: launched.append(argv[3]) or 1)
    rows = "rows:\n  - name: A\n  - name: B\n  - name: C\n"
    _cpus(monkeypatch, 2)
    code, out, err = cli(capsys, "tag", tag_config(tmp_path, epochs=1, extra=rows), "--jobs", 8)
    assert code == 2 and "tag: rows failed" in err
    assert "tag: --jobs 8 capped at 2 (2 CPUs, 3 rows to train)" in out.splitlines()
    assert sorted(launched) == ["A", "B", "C"]


def test_the_cap_says_every_limit_below_the_request():
    """The one helper every option goes through: each limit below the request is named, none when it fits."""
    import unittest.mock as mock

    with mock.patch.object(device, "usable_cores", lambda: 2):
        assert device.cap_workers(1000, "prepare: --workers", [(300, "300 lines")]) == (
            2, "prepare: --workers 1000 capped at 2 (2 CPUs, 300 lines)")
        assert device.cap_workers(2, "x: --n", [(300, "300 lines")]) == (2, None)
        assert device.cap_workers(5, "x: --n", [(0, "0 lines")]) == (1, "x: --n 5 capped at 1 (2 CPUs, 0 lines)")
    with mock.patch.object(device, "usable_cores", lambda: 1):
        assert device.cap_workers(3, "x: --n") == (1, "x: --n 3 capped at 1 (1 CPU)")
