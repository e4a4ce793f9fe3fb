"""The examples in the docs run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_standalone_attention_example_runs():
    text = (DOCS / "attention.md").read_text()
    section = text.split("## Using a mechanism on its own", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/attention.md", "exec"), namespace)
    assert namespace["out"].weights is not None
