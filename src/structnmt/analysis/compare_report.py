"""``structnmt compare``'s inputs and outputs: reading the systems (files, or an experiment's runs) and
writing ``compare.csv``, ``compare_between.csv``, ``compare.md``, ``buckets.png`` and ``sentences.md`` (:mod:`.compare` computes)."""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..errors import UserError
from ..evaluate.score import moses_lc_tokenize
from ..fileio.corpus import CorpusError
from ..fileio.corpus import read_lines as corpus_lines
from ..fileio.files import OutputDir
from ..syntax.parse_cache import cached_parses, dataset_parser, read_parse_cache
from ..syntax.parsers import build_parser
from .compare import (
    BUCKET_GROUPS,
    BucketRow,
    CompareConfig,
    Example,
    System,
    attention_lines,
    bucket_rows,
    bucketing_rows,
    check_inputs,
    delta_unit,
    differing_sentences,
    frequency_bucketing,
    plain_label,
    run_statistics_of,
    sentence_bucketings,
    sentence_buckets,
    sentence_chrf,
    word_counts,
)
from .compare_agreement import AgreementRuns, agreement_bucketings, agreement_rows
from .compare_between import (
    HETEROGENEITY,
    BetweenRow,
    adjust_between_rows,
    adjust_bucket_rows,
    between_rows,
    marked,
)
from .compare_html import chart_data, html_page, page_data

FILES = ("compare.csv", "compare_between.csv", "compare.md", "buckets.png", "sentences.md", "report.html")


@dataclass
class CompareInputs:
    """What a comparison reads: sources, references, the systems (the first is the baseline), optionally
    the sources' dependency parses and the training targets (word frequencies)."""

    sources: list[str]
    refs: list[str]
    systems: list[System]
    parses: list | None = None  # DependencyTree per source line
    train_targets: list[str] | None = None
    agreement: AgreementRuns | None = None  # the synthetic benchmark's probes and outcomes
    # several test sets joined in order: (name, lines) of each; every set is a bucket of its own (TEST_SETS)
    test_sets: list[tuple[str, int]] | None = None


#: the kind of bucket of each joined test set alone ("all sentences" is then the joined set)
TEST_SETS = "test set (each alone; all sentences: the sets joined)"


def test_set_buckets(inputs: CompareInputs) -> dict[str, list[str]]:
    """{TEST_SETS: each sentence's test set} where several sets are joined, else nothing."""
    if not inputs.test_sets or len(inputs.test_sets) < 2:
        return {}
    return {TEST_SETS: [name for name, n in inputs.test_sets for _ in range(n)]}


def read_lines(path: str | Path, what: str) -> list[str]:
    """The lines of a text file, plain or gzip (:func:`structnmt.fileio.corpus.read_lines`: a missing, unreadable
    or non-UTF-8 file is one sentence naming it); ``what`` names the file's role in the sentence."""

    try:
        return list(corpus_lines(path))
    except CorpusError as err:
        raise UserError(f"compare: {what}: {err}") from None


def parses_for(sources: list[str], data: str | None, parse_cache: str | None) -> list | None:
    """The sources' dependency trees: from ``parse_cache`` (made with ``structnmt parse``) under ``data``'s
    parser settings, or parsed now with ``data``'s parser; None without ``data``."""
    if data is None:
        if parse_cache:
            raise UserError("compare: --parse-cache needs --data DATASET (the parser settings its keys were made "
                            "with).")
        return None

    cfg = dataset_parser(data)
    if cfg is None:
        raise UserError(f"compare: {data} was prepared without a parser, so the syntax buckets have no parses; "
                        "give a dataset prepared with --parser (`structnmt prepare --parser spacy`) or a parse "
                        "cache (`structnmt parse`).")
    texts = [s.strip() for s in sources]
    if parse_cache:
        parsed = cached_parses(read_parse_cache(parse_cache), parse_cache, cfg, texts)
    else:

        parsed = list(build_parser(cfg).parse(iter(texts)))
    return [p.dependency for p in parsed]


