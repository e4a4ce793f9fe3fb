"""``structnmt experiment``: a two-config grid on synthetic data, end to end and resumed."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from structnmt.config import ConfigError
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.experiment import load_grid, run_grid
from structnmt.experiment import runner as runner_mod
from structnmt.experiment.grid import ExperimentError
from structnmt.experiment.report import format_params, significance_mark

TINY_BASE = """
base:
  data: {max_tokens: 512, max_len: 64}
  model: {d_model: 32, ffn_dim: 64, heads: 2, encoder_layers: 1, decoder_layers: 1, dropout: 0.1,
          share_all_embeddings: true}
  train: {lr: 0.005, warmup_updates: 4, save_interval_updates: 2, validate_interval_updates: 2,
          keep_last: 5, log_interval: 1, tensorboard: false, threads: 1}
  decode: {max_len_a: 1.0, max_len_b: 3, batch_size: 64}
"""


def _grid(tmp: Path, corpus: Path, out: Path, extra: str = "") -> Path:
    text = f"""
name: tiny grid
out_dir: {out}
data:
  prepare:
    source_lang: src
    target_lang: tgt
    trainpref: {corpus / 'train'}
    validpref: {corpus / 'valid'}
    testprefs: [{corpus / 'test'}]
    vocab_size: 300
    destdir: {tmp / 'data-bin'}
{TINY_BASE}
budget: {{max_updates: 6}}
seeds: [1]
baseline: Transformer-Base
runs:
  - name: Transformer-Base
  - name: + post-norm (2 layers)
    overrides: [model.pre_norm=false, model.encoder_layers=2]
