"""Calibration of the seed-aware test: the ``decomposed`` form (each noise counted once) against the
``double-count`` form (Clark et al.'s sum, the seed × sentence interaction in both parts).

Two parts, both written to ``--out`` as ``calibration.md`` and ``calibration.json``:

1. **Simulated scores with known components** (``--reps`` grids per scenario), run through
   :func:`structnmt.evaluate.seeds.seed_aware_statistic_test`'s own code with the corpus score the mean
   of per-sentence values,

   .. math::

       x_{ij}^{S} = \\mu_S + u_i^S + e_j + g_j^S + w_{ij}^S,\\qquad
       u \\sim N(0, \\sigma_{seed}^2),\\ e \\sim N(0, \\sigma_{sent}^2),\\ g \\sim N(0, \\sigma_{sys}^2/2),\\
       w \\sim N(0, \\sigma_{int}^2),

   run ``i`` (seed) of system ``S`` on sentence ``j`` of a test set drawn afresh per grid. The true
   variance of the difference of the seed means is
   :math:`(\\sigma^2_{seed} + \\tau^2)(1/n_A + 1/n_B) + \\sigma^2_{sys}/N` with :math:`\\tau^2 = \\sigma^2_{int}/N`.
   Reported per scenario: the share of grids flagged at p < 0.05 with no difference (nominal 5 %), the
   mean of :math:`\\sqrt{\\hat V}` against the true standard deviation, and the share flagged at the
   difference the power model (:mod:`structnmt.evaluate.power`) calls the MDE (nominal 80 %).
2. **A/A pools of real runs**: runs of one configuration split into two sides of 3 seeds, BLEU (lc,tok)
   on test_2016_flickr (``test``) and test_2017_flickr (``test1``); the flag rate and :math:`\\sqrt{\\hat V}`
   against the observed spread of Δ (root mean square over the splits; its expectation with no
   difference is :math:`\\sqrt{2 s^2/3}` of the pool), for both forms. The 8,000-update rows of
   ``cross_paper_multi30k_8k_gpu`` are then tested against the Transformer with both forms (p, MDE), with
   the decomposed plan (:mod:`structnmt.evaluate.power`: floor, seeds per system for ±0.5 on the test set
   and on one twice its size).

    python benchmarks/calibrate_seed_test.py --out benchmarks/results/2026-11-29-seed-test-calibration

Needs ``python scripts/outputs.py unpack cross_paper_multi30k_8k_gpu`` (and the four
``multi30k_baseline_*`` archives of docs/results/baseline_full_recipe.md) first.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

from structnmt.evaluate.power import (
    NoiseComponents,
    VarianceParts,
    mde_floor,
    minimal_detectable_effect,
    seeds_for,
)
from structnmt.evaluate.seeds import SEED_TESTS, _one_test, _scores, run_statistics

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ROOT / "docs" / "outputs"
REFS = {"test": "test_2016_flickr.de.gz", "test1": "test_2017_flickr.de.gz"}
#: the four full-recipe variants that differ by no measurable amount (docs/results/baseline_full_recipe.md)
BASELINE_POOL = ["multi30k_baseline_full/runs/transformer", "multi30k_baseline_full_cpu_fp32/runs/transformer",
                 "multi30k_baseline_fairseq_pipeline/runs/transformer-moses-fairseq-init",
                 "multi30k_baseline_causes/runs/transformer-fairseq-init"]
#: (name, sigma_seed, sigma_sent, sigma_sys, sigma_int, N, seeds a side): BLEU-like orders of magnitude
SCENARIOS = [
    ("A/A, interaction as large as the seed noise", 0.2, 20.0, 0.0, 6.3, 1000, 3),
    ("A/A, interaction dominates (seed sd 0.05)", 0.05, 20.0, 0.0, 6.3, 1000, 3),
    ("two systems, all parts", 0.2, 20.0, 8.0, 6.3, 1000, 3),
    ("two systems, 5 seeds a side", 0.2, 20.0, 8.0, 6.3, 1000, 5),
    ("two systems, 2 seeds a side", 0.3, 20.0, 8.0, 6.3, 500, 2),
]


def _simulate_grid(rng: np.random.Generator, sc: tuple, delta: float, counts: np.ndarray) -> dict:
    """One simulated comparison: (p, sqrt V) of both forms and Δ; ``counts``: (B, N) bootstrap weights."""
    _, s_seed, s_sent, s_sys, s_int, n, k = sc
    e = rng.normal(0, s_sent, n)
    runs = {}
    for side, mu in (("a", delta), ("b", 0.0)):
        g = rng.normal(0, s_sys / math.sqrt(2), n)
        runs[side] = mu + rng.normal(0, s_seed, (k, 1)) + e + g + rng.normal(0, s_int, (k, n))
    full = {s: x.mean(1) for s, x in runs.items()}
    boot = {s: (counts @ x.T).T / n for s, x in runs.items()}  # (k, B)
    out = {"delta": float(full["a"].mean() - full["b"].mean())}
    for m in SEED_TESTS:
        t = _one_test(full["a"], boot["a"], full["b"], boot["b"], metric="mean", n_samples=counts.shape[0], method=m)
        out[m] = (t.p_value, math.sqrt(t.seed_se ** 2 + t.sentence_se ** 2))
    return out


def simulate(sc: tuple, reps: int, reps_mde: int, n_samples: int, seed: int) -> dict:
    """Flag rates with no difference and at the MDE, and sqrt(V-hat) against the truth, for one scenario.

    True :math:`\\mathrm{Var}(\\Delta) = 2(\\sigma^2_{seed} + \\sigma^2_{int}/N)/k + \\sigma^2_{sys}/N`."""
    name, s_seed, _, s_sys, s_int, n, k = sc
    rng = np.random.default_rng(seed)
    per_seed = s_seed ** 2 + s_int ** 2 / n
    parts = VarianceParts(per_seed, per_seed, s_sys ** 2 / n)
    mde = minimal_detectable_effect(parts, k, k)
    res = {"scenario": name, "sigma_seed": s_seed, "sigma_sys": s_sys, "sigma_int": s_int, "N": n, "seeds": k,
           "true_sd": math.sqrt(2 * per_seed / k + s_sys ** 2 / n), "mde_true_parts": mde, "reps": reps,
           "reps_mde": reps_mde}
    for label, delta, count in (("null", 0.0, reps), ("at_mde", mde, reps_mde)):
        # one set of resample weights for every grid: each grid draws its own test set, and the resampled
        # positions are independent of what stands in them
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_samples).astype(float)
        grids = [_simulate_grid(rng, sc, delta, counts) for _ in range(count)]
        for m in SEED_TESTS:
            ps = np.array([g[m][0] for g in grids])
            res[f"{m}_{label}_flag_rate"] = float((ps < 0.05).mean())
            if label == "null":
                res[f"{m}_mean_sqrt_v"] = float(np.mean([g[m][1] for g in grids]))
        if label == "null":
            res["observed_sd_delta"] = float(np.std([g["delta"] for g in grids]))
    return res


def _pool_runs(dirs: list[Path], split: str) -> list[list[str]]:
    out = []
    for d in dirs:
        for seed_dir in sorted(d.glob("seed*"), key=lambda p: int(p.name[4:])):
            out.append((seed_dir / f"{split}.hyp").read_text(encoding="utf-8").splitlines())
    return out


def _boot_scores(runs: list[list[str]], split: str, n_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(full-test-set scores (R,), bootstrap scores (R, B)) of BLEU (lc,tok), the same resamples for all runs."""
    refs = _read_refs(split)
    m, stats = run_statistics(runs, refs, metric="bleu_lc_tok", lang="de")
    n = len(refs)
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_samples)
    full = _scores(m, np.stack([s.sum(0) for s in stats]))
    return full, np.stack([_scores(m, counts @ s) for s in stats])