def run(inputs: CompareInputs, cfg: CompareConfig, out_dir: str | Path, *, html: bool = False,
        attention: Callable[[list[int]], dict] | None = None) -> list[Path]:
    """Compute and write the comparison (and, with ``html``, ``report.html``); returns the files written.
    ``attention``: lines -> the attention maps the page draws (:func:`structnmt.cli.compare_attention.attention_payload`
    of the systems given with a checkpoint), called with :func:`.compare.attention_lines`."""

    check_inputs(inputs.sources, inputs.refs, inputs.systems)
    check_buckets(inputs, cfg)
    if cfg.attention_lines is not None:
        attention_lines([], cfg, len(inputs.refs))  # lines out of range: said before any work
    out = OutputDir(out_dir, "compare", expect=FILES)  # refused before any work if it holds others' files
    buckets = {**test_set_buckets(inputs), **sentence_buckets(inputs.sources, inputs.parses, cfg)}
    rows, between = all_rows(inputs, buckets, cfg)
    chrf = sentence_chrf(inputs.systems, inputs.refs)
    examples = differing_sentences(inputs.sources, inputs.refs, inputs.systems, cfg, chrf)
    # the attention maps (a checkpoint per system) before any file is written: a model they fail for leaves nothing
    maps = attention(attention_lines(examples, cfg, len(inputs.refs))) if html and attention else None
    written = [out.write_text("compare.csv", rows_csv(rows)), out.write_text("compare_between.csv", rows_csv(between, BetweenRow)),
               out.write_text("compare.md", rows_markdown(rows, cfg) + between_markdown(between, cfg)),
               out.write_with("buckets.png", lambda p: plot_buckets(rows, p, cfg)),
               out.write_text("sentences.md", examples_markdown(examples))]
    if html:

        data = page_data(rows, inputs, buckets, chrf, cfg)
        data.update(chart_data(rows, _metric_name(cfg)))
        data["between"] = [{k: None if isinstance(v, float) and not math.isfinite(v) else v  # JSON has no inf
                            for k, v in asdict(r).items()} for r in between]
        data["attention"] = maps
        written.append(out.write_text("report.html", html_page(data)))
    return written


def all_rows(inputs: CompareInputs, buckets: dict[str, list[str]],
             cfg: CompareConfig) -> tuple[list[BucketRow], list[BetweenRow]]:
    """Every bucket's test and every between-bucket test (:mod:`.compare_between`), their p adjusted."""
    rs = run_statistics_of(inputs.refs, inputs.systems, cfg)
    rows = bucket_rows(inputs.refs, inputs.systems, buckets, cfg, rs)
    bucketings = sentence_bucketings(rs, buckets)
    if inputs.train_targets is not None and (cfg.buckets is None or "frequency" in cfg.buckets):
        tok = lambda lines: moses_lc_tokenize(lines, cfg.lang)  # noqa: E731 (compare-mt reads tokens)
        systems_tok = [System(s.name, [tok(r) for r in s.runs]) for s in inputs.systems]
        freq = frequency_bucketing(tok(inputs.refs), systems_tok, word_counts(tok(inputs.train_targets)), cfg)
        rows += bucketing_rows(freq, cfg, "word F-measure")
        bucketings.append(freq)
    if inputs.agreement is not None and (cfg.buckets is None or "agreement" in cfg.buckets):
        agreement = agreement_bucketings(inputs.agreement)
        rows += agreement_rows(inputs.agreement, cfg, agreement)
        bucketings += agreement
    between = [r for b in bucketings for r in between_rows(b, cfg)]
    return adjust_bucket_rows(rows), adjust_between_rows(between)


def check_buckets(inputs: CompareInputs, cfg: CompareConfig) -> None:
    """One sentence for a group of buckets asked for whose inputs are missing, or an unknown group."""

    for group in cfg.buckets or []:
        if group not in BUCKET_GROUPS:
            raise UserError(f"compare: --buckets {group!r} is not one of {', '.join(BUCKET_GROUPS)}.")
    if cfg.buckets and "syntax" in cfg.buckets and inputs.parses is None:
        raise UserError("compare: the syntax buckets need parses of the source: give --data DATASET (a dataset "
                        "prepared with --parser, e.g. `structnmt prepare --parser spacy`; its parser parses the "
                        "source) and, where that parser is not installed, --parse-cache FILE made with "
                        "`structnmt parse --data DATASET --input SOURCE --out FILE`.")
    if cfg.buckets and "agreement" in cfg.buckets and inputs.agreement is None:
        raise UserError("compare: the agreement buckets are the synthetic benchmark's: give --experiment DIR (a "
                        "grid on it, e.g. configs/grids/synth_generalization.yaml) with --benchmark BENCH_DIR "
                        "(written by `structnmt synth --generalization --out BENCH_DIR`).")
    if cfg.buckets and "frequency" in cfg.buckets and inputs.train_targets is None:
        raise UserError("compare: the word-frequency buckets need the training targets: give --train-ref FILE "
                        "(e.g. ../shared/data/multi30k/train.de.gz).")


