"""The seed tutorial: one Dense(1, 1) layer learns y = 2x."""
from dataclasses import dataclass

import numpy as np
from mindspore import nn

from framework import Experiment


class MinimalNet(nn.Cell):
    """The seed's network: a single fully connected layer, 1 in, 1 out."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")

    def construct(self, x):
        return self.dense(x)


class Linear(Experiment):
    """Learn y = 2x (+ N(0, 0.01) noise) with one Dense(1, 1) layer."""

    name = "linear"
    columns = ("x", "y")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 100
        slope: float = 2.0
        noise: float = 0.01
        epochs: int = 30
        batch_size: int = 10
        lr: float = 0.2

    def source(self, split):
        if split != "train":
            return None
        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        x = rng.random((cfg.samples, 1), dtype=np.float32)
        y = cfg.slope * x + rng.normal(0, cfg.noise, size=(cfg.samples, 1))
        return x, y.astype(np.float32)

    def network(self):
        return MinimalNet()

    def targets(self):
        return {"dense.weight": self.config.slope, "dense.bias": 0.0}
