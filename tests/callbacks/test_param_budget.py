"""ParameterTracker's budget: large parameters every k steps, k from measured cost."""
import csv

import numpy as np
import pytest
from mindspore import Model, Parameter, Tensor, nn
from mindspore import dataset as ds

from mindexp.callbacks import ParameterTracker, parameter_tracker


def _drive(tracker, ctx, steps):
    """One epoch of ``steps`` hooks, back to back, as Model.train calls them."""
    p = ctx.original_args()
    p.batch_num, p.cur_step_num, p.cur_epoch_num = steps, 0, 1
    p.net_outputs = (Tensor(np.float32(1.0)),)
    tracker.on_train_begin(ctx)
    for _ in range(steps):
        p.cur_step_num += 1
        tracker.on_train_step_end(ctx)
    tracker.on_train_end(ctx)


def _param_steps(path):
    """param name -> the steps at which params.csv holds it."""
    steps = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            steps.setdefault(row["param"], []).append(int(row["step"]))
    return steps


def test_budget_logs_large_parameters_every_k_steps_and_small_ones_every_step(tmp_path,
                                                                              run_context):
    big = Parameter(Tensor(np.ones((300, 300), np.float32)), name="big")
    small = Parameter(Tensor(np.ones(4, np.float32)), name="small")
    tracker = ParameterTracker(tmp_path, budget=0.1)
    _drive(tracker, run_context(train_network=None, optimizer=nn.SGD([big, small], 0.1)), 60)
    # statistics 1.6 multiply-adds per element of big against a step of 3 x 90,004
    # elements x batch 1 (the hand-built context has no dataset): 0.533 of a step
    assert tracker.large_every == 6 == int(np.ceil(1.6 * 90_000 / (0.1 * 3 * 90_004)))
    steps = _param_steps(tmp_path / "params.csv")
    assert steps["small[0]"] == list(range(1, 61))
    assert steps["big:norm"] == steps["big:max"] == list(range(1, 61, 6))


class _Clock:
    """A fake clock for the tracker's module: ``tick`` seconds a call, and
    ``stats_cost`` more for each large parameter's statistics."""

    def __init__(self, tick, stats_cost):
        self.now, self.tick, self.stats_cost = 0.0, tick, stats_cost

    def __call__(self):
        self.now += self.tick
        return self.now


@pytest.mark.parametrize("budget", [None, 0.1, 0.01])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_schedule_and_the_threads_do_not_depend_on_the_clock(tmp_path, run_context,
                                                                  monkeypatch, budget):
    """A run's params.csv is the same on an idle and on a loaded machine: the
    clock (faked fast, and slow with costly statistics) changes nothing."""
    from mindexp.callbacks import _stats
    texts, threads = [], []
    real = _stats.statistics
    big = Parameter(Tensor(np.arange(1_100_000, dtype=np.float32)), name="big")
    small = Parameter(Tensor(np.ones(4, np.float32)), name="small")
    for n, (tick, cost) in enumerate([(1e-6, 0.0), (0.5, 30.0)]):
        clock = _Clock(tick, cost)

        def slow_statistics(*args, clock=clock, **kwargs):
            clock.now += clock.stats_cost
            return real(*args, **kwargs)
        with monkeypatch.context() as patch:
            for name in ("perf_counter", "monotonic", "time"):
                patch.setattr(parameter_tracker.time, name, clock)
            patch.setattr(parameter_tracker, "statistics", slow_statistics)
            tracker = ParameterTracker(tmp_path / str(n), budget=budget)
            _drive(tracker, run_context(train_network=None,
                                        optimizer=nn.SGD([big, small], 0.1)), 30)
        texts.append((tmp_path / str(n) / "params.csv").read_bytes())
        threads.append(tracker.stats_threads)
    assert texts[0] == texts[1] and threads[0] == threads[1]
    assert texts[0].count(b",big:norm,") == (30 if budget is None else len(range(1, 31, tracker.large_every)))


def test_budget_must_be_a_fraction(tmp_path):
    with pytest.raises(ValueError, match=r"`budget` must be None or a fraction.*budget=2"):
        ParameterTracker(tmp_path, budget=2)


@pytest.mark.slow
def test_the_budget_of_a_run_is_its_config_and_its_choice_is_in_run_json(tmp_path):
    """hidden=48: a 48 x 48 weight (2,304 elements) is a large parameter; a budget
    below its estimated cost logs it every k > 1 steps, and run.json says k."""
    import json
    from mindexp.experiments.mlp_sine import MlpSine
    budget = 0.002
    run = MlpSine(hidden=48, layers=2, epochs=1, samples=64 * 20, batch_size=64,
                  param_log_budget=budget, eval_samples=16).run(out=str(tmp_path))
    meta = json.loads((tmp_path / "mlp_sine" / run.run_id / "run.json").read_text())
    trained = sum(int(np.prod(p.shape)) for p in run.network().trainable_params())
    k = meta["param_log_every_large"]
    assert k == int(np.ceil(1.6 * 48 * 48 / (budget * 3 * trained * 64))) and k > 1
    logged = _param_steps(tmp_path / "mlp_sine" / run.run_id / "params.csv")
    assert logged["body.2.weight:norm"] == list(range(1, 21, k))   # 48 x 48: the large one
    assert logged["body.2.bias:norm"] == list(range(1, 21))   # 48 elements: every step


def test_a_budget_out_of_range_is_a_config_error():
    from mindexp import ConfigError
    from mindexp.experiments.mlp_sine import MlpSine
    with pytest.raises(ConfigError, match=r"param_log_budget.*\(0, 1\], or none"):
        MlpSine(param_log_budget=0)