def rows_csv(rows: list, row_type: type = BucketRow) -> str:
    """One CSV line per row (a :class:`.compare.BucketRow` or :class:`.compare_between.BetweenRow`); NaN empty."""
    buf = io.StringIO()
    names = [f.name for f in fields(row_type)]
    w = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(r).items()})
    return buf.getvalue()


def _metric_name(cfg: CompareConfig) -> str:
    return {"bleu_lc_tok": "BLEU (lc,tok)", "bleu": "BLEU", "chrf": "chrF"}.get(cfg.metric, cfg.metric)


def md_text(text: str, *, cell: bool = False) -> str:
    """Text from the data (a system's name, a bucket, a sentence) as Markdown shows it, never as HTML: ``<``,
    ``>`` and ``&`` escaped (:func:`html.escape`); in a table ``cell`` also ``|`` (it would end the cell)
    and line breaks."""
    out = html.escape(str(text), quote=False)
    return " ".join(out.replace("|", "\\|").splitlines()) if cell else out


def rows_markdown(rows: list[BucketRow], cfg: CompareConfig) -> str:
    """One table per kind of bucket: per bucket its size, the baseline's score and each system's Δ [95 %], p
    and Holm's p over the report (marked ``*`` below 0.05)."""
    systems = list(dict.fromkeys(r.system for r in rows))
    lines = [f"# Where the systems differ from the baseline\n\nΔ of the seed means against the baseline, with the "
             f"seed-aware test's 95 % interval and p, on each bucket's sentences alone ({cfg.n_samples:,} bootstrap "
             f"resamples, seed {cfg.seed}). Sentence buckets: {_metric_name(cfg)}; word-frequency buckets: "
             f"compare-mt's word F-measure (the size column counts reference words there); agreement buckets (the "
             f"synthetic benchmark): the accuracy of its subject-verb agreement probes (the size counts probes). "
             f"*small*: fewer than {cfg.min_bucket} sentences (words, probes), read with care; its p is not read "
             f"and has no adjusted p. Holm: p adjusted by Holm's method over every bucket of the report and every "
             f"system (compare.csv also has Holm within the bucketing and Benjamini-Hochberg); `*`: Holm below "
             f"0.05. A bucket marked and another not is no evidence that the two differ: that is the "
             f"between-bucket test below.\n"]
    for kind in dict.fromkeys(r.kind for r in rows):
        in_kind = [r for r in rows if r.kind == kind]
        lines += [f"## {md_text(kind)}\n", "| bucket | size | baseline | "
                  + " | ".join(f"{md_text(s, cell=True)}: Δ [95 %], p, Holm" for s in systems) + " |",
                  "|---|---:|---:|" + "---:|" * len(systems)]
        for label in dict.fromkeys(r.bucket for r in in_kind):
            cells = {r.system: r for r in in_kind if r.bucket == label}
            first = next(iter(cells.values()))
            size = f"{first.sentences}" + (" *small*" if first.small else "")
            base = "—" if math.isnan(first.baseline_score) else f"{first.baseline_score:.2f}"
            plain = plain_label(kind, label)  # compare-mt's own labels (no text from the data) in a code span
            name = md_text(label, cell=True) if plain == label else f"`{label}` ({md_text(plain, cell=True)})"
            lines.append(f"| {name} | {size} | {base} | " + " | ".join(_cell(cells.get(s)) for s in systems) + " |")
        lines.append("")
    return "\n".join(lines)


def _p(p: float) -> str:
    """A p-value as the tables print it: ``< 0.001``, three decimals, or ``—`` (none)."""
    return "—" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _cell(r: BucketRow | None) -> str:
    """One system's cell of a bucket: Δ [95 %], p, Holm's p over the report, and ``*`` if marked."""
    if r is None or math.isnan(r.delta):
        return "—"
    return (f"{r.delta:+.2f} [{r.low:+.2f}, {r.high:+.2f}], {_p(r.p_value)}, {_p(r.p_holm_report)}"
            + (" *" if marked(r) else ""))