evaluate: {{split: test, average_last: 2, beam: 2, bootstrap_samples: 50}}
{extra}
"""
    path = tmp / "grid.yaml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _cpus_for_every_job(monkeypatch):
    """As many CPUs as the tests ask for jobs: --jobs is capped at the CPUs (tests/test_worker_caps.py), and these
    tests train two runs at once on any machine."""
    import structnmt.machine.device as device

    monkeypatch.setattr(device, "usable_cores", lambda: 8)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("exp_corpus")
    write_corpus(SynthConfig(seed=3, n_train=400, n_valid=12, n_test=16), root)
    return root


def test_tiny_grid_end_to_end_and_resume(tmp_path, corpus, monkeypatch):
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    launched: list[str] = []
    real_launch = runner_mod.launch_training

    def recording_launch(config_path: Path, log_path: Path, live=None) -> int:
        launched.append(config_path.parent.parent.name)
        return real_launch(config_path, log_path, live)

    monkeypatch.setattr(runner_mod, "launch_training", recording_launch)
    real_eval, asked = runner_mod._evaluate_run, []
    monkeypatch.setattr(runner_mod, "_evaluate_run",
                        lambda *a, workers=1: asked.append(workers) or real_eval(*a, workers=workers))
    lines: list[str] = []
    report = run_grid(grid, overrides=["train.threads=1"], log=lines.append)

    assert report == out / "results.md"
    assert launched == ["transformer-base", "post-norm-2-layers"]
    assert asked == [None, None]  # one run at a time: decoded as translate does by default
    res = json.loads((out / "runs" / "transformer-base" / "seed1" / "result.json").read_text())
    assert res["decode_workers"] == 1  # a test set of a few batches: this process
    # how it trained, as the trainer recorded it (the runner's precision check reads this)
    assert (res["train_device"], res["train_precision"]) == ("cpu", "float32")
    st = torch.load(out / "runs" / "transformer-base" / "seed1" / "checkpoint_last.pt", weights_only=False)
    assert (st["run"]["device"], st["run"]["bf16_autocast"]) == ("cpu", False)
    for name in ("results.md", "results.csv", "learning_curves.png", "ngram_gain.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    with open(out / "results.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["system"] for r in rows] == ["Transformer-Base", "+ post-norm (2 layers)"]
    assert "p_value" in rows[0]
    base, variant = rows
    assert float(base["delta"]) == 0.0 and base["p_value"] == "" and base["mark"] == ""
    p = float(variant["p_value"])
    assert 0.0 < p <= 1.0
    assert float(variant["delta"]) == pytest.approx(float(variant["bleu"]) - float(base["bleu"]))
    assert int(variant["params"]) > int(base["params"]) > 0  # one more encoder layer
    assert all(int(r["num_updates"]) == 6 for r in rows)
    md = report.read_text(encoding="utf-8")
    assert "| System | # Params | Speed (train tok/s) | Decode (sent/s) | Peak mem (MB) | BLEU | Δ | p | chrF |" in md
    assert "6 updates per run" in md and "paired bootstrap resampling (50 samples" in md
    assert "nrefs:1" in md and "Command" in md
    assert not (out / "deltas.png").exists() and "deltas.png" not in md  # one seed: no interval to draw
    first_hyps = (out / "runs" / "post-norm-2-layers" / "seed1" / "test.hyp").read_text()
    first_avg = torch.load(out / "runs" / "post-norm-2-layers" / "seed1" / "average.pt", weights_only=False)["model"]

    # interrupt the variant after update 2: drop its result and its later checkpoints
    run_dir = out / "runs" / "post-norm-2-layers" / "seed1"
    for name in ("result.json", "train_done.json", "checkpoint_4.pt", "checkpoint_6.pt", "average.pt"):
        (run_dir / name).unlink()
    shutil.copy(run_dir / "checkpoint_2.pt", run_dir / "checkpoint_last.pt")

    launched.clear()

    def only_unfinished(config_path: Path, log_path: Path, live=None) -> int:
        assert "transformer-base" not in str(config_path), "a finished run was trained again"
        launched.append(config_path.parent.parent.name)
        return real_launch(config_path, log_path, live)

    monkeypatch.setattr(runner_mod, "launch_training", only_unfinished)
    lines.clear()
    run_grid(grid, overrides=["train.threads=1"], log=lines.append)
    assert launched == ["post-norm-2-layers"]
    assert any("Transformer-Base (seed 1): finished earlier, skipped" in x for x in lines)
    assert any("resuming training from update 2" in x for x in lines)
    log = (run_dir / "train.log").read_text()
    assert "resumed from" in log and "at update 2" in log
    st = torch.load(run_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert st["run"]["num_updates"] == 6
    # the trainer reproduces the uninterrupted run: the same averaged model, the same translations
    torch.testing.assert_close(torch.load(run_dir / "average.pt", weights_only=False)["model"], first_avg)
    assert (run_dir / "test.hyp").read_text() == first_hyps
    with open(out / "results.csv", encoding="utf-8") as f:
        assert len(list(csv.DictReader(f))) == 2

    # a changed budget is refused for an existing output directory
    with pytest.raises(ConfigError, match="different configuration"):
        run_grid(grid, overrides=["train.threads=1", "budget.max_updates=8"], log=lines.append)
    # ... but logging-only keys (the trainer's resumable keys, less the budget) are not a new configuration
    lines.clear()
    run_grid(grid, overrides=["train.threads=2", "train.head_roles=true", "train.log_interval=7"], log=lines.append)
    assert sum("finished earlier, skipped" in x for x in lines) == 2
    # train.bf16 is autocast on CUDA only: runs finished on this CPU trained in float32 whatever it said
    lines.clear()
    run_grid(grid, overrides=["train.threads=1", "train.bf16=false"], log=lines.append)
    assert sum("finished earlier, skipped" in x for x in lines) == 2
    # a finished float32 run whose train.bf16 differs, read where this command would train new runs in bf16 (a GPU,
    # as patched): reported, and said in one line
    resolved = out / "runs" / "transformer-base" / "seed1" / "resolved.yaml"
    text = resolved.read_text()
    resolved.write_text(text.replace("bf16: true", "bf16: false"))
    real_cuda = torch.cuda.is_available
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    lines.clear()
    run_grid(grid, overrides=["train.threads=1"], report_only=True, log=lines.append)
    monkeypatch.setattr(torch.cuda, "is_available", real_cuda)
    resolved.write_text(text)
    said = [x for x in lines if "trained in float32" in x]
    assert len(said) == 1 and "Transformer-Base (seed 1)" in said[0] and "train.bf16=false" in said[0]

    # two runs trained at once (--jobs 2) give the same models and translations as one after the other
    out2 = tmp_path / "out_jobs2"
    lines.clear()
    monkeypatch.setattr(runner_mod, "launch_training", real_launch)
    run_grid(grid, out_dir=out2, overrides=["train.threads=1"], jobs_at_once=2, log=lines.append)
    assert any("training up to 2 runs at once" in x for x in lines)
    for d in ("transformer-base", "post-norm-2-layers"):
        assert (out2 / "runs" / d / "seed1" / "test.hyp").read_text() == (out / "runs" / d / "seed1" / "test.hyp").read_text()
    with open(out2 / "results.csv", encoding="utf-8") as f:
        assert [r["system"] for r in csv.DictReader(f)] == ["Transformer-Base", "+ post-norm (2 layers)"]
    assert "--jobs 2" in (out2 / "results.md").read_text(encoding="utf-8")


def test_grid_validation(tmp_path, corpus):
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out, extra="baselin: x")
    with pytest.raises(ConfigError, match="unknown key 'baselin'; did you mean 'baseline'"):
        load_grid(grid)
    grid = _grid(tmp_path, corpus, out)
    text = grid.read_text().replace("budget: {max_updates: 6}", "budget: {max_updates: 6, max_time_minutes: 1}")
    grid.write_text(text)
    with pytest.raises(ConfigError, match="exactly one of max_updates"):
        load_grid(grid)
    # a command-line budget replaces the grid's, so this one is valid
    g, run_over = load_grid(grid, ["budget.max_target_tokens=5000", "train.threads=1", "seeds=[1,2]"])
    assert g.budget.which() == ("max_target_tokens", 5000) and g.seeds == [1, 2] and run_over == ["train.threads=1"]
    with pytest.raises(ConfigError, match="fixed by the grid.*budget.max_updates"):
        load_grid(grid, ["train.max_updates=10"])
    grid = _grid(tmp_path, corpus, out)
    grid.write_text(grid.read_text().replace("baseline: Transformer-Base", "baseline: Transformer-Bsae"))
    with pytest.raises(ConfigError, match="did you mean 'Transformer-Base'"):
        load_grid(grid)
    grid = _grid(tmp_path, corpus, out)
    grid.write_text(grid.read_text().replace("evaluate: {split: test", "evaluate: {splt: test"))
    with pytest.raises(ConfigError, match="evaluate: unknown key 'splt'; did you mean 'split'"):
        load_grid(grid)


def test_run_config_resolution(tmp_path, corpus):
    from structnmt.experiment.grid import resolve_run_config

    variant_cfg = tmp_path / "variant.yaml"
    variant_cfg.write_text("model: {heads: 4}\ntrain: {max_updates: 999}\n")
    grid = _grid(tmp_path, corpus, tmp_path / "out")
    grid.write_text(grid.read_text().replace("overrides: [model.pre_norm=false", "config: variant.yaml\n    overrides: [model.pre_norm=false"))
    g, over = load_grid(grid, ["decode.batch_size=7"])
    cfg = resolve_run_config(g, g.runs[1], 3, data_path=tmp_path / "d", run_dir=tmp_path / "r", overrides=over)
    assert cfg.model.heads == 4 and cfg.model.pre_norm is False and cfg.model.encoder_layers == 2
    assert cfg.model.d_model == 32  # from the inline base
    assert cfg.train.max_updates == 6 and cfg.train.max_time_minutes == 0 and cfg.train.max_target_tokens == 0
    assert cfg.train.seed == 3 and cfg.train.save_dir == str(tmp_path / "r") and cfg.data.path == str(tmp_path / "d")
    assert cfg.decode.batch_size == 7 and cfg.train.progress is False


def test_marks_and_params():
    assert significance_mark(0.004, 0.5) == "⇑" and significance_mark(0.03, 0.5) == "↑"
    assert significance_mark(0.004, -0.5) == "⇓" and significance_mark(0.2, 0.5) == ""
    assert significance_mark(None, 0.0) == ""
    assert format_params(2_634_000) == "2.6M" and format_params(53_210) == "53.2K"


def test_failed_training_is_one_clear_error(tmp_path, corpus, monkeypatch):
    from structnmt.experiment import ExperimentError

    def failing(config_path: Path, log_path: Path, live=None) -> int:
        log_path.write_text("Traceback ...\nRuntimeError: out of memory\n")
        return 1

    monkeypatch.setattr(runner_mod, "launch_training", failing)
    grid = _grid(tmp_path, corpus, tmp_path / "out")
    with pytest.raises(ExperimentError, match=r"training failed with exit status 1; see .*train.log.*out of memory"):
        run_grid(grid, log=lambda *_: None)
    assert not (tmp_path / "out" / "runs" / "transformer-base" / "seed1" / "result.json").exists()


def test_a_failing_decode_is_reported_at_once_and_the_other_runs_finish(tmp_path, corpus, monkeypatch):
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    real_eval = runner_mod._evaluate_run

    asked: list = []

    def failing_eval(g, cfg, run_dir, splits, workers=1):
        asked.append(workers)
        if "transformer-base" in str(run_dir):
            raise RuntimeError("decoder exploded")
        return real_eval(g, cfg, run_dir, splits, workers)

    monkeypatch.setattr(runner_mod, "_evaluate_run", failing_eval)
    lines: list[str] = []
    with pytest.raises(RuntimeError, match="decoder exploded"):
        run_grid(grid, overrides=["train.threads=1"], jobs_at_once=2, log=lines.append)
    said = [x for x in lines if "decoder exploded" in x]
    assert said and "run the same command again" in said[0]
    assert (out / "runs" / "post-norm-2-layers" / "seed1" / "result.json").exists()  # the other run finished
    base = out / "runs" / "transformer-base" / "seed1"
    assert (base / "train_done.json").exists() and not (base / "result.json").exists()
    assert asked == [1, 1]  # runs trained side by side decode in one process each
    # fixed: the same command decodes the failed run only
    monkeypatch.setattr(runner_mod, "_evaluate_run", real_eval)
    lines.clear()
    run_grid(grid, overrides=["train.threads=1"], jobs_at_once=2, log=lines.append)
    assert any("Transformer-Base (seed 1): training finished earlier; decoding." in x for x in lines)
    assert (base / "result.json").exists()


def test_a_grid_on_the_generalization_benchmark_reports_every_split(tmp_path):
    """evaluate.benchmark: every run translates each split; one table per split with
    mean ± std over seeds and paired tests; training stops early on patience."""
    import json

    from structnmt.data.generalization import BenchmarkConfig, write_benchmark
    from structnmt.experiment.generalization_report import paired_randomization

    bench = tmp_path / "bench"
    write_benchmark(BenchmarkConfig(seed=2, n_train=300, n_valid=10, n_test=8, n_gen=6), bench)
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"""
name: tiny generalization grid
out_dir: {tmp_path / 'out'}
data:
  prepare: {{source_lang: src, target_lang: tgt, trainpref: {bench / 'train'}, validpref: {bench / 'valid'},
            testprefs: [{bench / 'test'}], vocab_size: 300, destdir: {tmp_path / 'bin'}, parser: {{name: synthetic}}}}
{TINY_BASE}
budget: {{max_updates: 6, patience: 1}}
seeds: [1, 2]
runs:
  - name: Transformer-Base
  - name: + MG-SA (syntactic)
    overrides:
      - 'model.attention.overrides={{"encoder_self.0": {{name: mgsa, options: {{preset: syntax, composition: san, interaction: none}}}}}}'
      - model.heads=4
