"""The MindSpore side: one workload trained five ways, in this process.

Every variant is timed the same way: from the end of the first step (graph
compile and warm-up excluded; the first output is synced with ``asnumpy``)
to the end of the last step (synced again), over ``steps - 1`` steps.

- ``hand``: a hand-written loop over ``nn.TrainOneStepCell`` (the seed's
  way), fed from the same BatchSource as mindexp (same data order, same
  indexing cost), no logging at all.
- ``model_sample``: bare ``Model(net, loss, opt).train`` over a per-sample
  ``GeneratorDataset(shuffle=True).batch(b)``: what a user writes first.
- ``model_batch``: bare ``Model.train`` over a plain GeneratorDataset of
  mindexp's batch-level source, through MindSpore's pipeline.
- ``model_fast`` (profiling only): the same over ``mindexp.define.data.make_dataset``.
- ``mindexp_off``: mindexp's own pieces (experiment network/loss/optimizer,
  ``callbacks.TrainStep`` returning the grad norm, ``exp.dataset``) in
  ``Model.train`` with no callbacks.
- ``mindexp_noop``: ``mindexp_off`` plus one callback that does nothing
  (MindSpore's own ``Callback``): the floor of MindSpore's dispatch, what
  one callback costs before it does any work.
- ``mindexp_on``: ``Experiment.run()``, the real runner with its default
  callbacks (loss+lr, parameters, grad norm every step; checkpoints).
"""
import gc
import os
import time
from dataclasses import dataclass

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from mindspore.train import Callback, Model

from mindexp import Experiment
from mindexp.define.data import BatchSource, as_arrays, make_dataset

from .workloads import steps_per_s

VARIANTS = ("hand", "model_sample", "model_batch", "mindexp_off", "mindexp_noop", "mindexp_on")


