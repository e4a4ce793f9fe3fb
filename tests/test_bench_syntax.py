"""benchmarks/bench_syntax.py's table cells: an extra cost is a difference of two timings, so one below
the timing noise can come out negative; it must read as about zero, never as a saving."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_syntax.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_syntax_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_cost_is_shown_in_ms_and_as_a_share_of_a_step():
    bench = load_bench()
    assert bench._cost(12.5, 250.0) == "12.5 ms | 5.00 %"


def test_a_negative_or_zero_difference_of_timings_reads_as_about_zero():
    bench = load_bench()
    for ms in (-0.3, 0.0):
        cells = bench._cost(ms, 250.0)
        assert cells == "≈ 0 (below the timing noise) | ≈ 0 %"
        assert "-" not in cells
