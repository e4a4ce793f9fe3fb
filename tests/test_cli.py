"""End to end through the command line on a small word-substitution language; must reach a BLEU threshold."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Measured on this language (2,000 training pairs, the model below): after 150 updates the averaged model
# scores BLEU 0.5 (it repeats one word); after 400 it scores 93. An untrained or broken pipeline cannot reach
# the threshold below, and the model trains in seconds.
BLEU_THRESHOLD = 60.0


def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "structnmt.cli", *args], capture_output=True, text=True,
                          input=stdin, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check:
        assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def write_substitution_corpus(folder: Path, seed: int = 7) -> None:
    """train/valid/test.{src,tgt}: sentences of 3-10 words drawn from 40 source words; the target replaces
    every word by its own target word, in the same order (a language a small Transformer learns in seconds)."""
    rng = random.Random(seed)
    src_words = [a + b for a in ("ka", "lo", "mi", "su", "te", "ra", "no", "pe") for b in "tnsrml"][:40]
    tgt_words = [b + a + "o" for a in ("ba", "di", "fu", "go", "hi", "ju", "ke", "ly") for b in "zvwxqy"][:40]
    lexicon = dict(zip(src_words, tgt_words))
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 2000), ("valid", 50), ("test", 200)):
        sents = [[rng.choice(src_words) for _ in range(rng.randint(3, 10))] for _ in range(n)]
        (folder / f"{split}.src").write_text("".join(" ".join(ws) + "\n" for ws in sents))
        (folder / f"{split}.tgt").write_text("".join(" ".join(lexicon[w] for w in ws) + "\n" for ws in sents))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("e2e")
    corpus = work / "corpus"
    write_substitution_corpus(corpus)
    run("prepare", "-s", "src", "-t", "tgt", "--trainpref", str(corpus / "train"), "--validpref",
        str(corpus / "valid"), "--testpref", str(corpus / "test"), "--destdir", str(work / "bin"),
        "--vocab-size", "120", "--no-progress")
    cfg = work / "cfg.yaml"
    cfg.write_text(
        f"""
data: {{path: {work / 'bin'}, max_tokens: 1024}}
model: {{d_model: 64, ffn_dim: 128, heads: 4, encoder_layers: 1, decoder_layers: 1, dropout: 0.0,
        share_all_embeddings: true}}
train: {{save_dir: {work / 'model'}, lr: 0.01, warmup_updates: 50, max_updates: 400,
        save_interval_updates: 50, validate_interval_updates: 200, keep_last: 3, tensorboard: true}}
