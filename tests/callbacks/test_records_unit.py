"""The callbacks' record rules, callback by callback, with a real RunContext over
hand-built params: Model.fit's nested eval contexts, partial and diverged
epochs, metric names, no checkpoint of NaN weights."""
import csv
import time

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from mindexp.callbacks import Checkpoint, EvalMonitor, LossMonitor, Timer, list_checkpoints


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class OneWeight(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((1,), np.float32)), name="w")

    def construct(self, x):
        return x * self.w


def fit_like(callbacks, ctx, epochs, steps, loss=lambda step: 1.0, eval_results=None,
             stop_at=None, eval_seconds=0.0):
    """Drive callbacks the way Model.fit does: every callback is entered for
    training, and entered and exited again around each evaluation, which runs
    after the step loop even when a stop was requested mid-epoch."""
    p = ctx.original_args()
    p.batch_num, p.cur_step_num = steps, 0
    p.list_callback = callbacks
    for cb in callbacks:
        cb.__enter__()
    try:
        for cb in callbacks:
            cb.on_train_begin(ctx)
        for epoch in range(1, epochs + 1):
            p.cur_epoch_num = epoch
            for _ in range(steps):
                p.cur_step_num += 1
                p.net_outputs = (Tensor(np.float32(loss(p.cur_step_num))),)
                for cb in callbacks:
                    cb.on_train_step_end(ctx)
                if p.cur_step_num == stop_at:
                    ctx.request_stop()
                if ctx.get_stop_requested():
                    break
            if eval_results is not None:   # Model._eval_in_fit: a nested callback context
                for cb in callbacks:
                    cb.__enter__()
                time.sleep(eval_seconds)
                p.eval_results = dict(eval_results(epoch))
                for cb in callbacks:
                    cb.__exit__(None, None, None)
            for cb in callbacks:
                cb.on_train_epoch_end(ctx)
            p.pop("eval_results", None)
            if ctx.get_stop_requested():
                break
        for cb in callbacks:
            cb.on_train_end(ctx)
    finally:
        for cb in callbacks:
            cb.__exit__(None, None, None)


def test_timer_counts_the_whole_fit_not_only_up_to_the_first_evaluation(run_context):
    """Before: the first evaluation's context exit ended the Timer's phase, so
    steps/s divided all steps by the time up to the first evaluation."""
    timer = Timer()
    slow = lambda step: time.sleep(0.01) or 1.0
    started = time.monotonic()
    fit_like([timer], run_context(), epochs=4, steps=5, loss=slow,
             eval_results=lambda e: {"accuracy": 0.5, "eval_loss": 1.0})
    wall = time.monotonic() - started
    assert timer.steps == 20
    assert timer.train_time_s == pytest.approx(wall, rel=0.2)
    # 19 timed steps over (almost) the whole run: the rate of the whole run
    assert 19 / timer.steps_per_s == pytest.approx(wall, rel=0.25)


def test_eval_monitor_skips_the_evaluation_of_an_epoch_cut_short(tmp_path, run_context):
    monitor = EvalMonitor(tmp_path, ["accuracy"])
    fit_like([monitor], run_context(), epochs=3, steps=4, stop_at=6,
             eval_results=lambda e: {"accuracy": e / 10, "eval_loss": 1.0})
    assert [(r["epoch"], r["step"]) for r in rows_of(tmp_path / "eval.csv")] == [("1", "4")]
    assert monitor.skipped == [(2, "the epoch was cut short")]


def test_a_stop_on_an_epochs_last_step_keeps_that_epochs_row(tmp_path, run_context):
    fit_like([EvalMonitor(tmp_path, ["accuracy"])], run_context(), epochs=3, steps=4, stop_at=8,
             eval_results=lambda e: {"accuracy": e / 10, "eval_loss": 1.0})
    assert [r["epoch"] for r in rows_of(tmp_path / "eval.csv")] == ["1", "2"]


