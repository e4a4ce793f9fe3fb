"""A score against a swept setting, from an experiment's ``results.csv``: RHE's Fig. 4
(fixed gates 0.1..0.5 against the dynamic gate) and Table 3 (the LPEA clipping distance k)
are such sweeps.

``structnmt sweep-plot RESULTS.csv --pattern "fixed gate (?P<x>[0-9.]+)" --reference
"dynamic gate" --reference Transformer --xlabel "fixed gate" --out fig4.png``

Rows whose ``System`` name matches ``--pattern`` (a Python regular expression with a named
group ``x``, a number) become the points of the curve, in the order of x; every
``--reference`` row is a horizontal line. The y value is a column of the csv (``bleu`` by
default; ``bleu_mean`` with an error bar of ``bleu_std`` when the grid had several seeds).
``--where split=attraction4`` keeps the rows of one split of a synthetic benchmark's
``generalization.csv`` (columns bleu, exact, agreement, verb_final and their ``_std``; a
column with a ``_std`` twin gets error bars). A row named by ``--reference`` or matched by
nothing is an error naming what the csv has.
Writes the PNG and a markdown table of the same numbers next to it (``.md``).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ..errors import UserError
from ..fileio.files import OutputDir


def read_rows(path: str | Path) -> list[dict[str, str]]:
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a directory; give the results file in it ({p / 'results.csv'}).")
    if not p.is_file():
        raise UserError(f"{p}: no such results file; the experiment runner writes <out>/results.csv.")
    try:
        with p.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = []
            for row in reader:
                if None in row or None in row.values():  # fewer or more fields than the header names
                    fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None, []))
                    raise UserError(f"{p} line {reader.line_num}: {fields} fields where the header has "
                                    f"{len(reader.fieldnames)}; the file is cut short or edited: write it again "
                                    "(`structnmt experiment GRID --out DIR --report-only`).")
                rows.append(row)
    except (UnicodeDecodeError, csv.Error) as err:
        raise UserError(f"{p}: not a CSV text file ({err.__class__.__name__}); give the results.csv or "
                        "generalization.csv an experiment wrote.") from None
    if rows and "system" in rows[0] and "System" not in rows[0]:  # results.csv names it in lower case
        rows = [{("System" if k == "system" else k): v for k, v in r.items()} for r in rows]
    if not rows or "System" not in rows[0]:
        raise UserError(f"{p}: not an experiment results.csv or generalization.csv (no 'system' column).")
    return rows


def path_is_results(rows: list[dict[str, str]]) -> bool:
    """True for the runner's results.csv (one row per seed, with a 'seed' column)."""
    return bool(rows) and "seed" in rows[0] and "bleu_mean" in rows[0]


def csv_number(row: dict[str, str], column: str, path, hint: str = "") -> float:
    """The number in ``column`` of one results.csv row, or one sentence naming the file, the row (and its split)
    and the column; ``hint`` (a sentence) says which csv the command reads."""
    if column not in row:
        raise UserError(f"{path}: no column '{column}'; columns: {', '.join(row)}.{hint and ' ' + hint}")
    try:
        return float(row[column])
    except ValueError:
        split = f" ({row['split']})" if row.get("split") else ""
        raise UserError(f"{path}: row '{row['System']}'{split} has no number in column '{column}' "
                        f"({row[column]!r}).{hint and ' ' + hint}") from None


