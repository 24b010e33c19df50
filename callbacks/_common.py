"""Helpers shared by the callbacks: global step, loss, rank, parameters."""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Collection, Mapping

import numpy as np

# MindSpore internals are read through ._mindspore only (re-exported here for the callbacks).
from ._mindspore import (ITEM_DTYPES as _ITEM_DTYPES, count_steps_from, eval_results,  # noqa: F401
                         item_readable, local_rank_id, optimizer_of, rank_id, step_counters,
                         steps_before)
from . import schema
from ._mindspore import (calling_model_eval_network, calling_model_metrics,  # noqa: F401
                         net_outputs)  # (for the callbacks)


def step_info(cb_params: Any, steps_per_epoch: int | None = None) -> tuple[int, int, bool]:
    """``(global step, epoch, is the epoch's last step)`` in one read.

    The step counts from 1 across epochs, also after ``initial_epoch``. In a
    plain ``Model.train`` MindSpore keeps ``cur_epoch_num`` absolute but
    restarts ``cur_step_num`` there, so the step within the epoch is
    recomputed from ``batch_num``. ``steps_per_epoch`` is a whole epoch's
    steps when the dataset holds fewer (a runner that resumes mid-epoch first
    trains the rest of that epoch, ``batch_num`` batches): the missing ones
    ran before. Under a runner that made ``cur_step_num`` absolute
    (:func:`count_steps_from`, mindexp's framework) it is taken as it is.
    """
    batch_num, cur_step, epoch = step_counters(cb_params)
    batch_num, cur_step, epoch = int(batch_num), int(cur_step), int(epoch)
    before = steps_before(cb_params)
    if before is not None:  # absolute already: never corrected twice
        return cur_step, epoch, (cur_step - before) % batch_num == 0
    in_epoch = (cur_step - 1) % batch_num + 1
    epoch_steps = steps_per_epoch or batch_num
    done_before = max(epoch_steps - batch_num, 0)
    return (epoch - 1) * epoch_steps + done_before + in_epoch, epoch, in_epoch == batch_num


def first_output(outputs: Any) -> Any:
    """The loss: the output itself or the first item of a tuple/list."""
    while isinstance(outputs, (tuple, list)):
        if not outputs:
            return None
        outputs = outputs[0]
    return outputs


def to_float(value: Any) -> float | None:
    """A Python float from a Tensor, numpy value or number (None stays None).

    A one-element Tensor is read with ``item()`` (~1 us); ``asnumpy()``
    costs ~35 us a call (numpy parses the buffer's format each time), which
    is a large share of a small step when several callbacks read every step.
    """
    if value is None:
        return None
    if isinstance(value, float):
        return value
    if item_readable(value):
        return float(value.item())
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return float(np.asarray(value).reshape(-1)[0])


def float_reader(sample: Any) -> Callable[[Any], float | None]:
    """A function reading values like ``sample`` (a step's output) as Python
    floats, chosen once: a one-element Tensor is read with ``item()`` and
    no checks, anything else through :func:`to_float`. The outputs of a
    train network keep their type and dtype from step to step, and the
    checks cost a small step more than the read."""
    if item_readable(sample):
        return _read_item
    return to_float


def _read_item(tensor: Any) -> float | None:
    return float(tensor.item())


def tensor_values(tensor: Any) -> list[Any]:
    """The elements of a small Tensor as a flat list of Python numbers.

    ``tolist()`` is ~6x cheaper than ``asnumpy()`` for a few elements; used
    for parameters of up to ``max_values`` elements.
    """
    if getattr(tensor, "has_init", False):
        tensor.init_data()
    if tensor.dtype not in _ITEM_DTYPES:
        return np.asarray(tensor.asnumpy(), dtype=np.float64).reshape(-1).tolist()
    values = tensor.tolist()
    while values and isinstance(values, list) and isinstance(values[0], list):
        values = [v for row in values for v in row]
    return values if isinstance(values, list) else [values]


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def log_path(directory: str, filename: str, all_ranks: bool,
             per_node: bool = False) -> str | None:
    """Where this rank writes ``filename``, or None when it writes nothing.

    Rank 0 writes ``filename``; other ranks write ``name.rankN.csv`` when
    ``all_ranks`` is true, or (``per_node``) when they are the first worker
    of their node (local rank 0: one file per machine).
    """
    rank = rank_id()
    if rank == 0:
        return os.path.join(directory, filename)
    if not (all_ranks or (per_node and local_rank_id() == 0)):
        return None
    return os.path.join(directory, schema.rank_filename(filename, rank))


def trained_parameters(cb_params: Any) -> list[Any]:
    """Parameters the optimizer updates (not its moments or step counter)."""
    opt = optimizer_of(cb_params)
    params = getattr(opt, "parameters", None) if opt is not None else None
    if params:
        return list(params)
    network = cb_params.get("network") or cb_params.train_network
    return list(network.trainable_params())


def check_every(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return value


def check_steps_per_epoch(value: Any) -> int | None:
    """None, or a whole epoch's number of steps (see :func:`step_info`)."""
    if value is None:
        return None
    return check_every("steps_per_epoch", value)


def check_directory(directory: Any) -> str:
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise ValueError(f"`directory` must be a path. Received: directory={directory!r}")
    return os.fspath(directory)


def monitored_value(cb_params: Any, monitor: str) -> float | None:
    """The value a callback watches at an epoch's end, or None when absent.

    ``"loss"`` is the epoch's last training loss. Any other name is read
    from the eval results ``Model.fit`` leaves for that epoch only (none on
    epochs without evaluation), see :func:`eval_value`.
    """
    if monitor == "loss":
        return to_float(first_output(cb_params.get("net_outputs")))
    return eval_value(eval_results(cb_params) or {}, monitor)


def eval_key(name: str, names: Collection[str]) -> str | None:
    """The key of the eval results that holds ``name``, or None: ``name`` as
    given (``"accuracy"``), else without an ``eval_`` prefix (``"eval_accuracy"``
    finds ``"accuracy"``, ``"eval_loss"`` the Model's ``"loss"`` metric), the
    name the eval logs give it. ``names``: the results' keys (the Model's
    metrics; MindSpore's own ``eval_loss`` is never among them)."""
    if name in names:
        return name
    if name.startswith("eval_") and name[len("eval_"):] in names:
        return name[len("eval_"):]
    return None


def eval_value(results: Mapping[str, Any], name: str) -> float | None:
    """``name``'s value in one evaluation's results (see :func:`eval_key`), or None."""
    key = eval_key(name, results)
    return None if key is None else to_float(results[key])
