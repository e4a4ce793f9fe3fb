"""Learning-rate schedules, selected by ``train.lr_schedule``:

* ``inverse_sqrt``: linear warm-up, then ``lr * sqrt(warmup / step)`` (Vaswani et al. 2017; fairseq);
* ``halve_on_rise``: linear warm-up, then a constant rate halved whenever the validation perplexity
  rises (SA-NMT §4.3, OpenNMT-py's decay on a rise); the current factor is kept in the run state
  (:class:`HalveOnRise`);
* ``linear`` and ``cosine``: budget-aware (Li, Yumer and Ramanan 2020, "Budgeted training: rethinking
  deep neural network training under resource constraints"): linear warm-up, then a decay that
  reaches zero at ``train.max_updates``, so that a run of any budget ends with a small learning rate
  instead of being cut off in the middle of its schedule. A 2,000-update run under the recipe's
  inverse square root with 2,000 warm-up updates never leaves its warm-up.
"""

from __future__ import annotations

import math
from typing import Any

#: Every value of ``train.lr_schedule``.
SCHEDULES = ("inverse_sqrt", "halve_on_rise", "linear", "cosine")
#: The schedules whose decay ends at ``train.max_updates``.
BUDGET_AWARE = ("linear", "cosine")


class ScheduleError(ValueError):
    """A schedule that cannot run with the run's budget."""


def _warmup(step: int, lr: float, warmup: int, warmup_init_lr: float) -> float:
    return warmup_init_lr + (lr - warmup_init_lr) * step / warmup


def inverse_sqrt_lr(step: int, *, lr: float, warmup: int, warmup_init_lr: float = 1e-7) -> float:
    """Learning rate for update ``step`` (1-based): linear warm-up to ``lr`` over
    ``warmup`` updates, then ``lr * sqrt(warmup / step)``."""
    if warmup > 0 and step < warmup:
        return _warmup(step, lr, warmup, warmup_init_lr)
    return lr * math.sqrt(max(warmup, 1) / max(step, 1))