def _read_refs(split: str) -> list[str]:
    path = ROOT.parent / "shared" / "data" / "multi30k" / REFS[split]
    if not path.exists():
        path = Path("/work/shared/data/multi30k") / REFS[split]
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _splits(n_runs: int, n_splits: int, rng: np.random.Generator) -> list[tuple[list[int], list[int]]]:
    """3 v 3 splits: all 10 of 6 runs; ``n_splits`` random ones (6 of the runs, then 3 v 3) of more."""
    if n_runs == 6:
        return [(list(a), [i for i in range(6) if i not in a]) for a in itertools.combinations(range(6), 3) if 0 in a]
    out = []
    for _ in range(n_splits):
        pick = rng.permutation(n_runs)[:6]
        out.append((sorted(pick[:3].tolist()), sorted(pick[3:].tolist())))
    return out


def aa_pool(name: str, dirs: list[Path], split: str, n_splits: int, n_samples: int, seed: int) -> dict:
    """Flag rate and sqrt(V-hat) against the RMS of Δ over 3 v 3 splits of one pool, both forms."""
    full, boot = _boot_scores(_pool_runs(dirs, split), split, n_samples, seed)
    splits = _splits(len(full), n_splits, np.random.default_rng(seed))
    deltas, by = [], {m: {"p": [], "sd": [], "sent": [], "tau": []} for m in SEED_TESTS}
    for a, b in splits:
        deltas.append(full[a].mean() - full[b].mean())
        for m in SEED_TESTS:
            t = _one_test(full[a], boot[a], full[b], boot[b], metric="bleu_lc_tok", n_samples=n_samples, method=m)
            by[m]["p"].append(t.p_value)
            by[m]["sd"].append(math.sqrt(t.seed_se ** 2 + t.sentence_se ** 2))
            by[m]["sent"].append(t.sentence_se)
            by[m]["tau"].append(t.interaction_sd)
    rms = float(np.sqrt(np.mean(np.square(deltas))))
    res = {"pool": name, "split": split, "runs": len(full), "splits": len(splits), "rms_delta": rms,
           "pool_sd": float(full.std(ddof=1)), "expected_rms": float(full.std(ddof=1) * math.sqrt(2 / 3))}
    for m in SEED_TESTS:
        res[f"{m}_flags"] = int(np.sum(np.array(by[m]["p"]) < 0.05))
        res[f"{m}_mean_p"] = float(np.mean(by[m]["p"]))
        res[f"{m}_mean_sqrt_v"] = float(np.mean(by[m]["sd"]))
        res[f"{m}_ratio"] = res[f"{m}_mean_sqrt_v"] / rms
        res[f"{m}_mean_sentence_se"] = float(np.mean(by[m]["sent"]))
    res["mean_tau"] = float(np.mean(by["decomposed"]["tau"]))
    return res


