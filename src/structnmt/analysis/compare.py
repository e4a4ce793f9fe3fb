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
Every bucket's p adjusted for the report's many buckets (Holm, Benjamini-Hochberg), and the tests of a
difference between buckets (contrasts, heterogeneity), are :mod:`.compare_between`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..evaluate.seeds import RunStatistics, _scores, seed_aware_statistic_test
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
    # p adjusted for multiple comparisons (:func:`.compare_between.adjust_bucket_rows`): Holm and
    # Benjamini-Hochberg, within the family of the row's bucketing and within the whole report; NaN for a
    # small or untested bucket (its p is not read, so it is in no family)
    p_holm_kind: float = math.nan
    p_bh_kind: float = math.nan
    p_holm_report: float = math.nan
    p_bh_report: float = math.nan


@dataclass(frozen=True)
class Bucketing:
    """One bucketing's per-sentence statistics, what the per-bucket tests and the between-bucket tests
    (:mod:`.compare_between`) resample.

    ``stats[j]``: for bucket ``labels[j]``, every run's (sentences, K) statistics (the baseline's ``sizes[0]``
    runs first, then each of ``names``' ``sizes[i + 1]``), zero where a sentence has none of the bucket;
    ``score`` maps (R, K) summed statistics to R scores; ``strata``: per sentence the index of its bucket
    (sentence buckets: resampled within each bucket, as a bucket's own test resamples its sentences) or None
    (word-frequency and agreement buckets: every sentence resampled, as their own tests do); ``counts``:
    each bucket's size (sentences, reference words or probes)."""

    kind: str
    labels: list[str]
    stats: list[list[np.ndarray]]
    sizes: list[int]
    names: list[str]
    score: Callable[[np.ndarray], np.ndarray]
    strata: np.ndarray | None
    counts: list[int]


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


def interval(test) -> tuple[float, float]:
    """The 95 % interval of a seed-aware test's Δ: ``Δ ± t(0.975, df) · sqrt(seed_se² + sentence_se²)``."""
    from scipy import stats

    se = math.hypot(test.seed_se, test.sentence_se)
    half = float(stats.t.ppf(0.975, test.df) if math.isfinite(test.df) else stats.norm.ppf(0.975)) * se
    return test.delta - half, test.delta + half


def bucket_row(kind: str, label: str, n: int, name: str, test, cfg: CompareConfig) -> BucketRow:
    """One system's row in one bucket from its seed-aware test (:class:`structnmt.evaluate.seeds.SeedTest`)."""
    low, high = interval(test)
    return BucketRow(kind, label, n, name, test.baseline_mean, test.mean, test.delta, low, high, test.p_value,
                     n < cfg.min_bucket)


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


def run_statistics_of(refs: Sequence[str], systems: Sequence[System], cfg: CompareConfig) -> RunStatistics:
    """Every run's per-sentence statistics of ``cfg.metric``, the baseline (the first system) first."""
    base, others = systems[0], systems[1:]
    return RunStatistics.of(base.runs, {s.name: s.runs for s in others}, refs, metric=cfg.metric, lang=cfg.lang)


def bucket_rows(refs: Sequence[str], systems: Sequence[System], buckets: dict[str, list[str]],
                cfg: CompareConfig, rs: RunStatistics | None = None) -> list[BucketRow]:
    """Every system against the first (the baseline) in every bucket of every kind, and on all sentences
    (``rs``: :func:`run_statistics_of`, computed here when None)."""

    others = systems[1:]
    rs = rs if rs is not None else run_statistics_of(refs, systems, cfg)
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


#: per kind of numeric bucket: (a count of n in plain words, the phrase for zero)
_COUNTED: dict[str, tuple[Callable[[str, int], str], str]] = {
    "source length (words)": (lambda n, one: f"{n} {'word' if one else 'words'}", "no words"),
    "longest dependency arc (words)": (lambda n, one: f"longest arc {n} {'word' if one else 'words'}", "no arc"),
    "tree depth": (lambda n, one: f"depth {n}", "no tree"),
    "verbs": (lambda n, one: f"{n} {'verb' if one else 'verbs'}", "no verb"),
    "reference word frequency in training (word F-measure)": (
        lambda n, one: "seen once" if n == "1" else f"seen {n} times", "not seen in training"),
    "agreement by attractors (accuracy)": (lambda n, one: f"{n} {'attractor' if one else 'attractors'}",
                                           "no attractor"),
}