def halve_on_rise_lr(step: int, *, lr: float, warmup: int, scale: float, warmup_init_lr: float = 1e-7) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` updates, then ``lr``; times ``scale`` (0.5 per rise)."""
    if warmup > 0 and step < warmup:
        return _warmup(step, lr, warmup, warmup_init_lr) * scale
    return lr * scale


def budget_decay_lr(step: int, *, lr: float, warmup: int, total: int, shape: str = "linear",
                    warmup_init_lr: float = 1e-7) -> float:
    """Learning rate for update ``step`` (1-based) of a ``total``-update run: linear warm-up to
    ``lr`` over ``warmup`` updates, then a decay from ``lr`` at ``step == warmup`` towards zero:

    * ``linear``: ``lr * (total + 1 - step) / (total + 1 - warmup)``;
    * ``cosine``: ``lr * (1 + cos(pi * (step - warmup) / (total + 1 - warmup))) / 2``.

    Both would reach zero at update ``total + 1``, so the last update of the budget still moves
    the weights (by ``lr / (total + 1 - warmup)`` for the linear shape). Past ``total`` (a run
    resumed with a larger budget is refused elsewhere) the rate stays at zero."""
    if shape not in BUDGET_AWARE:
        raise ValueError(f"unknown budget-aware shape {shape!r}; one of {', '.join(BUDGET_AWARE)}")
    if warmup > 0 and step < warmup:
        return _warmup(step, lr, warmup, warmup_init_lr)
    span = total + 1 - warmup
    progress = min(1.0, max(0.0, (step - warmup) / span))
    if shape == "linear":
        return lr * (1.0 - progress)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def check_schedule(tc) -> None:
    """Refuse a budget-aware schedule the run's budget cannot define (one sentence, the fix)."""
    if tc.lr_schedule not in BUDGET_AWARE:
        return
    if not tc.max_updates:
        raise ScheduleError(
            f"train.lr_schedule={tc.lr_schedule} decays to zero at the end of the budget, which it reads from "
            "train.max_updates, and that is 0; set train.max_updates (e.g. train.max_updates=2000) or use "
            "train.lr_schedule=inverse_sqrt with a time or token budget.")
    if tc.warmup_updates >= tc.max_updates:
        raise ScheduleError(
            f"train.lr_schedule={tc.lr_schedule}: the warm-up (train.warmup_updates={tc.warmup_updates}) is not "
            f"shorter than the budget (train.max_updates={tc.max_updates}), so the decay would never start; "
            f"set train.warmup_updates below it, e.g. train.warmup_updates={max(1, tc.max_updates // 4)}.")


def schedule_warning(tc) -> str | None:
    """A sentence when a warm-up schedule never reaches its learning rate within the update budget (the
    warm-up longer than ``train.max_updates``): the run trains at a fraction of ``train.lr`` throughout, a
    trap of short CPU budgets; the budget-aware schedule is the fix. None otherwise."""
    if tc.lr_schedule in BUDGET_AWARE or not tc.max_updates or tc.warmup_updates <= tc.max_updates:
        return None
    peak = tc.warmup_init_lr + (tc.lr - tc.warmup_init_lr) * tc.max_updates / tc.warmup_updates
    return (f"train.warmup_updates={tc.warmup_updates} is longer than the budget (train.max_updates="
            f"{tc.max_updates}): the learning rate never gets past {peak:.2g} (train.lr={tc.lr:g}). For a short "
            f"budget use the budget-aware schedule (train.lr_schedule=linear train.warmup_updates="
            f"{max(1, tc.max_updates // 4)}), or set train.warmup_updates below train.max_updates.")


def learning_rate(step: int, tc, scale: float = 1.0) -> float:
    """The learning rate of update ``step`` (1-based) under ``tc`` (a TrainConfig); ``scale`` is the
    run state's halve-on-rise factor."""
    if tc.lr_schedule == "halve_on_rise":
        return halve_on_rise_lr(step, lr=tc.lr, warmup=tc.warmup_updates, scale=scale,
                                warmup_init_lr=tc.warmup_init_lr)
    if tc.lr_schedule in BUDGET_AWARE:
        return budget_decay_lr(step, lr=tc.lr, warmup=tc.warmup_updates, total=tc.max_updates,
                               shape=tc.lr_schedule, warmup_init_lr=tc.warmup_init_lr)
    return inverse_sqrt_lr(step, lr=tc.lr, warmup=tc.warmup_updates, warmup_init_lr=tc.warmup_init_lr)


class Schedule:
    """The learning rate of every update of a run (``tc``: its TrainConfig), and what a validation
    changes in it: nothing, except for :class:`HalveOnRise`. Chosen by :func:`make_schedule`."""

    def __init__(self, tc):
        self.tc = tc

    def lr(self, step: int, state: Any) -> float:
        """The rate of update ``step`` (1-based); ``state``: the run state (its ``lr_scale``)."""
        return learning_rate(step, self.tc, state.lr_scale)

    def after_validation(self, values: dict, state: Any, log) -> None:
        """Called with each validation's ``values`` (``nll`` or ``loss``, in bits)."""


class HalveOnRise(Schedule):
    """SA-NMT §4.3: the rate is halved whenever the validation perplexity rises (``state.lr_scale``
    keeps the factor, ``state.last_valid_nll`` the last validation, so a resumed run goes on alike)."""

    def after_validation(self, values: dict, state: Any, log) -> None:
        nll = values.get("nll", values["loss"])
        if state.last_valid_nll is not None and nll > state.last_valid_nll:
            state.lr_scale *= 0.5
            log(f"validation perplexity rose ({math.exp(state.last_valid_nll):.3f} -> {math.exp(nll):.3f}): "
                f"learning rate halved to {self.tc.lr * state.lr_scale:.3g}.")
        state.last_valid_nll = nll


def make_schedule(tc) -> Schedule:
    """The schedule object of ``tc.lr_schedule`` (checked: :func:`check_schedule`)."""
    check_schedule(tc)
    return HalveOnRise(tc) if tc.lr_schedule == "halve_on_rise" else Schedule(tc)
