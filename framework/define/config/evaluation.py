"""When a run evaluates and with which metrics (``train/monitors.py``'s eval)."""
from dataclasses import dataclass
from typing import Tuple

from ..metrics import METRIC_NAMES
from ._fields import owns


@owns(rules={
    "eval_every": (lambda v: v >= 1, "an integer >= 1"),
    "metrics": (lambda v: set(v) <= set(METRIC_NAMES),
                f"a comma-separated list of {', '.join(METRIC_NAMES)} (empty: the experiment's "
                "choice, or loss)"),
})
@dataclass
class EvalFields:
    """The evaluation's cadence and metrics."""

    eval_every: int = 1
    """evaluate every N epochs (and after the last)"""
    metrics: Tuple[str, ...] = ()
    """eval metrics (empty: the experiment's choice, or loss)"""
