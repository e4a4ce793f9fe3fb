"""The process allocator setting (structnmt.machine.allocator): what it changes, and its switch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from structnmt.cli import commands as cli
from structnmt.errors import UserError
from structnmt.machine.allocator import _glibc, configure_allocator

PROBE = """
import ctypes, sys
from structnmt.machine.allocator import configure_allocator
mode = configure_allocator(sys.argv[1])
import torch

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
before = libc.mallinfo2().hblkhd
x = torch.empty(4 * 1024 * 1024)  # 16 MiB
mmapped = libc.mallinfo2().hblkhd - before
del x
print(mode, mmapped)
"""


def _probe(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(_glibc() is None, reason="the setting exists only with glibc (Linux)")
def test_retain_serves_large_tensors_from_the_heap_and_system_leaves_glibc_alone():
    mode, mmapped = _probe("system")
    assert mode == "system" and mmapped >= 16 * 1024 * 1024  # glibc's default: a fresh mmap per large tensor
    mode, mmapped = _probe("retain")
    assert mode == "retain" and mmapped == 0


def test_a_setting_that_does_not_exist_is_refused_by_name():
    with pytest.raises(UserError, match="STRUCTNMT_MALLOC='fast'.*'retain'.*'system'"):
        configure_allocator("fast")


def test_the_command_line_applies_the_setting_before_the_command(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("STRUCTNMT_MALLOC", "fast")
    hyp = tmp_path / "h.txt"
    hyp.write_text("a b\n", encoding="utf-8")
    assert cli.main(["score", "--hyp", str(hyp), "--ref", str(hyp)]) == 2
    assert "STRUCTNMT_MALLOC='fast' is not a setting" in capsys.readouterr().err
