"""The numbers the docs quote from the cross-paper comparison, recomputed from the committed outputs.

Every claim is a row of :data:`CLAIMS`: the document, the function that recomputes the quoted text from the
runs, and its arguments. The function reads the runs' ``result.json`` and translations straight from the
committed archives (``docs/outputs/cross_paper_multi30k.tar.xz``, ``..._8k_gpu.tar.xz``, and the other target
languages' ``..._en_fr.tar.xz``, ``..._en_cs.tar.xz``; no unpacking), scores them against the references
(``../shared/data/multi30k/test_2016_flickr.<lang>.gz`` and ``test_2017_flickr.<lang>.gz``, the prepared dataset's
``test.ref.txt`` and ``test1.ref.txt`` line for line) and runs the library's seed-aware test
(:class:`structnmt.evaluate.seeds.RunStatistics`, the grid's settings: BLEU (lc,tok) with the target language's
Moses tokenizer, 1,000 resamples, seed 12345, the decomposed form); the claim holds when the text it returns is in
the document, as written; a seed plan is made from that recomputed test as ``structnmt plan-seeds`` makes it from a
report (:func:`structnmt.analysis.seed_plan.decomposed_components`). ``docs/reports/*/results.csv`` is never read: it
is what the report wrote, not a recomputation.

    PYTHONPATH=src python scripts/check_claims.py          # every claim (a minute or two on one core)
    PYTHONPATH=src python scripts/check_claims.py --fast   # the subset tests/test_claims.py checks

Exit status 1 and one line per claim that the document does not state as recomputed; 2 and one sentence when the
references are not beside the checkout.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from structnmt.analysis.seed_plan import decomposed_components
from structnmt.evaluate.power import mde_floor, plan_mde, seeds_for
from structnmt.evaluate.seeds import RunStatistics, _scores, run_statistics
from structnmt.experiment.report import significance_mark

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k"
README = "README.md"
CROSS = "docs/results/cross_paper.md"

#: grid -> (the archive of docs/outputs holding its runs, its target language): the en->de grid at each budget,
#: and the en->fr and en->cs grids (2,000 updates)
GRIDS = {"2k": ("cross_paper_multi30k", "de"), "8k": ("cross_paper_multi30k_8k_gpu", "de"),
         "en-fr": ("cross_paper_multi30k_en_fr", "fr"), "en-cs": ("cross_paper_multi30k_en_cs", "cs")}
#: the en->de budgets (the README's table and most of cross_paper.md)
ARCHIVES = ("2k", "8k")
#: the other target languages' grids (cross_paper.md, "Other target languages")
LANGUAGE_GRIDS = ("en-fr", "en-cs")
#: split -> the stem of the reference file it was prepared from (``<stem>.<lang>.gz``); "test+test1" is the two
#: joined in this order
SPLITS = {"test": "test_2016_flickr", "test1": "test_2017_flickr"}
JOINED = "test+test1"
BASELINE = "transformer"
#: the grid's evaluate settings (configs/grids/cross_paper_multi30k.yaml)
N_SAMPLES, BOOT_SEED, METHOD = 1000, 12345, "decomposed"

#: the README's row label -> the run folder of the grid's row (runs/<slug>/seed<k>)
ROWS = {
    "+ Rel_Pos": "rel-pos",
    "+ Heterogeneous QUERYK (1-2)": "heterogeneous-queryk-1-2",
    "+ Rel_Pos + Heterogeneous QUERYK": "rel-pos-heterogeneous-queryk-1-2",
    "+ MG-SA (syntactic + ON-LSTM)": "mg-sa-syntactic-on-lstm",
    "+ DEA + RHE": "dea-rhe",
    "+ LPEA + RHE": "lpea-rhe",
    "+ Localness": "localness",
    "PhraseTransformer (k=2)": "phrasetransformer-k-2",
    "Structured attention (Transformer)": "structured-attention-transformer-layer-1",
    "RNN (NMT)": "rnn-nmt",
    "SA-NMT (shared)": "sa-nmt-shared",
}
#: the rows of the Transformer family (the README's MDE range is over these)
TRANSFORMER_ROWS = [s for s in ROWS.values() if s not in ("rnn-nmt", "sa-nmt-shared")]


def _outputs_module():
    spec = importlib.util.spec_from_file_location("outputs_script", ROOT / "scripts" / "outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def archive(budget: str) -> dict[str, bytes]:
    """{member: content} of the grid's committed archive. Only a grid of :data:`LANGUAGE_GRIDS` may have none yet
    (no finished run: empty); a missing en->de archive is an error, not claims that quietly disappear."""
    path = ROOT / "docs" / "outputs" / f"{GRIDS[budget][0]}.tar.xz"
    if not path.is_file() and budget in LANGUAGE_GRIDS:
        return {}
    return _outputs_module().read_archive(path)


def seeds(budget: str, slug: str) -> list[int]:
    """The seeds of a row with a finished run (a result.json) in the archive, in order."""
    found = [int(n.split("/")[2][4:]) for n in archive(budget)
             if n.startswith(f"runs/{slug}/seed") and n.endswith("/result.json")]
    return sorted(found)


@cache
def result(budget: str, slug: str, seed: int) -> dict:
    return json.loads(archive(budget)[f"runs/{slug}/seed{seed}/result.json"])


def per_set_score(budget: str, slug: str, seed: int, split: str, key: str = "bleu_lc_tok") -> float:
    """A run's score on one test set as its result.json records it."""
    res = result(budget, slug, seed)
    return float(res[key] if split == res["split"] else res["splits"][split][key])