def sweep_points(rows: list[dict[str, str]], pattern: str, references: list[str], column: str = "bleu",
                 path: str | Path = "results.csv", where: dict[str, str] | None = None
                 ) -> tuple[list[tuple[float, float, float, str]], list[tuple[str, float, float]]]:
    """((x, y, err, name) sorted by x, [(reference name, y, err)]) from the csv rows; one row
    per system (the runner writes one per seed: the mean columns are the same in each).
    ``where``: keep only the rows whose columns have these values (e.g. ``split=attraction4``
    in a ``generalization.csv``)."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise UserError(f"--pattern {pattern!r} is not a regular expression: {e}.") from None
    if "x" not in rx.groupindex:
        raise UserError(f"--pattern {pattern!r} needs a named group (?P<x>...) holding the swept number.")
    for key, value in (where or {}).items():
        key = "System" if key == "system" else key  # as the file names it (read_rows reads it as System)
        if rows and key not in rows[0]:
            raise UserError(f"{path}: no column '{key}' for --where; columns: {', '.join(rows[0])}.")
        kept = [r for r in rows if r[key] == value]
        if not kept:
            raise UserError(f"{path}: no row has {key}={value}; its values: {', '.join(sorted({r[key] for r in rows}))}.")
        rows = kept
    splits = sorted({r["split"] for r in rows if r.get("split")})
    if len(splits) > 1:  # one point per system: which split's would be a silent choice
        raise UserError(f"{path}: its rows hold {len(splits)} splits ({', '.join(splits)}); choose one with --where "
                        f"split={splits[0]} (repeat the plot for the others).")
    # results.csv: "bleu" is seed 1's score, "bleu_mean" has its std in "bleu_std";
    # generalization.csv: every mean column has a "<column>_std" twin
    err_col = ("bleu_std" if column == "bleu_mean" else None if path_is_results(rows) else
               f"{column}_std" if rows and f"{column}_std" in rows[0] else None)
    seen: dict[str, dict[str, str]] = {}
    for r in rows:
        seen.setdefault(r["System"], r)
    points = []
    for name, r in seen.items():
        m = rx.fullmatch(name)
        if m:
            try:
                x = float(m.group("x"))
            except ValueError:
                raise UserError(f"--pattern: row '{name}' matched but its x {m.group('x')!r} is not a number.") from None
            err = csv_number(r, err_col, path) if err_col and r.get(err_col) else 0.0
            points.append((x, csv_number(r, column, path), err, name))
    if not points:
        raise UserError(f"{path}: no row matches --pattern {pattern!r}; the rows are: {', '.join(seen)}.")
    refs = []
    for name in references:
        if name not in seen:
            raise UserError(f"{path}: no row '{name}' for --reference; the rows are: {', '.join(seen)}.")
        err = csv_number(seen[name], err_col, path) if err_col and seen[name].get(err_col) else 0.0
        refs.append((name, csv_number(seen[name], column, path), err))
    return sorted(points), refs


#: picture formats ``sweep-plot --out`` writes, by the name's suffix
PICTURE_SUFFIXES = (".png", ".pdf", ".svg")


def plot_sweep(results: str | Path, pattern: str, out: str | Path, references: list[str] | None = None,
               column: str = "bleu", xlabel: str = "x", title: str = "", where: dict[str, str] | None = None
               ) -> list[Path]:
    """Write ``out`` (PNG) and ``out`` with ``.md`` (the numbers); returns both paths."""
    from matplotlib.figure import Figure

    points, refs = sweep_points(read_rows(results), pattern, references or [], column, results, where)

    out = Path(out)
    if out.suffix.lower() not in PICTURE_SUFFIXES:
        raise UserError(f"--out {out}: the picture's name must end in {', '.join(PICTURE_SUFFIXES)} (its format), "
                        f"e.g. {out.with_suffix('.png')}.")
    table = out.with_suffix(".md")
    target = OutputDir(out.parent, "sweep-plot", expect=(out.name, table.name))  # checked before drawing
    fig = Figure(figsize=(5.2, 3.6))
    ax = fig.subplots()
    xs, ys, es = [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]
    if any(es):
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color="tab:blue", label=xlabel)
    else:
        ax.plot(xs, ys, marker="o", color="tab:blue", label=xlabel)
    for x, y in zip(xs, ys):
        ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    styles = ["--", ":", "-.", (0, (5, 1))]
    colors = ["tab:red", "tab:gray", "tab:green", "tab:purple"]
    for i, (name, y, _) in enumerate(refs):
        ax.axhline(y, linestyle=styles[i % len(styles)], color=colors[i % len(colors)], label=f"{name} ({y:.2f})")
    ax.margins(y=0.15)  # room for the value labels and the reference lines at the edges
    ax.set_xlabel(xlabel)
    ax.set_ylabel(column)
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    target.write_with(out.name, lambda p: fig.savefig(p, dpi=130))
    md = [f"| {xlabel} | system | {column} |", "|---:|---|---:|"]
    md += [f"| {x:g} | {name} | {y:.2f}" + (f" ± {e:.2f}" if e else "") + " |" for x, y, e, name in points]
    md += [f"| — | {name} (reference) | {y:.2f}" + (f" ± {e:.2f}" if e else "") + " |" for name, y, e in refs]
    target.write_text(table.name, f"From `{results}`.\n\n" + "\n".join(md) + "\n")
    return [out, table]