decode: {{beam: 4, max_len_a: 1.5, max_len_b: 5}}
"""
    )
    run("train", str(cfg), "--no-progress")
    run("average", "--inputs", str(work / "model"), "--num", "3", "--output", str(work / "avg.pt"))
    return work


def test_translate_and_score_reach_bleu_threshold(trained):
    work = trained
    run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
        "--output", str(work / "test.hyp"), "--no-progress")
    hyps = (work / "test.hyp").read_text().splitlines()
    assert len(hyps) == 200
    out = run("score", "--hyp", str(work / "test.hyp"), "--ref", str(work / "corpus" / "test.tgt")).stdout
    m = re.search(r"^BLEU = ([\d.]+) \((nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:[\d.]+)\)", out, re.M)
    assert m, out
    assert float(m.group(1)) >= BLEU_THRESHOLD, out
    assert re.search(r"^chrF = [\d.]+ \(nrefs:1", out, re.M)
    assert (work / "model" / "tensorboard").is_dir() and (work / "model" / "metrics.jsonl").exists()


def test_translate_with_two_worker_processes_writes_the_same_translations(trained):
    work = trained
    # a small batch size gives several batches per worker
    run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
        "--output", str(work / "test.workers.hyp"), "--workers", "2", "--batch-size", "16", "--no-progress")
    one = run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
              "--batch-size", "16", "--workers", "1").stdout
    assert (work / "test.workers.hyp").read_text() == one
    # the default: 200 lines in 13 batches of 16, so one process of one thread per core where there are several
    default = run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
                  "--batch-size", "16")
    assert default.stdout == one
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    said = f"translate: decoding with {min(cores, 13)} processes of one thread each, one per core"
    assert (said in default.stderr) == (cores > 1), default.stderr
    few = run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
              "--batch-size", "32")  # 7 batches: this process
    assert few.stdout == one and "processes of one thread each" not in few.stderr
    bad = run("translate", "--checkpoint", str(work / "avg.pt"), "--workers", "0", stdin="a\n", check=False)
    assert bad.returncode == 2 and "--workers 0: give a number of decoding processes >= 1" in bad.stderr


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_translate_in_low_precision_reaches_the_bleu_threshold_with_mostly_the_same_translations(trained, dtype):
    work = trained
    if not (work / "test.hyp").exists():  # written by the threshold test when it ran first
        run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
            "--output", str(work / "test.hyp"), "--no-progress")
    run("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
        "--output", str(work / f"test.{dtype}.hyp"), "--dtype", dtype, "--no-progress", "--allow-slow-dtype")
    fp32 = (work / "test.hyp").read_text().splitlines()
    low = (work / f"test.{dtype}.hyp").read_text().splitlines()
    assert len(low) == len(fp32) == 200
    assert sum(a == b for a, b in zip(fp32, low)) >= 0.8 * len(fp32)
    out = run("score", "--hyp", str(work / f"test.{dtype}.hyp"), "--ref", str(work / "corpus" / "test.tgt")).stdout
    m = re.search(r"^BLEU = ([\d.]+) ", out, re.M)
    assert m and float(m.group(1)) >= BLEU_THRESHOLD, out
    # the option reaches the decoder: the n-best scores (4 decimals) move with the format's rounding
    src = "\n".join((work / "corpus" / "test.src").read_text().splitlines()[:20]) + "\n"
    nb32 = run("translate", "--checkpoint", str(work / "avg.pt"), "--nbest", "2", stdin=src).stdout.splitlines()
    nb_low = run("translate", "--checkpoint", str(work / "avg.pt"), "--nbest", "2", "--dtype", dtype,
                 "--allow-slow-dtype", stdin=src).stdout.splitlines()
    assert len(nb32) == len(nb_low) == 40 and nb32 != nb_low


def test_translate_from_stdin_greedy_and_nbest(trained):
    work = trained
    lines = (work / "corpus" / "test.src").read_text().splitlines()[:5]
    text = "\n".join(lines[:2] + [""] + lines[2:]) + "\n"
    out = run("translate", "--checkpoint", str(work / "avg.pt"), "--greedy", stdin=text).stdout.splitlines()
    assert len(out) == 6 and out[2] == ""  # the empty input line stays in place
    nbest = run("translate", "--checkpoint", str(work / "avg.pt"), "--beam", "3", "--nbest", "3",
                stdin="\n".join(lines[:2]) + "\n").stdout.splitlines()
    assert len(nbest) == 6
    assert [line.split(" ||| ")[0] for line in nbest] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(line.split(" ||| ")[2]) for line in nbest[:3]]
    assert scores == sorted(scores, reverse=True)
    # standard input is read as a file is: invalid UTF-8 is the sentence naming its line, not a traceback
    latin1 = subprocess.run([sys.executable, "-m", "structnmt.cli", "translate", "--checkpoint", str(work / "avg.pt")],
                            capture_output=True, input=b"a b\nc \xff d\n")
    err = latin1.stderr.decode()
    assert latin1.returncode == 2 and "<stdin> line 2 column 3: invalid UTF-8 (byte 0xff)" in err, err
    assert "Traceback" not in err


def test_score_bootstrap_between_systems(trained):
    work = trained
    ref = work / "corpus" / "test.tgt"
    out = run("score", "--hyp", str(work / "test.hyp"), "--hyp", str(ref), "--ref", str(ref),
              "--bootstrap", "100").stdout
    assert re.search(r"p = 0\.0\d+", out), out


def test_score_lc_tok_bootstrap_compares_on_the_lowercased_score(tmp_path):
    # a lowercased system loses on cased BLEU by its casing alone; with --lc-tok the test must also be run
    # on BLEU (lc,tok), where it is the better one (it matches every reference but for case)
    refs = [f"The Man number {i} sees A Dog in Berlin ." for i in range(40)]
    cased = [r.replace("Dog", "Cat") if i % 2 else r for i, r in enumerate(refs)]
    lower = [r.lower() for r in refs]
    for name, lines in (("ref", refs), ("cased", cased), ("lower", lower)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    out = run("score", "--hyp", str(tmp_path / "cased"), "--hyp", str(tmp_path / "lower"), "--ref",
              str(tmp_path / "ref"), "--lc-tok", "--lang", "en", "--bootstrap", "100").stdout
    cased_line = re.search(r"lower: BLEU (\S+) vs (\S+)  delta (\S+)", out)
    lc_line = re.search(r"lower: BLEU \(lc,tok\) (\S+) vs (\S+)  delta (\S+)  p = (\S+)", out)
    assert cased_line and lc_line, out
    assert float(cased_line.group(3)) < 0 < float(lc_line.group(3))
    assert float(lc_line.group(1)) == 100.0 and float(lc_line.group(4)) < 0.05


def test_score_unescape_reads_moses_escaped_tokenized_output_like_the_raw_text(tmp_path):
    # fairseq's anchor translations are lowercased, tokenized and keep Moses' XML escapes
    refs = [f"Ein Mann's Hund \"Nr. {i}\" läuft & springt." for i in range(20)]
    escaped = [f"ein mann &apos;s hund &quot; nr. {i} &quot; läuft &amp; springt ." for i in range(20)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    (tmp_path / "anchor").write_text("\n".join(escaped) + "\n")
    args = ["score", "--hyp", str(tmp_path / "anchor"), "--ref", str(tmp_path / "ref"), "--lc-tok", "--lang", "de"]
    lc = re.compile(r"^BLEU \(lc,tok\) = ([\d.]+)", re.M)
    assert float(lc.search(run(*args, "--unescape").stdout).group(1)) == 100.0
    assert float(lc.search(run(*args).stdout).group(1)) < 60.0  # the escapes left in cost a lot


def test_user_errors_are_one_sentence_without_traceback(tmp_path):
    (tmp_path / "a.src").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.tgt").write_text("eins\nzwei\n")
    proc = run("prepare", "-s", "src", "-t", "tgt", "--trainpref", str(tmp_path / "a"), "--destdir",
               str(tmp_path / "bin"), "--no-progress", check=False)
    assert proc.returncode == 2
    assert "a.src has 3 lines but" in proc.stderr and "a.tgt has 2" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run("train", str(tmp_path / "missing.yaml"), check=False)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


def test_demo_prints_bleu_last(tmp_path):
    """The embedded default runs end to end (tiny budget here) and its last line holds BLEU."""
    from structnmt.cli.demo import run_demo

    lines: list[str] = []
    run_demo(tmp_path / "demo", updates=20, n_train=400, n_test=20, log=lines.append,
             overrides=["model.encoder_layers=1", "model.decoder_layers=1", "train.progress=false",
                        "train.tensorboard=false"])
    assert "BLEU = " in lines[-1] and "nrefs:1" in lines[-1]
    assert any("agreement accuracy" in line and "(i.i.d. test)" in line for line in lines)
    assert any("on the hardest held-out split: 4 attractors" in line for line in lines)
    assert (tmp_path / "demo" / "attraction4.hyp").read_text().count("\n") == 20
    assert any("budget: 20 updates." in line for line in lines)
    # the same workdir with another model: refused before the demo changes anything (its data, its outputs)
    import json

    import pytest

    from structnmt.errors import UserError

    snapshot = {p: p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*") if p.is_file()}
    with pytest.raises(UserError, match="its model config differs from this run's"):
        run_demo(tmp_path / "demo", updates=20, n_train=400, n_test=20, log=lines.append,
                 overrides=["model.encoder_layers=2", "model.decoder_layers=1", "train.progress=false"])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*") if p.is_file()} == snapshot
    # a workdir whose data-bin is a dataset of the user's, prepared from other text: refused, left as it is
    mine = tmp_path / "mine" / "data-bin"
    mine.mkdir(parents=True)
    (mine / "manifest.json").write_text(json.dumps({"config": {"trainpref": "/data/wmt/train"}}))
    with pytest.raises(UserError, match="holds a dataset prepared from /data/wmt/train"):
        run_demo(tmp_path / "mine", updates=20, n_train=400, n_test=20, log=lines.append)
    assert sorted(p.name for p in (tmp_path / "mine").rglob("*")) == ["data-bin", "manifest.json"]


def test_demo_trains_a_fixed_number_of_updates_unless_given_minutes(tmp_path):
    """The demo's budget is updates, not time, so a busy machine prints the same numbers as an idle one."""
    from structnmt.cli.demo import demo_config

    fixed = demo_config(tmp_path, None, 0.0, 1)
    assert fixed.train.max_updates == 2500 and fixed.train.max_time_minutes == 0
    timed = demo_config(tmp_path, 300, 2.5, 1)
    assert timed.train.max_updates == 300 and timed.train.max_time_minutes == 2.5


