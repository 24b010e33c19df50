"""Two interleaved 2-D spirals, classified by an MLP with softmax cross-entropy."""
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .. import ConfigError, Experiment


def make_spirals(n_per_class, turns, noise, rng):
    """Points of two spiral arms (class 0 and 1, the second rotated by pi).

    Returns ``(xy float32 (2n, 2), labels int32 (2n,))``.
    """
    t = np.sqrt(rng.uniform(0, 1, n_per_class)) * turns * 2 * np.pi
    arms, labels = [], []
    for label in (0, 1):
        angle = t + label * np.pi
        xy = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) / (turns * 2 * np.pi)
        arms.append(xy + rng.normal(0, noise, xy.shape))
        labels.append(np.full(n_per_class, label))
    return (np.concatenate(arms).astype(np.float32),
            np.concatenate(labels).astype(np.int32))


class Spirals(Experiment):
    """Two-class 2-D spirals: an MLP with softmax cross-entropy, eval accuracy.

    Labels are sparse int32 class indices, the loss is
    ``SoftmaxCrossEntropyWithLogits(sparse=True)`` and ``accuracy`` in
    eval.csv is MindSpore's ``Accuracy`` on a separately drawn eval set.
    """

    name = "spirals"
    columns = ("xy", "label")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 1024
        """training points (both classes)"""
        eval_samples: int = 512
        """evaluation points (a separate draw)"""
        turns: float = 1.5
        """turns of each spiral arm"""
        noise: float = 0.02
        """standard deviation of the noise added to the points"""
        hidden: int = 64
        """units per hidden layer"""
        layers: int = 2
        """hidden layers"""
        epochs: int = 40
        batch_size: int = 64
        optimizer: str = "adam"
        lr: float = 0.01
        loss: str = "cross_entropy"
        metrics: Tuple[str, ...] = ("accuracy", "loss")

    def source(self, split):
        cfg = self.config
        n = cfg.samples if split == "train" else cfg.eval_samples
        # A different stream for eval: the eval points are new draws, not the train set.
        rng = np.random.default_rng([cfg.seed, 0 if split == "train" else 1])
        return make_spirals(n // 2, cfg.turns, cfg.noise, rng)

    def network(self):
        from ._nets import MLP
        return MLP(2, 2, hidden=self.config.hidden, layers=self.config.layers, activation="relu")

    def figures(self, network, split):
        """The decision boundary over the points of ``split``."""
        from ._figures import figure, predict, sample
        xy, labels = sample(self.source(split), 400)
        lo, hi = xy.min(0) - 0.1, xy.max(0) + 0.1
        gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 80), np.linspace(lo[1], hi[1], 80))
        grid = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)
        logits = predict(network, grid)
        fig = figure(3.6, 3.4)
        ax = fig.add_subplot()
        ax.contourf(gx, gy, logits.argmax(1).reshape(gx.shape), levels=[-0.5, 0.5, 1.5],
                    colors=["#c6dbef", "#fdd0a2"])
        ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="coolwarm", s=5)
        ax.set(title=f"decision boundary ({split})", aspect="equal")
        return {"boundary": fig}

    def validate(self):
        if self.config.loss != "cross_entropy":
            raise ConfigError("config field 'loss' must be cross_entropy for spirals (the labels "
                              f"are class indices). Received: loss={self.config.loss!r}",
                              field="loss")
