"""Where a system gains: ``structnmt compare``, a bucketed comparison of systems of several seeds each.

compare-mt (Neubig et al. 2019) compares two systems of one translation each, by buckets of sentence
length and word frequency. Here every system has several seeds and every bucket gets the seed-aware
test of the whole comparison (:mod:`structnmt.evaluate.seeds`), run on that bucket's sentences alone:
Δ of the seed means with its 95 % interval ``Δ ± t(0.975, df) · sqrt(seed_se² + sentence_se²)`` and p.

Buckets (``BucketSpec``), each labelled with compare-mt's own bucketing (``Bucketer.set_bucket_cutoffs``
and ``cutoff_into_bucket``, labels such as ``<10``, ``[10,15)``, ``>=25``):

* **source length** in words;
* **syntax** of the source, from its dependency parse (the toolkit's parser, or a parse cache):
  the longest dependency arc (in words, punctuation left out), the tree's depth, the number of verbs, and whether the sentence
  has a relative clause (``relcl`` / ``acl:relcl``), a prepositional phrase after a noun (spaCy's
  ``prep`` on a noun to its left, or UD's ``nmod`` with a ``case`` child on a noun to its left) or a
  coordination (``conj``);
* **target-word frequency** in the training data: compare-mt's word F-measure by frequency bucket
  (``FreqWordBucketer``; its word matching per sentence), each run's F-measure from the summed
  (matches, reference words, output words) of its sentences, tested the same way.

A bucket with fewer than ``min_bucket`` sentences is reported and marked *small*, not hidden: its
interval is wide and its p is not read. The sentences where the systems differ most (sentence chrF,
averaged over each system's seeds) come with their source, reference and every seed's translation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..evaluate.seeds import RunStatistics, seed_aware_statistic_test
from ..syntax.trees import DependencyTree

#: the labels of a yes/no bucket
NO, YES = "no", "yes"


@dataclass(frozen=True)
class System:
    """One system: its name and its translations, one list of lines per seed."""

    name: str
    runs: list[list[str]]


@dataclass
class CompareConfig:
    """How ``compare`` buckets and tests. ``metric``: ``bleu_lc_tok`` (lowercased, Moses-tokenized; the
    Multi30k tables' BLEU), ``bleu`` or ``chrf``; ``lang``: the target language (Moses tokenizer)."""

    metric: str = "bleu_lc_tok"
    lang: str = "de"
    min_bucket: int = 50  # buckets with fewer sentences are marked small
    n_samples: int = 1000  # bootstrap resamples of each bucket's sentences
    seed: int = 12345
    seed_test: str = "decomposed"  # the seed-aware test's form (structnmt.evaluate.seeds)
    top: int = 20  # sentences where the systems differ most
    length_cutoffs: list[int] = field(default_factory=lambda: [10, 15, 20, 25])
    arc_cutoffs: list[int] = field(default_factory=lambda: [3, 5, 8])
    depth_cutoffs: list[int] = field(default_factory=lambda: [3, 4, 5, 6])
    verb_cutoffs: list[int] = field(default_factory=lambda: [1, 2, 3])
    freq_cutoffs: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 10, 100, 1000])  # compare-mt's
    buckets: list[str] | None = None  # of BUCKET_GROUPS; None: every group the inputs allow
    attention_sentences: int = 6  # --html with checkpoints: attention maps of this many differing sentences
    attention_lines: list[int] | None = None  # or of these 0-based lines


#: the groups of buckets ``--buckets`` names
BUCKET_GROUPS = ("length", "syntax", "frequency", "agreement")


@dataclass(frozen=True)
class BucketRow:
    """One system against the baseline in one bucket."""

    kind: str  # what the buckets split by
    bucket: str  # the bucket's label
    sentences: int
    system: str
    baseline_score: float  # the baseline's seed mean in this bucket
    score: float  # the system's seed mean
    delta: float
    low: float
    high: float
    p_value: float
    small: bool  # fewer sentences than CompareConfig.min_bucket