def test_overrides_may_follow_options_and_unknown_flags_are_refused(monkeypatch, capsys):
    import structnmt.cli.commands as cli

    seen = {}

    def fake_experiment(args):
        seen.update(grid=args.grid, jobs=args.jobs, out=args.out, overrides=args.overrides)
        return 0

    parser = cli.build_parser
    monkeypatch.setattr(cli, "cmd_experiment", fake_experiment)

    def patched():
        p = parser()
        p._subparsers._group_actions[0].choices["experiment"].set_defaults(func=fake_experiment)
        return p

    monkeypatch.setattr(cli, "build_parser", patched)
    assert cli.main(["experiment", "g.yaml", "a.b=1", "--jobs", "2", "c.d=2", "--out", "o"]) == 0
    assert seen == {"grid": "g.yaml", "jobs": 2, "out": "o", "overrides": ["a.b=1", "c.d=2"]}
    with pytest.raises(SystemExit):
        cli.main(["experiment", "g.yaml", "--jobs", "2", "--jbos", "3"])
    assert "unrecognized arguments: --jbos" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a word after an option: neither an option nor an override
        cli.main(["experiment", "g.yaml", "--jobs", "2", "a.b=1", "noequals"])
    err = capsys.readouterr().err
    assert "'noequals' is neither an option nor an override" in err and "section.key=value" in err
    assert seen["overrides"] == ["a.b=1", "c.d=2"]  # nothing ran


