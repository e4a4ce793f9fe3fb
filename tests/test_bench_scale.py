"""benchmarks/bench_scale.py's arithmetic and its /proc readings (the benchmark itself is run by hand)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scale  # noqa: E402


def test_fit_extrapolates_a_growing_cost_and_keeps_a_flat_one():
    sizes = [30_000, 100_000, 300_000]
    grow = bench_scale.fit(sizes, [2.0 + 0.001 * n for n in sizes])
    assert grow["exponent"] == pytest.approx(0.98, abs=0.03) and not grow["flat"]
    assert grow["at_4.5M"] == pytest.approx(2.0 + 0.001 * 4_500_000)
    flat = bench_scale.fit(sizes, [500.0, 510.0, 505.0])
    assert flat["flat"] and flat["at_4.5M"] == 510.0 and abs(flat["exponent"]) < 0.05


def test_the_process_tree_and_its_memory_are_read_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import sys; x = b\"\\1\" * (64 << 20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        # the child's allocation shows once it is made: read until it does (no clock involved)
        while bench_scale._status(child.pid)[0] < 64 << 10:
            assert child.poll() is None
        assert child.pid in bench_scale._tree(os.getpid())
        anon, file = bench_scale._status(child.pid)
        assert anon >= 64 << 10 and file > 0
    finally:
        child.communicate(b"")
    assert bench_scale._status(child.pid) == (0, 0)  # gone