def rows_8k(split: str, n_samples: int, seed: int) -> list[dict]:
    """Every row of cross_paper_multi30k_8k_gpu against the Transformer: Δ, p and MDE of both forms."""
    root = OUTPUTS / "cross_paper_multi30k_8k_gpu" / "runs"
    names = ["transformer"] + sorted(d.name for d in root.iterdir() if d.name != "transformer")
    sizes = [len(list((root / n).glob("seed*"))) for n in names]
    full, boot = _boot_scores(_pool_runs([root / n for n in names], split), split, n_samples, seed)
    out, start = [], sizes[0]
    for name, k in zip(names[1:], sizes[1:]):
        a = slice(start, start + k)
        start += k
        row = {"split": split, "row": name, "seeds": f"{k} / {sizes[0]}"}
        for m in SEED_TESTS:
            t = _one_test(full[a], boot[a], full[:sizes[0]], boot[:sizes[0]], metric="bleu_lc_tok",
                          n_samples=n_samples, method=m)
            row.update({"delta": t.delta, f"{m}_p": t.p_value, f"{m}_mde": t.minimal_detectable_effect(),
                        f"{m}_sentence_se": t.sentence_se})
        comp = NoiseComponents.from_test(t.std, t.baseline_std, t.interaction_sd, t.baseline_interaction_sd,
                                         row["decomposed_sentence_se"])
        row.update({"std": t.std, "baseline_std": t.baseline_std, "tau": t.interaction_sd,
                    "baseline_tau": t.baseline_interaction_sd, "floor": mde_floor(comp),
                    "seeds_for_0.5": seeds_for(0.5, comp), "seeds_for_0.5_test_x2": seeds_for(0.5, comp, 2.0)})
        out.append(row)
    return out


def _n(k: int | None) -> str:
    return "—" if k is None else str(k)