evaluate: {{split: test, average_last: 2, beam: 2, bootstrap_samples: 20, benchmark: {bench}}}
""")
    report = run_grid(grid, log=lambda *_: None).read_text()
    for split in ("test", "attraction2", "attraction3", "attraction4", "depth2", "depth3", "length", "recombination"):
        assert f"### {split}: " in report
    assert "| Transformer-Base | " in report and "agreement_by_attractors.png" in report
    assert (tmp_path / "out" / "agreement_by_attractors.png").stat().st_size > 0
    with open(tmp_path / "out" / "generalization.csv", encoding="utf-8") as f:
        gen = list(csv.DictReader(f))
    a4 = [r for r in gen if r["System"] == "Transformer-Base" and r["split"] == "attraction4"][0]
    seeds_a4 = [json.loads((tmp_path / "out" / "runs" / "transformer-base" / f"seed{k}" / "result.json").read_text())
                ["benchmark"]["attraction4"]["agreement"] for k in (1, 2)]
    assert int(a4["n_seeds"]) == 2 and float(a4["agreement"]) == pytest.approx(sum(seeds_a4) / 2)
    result = json.loads((tmp_path / "out" / "runs" / "transformer-base" / "seed2" / "result.json").read_text())
    assert set(result["benchmark"]) == {"test", "attraction2", "attraction3", "attraction4", "depth2", "depth3",
                                        "length", "recombination"}
    assert result["benchmark"]["attraction4"]["sentences"] == 6
    resolved = (tmp_path / "out" / "runs" / "transformer-base" / "seed1" / "resolved.yaml").read_text()
    assert "patience: 1" in resolved
    # the accuracies by the seed-aware test (2 seeds a side), as the report's header says
    from structnmt.evaluate.seeds import seed_aware_accuracy_test
    from structnmt.experiment.generalization_report import read_per_sentence, sentence_counts

    assert "the same seed-aware test on the accuracies" in report
    runs = {n: [sentence_counts(read_per_sentence(tmp_path / "out" / "runs" / n / f"seed{k}", "attraction4"), "agreement")
                for k in (1, 2)] for n in ("transformer-base", "mg-sa-syntactic")}
    expected = seed_aware_accuracy_test(runs["transformer-base"], {"s": runs["mg-sa-syntactic"]}, n_samples=20,
                                        seed=12345)["s"].p_value
    section = report.split("### attraction4: ")[1].split("### ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| + MG-SA (syntactic) |"))
    assert row.split(" | ")[5] == f"{expected:.3f}"
    assert paired_randomization([1, 1, 1, 1, 1, 1, 1, 1], [0] * 8) < 0.02
    assert paired_randomization([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0

    # --report-only on a copied, unfinished output directory: nothing is trained or decoded, the
    # report reads the runs where they are now and names the missing one
    moved = tmp_path / "moved"
    shutil.move(str(tmp_path / "out"), moved)
    (moved / "runs" / "mg-sa-syntactic" / "seed2" / "result.json").unlink()

    def no_training(*_):
        raise AssertionError("--report-only trained a run")

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(runner_mod, "launch_training", no_training)
    monkeypatch.setattr(runner_mod, "_evaluate_run", no_training)
    try:
        lines: list[str] = []
        # the missing run's config would have 2 threads: the report gives those of the runs it reports
        md = run_grid(grid, out_dir=moved, overrides=["train.threads=2"], report_only=True,
                      log=lines.append).read_text()
    finally:
        monkeypatch.undo()
    assert re.search(r"train\.threads 1(;| \()", md)  # not "1, 2"
    assert any("+ MG-SA (syntactic) (seed 2): no results yet (trained, not yet decoded and scored;" in x
               for x in lines)
    assert "**Unfinished grid**" in md and "+ MG-SA (syntactic) (seed 2)" in md
    assert "(1 of 2)" in md  # its mean is over the one seed it has
    assert "agreement by distance (words)" in md and "(recorded by the runs)" in md
    assert "--report-only" in md
    # without the baseline's first seed there is nothing to compare against
    (moved / "runs" / "transformer-base" / "seed1" / "result.json").unlink()
    with pytest.raises(ExperimentError, match="needs the results of the baseline"):
        run_grid(grid, out_dir=moved, report_only=True, log=lambda *_: None)


def test_every_run_translates_the_extra_files_and_a_bad_one_is_recorded(tmp_path, corpus):
    """evaluate.translate: each run's averaged model translates the listed files (the blind sets,
    in the real grids) into <run>/<name>.hyp, one line per input line; a file it cannot read is
    recorded in result.json with the reason, and the grid finishes."""
    import gzip
    import json

    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    text = grid.read_text()
    blind = tmp_path / "blind.src.gz"
    src_lines = (corpus / "test.src").read_text().splitlines()[:5]
    with gzip.open(blind, "wt", encoding="utf-8") as f:
        f.write("\n".join(src_lines) + "\n")
    bad = tmp_path / "latin1.src"
    bad.write_bytes("caf\xe9\n".encode("latin-1"))
    text = text.replace("evaluate: {split: test, average_last: 2, beam: 2, bootstrap_samples: 50}",
                        f"evaluate: {{split: test, average_last: 2, beam: 2, bootstrap_samples: 50, "
                        f"translate: [{blind}, {bad}]}}")
    text = text.replace("  - name: + post-norm (2 layers)\n    overrides: [model.pre_norm=false, model.encoder_layers=2]\n",
                        "")
    grid.write_text(text)
    run_grid(grid, overrides=["train.threads=1"], log=lambda *_: None)
    run_dir = out / "runs" / "transformer-base" / "seed1"
    hyp = (run_dir / "blind.src.hyp").read_text(encoding="utf-8").split("\n")
    assert len(hyp) == len(src_lines) + 1 and hyp[-1] == ""
    res = json.loads((run_dir / "result.json").read_text())
    assert res["translated"][str(blind)] == "blind.src.hyp"
    assert res["translated"][str(bad)].startswith("not translated:") and "latin1.src" in res["translated"][str(bad)]


def test_an_option_added_after_a_run_started_is_its_default_not_a_change():
    """A run dir's resolved.yaml written before an option existed compares as that option's default;
    a real change, or an option the toolkit no longer knows, is still a difference."""
    from structnmt.config import Config, to_dict
    from structnmt.experiment.runner import _config_diff

    new = to_dict(Config())
    old = to_dict(Config())
    del old["model"]["rnn"]["score_cap"]  # written by an older toolkit
    assert _config_diff(old, new) == []
    old["model"]["d_model"] = 64
    assert _config_diff(old, new) == ["model.d_model"]
    old = to_dict(Config())
    old["model"]["rnn"]["retired_option"] = 1
    assert _config_diff(old, new) == ["model.rnn.retired_option"]



def test_seeds_extra_splits_and_grid_overrides(tmp_path, corpus, monkeypatch):
    """Two seeds per row: the report's p-values are the seed-aware test's (recomputed here from the
    runs' translations), results.csv has every seed's scores; a split added to a finished grid is
    decoded from the runs' averages without training; the grid's overrides reach every run."""
    import json

    import yaml

    from structnmt.evaluate.seeds import seed_aware_test
    from structnmt.fileio.files import read_lines_exact

    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out, extra="overrides: ['train.lr_schedule=linear', 'train.warmup_updates=2']")
    text = grid.read_text().replace("seeds: [1]", "seeds: [1, 2]").replace(
        f"testprefs: [{corpus / 'test'}]", f"testprefs: [{corpus / 'test'}, {corpus / 'valid'}]")
    grid.write_text(text)
    first: list[str] = []
    run_grid(grid, overrides=["train.threads=1"], jobs_at_once=2, log=first.append)
    started = [x.split(":")[0] for x in first if "training started" in x]
    # the baseline's seeds first (every row is tested against them): the plan numbers the runs in the order
    # they are queued; two at once say "started" from their own threads, in either order
    assert sorted(started) == ["[1/4] Transformer-Base (seed 1)", "[2/4] Transformer-Base (seed 2)",
                               "[3/4] + post-norm (2 layers) (seed 1)", "[4/4] + post-norm (2 layers) (seed 2)"]
    for d in ("transformer-base", "post-norm-2-layers"):
        resolved = yaml.safe_load((out / "runs" / d / "seed2" / "resolved.yaml").read_text())
        assert resolved["train"]["lr_schedule"] == "linear" and resolved["train"]["warmup_updates"] == 2
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "seed-aware test" in md and "**Noise floor**: the baseline's BLEU over its 2 seeds spans" in md
    assert "| p (seed-aware) | MDE | ASO ε |" in md and "## Split" not in md
    assert (out / "deltas.png").read_bytes()[:4] == b"\x89PNG" and "](deltas.png)" in md  # the seed-aware intervals

    # a second test split, added once the runs are finished: decoded and scored, nothing trained
    grid.write_text(text.replace("evaluate: {split: test,", "evaluate: {split: test, extra_splits: [test1],"))

    def no_training(config_path: Path, log_path: Path, live=None) -> int:
        raise AssertionError(f"{config_path} was trained again")

    monkeypatch.setattr(runner_mod, "launch_training", no_training)
    lines: list[str] = []
    run_grid(grid, overrides=["train.threads=1"], log=lines.append)
    assert sum("decoded and scored the split(s) it lacked: test1" in x for x in lines) == 4
    res = json.loads((out / "runs" / "post-norm-2-layers" / "seed2" / "result.json").read_text())
    assert res["splits"]["test1"]["n_sentences"] == 12 and (out / "runs" / "post-norm-2-layers" / "seed2" / "test1.hyp").exists()
    with open(out / "results.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["split"], r["system"]) for r in rows] == [
        ("test", "Transformer-Base"), ("test", "+ post-norm (2 layers)"),
        ("test1", "Transformer-Base"), ("test1", "+ post-norm (2 layers)")]
    refs = (corpus / "valid.tgt").read_text().splitlines()
    for row in rows[2:]:
        per_seed = [json.loads((out / "runs" / ("transformer-base" if row["baseline"] == "True" else "post-norm-2-layers")
                                / f"seed{k}" / "result.json").read_text())["splits"]["test1"]["bleu"] for k in (1, 2)]
        assert [float(row["sacrebleu_seed1"]), float(row["sacrebleu_seed2"])] == pytest.approx(per_seed)
        assert float(row["bleu"]) == pytest.approx(sum(per_seed) / 2) and row["n_seeds"] == "2"
    hyps = {d: [read_lines_exact(out / "runs" / d / f"seed{k}" / "test1.hyp") for k in (1, 2)]
            for d in ("transformer-base", "post-norm-2-layers")}
    expected = seed_aware_test(hyps["transformer-base"], {"v": hyps["post-norm-2-layers"]}, refs, n_samples=50,
                               aso=False)["v"]
    assert rows[3]["test"] == "seed-aware" and float(rows[3]["p_value"]) == pytest.approx(expected.p_value)
    assert float(rows[3]["delta"]) == pytest.approx(expected.delta)
    # the row's minimal detectable effect is that of the test's own variance parts and seeds
    assert float(rows[3]["mde"]) == pytest.approx(expected.minimal_detectable_effect(), rel=1e-4)
    assert rows[2]["mde"] == ""  # the baseline has none
    # the decomposed test by default: its interaction estimates and its name in the CSV and under the table
    assert rows[3]["seed_test"] == "decomposed"
    assert float(rows[3]["interaction_sd"]) == pytest.approx(expected.interaction_sd)
    assert float(rows[3]["sentence_se"]) == pytest.approx(expected.sentence_se)
    assert "(structnmt.evaluate.seeds, decomposed)" in (out / "results.md").read_text(encoding="utf-8")
    assert "## Split test1 (valid)" in (out / "results.md").read_text(encoding="utf-8")
    # the double-count form by name (what `structnmt experiment --seed-test double-count` passes)
    run_grid(grid, overrides=["train.threads=1", "evaluate.seed_test=double-count"], report_only=True,
             log=lambda _: None)
    old = seed_aware_test(hyps["transformer-base"], {"v": hyps["post-norm-2-layers"]}, refs, n_samples=50,
                          aso=False, method="double-count")["v"]
    with open(out / "results.csv", encoding="utf-8") as f:
        row = list(csv.DictReader(f))[3]
    assert row["seed_test"] == "double-count" and float(row["p_value"]) == pytest.approx(old.p_value)
    # a run not scored on the extra split (copied from elsewhere, say): the report leaves that split's table out
    variant = out / "runs" / "post-norm-2-layers" / "seed2" / "result.json"
    res = json.loads(variant.read_text())
    del res["splits"]
    variant.write_text(json.dumps(res))
    run_grid(grid, overrides=["train.threads=1"], report_only=True, log=lambda _: None)
    assert "## Split test1" not in (out / "results.md").read_text(encoding="utf-8")
    # a grid that now asks for another evaluation split than its finished runs were scored on: refused
    with pytest.raises(ExperimentError, match="scored on split 'test', the grid now asks for 'test1'"):
        run_grid(grid, overrides=["train.threads=1", "evaluate.split=test1", "evaluate.extra_splits=[]"],
                 report_only=True, log=lambda _: None)


def test_a_one_seed_report_marks_nothing_and_says_why(tmp_path, corpus, monkeypatch):
    import structnmt.evaluate.score as score_mod

    real = score_mod.paired_bootstrap

    def tiny_p(*args, **kwargs):  # as if the one seed's bootstrap found every difference "significant"
        return {n: {**r, "p_value": 0.001} for n, r in real(*args, **kwargs).items()}

    import structnmt.experiment.report as report_mod

    monkeypatch.setattr(report_mod, "paired_bootstrap", tiny_p)  # where the report calls it
    out = tmp_path / "out"
    run_grid(_grid(tmp_path, corpus, out), overrides=["train.threads=1"], log=lambda _: None)
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "they cover test-set sampling only" in md and "nothing here is marked as significant on BLEU" in md
    assert "| 0.001 |" in md and not any(m in md for m in "⇑↑⇓↓")
    with open(out / "results.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows[1]["p_value"] == "0.001" and rows[1]["test"] == "one-seed bootstrap" and rows[1]["mark"] == ""


def test_finished_runs_travel_with_their_dataset_fingerprint(tmp_path, corpus, monkeypatch):
    """The small files of finished runs, copied next to a copy of the dataset at another path, are
    reported (not retrained, not refused); a dataset with other content is refused. The records hold no
    absolute path of this machine: locations relative to the directory the grid ran from."""
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    monkeypatch.chdir(tmp_path)
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    check_records_are_relative(out, tmp_path.resolve())
    moved = tmp_path / "elsewhere"
    keep = {"result.json", "resolved.yaml", "dataset.json", "metrics.jsonl", "test.hyp"}
    for f in (out / "runs").rglob("*"):
        if f.is_file() and f.name in keep:
            (moved / f.relative_to(out)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, moved / f.relative_to(out))
    data_copy = tmp_path / "data-copy"
    shutil.copytree(tmp_path / "data-bin", data_copy)
    text = grid.read_text()
    start, end = text.index("data:\n  prepare:"), text.index("base:")
    grid.write_text(text[:start] + f"data:\n  path: {data_copy}\n" + text[end:])
    lines: list[str] = []
    run_grid(grid, out_dir=moved, overrides=["train.threads=1"], report_only=True, log=lines.append)
    assert sum("finished earlier, skipped" in x for x in lines) == 2
    with open(moved / "results.csv", encoding="utf-8") as f:
        assert len(list(csv.DictReader(f))) == 2
    # prepared again from the same inputs (another machine, say), its SentencePiece model recording a training
    # path (as SentencePiece's own writer does: datasets prepared so hold one); the content is the same, so
    # the runs are still reported
    from sentencepiece import sentencepiece_model_pb2

    from structnmt.data.prepare import PrepareConfig, prepare

    again = tmp_path / "prepared-again"
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                          validpref=str(corpus / "valid"), testprefs=[str(corpus / "test")], vocab_size=300),
            again, progress=False, log=lambda *_: None)
    assert (again / "spm.model").read_bytes() == (data_copy / "spm.model").read_bytes()  # no path recorded now
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((again / "spm.model").read_bytes())
    proto.trainer_spec.model_prefix = "/tmp/.data-bin.prepare-1234/spm"
    (again / "spm.model").write_bytes(proto.SerializeToString())
    assert (again / "spm.model").read_bytes() != (data_copy / "spm.model").read_bytes()
    manifest = json.loads((again / "manifest.json").read_text())  # as such a prepare wrote it: no model hash yet
    for side in ("src", "tgt"):
        manifest["vocab"][side].pop("sha256")
    (again / "manifest.json").write_text(json.dumps(manifest))
    text = grid.read_text()
    grid.write_text(text.replace(f"path: {data_copy}", f"path: {again}"))
    lines.clear()
    run_grid(grid, out_dir=moved, overrides=["train.threads=1"], report_only=True, log=lines.append)
    assert sum("finished earlier, skipped" in x for x in lines) == 2
    grid.write_text(text)
    refs = data_copy / "test.ref.txt"
    refs.write_text(refs.read_text().replace("a", "b", 1))  # not the dataset the runs were scored on
    with pytest.raises(ExperimentError, match=r"different configuration \(data.path\)"):
        run_grid(grid, out_dir=moved, overrides=["train.threads=1"], report_only=True, log=lines.append)


def check_records_are_relative(out: Path, root: Path) -> None:
    """Every record of the runs in ``out`` (grid run from ``root``) names places relative to ``root``; the trainer
    was given the absolute ones (its checkpoints resume as before)."""
    import yaml

    for run_dir in sorted((out / "runs").glob("*/seed*")):
        resolved = yaml.safe_load((run_dir / "resolved.yaml").read_text(encoding="utf-8"))
        assert resolved["data"]["path"] == "data-bin"
        assert resolved["train"]["save_dir"] == run_dir.relative_to(root).as_posix()
        dataset = json.loads((run_dir / "dataset.json").read_text(encoding="utf-8"))
        assert dataset["path"] == "data-bin" and dataset["grid"] == "grid.yaml" and len(dataset["fingerprint"]) == 64
        assert "run_dir" not in json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        for name in ("resolved.yaml", "dataset.json", "result.json"):
            assert str(root) not in (run_dir / name).read_text(encoding="utf-8"), (run_dir, name)
        log = (run_dir / "train.log").read_text(encoding="utf-8")
        assert f"data.path={json.dumps(str(root / 'data-bin'))}" in log.replace("'", "")
        assert f"train.save_dir={json.dumps(str(run_dir))}" in log.replace("'", "")


def test_a_missing_data_path_names_the_grid_header_s_prepare_command(tmp_path, corpus):
    """A grid whose data.path is not there (a clone): its header's `structnmt prepare` command, and
    grid.data.path=DIR to give it, in one sentence; --report-only too."""
    text = _grid(tmp_path, corpus, tmp_path / "out").read_text()
    start, end = text.index("data:\n  prepare:"), text.index("base:")
    header = ("# Data:\n#\n#   structnmt prepare -s src -t tgt --trainpref corpus/train \\\n"
              "#       --destdir data-bin/toy --vocab-size 300\n")
    grid = tmp_path / "header.yaml"
    grid.write_text(header + text[:start] + "data:\n  path: nowhere/data-bin/toy\n" + text[end:])
    for report_only in (False, True):
        with pytest.raises(ConfigError) as err:
            run_grid(grid, report_only=report_only, log=lambda *_: None)
        assert "holds no prepared dataset; prepare it with `structnmt prepare -s src -t tgt --trainpref " \
               "corpus/train --destdir data-bin/toy --vocab-size 300` (this grid's header), give where it is " \
               "with grid.data.path=DIR" in str(err.value)


def test_tree_inducing_runs_parse_the_induce_files(tmp_path, corpus):
    import json

    words = (corpus / "test.src").read_text().splitlines()[:3]
    conllu = tmp_path / "blind.words.conllu"
    conllu.write_text("".join("".join(f"{i}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n" for i, w in enumerate(line.split(), 1)) + "\n"
                              for line in words))
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    grid.write_text(grid.read_text()
                    .replace("overrides: [model.pre_norm=false, model.encoder_layers=2]",
                             "overrides: [model.family=rnn, model.rnn.syntax=sa]")
                    .replace("evaluate: {split: test,", f"evaluate: {{induce: [{conllu}], split: test,"))
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    base = json.loads((out / "runs" / "transformer-base" / "seed1" / "result.json").read_text())
    assert "induced" not in base  # a plain Transformer induces no trees
    sa_dir = out / "runs" / "post-norm-2-layers" / "seed1"
    induced = json.loads((sa_dir / "result.json").read_text())["induced"]
    assert induced == {str(conllu): "induce/blind.words/blind.words.induced.conllu"}
    trees = (sa_dir / induced[str(conllu)]).read_text().strip().split("\n\n")
    assert [len(t.splitlines()) for t in trees] == [len(line.split()) for line in words]
    for t in trees:  # one root per sentence, every head in range
        heads = [int(row.split("\t")[6]) for row in t.splitlines()]
        assert heads.count(0) == 1 and all(0 <= h <= len(heads) for h in heads)


def test_ctrl_c_of_a_parallel_grid_starts_nothing_more_and_stops_the_running_runs(tmp_path, corpus, monkeypatch):
    """Ctrl-C while two runs train and a third waits: the third never starts, the two are stopped
    (SIGINT), the runner ends with KeyboardInterrupt; no run is marked finished."""
    from conftest import CtrlCDuringTwoLaunches

    ctrl_c = CtrlCDuringTwoLaunches()
    monkeypatch.setattr(runner_mod, "launch_training", lambda config_path, log_path, live=None: ctrl_c.launch(
        config_path.parent.parent.name + "/" + config_path.parent.name, live))
    grid = _grid(tmp_path, corpus, tmp_path / "out")
    grid.write_text(grid.read_text().replace("seeds: [1]", "seeds: [1, 2]"))
    lines: list[str] = []
    with ctrl_c, pytest.raises(KeyboardInterrupt):
        run_grid(grid, overrides=["train.threads=1"], jobs_at_once=2, log=lines.append)
    started, procs = ctrl_c.started, ctrl_c.procs
    assert sorted(started) == ["transformer-base/seed1", "transformer-base/seed2"]  # the queued runs never started
    assert all(p.poll() is not None for p in procs)  # both stopped, not left running
    assert any("interrupted: stopping 2 running training(s)" in x for x in lines)
    assert not list((tmp_path / "out" / "runs").rglob("train_done.json"))


def test_the_report_says_when_runs_were_decoded_with_several_processes():
    """The hardware bullet names the decoding processes of the evaluation split when any run used several
    (their Decode (sent/s) includes starting them), and says nothing of it when every run used one."""
    from structnmt.config import Config
    from structnmt.experiment.report import _hardware_line, hardware

    hw = hardware()
    one = {("a", 1): {"hardware": hw, "train_device": "cpu", "decode_workers": 1},
           ("b", 1): {"hardware": hw, "train_device": "cpu"}}  # a result from before the field: one process
    configs = {k: Config() for k in one}
    assert "process(es) of one thread each" not in _hardware_line(one, configs)
    two = {**one, ("c", 1): {"hardware": hw, "train_device": "cpu", "decode_workers": 2}}
    configs[("c", 1)] = Config()
    line = _hardware_line(two, configs)
    assert "decoded with 1 or 2 process(es) of one thread each" in line and line.endswith(".")



def test_a_run_that_reads_parses_is_refused_before_training_when_its_parser_is_missing(tmp_path, corpus,
                                                                                      monkeypatch):
    """A spaCy-prepared dataset: after training, the translator parses the text it decodes with spaCy. Without
    spaCy here, a row whose model reads parses is refused before any training; a row that reads none trains."""
    from structnmt.data.dataset import PreparedDataset
    from structnmt.syntax import parsers
    from structnmt.syntax.parse_cache import ParseCacheError, write_parse_cache
    from structnmt.syntax.parsers import ParserConfig, ParserError

    data = runner_mod._prepare_data(load_grid(_grid(tmp_path, corpus, tmp_path / "prep"))[0], tmp_path / "prep",
                                    lambda *_: None)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["config"]["parser"] = {"name": "spacy", "pipeline": "en_core_web_sm"}
    (data / "manifest.json").write_text(json.dumps(manifest))
    # parses made beforehand (structnmt parse) of all of the test split, and of half of it
    test_src = PreparedDataset(data).split("test").text("src")
    write_parse_cache(ParserConfig(name="spacy"), test_src, tmp_path / "all.jsonl")
    write_parse_cache(ParserConfig(name="spacy"), test_src[: len(test_src) // 2], tmp_path / "half.jsonl")
    monkeypatch.setattr(parsers, "resolve_pipeline", lambda name: None)  # the pipeline is not installed
    monkeypatch.setattr(runner_mod, "resolve_pipeline", lambda name: None)  # (the runner's own reference to it)

    class Launched(Exception):
        pass

    def launch(config_path, log_path, live=None):
        raise Launched(str(config_path))

    monkeypatch.setattr(runner_mod, "launch_training", launch)
    dea = """'model.attention.overrides={"encoder_self.0": {name: rhe, options: {enhancement: dea, heads: all}}}'"""

    def grid(rows: str, cache: str = "") -> Path:
        path = tmp_path / "grid_spacy.yaml"
        path.write_text(f"name: spaCy data\ndata: {{path: {data}}}\n{TINY_BASE}\nbudget: {{max_updates: 6}}\n"
                        f"seeds: [1]\nbaseline: Transformer-Base\nruns:\n  - name: Transformer-Base\n{rows}"
                        f"evaluate: {{split: test, average_last: 2, beam: 2, parse_cache: '{cache}'}}\n")
        return path

    with pytest.raises(ParserError, match=r"\+ DEA \(seed 1\): the model reads parses.*"
                                          r"spaCy pipeline 'en_core_web_sm' is not installed.*before training"):
        run_grid(grid(f"  - name: + DEA\n    overrides: [{dea}]\n"), tmp_path / "out", log=lambda *_: None)
    assert not (tmp_path / "out" / "runs" / "transformer-base" / "seed1" / "train.log").exists()
    with pytest.raises(Launched):  # no row reads parses: nothing to refuse, training starts
        run_grid(grid(""), tmp_path / "out2", log=lambda *_: None)
    # evaluate.parse_cache stands in for spaCy: one that lacks lines is refused before training, a whole one trains
    with pytest.raises(ParseCacheError, match=r"evaluate.parse_cache .*half.jsonl: \d+ of the \d+ lines to parse"):
        run_grid(grid(f"  - name: + DEA\n    overrides: [{dea}]\n", str(tmp_path / "half.jsonl")), tmp_path / "out3",
                 log=lambda *_: None)
    with pytest.raises(Launched):
        run_grid(grid(f"  - name: + DEA\n    overrides: [{dea}]\n", str(tmp_path / "all.jsonl")), tmp_path / "out4",
                 log=lambda *_: None)


def test_the_report_says_which_runs_ran_on_which_machine_when_they_differ():
    """Runs of one grid trained on two GPUs: the hardware bullet names which systems and seeds ran on each
    and that the speed columns compare only within a machine; runs on one machine get no such note."""
    from structnmt.config import Config
    from structnmt.experiment.report import _hardware_line, hardware

    h200 = {**hardware(), "gpu": "NVIDIA H200"}
    h100 = {**h200, "gpu": "NVIDIA H100 80GB HBM3"}
    same = {("Transformer", 1): {"hardware": h200, "train_device": "cuda"},
            ("Transformer", 2): {"hardware": h200, "train_device": "cuda"}}
    configs = {k: Config() for k in same}
    line = _hardware_line(same, configs)
    assert "(recorded by the runs)" in line and "different machines" not in line
    mixed = {**same, ("+ DEA", 1): {"hardware": h100, "train_device": "cuda"},
             ("+ DEA", 3): {"hardware": h100, "train_device": "cuda"}}
    configs.update({k: Config() for k in mixed})
    line = _hardware_line(mixed, configs)
    assert "NVIDIA H200: Transformer (seeds 1, 2)" in line
    assert "NVIDIA H100 80GB HBM3: + DEA (seeds 1, 3)" in line
    assert "compare only rows measured on the same machine" in line and line.endswith(".")
    versions = {**same, ("+ DEA", 1): {"hardware": {**h200, "torch": "0.0"}, "train_device": "cuda"}}
    configs.update({k: Config() for k in versions})
    assert "different platforms or library versions" in _hardware_line(versions, configs)


def test_progress_line_names_the_score_the_report_ranks_on():
    """A grid scored in BLEU (lc,tok) says that score on its progress lines, as its report ranks on it, not
    the cased BLEU of a lowercased model (8 where the report says 40); a grid without it says BLEU."""
    from structnmt.experiment.grid import EvaluateSpec, GridConfig
    from structnmt.experiment.report import headline_score

    res = {"bleu": 8.06, "bleu_lc_tok": 40.87, "chrf": 51.2}
    assert headline_score(GridConfig(evaluate=EvaluateSpec(lc_tok=True)), res) == "BLEU (lc,tok) 40.87"
    assert headline_score(GridConfig(), res) == "BLEU 8.06"


def test_run_progress_says_how_far_an_unfinished_run_came(tmp_path):
    from structnmt.experiment.runner import run_progress

    assert run_progress(tmp_path / "never", 8000) == "not started"
    (tmp_path / "metrics.jsonl").write_text(
        '{"kind": "train", "step": 4650, "loss": 3.6}\n{"kind": "valid", "step": 4700, "loss": 4.2}\n'
        '{"kind": "train", "step": 4700, "loss": 3.5}\n{"kind": "tr', encoding="utf-8")  # cut short by a stop
    assert run_progress(tmp_path, 8000) == "trained to update 4,700 of 8,000"
    assert run_progress(tmp_path) == "trained to update 4,700"
    (tmp_path / "train_done.json").write_text("{}", encoding="utf-8")
    assert run_progress(tmp_path, 8000) == "trained, not yet decoded and scored"


def test_a_budget_override_replaces_the_cap_and_keeps_the_grid_s_patience(tmp_path):
    """docs/experiments.md: `budget.max_*` on the command line replaces the grid's cap (its other max key dropped),
    the grid's patience stays (said in the budget's description), and `budget.patience=0` makes it a fixed budget."""
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndata: {path: d}\nbudget: {max_target_tokens: 5000, patience: 5}\nseeds: [1]\n"
                    "baseline: A\nruns:\n  - name: A\n", encoding="utf-8")
    g, _ = load_grid(grid, ["budget.max_updates=60"])
    assert g.budget.which() == ("max_updates", 60) and g.budget.max_target_tokens == 0 and g.budget.patience == 5
    assert "has not improved for 5 validations" in g.budget.describe() and "60 updates" in g.budget.describe()
    fixed, _ = load_grid(grid, ["budget.max_updates=60", "budget.patience=0"])
    assert fixed.budget.patience == 0 and "improved" not in fixed.budget.describe()


def test_a_damaged_result_json_is_a_sentence_and_the_other_runs_are_reported(tmp_path, corpus):
    """A run's result.json cut short, holding a list, missing a score or with a NaN score: the run is left out with
    one sentence naming its directory and the fix; the report of the other runs still comes out."""
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    result = out / "runs" / "post-norm-2-layers" / "seed1" / "result.json"
    good = result.read_text(encoding="utf-8")
    record = json.loads(good)
    damaged = {
        "cut short or not JSON": good[: len(good) // 2],
        "holds a list, not a run's record": "[1, 2]",
        "has no 'chrf'": json.dumps({k: v for k, v in record.items() if k != "chrf"}),
        "'bleu' is nan, not a finite score": json.dumps({**record, "bleu": float("nan")}),
    }
    for what, text in damaged.items():
        result.write_text(text, encoding="utf-8")
        lines: list[str] = []
        md = run_grid(grid, report_only=True, log=lines.append).read_text(encoding="utf-8")
        if what.startswith("cut short"):  # the same through the command line: exit 0, the sentence in its log
            from structnmt.cli import main

            assert main(["experiment", str(grid), "--report-only"]) == 0
            assert "left out:" in (out / "experiment.log").read_text(encoding="utf-8")
        said = [x for x in lines if "left out:" in x]
        assert len(said) == 1 and what in said[0] and f"delete {result}" in said[0], (what, lines)
        assert "Transformer-Base" in md  # the other run is reported
        # the report names the record as damaged, with its file and fix, not as a run without results yet
        assert "**Damaged records**, left out: + post-norm (2 layers) (seed 1): " in md and f"delete {result}" in md
        assert "no results yet" not in md
        assert result.read_text(encoding="utf-8") == text  # the damaged record is kept as it was


def test_report_only_prepares_nothing_and_names_the_training_command(tmp_path, corpus):
    """--report-only on a grid whose dataset is gone is one sentence (it prepared it again before); the report it
    writes names the command that trained the runs, with its overrides, beside its own."""
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    md = run_grid(grid, report_only=True, log=lambda _: None).read_text(encoding="utf-8")
    assert "--report-only" in md and "the runs were trained and decoded with" in md and "train.threads=1" in md
    shutil.rmtree(tmp_path / "data-bin")
    with pytest.raises(ConfigError, match="--report-only prepares nothing"):
        run_grid(grid, report_only=True, log=lambda _: None)
    assert not (tmp_path / "data-bin").exists()


def test_a_damaged_baseline_record_in_a_normal_run_is_a_sentence(tmp_path, corpus):
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    (out / "runs" / "transformer-base" / "seed1" / "result.json").write_text("[1, 2]")
    with pytest.raises(ExperimentError, match="needs the results of the baseline 'Transformer-Base'") as err:
        run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    assert "its result.json holds a list, not a run's record; delete" in str(err.value)  # damaged, not "has none"
    assert "has none" not in str(err.value)


def test_the_reports_command_line_shows_paths_under_the_working_directory_relative(tmp_path, monkeypatch):
    """A grid run from the directory holding its data, given absolute paths, prints a command the reader can run
    from that directory on another machine; a path outside it stays as given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STRUCTNMT_USER_DIRS", raising=False)  # no plugin: no --user-dir
    line = runner_mod._command_line(tmp_path / "configs" / "g.yaml", tmp_path / "out" / "g", ["seeds=[1]"],
                                    report_only=True)
    assert str(tmp_path) not in line
    assert line.endswith("experiment configs/g.yaml --report-only --out out/g 'seeds=[1]'")
    assert "/elsewhere/g.yaml" in runner_mod._command_line("/elsewhere/g.yaml", None, [])