# -- the workloads as mindexp experiments -----------------------------------------
class SinMLP(Experiment):
    """W2: an MLP 1-256-256-1 (ReLU) fits sin(3x)."""

    name = "bench_sinmlp"
    columns = ("x", "y")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 20_000
        batch_size: int = 64
        epochs: int = 3
        optimizer: str = "adam"
        lr: float = 1e-3

    def source(self, split):
        if split != "train":
            return None
        from .workloads import make_data
        return make_data("mlp", self.config.samples, self.config.seed)

    def network(self):
        return nn.SequentialCell([nn.Dense(1, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(),
                                  nn.Dense(256, 1)])


class ConvNet(nn.Cell):
    """W3: Conv(1->16, 3x3) -> Conv(16->32, 3x3) -> MaxPool -> Dense(512->64) -> Dense(64->10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, pad_mode="same", has_bias=True)
        self.conv2 = nn.Conv2d(16, 32, 3, pad_mode="same", has_bias=True)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(512, 64)
        self.fc2 = nn.Dense(64, 10)

    def construct(self, x):
        x = self.pool(self.relu(self.conv2(self.relu(self.conv1(x)))))
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


class ConvImages(Experiment):
    """W3: two convolutions on synthetic 8x8 images, sparse cross-entropy, eval accuracy."""

    name = "bench_conv"
    columns = ("image", "label")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 1_344
        eval_samples: int = 256
        batch_size: int = 64
        epochs: int = 3
        optimizer: str = "adam"
        lr: float = 1e-3
        loss: str = "cross_entropy"
        metrics: tuple = ("accuracy",)

    def source(self, split):
        from .workloads import make_data
        cfg = self.config
        if split == "train":
            return make_data("conv", cfg.samples, cfg.seed)
        return make_data("conv", cfg.eval_samples, cfg.seed + 1)

    def network(self):
        return ConvNet()


def experiment(w, extra_callbacks=(), **overrides):
    """The mindexp Experiment of workload ``w``."""
    cfg = dict(samples=w.samples, batch_size=w.batch, epochs=w.epochs, optimizer=w.optimizer,
               lr=w.lr, **overrides)
    if w.kind == "conv":
        base = ConvImages
        cfg["eval_samples"] = w.eval_samples
    elif w.kind == "linear":
        from mindexp.experiments.linear import Linear as base
    else:
        base = SinMLP
    if not extra_callbacks:
        return base(**cfg)

    class Timed(base):
        def callbacks(self):
            return [*super().callbacks(), *extra_callbacks]
    Timed.name = base.experiment_name()
    Timed.__qualname__ = Timed.__name__ = base.__name__
    return Timed(**cfg)


# -- timing ------------------------------------------------------------------------
def _sync(outputs):
    while isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    if hasattr(outputs, "asnumpy"):
        outputs.asnumpy()


class StepTimer(Callback):
    """Timestamps the end of step 1 and of step ``total`` (outputs synced),
    and keeps every step-end time for a robust per-step statistic."""

    def __init__(self, total):
        super().__init__()
        self.total, self.n, self.t1, self.tn = total, 0, None, None
        self.ends = []

    def on_train_step_end(self, run_context):
        self.n += 1
        if self.n == 1 or self.n == self.total:
            _sync(run_context.original_args().net_outputs)
        now = time.perf_counter()
        self.ends.append(now)
        if self.n == 1:
            self.t1 = now
        if self.n == self.total:
            self.tn = now

    def result(self):
        if self.n != self.total or self.t1 is None or self.tn is None:
            raise RuntimeError(f"timer saw {self.n} of {self.total} steps")
        return timing(self.ends)


def timing(ends):
    """Rate over the steps after the first, and the median step time (a
    statistic that a neighbour's burst of load barely moves; it leaves out
    rare costs such as epoch-end flushes, so the rate stays the goal's)."""
    secs = ends[-1] - ends[0]
    d = np.diff(np.asarray(ends))
    return {"steps": len(ends), "timed_steps": len(ends) - 1, "seconds": secs,
            "steps_per_s": steps_per_s(len(ends) - 1, secs),
            "median_step_ms": float(np.median(d)) * 1e3 if len(d) else float("nan")}


def setup_context():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")


def _arrays(w):
    exp = experiment(w)
    return exp, as_arrays(exp.source("train"), exp.columns, "train")


def _hand_optimizer(w, params):
    if w.optimizer == "sgd":
        return nn.SGD(params, learning_rate=w.lr)
    return nn.Adam(params, learning_rate=w.lr)


def _loss(w):
    if w.kind == "conv":
        return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return nn.MSELoss()


def _eval_arrays(w):
    from .workloads import eval_data
    return eval_data(w)


def _hand_accuracy(net, arrays, batch):
    """W3's per-epoch evaluation in the hand loop: accuracy over the eval split."""
    net.set_train(False)
    x, y = arrays
    right = 0
    for i in range(0, len(x), batch):
        logits = net(Tensor(x[i:i + batch])).asnumpy()
        right += int((logits.argmax(1) == y[i:i + batch]).sum())
    net.set_train(True)
    return right / len(x)


# -- the variants -----------------------------------------------------------------
def hand(w, out=None):
    ms.set_seed(0)
    exp, arrays = _arrays(w)
    net = exp.network()
    step = nn.TrainOneStepCell(nn.WithLossCell(net, _loss(w)),
                               _hand_optimizer(w, net.trainable_params()))
    step.set_train()
    source = BatchSource(arrays, w.batch, shuffle=True, seed=0)
    evals = _eval_arrays(w)
    ends, last = [], w.steps
    for _ in range(w.epochs):
        for i in range(len(source)):
            x, y = source[i]
            loss = step(Tensor(x), Tensor(y))
            if not ends or len(ends) == last - 1:
                loss.asnumpy()
            ends.append(time.perf_counter())
        if evals is not None:
            _hand_accuracy(net, evals, w.batch)
    return timing(ends)


class _SampleSource:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


def _bare_model(w, dataset_fn):
    import mindspore.dataset as ds  # noqa: F401
    ms.set_seed(0)
    exp, arrays = _arrays(w)
    net = exp.network()
    evals = _eval_arrays(w)
    model = Model(net, _loss(w), _hand_optimizer(w, net.trainable_params()),
                  metrics={"accuracy"} if evals is not None else None)
    timer = StepTimer(w.steps)
    if evals is None:
        model.train(w.epochs, dataset_fn(arrays), callbacks=[timer], dataset_sink_mode=False)
    else:   # W3: evaluated after every epoch, as the other variants
        model.fit(w.epochs, dataset_fn(arrays), dataset_fn(evals, eval_split=True),
                  callbacks=[timer], dataset_sink_mode=False, valid_dataset_sink_mode=False)
    return timer.result()


def model_sample(w, out=None):
    import mindspore.dataset as ds

    def per_sample(arrays, eval_split=False):
        return ds.GeneratorDataset(_SampleSource(*arrays), ["x", "y"], shuffle=not eval_split) \
            .batch(w.batch, drop_remainder=not eval_split)
    return _bare_model(w, per_sample)


def model_batch(w, out=None):
    """The issue's third column: a plain GeneratorDataset over mindexp's BatchSource,
    read through MindSpore's pipeline (mindexp's own dataset skips it: mindexp_off)."""
    import mindspore.dataset as ds

    def batch_source(arrays, eval_split=False):
        return ds.GeneratorDataset(BatchSource(arrays, w.batch, shuffle=not eval_split, seed=0,
                                               drop_last=not eval_split),
                                   ["x", "y"], shuffle=False, num_parallel_workers=1,
                                   python_multiprocessing=False)
    return _bare_model(w, batch_source)


def model_fast(w, out=None):
    """Bare Model.train over framework.data.make_dataset (the pipeline-free iterator)."""
    return _bare_model(w, lambda arrays, eval_split=False: make_dataset(
        arrays, ("x", "y"), w.batch, shuffle=not eval_split, seed=0))


def mindexp_off(w, out=None, extra=()):
    """mindexp's train cell + data path, with no callbacks (see the module doc)."""
    from mindexp.callbacks import TrainStep
    from mindexp.train.session import startup_objects_frozen
    exp, arrays = _arrays(w)
    cfg = exp.config
    ms.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    net = exp.network()
    opt = exp.optimizer(net.trainable_params(), exp.learning_rate(w.steps_per_epoch))
    cell = TrainStep(exp.loss_network(net), opt, clip_grad_norm=cfg.clip_grad_norm)
    model = Model(cell)
    timer = StepTimer(w.steps)
    dataset = exp.dataset("train", arrays)
    with startup_objects_frozen():   # as the runner trains
        model.train(cfg.epochs, dataset, callbacks=[timer, *extra], dataset_sink_mode=False)
    return timer.result()


def mindexp_noop(w, out=None):
    """``mindexp_off`` with one more callback that does nothing: MindSpore's
    dispatch of its six hooks (each forwards to its old name, a no-op)."""
    return mindexp_off(w, out, extra=[Callback()])


def mindexp_on(w, out):
    timer = StepTimer(w.steps)
    run = experiment(w, extra_callbacks=[timer]).run(out=out, quiet=True)
    if run.status != "completed":
        raise RuntimeError(f"mindexp run {run.dir} ended {run.status}: {run.meta.get('error')}")
    res = timer.result()
    res["run_dir"] = run.dir
    res["csv_steps_per_s"] = _rate_from_loss_csv(run.dir)
    return res


def _rate_from_loss_csv(run_dir):
    """Cross-check: the rate from loss.csv's time_s between step 1 and the last step."""
    import csv
    with open(os.path.join(run_dir, "loss.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        return float("nan")
    t1, tn = float(rows[0]["time_s"]), float(rows[-1]["time_s"])
    return steps_per_s(int(rows[-1]["step"]) - int(rows[0]["step"]), tn - t1)


RUNNERS = {"hand": hand, "model_sample": model_sample, "model_batch": model_batch,
           "model_fast": model_fast, "mindexp_off": mindexp_off, "mindexp_noop": mindexp_noop,
           "mindexp_on": mindexp_on}


def measure(variant, w, out):
    gc.collect()
    return RUNNERS[variant](w, out)
