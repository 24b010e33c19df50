"""A small MLP fits y = sin(3x) + noise; hidden=0 is a linear model that cannot."""
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .. import Experiment


class MlpSine(Experiment):
    """Fit y = sin(3x) + noise with a small MLP; --set hidden=0 shows a linear model cannot.

    Model capacity (seed 5.2): data from a non-linear function needs a
    non-linear network. Training data are noisy samples of sin(3x) on
    [-x_range, x_range]; the eval split is the noise-free curve on a grid,
    so ``mse``/``mae`` in eval.csv measure how well the function is learned.
    With ``hidden=0`` the network is one Dense(1, 1) and the eval mse stays
    near the variance a straight line cannot explain.
    """

    name = "mlp_sine"
    columns = ("x", "y")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 512
        """training points"""
        eval_samples: int = 256
        """evaluation points: the noise-free curve on a grid"""
        noise: float = 0.1
        """standard deviation of the noise added to y"""
        frequency: float = 3.0
        """f of y = sin(f x)"""
        x_range: float = 1.5
        """x drawn from [-x_range, x_range]"""
        hidden: int = 32
        """units per hidden layer (0: a linear model)"""
        layers: int = 2
        """hidden layers"""
        epochs: int = 40
        batch_size: int = 64
        optimizer: str = "adam"
        lr: float = 0.02
        metrics: Tuple[str, ...] = ("mse", "mae")

    def source(self, split):
        cfg = self.config
        if split == "eval":
            x = np.linspace(-cfg.x_range, cfg.x_range, cfg.eval_samples)[:, None]
            return x, np.sin(cfg.frequency * x)
        rng = np.random.default_rng(cfg.seed)
        x = rng.uniform(-cfg.x_range, cfg.x_range, (cfg.samples, 1))
        return x, np.sin(cfg.frequency * x) + rng.normal(0, cfg.noise, x.shape)

    def network(self):
        from ._nets import MLP
        return MLP(1, 1, hidden=self.config.hidden, layers=self.config.layers)

    def figures(self, network, split):
        """The fitted curve against the true sin(f x) and the training points."""
        from ._figures import figure, predict, sample
        cfg = self.config
        x = np.linspace(-cfg.x_range, cfg.x_range, 200, dtype=np.float32)[:, None]
        tx, ty = sample(self.source("train"), 200)
        fig = figure()
        ax = fig.add_subplot()
        ax.scatter(tx[:, 0], ty[:, 0], s=4, alpha=0.3, color="gray", label="training data")
        ax.plot(x[:, 0], np.sin(cfg.frequency * x[:, 0]), color="C0", label="truth")
        ax.plot(x[:, 0], predict(network, x)[:, 0], color="C1", label="fit")
        ax.set(xlabel="x", ylabel="y", title="fit vs truth")
        ax.legend(fontsize=7)
        return {"fit": fig}

    def validate(self):
        from .. import ConfigError
        for name in ("hidden", "layers"):
            if getattr(self.config, name) < 0:
                raise ConfigError(f"config field {name!r} must be an integer >= 0. "
                                  f"Received: {name}={getattr(self.config, name)}", field=name)