def test_after_divergence_no_eval_row_and_no_checkpoint(tmp_path, run_context):
    net = OneWeight()
    ctx = run_context(train_network=net, optimizer=nn.SGD(net.trainable_params(), 0.1))
    # NaN on the LAST step of epoch 2: the epoch is complete, but diverged
    nan_at_8 = lambda step: float("nan") if step == 8 else 1.0
    monitor, ckpt = EvalMonitor(tmp_path, ["accuracy"]), Checkpoint(tmp_path, every_epochs=1)
    fit_like([LossMonitor(tmp_path, on_nan="stop"), monitor, ckpt], ctx, epochs=3, steps=4,
             loss=nan_at_8, eval_results=lambda e: {"accuracy": 0.5, "eval_loss": 1.0})
    assert [r["epoch"] for r in rows_of(tmp_path / "eval.csv")] == ["1"]
    assert [step for step, _, _ in list_checkpoints(tmp_path)] == [4]
    assert "loss is nan at step 8" in ckpt.skipped_reason
    assert [r["step"] for r in rows_of(tmp_path / "checkpoints.csv")] == ["4"]


def test_no_checkpoint_of_nan_weights_even_when_the_loss_was_finite(tmp_path, run_context):
    """The update of step s can make the weights NaN while step s's loss is finite."""
    net = OneWeight()
    ctx = run_context(train_network=net, optimizer=nn.SGD(net.trainable_params(), 0.1))
    ckpt = Checkpoint(tmp_path, every_epochs=1)

    def loss(step):
        if step == 8:
            net.w.set_data(Tensor(np.array([np.inf], np.float32)))
        return 1.0
    fit_like([ckpt], ctx, epochs=2, steps=4, loss=loss)
    assert [step for step, _, _ in list_checkpoints(tmp_path)] == [4]
    assert "parameter w is not finite at step 8" in ckpt.skipped_reason


def test_eval_monitor_rejects_names_the_evaluation_does_not_produce(tmp_path, run_context):
    """Without a Model up the stack (a hand-built context), the first
    evaluation's results are checked before anything is written."""
    monitor = EvalMonitor(tmp_path, ["accuracy", "loss"])
    with pytest.raises(ValueError, match=r"does not produce the metric\(s\) loss; it reports "
                                         r"accuracy \(.*EvalLoss.*Received: metrics=\['accuracy', 'loss'\]"):
        fit_like([monitor], run_context(), epochs=2, steps=2,
                 eval_results=lambda e: {"accuracy": 0.5, "eval_loss": 1.0})
    assert not (tmp_path / "eval.csv").exists()


def test_eval_monitor_reads_eval_loss_from_the_loss_metric_never_mindspores(tmp_path, run_context):
    """eval_loss is the Model's `loss` metric (mindexp's EvalLoss); the
    eval_loss Model.fit adds (the last batch's) is never written."""
    fit_like([EvalMonitor(tmp_path, ["eval_loss", "loss"])], run_context(), epochs=2, steps=2,
             eval_results=lambda e: {"accuracy": 0.5, "loss": 1.0 / e, "eval_loss": 99.0})
    rows = rows_of(tmp_path / "eval.csv")
    assert [(float(r["eval_loss"]), float(r["loss"])) for r in rows] == [(1.0, 1.0), (0.5, 0.5)]


def test_eval_monitor_refuses_eval_loss_when_only_mindspore_has_one(tmp_path, run_context):
    with pytest.raises(ValueError, match=r"does not produce the metric\(s\) eval_loss; it reports "
                                         r"accuracy .*'loss': EvalLoss\(\)"):
        fit_like([EvalMonitor(tmp_path, ["eval_loss"])], run_context(), epochs=2, steps=2,
                 eval_results=lambda e: {"accuracy": 0.5, "eval_loss": 1.0 / e})
    assert not (tmp_path / "eval.csv").exists()


def test_logs_stay_open_across_evaluations(tmp_path, run_context):
    """An evaluation's context exit does not close the logs (they would be
    reopened, and re-checked, after every evaluation)."""
    from mindexp.callbacks._quiet_callback import QuietCallback
    monitor, opened = LossMonitor(tmp_path), []

    class Spy(QuietCallback):
        def on_train_epoch_end(self, run_context):   # after the evaluation's exit
            opened.append(monitor._log._file is not None)
    fit_like([monitor, Spy()], run_context(train_network=None), epochs=3, steps=300,
             eval_results=lambda e: {"x": 1.0})
    assert opened == [True, True, True]
    assert len(rows_of(tmp_path / "loss.csv")) == 900
