"""EarlyStopping: stop when a monitored value stops improving."""
from __future__ import annotations

import math
from typing import Any, Mapping

from mindspore.train import Callback, RunContext

from ._common import monitored_value
from .direction import metric_direction
from .eval_loss import EVAL_LOSS, check_loss_metric

__all__ = ["EarlyStopping"]


class EarlyStopping(Callback):
    """Stop training after ``patience`` epochs without improvement.

    Checked at each epoch's end. ``monitor="loss"`` watches the last
    training loss of the epoch; any other name is read from the eval
    results ``Model.fit`` provides (e.g. ``"accuracy"``, also spelled
    ``"eval_accuracy"``); epochs without evaluation are skipped.
    ``"eval_loss"`` is the Model's ``"loss"`` metric, mindexp's
    ``EvalLoss`` (the eval set's loss; MindSpore's own ``eval_loss`` is the
    last batch's), refused at train begin when the Model lacks it. ``mode`` is
    ``"min"`` or ``"max"``; None follows the name (``loss``, ``eval_loss``,
    ``eval_mae``: min; ``eval_accuracy``, ``f1``: max; see
    :mod:`mindexp.callbacks.direction`) and a name that does not say is
    refused (a wrong default silently keeps the worst model).

    Args:
        monitor: ``"loss"`` or an eval metric name.
        patience: epochs without improvement before stopping.
        min_delta: smallest change that counts as an improvement.
        mode: ``"min"`` or ``"max"``; None: from the name of ``monitor``.
    """

    def __init__(self, monitor: str = "loss", patience: int = 5, min_delta: float = 0.0,
                 mode: str | None = None) -> None:
        super().__init__()
        mode = metric_direction(monitor, mode)
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"`patience` must be an integer >= 1. Received: patience={patience!r}")
        if not isinstance(min_delta, (int, float)) or min_delta < 0:
            raise ValueError(f"`min_delta` must be a number >= 0. Received: min_delta={min_delta!r}")
        self.monitor, self.patience, self.min_delta, self.mode = monitor, patience, float(min_delta), mode
        self.best: float | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None
        self.stop_reason: str | None = None

    def on_train_begin(self, run_context: RunContext) -> None:
        if self.monitor == EVAL_LOSS:
            check_loss_metric(f"EarlyStopping(monitor={EVAL_LOSS!r})")

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        if self.update(self._value(cb_params)):
            self.stopped_epoch = int(cb_params.cur_epoch_num)
            self.stop_reason = (f"{self.monitor} did not improve on {self.best:.6g} for "
                                f"{self.patience} epochs")
            run_context.request_stop()

    def update(self, value: float | None) -> bool:
        """Take one epoch's value (None or NaN: skipped); True when patience ran out.

        Also replays logged values into a fresh instance (exact resume).
        """
        if value is None or math.isnan(value):
            return False
        if self.best is None or self._improved(value):
            self.best, self.wait = value, 0
            return False
        self.wait += 1
        return self.wait >= self.patience

    def _improved(self, value: float) -> bool:
        assert self.best is not None  # update() sets it first
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def _value(self, cb_params: Any) -> float | None:
        return monitored_value(cb_params, self.monitor)
