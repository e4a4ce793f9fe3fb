"""benchmarks/bench_fairseq.py's report, built from made-up measurements whose table is known (the
benchmark itself needs fairseq and minutes of training; its report must not break unseen)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fairseq.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_fairseq_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measured(bench, **changes):
    values = dict(
        threads=2, processes=2, fs_rates=[1000.0, 1200.0], sn_rates=[1500.0, 1900.0], fs_mp=[900.0, 1100.0],
        sn_mp=[2000.0, 2200.0], fs_dec=100.0, fs_tokens=12100,
        sn_dec={"": (150.0, 12000.0), " translate's default (workers chosen by itself)": (205.0, 12000.0),
                " --workers 2 (1 thread each)": (210.0, 12000.0),
                " --workers 2 --dtype int8": (250.0, 11900.0), " --dtype int8": (180.0, 11950.0)},
        modes={"": (2, "float32", 1), " translate's default (workers chosen by itself)": (2, "float32", 0),
               " --workers 2 (1 thread each)": (1, "float32", 2),
               " --workers 2 --dtype int8": (1, "int8", 2), " --dtype int8": (2, "int8", 1)},
        ct2_dec={"none": 200.0, "int8": 260.0})
    values.update(changes)
    return bench.Measured(**values)


def test_the_report_of_a_full_run_training_and_decoding():
    bench = load_bench()
    lines = bench.report_lines(measured(bench))
    assert lines[:2] == ["| measure | fairseq 0.12 | structnmt | ratio structnmt / fairseq |", "|---|---|---|---|"]
    # the ratio is the median of the rounds' own ratios (1.50 and 1.58), with their range
    assert "| training target tok/s (median), 1 process x 2 threads | 1100 | 1700 | 1.54 (rounds 1.50-1.58) |" in lines
    assert ("| training target tok/s (median), 2 processes x 1 thread, 2048 tokens each | 1000 | 2100 | "
            "2.11 (rounds 2.00-2.22) |") in lines
    assert "| training: structnmt 2 processes x 1 thread against fairseq 1 process x 2 threads | 1100 | 2100 | 1.91 |" \
        in lines
    assert "| decoding sentences/s (beam 5, batch 128) | 100.0 | 150.0 | 1.50 |" in lines
    assert "| decoding sentences/s, structnmt --workers 2 (1 thread each) | 100.0 | 210.0 | 2.10 |" in lines
    assert "| decoding sentences/s, structnmt's CTranslate2 export (float32) | 100.0 | 200.0 | 2.00 |" in lines
    assert "| decoding sentences/s, structnmt's CTranslate2 export (int8) | 100.0 | 260.0 | 2.60 |" in lines
    # worker processes are checked against one process of the same number format
    assert "WARNING: structnmt --workers 2 --dtype int8 wrote 11900 output tokens, one process 11950" in lines
    assert not any("--workers 2 (1 thread each) wrote" in line for line in lines)
    # translate's default (workers=None, here its processes) is a row of its own, checked the same way
    assert "| decoding sentences/s, structnmt translate's default (workers chosen by itself) | 100.0 | 205.0 | 2.05 |" \
        in lines
    assert not any("default (workers chosen by itself) wrote" in line for line in lines)
    m = measured(bench)
    m.sn_dec[" translate's default (workers chosen by itself)"] = (205.0, 11990.0)
    assert ("WARNING: structnmt translate's default (workers chosen by itself) wrote 11990 output tokens, one process "
            "12000") in bench.report_lines(m)
    assert "| output tokens (EOS included; decoding speeds compare only where these are alike) | 12100 | 12000 | 0.99 |" \
        in lines
    assert lines[-1] == ("(per round: fairseq 1000, 1200; structnmt 1500, 1900 target tok/s; 2 processes: "
                         "fairseq 900, 1100, structnmt 2000, 2200)")


def test_three_rounds_or_more_also_give_each_toolkits_spread():
    bench = load_bench()
    assert bench.ratio_spread([1000.0, 1300.0, 1100.0], [1500.0, 1600.0, 1650.0]) == (
        "1.50 (rounds 1.23-1.50; rate spread fairseq 30%, structnmt 10%)")
    assert bench.ratio_spread([1000.0], [1500.0]) == "1.50"


def test_the_report_of_a_decoding_only_run_has_no_training_rows():
    bench = load_bench()
    lines = bench.report_lines(measured(bench, fs_rates=[], sn_rates=[], fs_mp=[], sn_mp=[], ct2_dec={}))
    assert not any("training" in line or line.startswith("(per round") for line in lines)
    assert "| decoding sentences/s, structnmt --dtype int8 | 100.0 | 180.0 | 1.80 |" in lines


def test_decoding_modes_leave_out_the_worker_rows_that_one_thread_would_repeat():
    """With --threads 1, '--workers 1 (1 thread each)' is the one-process row again: no such rows then;
    with 2 threads every CPU mode is measured once; on a GPU float32 and bfloat16 only."""
    bench = load_bench()
    two = bench._decode_modes(2, "cpu")
    assert two == {"": (2, "float32", 1), " --dtype bfloat16": (2, "bfloat16", 1),
                   " translate's default (workers chosen by itself)": (2, "float32", 0),
                   " --workers 2 (1 thread each)": (1, "float32", 2), " --workers 2 --dtype int8": (1, "int8", 2),
                   " --dtype int8": (2, "int8", 1)}
    one = bench._decode_modes(1, "cpu")
    assert not [label for label in one if "--workers" in label]
    assert set(one) == set(two) - {" --workers 2 (1 thread each)", " --workers 2 --dtype int8"}
    assert bench._decode_modes(2, "cuda") == {"": (2, "float32", 1), " --dtype bfloat16": (2, "bfloat16", 1)}