def _lines(data: bytes) -> list[str]:
    text = data.decode("utf-8")
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def hyps(budget: str, slug: str, seed: int, split: str) -> list[str]:
    """A run's translations of ``split`` (of each part of a joined set, in order), from the archive."""
    res = result(budget, slug, seed)
    out: list[str] = []
    for part in split.split("+"):
        hyp_file = res["hyp_file"] if part == res["split"] else res["splits"][part]["hyp_file"]
        out += _lines(archive(budget)[f"runs/{slug}/seed{seed}/{hyp_file}"])
    return out


@cache
def refs(split: str, lang: str) -> tuple[str, ...]:
    """The references of ``split`` in ``lang`` (joined: the parts' in order)."""
    out: list[str] = []
    for part in split.split("+"):
        path = REFERENCES / f"{SPLITS[part]}.{lang}.gz"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the Multi30k references (the shared data folder beside the "
                                    "checkout) are needed to recompute joined scores and tests.")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out += f.read().splitlines()
    return tuple(out)


@cache
def _stats(budget: str, slug: str, seed: int, split: str, metric_name: str = "bleu_lc_tok"):
    lang = GRIDS[budget][1]
    metric, stats = run_statistics([hyps(budget, slug, seed, split)], list(refs(split, lang)), metric=metric_name,
                                   lang=lang)
    return metric, stats[0]


def score(budget: str, slug: str, seed: int, split: str, metric_name: str = "bleu_lc_tok") -> float:
    """A run's corpus BLEU (lc,tok; or ``bleu``, sacreBLEU's default 13a), recomputed from its translations (a
    joined set: on the join)."""
    metric, st = _stats(budget, slug, seed, split, metric_name)
    return float(_scores(metric, st.sum(0, keepdims=True))[0])


def mean(budget: str, slug: str, split: str, *, recompute: bool = False) -> float:
    """A row's mean BLEU (lc,tok) over its seeds: from result.json (one set), or rescored (``recompute``, joined)."""
    vals = [score(budget, slug, s, split) if recompute or "+" in split else per_set_score(budget, slug, s, split)
            for s in seeds(budget, slug)]
    return float(np.mean(vals))


def delta(budget: str, slug: str, split: str) -> float:
    return mean(budget, slug, split) - mean(budget, BASELINE, split)


