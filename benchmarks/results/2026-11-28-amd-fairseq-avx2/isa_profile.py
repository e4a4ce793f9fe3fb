"""Self CPU time per operator of 30 training steps of the cross-paper baseline (transformer_tiny, 2 threads), after
10 untimed ones; the environment chooses the instruction set. From the repository root:

    OMP_NUM_THREADS=2 python benchmarks/results/2026-11-28-amd-fairseq-avx2/isa_profile.py OUT.json
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=2 \\
        python benchmarks/results/2026-11-28-amd-fairseq-avx2/isa_profile.py OUT.json
"""

import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from grid_rows import grid_rows, row_trainer, step_groups  # noqa: E402

torch.set_num_threads(2)
((name, cfg),) = grid_rows(ROOT / "configs/grids/cross_paper_multi30k.yaml", ROOT / "data-bin/multi30k_en_de_spacy",
                           ["train.threads=2"], ["Transformer"])
with row_trainer(cfg) as trainer:
    groups = step_groups(trainer, 40)
    for group in groups[:10]:
        trainer.train_step(group)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for group in groups[10:]:
            trainer.train_step(group)
rows = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
Path(sys.argv[1]).write_text(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "rows": rows}))
print(torch.backends.cpu.get_cpu_capability(), f"total self {sum(rows.values()) / 1e6:.2f} s")
for key, value in sorted(rows.items(), key=lambda x: -x[1])[:15]:
    print(f"{key:40s} {value / 1e6:7.3f} s")
