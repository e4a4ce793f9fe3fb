"""``structnmt experiment``: a grid of configs on one dataset, one budget and the same seeds.

:func:`run_grid` trains every (run, seed) of a grid YAML in its own subprocess
(resumable), decodes the evaluation split with averaged checkpoints, scores it with
sacreBLEU (BLEU, chrF), tests every run against the grid's baseline with paired
bootstrap resampling, and writes ``results.md``, ``results.csv``,
``learning_curves.png`` and ``ngram_gain.png``. See ``docs/experiments.md``.
"""

from .grid import (
           BudgetSpec,
           DataSpec,
           EvaluateSpec,
           ExperimentError,
           GridConfig,
           RunSpec,
           load_grid,
)
from .runner import launch_training, run_grid

__all__ = ["BudgetSpec", "DataSpec", "EvaluateSpec", "ExperimentError", "GridConfig", "RunSpec",
           "launch_training", "load_grid", "run_grid"]
