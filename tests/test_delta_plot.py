"""structnmt delta-plot: each row's Δ from the baseline in several runner reports, with the seed-aware
test's 95 % interval, on hand-made results.csv files whose numbers are known."""

from __future__ import annotations

import csv
import math

import pytest
from scipy import stats

from structnmt.analysis.deltas import plot_deltas, read_deltas
from structnmt.cli import main as cli_main
from structnmt.errors import UserError

COLUMNS = ["split", "system", "baseline", "metric", "bleu", "delta", "p_value", "bleu_mean", "seed_se",
           "sentence_se", "df", "seed"]


def write_report(path, rows, metric="bleu_lc_tok"):
    """rows: (split, system, delta, seed_se, sentence_se, df); the first system of each split is the baseline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for split, system, delta, seed_se, sentence_se, df in rows:
            base = seed_se is None
            se = math.hypot(seed_se or 0, sentence_se or 0)
            p = "" if base else 2 * stats.t.sf(abs(delta) / se, df)
            w.writerow({"split": split, "system": system, "baseline": str(base), "metric": metric, "bleu": 30 + delta,
                        "delta": delta, "p_value": p, "bleu_mean": 30 + delta, "seed_se": "" if base else seed_se,
                        "sentence_se": "" if base else sentence_se, "df": "" if base else df, "seed": 1})
    return path


def test_the_interval_is_the_seed_aware_tests_and_excludes_zero_exactly_when_p_is_below_005(tmp_path):
    rows = [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.3, 0.4, 10.0),
            ("test", "B", 0.9, 0.3, 0.4, 10.0), ("test", "C", -2.0, 0.6, 0.8, math.inf),
            ("test1", "T", 0.0, None, None, None), ("test1", "A", 1.2, 0.3, 0.4, 10.0)]
    baseline, metric, deltas = read_deltas(write_report(tmp_path / "r.csv", rows))
    assert (baseline, metric) == ("T", "BLEU (lc,tok)")
    a = deltas["test"]["A"]
    assert (a.low, a.high) == pytest.approx((1.0 - 2.228139 * 0.5, 1.0 + 2.228139 * 0.5), abs=1e-5)
    c = deltas["test"]["C"]  # infinite degrees of freedom: the normal quantile
    assert (c.low, c.high) == pytest.approx((-2.0 - 1.959964, -2.0 + 1.959964), abs=1e-5)
    for d in (*deltas["test"].values(), *deltas["test1"].values()):
        assert (d.low > 0 or d.high < 0) == (d.p_value < 0.05)
    assert deltas["test"]["B"].low < 0 < deltas["test1"]["A"].low  # one on each side of p = 0.05
    assert set(deltas) == {"test", "test1"} and "T" not in deltas["test"]


def test_two_reports_drawn_and_tabled_side_by_side(tmp_path):
    short = write_report(tmp_path / "short" / "results.csv",
                         [("test", "T", 0.0, None, None, None), ("test", "A", 1.8, 0.2, 0.3, 8.0),
                          ("test", "B", 0.5, 0.2, 0.3, 8.0)])
    long = write_report(tmp_path / "long" / "results.csv",
                        [("test", "T", 0.0, None, None, None), ("test", "A", -0.2, 0.2, 0.3, 8.0)])
    out = tmp_path / "fig" / "deltas.png"
    written = plot_deltas([f"2k={short}", str(long)], out, split_names={"test": "test_2016_flickr"})
    assert written == [out, out.with_suffix(".md")]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "| split | system | 2k: Δ [95 % interval], p | long: Δ [95 % interval], p |" in md
    assert "| test_2016_flickr | A | +1.80 [" in md and "| -0.20 [" in md
    assert "| test_2016_flickr | B | +0.50 [" in md and md.rstrip().endswith("| — |")
    plot_deltas([str(short)], out)  # its own earlier files are replaced


def test_bad_input_is_one_sentence_naming_the_file(tmp_path):
    one_seed = tmp_path / "one.csv"
    write_report(one_seed, [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.3, 0.4, 10.0)])
    text = one_seed.read_text(encoding="utf-8").replace(",0.3,0.4,10.0,", ",,,,")
    one_seed.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=r"one\.csv: row 'A' .* no number in column 'seed_se'.*at least 2 seeds"):
        read_deltas(one_seed)
    two_base = write_report(tmp_path / "two.csv", [("test", "T", 0.0, None, None, None),
                                                   ("test", "U", 0.0, None, None, None)])
    with pytest.raises(UserError, match=r"two\.csv: 2 baseline rows"):
        read_deltas(two_base)
    good = write_report(tmp_path / "a.csv", [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.3, 0.4, 9.0)])
    chrf = write_report(tmp_path / "b.csv", [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.3, 0.4, 9.0)],
                        metric="chrf")
    with pytest.raises(UserError, match="different metrics"):
        plot_deltas([str(good), str(chrf)], tmp_path / "x.png")
    with pytest.raises(UserError, match=r"must end in \.png"):
        plot_deltas([str(good)], tmp_path / "x.txt")
    (tmp_path / "mine.png").write_bytes(b"a user's picture")
    with pytest.raises(UserError, match="was not written by a structnmt command"):
        plot_deltas([str(good)], tmp_path / "mine.png")
    assert (tmp_path / "mine.png").read_bytes() == b"a user's picture"


def test_the_command_line(tmp_path, capsys):
    good = write_report(tmp_path / "a.csv", [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.3, 0.4, 9.0)])
    assert cli_main(["delta-plot", str(good), "--split-name", "test", "--out", str(tmp_path / "d.png")]) != 0
    assert "--split-name test: use SPLIT=NAME" in capsys.readouterr().err
    assert cli_main(["delta-plot", f"A={good}", "--split-name", "test=t16", "--out", str(tmp_path / "d.png")]) == 0
    assert "| t16 | A | +1.00 [" in (tmp_path / "d.md").read_text(encoding="utf-8")


def test_p_values_below_0001_are_written_as_a_bound(tmp_path):
    r = write_report(tmp_path / "r.csv", [("test", "T", 0.0, None, None, None), ("test", "A", 3.0, 0.2, 0.2, 30.0),
                                          ("test", "B", 0.3, 0.2, 0.2, 30.0)])
    plot_deltas([str(r)], tmp_path / "d.png")
    md = (tmp_path / "d.md").read_text(encoding="utf-8")
    assert "| test | A | +3.00 [" in md and "], p < 0.001 |" in md
    assert "| test | B | +0.30 [" in md and "], p = 0.297 |" in md  # 2 t.sf(0.3 / 0.283, 30)


def test_a_row_whose_interval_is_far_wider_than_the_others_does_not_flatten_the_panel(tmp_path):
    """Two seeds that disagree wildly (one degree of freedom) give an interval of hundreds of points: the
    axis is scaled to the other rows, and that row's Δ and interval are written at its place."""
    from structnmt.analysis import deltas as mod

    rows = [("test", "T", 0.0, None, None, None), ("test", "A", 1.0, 0.2, 0.2, 8.0), ("test", "B", -0.5, 0.2, 0.2, 8.0),
            ("test", "C", 0.3, 0.2, 0.2, 8.0), ("test", "Wild", -20.0, 11.0, 0.5, 1.0)]
    baseline, metric, by_split = read_deltas(write_report(tmp_path / "r.csv", rows))
    fig = mod._figure([mod.Series("one", tmp_path / "r.csv", baseline, by_split)], ["test"], ["A", "B", "C", "Wild"],
                      "", metric)
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert by_split["test"]["Wild"].low < -100 and -3 < low < by_split["test"]["B"].low and 0 < high < 3
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["Δ -20.0 [-159.9, +119.9], off the scale"]  # ± t(0.975, 1) · hypot(11, 0.5) = ± 139.9
    ordinary = mod._figure([mod.Series("one", tmp_path / "r.csv", baseline, {"test": {k: v for k, v in by_split["test"].items()
                                                                           if k != "Wild"}})],
                           ["test"], ["A", "B", "C"], "", metric)
    assert not ordinary.axes[0].texts  # nothing clipped when every interval is of ordinary width