@cache
def test(budget: str, slug: str, split: str, against: str = BASELINE):
    """The seed-aware test of the row against the baseline (or the row ``against``) on ``split``, as the report
    runs it."""
    base, row = seeds(budget, against), seeds(budget, slug)
    metric = _stats(budget, against, base[0], split)[0]
    stats = [_stats(budget, against, s, split)[1] for s in base] + [_stats(budget, slug, s, split)[1] for s in row]
    rs = RunStatistics("bleu_lc_tok", metric, stats, [len(base), len(row)], [slug])
    return rs.test(n_samples=N_SAMPLES, seed=BOOT_SEED, aso=False, method=METHOD)[slug]


def mark(budget: str, slug: str, split: str) -> str:
    t = test(budget, slug, split)
    return significance_mark(t.p_value, t.delta)


def fmt_delta(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def fmt_p(p: float) -> str:
    """p as the docs write it: "< 0.001", else three decimals."""
    if p < 0.001:
        return "< 0.001"
    text = f"{p:.3f}"
    if float(text) in (0.01, 0.05) and p < float(text):  # 0.0099 is below the mark's threshold: say so
        text = f"{p:.4f}"
    return f"= {text}"


# ---- the claims: each function returns the text the document must contain ----

def readme_cell(budget: str, slug: str) -> str:
    """A README table cell: the joined Δ with its mark, bold when marked ("**+2.18 ⇑**", "+0.41")."""
    if not seeds(budget, slug):
        return "not run yet"
    d, m = delta(budget, slug, JOINED), mark(budget, slug, JOINED)
    return f"**{fmt_delta(d)} {m}**" if m else fmt_delta(d)


def readme_row(label: str) -> str:
    """A whole README table row: the joined Δ and mark at 2,000 and 8,000 updates."""
    slug = ROWS[label]
    return f"| {label} | {readme_cell('2k', slug)} | {readme_cell('8k', slug)} |"


def readme_rnn_row() -> str:
    """The README's one line for the RNN and SA-NMT (both untested at 8,000 updates)."""
    return (f"| RNN (NMT) / SA-NMT (shared) | {readme_cell('2k', 'rnn-nmt')}; {readme_cell('2k', 'sa-nmt-shared')} "
            f"(one seed collapsed) | {readme_cell('8k', 'rnn-nmt')} |")


def baseline_per_set(budget: str) -> str:
    """The baseline's mean BLEU (lc,tok) on each set, from result.json alone: "(36.31 / 27.41)"."""
    return f"({mean(budget, BASELINE, 'test'):.2f} / {mean(budget, BASELINE, 'test1'):.2f})"


def baseline_scores(budget: str) -> str:
    """The baseline's mean BLEU (lc,tok), joined (recomputed) and per set (result.json): "37.03 (36.31 / 27.41)"."""
    return (f"{mean(budget, BASELINE, JOINED):.2f} ({mean(budget, BASELINE, 'test'):.2f} / "
            f"{mean(budget, BASELINE, 'test1'):.2f})")


def mde(budget: str, slug: str, split: str = JOINED) -> float:
    return test(budget, slug, split).minimal_detectable_effect()


def mde_range(rows: tuple[tuple[str, str], ...]) -> str:
    """The header's MDE range over (budget, slug) pairs: "0.6-1.1"."""
    vals = [mde(b, s) for b, s in rows]
    return f"{min(vals):.1f}-{max(vals):.1f} BLEU for the Transformer rows"


def transformer_pairs() -> tuple[tuple[str, str], ...]:
    """Every (budget, Transformer-family row) with runs."""
    return tuple((b, s) for b in ARCHIVES for s in TRANSFORMER_ROWS if seeds(b, s))


def seed_counts() -> str:
    """The header's seed counts: every row's at 2,000 updates, and those at 8,000 that differ."""
    two = {len(seeds("2k", s)) for s in [BASELINE, *ROWS.values()]}
    assert len(two) == 1, f"2k rows with different seed counts: {two}"
    n = two.pop()
    six = sorted(s for s in [BASELINE, *ROWS.values()] if len(seeds("8k", s)) not in (0, n))
    assert six == ["rel-pos", "transformer"], six
    assert {len(seeds("8k", s)) for s in six} == {6}
    return f"{n} seeds a row\n(6 for the baseline and Rel_Pos at 8,000 updates)"


def verdict(budget: str, slug: str, split: str, against: str = BASELINE) -> str:
    """A row's Δ on one set (or a joined one) against the baseline (or the row ``against``) with its mark, p and
    MDE: "+2.18 ⇑ (p < 0.001, MDE 0.92)"."""
    t = test(budget, slug, split, against)
    m = significance_mark(t.p_value, t.delta)
    return f"{fmt_delta(t.delta)}{(' ' + m) if m else ''} (p {fmt_p(t.p_value)}, MDE {t.minimal_detectable_effect():.2f})"


def joined_claim(budget: str, slug: str) -> str:
    """cross_paper.md's joined figure for a row: "+2.18 ⇑ (p < 0.001, MDE 0.92)"."""
    return verdict(budget, slug, JOINED)


def per_set_claim(budget: str, slug: str) -> str:
    """cross_paper.md's per-set figures under the new test: "+1.69 ⇑ / +2.68 ⇑ (p < 0.001 / < 0.001)"."""
    cells, ps = [], []
    for split in ("test", "test1"):
        t, m = test(budget, slug, split), mark(budget, slug, split)
        cells.append(f"{fmt_delta(t.delta)}{(' ' + m) if m else ''}")
        ps.append(fmt_p(t.p_value).removeprefix("= "))
    return f"{' / '.join(cells)} (p {' / '.join(ps)})"


def versus_claim(budget: str, slug: str, against: str) -> str:
    """One row against another (not the baseline), joined then each set: "+0.65 (p = 0.021) joined; +0.69 /
    +0.60 (p 0.13 / 0.074)"."""
    j = test(budget, slug, JOINED, against)
    ts = [test(budget, slug, x, against) for x in ("test", "test1")]
    return (f"{fmt_delta(j.delta)} (p {fmt_p(j.p_value)}) joined; {' / '.join(fmt_delta(t.delta) for t in ts)} "
            f"(p {' / '.join(fmt_p(t.p_value).removeprefix('= ') for t in ts)})")


# ---- the other target languages (cross_paper.md, "Other target languages") ----

#: the seeds of those grids (configs/grids/cross_paper_multi30k_en_{fr,cs}.yaml): a row and the baseline each need
#: them all before the travel table gives the row a verdict
TRAVEL_SEEDS = 3
#: the row that joins two mechanisms in one model, and its parts (each a row of every grid)
COMBINATION = "rel-pos-heterogeneous-queryk-1-2"
COMBINATION_PARTS = ("rel-pos", "heterogeneous-queryk-1-2")
#: the row folders of those grids: the baseline and the en->de rows they repeat
LANGUAGE_ROWS = {"Transformer": BASELINE, **{label: ROWS[label] for label in (
    "+ Rel_Pos", "+ Heterogeneous QUERYK (1-2)", "+ Rel_Pos + Heterogeneous QUERYK", "+ DEA + RHE",
    "+ MG-SA (syntactic + ON-LSTM)")}}


def run_splits(budget: str, slug: str, seed: int) -> list[str]:
    """The test sets a run was scored on, in the order the tables give them (test, then test1)."""
    res = result(budget, slug, seed)
    return [x for x in SPLITS if x == res["split"] or x in res.get("splits", {})]


def language_run_row(budget: str, label: str, seed: int) -> str:
    """A per-run row of a language's table: BLEU on each set, then BLEU (lc,tok) on each set, recomputed from the
    translations: "| Transformer, seed 1 | 52.37 | 44.09 | 53.51 / 45.37 |"."""
    slug = LANGUAGE_ROWS[label]
    splits = run_splits(budget, slug, seed)
    bleu = " | ".join(f"{score(budget, slug, seed, x, 'bleu'):.2f}" for x in splits)
    lc_tok = " / ".join(f"{score(budget, slug, seed, x):.2f}" for x in splits)
    return f"| {label}, seed {seed} | {bleu} | {lc_tok} |"


def language_runs() -> list[tuple[str, str, int]]:
    """Every finished (grid, row label, seed) of the other target languages' archives."""
    return [(g, label, k) for g in LANGUAGE_GRIDS for label, slug in LANGUAGE_ROWS.items() for k in seeds(g, slug)]


def grid_finished(budget: str) -> str:
    """How many of one language grid's runs are finished: "4 of the en→cs grid's 18 runs are finished"; once all
    are, "The en→cs grid's 18 runs are finished" (the pair named: one language's text never stands for another's)."""
    total = len(LANGUAGE_ROWS) * TRAVEL_SEEDS
    done = sum(1 for g, _, _ in language_runs() if g == budget)
    grid = f"{budget.replace('-', '→')} grid's {total} runs are finished"
    return f"The {grid}" if done == total else f"{done} of the {grid}"


def primary_split(budget: str) -> str:
    """The set a grid's verdicts are read on: both test sets joined where its baseline was scored on both
    (German, French), else test_2016_flickr alone (Czech: Multi30k has no Czech test_2017_flickr)."""
    base = seeds(budget, BASELINE)
    return JOINED if base and all(run_splits(budget, BASELINE, k) == ["test", "test1"] for k in base) else "test"


def travel_cell(budget: str, slug: str) -> str:
    """One cell of the "does the answer travel" table: the row's Δ on the grid's primary set with its mark (bold
    when marked) and its MDE, once the row and the baseline each have :data:`TRAVEL_SEEDS` seeds; else how many
    the row (or the baseline) has."""
    have, base = len(seeds(budget, slug)), len(seeds(budget, BASELINE))
    if have < TRAVEL_SEEDS:
        return f"{have} of {TRAVEL_SEEDS} seeds"
    if base < TRAVEL_SEEDS:
        return f"the baseline {base} of {TRAVEL_SEEDS} seeds"
    split = primary_split(budget)
    t, m = test(budget, slug, split), mark(budget, slug, split)
    cell = f"{fmt_delta(t.delta)} {m}".strip()
    return f"{'**' + cell + '**' if m else cell} (MDE {t.minimal_detectable_effect():.2f})"


def travel_sets(budget: str, slug: str) -> str:
    """A travelled row's verdict as the section's prose gives it, joined then each test set alone (the joined text
    alone is also in the language's table, so only this form checks the prose): "+3.39 ⇑ (p < 0.001, MDE 1.27);
    test_2016_flickr +3.37 ⇑ (p < 0.001, MDE 1.41), test_2017_flickr +3.42 ⇑ (p < 0.001, MDE 1.80)"."""
    splits = run_splits(budget, BASELINE, seeds(budget, BASELINE)[0])
    parts = [f"{SPLITS[x]} {verdict(budget, slug, x)}" for x in splits]
    return f"{joined_claim(budget, slug)}; {', '.join(parts)}"


def travelled(budget: str) -> list[str]:
    """The rows of a language grid with a verdict: they and the baseline each have :data:`TRAVEL_SEEDS` seeds."""
    if len(seeds(budget, BASELINE)) < TRAVEL_SEEDS:
        return []
    return [s for s in LANGUAGE_ROWS.values() if s != BASELINE and len(seeds(budget, s)) >= TRAVEL_SEEDS]


def seed_spread(budget: str) -> str:
    """How far the baseline's seeds spread, max - min of BLEU (lc,tok) on each of its test sets: "0.71 / 1.23"."""
    splits = run_splits(budget, BASELINE, seeds(budget, BASELINE)[0])
    spreads = [[score(budget, BASELINE, k, x) for k in seeds(budget, BASELINE)] for x in splits]
    return " / ".join(f"{max(v) - min(v):.2f}" for v in spreads)


def pair_scores(budget: str, slug: str) -> str:
    """A row's BLEU (lc,tok) in its language's table, mean ± sample std over its seeds, recomputed from the
    translations: on the primary set, then each set in brackets where it is the join ("53.61 ± 0.30 (57.21 /
    49.50)"); "2 of 3 seeds" until the row has them all."""
    have = seeds(budget, slug)
    if len(have) < TRAVEL_SEEDS:
        return f"{len(have)} of {TRAVEL_SEEDS} seeds"
    split = primary_split(budget)
    vals = [score(budget, slug, k, split) for k in have]
    text = f"{np.mean(vals):.2f} ± {np.std(vals, ddof=1):.2f}"
    if split == JOINED:
        text += f" ({' / '.join(f'{mean(budget, slug, x, recompute=True):.2f}' for x in split.split('+'))})"
    return text


def pair_row(budget: str, label: str) -> str:
    """A row of a language's own table: its scores, then its verdict against the language's Transformer on the
    primary set with p and MDE, bold when marked (joined: then each set's Δ with p), once the row and the baseline
    each have :data:`TRAVEL_SEEDS` seeds. The baseline's row has "—" for the tests; a row waiting for the
    baseline's seeds says how many it has."""
    slug = LANGUAGE_ROWS[label]
    split = primary_split(budget)
    n_tests = 2 if split == JOINED else 1
    if slug not in travelled(budget):
        base = len(seeds(budget, BASELINE))
        waiting = slug != BASELINE and len(seeds(budget, slug)) >= TRAVEL_SEEDS > base
        cell = f" the baseline {base} of {TRAVEL_SEEDS} seeds |" if waiting else " — |"
        return f"| {label} | {pair_scores(budget, slug)} |{cell * n_tests}"
    text = verdict(budget, slug, split)
    cells = [pair_scores(budget, slug), f"**{text}**" if mark(budget, slug, split) else text]
    if split == JOINED:
        cells.append(per_set_claim(budget, slug))
    return f"| {label} | {' | '.join(cells)} |"


#: the difference the seed plans are made for (``structnmt plan-seeds RESULTS --delta 0.5``), and the most seeds
#: they search (plan-seeds' default)
PLAN_DELTA, PLAN_MAX_SEEDS = 0.5, 100_000


def plan_row(budget: str, label: str) -> str:
    """A row of a language's seed-plan table, planned from the recomputed test on the grid's primary set as
    ``structnmt plan-seeds <the grid's results.csv> --delta 0.5`` plans it (power 0.8 at level 0.05): the MDE with
    the seeds at hand, the floor (the MDE as the seeds grow without bound) and the seeds per system at which a
    true ±0.5 is flagged ("—" where the floor is at or above 0.5; "more than 100,000" where the floor is below it
    but that many seeds do not reach it)."""
    slug = LANGUAGE_ROWS[label]
    t = test(budget, slug, primary_split(budget))
    comp = decomposed_components(t.std, t.baseline_std, t.interaction_sd, t.baseline_interaction_sd, t.sentence_se,
                                 t.n_seeds, t.baseline_n_seeds)
    floor, need = mde_floor(comp), seeds_for(PLAN_DELTA, comp, max_seeds=PLAN_MAX_SEEDS)
    if need is not None:
        cell = f"{need:,}"
    else:
        cell = f"— (the floor is above {PLAN_DELTA:g})" if floor >= PLAN_DELTA else f"more than {PLAN_MAX_SEEDS:,}"
    return f"| {label} | {plan_mde(comp, t.n_seeds, n_baseline=t.baseline_n_seeds):.2f} | {floor:.2f} | {cell} |"


def mde_span(budget: str, slugs: tuple[str, ...]) -> str:
    """The smallest and largest MDE of ``slugs`` on the grid's primary set: "1.19-2.30"."""
    vals = [mde(budget, s, primary_split(budget)) for s in slugs]
    return f"{min(vals):.2f}-{max(vals):.2f}"


def mde_ratio_span(budget: str, slugs: tuple[str, ...]) -> str:
    """How many times each of ``slugs``' MDE on the grid's primary set is the same row's on en->de at 2,000
    updates (joined), smallest and largest: "2.0 to 6.0 times"."""
    ratios = [mde(budget, s, primary_split(budget)) / mde("2k", s) for s in slugs]
    return f"{min(ratios):.1f} to {max(ratios):.1f} times"


def travel_row(label: str) -> str:
    """A row of the table: en->de at 2,000 updates, en->fr, en->cs."""
    slug = LANGUAGE_ROWS[label]
    return f"| {label} | {' | '.join(travel_cell(b, slug) for b in ('2k', *LANGUAGE_GRIDS))} |"


def languages_finished() -> str:
    """How many of the two grids' 36 runs are finished (in the archives): "Finished so far: 4 of 36 runs"; once all
    are, "All 36 runs are finished"."""
    total, done = len(LANGUAGE_GRIDS) * len(LANGUAGE_ROWS) * TRAVEL_SEEDS, len(language_runs())
    return f"All {total} runs are finished" if done == total else f"Finished so far: {done} of {total} runs"


@dataclass(frozen=True)
class Claim:
    doc: str
    what: str
    fn: Callable[..., str]
    args: tuple = ()
    fast: bool = False  # checked by tests/test_claims.py on every run (the rest: this script)

    def expected(self) -> str:
        return self.fn(*self.args)


def travel_claims() -> list[Claim]:
    """The figures of the rows that travelled (:func:`travelled`): on any grid, the range of their MDEs beside the
    same rows' on en->de, the seed plan of each and the combination against each of its parts once all three
    travelled; on a grid read on its two test sets joined (not Czech: its one set is the travel table's cell),
    the joined Δ with p and MDE and each set's, and the baseline's seed spread there and on en->de, which the
    section compares."""
    claims, joined = [], False
    for g in LANGUAGE_GRIDS:
        rows = tuple(travelled(g))
        if not rows:
            continue
        if COMBINATION in rows and all(p in rows for p in COMBINATION_PARTS):
            claims += [Claim(CROSS, f"{g} combination v {p}", verdict, (g, COMBINATION, primary_split(g), p))
                       for p in COMBINATION_PARTS]
        claims += [Claim(CROSS, f"{g} MDE range", mde_span, (g, rows)),
                   Claim(CROSS, f"{g} MDE range of the same rows on en->de", mde_span, ("2k", rows)),
                   Claim(CROSS, f"{g} MDE against en->de's, row by row", mde_ratio_span, (g, rows))]
        claims += [Claim(CROSS, f"{g} seed plan: {label}", plan_row, (g, label), fast=(g, label) == ("en-fr",
                         "+ Rel_Pos")) for label in LANGUAGE_ROWS if LANGUAGE_ROWS[label] in rows]
        if primary_split(g) != JOINED:
            continue
        joined = True
        claims.append(Claim(CROSS, f"{g} baseline seed spread", seed_spread, (g,)))
        claims += [Claim(CROSS, f"{g} {s} joined and on each set", travel_sets, (g, s),
                         fast=(g, s) == ("en-fr", "rel-pos")) for s in rows]
    return claims + ([Claim(CROSS, "2k baseline seed spread", seed_spread, ("2k",))] if joined else [])


CLAIMS: list[Claim] = [
    # README, "The answer: which mechanism helps": the header
    Claim(README, "header: seed counts", seed_counts, fast=True),
    Claim(README, "header: the MDE range over the Transformer rows", lambda: mde_range(transformer_pairs())),
    Claim(README, "the baseline's scores on each set at 2,000 updates", baseline_per_set, ("2k",), fast=True),
    Claim(README, "the baseline's scores on each set at 8,000 updates", baseline_per_set, ("8k",), fast=True),
    Claim(README, "the baseline's scores at 2,000 updates", baseline_scores, ("2k",), fast=True),
    Claim(README, "the baseline's scores at 8,000 updates", baseline_scores, ("8k",)),
    # README: the table, one row per mechanism
    *[Claim(README, f"table row {label}", readme_row, (label,), fast=label == "+ Rel_Pos")
      for label in ROWS if label not in ("RNN (NMT)", "SA-NMT (shared)")],
    Claim(README, "table row RNN / SA-NMT", readme_rnn_row),
    # docs/results/cross_paper.md: the joined verdicts it quotes, and each set under the new test
    *[Claim(CROSS, f"{b} joined {s}", joined_claim, (b, s), fast=(b, s) == ("8k", "rel-pos"))
      for b in ARCHIVES for s in ROWS.values() if seeds(b, s)],
    *[Claim(CROSS, f"{b} per set {s}", per_set_claim, (b, s))
      for b in ARCHIVES for s in ROWS.values() if seeds(b, s)],
    # the combination against each of its parts, and SA-NMT against its own RNN
    *[Claim(CROSS, f"2k combination v {p}", versus_claim, ("2k", COMBINATION, p)) for p in COMBINATION_PARTS],
    Claim(CROSS, "2k SA-NMT v the RNN", versus_claim, ("2k", "sa-nmt-shared", "rnn-nmt")),
    # the same with its MDE, which the other languages' section compares
    *[Claim(CROSS, f"2k combination v {p}, with its MDE", verdict, ("2k", COMBINATION, JOINED, p))
      for p in COMBINATION_PARTS],
    # the other target languages: how many runs are in, and each run's scores
    Claim(CROSS, "other languages: finished runs", languages_finished, fast=True),
    *[Claim(CROSS, f"{g}: its grid's finished runs", grid_finished, (g,)) for g in LANGUAGE_GRIDS],
    *[Claim(CROSS, f"does the answer travel: {label}", travel_row, (label,), fast=label == "+ Rel_Pos")
      for label in LANGUAGE_ROWS if label != "Transformer"],
    *travel_claims(),
    *[Claim(CROSS, f"{g} table: {label}", pair_row, (g, label),
            fast=g == "en-fr" and label in ("Transformer", "+ Rel_Pos"))
      for g in LANGUAGE_GRIDS if seeds(g, BASELINE) for label in LANGUAGE_ROWS],
    *[Claim(CROSS, f"{g} {label} seed {k}", language_run_row, (g, label, k), fast=(label, k) == ("Transformer", 1))
      for g, label, k in language_runs()],
]


def _words(text: str) -> str:
    """Text with every run of white space one space (a claim may wrap across lines of the document)."""
    return " ".join(text.split())


def check(claims: list[Claim], texts: dict[str, str] | None = None) -> list[str]:
    """One line per claim whose recomputed text its document does not contain (``texts``: {doc: text} read
    instead of the files, e.g. an edited copy)."""
    docs: dict[str, str] = {d: _words(t) for d, t in (texts or {}).items()}
    failures = []
    for c in claims:
        text = docs.setdefault(c.doc, _words((ROOT / c.doc).read_text(encoding="utf-8")))
        want = _words(c.expected())
        if want not in text:
            failures.append(f"{c.doc}: {c.what}: recomputed {want!r}, not in the text")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the subset tests/test_claims.py checks")
    ap.add_argument("--show", action="store_true", help="print every claim's recomputed text")
    args = ap.parse_args(argv)
    claims = [c for c in CLAIMS if c.fast or not args.fast]
    try:
        if args.show:
            for c in claims:
                print(f"{c.doc}: {c.what}: {c.expected()}")
        failures = check(claims)
    except FileNotFoundError as e:  # the references beside the checkout: one sentence, not a traceback
        print(f"check_claims: {e}", file=sys.stderr)
        return 2
    for line in failures:
        print(line)
    print(f"{len(claims) - len(failures)} of {len(claims)} claims as recomputed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
