"""Corpus-level MT evaluation built on sacreBLEU.

This module is a thin, typed layer over :mod:`sacrebleu` (>= 2.0):

* :func:`read_lines` reads hypothesis / reference files (plain or gzip, UTF-8)
  with precise error messages.
* :func:`corpus_scores` computes BLEU and chrF with sacreBLEU's own metric
  classes and reproducibility signatures. Optionally it adds
  ``"BLEU (lc,tok)"``: lowercased BLEU on Moses-tokenized text, the convention
  behind the fairseq Multi30k numbers (what ``multi-bleu.perl`` reports on
  ``tokenizer.perl`` output). That score is *not* comparable to standard
  (detokenized, cased, ``tok:13a``) sacreBLEU and its signature says so.
* :func:`paired_bootstrap` runs sacreBLEU's own paired bootstrap resampling
  test (:class:`sacrebleu.significance.PairedTest` with ``test_type="bs"``).
* :func:`format_report` renders scores as human-readable lines.

Requires ``sacrebleu`` and ``sacremoses`` (the latter only for the lc,tok
convention).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.moses import moses_tokenizer
from ..fileio.corpus import read_lines as stream_lines

__all__ = [
    "Score",
    "read_lines",
    "corpus_scores",
    "paired_bootstrap",
    "format_report",
    "moses_lc_tokenize",
]

#: Metric keys accepted by :func:`corpus_scores` / :func:`paired_bootstrap`.
_METRIC_ALIASES = {
    "bleu": "bleu",
    "chrf": "chrf",
    "bleu_lc_tok": "bleu_lc_tok",
    "bleu-lc-tok": "bleu_lc_tok",
    "bleu (lc,tok)": "bleu_lc_tok",
}


@dataclass
class Score:
    """One corpus-level score.

    Attributes:
        name: Display name, e.g. ``"BLEU"``, ``"chrF"``, ``"BLEU (lc,tok)"``.
        score: The score on a 0-100 scale.
        signature: sacreBLEU's reproducibility signature, e.g.
            ``"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"``;
            for non-standard conventions a ``|conv:...`` field is appended.
        detail: Extra information; for BLEU the n-gram precisions, brevity
            penalty, length ratio, hyp_len and ref_len as sacreBLEU prints them.
        precisions: BLEU n-gram precisions (percent) for n = 1..4; ``None``
            for chrF.
    """

    name: str
    score: float
    signature: str
    detail: str
    precisions: list[float] | None = None


MAX_BOOTSTRAP = 10_000
"""The most bootstrap resamples a test takes (``score --bootstrap``, ``compare --bootstrap``, a grid's
``evaluate.bootstrap_samples``). sacreBLEU's paired test and the seed-aware test draw every resample at once, at
least 8 bytes per resample and test sentence (sacreBLEU about 48 with BLEU's statistics: 10,000 resamples of
Multi30k's 1,014 sentences take about 0.5 GB); ``--bootstrap 100000000`` asked for 44.7 GiB. 1,000 is the usual
number, and 10,000 already puts the p-values' own sampling error below 0.005 at p = 0.05."""


def bootstrap_refusal(n_samples: int, what: str, sentences: int | None = None) -> str | None:
    """One sentence refusing ``n_samples`` resamples above :data:`MAX_BOOTSTRAP` (``what``: how the user gave them,
    ``--bootstrap 100000000``; ``sentences``: the test set's, for the memory it would take), or None."""
    if n_samples <= MAX_BOOTSTRAP:
        return None
    size = f", {n_samples * sentences * 8 / 2**30:,.1f} GiB for these {sentences:,} sentences" if sentences else ""
    return (f"{what}: give at most {MAX_BOOTSTRAP:,} resamples (1,000 is the usual number); the test holds every "
            f"resample at once, at least 8 bytes per resample and sentence{size}.")


# --------------------------------------------------------------------------
# I/O
# --------------------------------------------------------------------------


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (plain or gzip) without their line endings.

    :func:`structnmt.fileio.corpus.read_lines` as a list: only ``"\\n"`` ends a line,
    and a bad file (missing, invalid UTF-8, truncated gzip) raises
    :class:`~structnmt.fileio.corpus.CorpusError` (a ``ValueError``) naming the file, the
    line and the column.
    """

    return list(stream_lines(path))


# --------------------------------------------------------------------------
# Tokenization for the lowercased/tokenized convention
# --------------------------------------------------------------------------


def moses_lc_tokenize(lines: Iterable[str], lang: str = "en") -> list[str]:
    """Lowercase and Moses-tokenize lines (no XML escaping).

    Mirrors ``lowercase.perl | tokenizer.perl -l <lang> -no-escape`` as used
    before ``multi-bleu.perl``. Lowercasing happens first.
    """

    tok = moses_tokenizer(lang)
    return [tok.tokenize(line.lower(), escape=False, return_str=True) for line in lines]


# Moses' XML escapes (tokenizer.perl without -no-escape), undone in this order: &amp; last, so that an
# escaped "&lt;" ("&amp;lt;") comes back as the text "&lt;" and not as "<"
_MOSES_ESCAPES = (("&#124;", "|"), ("&lt;", "<"), ("&gt;", ">"), ("&apos;", "'"), ("&quot;", '"'),
                  ("&#91;", "["), ("&#93;", "]"), ("&amp;", "&"))


def moses_unescape(line: str) -> str:
    """Undo Moses' XML escapes (``&apos;`` -> ``'``, ...) and nothing else (unlike ``html.unescape``)."""
    for escaped, char in _MOSES_ESCAPES:
        line = line.replace(escaped, char)
    return line


def _lc_tok_convention(lang: str) -> str:
    return f"conv:lc+moses-tok({lang})"


def lc_tok_bleu() -> Any:
    """sacreBLEU's BLEU for text already lowercased and Moses-tokenized (BLEU (lc,tok)): no tokenizer
    of its own, and ``force`` because tokenized input is the point here (sacreBLEU would otherwise warn
    that the text looks tokenized; ``force`` is not part of the signature)."""
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize="none", lowercase=False, force=True)


# --------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------


def _normalize_metric(metric: str) -> str:
    key = _METRIC_ALIASES.get(metric.strip().lower())
    if key is None:
        raise ValueError(
            f"unknown metric {metric!r}; expected one of 'bleu', 'chrf', 'bleu_lc_tok'"
        )
    return key


def _check_parallel(hyps: Sequence[str], refs: Sequence[str], what: str = "hypotheses") -> None:
    if len(hyps) != len(refs):
        raise ValueError(
            f"number of {what} ({len(hyps)}) does not match number of references ({len(refs)})"
        )
    if len(hyps) == 0:
        raise ValueError("cannot score an empty corpus (0 hypotheses and 0 references)")


def _bleu_detail(res: Any) -> str:
    """Precisions/BP/ratio/lengths in sacreBLEU's own layout."""
    return (
        f"{res.prec_str} (BP = {res.bp:.3f} ratio = {res.ratio:.3f} "
        f"hyp_len = {res.sys_len:d} ref_len = {res.ref_len:d})"
    )


