"""Behaviour check: every mechanism config trains and translates exactly as before a refactor.

For every translation config under ``configs/`` (and every row of the shared grids), on a
small synthetic corpus with gold trees: a few training updates (one validation among them,
so validation hooks such as RHE's head roles run), then beam search over the test
sentences. What is recorded per config: every record of ``metrics.jsonl`` (the losses of
every update and validation, without clock readings; JSON keeps a float exactly, so equal
means bit for bit), the head roles of runs that record them, a SHA-256 of the final
parameters, and the translations with their scores. Configs whose resolved settings coincide are run once.

    python benchmarks/behaviour_check.py --work /tmp/bc --write before.json     # before the change
    python benchmarks/behaviour_check.py --work /tmp/bc --compare before.json   # after: exit 1 on a difference

The models keep their configured sizes (a paper-size Transformer stays 512 wide); only the
data, the budget and the batch size change, so every code path a config takes is taken.
Run it with one thread (``OMP_NUM_THREADS=1``), the same number before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIRS = ("", "mgsa", "phrasal", "rhe", "phrasetransformer", "sanmt")
GRIDS = ("synth_generalization", "cross_paper_multi30k")


def prepare_corpus(work: Path) -> tuple[Path, Path]:
    """The synthetic corpus with gold trees (parser ``synthetic``) and its prepared dataset."""
    from structnmt.data.prepare import PrepareConfig, prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus
    from structnmt.syntax.parsers import ParserConfig

    corpus, data = work / "corpus", work / "data-bin"
    if not (data / "manifest.json").is_file():
        write_corpus(SynthConfig(seed=3, n_train=400, n_valid=16, n_test=16), corpus)
        prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                              validpref=str(corpus / "valid"), testprefs=[str(corpus / "test")], vocab_size=300,
                              parser=ParserConfig(name="synthetic")),
                data, progress=False, log=lambda *_: None)
    return corpus, data


def small_budget(data: Path, save_dir: Path) -> list[str]:
    return [f"data.path={data}", "data.max_tokens=300", f"train.save_dir={save_dir}", "train.max_updates=3",
            "train.max_epochs=0", "train.patience=0", "train.max_time_minutes=0", "train.max_target_tokens=0",
            "train.validate_interval_updates=2", "train.save_interval_updates=2", "train.validate_bleu=false",
            "train.tensorboard=false", "train.progress=false", "train.seed=1", "train.device=cpu",
            "train.threads=0", "train.log_interval=1", "train.warmup_updates=2", "train.head_roles_sentences=8",
            "decode.beam=2", "decode.max_len_a=0", "decode.max_len_b=8", "decode.batch_size=4",
            "decode.dtype=float32"]


def configs(data: Path, work: Path):
    """``(name, Config)`` of every translation config and grid row, with the small budget."""
    from structnmt.config import ConfigError, load_config
    from structnmt.experiment.grid import load_grid, resolve_run_config

    for sub in CONFIG_DIRS:
        for path in sorted((ROOT / "configs" / sub).glob("*.yaml")):
            name = str(path.relative_to(ROOT / "configs"))
            try:
                yield name, load_config(path, small_budget(data, work / "runs" / name))
            except ConfigError as err:  # a grid file or a non-translation config in the folder
                print(f"skipped {name}: {err}", file=sys.stderr)
    for grid_name in GRIDS:
        grid, _ = load_grid(ROOT / "configs" / "grids" / f"{grid_name}.yaml")
        for run in grid.runs:
            name = f"grids/{grid_name}/{run.name}"
            cfg = resolve_run_config(grid, run, 1, data_path=data, run_dir=work / "runs" / name, overrides=[])
            from structnmt.config import apply_overrides, from_dict, to_dict

            yield name, from_dict(apply_overrides(to_dict(cfg), small_budget(data, work / "runs" / name)))


def settings_key(cfg) -> str:
    from structnmt.config import to_dict

    d = to_dict(cfg)
    d["train"].pop("save_dir")
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def run_one(cfg, corpus: Path) -> dict:
    """Train the small budget and translate the first test sentences."""
    from structnmt.decode.translate import Translator
    try:
        from structnmt.cli.training import train
    except ImportError:  # the layout before structnmt.cli.training (a record written by an older checkout)
        from structnmt.train.trainer import train

    save = Path(cfg.train.save_dir)
    if save.exists():
        shutil.rmtree(save)
    torch.manual_seed(0)
    train(cfg, log=lambda *_: None)
    # every record of metrics.jsonl (training updates, validations, head roles) without its clock readings
    losses = [{k: v for k, v in r.items() if not any(t in k for t in ("time", "per_s", "second", "elapsed"))}
              for r in map(json.loads, (save / "metrics.jsonl").read_text().splitlines())]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    lines = (corpus / "test.src").read_text().splitlines()  # all: the pre-parsed trees cover the whole file
    tr = Translator(save / "checkpoint_last.pt", device="cpu")
    out = tr.translate(lines, cfg.decode, parse_prefix=str(corpus / "test"), parse_lang="src")
    tr.close()
    roles = save / "head_roles.jsonl"  # RHE's head roles, recorded at each validation (train.head_roles)
    extra = {"head_roles": roles.read_text().splitlines()} if roles.exists() else {}
    # the run's checkpoints are not needed once read (paper-size configs write hundreds of MB each: all of them
    # kept would take about 34 GB)
    shutil.rmtree(save)
    return {"losses": losses, "parameters": digest.hexdigest(), **extra,
            "translations": [[h.text, repr(h.score)] for hyps in out for h in hyps]}


def how_far(before: dict | None, now: dict | None) -> str:
    """How two records of one config differ, in one line: the largest relative difference of any logged number
    (losses, gradient norms, ...) of the same records, and whether the translations and parameters are the same
    (for a change that alters the arithmetic's order: is it rounding, or another result?)."""
    if not before or not now or "losses" not in before or "losses" not in now:
        return "only in one record, or a 'same_as' entry"
    if len(before["losses"]) != len(now["losses"]):
        return f"{len(before['losses'])} against {len(now['losses'])} metrics records"
    worst = 0.0
    for a, b in zip(before["losses"], now["losses"]):
        for key in set(a) & set(b):
            x, y = a[key], b[key]
            if isinstance(x, float) and isinstance(y, float) and x != y:
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-30))
    same = [what for what in ("translations", "parameters") if before.get(what) == now.get(what)]
    return f"largest relative difference of a logged number {worst:.1e}; same {', '.join(same) or 'nothing else'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, type=Path, help="a scratch directory (corpus, dataset, runs)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", type=Path, help="write the record of every config to this JSON file")
    what.add_argument("--compare", type=Path, help="compare against a record written before; exit 1 on a difference")
    ap.add_argument("--only", default="", help="only the configs whose name contains this text")
    args = ap.parse_args(argv)
    corpus, data = prepare_corpus(args.work)
    records: dict[str, dict] = {}
    done: dict[str, str] = {}  # settings -> the first config name with them
    for name, cfg in configs(data, args.work):
        if args.only not in name:
            continue
        key = settings_key(cfg)
        if key in done:
            records[name] = {"same_as": done[key]}
            continue
        done[key] = name
        records[name] = run_one(cfg, corpus)
        print(f"{name}: {len(records[name]['losses'])} records, last {records[name]['losses'][-1]}", flush=True)
    if args.write:
        args.write.write_text(json.dumps(records, indent=1) + "\n")
        print(f"wrote {args.write}: {len(records)} configs, {len(done)} distinct")
        return 0
    before = json.loads(args.compare.read_text())
    differ = [n for n in sorted(set(before) | set(records)) if before.get(n) != records.get(n)
              and not (args.only and n not in records)]
    for n in differ:
        print(f"DIFFERS: {n}: {how_far(before.get(n), records.get(n))}\n  before: {json.dumps(before.get(n))[:300]}\n"
              f"  now:    {json.dumps(records.get(n))[:300]}")
    print(f"{len(records)} configs compared, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