def plain_label(kind: str, label: str) -> str:
    """compare-mt's label of a bucket in plain words: ``<1`` of the verbs is "no verb", ``<10`` of the source
    length "under 10 words", ``[3,5)`` "3–4 verbs",
    ``>=3`` "3 or more verbs", ``yes``/``no`` of a yes/no kind "with"/"without"; other labels as they are."""
    if label in (YES, NO) and kind in ("relative clause", "PP after a noun", "coordination"):
        return f"{'with' if label == YES else 'without'} {'a ' if kind != 'coordination' else ''}{kind}"
    if kind not in _COUNTED:
        return label
    words, zero = _COUNTED[kind]
    if label.startswith("<") and label[1:].isdigit():
        top = int(label[1:]) - 1
        return zero if top == 0 else words(f"under {top + 1}", False) if top > 0 else label
    if label.startswith(">=") and label[2:].isdigit():
        return words(f"{label[2:]} or more", False)
    if label.startswith("[") and label.endswith(")"):
        a, b = (int(x) for x in label[1:-1].split(","))
        return words(str(a), a == 1) if b == a + 1 else words(f"{a}–{b - 1}", False)
    if label.isdigit():
        return zero if label == "0" else words(label, label == "1")
    return label


def delta_unit(kind: str, metric: str) -> str:
    """What a bucket's Δ is measured in: the metric's name (``metric``), the word F-measure or the probes'
    accuracy."""
    if "word F-measure" in kind:
        return "Δ word F-measure"
    if "agreement" in kind:
        return "Δ accuracy (%)"
    return f"Δ {metric}"


def word_counts(lines: Sequence[str], *, lowercase: bool = True) -> Counter:
    """Word counts of the training targets, by whitespace token (compare-mt counts the tokens it is given:
    the caller tokenizes, as :func:`.compare_report.run` does with the Moses tokenizer)."""
    c: Counter = Counter()
    for line in lines:
        c.update((line.lower() if lowercase else line).split())
    return c


FREQUENCY = "reference word frequency in training (word F-measure)"


def _fmeasure(sums: np.ndarray) -> np.ndarray:
    """compare-mt's word F-measure (%) of summed (matches, reference words, output words); 0 without words."""
    m, r, o = (sums[:, j].astype(float) for j in range(3))
    return np.divide(200.0 * m, r + o, out=np.zeros_like(m), where=(r + o) > 0)


def frequency_bucketing(refs: Sequence[str], systems: Sequence[System], counts: Counter,
                        cfg: CompareConfig) -> Bucketing:
    """compare-mt's word matching by training frequency of the reference word: per bucket, every run's
    per-sentence (matches, reference words, output words); the size of a bucket counts reference words."""
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

    runs = [stats(r) for s in systems for r in s.runs]  # the baseline's first
    return Bucketing(FREQUENCY, list(bucketer.bucket_strs), [[x[:, b] for x in runs] for b in range(k)],
                     [len(s.runs) for s in systems], [s.name for s in systems[1:]], _fmeasure, None,
                     [int(runs[0][:, b, 1].sum()) for b in range(k)])


def bucketing_rows(b: Bucketing, cfg: CompareConfig, metric: str) -> list[BucketRow]:
    """The seed-aware test of every system against the baseline in every bucket of ``b``, resampling every
    sentence (:func:`structnmt.evaluate.seeds.seed_aware_statistic_test`); a bucket found in fewer than 2
    sentences is reported small and untested (one sentence has no test-set spread)."""
    nb, rows = b.sizes[0], []
    for j, label in enumerate(b.labels):
        stats = b.stats[j]
        if int((stats[0].any(axis=1)).sum()) < 2:
            rows.extend(BucketRow(b.kind, label, b.counts[j], n, math.nan, math.nan, math.nan, math.nan, math.nan,
                                  math.nan, True) for n in b.names)
            continue
        start, systems = nb, {}
        for name, k in zip(b.names, b.sizes[1:]):
            systems[name], start = stats[start:start + k], start + k
        tests = seed_aware_statistic_test(stats[:nb], systems, b.score, metric=metric, n_samples=cfg.n_samples,
                                          seed=cfg.seed, method=cfg.seed_test)
        rows.extend(bucket_row(b.kind, label, b.counts[j], n, tests[n], cfg) for n in b.names)
    return rows


def frequency_rows(refs: Sequence[str], systems: Sequence[System], counts: Counter,
                   cfg: CompareConfig) -> list[BucketRow]:
    """compare-mt's word F-measure by training frequency of the reference word, per bucket, seed-aware."""
    return bucketing_rows(frequency_bucketing(refs, systems, counts, cfg), cfg, "word F-measure")


def sentence_bucketings(rs: RunStatistics, buckets: dict[str, list[str]]) -> list[Bucketing]:
    """The sentence buckets (length, syntax) as :class:`Bucketing`: each bucket's statistics are the runs'
    statistics of its sentences (zero elsewhere), resampled within the bucket as its own test does."""
    out = []
    for kind, labels in buckets.items():
        order = sorted(set(labels), key=label_order)
        strata = np.array([order.index(x) for x in labels])
        stats = [[s * (strata == j)[:, None] for s in rs.stats] for j in range(len(order))]
        out.append(Bucketing(kind, order, stats, list(rs.sizes), list(rs.names),
                             lambda sums, m=rs.metric_obj: _scores(m, sums), strata,
                             [int((strata == j).sum()) for j in range(len(order))]))
    return out


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
