"""structnmt sweep-plot: points from the rows a pattern matches, references as lines, errors
that name what the csv has."""

from __future__ import annotations

import csv

import pytest

from structnmt.analysis.sweep import plot_sweep, read_rows, sweep_points
from structnmt.cli import main
from structnmt.errors import UserError


def write_csv(path, rows):
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["system", "bleu", "bleu_mean", "bleu_std", "seed"])  # as the runner writes
        w.writeheader()
        for r in rows:
            w.writerow({("system" if k == "System" else k): v for k, v in r.items()})
    return path


ROWS = [
    {"System": "Transformer", "bleu": "25.0", "bleu_mean": "25.0", "bleu_std": "0.5", "seed": "1"},
    {"System": "dynamic gate", "bleu": "27.0", "bleu_mean": "26.5", "bleu_std": "0.4", "seed": "1"},
    {"System": "fixed gate 0.3", "bleu": "26.0", "bleu_mean": "26.0", "bleu_std": "0.3", "seed": "1"},
    {"System": "fixed gate 0.1", "bleu": "24.0", "bleu_mean": "24.0", "bleu_std": "0.2", "seed": "1"},
    {"System": "fixed gate 0.1", "bleu": "24.4", "bleu_mean": "24.0", "bleu_std": "0.2", "seed": "2"},
]


def test_points_sorted_by_x_one_per_system_and_references(tmp_path):
    rows = read_rows(write_csv(tmp_path / "r.csv", ROWS))
    pts, refs = sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", ["dynamic gate", "Transformer"])
    assert [(x, y) for x, y, _, _ in pts] == [(0.1, 24.0), (0.3, 26.0)]  # first seed's row per system
    assert refs == [("dynamic gate", 27.0, 0.0), ("Transformer", 25.0, 0.0)]
    pts, refs = sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", ["dynamic gate"], column="bleu_mean")
    assert [(x, y, e) for x, y, e, _ in pts] == [(0.1, 24.0, 0.2), (0.3, 26.0, 0.3)]
    assert refs == [("dynamic gate", 26.5, 0.4)]


def test_errors_name_what_the_csv_has(tmp_path):
    rows = read_rows(write_csv(tmp_path / "r.csv", ROWS))
    with pytest.raises(UserError, match="the rows are: Transformer, dynamic gate"):
        sweep_points(rows, r"k = (?P<x>\d+)", [])
    with pytest.raises(UserError, match="no row 'LPEA'"):
        sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", ["LPEA"])
    with pytest.raises(UserError, match="named group"):
        sweep_points(rows, r"fixed gate ([0-9.]+)", [])
    with pytest.raises(UserError, match="no column 'chrf'"):
        sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", [], column="chrf")
    with pytest.raises(UserError, match="no such results file"):
        read_rows(tmp_path / "missing.csv")
    with pytest.raises(UserError, match=r"is a directory; give the results file in it \(.*results\.csv\)"):
        read_rows(tmp_path)
    # a file cut short in its last row: the line and the field count, not a row of None values
    lines = (tmp_path / "r.csv").read_text().splitlines()
    (tmp_path / "cut.csv").write_text("\n".join(lines[:-1] + [",".join(lines[-1].split(",")[:2])]))
    with pytest.raises(UserError, match=r"cut\.csv line 6: 2 fields where the header has 5; the file is cut short"):
        read_rows(tmp_path / "cut.csv")
    # --where names the column as the file does ('system'), though it is read as 'System'
    pts, _ = sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", [], where={"system": "fixed gate 0.3"})
    assert [(x, y) for x, y, _, _ in pts] == [(0.3, 26.0)]


