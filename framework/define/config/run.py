"""The run's own fields: its seed and how long and in what batches it trains
(consumed by the session and the data pipeline)."""
from dataclasses import dataclass

from ._fields import owns


@owns(rules={
    "seed": (lambda v: 0 <= v < 2 ** 32, "an integer in [0, 2**32)"),
    # MindSpore counts epochs and steps in 32/64-bit integers: more is no run, but a crash
    "epochs": (lambda v: 1 <= v < 2 ** 31, "an integer >= 1 and < 2**31"),
    "batch_size": (lambda v: v >= 1, "an integer >= 1"),
})
@dataclass
class RunFields:
    """Seed, epochs and batch size."""

    seed: int = 0
    """seed of MindSpore, NumPy and the data shuffle"""
    epochs: int = 10
    """passes over the training set"""
    batch_size: int = 32
    """samples per step (per worker)"""
