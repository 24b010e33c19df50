"""The benchmark workloads of issue 7, shared by the MindSpore and the Lightning side.

Imports only numpy and the standard library: the Lightning side runs this
module in its own venv, without MindSpore or mindexp.
"""
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Workload:
    key: str             # W1b, W2, FB
    title: str
    kind: str            # "linear" (Dense(1,1) on y = 2x) or "mlp" (1-256-256-1 on sin(3x))
    samples: int
    batch: int
    epochs: int
    optimizer: str       # sgd | adam
    lr: float

    @property
    def steps_per_epoch(self):
        return self.samples // self.batch   # drop_last everywhere: static shapes

    @property
    def steps(self):
        return self.steps_per_epoch * self.epochs

    def to_dict(self):
        return asdict(self)


FULL = {
    "W1b": Workload("W1b", "Dense(1,1), 100 samples, batch 10, 100 epochs, SGD",
                    "linear", 100, 10, 100, "sgd", 0.2),
    "W2": Workload("W2", "MLP 1-256-256-1 ReLU, sin(3x), 20k samples, batch 64, 3 epochs, Adam",
                   "mlp", 20_000, 64, 3, "adam", 1e-3),
    "FB": Workload("FB", "seed full batch: Dense(1,1), 100 samples, batch 100, 300 epochs, SGD",
                   "linear", 100, 100, 300, "sgd", 0.2),
}

# --quick: same shapes, few steps (the unit test only checks that it runs)
QUICK = {
    "W1b": Workload("W1b", FULL["W1b"].title.replace("100 epochs", "5 epochs"),
                    "linear", 100, 10, 5, "sgd", 0.2),
    "W2": Workload("W2", FULL["W2"].title.replace("20k samples", "1,280 samples")
                   .replace("3 epochs", "1 epoch"), "mlp", 1_280, 64, 1, "adam", 1e-3),
    "FB": Workload("FB", FULL["FB"].title.replace("300 epochs", "20 epochs"),
                   "linear", 100, 100, 20, "sgd", 0.2),
}


def data(w, seed=0):
    """The training arrays ``(x, y)`` of a workload, float32, shape (n, 1)."""
    return make_data(w.kind, w.samples, seed)


def make_data(kind, samples, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "linear":   # the seed: experiments/linear.py's data
        x = rng.random((samples, 1), dtype=np.float32)
        y = 2.0 * x + rng.normal(0, 0.01, size=(samples, 1))
    else:
        x = rng.uniform(-1.0, 1.0, size=(samples, 1)).astype(np.float32)
        y = np.sin(3.0 * x)
    return x.astype(np.float32), y.astype(np.float32)


def steps_per_s(steps, seconds):
    """Rate over the ``steps`` steps after the first one (compile excluded)."""
    return steps / seconds if seconds and seconds > 0 else float("nan")