def test_the_reports_command_line_names_the_plugins_relative_to_the_working_directory(tmp_path, monkeypatch):
    """The grid's plugins (--user-dir, kept absolute in STRUCTNMT_USER_DIRS) are recorded as data paths are:
    relative to the directory the grid runs in, inside it or beside it, so the command reruns from there."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("STRUCTNMT_USER_DIRS", os.pathsep.join([str(tmp_path / "work" / "plugins" / "mine"),
                                                               str(tmp_path / "shared" / "theirs.py")]))
    line = runner_mod._command_line(tmp_path / "work" / "g.yaml", None, ["seeds=[1]"])
    assert line.endswith("experiment g.yaml --user-dir plugins/mine --user-dir ../shared/theirs.py 'seeds=[1]'")


def test_a_dataset_reached_through_a_link_is_reported_by_the_link_s_path(tmp_path, corpus, monkeypatch):
    """A report written from a folder whose ``data-bin`` is a link to the dataset elsewhere names ``data-bin`` in
    its Data line and in the records, not the relative way to where the link points (``../...``)."""
    out = tmp_path / "out"
    grid = _grid(tmp_path, corpus, out)
    run_grid(grid, overrides=["train.threads=1"], log=lambda _: None)
    report_dir = tmp_path / "reports" / "here"
    report_dir.mkdir(parents=True)
    (report_dir / "data-bin").symlink_to(tmp_path / "data-bin")
    text = grid.read_text()
    start, end = text.index("data:\n  prepare:"), text.index("base:")
    grid.write_text(text[:start] + "data:\n  path: data-bin\n" + text[end:])
    monkeypatch.chdir(report_dir)
    md = run_grid(grid, overrides=["train.threads=1"], report_only=True, log=lambda _: None).read_text("utf-8")
    assert "- **Data**: `data-bin`, split `test`" in md
    assert "../" not in md.split("- **Data**: ")[1].split("\n")[0]


def test_an_output_folder_reached_through_a_link_is_recorded_by_the_link_s_path(tmp_path, corpus, monkeypatch):
    """--out through a link (``results`` -> a folder elsewhere): each run's records name its folder under
    ``results/``, not the relative way to the link's target; the trainer writes into the target all the same."""
    import yaml

    real = tmp_path / "elsewhere" / "out"
    real.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    (work / "results").symlink_to(real)
    grid = _grid(tmp_path, corpus, real, extra="")
    monkeypatch.chdir(work)
    run_grid(grid, out_dir="results", overrides=["train.threads=1"], log=lambda _: None)
    resolved = yaml.safe_load((real / "runs" / "transformer-base" / "seed1" / "resolved.yaml").read_text("utf-8"))
    assert resolved["train"]["save_dir"] == "results/runs/transformer-base/seed1"
    assert (real / "runs" / "transformer-base" / "seed1" / "result.json").exists()


