"""How many seeds a question needs: ``structnmt plan-seeds RESULTS --delta 0.5``.

Reads an experiment's ``results.csv`` (or the directory holding it) and, for every row tested against
the baseline on every split, gives the row's minimal detectable effect with the seeds it has and the
seeds per system (the same number for the row and the baseline) at which the seed-aware test would
detect a true difference of ``--delta`` with probability ``--power`` at level ``--alpha``
(:mod:`structnmt.evaluate.power`). The variances are the ones the report's test estimated: the row's
and the baseline's seed variances (their ``*_std`` columns of the tested metric) and the test-set part
(``sentence_se``). An estimate from 3 seeds is itself uncertain (a 3-seed standard deviation can be off
by a factor of two), so a plan from 3 seeds is a first plan: rerun it once more seeds are in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..evaluate.power import VarianceParts, minimal_detectable_effect, seeds_needed
from .deltas import METRIC_NAMES
from .sweep import csv_number, read_rows

_HINT = "plan-seeds reads the results.csv of an experiment with at least 2 seeds per row."


@dataclass(frozen=True)
class PlanRow:
    """One tested row of one split: what it has, and what ``delta`` would need."""

    split: str
    system: str
    n_seeds: int
    baseline_n_seeds: int
    delta: float  # the observed difference of the seed means
    p_value: float | None
    mde: float | None  # with the seeds it has; None with fewer than 2 seeds on a side
    seeds: int | None  # per system for the planned difference; None: more than max_seeds
    note: str = ""


def _results_csv(path: str | Path) -> Path:
    p = Path(path)
    return p / "results.csv" if p.is_dir() else p


def plan_seeds(path: str | Path, delta: float, *, alpha: float = 0.05, target: float = 0.8,
               max_seeds: int = 100, test_scale: float = 1.0) -> tuple[str, list[PlanRow]]:
    """(the metric's name, one :class:`PlanRow` per tested row and split) of one runner's results.csv.

    ``test_scale``: plan as if each test set were this many times as large (2: two test sets of the same
    kind joined); the test-set part of the variance shrinks by that factor (a variance over resampled
    sentences is inversely proportional to their number)."""
    if not test_scale > 0:
        raise UserError(f"--test-scale {test_scale:g}: give a factor above 0, e.g. 2 for two test sets joined.")
    if not delta > 0:
        raise UserError(f"--delta {delta:g}: give the difference to resolve as a number above 0, e.g. --delta 0.5 "
                        "(a difference in either direction is tested).")
    if not 0 < alpha < target < 1:
        raise UserError(f"--alpha {alpha:g} and --power {target:g}: give 0 < alpha < power < 1, e.g. --alpha 0.05 "
                        "--power 0.8.")
    if max_seeds < 2:
        raise UserError(f"--max-seeds {max_seeds}: give 2 or more.")
    p = _results_csv(path)
    rows = read_rows(p)
    if "sentence_se" not in rows[0] or "baseline" not in rows[0]:
        raise UserError(f"{p}: not the runner's results.csv (no 'sentence_se' or 'baseline' column). {_HINT}")
    std = "bleu_std"  # the report's std of the metric it tested (bleu_std holds it whatever the metric)
    out = []
    for split in dict.fromkeys(r.get("split", "") for r in rows):
        in_split = [r for r in rows if r.get("split", "") == split]
        bases = [r for r in in_split if r["baseline"] == "True"]
        if len(bases) != 1:
            raise UserError(f"{p}: split '{split}' has {len(bases)} baseline rows; plan-seeds reads a grid with one.")
        base = bases[0]
        nb = int(csv_number(base, "n_seeds", p, _HINT))
        for r in in_split:
            if r is base:
                continue
            out.append(_plan_row(r, base, nb, split, std, p, delta, alpha, target, max_seeds, test_scale))
    if not any(r.mde is not None for r in out):
        raise UserError(f"{p}: no row has 2 or more seeds on both sides; the seed variance needs >= 2 seeds. Train "
                        "more seeds (grid key seeds: [1, 2, 3]) and write the report again.")
    return METRIC_NAMES.get(rows[0].get("metric", ""), rows[0].get("metric", "")), out


def _plan_row(r: dict, base: dict, nb: int, split: str, std: str, p: Path, delta: float, alpha: float,
              target: float, max_seeds: int, test_scale: float) -> PlanRow:
    n = int(csv_number(r, "n_seeds", p, _HINT))
    observed = csv_number(r, "delta", p, _HINT)
    if n < 2 or nb < 2 or not r.get("sentence_se"):
        return PlanRow(split, r["System"], n, nb, observed, None, None, None,
                       "the seed variance needs >= 2 seeds on each side")
    v_sent = csv_number(r, "sentence_se", p, _HINT) ** 2 / test_scale
    parts = VarianceParts(csv_number(r, std, p, _HINT) ** 2, csv_number(base, std, p, _HINT) ** 2, v_sent)
    pv = csv_number(r, "p_value", p, _HINT)
    mde = minimal_detectable_effect(parts, n, nb, alpha=alpha, target=target)
    need = seeds_needed(delta, parts, alpha=alpha, target=target, max_seeds=max_seeds)
    note = ""
    if need is None:
        # with unlimited seeds only the test-set part is left: Δ / sqrt(v_sent) must reach z_(1-α/2) + z_power
        from scipy.stats import norm

        floor = (norm.ppf(1 - alpha / 2) + norm.ppf(target)) * math.sqrt(v_sent)
        note = (f"more than {max_seeds}: with any number of seeds the test set alone resolves {floor:.2f}; a test "
                f"set about {(floor / delta) ** 2 * test_scale:.1f} times this one's size would resolve {delta:g}")
    return PlanRow(split, r["System"], n, nb, observed, pv, mde, need, note)


def format_plan(metric: str, rows: list[PlanRow], delta: float, alpha: float, target: float) -> str:
    """A Markdown table of :func:`plan_seeds`' rows."""
    head = (f"| split | system | seeds (row / baseline) | Δ {metric} | p | MDE | seeds per system for ±{delta:g} |\n"
            "|---|---|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        p = "—" if r.p_value is None else (f"{r.p_value:.3f}" if r.p_value >= 0.001 else "< 0.001")
        mde = "—" if r.mde is None else f"{r.mde:.2f}"
        need = str(r.seeds) if r.seeds is not None else "—"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.split} | {r.system} | {r.n_seeds} / {r.baseline_n_seeds} | {r.delta:+.2f} | {p} | {mde} | "
                     f"{need}{note} |")
    lines.append("")
    lines.append(f"MDE: the smallest |Δ| the seed-aware test flags at p < {alpha:g} with probability {target:g} with "
                 f"the seeds a row has; the last column: the seeds per system (row and baseline alike) at which a true "
                 f"difference of {delta:g} is flagged with that probability, from the variances the report "
                 "estimated (structnmt.evaluate.power).")
    return "\n".join(lines)
