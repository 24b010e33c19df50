"""The callbacks' record rules on real Model.fit/Model.train runs in a plain
script (no framework): throughput with evaluations, eval rows of complete
finite epochs only, metric names, GradNormMonitor's check before any file,
LossMonitor raising on NaN, TrainStep.model with metrics."""
import numpy as np
import pytest

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Accuracy, Callback, Model

from mindexp.callbacks import (Checkpoint, EvalLoss, EvalMonitor, GradNormMonitor, LossMonitor,
                               ParameterTracker, Timer, TrainStep, list_checkpoints, read_csv)

ms.set_context(mode=ms.GRAPH_MODE)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 2)).astype(np.float32)
LABELS = (X[:, 0] + X[:, 1] > 0).astype(np.int32)


def dataset(x=X, y=LABELS, batch=16):
    return ds.GeneratorDataset(list(zip(x, y)), ["x", "label"], shuffle=False).batch(batch)


def classifier():
    ms.set_seed(0)
    return nn.Dense(2, 2)


def loss_fn():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def model_with_metrics():
    net = classifier()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.05)
    return net, TrainStep.model(net, loss_fn(), opt,
                                metrics={"accuracy": Accuracy(), "loss": EvalLoss()})


class StopAt(Callback):
    def __init__(self, step):
        super().__init__()
        self.step, self.seen = step, 0

    def on_train_step_end(self, run_context):
        self.seen += 1
        if self.seen == self.step:
            run_context.request_stop()


def loss_csv_rate(directory):
    loss = read_csv(directory, "loss.csv")
    return (loss.step.iloc[-1] - loss.step.iloc[0]) / (loss.time_s.iloc[-1] - loss.time_s.iloc[0])


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_trainstep_model_with_metrics_fits_with_every_callback(tmp_path):
    net, model = model_with_metrics()
    timer = Timer()
    # A slow evaluation (one sample a batch) between short epochs: before the
    # fix the Timer stopped at the first evaluation and reported several times
    # the real rate.
    eval_ds = dataset(batch=1)
    model.fit(4, dataset(), eval_ds, callbacks=[
        timer, LossMonitor(tmp_path), ParameterTracker(tmp_path), GradNormMonitor(tmp_path),
        EvalMonitor(tmp_path, ["accuracy", "eval_loss"]), Checkpoint(tmp_path)])
    evals = read_csv(tmp_path, "eval.csv")
    assert evals.epoch.tolist() == [1, 2, 3, 4] and evals.step.tolist() == [4, 8, 12, 16]
    logits = net(ms.Tensor(X)).asnumpy()
    assert evals.accuracy.iloc[-1] == pytest.approx(np.mean(logits.argmax(1) == LABELS))
    assert read_csv(tmp_path, "grad_norm.csv").step.tolist() == list(range(1, 17))
    assert timer.steps_per_s == pytest.approx(loss_csv_rate(tmp_path), rel=0.15)


def test_eval_monitor_rejects_a_name_model_does_not_produce_at_train_begin(tmp_path):
    net = classifier()
    model = Model(net, loss_fn(), nn.SGD(net.trainable_params(), 0.1),
                  metrics={"accuracy": Accuracy()})
    monitor = LossMonitor(tmp_path / "logs")
    with pytest.raises(ValueError, match=r"^EvalMonitor: eval_loss is the eval set's loss only with "
                                         r"mindexp's EvalLoss.*'loss': EvalLoss\(\).*"
                                         r"The Model's metrics: accuracy$"):
        model.fit(2, dataset(), dataset(), callbacks=[monitor, EvalMonitor(tmp_path / "logs",
                                                                           ["loss"])])
    assert monitor.last_step == 0            # no step was trained
    assert not (tmp_path / "logs").exists()  # and nothing was created


def test_grad_norm_monitor_without_trainstep_is_refused_before_any_file(tmp_path):
    net = classifier()
    model = Model(net, loss_fn(), nn.SGD(net.trainable_params(), 0.1))
    logs = tmp_path / "logs"
    with pytest.raises(TypeError, match=r"TrainStep.model\(net, loss_fn, optimizer"):
        model.train(1, dataset(), callbacks=[LossMonitor(logs), ParameterTracker(logs),
                                             Checkpoint(logs), GradNormMonitor(logs)])
    assert not logs.exists()


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_loss_monitor_raises_on_nan_in_a_plain_script_with_consistent_files(tmp_path):
    net = nn.Dense(2, 1)
    x = X.copy()
    x[40] = np.float32(3e38)   # batch 3 of 16 samples: the loss overflows to inf
    y = np.zeros((64, 1), np.float32)
    data = ds.GeneratorDataset(list(zip(x, y)), ["x", "y"], shuffle=False).batch(16)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))
    with pytest.raises(FloatingPointError, match=r"not finite at step 3\b"):
        model.train(3, data, callbacks=[LossMonitor(tmp_path), ParameterTracker(tmp_path),
                                        Checkpoint(tmp_path, every_steps=1)])
    assert read_csv(tmp_path, "loss.csv").step.tolist() == [1, 2, 3]
    assert read_csv(tmp_path, "params.csv").step.max() == 3      # every log reached step 3
    assert [s for s, _, _ in list_checkpoints(tmp_path)] == [1, 2]  # NaN weights never saved


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_fit_stopped_mid_epoch_writes_no_eval_row_for_that_epoch(tmp_path):
    _, model = model_with_metrics()
    model.fit(4, dataset(), dataset(), callbacks=[
        LossMonitor(tmp_path), EvalMonitor(tmp_path, ["accuracy"]), Checkpoint(tmp_path),
        StopAt(6)])
    assert read_csv(tmp_path, "eval.csv").epoch.tolist() == [1]   # epoch 2 was cut at step 6
    assert [s for s, _, _ in list_checkpoints(tmp_path)][-1] == 6


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_fit_after_divergence_writes_no_eval_row_and_no_checkpoint(tmp_path):
    net = classifier()
    opt = nn.SGD(net.trainable_params(), 0.1)
    model = TrainStep.model(net, loss_fn(), opt, metrics={"accuracy": Accuracy()})
    x = X.copy()
    x[20] = np.float32(np.inf)   # step 2 (of 4 an epoch) in every epoch
    model.fit(3, dataset(x), dataset(), callbacks=[
        LossMonitor(tmp_path, on_nan="stop"), EvalMonitor(tmp_path, ["accuracy"]),
        Checkpoint(tmp_path, every_steps=1)])
    assert read_csv(tmp_path, "loss.csv").step.tolist() == [1, 2]
    assert not (tmp_path / "eval.csv").exists()
    assert [s for s, _, _ in list_checkpoints(tmp_path)] == [1]
