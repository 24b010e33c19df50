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
    """Stop training after ``patience`` checks without improvement.

    Checked at each epoch's end; an epoch without the value (no evaluation,
    e.g. between evaluations with ``eval_every`` > 1) is not a check, and the
    stop reason then counts evaluations and names their epochs. ``monitor="loss"`` watches the last
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
        patience: checks (epochs, or evaluations for an eval metric) without
            improvement before stopping.
        min_delta: smallest change that counts as an improvement (a smaller
            one is named as such in ``stop_reason``).
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
        self.best_epoch: int | None = None
        self.wait = 0
        self.waited: list[int] = []       # the epochs of the checks since the best
        self.small_gain = False           # one of them was better, by less than min_delta
        self.stopped_epoch: int | None = None
        self.stop_reason: str | None = None

    def on_train_begin(self, run_context: RunContext) -> None:
        if self.monitor == EVAL_LOSS:
            check_loss_metric(f"EarlyStopping(monitor={EVAL_LOSS!r})")

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        epoch = int(cb_params.cur_epoch_num)
        if self.update(self._value(cb_params), epoch):
            self.stopped_epoch = epoch
            self.stop_reason = self._reason()
            run_context.request_stop()

    def update(self, value: float | None, epoch: int | None = None) -> bool:
        """Take one epoch's value (None or NaN: skipped) and its epoch number;
        True when patience ran out.

        Also replays logged values into a fresh instance (exact resume).
        """
        if value is None or math.isnan(value):
            return False
        if self.best is None or self._improved(value):
            self.best, self.best_epoch, self.wait = value, epoch, 0
            self.waited, self.small_gain = [], False
            return False
        self.wait += 1
        self.waited.append(epoch if epoch is not None else -1)
        self.small_gain |= self._better(value, self.best)
        return self.wait >= self.patience

    def _reason(self) -> str:
        """Why it stopped: checks counted as epochs when one came each epoch since
        the best, else as evaluations with their epochs (eval_every > 1); a value
        better than the best by less than min_delta is said to be one."""
        assert self.best is not None
        what = (f"improved by less than min_delta={self.min_delta:g} on {self.best:.6g}"
                if self.small_gain else f"did not improve on {self.best:.6g}")
        best_epoch = self.best_epoch
        if best_epoch is None or not self.waited or min(self.waited) < 1 \
                or self.waited[-1] - best_epoch == self.wait:
            return f"{self.monitor} {what} for {self.wait} epoch{'s' if self.wait > 1 else ''}"
        epochs = ", ".join(str(e) for e in self.waited)
        return (f"{self.monitor} {what} (epoch {self.best_epoch}) in {self.wait} "
                f"evaluations (epoch{'s' if self.wait > 1 else ''} {epochs})")

    def _improved(self, value: float) -> bool:
        assert self.best is not None  # update() sets it first
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def _better(self, value: float, than: float) -> bool:
        return value < than if self.mode == "min" else value > than

    def _value(self, cb_params: Any) -> float | None:
        return monitored_value(cb_params, self.monitor)
