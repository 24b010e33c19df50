"""LossMonitor: the training loss (and learning rate) of every step to loss.csv."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ._common import (check_directory, check_every, check_steps_per_epoch, first_output,
                      is_finite, item_readable, log_path, net_outputs, optimizer_of,
                      tensor_values, to_float)
from ._log_callback import LogCallback
from ._mindspore import learning_rate_of, schedule_at
from . import schema
from .csv_log import CsvLog

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
        self.lr = _check_lr(lr)
        self.all_ranks = bool(all_ranks)
        self.time_offset = float(time_offset)
        self.stop_reason: str | None = None
        self._non_finite: tuple[int, float | None] | None = None
        self.last_loss: float | None = None
        self.last_step = 0
        self._log: CsvLog | None = None
        self._lr: _LearningRate | None = None
        self._t0: float | None = None
        self._parts: tuple[tuple[str, ...], int | None] = ((), None)
        self.last_components: dict[str, Any] = {}

    def on_train_begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        path = log_path(self.directory, schema.LOSS.filename, self.all_ranks)
        self._parts = _components_of(getattr(cb_params, "train_network", None))
        columns = schema.LOSS.columns + self._parts[0]
        self._log = self._checked_log(path, columns) if path else None
        self._lr = _LearningRate(None if self.lr is not None else optimizer_of(cb_params), self.lr)
        self._float_reader = None
        if self._t0 is None:  # a second Model.train on the same monitor keeps the clock
            self._t0 = time.monotonic()
        self.stop_reason = None

    def on_train_step_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        logged = self._logged_step(cb_params)
        if logged is None:
            return
        step, epoch, _ = logged
        outputs = net_outputs(cb_params)
        loss_output = first_output(outputs)
        loss = self._as_float(loss_output) if loss_output is not None else None
        self.last_loss, self.last_step = loss, step
        names, index = self._parts
        parts = tuple(tensor_values(outputs[index])) if names else ()
        if names:
            self.last_components = dict(zip(names, parts))
        if self._log is not None:
            assert self._t0 is not None and self._lr is not None  # set at train begin
            elapsed = time.monotonic() - self._t0 + self.time_offset
            self._log.write((step, epoch, loss, self._lr(step), round(elapsed, 6)) + parts)
        if not is_finite(loss):
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


def _components_of(network: Any) -> tuple[tuple[str, ...], int | None]:
    """``(names, output index)`` of the loss components the train network returns."""
    names = tuple(getattr(network, "component_names", None) or ())
    clash = sorted(set(names) & set(schema.LOSS.columns))
    if clash:
        raise ValueError(f"loss component names must differ from {schema.LOSS.filename}'s columns "
                         f"{', '.join(schema.LOSS.columns)}. Received: components={names!r}")
    return names, getattr(network, "components_index", None)


class _LearningRate:
    """The optimizer's learning rate at a global step, read cheaply.

    A per-step list (MindSpore's dynamic LR) is copied to the host once; a
    constant is re-read on each logged step (a callback may change it),
    through a reader chosen once; a ``LearningRateSchedule`` cell is
    evaluated on the step.
    """

    def __init__(self, optimizer: Any, given: float | Sequence[float] | None = None) -> None:
        self._table: Any = None
        self._read: Callable[[], float | None] | None = None
        self._schedule: Any = None
        if given is not None:   # the caller's own value: nothing to read back
            if isinstance(given, float):
                value = given
                self._read = lambda: value
            else:
                self._table = given
            return
        kind, lr = learning_rate_of(optimizer)
        if kind == "table":
            self._table = lr
        elif kind == "scalar":
            self._read = _scalar_reader(lr)
        elif kind == "schedule":
            self._schedule = lr

    def __call__(self, step: int) -> float | None | str:
        if self._table is not None:
            return float(self._table[min(step - 1, len(self._table) - 1)])
        if self._read is not None:
            return self._read()
        if self._schedule is not None:
            return to_float(schedule_at(self._schedule, step))
        return ""


def _check_lr(lr: Any) -> float | list[float] | None:
    if lr is None:
        return None
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return float(lr)
    try:
        values = [float(v) for v in lr]
    except (TypeError, ValueError):
        values = None
    if not values:
        raise ValueError("`lr` must be None, a number or a non-empty sequence of numbers (one "
                         f"per step). Received: lr={lr!r}")
    return values


def _scalar_reader(param: Any) -> Callable[[], float | None]:
    """A function returning the value of a one-element Parameter as a float."""
    if item_readable(param):
        item = param.item
        return lambda: float(item())
    return lambda: to_float(param)
