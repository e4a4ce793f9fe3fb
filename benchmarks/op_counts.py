"""Operator calls per training step of every row of a grid, against the baseline's (issue 64, item 2).

    python benchmarks/op_counts.py --grid configs/grids/cross_paper_multi30k.yaml \\
        --data data-bin/multi30k_en_de_spacy --steps 10 --out DIR
    ... --checkpoint 'Structured attention (Transformer, layer 1)=runs/.../checkpoint_2000.pt'

On a GPU a small model's step is bound by the process that launches its kernels, so a mechanism's cost there
is its operator calls per step more than its FLOPs. Counted (:class:`structnmt.machine.op_count.OpCounter`, on the
CPU: the count does not depend on the device): every ATen call of ``--steps`` whole training steps (the
trainer's own ``train_step``: forward, backward, clipping, Adam), after one uncounted step; the calls that
compute (not views: each one a kernel launch or more on a GPU); the host's reads of tensor values (on a GPU, a
read of a device tensor stalls the launch queue; see OpCounter for what the CPU count includes besides). Every row is compared with the grid's baseline, and a row of the RNN
family also with the grid's first RNN row without syntax (SA-NMT against its NMT).

The matrix-tree rows take a longer path (an exact elimination, a loop over positions) for the sentences the
closed form cannot resolve; how many there are depends on the weights, so a row's count at initialisation
is its cheapest. ``--checkpoint ROW=PATH`` counts it with a trained run's weights instead; the table says
which, and what share of the matrix-tree sentences took the elimination.

Writes DIR/op_counts.json and DIR/op_counts.md (the table, printed too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_rows import grid_rows, row_trainer, step_groups  # noqa: E402

from structnmt.experiment.grid import load_grid  # noqa: E402
from structnmt.machine.cpu_gemm import to_plain  # noqa: E402
from structnmt.machine.op_count import OpCounter  # noqa: E402
from structnmt.nn import matrix_tree  # noqa: E402


def count_row(cfg, steps: int, checkpoint: Path | None = None) -> dict:
    """Mean operator calls, kernels and host reads per training step of ``cfg`` over ``steps`` steps."""
    with row_trainer(cfg, checkpoint) as trainer:
        # the linear layers as a GPU runs them (nn.Linear: addmm / mm), whatever the CPU's library choice (on an
        # AMD CPU the trainer puts them on oneDNN, one call where autograd's addmm and its backward are several)
        to_plain(trainer.model)
        groups = step_groups(trainer, steps + 1)
        trainer.train_step(groups[0])  # first-call set-up (lazy buffers, caches) is not a step's cost
        for key in matrix_tree.STATS:
            matrix_tree.STATS[key] = 0
        with OpCounter() as ops:
            for group in groups[1:]:
                trainer.train_step(group)
        stats = dict(matrix_tree.STATS)
    return {"ops": ops.total / steps, "kernels": ops.kernels / steps, "reads": ops.reads / steps,
            "family": cfg.model.family, "rnn_syntax": cfg.model.rnn.syntax, "checkpoint": str(checkpoint or ""),
            "tree_sentences": stats["sentences"], "eliminated": stats["exact_elimination"] + stats["tempered"],
            "top": ops.counts.most_common(8)}


def references(rows: dict[str, dict], baseline: str) -> dict[str, str]:
    """Each row's family baseline: the first RNN row without syntax for the RNN family, else ``baseline``."""
    rnn = next((n for n, r in rows.items() if r["family"] == "rnn" and r["rnn_syntax"] == "none"), None)
    return {n: (rnn if r["family"] == "rnn" and rnn else baseline) for n, r in rows.items()}


def table(rows: dict[str, dict], baseline: str, steps: int) -> str:
    refs = references(rows, baseline)
    lines = [f"Operator calls per training step, mean of {steps} steps (structnmt.machine.op_count.OpCounter)", "",
             "| row | weights | calls/step | kernels/step | host reads/step | x baseline | x family baseline "
             "| matrix-tree sentences eliminated |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        base = rows.get(baseline)
        x_base = f"{r['ops'] / base['ops']:.2f}" if base else "-"
        ref = rows.get(refs[name])
        x_ref = f"{r['ops'] / ref['ops']:.2f} ({refs[name]})" if ref and refs[name] != baseline else "-"
        elim = (f"{r['eliminated']:,} of {r['tree_sentences']:,}" if r["tree_sentences"] else "-")
        weights = Path(r["checkpoint"]).name if r["checkpoint"] else "initial"
        lines.append(f"| {name} | {weights} | {r['ops']:,.0f} | {r['kernels']:,.0f} | {r['reads']:.1f} | {x_base} "
                     f"| {x_ref} | {elim} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", required=True, help="an experiment grid (configs/grids/*.yaml)")
    ap.add_argument("--data", required=True, help="the prepared dataset its rows train on")
    ap.add_argument("--out", type=Path, required=True, help="directory for op_counts.json and op_counts.md")
    ap.add_argument("--steps", type=int, default=10, help="counted training steps per row (default 10)")
    ap.add_argument("--rows", nargs="+", default=None, help="only these rows (names as in the grid)")
    ap.add_argument("--checkpoint", action="append", default=[], metavar="ROW=PATH",
                    help="count ROW with the model weights of this checkpoint (repeatable)")
    ap.add_argument("overrides", nargs="*", help="config overrides for every row (key=value)")
    args = ap.parse_args(argv)
    checkpoints = dict(item.split("=", 1) for item in args.checkpoint)
    baseline = load_grid(args.grid)[0].baseline
    rows = {}
    for name, cfg in grid_rows(args.grid, args.data, args.overrides, args.rows):
        print(f"op_counts: {name} ...", file=sys.stderr, flush=True)
        ckpt = Path(checkpoints[name]) if name in checkpoints else None
        rows[name] = count_row(cfg, args.steps, ckpt)
    text = table(rows, baseline, args.steps)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "op_counts.json").write_text(json.dumps({"steps": args.steps, "baseline": baseline, "rows": rows},
                                                        indent=1) + "\n")
    (args.out / "op_counts.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