def test_cli_writes_the_png_and_its_numbers(tmp_path):
    path = write_csv(tmp_path / "r.csv", ROWS)
    out = tmp_path / "fig" / "fig4.png"
    assert main(["sweep-plot", str(path), "--pattern", r"fixed gate (?P<x>[0-9.]+)", "--reference", "dynamic gate",
                 "--xlabel", "fixed gate", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = out.with_suffix(".md").read_text()
    assert "| 0.1 | fixed gate 0.1 | 24.00 |" in md and "| — | dynamic gate (reference) | 27.00 |" in md
    written = plot_sweep(path, r"fixed gate (?P<x>[0-9.]+)", tmp_path / "b.png", column="bleu_mean")
    assert "± 0.20" in written[1].read_text()
    # run again: its own files are replaced; a results.md it did not write (an experiment's report) is not
    assert main(["sweep-plot", str(path), "--pattern", r"fixed gate (?P<x>[0-9.]+)", "--out", str(out)]) == 0
    (tmp_path / "results.md").write_text("the experiment's report")
    assert main(["sweep-plot", str(path), "--pattern", r"fixed gate (?P<x>[0-9.]+)",
                 "--out", str(tmp_path / "results.png")]) == 2
    assert (tmp_path / "results.md").read_text() == "the experiment's report"
    assert not (tmp_path / "results.png").exists()


def test_where_selects_one_split_and_std_columns_give_error_bars(tmp_path):
    path = tmp_path / "generalization.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["System", "split", "agreement", "agreement_std"])
        w.writeheader()
        for name, a in (("dynamic gate", 60.0), ("fixed gate 0.1", 45.0), ("fixed gate 0.3", 58.0)):
            w.writerow({"System": name, "split": "iid", "agreement": "99.0", "agreement_std": "0.1"})
            w.writerow({"System": name, "split": "attraction4", "agreement": str(a), "agreement_std": "2.0"})
    rows = read_rows(path)
    pts, refs = sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", ["dynamic gate"], column="agreement",
                             where={"split": "attraction4"})
    assert [(x, y, e) for x, y, e, _ in pts] == [(0.1, 45.0, 2.0), (0.3, 58.0, 2.0)]
    assert refs == [("dynamic gate", 60.0, 2.0)]
    with pytest.raises(UserError, match="no row has split=depth3; its values: attraction4, iid"):
        sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", [], column="agreement", where={"split": "depth3"})
    out = tmp_path / "a4.png"
    assert main(["sweep-plot", str(path), "--pattern", r"fixed gate (?P<x>[0-9.]+)", "--column", "agreement",
                 "--where", "split=attraction4", "--out", str(out)]) == 0
    assert "| 0.1 | fixed gate 0.1 | 45.00 ± 2.00 |" in out.with_suffix(".md").read_text()
    assert main(["sweep-plot", str(path), "--pattern", "x(?P<x>1)", "--where", "split", "--out", str(out)]) != 0
    # without --where, two splits are not silently reduced to the first one's rows
    with pytest.raises(UserError, match=r"hold 2 splits \(attraction4, iid\); choose one with --where split="):
        sweep_points(rows, r"fixed gate (?P<x>[0-9.]+)", [], column="agreement")
    out2 = tmp_path / "both.png"
    assert main(["sweep-plot", str(path), "--pattern", r"fixed gate (?P<x>[0-9.]+)", "--column", "agreement",
                 "--out", str(out2)]) == 2  # through the command line: refused, nothing drawn
    assert not out2.exists()


def test_a_cell_without_a_number_is_one_sentence_naming_file_row_split_and_column(tmp_path):
    from structnmt.analysis.sweep import csv_number

    row = {"System": "LPEA", "split": "attraction4", "bleu": "n/a"}
    assert csv_number({"System": "T", "bleu": "36.5"}, "bleu", "r.csv") == 36.5
    with pytest.raises(UserError, match=r"^r\.csv: row 'LPEA' \(attraction4\) has no number in column 'bleu' "
                                        r"\('n/a'\)\. Give a grid's csv\.$"):
        csv_number(row, "bleu", "r.csv", "Give a grid's csv.")
    with pytest.raises(UserError, match=r"^r\.csv: no column 'chrf'; columns: System, split, bleu\.$"):
        csv_number(row, "chrf", "r.csv")