_OMP_PROBE = """
import os, sys
seen = []
class Spy:  # records the wait policy at the moment torch (and with it the OpenMP runtime) is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return None
sys.meta_path.insert(0, Spy())
from structnmt.cli import main
rc = main(["translate", "--checkpoint", "no-such.pt", "--input", "no-such.txt"])
print(rc, "torch" in sys.modules, seen)
"""


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_the_command_line_sets_a_passive_openmp_wait_policy_before_torch_loads_unless_the_user_set_one(user, tmp_path):
    """OpenMP reads OMP_WAIT_POLICY once, when torch loads its runtime: set later, it would change nothing."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user is not None:
        env["OMP_WAIT_POLICY"] = user
    out = subprocess.run([sys.executable, "-c", _OMP_PROBE], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.stdout.split("\n")[-2] == f"2 True ['{user or 'PASSIVE'}']", out.stdout + out.stderr


def test_every_help_page_renders(capsys):
    """`structnmt --help` and each command's --help format every help string (a bare '%' in one
    is read as a format specifier by argparse and fails the whole page)."""
    import argparse

    import structnmt.cli.commands as cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert len(commands) > 10
    for argv in [["--help"]] + [[name, "--help"] for name in commands]:
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        assert done.value.code == 0, argv
        out = capsys.readouterr().out
        assert out.startswith("usage:"), argv
    assert "delta-plot" in cli.build_parser().format_help()


@pytest.mark.parametrize("command, required", [("train", "config"), ("experiment", "grid"), ("probe", "config"),
                                               ("tag", "config")])
def test_a_missing_config_names_only_what_is_required(command, required, capsys):
    import structnmt.cli.commands as cli

    with pytest.raises(SystemExit) as done:
        cli.main([command])
    assert done.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith(f"the following arguments are required: {required}"), last


def test_every_option_says_what_it_does():
    """A fairseq-like CLI documents each option in --help: no option of any command has an empty help."""
    import argparse

    import structnmt.cli.commands as cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = [f"{name} {a.option_strings[-1]}" for name, sub in commands.items() for a in sub._actions
              if a.option_strings and not a.help]
    assert silent == []


def test_translate_on_either_cpu_gemm_library_writes_the_same_translations_and_refuses_cuda_graphs_here(
        trained, monkeypatch):
    work = trained
    args = ("translate", "--checkpoint", str(work / "avg.pt"), "--input", str(work / "corpus" / "test.src"),
            "--workers", "1")
    outs = {}
    for choice in ("mkl", "onednn"):
        monkeypatch.setenv("STRUCTNMT_CPU_GEMM", choice)
        outs[choice] = run(*args).stdout
    assert outs["mkl"] == outs["onednn"] and len(outs["mkl"].splitlines()) == 200
    monkeypatch.setenv("STRUCTNMT_CPU_GEMM", "blas")
    bad = run(*args, check=False)
    assert bad.returncode != 0 and "STRUCTNMT_CPU_GEMM='blas': give auto" in bad.stderr
    assert "Traceback" not in bad.stderr
    monkeypatch.delenv("STRUCTNMT_CPU_GEMM")
    graphs = run(*args, "--cuda-graphs", check=False)
    assert graphs.returncode != 0 and "Traceback" not in graphs.stderr
    assert "--cuda-graphs: CUDA graphs are a CUDA feature and this model decodes on cpu" in graphs.stderr
    assert "drop --cuda-graphs" in graphs.stderr
