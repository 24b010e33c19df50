"""The seed tutorial: one Dense(1, 1) layer learns y = 2x."""
from dataclasses import dataclass

import numpy as np
from .. import Experiment
# The networks live in _nets.py: AMP O1 rewrites a network from its module's
# source as a standalone file, where a relative import cannot run.
from ._nets import MinimalNet  # noqa: F401  (also importable from here)


class Linear(Experiment):
    """Learn y = 2x (+ N(0, 0.01) noise) with one Dense(1, 1) layer."""

    name = "linear"
    columns = ("x", "y")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 100
        """training points x in [0, 1)"""
        slope: float = 2.0
        """the true weight w of y = w x"""
        noise: float = 0.01
        """standard deviation of the noise added to y"""
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

    def figures(self, network, split):
        """The fitted line over the training data (the seed tutorial's picture)."""
        from ._figures import figure, predict
        x, y = self.source("train")
        grid = np.linspace(0, 1, 20, dtype=np.float32).reshape(-1, 1)
        fig = figure()
        ax = fig.add_subplot()
        ax.scatter(x[:, 0], y[:, 0], s=8, alpha=0.6, label="data")
        ax.plot(grid[:, 0], predict(network, grid)[:, 0], color="C1", label="fitted line")
        ax.set(xlabel="x", ylabel="y", title="fit")
        ax.legend()
        return {"fit": fig}

    def targets(self):
        return {"dense.weight": self.config.slope, "dense.bias": 0.0}
