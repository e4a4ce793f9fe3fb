"""``structnmt.machine.device.use_threads`` / ``set_threads``: torch.set_num_threads is called only to change the
count (the call itself slows the CPU attention kernel, see ``use_threads``), and always to change it."""

from __future__ import annotations

import pytest
import torch

from structnmt.errors import UserError
from structnmt.machine import device


@pytest.fixture
def calls(monkeypatch):
    """Record torch.set_num_threads calls instead of making them; torch's current count is 3."""
    made: list[int] = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(torch, "set_num_threads", made.append)
    monkeypatch.setattr(device, "usable_cores", lambda: 8)
    return made


def test_the_current_count_is_not_set_again(calls):
    device.use_threads(3)
    device.set_threads(3)
    assert calls == []


def test_another_count_is_set(calls):
    device.use_threads(1)
    device.set_threads(5)
    assert calls == [1, 5]


def test_zero_leaves_the_default_and_too_many_is_a_sentence(calls):
    device.set_threads(0)
    assert calls == []
    with pytest.raises(UserError, match="train.threads=9: this machine gives this process 8 CPU"):
        device.set_threads(9)
    assert calls == []


def test_no_module_sets_the_count_but_use_threads():
    """Every thread count of the package goes through use_threads: a direct torch.set_num_threads elsewhere would
    bring the slow attention kernel back for the count torch already has."""
    from pathlib import Path

    import structnmt

    root = Path(structnmt.__file__).parent
    callers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if "torch.set_num_threads(" in "\n".join(line for line in p.read_text(encoding="utf-8").splitlines()
                                                            if not line.lstrip().startswith(("#", '"', "'", "``"))))
    assert callers == ["machine/device.py"]
