"""``structnmt demo``: the embedded default, end to end on CPU.

1. write the synthetic generalization benchmark (:mod:`structnmt.data.generalization`):
   the syntactic-transduction corpus without the held-out structures, plus its test splits;
2. prepare it (joint SentencePiece vocabulary);
3. train the small Transformer of ``recipes/demo.yaml`` for its fixed number of updates (about
   3 minutes on 2 cores), so that a busy machine prints the same numbers as an idle one, only
   later; ``updates`` replaces that number, ``minutes`` adds a wall-clock budget (whichever
   comes first);
4. average the last checkpoints, translate the i.i.d. test set and the hardest held-out
   split (4 attractors between subject and verb) with beam search;
5. print chrF, the subject-verb agreement accuracy on both and, last, sacreBLEU (with its
   signature) on the i.i.d. test set.

The last line printed contains ``BLEU``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import yaml

from ..config import ConfigError, apply_overrides, from_dict, naming_override
from ..data.generalization import BenchmarkConfig, load_examples, write_benchmark
from ..data.prepare import PrepareConfig, prepare
from ..data.synthetic import agreement_accuracy
from ..decode.translate import Translator
from ..errors import UserError
from ..evaluate.score import corpus_scores
from ..fileio.files import TORCH_FILE, OutputDir
from ..train.average import average_checkpoints, last_checkpoints
from ..train.resume import resumable_changes, resume_state
from .training import train


def demo_config(workdir: Path, updates: int | None, minutes: float, seed: int, overrides: list[str] | None = None):
    """``recipes/demo.yaml`` for ``workdir``: its ``train.max_updates`` (or ``updates``), or ``minutes`` of
    training if that comes first (0: no time limit)."""
    data = yaml.safe_load(resources.files("structnmt").joinpath("recipes/demo.yaml").read_text(encoding="utf-8"))
    data = apply_overrides(data, [f"data.path={workdir / 'data-bin'}", f"train.save_dir={workdir / 'model'}",
                                  f"train.seed={seed}", f"train.max_time_minutes={minutes}",
                                  *([f"train.max_updates={updates}"] if updates is not None else []),
                                  *(overrides or [])])
    try:
        return from_dict(data, where="recipes/demo.yaml")
    except ConfigError as err:
        raise naming_override(err, overrides or []) from None


def _check_workdir(work: Path, cfg) -> None:
    """Refuse, before the demo changes anything in ``work``, what it would otherwise find out too late: a
    dataset in ``work/data-bin`` prepared from other text (prepare would rebuild it), or a model in
    ``work/model`` trained with another config (the resume would be refused after the data was rebuilt)."""

    manifest = work / "data-bin" / "manifest.json"
    if manifest.is_file():
        try:
            trainpref = json.loads(manifest.read_text(encoding="utf-8"))["config"]["trainpref"]
        except (ValueError, KeyError, TypeError):
            trainpref = None
        if trainpref is not None and Path(trainpref).resolve() != (work / "corpus" / "train").resolve():
            raise UserError(f"demo --workdir {work}: {work / 'data-bin'} holds a dataset prepared from {trainpref}, "
                            "not the demo's corpus; the demo would rebuild it. Give the demo another --workdir.")
    save_dir = Path(cfg.train.save_dir)
    if save_dir.is_dir():
        found = resume_state(save_dir, log=lambda _msg: None)
        if found is not None:
            path, state = found
            try:
                resumable_changes(state, cfg, path, allow_config_change=False)
            except Exception as err:  # noqa: BLE001 - TrainingError: one sentence already
                raise UserError(f"demo --workdir {work}: {err} Give the demo another --workdir.") from None


def run_demo(workdir: str | Path, *, updates: int | None = None, minutes: float = 0.0, seed: int = 1,
             overrides: list[str] | None = None,
             n_train: int = 20000, n_test: int = 500, log=print) -> int:

    work = Path(workdir)
    # the demo's own files in workdir: a file of the user's under their names is refused before any work (a
    # workdir with a demo's model but no manifest is an earlier demo's)
    outputs = OutputDir(work, "demo", expect=("test.hyp", "attraction4.hyp"),
                        marker=(("model/checkpoint_last.pt", TORCH_FILE),))
    cfg = demo_config(work, updates, minutes, seed, overrides)  # a bad override is said before any work
    _check_workdir(work, cfg)  # everything it would touch, before it changes anything
    t0 = time.time()
    bcfg = BenchmarkConfig(seed=seed, n_train=n_train, n_valid=min(500, n_test), n_test=n_test, n_gen=n_test)
    corpus = work / "corpus"
    meta = corpus / "benchmark.json"
    if not meta.exists() or json.loads(meta.read_text()).get("config") != asdict(bcfg):
        write_benchmark(bcfg, corpus)
    log(f"demo: synthetic corpus in {corpus} ({n_train} train / {n_test} test pairs, seed {seed}; training holds "
        "no sentence with more than 1 attractor between subject and verb)")
    pcfg = PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                         validpref=str(corpus / "valid"), testprefs=[str(corpus / "test")],
                         vocab_size=1500, max_len=128)
    prepare(pcfg, work / "data-bin", progress=False, log=log)
    train(cfg, log=log)
    ckpts = last_checkpoints(cfg.train.save_dir, 3)
    avg = Path(cfg.train.save_dir) / "checkpoint_avg.pt"
    average_checkpoints(ckpts, avg)
    tr = Translator(avg)
    test, hard = load_examples(corpus, "test"), load_examples(corpus, "attraction4")
    hyps = [h[0].text for h in tr.translate([" ".join(ex.src) for ex in test])]
    hard_hyps = [h[0].text for h in tr.translate([" ".join(ex.src) for ex in hard])]
    outputs.write_text("test.hyp", "\n".join(hyps) + "\n")
    outputs.write_text("attraction4.hyp", "\n".join(hard_hyps) + "\n")
    acc, n_items = agreement_accuracy(hyps, test)
    hard_acc, hard_items = agreement_accuracy(hard_hyps, hard)
    bleu, chrf = corpus_scores(hyps, [" ".join(ex.tgt) for ex in test])
    log(f"demo: {len(hyps)} held-out sentences translated with beam {cfg.decode.beam} "
        f"from the average of {len(ckpts)} checkpoints; hypotheses in {work / 'test.hyp'}")
    log(f"chrF = {chrf.score:.2f} ({chrf.signature})")
    log(f"subject-verb agreement accuracy = {100 * acc:.2f}% of {n_items} verbs (i.i.d. test)")
    log(f"subject-verb agreement accuracy = {100 * hard_acc:.2f}% of {hard_items} verbs on the hardest held-out "
        f"split: 4 attractors between subject and verb, never seen in training ({len(hard)} sentences, "
        f"{work / 'attraction4.hyp'}); see docs/generalization.md")
    log(f"demo finished in {time.time() - t0:.0f} s. BLEU = {bleu.score:.2f} ({bleu.signature})")
    return 0
