"""Helpers shared by the callbacks: global step, loss, rank, parameters."""
import math
import os

import numpy as np
from mindspore import Tensor
from mindspore import dtype as mstype

# Directions of a monitored value (Checkpoint's best, EarlyStopping).
MODES = ("min", "max")

_ITEM_DTYPES = frozenset((mstype.float16, mstype.float32, mstype.float64, mstype.int8,
                          mstype.int16, mstype.int32, mstype.int64, mstype.uint8, mstype.uint16,
                          mstype.uint32, mstype.uint64, mstype.bool_))


def step_info(cb_params):
    """``(global step, epoch, is the epoch's last step)`` in one read.

    The step counts from 1 across epochs, also after ``initial_epoch``:
    MindSpore keeps ``cur_epoch_num`` absolute but restarts ``cur_step_num``
    there, so the step within the epoch is recomputed from ``batch_num``.
    A runner that resumes mid-epoch (a first ``Model.train`` over the rest
    of that epoch) sets ``cb_params["step_offset"]`` to keep the count.
    MindSpore's cb_params is a dict: items are read as items, because its
    attribute access costs ~0.7 us a name and this runs every step.
    """
    if isinstance(cb_params, dict):
        batch_num, cur_step = cb_params["batch_num"], cb_params["cur_step_num"]
        epoch, offset = cb_params["cur_epoch_num"], cb_params.get("step_offset")
    else:
        batch_num, cur_step = cb_params.batch_num, cb_params.cur_step_num
        epoch, offset = cb_params.cur_epoch_num, getattr(cb_params, "step_offset", 0)
    batch_num, epoch = int(batch_num), int(epoch)
    in_epoch = (int(cur_step) - 1) % batch_num + 1
    return (epoch - 1) * batch_num + in_epoch + int(offset or 0), epoch, in_epoch == batch_num


def net_outputs(cb_params):
    """What the train network returned this step (an item read, see step_info)."""
    return cb_params["net_outputs"] if isinstance(cb_params, dict) else cb_params.net_outputs


def global_step(cb_params):
    """Step counted from 1 across epochs (see :func:`step_info`)."""
    return step_info(cb_params)[0]


def is_epoch_end(cb_params):
    """True on the last step of an epoch."""
    return step_info(cb_params)[2]


def first_output(outputs):
    """The loss: the output itself or the first item of a tuple/list."""
    while isinstance(outputs, (tuple, list)):
        if not outputs:
            return None
        outputs = outputs[0]
    return outputs


def to_float(value):
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


def item_readable(value):
    """A MindSpore Tensor with one element whose ``item()`` is safe.

    (``item()`` of a bfloat16 Tensor crashes the process in MindSpore 2.10:
    other dtypes take the ``asnumpy`` path, as before.)
    """
    if not isinstance(value, Tensor):
        return False
    if getattr(value, "has_init", False):  # a lazily initialized Parameter
        value.init_data()
    return value.size == 1 and value.dtype in _ITEM_DTYPES


def tensor_values(tensor):
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


def is_finite(value):
    return value is not None and math.isfinite(value)


def rank_id():
    """This process's rank: from the communication group when initialized,
    else from the environment msrun sets, else 0."""
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:  # not initialized: single process
        return int(os.environ.get("RANK_ID", os.environ.get("MS_NODE_ID", "0")) or 0)


def log_path(directory, filename, all_ranks):
    """Where this rank writes ``filename``, or None when it writes nothing.

    Rank 0 writes ``filename``; other ranks write ``name.rankN.csv`` only
    when ``all_ranks`` is true.
    """
    rank = rank_id()
    if rank == 0:
        return os.path.join(directory, filename)
    if not all_ranks:
        return None
    stem, ext = os.path.splitext(filename)
    return os.path.join(directory, f"{stem}.rank{rank}{ext}")


def optimizer_of(cb_params):
    """The optimizer, for ``Model(net, loss, opt)`` and ``Model(train_cell)``."""
    opt = cb_params.get("optimizer") if hasattr(cb_params, "get") else None
    if opt is None:
        opt = getattr(cb_params.train_network, "optimizer", None)
    return opt


def trained_parameters(cb_params):
    """Parameters the optimizer updates (not its moments or step counter)."""
    opt = optimizer_of(cb_params)
    params = getattr(opt, "parameters", None) if opt is not None else None
    if params:
        return list(params)
    network = cb_params.get("network") or cb_params.train_network
    return list(network.trainable_params())


def check_every(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return value


def check_directory(directory):
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise ValueError(f"`directory` must be a path. Received: directory={directory!r}")
    return os.fspath(directory)


def calling_model_metric_names(max_frames=8):
    """The names ``Model.fit`` will put in ``eval_results``, or None when unknown.

    Read from the ``mindspore.train.Model`` whose hook is calling (a frame
    of ``Model._train`` up the stack): its ``metrics`` names plus
    ``eval_loss``, which ``Model.fit`` adds. MindSpore hands callbacks no
    reference to the Model, so this is the only way to know the names at
    train begin; a callback falls back to checking the first evaluation's
    results when it returns None (a hand-built RunContext, another
    MindSpore version).
    """
    import sys
    from mindspore.train import Model
    frame = sys._getframe(1)
    for _ in range(max_frames):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, Model):
            metric_fns = getattr(owner, "_metric_fns", None)
            return None if metric_fns is None else list(metric_fns) + ["eval_loss"]
        frame = frame.f_back


def monitored_value(cb_params, monitor):
    """The value a callback watches at an epoch's end, or None when absent.

    ``"loss"`` is the epoch's last training loss. Any other name is read
    from the eval results ``Model.fit`` leaves for that epoch only (none on
    epochs without evaluation): as given (``"accuracy"``, MindSpore's own
    ``"eval_loss"``), else without an ``eval_`` prefix (``"eval_accuracy"``
    finds ``"accuracy"``), the name the eval logs give it.
    """
    if monitor == "loss":
        return to_float(first_output(cb_params.get("net_outputs")))
    results = cb_params.get("eval_results") or cb_params.get("metrics") or {}
    if monitor in results:
        return to_float(results[monitor])
    if monitor.startswith("eval_") and monitor[len("eval_"):] in results:
        return to_float(results[monitor[len("eval_"):]])
    return None
