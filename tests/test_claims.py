"""The numbers the README's answer table and its header quote, and the key figures of docs/results/cross_paper.md,
recomputed from the committed outputs (scripts/check_claims.py: the table of claims and the function that
recomputes each). This test checks the subset marked ``fast`` (the header, the baseline's scores, the Rel_Pos row
at both budgets with its test); ``python scripts/check_claims.py`` checks them all."""
from __future__ import annotations

import importlib.util
import json
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


#: the header cell of each language's per-run table in cross_paper.md -> its grid
_RUN_TABLES = {"en→fr run": "en-fr", "en→cs run": "en-cs"}
#: the header cell of each language's own table (its verdicts) -> its grid
_PAIR_TABLES = {"en→fr system": "en-fr", "en→cs system": "en-cs"}


def _tables(text: str) -> list[tuple[str, list[str]]]:
    """(header's first cell, body rows) of every table in cross_paper.md's "Other target languages" section, in
    order: a row belongs to the table whose header it follows (the line after the header is its rule)."""
    section = text[text.index("## Other target languages"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    tables: list[tuple[str, list[str]]] = []
    previous = ""
    lines = section.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and not previous.startswith("|"):
            assert i + 1 < len(lines) and lines[i + 1].startswith("|---"), f"a table without its header: {line}"
            tables.append((line.split(" | ")[0][2:], []))
        elif line.startswith("|") and not line.startswith("|---"):
            tables[-1][1].append(line)
        previous = line
    headers = [h for h, _ in tables]
    assert len(headers) == len(set(headers)), f"two tables under one header: {headers}"
    return tables


def _language_run_rows(text: str) -> list[tuple[str, str, int]]:
    """(grid, row label, seed) of every per-run row in the section's per-run tables ("| en→fr run | ..."), in
    order."""
    rows = []
    for header, body in _tables(text):
        for line in body:
            if header not in _RUN_TABLES:
                assert not re.match(r"\| .+, seed \d+ \|", line), f"a per-run row outside a language's table: {line}"
                continue
            label, seed = line.split(" | ")[0][2:].rsplit(", seed ", 1)
            rows.append((_RUN_TABLES[header], label, int(seed)))
    return rows


def test_every_finished_run_of_the_other_languages_is_a_row():
    """A run committed in the en->fr or en->cs archive without its row in its language's table of cross_paper.md,
    a row twice, or a row without a run in the archive fails here (the rows' numbers are claims that recompute
    them from the run's translations)."""
    rows = _language_run_rows((ROOT / cc.CROSS).read_text(encoding="utf-8"))
    assert len(rows) == len(set(rows))
    assert rows and set(rows) == set(cc.language_runs())
    assert ("en-fr", "Transformer", 1) in rows and cc.run_splits("en-fr", "transformer", 1) == ["test", "test1"]
    # the parser keeps the grids apart: a French row under a Czech header is a Czech row
    moved = "| en→cs run | test_2016_flickr BLEU | lc,tok BLEU |\n|---|---:|---:|\n| Transformer, seed 1 | 1 | 1 |\n"
    assert _language_run_rows("## Other target languages\n\n" + moved) == [("en-cs", "Transformer", 1)]
    with pytest.raises(AssertionError, match="without its header"):  # a run's row that lost its table's header
        _language_run_rows("## Other target languages\n\n" + moved.split("\n", 2)[2])


@needs_refs
def test_a_language_row_is_recomputed_from_its_translations():
    """The en->fr rows' scores are sacreBLEU's on the committed translations against the French references: the
    recomputed lc,tok score equals what the run's result.json recorded, and a changed digit fails the claim."""
    assert cc.score("en-fr", "transformer", 1, "test1") == pytest.approx(
        cc.per_set_score("en-fr", "transformer", 1, "test1"), abs=1e-9)
    assert cc.score("en-fr", "transformer", 1, "test", "bleu") == pytest.approx(
        cc.per_set_score("en-fr", "transformer", 1, "test", key="bleu"), abs=1e-9)
    claim = next(c for c in cc.CLAIMS if c.fn is cc.language_run_row and c.args[1:] == ("Transformer", 1))
    text = (ROOT / cc.CROSS).read_text(encoding="utf-8")
    row = claim.expected()
    assert row in text
    changed = row.replace(row.split(" | ")[1], f"{float(row.split(' | ')[1]) + 0.01:.2f}")
    assert len(cc.check([claim], {cc.CROSS: text.replace(row, changed)})) == 1


def test_every_row_of_the_travel_table_is_a_claim():
    """cross_paper.md's "does the answer travel" table has one row per repeated mechanism, each a claim."""
    tables = dict(_tables((ROOT / cc.CROSS).read_text(encoding="utf-8")))
    labels = [line.split(" | ")[0][2:] for line in tables["row"]]
    claimed = [c.args[0] for c in cc.CLAIMS if c.fn is cc.travel_row]
    assert labels == claimed == [label for label in cc.LANGUAGE_ROWS if label != "Transformer"]


@needs_refs
def test_a_travel_cell_is_the_readme_verdict_with_its_mde():
    """The en->de cell is the README's verdict for the row (the same test on the same joined set) and its MDE; a
    row with fewer seeds than the baseline is not tested."""
    cell = cc.travel_cell("2k", "rel-pos")
    assert cell == f"{cc.readme_cell('2k', 'rel-pos')} (MDE {cc.mde('2k', 'rel-pos'):.2f})"


def test_a_travel_cell_waits_for_three_seeds_a_side(monkeypatch):
    """No verdict from fewer than 3 seeds on either side, whatever the two sides' counts (2 v 2 would test)."""
    counts = {"transformer": [1, 2], "rel-pos": [1, 2]}
    monkeypatch.setattr(cc, "seeds", lambda budget, slug: counts[slug])
    assert cc.travel_cell("en-fr", "rel-pos") == "2 of 3 seeds"
    counts["rel-pos"] = [1, 2, 3]
    assert cc.travel_cell("en-fr", "rel-pos") == "the baseline 2 of 3 seeds"
    counts["rel-pos"] = []
    assert cc.travel_cell("en-fr", "rel-pos") == "0 of 3 seeds"


def test_the_primary_split_is_the_join_only_where_the_baseline_has_both_sets(monkeypatch):
    """Czech (Multi30k has no Czech test_2017_flickr) is read on test_2016_flickr alone; a grid with no run yet
    too; French and German on the two sets joined."""
    assert cc.primary_split("2k") == cc.primary_split("en-fr") == cc.JOINED
    one_set = {"runs/transformer/seed1/result.json": b'{"split": "test", "splits": {}}'}
    monkeypatch.setattr(cc, "archive", lambda budget: one_set if budget == "en-cs" else {})
    cc.result.cache_clear()
    try:
        assert cc.seeds("en-cs", "transformer") == [1] and cc.primary_split("en-cs") == "test"
        assert cc.seeds("en-fr", "transformer") == [] and cc.primary_split("en-fr") == "test"
    finally:
        cc.result.cache_clear()


def test_only_rows_with_three_seeds_a_side_get_per_set_verdicts(monkeypatch):
    """travelled() names the rows whose per-set verdicts are claims: 3 seeds for the row and for the baseline; a
    grid whose baseline lacks one has none; the baseline itself is never one of them."""
    counts = {"transformer": [1, 2, 3], "rel-pos": [1, 2, 3], "dea-rhe": [1, 2]}
    monkeypatch.setattr(cc, "seeds", lambda budget, slug: counts.get(slug, []))
    assert cc.travelled("en-fr") == ["rel-pos"]
    counts["transformer"] = [1, 2]
    assert cc.travelled("en-fr") == []


@needs_refs
def test_a_travelled_row_is_read_on_each_set():
    """+ Rel_Pos on en->fr has 3 seeds a side: its joined and per-set figures are claims, and the per-set one
    names both French sets."""
    claims = cc.travel_claims()
    assert ("en-fr", "rel-pos") in [c.args for c in claims if c.fn is cc.travel_sets]
    text = cc.travel_sets("en-fr", "rel-pos")
    assert text.startswith(cc.joined_claim("en-fr", "rel-pos") + "; test_2016_flickr ")
    assert ", test_2017_flickr " in text


def test_a_grid_read_on_one_set_makes_no_per_set_claims(monkeypatch):
    """Czech (one test set) with 3 seeds a side: its verdict is the travel table's cell, so travel_claims() makes
    no joined or per-set claim for it (only its MDE range beside en->de's and its seed plan); the same runs scored
    on both sets make them."""
    def runs(splits: dict) -> dict[str, bytes]:
        return {f"runs/{slug}/seed{k}/result.json": json.dumps({"split": "test", "splits": splits}).encode()
                for slug in ("transformer", "rel-pos") for k in (1, 2, 3)}

    files = runs({})
    monkeypatch.setattr(cc, "archive", lambda budget: files if budget == "en-cs" else {})
    cc.result.cache_clear()
    try:
        assert cc.travelled("en-cs") == ["rel-pos"] and cc.primary_split("en-cs") == "test"
        made = {(c.fn, c.args) for c in cc.travel_claims()}
        assert made == {(cc.mde_span, ("en-cs", ("rel-pos",))), (cc.mde_span, ("2k", ("rel-pos",))),
                        (cc.mde_ratio_span, ("en-cs", ("rel-pos",))), (cc.plan_row, ("en-cs", "+ Rel_Pos"))}
        files = runs({"test1": {}})
        cc.result.cache_clear()
        made = {(c.fn, c.args) for c in cc.travel_claims()}
        assert (cc.travel_sets, ("en-cs", "rel-pos")) in made
    finally:
        cc.result.cache_clear()


def test_every_row_of_a_language_table_is_a_claim():
    """Each language whose baseline has a finished run has its own table (its rows' scores and verdicts) in
    cross_paper.md, one row per row of its grid in the grid's order, each a claim; the others have none."""
    tables = dict(_tables((ROOT / cc.CROSS).read_text(encoding="utf-8")))
    assert cc.seeds("en-fr", cc.BASELINE)
    for header, grid in _PAIR_TABLES.items():
        labels = [line.split(" | ")[0][2:] for line in tables.get(header, [])]
        claimed = [c.args[1] for c in cc.CLAIMS if c.fn is cc.pair_row and c.args[0] == grid]
        assert labels == claimed == (list(cc.LANGUAGE_ROWS) if cc.seeds(grid, cc.BASELINE) else [])


@needs_refs
def test_a_language_table_row_waits_for_its_seeds_and_carries_the_verdict(monkeypatch):
    """A row of en->fr's table with 3 seeds a side: its scores, its joined verdict in bold (marked), each set's Δ;
    a row with 2 seeds says so and carries no test; a row with 3 seeds beside a baseline with 2 says what it waits
    for."""
    row = cc.pair_row("en-fr", "+ Rel_Pos")
    assert row == (f"| + Rel_Pos | {cc.pair_scores('en-fr', 'rel-pos')} | **{cc.joined_claim('en-fr', 'rel-pos')}** "
                   f"| {cc.per_set_claim('en-fr', 'rel-pos')} |")
    assert re.fullmatch(r"\d\d\.\d\d ± 0\.\d\d \(\d\d\.\d\d / \d\d\.\d\d\)", cc.pair_scores("en-fr", "rel-pos"))
    counts = {"transformer": [1, 2, 3], "rel-pos": [1, 2]}
    monkeypatch.setattr(cc, "seeds", lambda budget, slug: counts.get(slug, []))
    assert cc.pair_row("en-fr", "+ Rel_Pos") == "| + Rel_Pos | 2 of 3 seeds | — | — |"
    counts.update({"transformer": [1, 2], "rel-pos": [1, 2, 3]})
    assert cc.pair_row("en-fr", "+ Rel_Pos").endswith("| the baseline 2 of 3 seeds | the baseline 2 of 3 seeds |")
    assert cc.pair_row("en-fr", "Transformer") == "| Transformer | 2 of 3 seeds | — | — |"


@needs_refs
def test_a_language_read_on_one_set_has_one_test_column(monkeypatch):
    """The Czech form of a language's row (one test set): the en->fr runs read on test_2016_flickr alone give one
    score without brackets and one verdict cell, test_2016_flickr's Δ with p and MDE (the figure travel_sets
    quotes for that set)."""
    monkeypatch.setattr(cc, "primary_split", lambda budget: "test")
    row = cc.pair_row("en-fr", "+ Rel_Pos")
    scores = [cc.score("en-fr", "rel-pos", k, "test") for k in (1, 2, 3)]
    assert row == f"| + Rel_Pos | {cc.np.mean(scores):.2f} ± {cc.np.std(scores, ddof=1):.2f} | **{cc.verdict('en-fr', 'rel-pos', 'test')}** |"
    assert f"; test_2016_flickr {cc.verdict('en-fr', 'rel-pos', 'test')}, " in cc.travel_sets("en-fr", "rel-pos")
    assert "MDE 1.41" in row and cc.pair_row("en-fr", "Transformer").endswith(" | — |")


def test_the_combination_is_read_against_its_parts_once_all_three_travelled(monkeypatch):
    """The combination of Rel_Pos and QUERYK is tested against each part (the part in place of the baseline) on a
    language's primary set once it, both parts and the baseline have 3 seeds; with a part short of a seed, not."""
    three = [1, 2, 3]
    counts = {"transformer": three, "rel-pos": three, "heterogeneous-queryk-1-2": three, cc.COMBINATION: three}
    monkeypatch.setattr(cc, "seeds", lambda budget, slug: counts.get(slug, []) if budget == "en-fr" else [])
    versus = [c.args for c in cc.travel_claims() if c.fn is cc.verdict]
    assert versus == [("en-fr", cc.COMBINATION, cc.JOINED, "rel-pos"),
                      ("en-fr", cc.COMBINATION, cc.JOINED, "heterogeneous-queryk-1-2")]
    counts["rel-pos"] = [1, 2]
    assert [c for c in cc.travel_claims() if c.fn is cc.verdict] == []


@needs_refs
def test_a_row_against_another_row_is_tested_against_that_row():
    """verdict(..., against=part) is the test with the part's seeds in the baseline's place: its Δ is the difference
    of the two rows' joined means, not the combination's gain over the Transformer."""
    text = cc.verdict("en-fr", cc.COMBINATION, cc.JOINED, "rel-pos")
    gap = cc.mean("en-fr", cc.COMBINATION, cc.JOINED) - cc.mean("en-fr", "rel-pos", cc.JOINED)
    assert text.startswith(cc.fmt_delta(gap) + " ") and text != cc.joined_claim("en-fr", cc.COMBINATION)


def test_missing_references_are_one_sentence(monkeypatch, tmp_path, capsys):
    """Without the shared Multi30k references beside the checkout the script says which file it needs and exits 2
    (no traceback); the recomputation caches are emptied so nothing computed before answers for the references."""
    caches = (cc.refs, cc._stats, cc.test)
    for f in caches:
        f.cache_clear()
    monkeypatch.setattr(cc, "REFERENCES", tmp_path / "multi30k")
    try:
        assert cc.main(["--fast"]) == 2
    finally:
        for f in caches:
            f.cache_clear()
    err = capsys.readouterr().err
    assert err.startswith("check_claims: ") and "multi30k" in err and "shared data folder" in err


@needs_refs
@pytest.mark.parametrize("grid, header, report, split", [
    ("en-fr", "en→fr row (joined sets)", "cross_paper_en_fr_2k", cc.JOINED),
    ("en-cs", "en→cs row (test2016)", "cross_paper_en_cs_2k", "test"),
])
def test_every_row_of_a_seed_plan_table_is_a_claim_and_agrees_with_plan_seeds_on_the_report(grid, header, report,
                                                                                             split):
    """A language's seed-plan table has one row per travelled row, each a claim planned from the recomputed test;
    each is the row `structnmt plan-seeds` gives from the committed report (its MDE, floor and seeds) on the set
    the grid is read on (French: both joined; Czech: test_2016_flickr)."""
    from structnmt.analysis.seed_plan import plan_seeds
    from structnmt.experiment.grid import slug

    tables = dict(_tables((ROOT / cc.CROSS).read_text(encoding="utf-8")))
    labels = [line.split(" | ")[0][2:] for line in tables[header]]
    claimed = [c.args[1] for c in cc.CLAIMS if c.fn is cc.plan_row and c.args[0] == grid]
    assert labels == claimed == [lb for lb, s in cc.LANGUAGE_ROWS.items() if s in cc.travelled(grid)]
    assert cc.primary_split(grid) == split
    _, planned = plan_seeds(ROOT / "docs" / "reports" / report / "results.csv", cc.PLAN_DELTA)
    by_slug = {slug(r.system): r for r in planned if r.split == split}
    for label in claimed:
        r = by_slug[cc.LANGUAGE_ROWS[label]]
        mde, floor, need = cc.plan_row(grid, label).removesuffix(" |").split(" | ")[1:4]
        assert (mde, floor) == (f"{r.mde:.2f}", f"{r.floor:.2f}")
        assert need.startswith("—") if r.seeds is None else need == f"{r.seeds:,}"


@needs_refs
def test_a_seed_plan_cell_says_why_no_number_of_seeds_is_given(monkeypatch):
    """No seed count: "—" with the reason where the floor is at or above ±0.5, "more than 100,000" where the floor
    is below it but the search stopped."""
    monkeypatch.setattr(cc, "seeds_for", lambda *a, **k: None)
    monkeypatch.setattr(cc, "mde_floor", lambda comp: 0.62)
    assert cc.plan_row("en-fr", "+ Rel_Pos").endswith("| 0.62 | — (the floor is above 0.5) |")
    monkeypatch.setattr(cc, "mde_floor", lambda comp: 0.31)
    assert cc.plan_row("en-fr", "+ Rel_Pos").endswith("| 0.31 | more than 100,000 |")


@needs_refs
def test_the_mde_spans_are_those_of_the_language_table():
    """The MDE range the French prose quotes is the smallest and largest MDE of the rows in the en->fr table
    (each row's verdict cell), and the ratio range compares each row with its own en->de MDE."""
    tables = dict(_tables((ROOT / cc.CROSS).read_text(encoding="utf-8")))
    mdes = [float(m) for line in tables["en→fr system"] for m in re.findall(r"MDE (\d\.\d\d)\)", line)]
    rows = tuple(cc.travelled("en-fr"))
    assert len(mdes) == len(rows) == 5
    assert cc.mde_span("en-fr", rows) == f"{min(mdes):.2f}-{max(mdes):.2f}"
    ratio = cc.mde("en-fr", "dea-rhe") / cc.mde("2k", "dea-rhe")
    assert cc.mde_ratio_span("en-fr", ("dea-rhe",)) == f"{ratio:.1f} to {ratio:.1f} times"


def test_a_grid_s_finished_runs_are_counted_from_its_archive(monkeypatch):
    """The sentence under a language's per-run table counts that grid's finished runs (not the other grid's), names
    the pair (so one language's sentence cannot pass for the other's), and says all are finished once its 18 are."""
    counts = {"en-cs": {"transformer": [1, 2, 3], "rel-pos": [1]}, "en-fr": {"transformer": [1, 2]}}
    monkeypatch.setattr(cc, "seeds", lambda budget, slug: counts.get(budget, {}).get(slug, []))
    assert cc.grid_finished("en-cs") == "4 of the en→cs grid's 18 runs are finished"
    assert cc.languages_finished() == "Finished so far: 6 of 36 runs"  # both grids together
    assert cc.grid_finished("en-fr") == "2 of the en→fr grid's 18 runs are finished"
    counts["en-fr"] = {slug: [1, 2, 3] for slug in cc.LANGUAGE_ROWS.values()}
    assert cc.grid_finished("en-fr") == "The en→fr grid's 18 runs are finished"
    counts["en-cs"] = dict(counts["en-fr"])
    assert cc.languages_finished() == "All 36 runs are finished"
