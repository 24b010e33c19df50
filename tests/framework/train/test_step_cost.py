"""What a tracked step costs, checked without a clock: each step is read once
for every callback (the Model path of ``track``), and ``run.step`` checks the
kind of its values once, not at every step (the loop path)."""
import csv
import os

import numpy as np
import pytest


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _parts():
    from mindspore import nn
    from mindexp.callbacks import TrainStep
    net = nn.Dense(2, 1)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    return net, optimizer, TrainStep(nn.WithLossCell(net, nn.MSELoss()), optimizer)


def test_run_callbacks_read_each_step_once_for_every_callback(tmp_path, ms_graph, monkeypatch):
    """One CallbackList: the step's record is made once (not once per monitor)
    and a callback of the user's own reads it, as in an experiment's run."""
    from mindspore.train import Callback, Model
    import mindexp
    from mindexp.callbacks import StepRecord, _recorder
    from mindexp.define.data import make_dataset
    made = []
    record = _recorder.Recorder.record
    monkeypatch.setattr(_recorder.Recorder, "record",
                        lambda self, cb_params: made.append(1) or record(self, cb_params))

    class Probe(Callback):
        seen = []

        def on_train_step_end(self, run_context):
            rec = StepRecord.of(run_context)
            self.seen.append(None if rec is None else (rec.step, rec.loss, rec.grad_norm))

    x = np.random.default_rng(0).random((24, 2), dtype=np.float32)
    with mindexp.track(str(tmp_path), "model", {"lr": 0.01}) as run:
        model = Model(_parts()[2])
        data = make_dataset((x, x.sum(axis=1, keepdims=True)), ("x", "y"), batch_size=8,
                            shuffle=False, seed=0)
        model.train(2, data, callbacks=run.callbacks(model, Probe()), dataset_sink_mode=False)
    loss = _rows(os.path.join(run.dir, "loss.csv"))
    norms = _rows(os.path.join(run.dir, "grad_norm.csv"))
    assert len(made) == 6  # 2 epochs x 3 batches: one record a step for all the monitors
    assert [s[0] for s in Probe.seen] == list(range(1, 7))
    assert [s[1] for s in Probe.seen] == pytest.approx([float(r["loss"]) for r in loss])
    assert [s[2] for s in Probe.seen] == pytest.approx([float(r["grad_norm"]) for r in norms])


def test_run_step_checks_its_values_kind_once_and_again_when_it_changes(
        tmp_path, ms_graph, monkeypatch):
    """A loop's values are read without a check after the first step of their
    kind; a value of another kind (a float, a numpy number, a Tensor of more
    than one element) is still read right, as ``to_float`` reads it."""
    from mindspore import Tensor
    import mindexp
    from mindexp.callbacks import _common
    checks = []
    readable = _common.item_readable
    monkeypatch.setattr(_common, "item_readable", lambda v: checks.append(1) or readable(v))
    net = _parts()[0]
    losses = [Tensor(np.float32(0.5 + i)) for i in range(20)] + [
        Tensor(np.array([9.5, 1.0], np.float32)), 7.25, np.float64(8.5)]
    with mindexp.track(str(tmp_path), "loop", {}) as run:
        for i, loss in enumerate(losses):
            run.step(loss, net=net, grad_norm=Tensor(np.float32(i)), extra=Tensor(np.float32(-i)))
            if i == 19:
                assert len(checks) <= 4, "the kind of a step's values is checked at every step"
    loss = _rows(os.path.join(run.dir, "loss.csv"))
    norms = _rows(os.path.join(run.dir, "grad_norm.csv"))
    assert [float(r["loss"]) for r in loss] == [0.5 + i for i in range(20)] + [9.5, 7.25, 8.5]
    assert [float(r["extra"]) for r in loss] == [-float(i) for i in range(23)]
    assert [float(r["grad_norm"]) for r in norms] == [float(i) for i in range(23)]