def between_markdown(rows: list[BetweenRow], cfg: CompareConfig) -> str:
    """The between-bucket tests: per bucketing its contrasts and its heterogeneity test, per system."""
    lines = ["\n# Does the gain differ between buckets?\n\nPer bucketing and system: the contrast Δ_bucket − Δ_rest "
             "(the gain in a bucket minus the gain on the bucketing's other sentences; for two buckets, the second "
             "minus the first) with its 95 % interval and p, from the same seed-aware test resampling sentences "
             "and reading the seeds; and the heterogeneity test (Q: the squared standardized contrasts summed over "
             f"the buckets that are not small, against {cfg.n_samples:,} draws of its null; spread: the standard "
             "deviation of Δ over those buckets). Holm (bucketing): over the bucketing's contrasts and systems; "
             "Holm (report): over every contrast of the report, or every heterogeneity test; `*`: Holm (report) "
             "below 0.05. compare_between.csv also has Benjamini-Hochberg.\n"]
    for kind in dict.fromkeys(r.kind for r in rows):
        lines += [f"## {md_text(kind)}\n", "| test | system | size | Δ bucket | Δ rest | difference [95 %] or spread | "
                  "t or Q | p | Holm (bucketing) | Holm (report) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (x for x in rows if x.kind == kind):
            what = md_text(r.contrast, cell=True) + (" *small*" if r.small else "") + (" *" if marked(r) else "")
            if r.test == HETEROGENEITY:
                what, diff = f"heterogeneity over {what}", _num(r.difference, "")
            else:
                diff = f"{r.difference:+.2f} [{r.low:+.2f}, {r.high:+.2f}]" if not math.isnan(r.difference) else "—"
            lines.append(f"| {what} | {md_text(r.system, cell=True)} | {r.size} | {_num(r.delta_bucket)} | {_num(r.delta_rest)} | "
                         f"{diff} | {_num(r.statistic, '')} | {_p(r.p_value)} | {_p(r.p_holm_kind)} | "
                         f"{_p(r.p_holm_report)} |")
        lines.append("")
    return "\n".join(lines)


def _num(x: float, sign: str = "+") -> str:
    """Two decimals (signed unless ``sign`` is empty), or ``—`` for NaN."""
    return "—" if math.isnan(x) else f"{x:{sign}.2f}"


def plot_buckets(rows: list[BucketRow], path: Path, cfg: CompareConfig) -> None:
    """One panel per kind of bucket: each system's Δ per bucket with its 95 % interval, small buckets hollow."""
    from matplotlib.figure import Figure

    kinds = list(dict.fromkeys(r.kind for r in rows))
    systems = list(dict.fromkeys(r.system for r in rows))
    cols = 2
    fig = Figure(figsize=(6.2 * cols, 2.9 * math.ceil(len(kinds) / cols)))
    axes = fig.subplots(math.ceil(len(kinds) / cols), cols, squeeze=False).ravel()
    for ax, kind in zip(axes, kinds):
        labels = list(dict.fromkeys(r.bucket for r in rows if r.kind == kind))
        for k, s in enumerate(systems):
            pts = [(labels.index(r.bucket), r) for r in rows if r.kind == kind and r.system == s
                   and not math.isnan(r.delta)]
            xs = [i + (k - (len(systems) - 1) / 2) * 0.8 / max(1, len(systems)) for i, _ in pts]
            ys = [r.delta for _, r in pts]
            err = [[r.delta - r.low for _, r in pts], [r.high - r.delta for _, r in pts]]
            color = f"C{k % 10}"
            ax.errorbar(xs, ys, yerr=err, fmt="none", capsize=2, color=color)
            ax.scatter(xs, ys, s=18, zorder=3, edgecolors=color, label=s,
                       facecolors=["none" if r.small else color for _, r in pts])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(labels)), [plain_label(kind, b) for b in labels], fontsize=7, rotation=15)
        ax.set_title(kind, fontsize=9)
        ax.set_ylabel(delta_unit(kind, _metric_name(cfg)), fontsize=8)
    for ax in axes[len(kinds):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def examples_markdown(examples: list[Example]) -> str:
    """The sentences where each system differs most from the baseline, with every seed's translation."""
    lines = ["# Sentences where the systems differ most\n", "Δ: the system's sentence chrF minus the baseline's, "
             "each averaged over its seeds (sacreBLEU's CHRF).\n"]
    for system in dict.fromkeys(e.system for e in examples):
        lines.append(f"## {md_text(system, cell=True)}\n")
        for e in (x for x in examples if x.system == system):
            lines += [f"**Line {e.index + 1}**, Δ chrF {e.delta:+.1f}", "", f"- source: {md_text(e.source)}",
                      f"- reference: {md_text(e.reference)}"]
            for name, hyps in e.translations.items():
                lines += [f"- {md_text(name, cell=True)}, seed {k + 1}: {md_text(h)}" for k, h in enumerate(hyps)]
            lines.append("")
    return "\n".join(lines)