def test_same_precision_reads_how_a_finished_run_trained(tmp_path, monkeypatch):
    """train.bf16 differing is the same run only where the run trained in float32 and the config admits float32: a
    run finished on a GPU (cuda or cuda:N) under bf16 autocast is another precision, an unfinished run's is not
    known, and the answer does not depend on whether the machine reading the runs has a GPU."""
    import yaml

    from structnmt.config import Config
    from structnmt.experiment.runner import _same_precision

    run = tmp_path / "run"
    run.mkdir()

    def finished_on(device: str | None, bf16: bool | None, precision: str | None = None) -> None:
        train = {"device": "auto"} if bf16 is None else {"bf16": bf16, "device": "auto"}
        (run / "resolved.yaml").write_text(yaml.safe_dump({"train": train}))
        (run / "result.json").unlink(missing_ok=True)
        if device:
            record = {"train_device": device} | ({"train_precision": precision} if precision else {})
            (run / "result.json").write_text(json.dumps(record))

    here = Config()  # bf16 true, device auto: float32 wherever there is no GPU
    for gpu_here in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu_here=gpu_here: gpu_here)
        finished_on("cuda", False)  # float32 on a GPU
        assert _same_precision(run, here)
        finished_on("cuda:0", False)
        assert _same_precision(run, here)
        finished_on("cuda", True)  # bf16 autocast on a GPU
        assert not _same_precision(run, here)
        finished_on("cuda:1", True)
        assert not _same_precision(run, here)
        finished_on("cuda:0", None)  # no train.bf16 recorded: its default (true), so bf16 autocast
        assert not _same_precision(run, here)
        finished_on("cpu", None)  # ... and on a CPU that default is float32
        assert _same_precision(run, here)
        finished_on("cpu", False)
        assert _same_precision(run, here)
        finished_on("cpu", True, precision="bf16 autocast")  # the trainer's record wins over the device
        assert not _same_precision(run, here)
        finished_on(None, False)  # not finished: how it trains is not known
        assert not _same_precision(run, here)
    here.train.device = "cuda:0"  # bf16 on a GPU by name: not a float32 run
    finished_on("cpu", False)
    assert not _same_precision(run, here)
    here.train.bf16 = False
    assert _same_precision(run, here)


