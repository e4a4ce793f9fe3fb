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
:func:`write_benchmark` writes each example as it is drawn, and checks it against its split's
predicate (:class:`SplitSummary`: no training or validation sentence has a held-out property);
:func:`check_benchmark` checks a benchmark held in memory (:func:`generate_benchmark`) the same
way, and that no sentence occurs twice.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UserError
from ..syntax.io import parse_ptb, read_conllu
from ..syntax.trees import Node
from .synthetic import SynthExample, corpus_dir, split_files
from .synthetic.grammar import _Sampler
from .synthetic.lexicon import _lexicon
from .synthetic.render import _build_example
from .synthetic.seen import SeenSentences
from .synthetic.splits import _split_rng
from .synthetic.writing import progress_bar, write_example

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


def _top_subjects(node: Node) -> list[Node]:
    """The subject NPs of the top-level clauses of the clause ``node`` (``S -> S CC S`` coordinates them)."""
    if any(k.label == "S" for k in node.children):
        return [np for k in node.children if k.label == "S" for np in _top_subjects(k)]
    return [k for k in node.children if k.label == "NP"]


def _nesting(node: Node) -> int:
    """How deeply PPs and relative clauses nest below ``node``."""
    return max([(k.label in ("PP", "SBAR")) + _nesting(k) for k in node.children], default=0)


def _contains(node: Node, label: str) -> bool:
    """Whether a node below ``node`` has ``label``."""
    return any(k.label == label or _contains(k, label) for k in node.children)


