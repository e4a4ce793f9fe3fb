"""Structural generalization splits of the synthetic task: a benchmark where syntax decides.

The i.i.d. synthetic test set is solved by a small Transformer in minutes; these splits
hold structures out of training (in the spirit of the Linzen et al. 2016 agreement sets,
COGS and SCAN) and test on them. Every example has four properties, computed from its
gold tree and agreement probes (:func:`example_properties`):

* ``attractors``: the largest number of nouns of the other number between a verb and
  its subject head, over the sentence's agreement probes;
* ``subject_depth``: how deeply PPs and relative clauses nest inside a top-level
  clause's subject NP (``the dog`` 0, ``the dog near the cat`` 1,
  ``the dog near the cat with the hats`` 2);
* ``subject_rc``: a relative clause somewhere inside a top-level subject NP;
* ``length``: source words.

Training (and the validation and i.i.d. test splits) keeps only sentences with at most
1 attractor, subject depth at most 1, no relative clause in a subject (relative clauses
occur on objects only) and at most ``train_max_len`` words. The held-out splits
(:data:`SPLITS` states each and its predicate):

* ``attraction{2,3,4}``: exactly k attractors;
* ``depth{2,3}``: subject depth exactly d;
* ``length``: longer than ``train_max_len`` words, every other property as in training;
* ``recombination``: a relative clause inside a subject (seen in training on objects
  only), every other property as in training.

The training distribution is the corpus's grammar; the held-out splits are drawn with
more nesting (PPs and relative clauses on NPs more likely, :data:`GEN_NESTING`) so that
rare structures (4 attractors: about 0.3 % of the plain grammar's sentences) cost few
draws; they are then filtered by their predicate. Sentences are unique across all splits.
:func:`check_benchmark` verifies at generation time (and in the tests) that every split
satisfies its predicate and that no training or validation sentence has a held-out
property.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..syntax.io import parse_ptb, read_conllu
from ..syntax.trees import Node
from .synthetic import SynthExample, corpus_dir, split_files, write_examples
from .synthetic.grammar import _Sampler
from .synthetic.lexicon import _lexicon
from .synthetic.render import _build_example
from .synthetic.splits import _split_rng

#: nesting probabilities (PP on an NP, relative clause on an NP, by depth) of the held-out splits
GEN_NESTING = {"np_pp": (0.6, 0.5, 0.4), "np_rc": (0.5, 0.4, 0.3)}


@dataclass
class BenchmarkConfig:
    """The generalization benchmark: the synthetic grammar of ``SynthConfig`` plus held-out splits."""

    seed: int = 1
    n_train: int = 20000
    n_valid: int = 500
    n_test: int = 500  # the i.i.d. test split
    n_gen: int = 500  # each held-out split
    train_max_len: int = 20  # words; the length split is longer
    max_len: int = 40  # words, every split
    max_depth: int = 3


def example_properties(ex: SynthExample) -> dict:
    """``{"length", "attractors", "subject_depth", "subject_rc"}`` of one example (module docstring)."""
    subjects: list[Node] = []

    def top_clauses(node: Node) -> None:
        if any(k.label == "S" for k in node.children):  # S -> S CC S
            for k in node.children:
                if k.label == "S":
                    top_clauses(k)
            return
        subjects.extend(k for k in node.children if k.label == "NP")

    def nesting(node: Node) -> int:
        return max([(k.label in ("PP", "SBAR")) + nesting(k) for k in node.children], default=0)

    def contains(node: Node, label: str) -> bool:
        return any(k.label == label or contains(k, label) for k in node.children)

    top_clauses(parse_ptb(ex.tree).root)
    return {
        "length": len(ex.src),
        "attractors": max((item["attractors"] for item in ex.agreement), default=0),
        "subject_depth": max((nesting(s) for s in subjects), default=0),
        "subject_rc": any(contains(s, "SBAR") for s in subjects),
    }


def in_training_distribution(p: dict, cfg: BenchmarkConfig) -> bool:
    """The training predicate: nothing that a held-out split tests."""
    return (p["attractors"] <= 1 and p["subject_depth"] <= 1 and not p["subject_rc"]
            and p["length"] <= cfg.train_max_len)


@dataclass(frozen=True)
class Split:
    name: str
    statement: str  # what is held out, in words
    predicate: Callable[[dict, BenchmarkConfig], bool]
    held_out: bool = True  # drawn with more nesting and never in training


def _as_training_but(p: dict, cfg: BenchmarkConfig, **changed) -> bool:
    return in_training_distribution({**p, **changed}, cfg)


SPLITS: tuple[Split, ...] = (
    Split("test", "i.i.d.: the training distribution", in_training_distribution, held_out=False),
    *(Split(f"attraction{k}", f"exactly {k} attractors between a verb and its subject head (training: at most 1)",
            lambda p, cfg, k=k: p["attractors"] == k) for k in (2, 3, 4)),
    *(Split(f"depth{d}", f"PPs / relative clauses nested {d} deep inside a subject NP (training: at most 1)",
            lambda p, cfg, d=d: p["subject_depth"] == d) for d in (2, 3)),
    Split("length", "longer than any training sentence (training: at most train_max_len words); otherwise "
          "as in training", lambda p, cfg: p["length"] > cfg.train_max_len and _as_training_but(
              p, cfg, length=cfg.train_max_len)),
    Split("recombination", "a relative clause inside a subject NP (training: relative clauses on objects only); "
          "otherwise as in training", lambda p, cfg: p["subject_rc"] and _as_training_but(p, cfg, subject_rc=False)),
)


def _draw(rng: random.Random, sampler: _Sampler, lex: dict, n: int, keep: Callable[[dict], bool],
          seen: set[str], max_len: int, what: str) -> tuple[list[SynthExample], list[dict]]:
    examples, props = [], []
    draws = 0
    while len(examples) < n:
        draws += 1
        if draws > 2000 * max(n, 10):
            raise RuntimeError(f"could not draw {n} unique {what} sentences in {draws - 1} draws")
        ex = _build_example(sampler.clause(True), lex)
        key = " ".join(ex.src)
        if len(ex.src) > max_len or key in seen:
            continue
        p = example_properties(ex)
        if keep(p):
            seen.add(key)
            examples.append(ex)
            props.append(p)
    return examples, props


def generate_benchmark(cfg: BenchmarkConfig) -> dict[str, tuple[list[SynthExample], list[dict]]]:
    """Every split of the benchmark: name -> (examples, their properties); deterministic in ``cfg``.

    Held-out splits are drawn first (each from its own random stream), then the i.i.d.
    test, valid and train splits, so that no sentence occurs twice."""
    lex = _lexicon(cfg.seed)
    seen: set[str] = set()
    out: dict[str, tuple[list[SynthExample], list[dict]]] = {}
    for i, split in enumerate(s for s in SPLITS if s.held_out):
        rng = random.Random(cfg.seed * 1_000_003 + 7_919 * (i + 1))
        sampler = _Sampler(rng, cfg.max_depth, **GEN_NESTING)
        out[split.name] = _draw(rng, sampler, lex, cfg.n_gen, lambda p, s=split: s.predicate(p, cfg), seen,
                                cfg.max_len, split.name)
    for name, n in (("test", cfg.n_test), ("valid", cfg.n_valid), ("train", cfg.n_train)):
        rng = _split_rng(cfg.seed, name)
        out[name] = _draw(rng, _Sampler(rng, cfg.max_depth), lex, n, lambda p: in_training_distribution(p, cfg),
                          seen, cfg.max_len, name)
    return out


def check_benchmark(splits: dict[str, tuple[list[SynthExample], list[dict]]], cfg: BenchmarkConfig) -> dict:
    """Recompute every example's properties from its tree; raise if a split breaks its
    predicate, a training or validation sentence has a held-out property, or a sentence
    occurs twice. Returns a summary for ``benchmark.json``."""
    by_name = {s.name: s for s in SPLITS}
    seen: dict[str, str] = {}
    summary = {}
    for name, (examples, _) in splits.items():
        rule = by_name[name].predicate if name in by_name else in_training_distribution
        props = [example_properties(ex) for ex in examples]
        bad = [i for i, p in enumerate(props) if not rule(p, cfg)]
        if bad:
            raise AssertionError(f"split {name}: sentence {bad[0] + 1} breaks its rule: {props[bad[0]]}")
        for ex in examples:
            key = " ".join(ex.src)
            if key in seen:
                raise AssertionError(f"sentence in both {seen[key]} and {name}: {key}")
            seen[key] = name
        summary[name] = {
            "sentences": len(examples),
            "max_attractors": max(p["attractors"] for p in props),
            "max_subject_depth": max(p["subject_depth"] for p in props),
            "with_subject_rc": sum(p["subject_rc"] for p in props),
            "length": [min(p["length"] for p in props), max(p["length"] for p in props)],
        }
    return summary


def write_benchmark(cfg: BenchmarkConfig, out_dir: str | Path) -> dict:
    """Generate, check and write every split (the files of
    :func:`structnmt.data.synthetic.write_corpus`, plus ``{split}.props.jsonl``) and
    ``benchmark.json`` (config, statements, checks). Returns the summary."""
    splits = generate_benchmark(cfg)
    summary = check_benchmark(splits, cfg)
    # a file of the user's under one of the names is refused before anything is written
    out = corpus_dir(out_dir, tuple(n for name in splits for n in (*split_files(name), f"{name}.props.jsonl"))
                     + ("benchmark.json",))
    for name, (examples, props) in splits.items():
        write_examples(examples, out, name)
        out.write_text(f"{name}.props.jsonl", "".join(json.dumps(p) + "\n" for p in props))
    statements = {s.name: s.statement.replace("train_max_len", str(cfg.train_max_len)) for s in SPLITS}
    statements["train"] = statements["valid"] = statements["test"]
    meta = {"config": asdict(cfg), "splits": {n: {"statement": statements[n], **summary[n]} for n in splits},
            "checked": "every split satisfies its rule; no training/valid sentence has a held-out property; "
                       "no sentence occurs twice"}
    out.write_text("benchmark.json", json.dumps(meta, indent=2) + "\n")
    return meta


def benchmark_splits(directory: str | Path) -> dict[str, str]:
    """The evaluation splits of a written benchmark (i.i.d. test first): name -> statement."""
    path = Path(directory) / "benchmark.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no generalization benchmark here; write one with "
                                "`structnmt synth --generalization --out DIR`.")
    splits = json.loads(path.read_text(encoding="utf-8"))["splits"]
    names = ["test"] + [s.name for s in SPLITS if s.held_out and s.name in splits]
    return {n: splits[n]["statement"] for n in names}


def load_examples(directory: str | Path, split: str) -> list[SynthExample]:
    """The examples of one written split (source, target, gold trees, agreement probes)."""

    d = Path(directory)
    src = (d / f"{split}.src").read_text(encoding="utf-8").splitlines()
    tgt = (d / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
    trees = (d / f"{split}.src.tree").read_text(encoding="utf-8").splitlines()
    agreement = [json.loads(x) for x in (d / f"{split}.agreement.jsonl").read_text(encoding="utf-8").splitlines()]
    deps = list(read_conllu(d / f"{split}.src.conllu"))
    if not len(src) == len(tgt) == len(trees) == len(agreement) == len(deps):
        raise ValueError(f"{d}: the files of split {split} have different numbers of sentences; rewrite it.")
    return [SynthExample(src=s.split(), tgt=t.split(), tree=tr, dep=dp, agreement=a)
            for s, t, tr, a, dp in zip(src, tgt, trees, agreement, deps)]
