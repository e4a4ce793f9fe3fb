"""``structnmt compare --experiment DIR``: the systems of an experiment's output directory, as
:mod:`structnmt.analysis.compare_report` reads them (files of the runner's layout; the analysis layer knows
nothing of the runner)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from ..analysis.compare import System
from ..analysis.compare_agreement import AgreementRuns, probe_outcomes
from ..analysis.compare_report import CompareInputs, parses_for, read_lines
from ..data.generalization import benchmark_splits, load_examples
from ..errors import UserError
from ..evaluate.runs import check_runs
from ..evaluate.score import corpus_scores
from ..fileio.corpus import CorpusError
from ..fileio.files import committed_or_plain, read_lines_exact
from .datasets import fingerprint_text, prepare_hint
from .grid import slug
from .runner import dataset_fingerprint


def _data_path(run_dir: Path) -> str:
    """The dataset a run trained on (its resolved.yaml's data.path), or one sentence."""
    try:
        return str(yaml.safe_load((run_dir / "resolved.yaml").read_text(encoding="utf-8"))["data"]["path"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        raise UserError(f"compare: {run_dir / 'resolved.yaml'} is missing or holds no data.path; a run directory "
                        "of the experiment runner has one.") from None


def _rows_runs(out_dir: Path, rows: list[str], names: list[str]) -> dict[str, list[list[Path]]]:
    """{row: per finished seed its translation files ``names`` (a run directory's, or their gzipped copies)},
    after :func:`structnmt.evaluate.runs.check_runs`: a row given twice, or a run in two rows, is refused."""
    runs = {row: [[committed_or_plain(d / n) for n in names] for d in _seed_dirs(out_dir, row)] for row in rows}
    check_runs([(row, runs[row]) for row in rows], prefix="compare: ", option="",
               rename="give every --row once")
    return runs


def _seed_dirs(out_dir: Path, row: str) -> list[Path]:
    """The finished runs of ``row`` (a result.json), by seed; one sentence where it has none."""
    seeds = sorted((d for d in (out_dir / "runs" / slug(row)).glob("seed*") if (d / "result.json").is_file()),
                   key=lambda d: int(d.name[4:]))
    if not seeds:
        raise UserError(f"compare: {out_dir / 'runs' / slug(row)} holds no finished run of row {row!r}; name a "
                        "row of the grid whose runs have a result.json.")
    return seeds


def inputs_from_benchmark(out_dir: str | Path, rows: list[str], bench_dir: str | Path) -> CompareInputs:
    """The systems of a synthetic-benchmark experiment (``runs/<row>/seed<k>/bench_<split>.hyp``, every split of
    the benchmark written by ``structnmt synth --generalization --out BENCH_DIR`` joined in its order), with the
    benchmark's sources, references, gold dependency trees (the syntax buckets) and agreement probes (the
    agreement buckets of :mod:`structnmt.analysis.compare_agreement`)."""

    out_dir = Path(out_dir)
    if len(rows) < 2:
        raise UserError("compare: --experiment needs the baseline's row and at least one more (--row twice or more).")
    try:
        splits = list(benchmark_splits(bench_dir))
        examples = {sp: load_examples(bench_dir, sp) for sp in splits}
    except (OSError, ValueError) as err:
        raise UserError(f"compare: --benchmark {bench_dir}: {err}") from None
    systems, outcomes = [], {}
    files = _rows_runs(out_dir, rows, [f"bench_{sp}.hyp" for sp in splits])
    for row in rows:
        runs, oks = [], []
        for run in files[row]:
            per_split = {sp: read_lines(f, f"{row}'s translation of {sp}") for sp, f in zip(splits, run)}
            for sp, f in zip(splits, run):
                if len(per_split[sp]) != len(examples[sp]):
                    raise UserError(f"compare: {f} has {len(per_split[sp])} lines, the "
                                    f"benchmark's split {sp} {len(examples[sp])}; the runs were translated from "
                                    "another benchmark (write it again with the grid's `structnmt synth` command).")
            runs.append([h for sp in splits for h in per_split[sp]])
            oks.append([o for sp in splits for o in probe_outcomes(per_split[sp], examples[sp])])
        systems.append(System(row, runs))
        outcomes[row] = oks
    exs = [ex for sp in splits for ex in examples[sp]]
    agreement = AgreementRuns([sp for sp in splits for _ in examples[sp]], [ex.agreement for ex in exs], outcomes)
    return CompareInputs([" ".join(ex.src) for ex in exs], [" ".join(ex.tgt) for ex in exs], systems,
                         [ex.dep for ex in exs], None, agreement)


def inputs_from_experiment(out_dir: str | Path, rows: list[str], splits: list[str],
                           data: str | None = None) -> CompareInputs:
    """The systems of an experiment's output directory (``runs/<row>/seed<k>/<split>.hyp``; the first row is
    the baseline), every split joined in order, with the dataset's sources, references, parses and
    training targets (its manifest names them). ``data``: where the runs' dataset is here (default: the
    ``data.path`` of their ``resolved.yaml``, relative to the current directory)."""

    out_dir = Path(out_dir)
    if len(rows) < 2:
        raise UserError("compare: --experiment needs the baseline's row and at least one more (--row twice or more).")
    files = _rows_runs(out_dir, rows, [f"{sp}.hyp" for sp in splits])
    systems = [System(row, [[h for f in run for h in read_lines(f, f"{row}'s translation")] for run in files[row]])
               for row in rows]
    first = _seed_dirs(out_dir, rows[0])[0]
    data_dir = _runs_dataset(first, data)
    sources = [x for sp in splits for x in read_lines(data_dir / f"{sp}.src.txt", "the dataset's source")]
    per_split = {sp: read_lines(data_dir / f"{sp}.ref.txt", "the dataset's reference") for sp in splits}
    refs = [x for sp in splits for x in per_split[sp]]
    try:
        manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"compare: {data_dir / 'manifest.json'} is unreadable; prepare the runs' dataset "
                        "again.") from None
    c = manifest["config"]
    train = next((Path(k) for k in manifest.get("inputs", {})
                  if Path(k).name.startswith(Path(c["trainpref"]).name + "." + c["target_lang"])), None)
    targets = read_lines(train, "the training targets") if train is not None and train.is_file() else None
    parses = parses_for(sources, str(data_dir), None) if manifest.get("syntax") else None
    return CompareInputs(sources, refs, systems, parses, targets, test_sets=[(sp, len(per_split[sp])) for sp in splits])


def _record(run_dir: Path) -> dict:
    """What a run recorded of its dataset: ``path`` (its resolved.yaml's data.path), and from its dataset.json
    (where there is one) ``fingerprint`` and ``grid`` (the grid file that trained it)."""
    try:
        found = json.loads((run_dir / "dataset.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = {}
    found = found if isinstance(found, dict) else {}
    return {"path": _data_path(run_dir), **{k: found.get(k) for k in ("fingerprint", "grid")
                                            if isinstance(found.get(k), str)}}


def _runs_dataset(run_dir: Path, data: str | None) -> Path:
    """The dataset the runs trained on, here: ``data`` (``--data``), else the recorded data.path; one sentence
    naming the dataset (its name and fingerprint) and how to make it when it is not there, or when it is
    another dataset (:func:`_check_same_dataset`)."""
    rec = _record(run_dir)
    where = Path(data) if data else Path(rec["path"])
    name = Path(rec["path"]).name
    if not (where / "manifest.json").is_file():
        given = (f"--data {data} holds no prepared dataset (no manifest.json)" if data else
                 f"the runs' dataset {rec['path']} (data.path of their resolved.yaml, relative to this directory) "
                 "is not here")
        raise UserError(f"compare: {given}; the runs trained on {name} ({fingerprint_text(rec.get('fingerprint'))}): "
                        f"prepare it with {prepare_hint(name, rec.get('grid'))}, and give it with --data DIR unless "
                        f"it lies at {rec['path']}.")
    _check_same_dataset(where, rec, run_dir)
    return where


def _check_same_dataset(where: Path, rec: dict, run_dir: Path) -> None:
    """Refuse a dataset that is not the one the runs trained on: its fingerprint differs from the recorded one
    and its references do not give the run's recorded BLEU on its evaluation split. The same references
    under another fingerprint (the dataset prepared again, with another parser version, say) are used,
    with a note."""
    recorded = rec.get("fingerprint")
    if not recorded or recorded in (dataset_fingerprint(where), dataset_fingerprint(where, raw=True)):
        return
    split, want, got = _recorded_bleu(where, run_dir)
    if got is not None and abs(got - want) < 0.005:
        print(f"note: compare: {where} is not byte for byte the dataset the runs trained on ({fingerprint_text(recorded)}; "
              f"prepared again, with another parser version say), but its {split} references give {run_dir}'s "
              f"recorded BLEU {want:.2f}, so its sources and references are used.", file=sys.stderr)
        return
    name = Path(rec["path"]).name
    score = f"BLEU {got:.2f}, not the recorded {want:.2f}" if got is not None else "no score to check them by"
    raise UserError(f"compare: {where} is not the dataset the runs trained on ({name}, {fingerprint_text(recorded)}): "
                    f"its fingerprint differs and its {split} references give {run_dir}'s translations {score}; "
                    f"prepare {name} with {prepare_hint(name, rec.get('grid'))} and give it with --data DIR.")


def _recorded_bleu(where: Path, run_dir: Path) -> tuple[str, float, float | None]:
    """(the run's evaluation split, its recorded BLEU, the BLEU of its translations against ``where``'s
    references of that split, or None where they cannot be scored: missing, another number of lines)."""
    try:
        res = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        res = None
    res = res if isinstance(res, dict) else {}
    split, want = str(res.get("split", "test")), res.get("bleu")
    if isinstance(want, bool) or not isinstance(want, (int, float)):
        return split, float("nan"), None
    try:
        hyps = read_lines_exact(committed_or_plain(run_dir / f"{split}.hyp"))
        refs = read_lines_exact(where / f"{split}.ref.txt")
    except (OSError, ValueError, CorpusError):
        return split, float(want), None
    if len(hyps) != len(refs):
        return split, float(want), None
    return split, float(want), next(s.score for s in corpus_scores(hyps, refs) if s.name == "BLEU")
