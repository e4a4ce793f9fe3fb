"""``structnmt compare --experiment DIR``: the systems of an experiment's output directory, as
:mod:`structnmt.analysis.compare_report` reads them (files of the runner's layout; the analysis layer knows
nothing of the runner)."""

from __future__ import annotations

import json
from pathlib import Path

from ..analysis.compare import System
from ..analysis.compare_agreement import AgreementRuns, probe_outcomes
from ..analysis.compare_report import CompareInputs, parses_for, read_lines
from ..data.generalization import benchmark_splits, load_examples
from ..errors import UserError
from ..files import committed_or_plain
from .grid import slug


def _data_path(run_dir: Path) -> str:
    """The dataset a run trained on (its resolved.yaml's data.path), or one sentence."""
    import yaml

    try:
        return str(yaml.safe_load((run_dir / "resolved.yaml").read_text(encoding="utf-8"))["data"]["path"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        raise UserError(f"compare: {run_dir / 'resolved.yaml'} is missing or holds no data.path; a run directory "
                        "of the experiment runner has one.") from None


def _seed_dirs(out_dir: Path, row: str) -> list[Path]:
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
    for row in rows:
        runs, oks = [], []
        for d in _seed_dirs(out_dir, row):
            per_split = {sp: read_lines(committed_or_plain(d / f"bench_{sp}.hyp"), f"{row}'s translation of {sp}")
                         for sp in splits}
            for sp in splits:
                if len(per_split[sp]) != len(examples[sp]):
                    raise UserError(f"compare: {d / f'bench_{sp}.hyp'} has {len(per_split[sp])} lines, the "
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


def inputs_from_experiment(out_dir: str | Path, rows: list[str], splits: list[str]) -> CompareInputs:
    """The systems of an experiment's output directory (``runs/<row>/seed<k>/<split>.hyp``; the first row is
    the baseline), every split joined in order, with the dataset's sources, references, parses and
    training targets (its manifest names them)."""

    out_dir = Path(out_dir)
    if len(rows) < 2:
        raise UserError("compare: --experiment needs the baseline's row and at least one more (--row twice or more).")
    systems, data = [], None
    for row in rows:
        seeds = _seed_dirs(out_dir, row)
        data = data or _data_path(seeds[0])
        systems.append(System(row, [[h for sp in splits for h in read_lines(committed_or_plain(d / f"{sp}.hyp"), f"{row}'s translation")]
                                    for d in seeds]))
    data = Path(data)
    sources = [x for sp in splits for x in read_lines(data / f"{sp}.src.txt", "the dataset's source")]
    per_split = {sp: read_lines(data / f"{sp}.ref.txt", "the dataset's reference") for sp in splits}
    refs = [x for sp in splits for x in per_split[sp]]
    try:
        manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"compare: {data / 'manifest.json'} is missing or unreadable; the runs' dataset (data.path "
                        "of their resolved.yaml, relative to where you run the command) must be prepared "
                        "there.") from None
    c = manifest["config"]
    train = next((Path(k) for k in manifest.get("inputs", {})
                  if Path(k).name.startswith(Path(c["trainpref"]).name + "." + c["target_lang"])), None)
    targets = read_lines(train, "the training targets") if train is not None and train.is_file() else None
    parses = parses_for(sources, str(data), None) if manifest.get("syntax") else None
    return CompareInputs(sources, refs, systems, parses, targets, test_sets=[(sp, len(per_split[sp])) for sp in splits])
