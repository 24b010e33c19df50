"""Multi-task learning: one shared body, a regression head and a classification head."""
from dataclasses import dataclass

import numpy as np
from mindspore import nn, ops
from mindspore import dtype as mstype
from mindspore.train import Metric

from .. import ConfigError, Experiment

CLASSES = 3


def make_tasks(n, noise, rng):
    """Points ``x ~ N(0, I_2)`` with two targets.

    Regression: ``sin(2 x0) + 0.5 x1`` plus Gaussian ``noise``.
    Classification (3 classes): 0 inside the circle of radius 1, else 1
    for ``x0 < 0`` and 2 for ``x0 >= 0``. Returns ``(x float32 (n, 2),
    y float32 (n, 2))``: ``y[:, 0]`` the regression target, ``y[:, 1]``
    the class index.
    """
    x = rng.normal(0, 1, (n, 2))
    target = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + rng.normal(0, noise, n)
    label = np.where(np.hypot(x[:, 0], x[:, 1]) < 1, 0, np.where(x[:, 0] < 0, 1, 2))
    return x.astype(np.float32), np.stack([target, label], axis=1).astype(np.float32)


class MultitaskLoss(nn.Cell):
    """``regression_weight * MSE + classification_weight * cross-entropy``.

    ``construct(output, y)`` returns ``(total, regression, classification)``
    (each task's weighted term: the two add up to the total).
    """

    loss_components = ("regression", "classification")

    def __init__(self, regression_weight=1.0, classification_weight=1.0):
        super().__init__()
        self.w_reg, self.w_cls = float(regression_weight), float(classification_weight)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, output, y):
        reg = ops.mean(ops.square(output[:, 0] - y[:, 0]))
        cls = self.ce(output[:, 1:], ops.cast(y[:, 1], mstype.int32))
        reg, cls = self.w_reg * reg, self.w_cls * cls
        return reg + cls, reg, cls


class TotalLoss(nn.Cell):
    """The total of :class:`MultitaskLoss` alone (a loss_fn for eval)."""

    def __init__(self, parts):
        super().__init__()
        self.parts = parts

    def construct(self, output, y):
        return self.parts(output, y)[0]


class MultitaskNet(nn.Cell):
    """``net`` and :class:`MultitaskLoss` on one batch: ``(total, regression, classification)``."""

    loss_components = MultitaskLoss.loss_components

    def __init__(self, net, loss):
        super().__init__(auto_prefix=False)  # the network's own parameter names
        self.net, self.loss = net, loss

    def construct(self, x, y):
        return self.loss(self.net(x), y)


class TaskMSE(Metric):
    """Mean squared error of the regression head (output column 0)."""

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self._sum, self._count = 0.0, 0

    def update(self, *inputs):
        pred, y = self._convert_data(inputs[0]), self._convert_data(inputs[1])
        self._sum += float(np.sum((pred[:, 0] - y[:, 0]) ** 2))
        self._count += len(y)

    def eval(self):
        return self._sum / max(self._count, 1)


class TaskAccuracy(TaskMSE):
    """Accuracy of the classification head (output columns 1:)."""

    def update(self, *inputs):
        pred, y = self._convert_data(inputs[0]), self._convert_data(inputs[1])
        self._sum += float(np.sum(pred[:, 1:].argmax(axis=1) == y[:, 1].astype(int)))
        self._count += len(y)


class Multitask(Experiment):
    """Multi-task: a shared MLP body, a regression and a 3-class classification head.

    The loss is ``regression_weight * mse + classification_weight *
    cross-entropy``; loss.csv logs both weighted terms (``regression``,
    ``classification``) next to their sum ``loss``. eval.csv has
    ``regression_mse`` (noise floor: ``noise**2`` = 0.0025) and
    ``classification_accuracy``; the defaults reach ``regression_mse <
    0.02`` and ``classification_accuracy > 0.95``.
    """

    name = "multitask"
    columns = ("x", "y")
    loss_components = MultitaskLoss.loss_components

    @dataclass
    class Config(Experiment.Config):
        samples: int = 2048
        """training points"""
        eval_samples: int = 1024
        """evaluation points (a separate draw)"""
        noise: float = 0.05
        """standard deviation of the regression target's noise"""
        hidden: int = 64
        """units per shared hidden layer"""
        layers: int = 2
        """shared hidden layers"""
        regression_weight: float = 1.0
        """weight of the regression head's mean squared error in the loss"""
        classification_weight: float = 1.0
        """weight of the classification head's cross-entropy in the loss"""
        epochs: int = 30
        batch_size: int = 64
        optimizer: str = "adam"
        lr: float = 0.005
        lr_schedule: str = "cosine"

    def source(self, split):
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, 0 if split == "train" else 1])
        return make_tasks(cfg.samples if split == "train" else cfg.eval_samples, cfg.noise, rng)

    def network(self):
        from ._nets import TwoHeadNet
        return TwoHeadNet(2, CLASSES, hidden=self.config.hidden, layers=self.config.layers)

    def _parts(self):
        return MultitaskLoss(self.config.regression_weight, self.config.classification_weight)

    def loss_fn(self):
        return TotalLoss(self._parts())

    def loss_network(self, net):
        return MultitaskNet(net, self._parts())

    def metrics(self):
        return {"regression_mse": TaskMSE(), "classification_accuracy": TaskAccuracy()}

    def figures(self, network, split):
        """Both heads: predicted vs true regression target, and the class map."""
        from ._figures import figure, predict, sample
        x, y = sample(self.source(split), 400)
        out = predict(network, x)
        reg = figure(3.2, 3.0)
        ax = reg.add_subplot()
        ax.scatter(y[:, 0], out[:, 0], s=5, alpha=0.5)
        ax.plot([y[:, 0].min(), y[:, 0].max()], [y[:, 0].min(), y[:, 0].max()], color="gray",
                linewidth=0.8)
        ax.set(xlabel="true", ylabel="predicted", title="regression head")
        cls = figure(3.2, 3.0)
        cax = cls.add_subplot()
        cax.scatter(x[:, 0], x[:, 1], c=out[:, 1:].argmax(1), cmap="viridis", s=5, vmin=0,
                    vmax=CLASSES - 1)
        cax.set(xlabel="x0", ylabel="x1", title="classification head (predicted class)")
        return {"regression": reg, "classification": cls}

    def validate(self):
        cfg = self.config
        for name in ("regression_weight", "classification_weight", "noise"):
            if getattr(cfg, name) < 0:
                raise ConfigError(f"config field {name!r} must be a number >= 0. "
                                  f"Received: {name}={getattr(cfg, name)!r}", field=name)
        for name in ("hidden", "layers", "samples", "eval_samples"):
            if getattr(cfg, name) < 1:
                raise ConfigError(f"config field {name!r} must be an integer >= 1. "
                                  f"Received: {name}={getattr(cfg, name)!r}", field=name)
