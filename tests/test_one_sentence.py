"""Errors a user causes that escaped as tracebacks (issue 73), each one sentence through the command line:
exit status 2, one `structnmt: error:` line naming the option or file and the fix, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_user_error, cli


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> Path:
    """A synthetic dataset with its gold trees (what `structnmt features` computes LPEA positions from)."""
    from test_feature_store import parsed_dataset

    return parsed_dataset(tmp_path_factory.mktemp("parsed"), n_train=60)


@pytest.mark.parametrize("request_, fragment", [
    ("lpea_positions:k=abc", "--feature lpea_positions:k=abc: k=abc is not a whole number; write it as "
                             "lpea_positions:k=2."),  # a TypeError in the feature, after the dataset was read
    ("lpea_positions:k=2,rule=rule3", "--feature lpea_positions:k=2,rule=rule3: unknown local-phrase rule 'rule3'; "
                                      "use one of"),  # a ValueError there
    ("lpea_positions:k=-1", "k must be >= 0, got -1"),
    ("ngram_hypernodes:k=2,unit=letter", "unknown unit 'letter'; use word or piece"),
    ("lpea_positions:k=[2", "the value of 'k=[2' cannot be read (YAML)"),
])
def test_features_parameters_are_checked_before_any_work(parsed, capsys, request_, fragment):
    code, _, err = cli(capsys, "features", "--data", parsed, "--feature", request_, "--no-progress")
    assert_user_error(code, err, fragment)
    assert not (parsed / "features").exists()


def _texts(folder: Path, n: int = 60) -> tuple[Path, Path, Path]:
    """(hypotheses A, hypotheses B, references) of ``n`` lines."""
    folder.mkdir(parents=True, exist_ok=True)
    ref, a, b = folder / "ref.de", folder / "a.hyp", folder / "b.hyp"
    ref.write_text("".join(f"der Hund {i} schläft im Garten\n" for i in range(n)))
    a.write_text("".join(f"der Hund {i} schläft\n" for i in range(n)))
    b.write_text("".join(f"ein Hund {i} schläft im Garten\n" for i in range(n)))
    return a, b, ref


def test_score_refuses_more_bootstrap_resamples_than_memory_can_hold(tmp_path, capsys):
    """--bootstrap 100000000 on 60 sentences allocated 44.7 GiB (the test draws every resample at once)."""
    a, b, ref = _texts(tmp_path)
    code, out, err = cli(capsys, "score", "--hyp", a, "--hyp", b, "--ref", ref, "--bootstrap", 100_000_000)
    assert_user_error(code, err, "--bootstrap 100000000: give at most 10,000 resamples (1,000 is the usual number)",
                      "44.7 GiB for these 60 sentences")
    assert out == ""  # refused before any score is printed
    code, _, err = cli(capsys, "score", "--hyp", a, a, "--hyp", b, b, "--ref", ref, "--bootstrap", 10_001)
    assert_user_error(code, err, "--bootstrap 10001: give at most 10,000 resamples")  # the seed-aware test too
    code, _, err = cli(capsys, "compare", "--src", ref, "--ref", ref, "--hyp", f"A={a}", "--out", tmp_path / "cmp",
                       "--bootstrap", 50_000)
    assert_user_error(code, err, "--bootstrap 50000: give at most 10,000 resamples")
    assert not (tmp_path / "cmp").exists()
    code, out, err = cli(capsys, "score", "--hyp", a, "--hyp", b, "--ref", ref, "--bootstrap", 100)
    assert code == 0 and "paired bootstrap resampling (100 samples" in out, err


def test_a_grid_refuses_more_bootstrap_resamples_than_memory_can_hold(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"name: g\nout_dir: {tmp_path / 'out'}\ndata: {{path: {tmp_path / 'data'}}}\nbudget: "
                    "{max_updates: 2}\nseeds: [1]\nbaseline: A\nruns:\n  - name: A\n")
    code, _, err = cli(capsys, "experiment", grid, "evaluate.bootstrap_samples=200000")
    assert_user_error(code, err, "evaluate.bootstrap_samples=200000: give at most 10,000 resamples")
    assert not (tmp_path / "out").exists()


def test_tag_refuses_a_seed_numpy_cannot_take_as_train_does(tmp_path, capsys):
    """train, demo and experiment refused train.seed=-1 in one sentence; tag raised numpy's ValueError after
    reading its corpus. One check (structnmt.config.check_seed) for every command."""
    from test_tagger import tag_config

    cfg = tag_config(tmp_path, epochs=1)
    for value in ("-1", str(2**32)):
        code, _, err = cli(capsys, "tag", cfg, f"train.seed={value}")
        assert_user_error(code, err, f"train.seed={value} must be in [0, 2**32) (numpy's range of seeds)",
                          f"(set on the command line by 'train.seed={value}')")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def probe_config(tmp_path_factory) -> Path:
    """A scratch probe YAML over a small synthetic corpus (its own trees)."""
    from structnmt.data.synthetic import SynthConfig, write_corpus

    root = tmp_path_factory.mktemp("probe")
    write_corpus(SynthConfig(seed=5, n_train=60, n_valid=6, n_test=6), root / "c")
    cfg = root / "probe.yaml"
    cfg.write_text(f"mode: scratch\ncorpus: {{kind: text, path: {root / 'c' / 'train.src'}, parser: {{name: "
                   f"synthetic}}}}\ntasks: [pos]\nout_dir: {root / 'out'}\nmodel: {{d_model: 16, ffn_dim: 32, "
                   "heads: 2, layers: 1}\nmlp: {hidden: 16}\ntrain: {epochs: 1, threads: 1}\n")
    return cfg


@pytest.mark.parametrize("size, fragment", [
    ("3", "SentencePiece needs more than 4 pieces for it"),  # SentencePiece: INTERNAL ... insert_id(eos)
    ("8", "SentencePiece needs at least "),  # SentencePiece: INTERNAL ... smaller than required_chars
])
def test_probe_says_its_vocabulary_size_is_too_small(probe_config, capsys, size, fragment):
    code, _, err = cli(capsys, "probe", probe_config, f"model.vocab_size={size}")
    assert_user_error(code, err, f"model.vocab_size={size} is too small for the probe's training split (corpus.path=",
                      fragment, "(its 4 special pieces and one for each distinct character); give ")
    if size == "8":
        needed = int(err.split("needs at least ")[1].split()[0])
        assert f"give model.vocab_size={needed} or more" in err
        # that size trains (a probe of one epoch: its report comes out)
        code, out, err = cli(capsys, "probe", probe_config, f"model.vocab_size={needed}")
        assert code == 0, err
    code, _, err = cli(capsys, "probe", probe_config, "train.seed=-1")
    assert_user_error(code, err, "train.seed=-1 must be in [0, 2**32)")


@pytest.mark.parametrize("text, what", [
    ('{"bleu": 3', "its result.json is cut short or not JSON"),
    ("[1, 2]", "its result.json holds a list, not a run's record"),
    ('{"bleu": NaN, "chrf": 1.0, "hyp_file": "test.hyp", "split": "test", "num_updates": 2}',
     "its result.json's 'bleu' is nan, not a finite score"),
])
def test_a_damaged_baseline_record_is_named_as_damaged_not_as_missing(parsed, tmp_path, capsys, text, what):
    """The baseline's result.json cut short, a list or NaN was reported as a baseline "which has none": the
    sentence says the record is damaged, names the file and the fix (in a normal run and with --report-only)."""
    from structnmt.experiment.runner import slug

    grid = tmp_path / "grid.yaml"
    grid.write_text(f"name: g\nout_dir: {tmp_path / 'out'}\ndata: {{path: {parsed}}}\nbudget: {{max_updates: 2}}\n"
                    "seeds: [1]\nbaseline: Base line\nruns:\n  - name: Base line\nevaluate: {split: test}\n")
    result = tmp_path / "out" / "runs" / slug("Base line") / "seed1" / "result.json"
    result.parent.mkdir(parents=True)
    result.write_text(text)
    for extra in ((), ("--report-only",)):
        code, _, err = cli(capsys, "experiment", grid, *extra)
        assert_user_error(code, err, "the report needs the results of the baseline 'Base line' (seed 1), but "
                          f"{result.parent}: {what}", f"delete {result} to train and score that run again")
        assert "has none" not in err
    assert result.read_text() == text  # kept as it was


@pytest.mark.parametrize("given, shown", [(" ", "--user-dir ' ': a path of only blanks"),
                                          ("", "--user-dir '': an empty path"),
                                          ("\t", "--user-dir '\\t': a path of only blanks")])
def test_a_blank_user_dir_is_shown_as_given(tmp_path, capsys, given, shown):
    """`--user-dir ' '` was refused as `--user-dir ''`: the sentence shows what was given."""
    ref = tmp_path / "ref.txt"
    ref.write_text("a b\n")
    code, _, err = cli(capsys, "score", "--hyp", ref, "--ref", ref, "--user-dir", given)
    assert_user_error(code, err, shown, "would import every .py file of the current directory")