def example_properties(ex: SynthExample) -> dict:
    """``{"length", "attractors", "subject_depth", "subject_rc"}`` of one example (module docstring).

    Its helpers are module functions, not nested ones: a recursive nested function is a reference
    cycle, which would keep each parsed tree until the garbage collector runs."""
    subjects = _top_subjects(parse_ptb(ex.tree).root)
    return {
        "length": len(ex.src),
        "attractors": max((item["attractors"] for item in ex.agreement), default=0),
        "subject_depth": max((_nesting(s) for s in subjects), default=0),
        "subject_rc": any(_contains(s, "SBAR") for s in subjects),
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


def _drawn(sampler: _Sampler, lex: dict, n: int, keep: Callable[[dict], bool], seen: SeenSentences,
           max_len: int, what: str) -> Iterator[tuple[SynthExample, dict]]:
    """``n`` examples of ``sampler`` and their properties, one at a time: samples longer than ``max_len``
    words, already in ``seen`` or whose properties ``keep`` refuses are re-drawn; every example yielded is
    added to ``seen``."""
    drawn = draws = 0
    while drawn < n:
        draws += 1
        if draws > 2000 * max(n, 10):
            option = "--n-gen" if what not in ("train", "valid", "test") else f"--n-{what}"
            raise UserError(f"could not draw {n:,} different {what} sentences in {draws - 1:,} draws; ask for fewer "
                            f"({option}) or give another --train-max-len.")
        ex = _build_example(sampler.clause(True), lex)
        key = " ".join(ex.src)
        if len(ex.src) > max_len or key in seen:
            continue
        p = example_properties(ex)
        if keep(p):
            seen.add(key)
            drawn += 1
            yield ex, p


def _split_sizes(cfg: BenchmarkConfig) -> dict[str, int]:
    """Sentences per split, in the order they are drawn and written (held-out splits, test, valid, train)."""
    return {**{s.name: cfg.n_gen for s in SPLITS if s.held_out}, "test": cfg.n_test, "valid": cfg.n_valid,
            "train": cfg.n_train}


def stream_benchmark(cfg: BenchmarkConfig) -> Iterator[tuple[str, Iterator[tuple[SynthExample, dict]]]]:
    """Every split of the benchmark with the stream of its (example, properties), drawn as it is read;
    deterministic in ``cfg``. Read each stream to its end before the next.

    Held-out splits come first (each from its own random stream), then the i.i.d. test, valid and
    train splits, so that no sentence occurs twice. Memory: the example being read, and 12 bytes per
    sentence of the benchmark for the sentences drawn so far (:class:`~.synthetic.seen.SeenSentences`)."""
    lex = _lexicon(cfg.seed)
    seen = SeenSentences(sum(_split_sizes(cfg).values()))
    for i, split in enumerate(s for s in SPLITS if s.held_out):
        rng = random.Random(cfg.seed * 1_000_003 + 7_919 * (i + 1))
        sampler = _Sampler(rng, cfg.max_depth, **GEN_NESTING)
        yield split.name, _drawn(sampler, lex, cfg.n_gen, lambda p, s=split: s.predicate(p, cfg), seen,
                                 cfg.max_len, split.name)
    for name in ("test", "valid", "train"):
        sampler = _Sampler(_split_rng(cfg.seed, name), cfg.max_depth)
        yield name, _drawn(sampler, lex, _split_sizes(cfg)[name], lambda p: in_training_distribution(p, cfg),
                           seen, cfg.max_len, name)


def generate_benchmark(cfg: BenchmarkConfig) -> dict[str, tuple[list[SynthExample], list[dict]]]:
    """Every split of the benchmark in lists: name -> (examples, their properties); deterministic in ``cfg``
    (:func:`stream_benchmark`, the whole benchmark held in memory)."""
    out = {}
    for name, stream in stream_benchmark(cfg):
        pairs = list(stream)
        out[name] = ([ex for ex, _ in pairs], [p for _, p in pairs])
    return out


def _rule(name: str) -> Callable[[dict, BenchmarkConfig], bool]:
    """The predicate every sentence of split ``name`` satisfies (train and valid: the training distribution)."""
    return next((s.predicate for s in SPLITS if s.name == name), in_training_distribution)


@dataclass
class SplitSummary:
    """The checked summary of one split in ``benchmark.json``, gathered one example at a time (:meth:`add`)."""

    name: str
    cfg: BenchmarkConfig
    sentences: int = 0
    max_attractors: int = 0
    max_subject_depth: int = 0
    with_subject_rc: int = 0
    shortest: int | None = None
    longest: int | None = None

    def add(self, p: dict) -> None:
        """Count an example with properties ``p``; raise if it breaks the split's rule."""
        if not _rule(self.name)(p, self.cfg):
            raise AssertionError(f"split {self.name}: sentence {self.sentences + 1} breaks its rule: {p}")
        self.sentences += 1
        self.max_attractors = max(self.max_attractors, p["attractors"])
        self.max_subject_depth = max(self.max_subject_depth, p["subject_depth"])
        self.with_subject_rc += int(p["subject_rc"])
        self.shortest = p["length"] if self.shortest is None else min(self.shortest, p["length"])
        self.longest = p["length"] if self.longest is None else max(self.longest, p["length"])

    def as_json(self) -> dict:
        return {"sentences": self.sentences, "max_attractors": self.max_attractors,
                "max_subject_depth": self.max_subject_depth, "with_subject_rc": self.with_subject_rc,
                "length": [self.shortest, self.longest]}


def check_benchmark(splits: dict[str, tuple[list[SynthExample], list[dict]]], cfg: BenchmarkConfig) -> dict:
    """Recompute every example's properties from its tree; raise if a split breaks its
    predicate, a training or validation sentence has a held-out property, or a sentence
    occurs twice. Returns a summary for ``benchmark.json``."""
    seen: dict[str, str] = {}
    summary = {}
    for name, (examples, _) in splits.items():
        split = SplitSummary(name, cfg)
        for ex in examples:
            split.add(example_properties(ex))
            key = " ".join(ex.src)
            if key in seen:
                raise AssertionError(f"sentence in both {seen[key]} and {name}: {key}")
            seen[key] = name
        summary[name] = split.as_json()
    return summary


def _benchmark_files(name: str) -> tuple[str, ...]:
    """The files of split ``name``: those of :func:`structnmt.data.synthetic.split_files` and the properties."""
    return (*split_files(name), f"{name}.props.jsonl")


def _benchmark_meta(cfg: BenchmarkConfig, summary: dict[str, dict]) -> dict:
    """The content of ``benchmark.json``: config, each split's statement and summary, what was checked."""
    statements = {s.name: s.statement.replace("train_max_len", str(cfg.train_max_len)) for s in SPLITS}
    statements["train"] = statements["valid"] = statements["test"]
    return {"config": asdict(cfg), "splits": {n: {"statement": statements[n], **summary[n]} for n in summary},
            "checked": "every split satisfies its rule; no training/valid sentence has a held-out property; "
                       "no sentence occurs twice"}


def write_benchmark(cfg: BenchmarkConfig, out_dir: str | Path, *, progress: bool = False) -> dict:
    """Generate, check and write every split (the files of
    :func:`structnmt.data.synthetic.write_corpus`, plus ``{split}.props.jsonl``) and
    ``benchmark.json`` (config, statements, checks), each example as it is drawn (memory: 12 bytes per
    sentence, :func:`stream_benchmark`). Every example is checked against its split's rule as it is
    written; no sentence occurs twice because the draw never repeats one. ``progress``: a progress bar
    on standard error. Returns the content of ``benchmark.json``."""
    sizes = _split_sizes(cfg)
    names = tuple(n for name in sizes for n in _benchmark_files(name)) + ("benchmark.json",)
    out = corpus_dir(out_dir, names)  # a file of the user's under one of the names is refused before any work
    summary: dict[str, dict] = {}
    with out.writing(names) as files, progress_bar(sum(sizes.values()), progress) as bar:
        for name, stream in stream_benchmark(cfg):
            split = SplitSummary(name, cfg)
            for ex, p in stream:
                split.add(p)
                write_example(files, name, ex)
                files[f"{name}.props.jsonl"].write(json.dumps(p) + "\n")
                bar.update()
            summary[name] = split.as_json()
        meta = _benchmark_meta(cfg, summary)
        files["benchmark.json"].write(json.dumps(meta, indent=2) + "\n")
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
