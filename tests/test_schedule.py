"""Learning-rate schedules: values on hand-computed points, and the budget-aware ones' refusals."""

from __future__ import annotations

import math

import pytest

from structnmt.config import TrainConfig
from structnmt.train.schedule import (
    ScheduleError,
    budget_decay_lr,
    check_schedule,
    inverse_sqrt_lr,
    learning_rate,
    schedule_warning,
)


def test_linear_decay_warms_up_then_falls_to_zero_at_the_budget():
    lr = lambda s: budget_decay_lr(s, lr=1.0, warmup=10, total=100, shape="linear", warmup_init_lr=0.0)  # noqa: E731
    assert lr(5) == pytest.approx(0.5)  # half-way through the warm-up
    assert lr(10) == pytest.approx(1.0)  # the peak at the end of the warm-up
    assert lr(55) == pytest.approx(46 / 91)  # (total + 1 - step) / (total + 1 - warmup)
    assert lr(100) == pytest.approx(1 / 91)  # the last update still moves the weights
    assert lr(101) == 0.0 and lr(500) == 0.0
    values = [lr(s) for s in range(10, 101)]
    assert all(a > b for a, b in zip(values, values[1:]))  # strictly decreasing after the warm-up


def test_cosine_decay_is_half_the_peak_half_way_and_near_zero_at_the_budget():
    lr = lambda s: budget_decay_lr(s, lr=2.0, warmup=0, total=99, shape="cosine")  # noqa: E731
    assert lr(0) == pytest.approx(2.0)
    assert lr(50) == pytest.approx(1.0)  # cos(pi / 2) = 0
    assert lr(99) == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 99 / 100)))
    assert 0 < lr(99) < 1e-3


def test_learning_rate_dispatches_on_the_config():
    tc = TrainConfig(lr=0.004, warmup_updates=100, max_updates=1000, warmup_init_lr=0.0)
    assert learning_rate(400, tc) == pytest.approx(inverse_sqrt_lr(400, lr=0.004, warmup=100))
    assert learning_rate(400, tc) == pytest.approx(0.002)
    tc.lr_schedule = "linear"
    assert learning_rate(400, tc) == pytest.approx(0.004 * 601 / 901)
    tc.lr_schedule = "cosine"
    assert learning_rate(100, tc) == pytest.approx(0.004)
    tc.lr_schedule = "halve_on_rise"
    assert learning_rate(400, tc, scale=0.25) == pytest.approx(0.001)


def test_a_budget_aware_schedule_needs_an_update_budget_longer_than_its_warmup():
    with pytest.raises(ScheduleError, match=r"train.max_updates \(e.g. train.max_updates=2000\)"):
        check_schedule(TrainConfig(lr_schedule="linear", max_updates=0, max_time_minutes=30))
    with pytest.raises(ScheduleError, match="train.warmup_updates=500"):
        check_schedule(TrainConfig(lr_schedule="cosine", max_updates=2000, warmup_updates=2000))
    check_schedule(TrainConfig(lr_schedule="linear", max_updates=2000, warmup_updates=500))
    check_schedule(TrainConfig(lr_schedule="inverse_sqrt", max_updates=0))  # not budget-aware: no check


def test_schedule_objects_halve_only_for_halve_on_rise():
    """make_schedule picks the object: halve_on_rise halves the factor on a rise of the validation
    perplexity (and logs it), keeps it otherwise; the other schedules ignore validations."""
    from types import SimpleNamespace

    from structnmt.train.schedule import HalveOnRise, Schedule, make_schedule

    state = SimpleNamespace(lr_scale=1.0, last_valid_nll=None)
    said: list[str] = []
    halve = make_schedule(TrainConfig(lr_schedule="halve_on_rise", lr=1.0, warmup_updates=0))
    assert isinstance(halve, HalveOnRise)
    for nll in (3.0, 2.5, 2.7, 2.6, 2.9):
        halve.after_validation({"nll": nll, "loss": nll + 0.1}, state, said.append)
    assert state.lr_scale == 0.25 and state.last_valid_nll == 2.9 and len(said) == 2
    assert halve.lr(10, state) == 0.25
    plain = make_schedule(TrainConfig(lr_schedule="inverse_sqrt", lr=1.0, warmup_updates=4))
    assert type(plain) is Schedule
    state = SimpleNamespace(lr_scale=1.0, last_valid_nll=None)
    plain.after_validation({"nll": 9.0, "loss": 9.0}, state, said.append)
    assert state.lr_scale == 1.0 and state.last_valid_nll is None and plain.lr(16, state) == 0.5


def test_a_warm_up_longer_than_the_budget_is_warned_with_the_fix():
    """The default warm-up (2,000 updates) under a 600-update CPU budget: the rate never reaches train.lr."""
    w = schedule_warning(TrainConfig(lr=0.005, warmup_updates=2000, max_updates=600, warmup_init_lr=0.0))
    assert w is not None and "never gets past 0.0015 (train.lr=0.005)" in w
    assert "train.lr_schedule=linear train.warmup_updates=150" in w
    assert learning_rate(600, TrainConfig(lr=0.005, warmup_updates=2000, max_updates=600,
                                          warmup_init_lr=0.0)) == pytest.approx(0.0015)  # what it says
    assert schedule_warning(TrainConfig(warmup_updates=500, max_updates=600)) is None
    assert schedule_warning(TrainConfig(warmup_updates=4000, max_updates=0, max_time_minutes=5)) is None
    assert schedule_warning(TrainConfig(lr_schedule="linear", warmup_updates=100, max_updates=600)) is None


def test_the_trainer_says_the_warning(synth_data, tmp_path):
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, ModelConfig

    lines: list[str] = []
    cfg = Config(data=DataConfig(path=str(synth_data), max_tokens=400),
                 model=ModelConfig(d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=1, warmup_updates=10,
                                   validate_interval_updates=1, tensorboard=False, progress=False))
    train(cfg, log=lines.append)
    assert sum("warning: train.warmup_updates=10 is longer than the budget" in x for x in lines) == 1