def _bleu_score(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    res = metric.corpus_score(list(hyps), [list(refs)])
    return Score(
        name="BLEU",
        score=float(res.score),
        signature=str(metric.get_signature()),
        detail=_bleu_detail(res),
        precisions=[float(p) for p in res.precisions],
    )


def _chrf_score(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    res = metric.corpus_score(list(hyps), [list(refs)])
    return Score(
        name="chrF",
        score=float(res.score),
        signature=str(metric.get_signature()),
        detail=f"({res.name}: char_order = {res.char_order} word_order = {res.word_order} "
        f"beta = {res.beta})",
        precisions=None,
    )


def _bleu_lc_tok_score(hyps: Sequence[str], refs: Sequence[str], lang: str) -> Score:
    tok_hyps = moses_lc_tokenize(hyps, lang)
    tok_refs = moses_lc_tokenize(refs, lang)
    metric = lc_tok_bleu()
    res = metric.corpus_score(tok_hyps, [tok_refs])
    return Score(
        name="BLEU (lc,tok)",
        score=float(res.score),
        signature=f"{metric.get_signature()}|{_lc_tok_convention(lang)}",
        detail=_bleu_detail(res),
        precisions=[float(p) for p in res.precisions],
    )


def corpus_scores(
    hyps: list[str],
    refs: list[str],
    *,
    metrics: Sequence[str] = ("bleu", "chrf"),
    lowercase_tokenized: bool = False,
    lang: str = "en",
) -> list[Score]:
    """Compute corpus-level scores with sacreBLEU (single reference).

    Args:
        hyps: Detokenized system outputs, one per segment.
        refs: Detokenized references, aligned with ``hyps``.
        metrics: Any of ``"bleu"`` (sacreBLEU defaults: cased, ``tok:13a``,
            exp smoothing) and ``"chrf"`` (chrF2, sacreBLEU defaults), in the
            order the scores should be returned. ``"bleu_lc_tok"`` is also
            accepted and is equivalent to ``lowercase_tokenized=True``.
        lowercase_tokenized: Also report ``"BLEU (lc,tok)"``: both sides are
            lowercased and Moses-tokenized (``sacremoses``, ``escape=False``)
            and scored with ``BLEU(tokenize="none", lowercase=False, force=True)``, i.e.
            the ``multi-bleu.perl``-on-tokenized-text convention of the
            fairseq Multi30k results. Its signature ends with
            ``|conv:lc+moses-tok(<lang>)``.
        lang: Target language for the Moses tokenizer.

    Returns:
        One :class:`Score` per requested metric; the lc,tok BLEU comes last.

    Raises:
        ValueError: If ``hyps`` and ``refs`` differ in length (both counts are
            in the message), if they are empty, or on an unknown metric.
    """
    _check_parallel(hyps, refs)
    keys = [_normalize_metric(m) for m in metrics]
    if lowercase_tokenized and "bleu_lc_tok" not in keys:
        keys.append("bleu_lc_tok")
    out: list[Score] = []
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        if key == "bleu":
            out.append(_bleu_score(hyps, refs))
        elif key == "chrf":
            out.append(_chrf_score(hyps, refs))
        else:
            out.append(_bleu_lc_tok_score(hyps, refs, lang))
    return out


# --------------------------------------------------------------------------
# Significance testing
# --------------------------------------------------------------------------


def _check_bootstrap_args(
    baseline_hyps: list[str],
    system_hyps: dict[str, list[str]],
    refs: list[str],
    n_samples: int,
    seed: int | None,
) -> None:
    """Raise :class:`ValueError` on mismatched or empty outputs, ``n_samples <= 0`` or a bad seed."""
    _check_parallel(baseline_hyps, refs, what="baseline hypotheses")
    for name, hyps in system_hyps.items():
        _check_parallel(hyps, refs, what=f"hypotheses of system {name!r}")
    if n_samples <= 0:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed <= 0):
        raise ValueError(
            f"seed must be a positive int or None, got {seed!r} (sacreBLEU treats 0 as 'unseeded')"
        )


@contextmanager
def _sacrebleu_seed(seed: int | None) -> Iterator[None]:
    """Set ``SACREBLEU_SEED`` to ``seed`` (``"none"`` for None) in the block, then restore it."""
    old_seed = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = "none" if seed is None else str(seed)
    try:
        yield
    finally:
        if old_seed is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old_seed


def _bootstrap_result(
    res: Any, bl: Any, identical: bool, metric_name: str, signature: str, n_samples: int
) -> dict:
    """One system's result in :func:`paired_bootstrap` from sacreBLEU's ``res`` and baseline ``bl``.

    Degenerate case: for a system whose hypotheses are *identical* to the
    baseline every resampled difference is exactly 0, and sacreBLEU's strict
    ``>`` count then yields the minimum p-value ``1/(n_samples+1)``, i.e. it
    would call a system "significantly different" from itself. For such a
    system the result reports ``p_value = 1.0`` (no evidence of any
    difference) and keeps sacreBLEU's raw number in ``"sacrebleu_p_value"``;
    ``"identical_to_baseline"`` flags the case. The same holds, and ``"constant"`` flags it, for two
    different outputs whose every resample scores the same (both at BLEU 0.00, say)."""
    raw_p = float(res.p_value)
    mean = float(res.mean)
    half = float(res.ci)
    # every resample of both systems scores the same (e.g. two systems at BLEU 0.00): every resampled
    # difference is the observed 0, and sacreBLEU's strict count gives the minimum p, as for identical outputs
    constant = float(res.score) == float(bl.score) and half == 0.0 and float(bl.ci or 0.0) == 0.0
    return {
        "score": float(res.score),
        "baseline": float(bl.score),
        "delta": float(res.score) - float(bl.score),
        "p_value": 1.0 if identical or constant else raw_p,
        "sacrebleu_p_value": raw_p,
        "mean": mean,
        "ci_halfwidth": half,
        "ci": (mean - half, mean + half),
        "baseline_mean": float(bl.mean) if bl.mean is not None else math.nan,
        "baseline_ci_halfwidth": float(bl.ci) if bl.ci is not None else math.nan,
        "identical_to_baseline": identical,
        "constant": constant,
        "metric": metric_name,
        "signature": signature,
        "n_samples": n_samples,
    }


def paired_bootstrap(
    baseline_hyps: list[str],
    system_hyps: dict[str, list[str]],
    refs: list[str],
    *,
    metric: str = "bleu",
    n_samples: int = 1000,
    seed: int | None = 12345,
    lang: str = "en",
) -> dict[str, dict]:
    """Paired bootstrap resampling against a baseline, via sacreBLEU.

    Uses :class:`sacrebleu.significance.PairedTest` with ``test_type="bs"``
    (a port of Moses' ``bootstrap-hypothesis-difference-significance.pl``).
    sacreBLEU takes its RNG seed from the ``SACREBLEU_SEED`` environment
    variable when the test object is built; this function sets that variable
    to ``seed`` for the duration of the call and restores it afterwards (so
    the call is not thread-safe with respect to other sacreBLEU tests running
    concurrently in the same process). All systems share the same resample
    indices, as in sacreBLEU.

    Degenerate case: a system identical to the baseline, or scoring the same
    on every resample, gets ``p_value = 1.0`` where sacreBLEU gives the
    minimum ``1/(n_samples+1)`` (:func:`_bootstrap_result` says why).

    Args:
        baseline_hyps: Baseline outputs.
        system_hyps: ``{system name: outputs}`` to compare with the baseline.
        refs: References aligned with all outputs.
        metric: ``"bleu"``, ``"chrf"`` or ``"bleu_lc_tok"`` (lowercased BLEU on
            Moses-tokenized text, see :func:`corpus_scores`).
        n_samples: Number of bootstrap resamples (> 0).
        seed: RNG seed (a positive int) for deterministic results; ``None``
            draws entropy from the OS. ``0`` is rejected because sacreBLEU
            treats a zero seed as "unseeded".
        lang: Moses tokenizer language for ``"bleu_lc_tok"``.

    Returns:
        ``{system name: result}`` in the order of ``system_hyps`` where each
        result has:

        * ``"score"``: the system's corpus score,
        * ``"baseline"``: the baseline's corpus score,
        * ``"delta"``: ``score - baseline``,
        * ``"p_value"``: p-value of the paired test (see degenerate case),
        * ``"sacrebleu_p_value"``: the p-value exactly as sacreBLEU returned it,
        * ``"mean"`` / ``"ci_halfwidth"``: bootstrap mean and 95% CI half-width
          of the system score (sacreBLEU's ``μ ± ci``),
        * ``"ci"``: ``(mean - ci_halfwidth, mean + ci_halfwidth)``,
        * ``"baseline_mean"`` / ``"baseline_ci_halfwidth"``: same for the baseline,
        * ``"identical_to_baseline"``: bool,
        * ``"constant"``: bool, both systems score the same on every resample (p reported as 1.0),
        * ``"metric"``: sacreBLEU's metric name (``"BLEU"``, ``"chrF2"``),
        * ``"signature"``: sacreBLEU's test signature (with ``bs`` and
          ``seed``; plus ``|conv:...`` for ``bleu_lc_tok``),
        * ``"n_samples"``.

    Raises:
        ValueError: On length mismatches (counts named), empty input, an
            unknown metric, ``n_samples <= 0`` or an invalid seed.
    """
    key = _normalize_metric(metric)
    _check_bootstrap_args(baseline_hyps, system_hyps, refs, n_samples, seed)
    if not system_hyps:
        return {}

    names = list(system_hyps)
    metric_obj, base, systems, references, suffix = _bootstrap_inputs(
        key, list(baseline_hyps), [list(system_hyps[n]) for n in names], list(refs), lang)
    metric_name, results, signature = _paired_bs_test(key, metric_obj, base, systems, references, n_samples, seed)
    signature += suffix
    out: dict[str, dict] = {}
    for idx, name in enumerate(names):
        identical = system_hyps[name] == list(baseline_hyps) or systems[idx] == base
        out[name] = _bootstrap_result(results[idx + 1], results[0], identical, metric_name, signature, n_samples)
    return out


def _bootstrap_inputs(key: str, base: list[str], systems: list[list[str]], references: list[str], lang: str
                      ) -> tuple[Any, list[str], list[list[str]], list[str], str]:
    """The sacreBLEU metric of ``key`` and the texts it scores: ``(metric, baseline, systems, references,
    signature suffix)``. ``bleu_lc_tok`` scores the lowercased Moses tokens of every text (its suffix names the
    convention); ``bleu`` and ``chrf`` score the texts as given (no suffix)."""
    from sacrebleu.metrics import BLEU, CHRF

    if key == "bleu":
        return BLEU(), base, systems, references, ""
    if key == "chrf":
        return CHRF(), base, systems, references, ""
    return (lc_tok_bleu(), moses_lc_tokenize(base, lang), [moses_lc_tokenize(s, lang) for s in systems],
            moses_lc_tokenize(references, lang), f"|{_lc_tok_convention(lang)}")


def _paired_bs_test(key: str, metric_obj: Any, base: list[str], systems: list[list[str]], references: list[str],
                    n_samples: int, seed: int | None) -> tuple[str, list, str]:
    """sacreBLEU's paired bootstrap (``PairedTest``, ``test_type="bs"``) of ``systems`` against ``base`` under
    ``seed``: ``(metric name, [baseline result, system results...], the test's signature)``."""
    from sacrebleu.significance import PairedTest

    named = [("__baseline__", base)] + [(f"system_{i}", s) for i, s in enumerate(systems)]
    with _sacrebleu_seed(seed):
        test = PairedTest(
            named,
            {key: metric_obj},
            [references],
            test_type="bs",
            n_samples=n_samples,
            n_jobs=1,
        )
        signatures, table = test()

    # table: {"System": [...], <metric name>: [baseline Result, system Results...]}
    metric_name = next(k for k in table if k != "System")
    return metric_name, table[metric_name], str(signatures[metric_name])


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def format_report(scores: list[Score]) -> str:
    """Render scores, one per line: ``"BLEU = 34.12 (signature) detail"``.

    The detail part is omitted when empty. No trailing newline.
    """
    lines = []
    for s in scores:
        line = f"{s.name} = {s.score:.2f} ({s.signature})"
        if s.detail:
            line += f" {s.detail}"
        lines.append(line)
    return "\n".join(lines)
