"""The benchmark workloads, shared by the MindSpore and the Lightning side.

Imports only numpy and the standard library: the Lightning side runs this
module in its own venv, without MindSpore or mindexp.
"""
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Workload:
    key: str             # W1b, W2, FB, W3
    title: str
    kind: str            # "linear" (Dense(1,1) on y = 2x), "mlp" (1-256-256-1 on sin(3x)),
    #                      "conv" (W3: two convolutions on 8x8 images, 10 classes, eval accuracy)
    samples: int
    batch: int
    epochs: int
    optimizer: str       # sgd | adam
    lr: float
    eval_samples: int = 0   # W3: an eval split evaluated after every epoch (accuracy)

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
    # MindSpore 2.10's CPU Conv2d(16->32) takes ~50 ms a batch here: few steps
    "W3": Workload("W3", "Conv(1-16,3x3)-Conv(16-32,3x3)-MaxPool-Dense(512-64)-Dense(64-10), "
                   "8x8 images, 1,344 samples, batch 64, 3 epochs, Adam, eval accuracy per epoch",
                   "conv", 1_344, 64, 3, "adam", 1e-3, eval_samples=256),
}
CONV_WORKLOADS = ("W3",)

# --quick: same shapes, few steps (the unit test only checks that it runs)
QUICK = {
    "W1b": Workload("W1b", FULL["W1b"].title.replace("100 epochs", "5 epochs"),
                    "linear", 100, 10, 5, "sgd", 0.2),
    "W2": Workload("W2", FULL["W2"].title.replace("20k samples", "1,280 samples")
                   .replace("3 epochs", "1 epoch"), "mlp", 1_280, 64, 1, "adam", 1e-3),
    "FB": Workload("FB", FULL["FB"].title.replace("300 epochs", "20 epochs"),
                   "linear", 100, 100, 20, "sgd", 0.2),
    "W3": Workload("W3", FULL["W3"].title.replace("1,344 samples", "256 samples")
                   .replace("3 epochs", "1 epoch"), "conv", 256, 64, 1, "adam", 1e-3,
                   eval_samples=64),
}


def data(w, seed=0):
    """The training arrays ``(x, y)`` of a workload: float32 (n, 1), or for W3
    float32 images (n, 1, 8, 8) and int32 labels (n,)."""
    return make_data(w.kind, w.samples, seed)


def eval_data(w, seed=0):
    """W3's eval split: another draw of the same images (None for the others)."""
    return make_data(w.kind, w.eval_samples, seed + 1) if w.eval_samples else None


def make_data(kind, samples, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "conv":
        return _images(samples, rng)
    if kind == "linear":   # the seed: experiments/linear.py's data
        x = rng.random((samples, 1), dtype=np.float32)
        y = 2.0 * x + rng.normal(0, 0.01, size=(samples, 1))
    else:
        x = rng.uniform(-1.0, 1.0, size=(samples, 1)).astype(np.float32)
        y = np.sin(3.0 * x)
    return x.astype(np.float32), y.astype(np.float32)


def _images(samples, rng):
    """Synthetic 8x8 digits: one fixed random pattern per class, noise and a
    random one-pixel shift (identical on both sides of the benchmark; no
    scikit-learn needed in the Lightning venv)."""
    patterns = np.random.default_rng(1234).random((10, 8, 8)) > 0.6
    labels = rng.integers(0, 10, samples).astype(np.int32)
    images = patterns[labels].astype(np.float32)
    shift = rng.integers(-1, 2, samples)
    for s in (-1, 1):
        images[shift == s] = np.roll(images[shift == s], s, axis=2)
    images += rng.normal(0, 0.2, images.shape).astype(np.float32)
    return images[:, None, :, :].astype(np.float32), labels


def steps_per_s(steps, seconds):
    """Rate over the ``steps`` steps after the first one (compile excluded)."""
    return steps / seconds if seconds and seconds > 0 else float("nan")
