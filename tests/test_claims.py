"""The numbers the README's answer table and its header quote, and the key figures of docs/results/cross_paper.md,
recomputed from the committed outputs (scripts/check_claims.py: the table of claims and the function that
recomputes each). This test checks the subset marked ``fast`` (the header, the baseline's scores, the Rel_Pos row
at both budgets with its test); ``python scripts/check_claims.py`` checks them all."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("check_claims", ROOT / "scripts" / "check_claims.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_claims"] = mod
    spec.loader.exec_module(mod)
    return mod


cc = _load()
needs_refs = pytest.mark.skipif(not cc.REFERENCES.is_dir(), reason=f"{cc.REFERENCES}: the Multi30k references "
                                "(the shared data folder beside the checkout) are not on this machine")


def _answer_table(text: str) -> list[str]:
    section = text[text.index("## The answer: which mechanism helps"):]
    section = section[:section.index("\n## ", 1)]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| row")]


def test_every_row_of_the_readme_table_is_a_claim():
    """A row added to the README's answer table without a claim that recomputes it fails here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = _answer_table(readme)
    labels = {line.split(" | ")[0][2:] for line in rows}
    covered = {c.args[0] for c in cc.CLAIMS if c.fn is cc.readme_row} | {"RNN (NMT) / SA-NMT (shared)"}
    assert labels == covered
    assert len(rows) == len(cc.ROWS) - 1  # the RNN and SA-NMT share a line


def test_per_set_scores_from_the_archives():
    """Read from the runs' result.json in the committed archives alone (no references needed)."""
    claims = [c for c in cc.CLAIMS if c.fn is cc.baseline_per_set]
    assert claims and cc.check(claims) == []
    assert cc.seeds("2k", "transformer") == [1, 2, 3] and cc.seeds("8k", "rel-pos") == [1, 2, 3, 4, 5, 6]


@needs_refs
def test_fast_claims_hold():
    failures = cc.check([c for c in cc.CLAIMS if c.fast])
    assert failures == []


@needs_refs
def test_joined_score_is_recomputed_not_averaged():
    """The joined set's BLEU is the corpus BLEU of the concatenation; the per-set scores recomputed from the
    translations equal what result.json recorded."""
    for split in ("test", "test1"):
        assert cc.score("2k", "transformer", 1, split) == pytest.approx(cc.per_set_score("2k", "transformer", 1, split),
                                                                         abs=1e-9)
    joined = cc.score("2k", "transformer", 1, cc.JOINED)
    average = (cc.per_set_score("2k", "transformer", 1, "test") + cc.per_set_score("2k", "transformer", 1, "test1")) / 2
    assert abs(joined - average) > 0.1


@needs_refs
def test_a_changed_digit_fails():
    """The check reads the numbers: one digit changed in a copy of the README's Rel_Pos row fails its claim."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    claim = next(c for c in cc.CLAIMS if c.fn is cc.readme_row and c.args == ("+ Rel_Pos",))
    row = claim.expected()
    assert row in readme
    digit = re.search(r"\d", row.split(" | ")[1])
    start = row.index(" | ") + 3 + digit.start()
    changed = row[:start] + str((int(row[start]) + 1) % 10) + row[start + 1:]
    assert len(cc.check([claim], {"README.md": readme.replace(row, changed)})) == 1
