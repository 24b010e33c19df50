"""Metrics MindSpore does not ship, as ``mindspore.train.Metric`` subclasses.

Imported lazily by :func:`mindexp.define.metrics.build_metrics` (it imports
mindspore).
"""
from typing import Any
import math

import numpy as np
from mindspore.train import MSE, Metric

from .._mindspore import metric_input

__all__ = ["MaxError", "RMSE"]


class RMSE(MSE):
    """Root mean squared error: the square root of MindSpore's ``MSE``."""

    def eval(self) -> float:
        """sqrt(mean((y_pred - y) ** 2)) over all batches since :meth:`clear`."""
        return math.sqrt(super().eval())


class MaxError(Metric):
    """The largest absolute difference between prediction and label (L-inf error).

    The error to a known exact solution, e.g. a PINN's u(x) vs. sin(pi x).
    """

    def __init__(self) -> None:
        super().__init__()
        self.clear()

    def clear(self) -> None:
        """Forget the batches seen so far."""
        self._max = 0.0
        self._samples = 0

    def update(self, *inputs: Any) -> None:
        """Fold in one batch: ``update(y_pred, y)`` with equally many elements."""
        if len(inputs) != 2:
            raise ValueError("MaxError.update needs 2 inputs (prediction, label). "
                             f"Received: {len(inputs)} inputs")
        y_pred = metric_input(self, inputs[0])
        y = metric_input(self, inputs[1])
        error = np.abs(y_pred.astype(np.float64) - y.reshape(y_pred.shape))
        self._max = max(self._max, float(error.max()))
        self._samples += y.shape[0]

    def eval(self) -> float:
        """The largest absolute error over all batches since :meth:`clear`."""
        if not self._samples:
            raise RuntimeError("MaxError has seen no samples: call update() before eval()")
        return self._max
