"""LossMonitor: the training loss (and learning rate) of every step to loss.csv."""
from __future__ import annotations

import os
import time
from math import isfinite
from typing import TYPE_CHECKING, Any, Sequence

from ._common import check_directory, check_every, check_steps_per_epoch, log_path
from ._log_callback import LogCallback
from ._recorder import Recorder, check_lr
from . import schema
from .csv_log import CsvLog
from .step_record import StepRecord

__all__ = ["LossMonitor"]

if TYPE_CHECKING:
    from mindspore.train import RunContext


class LossMonitor(LogCallback):
    """Write ``step,epoch,loss,lr,time_s`` to ``<directory>/loss.csv``.

    Works with a network that returns the loss or a tuple whose first item
    is the loss. The last step of every epoch is always written. A NaN or
    infinite loss (checked on written steps) stops training at that step
    (``run_context.request_stop()``, so every callback still sees the step
    and the logs stay consistent) and is kept in ``stop_reason``. Then,
    with ``on_nan="raise"`` (the default), the end of training closes the
    log and raises ``FloatingPointError`` naming the step, so a plain
    ``model.train(...)`` cannot return as if all went well; with
    ``on_nan="stop"`` training just ends (a runner reads ``stop_reason`` to
    mark the run diverged). MindSpore's own LossMonitor misses NaN for tuple
    outputs.

    Loss components: with a train network that names them (``TrainStep``
    over a loss network returning ``(total, c1, ..., ck)``, see its
    ``components``), each component is one more column after ``time_s``,
    written on the same steps as ``loss`` (the optimised total).

    Args:
        directory: folder of ``loss.csv`` (created if missing).
        every: write every N-th global step (and each epoch's last step).
        all_ranks: ranks other than 0 write ``loss.rankN.csv`` instead of
            nothing.
        time_offset: seconds added to ``time_s`` (a resumed run continues
            its clock).
        on_nan: ``"raise"`` or ``"stop"``: what a non-finite loss does once
            training has stopped.
        lr: the learning rate the caller gave the optimizer, to log as is: a
            number or a per-step sequence (step 1 first; its last value holds
            after its end). None (a plain script): read from the optimizer on
            each logged step.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
        append: continue an existing ``loss.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
    """

    ON_NAN = ("raise", "stop")

    def __init__(self, directory: str | os.PathLike[str], every: int = 1, all_ranks: bool = False,
                 time_offset: float = 0.0, on_nan: str = "raise",
                 steps_per_epoch: int | None = None,
                 lr: float | Sequence[float] | None = None,
                 append: bool = False) -> None:
        super().__init__()
        self.append = bool(append)
        if on_nan not in self.ON_NAN:
            raise ValueError(f"`on_nan` must be one of {', '.join(map(repr, self.ON_NAN))}. "
                             f"Received: on_nan={on_nan!r}")
        self.on_nan = on_nan
        self.directory = check_directory(directory)
        self.every = check_every("every", every)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.lr = check_lr(lr)
        self.all_ranks = bool(all_ranks)
        self.time_offset = float(time_offset)
        self.stop_reason: str | None = None
        self._non_finite: tuple[int, float | None] | None = None
        self.last_loss: float | None = None
        self.last_step = 0
        self._log: CsvLog | None = None
        self._recorder = Recorder(self.steps_per_epoch, self.lr)
        self._t0: float | None = None
        self.last_components: dict[str, Any] = {}

    def on_train_begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        path = log_path(self.directory, schema.LOSS.filename, self.all_ranks)
        self._recorder.begin(cb_params)
        columns = schema.LOSS.columns + self._recorder.component_names
        self._log = self._checked_log(path, columns) if path else None
        if self._t0 is None:  # a second Model.train on the same monitor keeps the clock
            self._t0 = time.monotonic()
        self.stop_reason = None

    def on_train_step_end(self, run_context: RunContext) -> None:
        self._record_when_due(run_context)

    def on_train_step_record(self, record: StepRecord, run_context: RunContext) -> None:
        """Write the step's row when due (see :class:`StepRecord`)."""
        if record.step % self.every and not record.epoch_end:
            return
        step, loss, components = record.step, record.loss, record.components
        self.last_loss, self.last_step = loss, step
        if components:
            self.last_components = dict(components)
        if self._log is not None:
            assert self._t0 is not None  # set at train begin
            elapsed = time.monotonic() - self._t0 + self.time_offset
            # its own lr when given one (a list's lr may have been given another)
            lr = self._recorder.lr_at(step) if self.lr is not None else record.lr
            row = (step, record.epoch, loss, "" if lr is None else lr, round(elapsed, 6))
            self._log.write(row + tuple(components.values()) if components else row)
        if loss is None or not isfinite(loss):   # is_finite, inline: every logged step
            self.stop_reason = f"loss is {loss} at step {step}"
            self._non_finite = (step, loss)
            run_context.request_stop()

    def on_train_end(self, run_context: RunContext) -> None:
        self.close()
        if self.stop_reason and self.on_nan == "raise" and self._non_finite is not None:
            step, loss = self._non_finite
            raise FloatingPointError(
                f"LossMonitor: the loss is not finite at step {step}; training stopped there "
                f"and {self.directory} holds the logs up to that step. Lower the learning rate "
                "or clip gradients; LossMonitor(..., on_nan='stop') stops without raising. "
                f"Received: loss={loss} at step {step}")
