"""How many seeds, and how large a test set, a question needs: ``structnmt plan-seeds RESULTS --delta 0.5``.

Reads an experiment's ``results.csv`` (or the directory holding it) and, for every row tested against
the baseline on every split, gives the row's minimal detectable effect (MDE) with the seeds it has, the
floor no number of seeds goes below, and the seeds per system (the same number for the row and the
baseline) at which the seed-aware test would detect a true difference of ``--delta`` with probability
``--power`` at level ``--alpha`` (:mod:`structnmt.evaluate.power`). ``--joint`` adds, per row, the MDE
over seeds × test-set size: how many seeds, how many test sentences.

The model (the decomposed test, :mod:`structnmt.evaluate.seeds`): with :math:`k` seeds a side and a test
set :math:`c` times the measured one (``--test-scale``),

.. math::

    V(k, c) = \\frac{\\sigma^2_{seed,A} + \\sigma^2_{seed,B}}{k} + \\frac{\\tau_A^2 + \\tau_B^2}{k\\,c}
        + \\frac{v_{sys}}{c},

fitted from the report's columns: :math:`\\tau` = ``interaction_sd`` / ``baseline_interaction_sd``, the
training noise :math:`\\sigma^2_{seed} = s^2 - \\tau^2` (``bleu_std`` squared less the interaction, at
least 0), :math:`v_{sys}` = ``sentence_se`` squared. The floor is :math:`(z_{1-\\alpha/2} + z_{power})
\\sqrt{v_{sys}/c}`; below it no number of seeds helps, above it a finite number does. A results.csv
written before the interaction was reported (no ``interaction_sd`` column) is read as the double-count
test read it: all of :math:`s^2` as training noise and ``sentence_se`` (which then holds the interaction
too) as the test-set part, a careful plan; write the report again (``structnmt experiment GRID
--report-only``) for the decomposed one. ``--seed-test double-count`` plans for that form of the test.

Everything beyond the seeds and the test set at hand is an extrapolation of this model from them, and
an estimate from 3 seeds is itself uncertain (a 3-seed standard deviation can be off by a factor of
two): a plan from 3 seeds is a first plan, to be made again once more seeds are in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..evaluate.power import NoiseComponents, mde_floor, plan_mde, seeds_for
from ..evaluate.seeds import seed_variance_read
from .deltas import METRIC_NAMES
from .sweep import csv_number, read_rows

_HINT = "plan-seeds reads the results.csv of an experiment with at least 2 seeds per row."
#: the seeds per system and test-set scales of the --joint table (the row's own seeds are added)
JOINT_SEEDS = (3, 5, 10, 20)
JOINT_SCALES = (1.0, 2.0, 4.0)


@dataclass(frozen=True)
class PlanRow:
    """One tested row of one split: what it has, and what ``delta`` would need."""

    split: str
    system: str
    n_seeds: int
    baseline_n_seeds: int
    delta: float  # the observed difference of the seed means
    p_value: float | None
    mde: float | None  # with the seeds it has, at the planned test scale; None with fewer than 2 seeds
    seeds: int | None  # per system for the planned difference; None: beyond the floor or max_seeds
    note: str = ""
    floor: float | None = None  # the MDE as the seeds grow without bound
    joint: dict = field(default_factory=dict)  # {(seeds, scale): MDE} with --joint; seeds 0 = the floor
    joint_seeds: dict = field(default_factory=dict)  # {scale: seeds for delta}


def _results_csv(path: str | Path) -> Path:
    p = Path(path)
    return p / "results.csv" if p.is_dir() else p


def _check_options(delta: float, alpha: float, target: float, max_seeds: int, test_scale: float,
                   method: str) -> None:
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
    if method not in ("decomposed", "double-count"):
        raise UserError(f"--seed-test {method}: give decomposed or double-count.")


def plan_seeds(path: str | Path, delta: float, *, alpha: float = 0.05, target: float = 0.8,
               max_seeds: int = 100000, test_scale: float = 1.0, method: str = "decomposed",
               joint: bool = False) -> tuple[str, list[PlanRow]]:
    """(the metric's name, one :class:`PlanRow` per tested row and split) of one runner's results.csv.

    ``test_scale``: plan as if each test set were this many times as large (2: two test sets of the same
    kind joined); ``method``: the form of the test planned for; ``joint``: also the MDE over
    :data:`JOINT_SEEDS` × :data:`JOINT_SCALES` (module docstring)."""
    _check_options(delta, alpha, target, max_seeds, test_scale, method)
    p = _results_csv(path)
    rows = read_rows(p)
    if "sentence_se" not in rows[0] or "baseline" not in rows[0]:
        raise UserError(f"{p}: not the runner's results.csv (no 'sentence_se' or 'baseline' column). {_HINT}")
    out = []
    for split in dict.fromkeys(r.get("split", "") for r in rows):
        in_split = [r for r in rows if r.get("split", "") == split]
        bases = [r for r in in_split if r["baseline"] == "True"]
        if len(bases) != 1:
            raise UserError(f"{p}: split '{split}' has {len(bases)} baseline rows; plan-seeds reads a grid with one.")
        base = bases[0]
        nb = int(csv_number(base, "n_seeds", p, _HINT))
        for r in in_split:
            if r is not base:
                out.append(_plan_row(r, base, nb, split, p, _Plan(delta, alpha, target, max_seeds, test_scale,
                                                                   method, joint)))
    if not any(r.mde is not None for r in out):
        raise UserError(f"{p}: no row has 2 or more seeds on both sides; the seed variance needs >= 2 seeds. Train "
                        "more seeds (grid key seeds: [1, 2, 3]) and write the report again.")
    return METRIC_NAMES.get(rows[0].get("metric", ""), rows[0].get("metric", "")), out


@dataclass(frozen=True)
class _Plan:
    delta: float
    alpha: float
    target: float
    max_seeds: int
    scale: float
    method: str
    joint: bool


def components(r: dict, base: dict, n: int, nb: int, p: Path, method: str) -> tuple[NoiseComponents, str]:
    """(the row's :class:`NoiseComponents`, a note on how they were read) from its results.csv columns.

    Decomposed: :meth:`NoiseComponents.from_test`. Double-count: the test-set part it read,
    :math:`v_{sent} = v_{sys} + \\tau_A^2/n_A + \\tau_B^2/n_B`, held as a systematic part (that form does
    not let the interaction shrink with the seeds), the seed variances whole."""
    std, bstd = csv_number(r, "bleu_std", p, _HINT), csv_number(base, "bleu_std", p, _HINT)
    se = csv_number(r, "sentence_se", p, _HINT)
    if not r.get("interaction_sd"):
        return (NoiseComponents(std ** 2, bstd ** 2, 0.0, 0.0, se ** 2),
                "no interaction_sd column (a report of the double-count test): its parts held as measured")
    tau, btau = csv_number(r, "interaction_sd", p, _HINT), csv_number(r, "baseline_interaction_sd", p, _HINT)
    written = r.get("seed_test") or "decomposed"
    v_sys = se ** 2 if written == "decomposed" else max(0.0, se ** 2 - tau ** 2 / n - btau ** 2 / nb)
    if method == "double-count":
        return NoiseComponents(std ** 2, bstd ** 2, 0.0, 0.0, v_sys + tau ** 2 / n + btau ** 2 / nb), ""
    return decomposed_components(std, bstd, tau, btau, v_sys ** 0.5, n, nb), ""


def decomposed_components(std: float, baseline_std: float, tau: float, baseline_tau: float, sentence_se: float,
                          n: int, n_baseline: int) -> NoiseComponents:
    """The :class:`NoiseComponents` of a decomposed seed-aware test's numbers (a results.csv row, or a
    :class:`structnmt.evaluate.seeds.SeedTest`'s ``std``, ``interaction_sd``, ``sentence_se`` and their
    baseline's): each side's seed variance as the test read it (a side of implausibly close seeds: its
    interaction, :func:`structnmt.evaluate.seeds.seed_variance_read`), split by
    :meth:`NoiseComponents.from_test`."""
    s2 = seed_variance_read(std ** 2, tau ** 2, n)
    bs2 = seed_variance_read(baseline_std ** 2, baseline_tau ** 2, n_baseline)
    return NoiseComponents.from_test(s2 ** 0.5, bs2 ** 0.5, tau, baseline_tau, sentence_se)


def _plan_row(r: dict, base: dict, nb: int, split: str, p: Path, plan: _Plan) -> PlanRow:
    n = int(csv_number(r, "n_seeds", p, _HINT))
    observed = csv_number(r, "delta", p, _HINT)
    if n < 2 or nb < 2 or not r.get("sentence_se"):
        return PlanRow(split, r["System"], n, nb, observed, None, None, None,
                       "the seed variance needs >= 2 seeds on each side")
    comp, note = components(r, base, n, nb, p, plan.method)
    kw = {"alpha": plan.alpha, "target": plan.target}
    pv = csv_number(r, "p_value", p, _HINT)
    mde = plan_mde(comp, n, plan.scale, n_baseline=nb, **kw)
    floor = mde_floor(comp, plan.scale, **kw)
    need = seeds_for(plan.delta, comp, plan.scale, max_seeds=plan.max_seeds, **kw)
    if need is None:
        bigger = (floor / plan.delta) ** 2 * plan.scale
        why = (f"with any number of seeds the test set alone resolves {floor:.2f}; a test set about {bigger:.1f} "
               f"times this one's size would resolve {plan.delta:g}" if plan.delta <= floor else
               f"more than {plan.max_seeds}")
        note = f"{why}; {note}" if note else why
    joint, joint_seeds = {}, {}
    if plan.joint:
        for c in sorted({*JOINT_SCALES, plan.scale}):
            for k in sorted({n, *JOINT_SEEDS}):
                joint[k, c] = plan_mde(comp, k, c, **kw)
            joint[0, c] = mde_floor(comp, c, **kw)
            joint_seeds[c] = seeds_for(plan.delta, comp, c, max_seeds=plan.max_seeds, **kw)
    return PlanRow(split, r["System"], n, nb, observed, pv, mde, need, note, floor, joint, joint_seeds)


def _joint_table(r: PlanRow, delta: float) -> list[str]:
    """The --joint table of one row: MDE over test-set scale (rows) × seeds per system (columns)."""
    seeds = sorted(k for k in {k for k, _ in r.joint} if k)
    lines = [f"{r.split} / {r.system}: MDE with k seeds per system on a test set c times this one",
             "", "| test set c | " + " | ".join(f"k = {k}" for k in seeds) + f" | k → ∞ (floor) | seeds for ±{delta:g} |",
             "|---:|" + "---:|" * (len(seeds) + 2)]
    for c in sorted({c for _, c in r.joint}):
        need = r.joint_seeds.get(c)
        lines.append(f"| {c:g} | " + " | ".join(f"{r.joint[k, c]:.2f}" for k in seeds)
                     + f" | {r.joint[0, c]:.2f} | {need if need is not None else '—'} |")
    return lines + [""]


def format_plan(metric: str, rows: list[PlanRow], delta: float, alpha: float, target: float,
                test_scale: float = 1.0) -> str:
    """A Markdown table of :func:`plan_seeds`' rows (and the --joint tables, where computed)."""
    at = "" if test_scale == 1 else f" (test set × {test_scale:g})"
    head = (f"| split | system | seeds (row / baseline) | Δ {metric} | p | MDE{at} | floor (k → ∞) | "
            f"seeds per system for ±{delta:g} |\n|---|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        p = "—" if r.p_value is None else (f"{r.p_value:.3f}" if r.p_value >= 0.001 else "< 0.001")
        mde = "—" if r.mde is None else f"{r.mde:.2f}"
        floor = "—" if r.floor is None else f"{r.floor:.2f}"
        need = str(r.seeds) if r.seeds is not None else "—"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.split} | {r.system} | {r.n_seeds} / {r.baseline_n_seeds} | {r.delta:+.2f} | {p} | {mde} | "
                     f"{floor} | {need}{note} |")
    lines.append("")
    lines.append(f"MDE: the smallest |Δ| the seed-aware test flags at p < {alpha:g} with probability {target:g} with "
                 f"the seeds a row has; floor: the same as the seeds grow without bound (the systematic test-set part "
                 f"alone); the last column: the seeds per system (row and baseline alike) at which a true difference "
                 f"of {delta:g} is flagged with that probability (structnmt.evaluate.power). Each part of the variance "
                 "shrinks with what it averages over: training noise with the seeds, the seed × sentence interaction "
                 "with seeds and test sentences, the systematic test-set part with test sentences. Fitted from the "
                 "seeds and the test set at hand: every other number of seeds or test size is an extrapolation.")
    for r in rows:
        if r.joint:
            lines += [""] + _joint_table(r, delta)
    return "\n".join(lines).rstrip("\n")
