"""CallbackList: one MindSpore callback over several, one StepRecord per step;
the logs are the same row for row as with the callbacks given one by one."""
import csv

import numpy as np
import pytest

import mindspore as ms
import mindspore.dataset as ds
from mindspore import Tensor, nn
from mindspore.train import Callback, Model

from mindexp.callbacks import (CallbackList, Checkpoint, EarlyStopping, GradNormMonitor,
                               LossMonitor, ParameterTracker, StepRecord, TrainStep, read_csv)
from mindexp.callbacks import _recorder

ms.set_context(mode=ms.GRAPH_MODE)

X = np.random.default_rng(1).random((40, 1), dtype=np.float32)
Y = 3 * X - 0.5


def dataset():
    return ds.GeneratorDataset(list(zip(X, Y)), ["x", "y"], shuffle=False).batch(10)


def model(lr=0.05):
    ms.set_seed(0)
    net = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")
    opt = nn.Momentum(net.trainable_params(), lr, 0.9)
    return Model(TrainStep(nn.WithLossCell(net, nn.MSELoss()), opt))


def loggers(folder):
    return [LossMonitor(folder), ParameterTracker(folder), GradNormMonitor(folder, every=3)]


def without_time(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k != "time_s"} for row in csv.DictReader(f)]


class Seen(Callback):
    """A plain callback inside the list: reads the record with StepRecord.of."""

    def __init__(self):
        self.records = []

    def on_train_step_end(self, run_context):
        self.records.append(StepRecord.of(run_context))


class Takes(Callback):
    """A user's callback taking the record as an argument (no on_train_step_end at all)."""

    def __init__(self):
        self.records = []

    def on_train_step_record(self, record, run_context):
        self.records.append(record)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_logs_inside_a_list_equal_the_callbacks_given_one_by_one(tmp_path, monkeypatch):
    model(lr=0.05).train(2, dataset(), callbacks=loggers(tmp_path / "alone"))
    built = []
    real = _recorder.Recorder.record
    monkeypatch.setattr(_recorder.Recorder, "record",
                        lambda self, p: built.append(p["cur_step_num"]) or real(self, p))
    seen, takes = Seen(), Takes()
    model(lr=0.05).train(2, dataset(), callbacks=[
        CallbackList([*loggers(tmp_path / "list"), seen, takes])])
    for name in ("loss.csv", "params.csv", "grad_norm.csv"):
        assert without_time(tmp_path / "list" / name) == without_time(tmp_path / "alone" / name)
    assert built == list(range(1, 9))          # one record a step for the five callbacks
    assert [r.step for r in takes.records] == list(range(1, 9))
    assert all(a is b for a, b in zip(seen.records, takes.records))   # the same record
    loss = read_csv(tmp_path / "list", "loss.csv")
    assert [r.loss for r in takes.records] == pytest.approx(loss["loss"].tolist(), rel=1e-7)
    assert [r.lr for r in takes.records] == pytest.approx([0.05] * 8)
    assert [r.epoch_end for r in takes.records] == [False, False, False, True] * 2
    norms = read_csv(tmp_path / "list", "grad_norm.csv")            # every 3rd and epoch ends
    by_step = {r.step: r.grad_norm for r in takes.records}
    assert [by_step[s] for s in norms["step"]] == pytest.approx(norms["grad_norm"].tolist())


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_records_count_the_runs_steps_after_initial_epoch(tmp_path):
    takes = Takes()
    model().train(3, dataset(), callbacks=[CallbackList([takes])], initial_epoch=1)
    assert [(r.step, r.epoch) for r in takes.records] == \
        [(s, 2 + (s - 5) // 4) for s in range(5, 13)]   # MindSpore's own count restarts at 1


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_outside_a_list_there_is_no_record(tmp_path):
    seen = Seen()
    model().train(1, dataset(), callbacks=[seen])
    assert seen.records == [None] * 4


def test_evaluations_reach_the_callbacks_mindspore_would_give_them(run_context, tmp_path):
    class Evals(Callback):
        def __init__(self):
            self.calls = 0

        def on_eval_end(self, run_context):
            self.calls += 1

    class LossMonitorLike(Evals):   # what Model.fit leaves out, by name
        pass
    LossMonitorLike.__name__ = "LossMonitor"
    mine, named = Evals(), LossMonitorLike()
    cbs = CallbackList([named, mine, EarlyStopping("loss", mode="min")])
    ctx = run_context()
    with cbs:
        with cbs:                   # Model.fit enters the list again for an evaluation
            cbs.on_eval_end(ctx)
    assert (mine.calls, named.calls) == (1, 0)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_every_part_is_entered_and_left_once_in_reverse_order(tmp_path):
    order = []

    class Ctx(Callback):
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            order.append(f"enter {self.name}")
            return self

        def __exit__(self, *exc):
            order.append(f"exit {self.name}")

    model().train(1, dataset(), callbacks=[CallbackList([Ctx("a"), Ctx("b")])])
    assert order == ["enter a", "enter b", "exit b", "exit a"]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_checkpoint_inside_the_list_flushes_the_logs_first(tmp_path):
    loss = LossMonitor(tmp_path)
    model().train(2, dataset(), callbacks=[CallbackList([
        loss, Checkpoint(tmp_path, every_epochs=1, min_interval_s=0, flush=[loss])])])
    assert read_csv(tmp_path, "loss.csv")["step"].tolist() == list(range(1, 9))
    assert read_csv(tmp_path, "checkpoints.csv")["step"].tolist() == [4, 8]


def test_a_list_refuses_what_is_not_a_callback():
    with pytest.raises(TypeError, match="CallbackList takes mindspore.train.Callback instances"):
        CallbackList([LossMonitor("x"), print])


def test_the_recorders_fast_record_equals_the_dataclasses():
    # the Recorder sets the record's slots itself (faster than the dataclass's
    # __init__ at every step): one value per field, in the dataclass's order, or this fails
    values = (7, 2, True, 0.5, 1.5, {"mse": 0.25}, 0.01, {"w": (1.0, 0.0, 1.0, -1.0, 1.0)}, ("out",))
    made = _recorder.make_record(*values)
    assert made == StepRecord(*values)
    assert type(made) is StepRecord
    with pytest.raises(AttributeError):   # frozen as the dataclass is
        made.step = 8
