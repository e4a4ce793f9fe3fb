"""The learning-curve picture's validation zoom keeps every run's last point in view."""

from __future__ import annotations

import json

import pytest

from structnmt.analysis.curves import plot_curves, validation_ylim


def test_zoom_on_converged_runs_keeps_every_last_point():
    # three converged runs after a high first point: zoom to 0.6 bits above the lowest
    runs = [[9.0, 4.2, 4.0], [8.5, 4.3, 4.1], [9.2, 4.4, 4.3]]
    lo, hi = validation_ylim(runs)
    assert lo == pytest.approx(3.98) and hi == pytest.approx(4.6)
    # a run with two points that ends far above the rest stays visible (it used to be cut off)
    runs.append([6.0, 5.5])
    lo, hi = validation_ylim(runs)
    assert lo == pytest.approx(3.98) and hi == pytest.approx(5.55) and hi >= 5.5
    assert validation_ylim([[4.0, 3.9], [4.1, 4.2]]) is None  # already within 0.6 bits: no zoom
    assert validation_ylim([[], []]) is None


def test_plot_curves_writes_a_png(tmp_path):
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in [
        {"kind": "train", "step": 1, "loss": 9.0}, {"kind": "valid", "step": 1, "loss": 8.0},
        {"kind": "train", "step": 2, "loss": 5.0}, {"kind": "valid", "step": 2, "loss": 4.0}]))
    out = tmp_path / "c.png"
    plot_curves([("run", m, "C0", 1.0)], "t", out)
    assert out.read_bytes()[:4] == b"\x89PNG"