# --------------------------------------------------------------------------- sentence features


def _bucketer(cutoffs: Sequence[int]):
    from compare_mt.bucketers import Bucketer

    b = Bucketer()
    b.set_bucket_cutoffs(list(cutoffs), num_type="int")
    return b


def numeric_labels(values: Sequence[float], cutoffs: Sequence[int]) -> list[str]:
    """compare-mt's bucket label of every value (``<c0``, ``[c0,c1)``, ..., ``>=cN``)."""
    b = _bucketer(cutoffs)
    return [b.bucket_strs[b.cutoff_into_bucket(v)] for v in values]


def longest_arc(tree: DependencyTree) -> int:
    """The longest head-dependent distance in words, punctuation's arcs left out (a final full stop hangs on
    the root verb, often far away, and says nothing of the sentence's structure); 0 without an arc."""
    return max((abs(h - d) for h, d in tree.edges() if tree.upos[d] != "PUNCT" and tree.deprels[d] != "punct"),
               default=0)


def depth(tree: DependencyTree) -> int:
    """The number of words on the longest path from the root word down (a lone root: 1)."""
    kids = tree.children()
    best, stack = 0, [(tree.root_index, 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((k, d + 1) for k in kids[node])
    return best


def has_relative_clause(tree: DependencyTree) -> bool:
    return any(r in ("relcl", "acl:relcl") for r in tree.deprels)


def has_pp_after_noun(tree: DependencyTree) -> bool:
    """A prepositional phrase attached to a noun on its left: spaCy's ``prep`` (the preposition on the
    noun) or UD's ``nmod`` (the PP's noun on the noun) whose dependent has a ``case`` child."""
    kids = tree.children()
    for i, (h, rel) in enumerate(zip(tree.heads, tree.deprels)):
        if h == 0 or h - 1 >= i or tree.upos[h - 1] not in ("NOUN", "PROPN"):
            continue
        if rel == "prep" or (rel.startswith("nmod") and any(tree.deprels[k] == "case" for k in kids[i])):
            return True
    return False


def has_coordination(tree: DependencyTree) -> bool:
    return "conj" in tree.deprels


def sentence_buckets(sources: Sequence[str], parses: Sequence[DependencyTree] | None,
                     cfg: CompareConfig) -> dict[str, list[str]]:
    """kind -> one bucket label per sentence: source length always, the syntax kinds with parses."""
    want = cfg.buckets if cfg.buckets is not None else list(BUCKET_GROUPS)
    out = {}
    if "length" in want:
        out["source length (words)"] = numeric_labels([len(s.split()) for s in sources], cfg.length_cutoffs)
    if parses is None or "syntax" not in want:
        return out
    if len(parses) != len(sources):
        raise UserError(f"compare: {len(parses)} parses for {len(sources)} source lines; parse the source file "
                        "itself (`structnmt parse --data DATASET --input SOURCE --out FILE`).")
    yes_no: dict[str, Callable[[DependencyTree], bool]] = {
        "relative clause": has_relative_clause, "PP after a noun": has_pp_after_noun,
        "coordination": has_coordination}
    out["longest dependency arc (words)"] = numeric_labels([longest_arc(t) for t in parses], cfg.arc_cutoffs)
    out["tree depth"] = numeric_labels([depth(t) for t in parses], cfg.depth_cutoffs)
    out["verbs"] = numeric_labels([sum(u == "VERB" for u in t.upos) for t in parses], cfg.verb_cutoffs)
    for kind, test in yes_no.items():
        out[kind] = [YES if test(t) else NO for t in parses]
    return out


# --------------------------------------------------------------------------- the tests


def bucket_row(kind: str, label: str, n: int, name: str, test, cfg: CompareConfig) -> BucketRow:
    from scipy import stats

    se = math.hypot(test.seed_se, test.sentence_se)
    half = float(stats.t.ppf(0.975, test.df) if math.isfinite(test.df) else stats.norm.ppf(0.975)) * se
    return BucketRow(kind, label, n, name, test.baseline_mean, test.mean, test.delta, test.delta - half,
                     test.delta + half, test.p_value, n < cfg.min_bucket)


def check_inputs(sources: Sequence[str], refs: Sequence[str], systems: Sequence[System]) -> None:
    """One sentence for anything misaligned: every run, source and reference must have one line per sentence."""
    if len(systems) < 2:
        raise UserError("compare: give the baseline and at least one system (--hyp twice or more).")
    n = len(refs)
    if len(sources) != n:
        raise UserError(f"compare: the source has {len(sources)} lines and the reference {n}; give the source "
                        "the references translate.")
    for s in systems:
        if len(s.runs) < 2:
            raise UserError(f"compare: {s.name} has {len(s.runs)} run; the seed-aware test needs at least 2 seeds "
                            "per system (--hyp A1 A2 ...).")
        for k, run in enumerate(s.runs):
            if len(run) != n:
                raise UserError(f"compare: {s.name}'s run {k + 1} has {len(run)} lines, the reference {n}; "
                                "every translation must have one line per reference line.")


def bucket_rows(refs: Sequence[str], systems: Sequence[System], buckets: dict[str, list[str]],
                cfg: CompareConfig) -> list[BucketRow]:
    """Every system against the first (the baseline) in every bucket of every kind, and on all sentences."""

    base, others = systems[0], systems[1:]
    rs = RunStatistics.of(base.runs, {s.name: s.runs for s in others}, refs, metric=cfg.metric, lang=cfg.lang)
    rows: list[BucketRow] = []
    everything = {"all sentences": ["all"] * len(refs)}
    for kind, labels in {**everything, **buckets}.items():
        for label in sorted(set(labels), key=lambda x: label_order(x)):
            idx = np.array([i for i, x in enumerate(labels) if x == label])
            if len(idx) < 2:  # one sentence has no test-set spread: reported as small, untested
                rows.extend(BucketRow(kind, label, len(idx), s.name, math.nan, math.nan, math.nan, math.nan,
                                      math.nan, math.nan, True) for s in others)
                continue
            tests = rs.test(idx, n_samples=cfg.n_samples, seed=cfg.seed, aso=False, method=cfg.seed_test)
            rows.extend(bucket_row(kind, label, len(idx), s.name, tests[s.name], cfg) for s in others)
    return rows


def label_order(label: str) -> tuple:
    """Bucket labels in reading order: ``<a`` first, ``[a,b)`` and plain numbers by their start, ``>=b``
    last; yes/no as no, yes."""
    if label in (NO, YES):
        return (0, label == YES)
    if label.startswith("<"):
        return (1, -math.inf)
    if label.startswith(">="):
        return (1, math.inf)
    start = label.strip("[").split(",")[0]
    try:
        return (1, float(start))
    except ValueError:
        return (2, label)


def word_counts(lines: Sequence[str], *, lowercase: bool = True) -> Counter:
    """Word counts of the training targets, by whitespace token (compare-mt counts the tokens it is given:
    the caller tokenizes, as :func:`.compare_report.run` does with the Moses tokenizer)."""
    c: Counter = Counter()
    for line in lines:
        c.update((line.lower() if lowercase else line).split())
    return c


def frequency_rows(refs: Sequence[str], systems: Sequence[System], counts: Counter,
                   cfg: CompareConfig) -> list[BucketRow]:
    """compare-mt's word F-measure by training frequency of the reference word, per bucket, seed-aware."""
    from compare_mt.bucketers import FreqWordBucketer


    bucketer = FreqWordBucketer(freq_counts=counts, bucket_cutoffs=cfg.freq_cutoffs, case_insensitive=True)
    ref_tok = [r.split() for r in refs]
    k = len(bucketer.bucket_strs)

    def stats(run: list[str]) -> np.ndarray:
        out = np.zeros((len(refs), k, 3), dtype=np.int64)  # (sentences, buckets, [matches, ref words, out words])
        for i, (ref, hyp) in enumerate(zip(ref_tok, run)):
            ref_total, out_totals, out_matches, *_ = bucketer._calc_trg_buckets_and_matches(ref, None, [hyp.split()],
                                                                                              None)
            out[i, :, 0], out[i, :, 1], out[i, :, 2] = out_matches[0], ref_total, out_totals[0]
        return out

    per_run = {s.name: [stats(r) for r in s.runs] for s in systems}
    base, others = systems[0], systems[1:]
    rows = []
    kind = "reference word frequency in training (word F-measure)"
    for b, label in enumerate(bucketer.bucket_strs):
        def fmeasure(sums: np.ndarray) -> np.ndarray:
            m, r, o = (sums[:, j].astype(float) for j in range(3))
            return np.divide(200.0 * m, r + o, out=np.zeros_like(m), where=(r + o) > 0)

        words = int(per_run[base.name][0][:, b, 1].sum())
        tests = seed_aware_statistic_test([x[:, b] for x in per_run[base.name]],
                                          {s.name: [x[:, b] for x in per_run[s.name]] for s in others}, fmeasure,
                                          metric="word F-measure", n_samples=cfg.n_samples, seed=cfg.seed,
                                          method=cfg.seed_test)
        rows.extend(bucket_row(kind, label, words, s.name, tests[s.name], cfg) for s in others)
    return rows


# --------------------------------------------------------------------------- sentences


@dataclass(frozen=True)
class Example:
    """One sentence where a system differs most from the baseline (sentence chrF, seed means)."""

    index: int  # 0-based line
    system: str
    delta: float  # the system's mean sentence chrF minus the baseline's
    source: str
    reference: str
    translations: dict[str, list[str]]  # system -> every seed's translation


def sentence_chrf(systems: Sequence[System], refs: Sequence[str]) -> dict[str, np.ndarray]:
    """system -> (sentences,) sentence chrF averaged over its seeds (sacreBLEU's CHRF)."""
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    out = {}
    for s in systems:
        scores = np.array([[chrf.sentence_score(h, [r]).score for h, r in zip(run, refs)] for run in s.runs])
        out[s.name] = scores.mean(0)
    return out


def differing_sentences(sources: Sequence[str], refs: Sequence[str], systems: Sequence[System],
                        cfg: CompareConfig, chrf: dict[str, np.ndarray] | None = None) -> list[Example]:
    """Per system, the ``cfg.top`` sentences of largest |Δ sentence chrF| against the baseline."""
    chrf = chrf if chrf is not None else sentence_chrf(systems, refs)
    base = systems[0]
    out = []
    for s in systems[1:]:
        d = chrf[s.name] - chrf[base.name]
        for i in np.argsort(-np.abs(d), kind="stable")[: cfg.top]:
            out.append(Example(int(i), s.name, float(d[i]), sources[i], refs[i],
                               {x.name: [run[i] for run in x.runs] for x in systems}))
    return out


def attention_lines(examples: Sequence[Example], cfg: CompareConfig, n_lines: int) -> list[int]:
    """The lines whose attention the HTML report shows: ``cfg.attention_lines``, else the
    ``cfg.attention_sentences`` lines where a system differs most from the baseline (largest |Δ chrF| first)."""
    if cfg.attention_lines is not None:
        bad = [i + 1 for i in cfg.attention_lines if not 0 <= i < n_lines]
        if bad:
            raise UserError(f"compare: --attention-lines {', '.join(map(str, bad))}: the test set has lines 1 to "
                            f"{n_lines}.")
        return list(dict.fromkeys(cfg.attention_lines))
    ranked = sorted(examples, key=lambda e: (-abs(e.delta), e.index))
    return list(dict.fromkeys(e.index for e in ranked))[: cfg.attention_sentences]