def test_columns_line_names_the_memory_of_the_measured_seed():
    """Peak mem is read off the first seed's runs: RSS when they trained on a CPU, even where later seeds
    trained on a GPU, GPU memory when they trained on one, and both named when they trained on both."""
    from structnmt.experiment.report import _columns_line

    def res(*devices_by_seed):
        return {(f"row{i}", seed): {"train_device": d}
                for seed, devices in enumerate(devices_by_seed, 1) for i, d in enumerate(devices)}

    rss, gpu = "peak resident memory (RSS)", "peak GPU memory allocated"
    line = _columns_line(res(["cpu", "cpu"], ["cuda", "cuda"]), 1, 2)
    assert rss in line and gpu not in line
    line = _columns_line(res(["cuda:0", "cuda:1"], ["cpu"]), 1, 2)
    assert gpu in line and rss not in line
    line = _columns_line(res(["cuda"], ["cpu"]), 1, 2)
    assert gpu in line and rss not in line
    line = _columns_line(res(["cuda", "cpu"]), 1, 1)
    assert gpu in line and rss in line


def test_hardware_line_says_the_precision_and_torch_of_gpu_runs():
    """A report mixing CPU and GPU runs names the GPU runs' precision (train.bf16 acts on CUDA only) and every
    torch the runs recorded, not only the first run's."""
    from structnmt.config import Config
    from structnmt.experiment.report import _hardware_line

    hw = {"platform": "Linux", "cpu": "AMD EPYC", "cpu_count": 2, "gpu": "", "torch": "2.13.0+cpu",
          "python": "3.11.7", "omp_num_threads": ""}
    results = {("a", 1): {"train_device": "cpu", "hardware": hw},
               ("a", 2): {"train_device": "cuda:0", "hardware": dict(hw, gpu="NVIDIA H200", torch="2.11.0+cu130")}}
    configs = {k: Config() for k in results}
    configs[("a", 2)].train.bf16 = False
    line = _hardware_line(results, configs)
    assert "training device cpu, cuda:0 (on CUDA float32, train.bf16)" in line
    assert "torch 2.11.0+cu130, 2.13.0+cpu" in line
    configs[("a", 2)].train.bf16 = True
    assert "(on CUDA bf16 autocast, train.bf16)" in _hardware_line(results, configs)
    results[("a", 2)]["train_precision"] = "float32"  # the trainer's record wins over the config
    assert "(on CUDA float32, train.bf16)" in _hardware_line(results, configs)
    del results[("a", 2)]
    line = _hardware_line(results, configs)
    assert "training device cpu;" in line and "train.bf16" not in line


def test_trained_as_reads_the_trainer_s_record_before_this_machine(monkeypatch):
    """result.json's device and precision: the checkpoint's run state when it has them (a run trained on a GPU and
    evaluated on a CPU machine stays a GPU run), this machine and the config when it has not, or when whether an
    earlier launch used bf16 is not known (None)."""
    from structnmt.config import Config
    from structnmt.experiment.runner import trained_as

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = Config()  # bf16 true, device auto
    assert trained_as({"device": "cuda:0", "bf16_autocast": True}, cfg) == ("cuda:0", "bf16 autocast")
    assert trained_as({"device": "cuda:0", "bf16_autocast": False}, cfg) == ("cuda:0", "float32")
    assert trained_as({"device": "cuda", "bf16_autocast": None}, cfg) == ("cuda", "bf16 autocast")  # from the config
    assert trained_as({}, cfg) == ("cpu", "float32")  # a run from before the record, read here (no GPU)
    cfg.train.bf16 = False
    assert trained_as({"device": "cuda", "bf16_autocast": None}, cfg) == ("cuda", "float32")