def markdown(sim: list[dict], pools: list[dict], rows: list[dict]) -> str:
    """The three tables of the calibration."""
    d, c = "decomposed", "double-count"
    lines = ["## Simulated scores (known components; mean of per-sentence values)", "",
             "| scenario | N | seeds a side | grids (null / MDE) | flagged, no difference (new / old) | √V̂ ÷ true sd (new / old) | "
             "flagged at the MDE (new / old) | MDE |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sim:
        lines.append(f"| {r['scenario']} | {r['N']} | {r['seeds']} | {r['reps']} / {r['reps_mde']} | "
                     f"{100 * r[f'{d}_null_flag_rate']:.1f} % / {100 * r[f'{c}_null_flag_rate']:.1f} % | "
                     f"{r[f'{d}_mean_sqrt_v'] / r['true_sd']:.2f} / {r[f'{c}_mean_sqrt_v'] / r['true_sd']:.2f} | "
                     f"{100 * r[f'{d}_at_mde_flag_rate']:.1f} % / {100 * r[f'{c}_at_mde_flag_rate']:.1f} % | "
                     f"{r['mde_true_parts']:.3f} |")
    lines += ["", "## A/A pools (3 v 3 splits, BLEU (lc,tok))", "",
              "| pool | split | runs | splits | RMS Δ (expected √(2s²/3)) | flagged p < 0.05 (new / old) | "
              "mean √V̂ (new / old) | √V̂ ÷ RMS Δ (new / old) | τ̂ | mean p (new / old) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in pools:
        lines.append(f"| {r['pool']} | {r['split']} | {r['runs']} | {r['splits']} | {r['rms_delta']:.3f} "
                     f"({r['expected_rms']:.3f}) | {r[f'{d}_flags']} / {r[f'{c}_flags']} | "
                     f"{r[f'{d}_mean_sqrt_v']:.3f} / {r[f'{c}_mean_sqrt_v']:.3f} | "
                     f"{r[f'{d}_ratio']:.2f} / {r[f'{c}_ratio']:.2f} | {r['mean_tau']:.3f} | "
                     f"{r[f'{d}_mean_p']:.2f} / {r[f'{c}_mean_p']:.2f} |")
    lines += ["", "## The 8,000-update rows against the Transformer (BLEU (lc,tok))", "",
              "| split | row | seeds | Δ | p (new / old) | MDE (new / old) | sentence part √v (new / old) | "
              "floor (new) | seeds per system for ±0.5 (new; test set × 1 / × 2) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['split']} | {r['row']} | {r['seeds']} | {r['delta']:+.2f} | {r[f'{d}_p']:.3f} / "
                     f"{r[f'{c}_p']:.3f} | {r[f'{d}_mde']:.2f} / {r[f'{c}_mde']:.2f} | "
                     f"{r[f'{d}_sentence_se']:.3f} / {r[f'{c}_sentence_se']:.3f} | {r['floor']:.2f} | "
                     f"{_n(r['seeds_for_0.5'])} / {_n(r['seeds_for_0.5_test_x2'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for calibration.md and calibration.json")
    ap.add_argument("--reps", type=int, default=2000, help="simulated grids per scenario with no difference "
                                                           "(default 2000)")
    ap.add_argument("--reps-mde", type=int, default=1000, help="simulated grids per scenario at the MDE (default 1000)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per test (default 1000)")
    ap.add_argument("--splits", type=int, default=10, help="random 3 v 3 splits of the 12-run pool (default 10)")
    ap.add_argument("--seed", type=int, default=12345, help="the RNG seed (default 12345)")
    ap.add_argument("--skip-simulation", action="store_true", help="the real pools and rows only")
    args = ap.parse_args(argv)
    t0 = time.time()
    sim = [] if args.skip_simulation else [simulate(sc, args.reps, args.reps_mde, args.bootstrap, args.seed + i)
                                           for i, sc in enumerate(SCENARIOS)]
    cp = OUTPUTS / "cross_paper_multi30k_8k_gpu" / "runs"
    pools, rows = [], []
    for split in REFS:
        pools.append(aa_pool("Transformer, 8,000 updates (6 seeds)", [cp / "transformer"], split, args.splits,
                             args.bootstrap, args.seed))
        pools.append(aa_pool("Rel_Pos, 8,000 updates (6 seeds)", [cp / "rel-pos"], split, args.splits,
                             args.bootstrap, args.seed))
        pools.append(aa_pool("full-recipe baseline, 4 variants (12 runs)", [OUTPUTS / d for d in BASELINE_POOL],
                             split, args.splits, args.bootstrap, args.seed))
        rows += rows_8k(split, args.bootstrap, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.md").write_text(markdown(sim, pools, rows), encoding="utf-8")
    (out / "calibration.json").write_text(json.dumps({"args": vars(args), "seconds": round(time.time() - t0, 1),
                                                      "simulation": sim, "pools": pools, "rows_8k": rows},
                                                     indent=1), encoding="utf-8")
    print((out / "calibration.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
