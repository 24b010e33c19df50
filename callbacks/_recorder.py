"""Builds each step's :class:`StepRecord` from MindSpore's ``cb_params``.

One Recorder serves a whole CallbackList (one read of the step for all its
callbacks); a callback used alone has its own. The readers of the outputs
and of the learning rate are chosen once, at train begin: a train
network's outputs keep their type and dtype from step to step.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping, Sequence

from ._common import (first_output, float_reader, item_readable, net_outputs, optimizer_of,
                      step_info, steps_before, tensor_values, to_float)
from ._mindspore import learning_rate_of, schedule_at, train_network_of
from ._stats import from_graph_sums
from . import schema
from .step_record import RECORD_KEY, StepRecord

_EMPTY: Mapping[str, Any] = {}   # the record's components or statistics when there are none


class Recorder:
    """Makes the :class:`StepRecord` of each step of one train call.

    Args:
        steps_per_epoch: a whole epoch's steps (see ``step_info``); None: the dataset's.
        lr: the learning rate given to the optimizer, as is (a number or a
            per-step sequence); None: read from the optimizer.
    """

    def __init__(self, steps_per_epoch: int | None = None,
                 lr: float | Sequence[float] | None = None) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.lr = check_lr(lr)
        self.component_names: tuple[str, ...] = ()
        self._component_index: int | None = None
        self._grad_index: int | None = None
        self._stats: tuple[int, tuple[tuple[str, int, int], ...]] | None = None
        self._lr: LearningRate = LearningRate(None, self.lr)
        self._loss_reader: Callable[[Any], float | None] | None = None
        self._grad_reader: Callable[[Any], float | None] | None = None
        self._before: int | None = None   # the steps before this train call, when absolute

    def begin(self, cb_params: Any) -> None:
        """Read what the train network returns, at train begin."""
        network = train_network_of(cb_params)
        self.component_names, self._component_index = components_of(network)
        self._grad_index = 1 if getattr(network, "returns_grad_norm", False) else None
        self._stats = _graph_stats_of(network)
        self._lr = LearningRate(None if self.lr is not None else optimizer_of(cb_params), self.lr)
        self._loss_reader = self._grad_reader = None
        # a runner's absolute count (count_steps_from, set before this at train
        # begin) holds for the whole train call: read as step_info does, in place
        self._before = steps_before(cb_params) if isinstance(cb_params, dict) else None

    def record(self, cb_params: Any) -> StepRecord:
        """The record of the step that just ended."""
        before = self._before
        if before is not None:   # step_info's absolute case, without its calls
            step = int(cb_params["cur_step_num"])
            epoch = int(cb_params["cur_epoch_num"])
            end = (step - before) % int(cb_params["batch_num"]) == 0
            outputs = cb_params["net_outputs"]
        else:
            step, epoch, end = step_info(cb_params, self.steps_per_epoch)
            outputs = net_outputs(cb_params)
        first = first_output(outputs)
        loss = None
        if first is not None:
            if self._loss_reader is None:
                self._loss_reader = float_reader(first)
            loss = self._loss_reader(first)
        grad_norm = None
        if self._grad_index is not None:
            value = outputs[self._grad_index]
            if self._grad_reader is None:
                self._grad_reader = float_reader(value)
            grad_norm = self._grad_reader(value)
        components = _EMPTY
        if self.component_names:
            values = tensor_values(outputs[self._component_index])
            components = dict(zip(self.component_names, values))
        stats: Mapping[str, Any] = _EMPTY if self._stats is None else \
            _read_stats(outputs, *self._stats)
        return make_record(step, epoch, end, loss, grad_norm, components, self._lr.at(step),
                           stats, outputs)

    def lr_at(self, step: int) -> float | None:
        """The learning rate at ``step``, as a record of it holds."""
        return self._lr(step)

    @staticmethod
    def publish(cb_params: Any, record: StepRecord) -> None:
        """Leave ``record`` where :meth:`StepRecord.of` finds it."""
        cb_params[RECORD_KEY] = record


# The record's slots set directly: a frozen dataclass's __init__ goes through
# object.__setattr__ for each field (3.2 us a record here, against 2.4).
_SETTERS = tuple(StepRecord.__dict__[f.name].__set__ for f in fields(StepRecord))


def make_record(step: int, epoch: int, end: bool, loss: float | None, grad_norm: float | None,
                components: Mapping[str, float], lr: float | None, stats: Mapping[str, Any],
                outputs: Any, _new: Any = object.__new__, _set: Any = _SETTERS) -> StepRecord:
    """``StepRecord(...)`` of these fields (in the dataclass's order), made faster."""
    record = _new(StepRecord)
    for setter, value in zip(_set, (step, epoch, end, loss, grad_norm, components, lr, stats,
                                    outputs)):
        setter(record, value)
    return record


def components_of(network: Any) -> tuple[tuple[str, ...], int | None]:
    """``(names, output index)`` of the loss components the train network returns."""
    names = tuple(getattr(network, "component_names", None) or ())
    clash = sorted(set(names) & set(schema.LOSS.columns))
    if clash:
        raise ValueError(f"loss component names must differ from {schema.LOSS.filename}'s columns "
                         f"{', '.join(schema.LOSS.columns)}. Received: components={names!r}")
    return names, getattr(network, "components_index", None)


def _graph_stats_of(network: Any) -> tuple[int, tuple[tuple[str, int, int], ...]] | None:
    """``(output index, ((name, row, size), ...))`` of the statistics a
    ``TrainStep(param_stats=...)`` returns, or None."""
    index = getattr(network, "stats_index", None)
    names = list(getattr(network, "stats_names", ()) or ())
    if index is None or not names:
        return None
    sizes = {p.name: int(p.size) for p in network.trainable_params()}
    return index, tuple((name, row, sizes[name]) for row, name in enumerate(names)
                        if name in sizes)


def _read_stats(outputs: Any, index: int, rows: tuple[tuple[str, int, int], ...]
                ) -> dict[str, tuple[float, float, float, float, float]]:
    sums = outputs[index].asnumpy()
    return {name: from_graph_sums(sums[row], size) for name, row, size in rows}


class LearningRate:
    """The optimizer's learning rate at a global step, read cheaply.

    A per-step list (MindSpore's dynamic LR) is copied to the host once; a
    constant is re-read on each step (a callback may change it), through a
    reader chosen once; a ``LearningRateSchedule`` cell is evaluated on the
    step. ``given``: the caller's own value (a number or a per-step list,
    whose last value holds after its end), nothing read back.
    """

    def __init__(self, optimizer: Any, given: float | Sequence[float] | None = None) -> None:
        self._table: Any = None
        self._schedule: Any = None
        self.at: Callable[[int], float | None] = _no_lr
        """The learning rate at a step: the reader chosen once (one call a step)."""
        if given is not None:   # the caller's own value: nothing to read back
            if isinstance(given, float):
                value = given
                self.at = lambda step: value
            else:
                self._table = given
                self.at = self._from_table
            return
        kind, lr = learning_rate_of(optimizer)
        if kind == "table":
            self._table = lr
            self.at = self._from_table
        elif kind == "scalar":
            self.at = _scalar_reader(lr)
        elif kind == "schedule":
            self._schedule = lr
            self.at = self._from_schedule

    def __call__(self, step: int) -> float | None:
        return self.at(step)

    def _from_table(self, step: int) -> float | None:
        return float(self._table[min(step - 1, len(self._table) - 1)])

    def _from_schedule(self, step: int) -> float | None:
        return to_float(schedule_at(self._schedule, step))


def _no_lr(step: int) -> None:
    return None


def check_lr(lr: Any) -> float | list[float] | None:
    """``lr`` as a float or a list of floats (None stays None); refused in one line otherwise."""
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


def _scalar_reader(param: Any) -> Callable[[int], float | None]:
    """A function of the step returning the value of a one-element Parameter as a float."""
    if item_readable(param):
        item = param.item
        return lambda step: float(item())
    return lambda step: to_float(param)
