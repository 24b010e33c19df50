"""Every reliance of the callbacks on MindSpore behaviour that is internal or
undocumented, in one place.

Each function names what it relies on and the MindSpore version it was
checked on; tests/test_mindspore_contract.py has one test per reliance that
fails loudly when an upgrade changes it. The rest of callbacks/ uses only
MindSpore's documented API (``Callback``, ``RunContext.original_args()``,
``request_stop()``, ``Tensor``, ``save_checkpoint``) and these functions.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable

import numpy as np
from mindspore import Parameter, Tensor
from mindspore import dtype as mstype

CHECKED_ON = "2.10"  # the MindSpore version every reliance below was checked on

# Tensor dtypes whose one-element ``item()`` is safe. Checked on 2.10: ``item()``
# of a bfloat16 Tensor crashes the process, so other dtypes go through asnumpy.
ITEM_DTYPES = frozenset((mstype.float16, mstype.float32, mstype.float64, mstype.int8,
                         mstype.int16, mstype.int32, mstype.int64, mstype.uint8, mstype.uint16,
                         mstype.uint32, mstype.uint64, mstype.bool_))


# -- cb_params (RunContext.original_args()) --------------------------------------
def step_counters(cb_params: Any) -> tuple[Any, Any, Any]:
    """``(batch_num, cur_step_num, cur_epoch_num)`` of a step.

    Checked on 2.10: ``original_args()`` is an ``_InternalCallbackParam``, a
    dict subclass whose attributes are its items; items are read as items
    because attribute access costs ~0.7 us a name and this runs every step.
    With ``Model.train(..., initial_epoch=k)`` ``cur_epoch_num`` is absolute
    while ``cur_step_num`` restarts from 1 (step_info relies on both).
    """
    if isinstance(cb_params, dict):
        return cb_params["batch_num"], cb_params["cur_step_num"], cb_params["cur_epoch_num"]
    return cb_params.batch_num, cb_params.cur_step_num, cb_params.cur_epoch_num


# Set by a runner whose cb_params count ``cur_step_num`` from the run's start
# (mindexp's framework, see count_steps_from): the steps done before this
# Model.train call. Absent in a plain Model.train, where the count restarts.
STEPS_BEFORE = "mindexp_steps_before"


def count_steps_from(cb_params: Any, steps_before: int) -> None:
    """Make ``cur_step_num`` count from the run's start in this train call:
    called at ``on_train_begin``, before the first step.

    Checked on 2.10: ``Model._train_process`` and
    ``_train_dataset_sink_process`` add 1 (or the sink size) to
    ``cb_params.cur_step_num`` before each step, starting from the value it
    holds after ``on_train_begin`` (0 then); an evaluation of ``Model.fit``
    saves and restores it. ``cur_epoch_num`` is absolute already.
    """
    cb_params.cur_step_num = int(cb_params.cur_step_num) + int(steps_before)
    cb_params[STEPS_BEFORE] = int(steps_before)


def steps_before(cb_params: Any) -> int | None:
    """What :func:`count_steps_from` set (the steps before this train call),
    or None: ``cur_step_num`` is MindSpore's own count (restarting at 1)."""
    if isinstance(cb_params, dict):
        return cb_params.get(STEPS_BEFORE)
    return getattr(cb_params, STEPS_BEFORE, None)


def net_outputs(cb_params: Any) -> Any:
    """What the train network returned this step (an item read, see step_counters)."""
    return cb_params["net_outputs"] if isinstance(cb_params, dict) else cb_params.net_outputs


# Model.fit's own key in eval_results. Checked on 2.10: its value is the LAST
# batch's loss (Model._eval_process and _eval_dataset_sink_process create the
# loss metric inside the batch loop), so no callback ever reads it; the eval
# set's loss is the Model's "loss" metric (callbacks/eval_loss.EvalLoss).
MINDSPORE_EVAL_LOSS = "eval_loss"


def eval_results(cb_params: Any) -> dict[str, Any] | None:
    """The results of the evaluation ``Model.fit`` ran at this epoch's end, or None.

    Checked on 2.10: ``Model.fit`` leaves them in ``cb_params.eval_results``
    (only on epochs with an evaluation); ``metrics`` is the older name.
    MindSpore's own ``eval_loss`` (the last batch's loss) is left out: the
    results are the Model's metrics by name.
    """
    results = cb_params.get("eval_results") or cb_params.get("metrics")
    if not results:
        return results
    return {k: v for k, v in results.items() if k != MINDSPORE_EVAL_LOSS}


def optimizer_of(cb_params: Any) -> Any:
    """The optimizer, for ``Model(net, loss, opt)`` and ``Model(train_cell)``.

    Checked on 2.10: cb_params carries ``optimizer`` only when the Model was
    given one; a train cell (``TrainOneStepCell``, TrainStep) keeps it as its
    ``optimizer`` attribute.
    """
    opt = cb_params.get("optimizer") if hasattr(cb_params, "get") else None
    if opt is None:
        opt = getattr(cb_params.train_network, "optimizer", None)
    return opt


def train_network_of(cb_params: Any) -> Any:
    """The cell ``Model.train`` calls each step, or None.

    Checked on 2.10: ``cb_params.train_network`` is the train cell given to
    ``Model(train_cell)`` itself, unwrapped, at amp_level O0 (so a callback
    can read its attributes, e.g. ``TrainStep.stats_index``), and the
    ``TrainOneStepCell`` Model built for ``Model(net, loss_fn, optimizer)``.
    """
    if hasattr(cb_params, "get"):
        return cb_params.get("train_network")
    return getattr(cb_params, "train_network", None)


def batch_size_of(cb_params: Any) -> int | None:
    """The batch size of the dataset being trained (``cb_params.train_dataset``,
    set by ``Model.train`` on 2.10), or None when it does not say."""
    dataset = cb_params.get("train_dataset") if isinstance(cb_params, dict) \
        else getattr(cb_params, "train_dataset", None)
    try:
        size = dataset.get_batch_size() if dataset is not None else None
    except Exception:  # a dataset without a batch size (a hand-built one): unknown
        return None
    return int(size) if isinstance(size, (int, np.integer)) and size > 0 else None


def runs_in_evaluation(callback: Any) -> bool:
    """Whether ``Model.fit`` hands ``callback`` to its evaluations.

    Checked on 2.10: ``Model._eval_during_train`` passes every callback of
    the training's list except those whose class name is one of
    ``mindspore.train.callback.__all__`` (``LossMonitor``,
    ``EarlyStopping``, ...; a ``TimeMonitor`` is kept), by name, so
    mindexp's ``LossMonitor`` and ``EarlyStopping`` are left out too. A
    ``CallbackList`` hands the evaluations the same ones.
    """
    from mindspore.train.callback import TimeMonitor
    from mindspore.train.callback import __all__ as internal_names
    return type(callback).__name__ not in internal_names or isinstance(callback, TimeMonitor)


def calling_model_metrics(max_frames: int = 12) -> dict[str, Any] | None:
    """The metrics (name -> ``Metric``) of the ``Model`` whose hook is calling,
    or None when unknown.

    Read from the ``mindspore.train.Model`` up the stack (a frame of
    ``Model._train``): its private ``_metric_fns``, whose names are the keys
    of ``eval_results``. Checked on 2.10. MindSpore hands callbacks no
    reference to the Model, so this is the only way to know the metrics at
    train begin; a callback falls back to checking the first evaluation's
    results when it returns None (a hand-built RunContext, another
    MindSpore version).
    """
    metric_fns = getattr(_calling_model(max_frames), "_metric_fns", None)
    return None if metric_fns is None else dict(metric_fns)


def calling_model_eval_network(max_frames: int = 12) -> Any:
    """The eval network of the ``Model`` whose hook is calling, or None.

    Checked on 2.10: ``Model._eval_network``; ``Model(net, loss_fn, opt,
    metrics=...)`` builds an ``nn.WithEvalCell`` there (one loss a batch).
    """
    return getattr(_calling_model(max_frames), "_eval_network", None)


def _calling_model(max_frames: int) -> Any:
    from mindspore.train import Model
    frame: Any = sys._getframe(1)
    for _ in range(max_frames):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, Model):
            return owner
        frame = frame.f_back
    return None


# -- tensors and optimizers ------------------------------------------------------
def item_readable(value: Any) -> bool:
    """A MindSpore Tensor with one element whose ``item()`` is safe (see ITEM_DTYPES).

    A lazily initialized Parameter (``has_init``) is initialized first.
    """
    if not isinstance(value, Tensor):
        return False
    if getattr(value, "has_init", False):
        value.init_data()
    return bool(value.size == 1 and value.dtype in ITEM_DTYPES)


def learning_rate_of(optimizer: Any) -> tuple[str | None, Any]:
    """``(kind, value)`` of an optimizer's learning rate, read from its attributes:
    ``("table", array)`` a per-step list, ``("scalar", Parameter)`` one value
    (re-read on each use: a callback may change it), ``("schedule", cell)`` a
    ``LearningRateSchedule`` to call on the step, ``(None, None)`` unknown.

    Checked on 2.10: ``Optimizer.learning_rate`` is a Parameter for a number,
    a cell for a per-step list (``_IteratorLearningRate``) or a
    ``LearningRateSchedule``, and a ParameterTuple for group learning rates
    (the first group is used). A Parameter table (``dynamic_lr``) was the
    list's form in older versions.
    """
    lr = getattr(optimizer, "learning_rate", None) if optimizer is not None else None
    if lr is not None and (isinstance(lr, (tuple, list)) or type(lr).__name__ == "ParameterTuple"):
        lr = lr[0] if len(lr) else None
    if isinstance(lr, Parameter):
        if getattr(optimizer, "dynamic_lr", False) or lr.size > 1:
            return "table", lr.asnumpy().reshape(-1)
        return "scalar", lr
    if lr is not None and callable(lr):
        return "schedule", lr
    return None, None


def schedule_at(schedule: Callable[[Tensor], Tensor], step: int) -> Tensor:
    """A ``LearningRateSchedule``'s value at global step ``step`` (counted from 1):
    the cell takes the 0-based step as an int32 Tensor (checked on 2.10)."""
    from mindspore import int32
    return schedule(Tensor(step - 1, int32))


class HostViews:
    """The values of parameters on the host after each step, one flat array each.

    Checked on 2.10: on CPU ``asnumpy()`` of a Parameter is a view of the
    parameter's own memory (the same address on every call), which each
    train step updates in place, and a train cell's outputs depend on the
    optimizer's update (``TrainOneStepCell`` and ``TrainStep`` return
    ``depend(loss, optimizer(grads))``): once an output is read the views
    hold the step's values. So the views are made once and reused while each
    parameter's ``data_ptr()`` stays the same (``set_data`` or a loaded
    checkpoint replaces the memory: new views then), and a step is waited
    for by reading one output (~0.4 us) instead of ``data_sync`` on every
    parameter (4 us or more each). Elsewhere (a device copy), each call
    copies, as ``asnumpy()`` always did. A cached read costs ~1 us a
    parameter instead of ~35 us (numpy parses the buffer format on every
    ``asnumpy()``).
    """

    def __init__(self, params: Iterable[Parameter]) -> None:
        self.params = list(params)
        self.views: list[np.ndarray] | None = None
        self.ptrs: list[int] = []
        self.copies = False   # asnumpy() copies here: one copy per call, no views kept
        self._wait: Callable[[Any], Any] | None = None

    def arrays(self, outputs: Any = None) -> list[np.ndarray]:
        """Each parameter's flat values after the step that returned ``outputs``."""
        params = self.params
        if self.copies:
            return [_host_array(p) for p in params]
        if self.views is not None and [p.data_ptr() for p in params] == self.ptrs:
            if outputs is not None:
                if self._wait is None:   # chosen once: a train network's outputs keep their kind
                    self._wait = _waiter(outputs)
                self._wait(outputs)
            return self.views
        arrays = [_host_array(p) for p in params]
        again = [_host_array(p) for p in params]
        self.copies = not all(np.shares_memory(a, b) for a, b in zip(arrays, again))
        self.views, self.ptrs = (None, []) if self.copies else \
            (arrays, [p.data_ptr() for p in params])
        return arrays


def _first(outputs: Any) -> Any:
    while isinstance(outputs, (tuple, list)) and outputs:
        outputs = outputs[0]
    return outputs


def _waiter(outputs: Any) -> Callable[[Any], Any]:
    """A function reading one output of a step like ``outputs``, so that the
    step's kernels (the update included) have run."""
    first = _first(outputs)
    if item_readable(first):
        return lambda out: _first(out).item()
    if isinstance(first, Tensor):
        return lambda out: _first(out).data_sync(True)
    return lambda out: None


def _host_array(param: Any) -> np.ndarray:
    if getattr(param, "has_init", False):  # a lazily initialized Parameter
        param.init_data()
    return param.asnumpy().reshape(-1)


# -- processes -------------------------------------------------------------------
def rank_id() -> int:
    """This process's rank: from the communication group when initialized,
    else from the environment msrun sets (``RANK_ID``, else ``MS_NODE_ID``),
    else 0. Checked on 2.10: ``get_rank()`` answers 0 before ``init()``
    instead of raising (an msrun worker initializes before training)."""
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:  # not initialized: single process
        return int(os.environ.get("RANK_ID", os.environ.get("MS_NODE_ID", "0")) or 0)


def local_rank_id() -> int:
    """This worker's index on its node (0 for a single process). msrun exports
    ``DEVICE_ID`` = the worker's local index to each worker it starts (checked on
    2.10: ``_ProcessManager._start_single_worker``); ``get_local_rank()`` is not
    supported on CPU, so the environment comes first."""
    value = os.environ.get("DEVICE_ID", "")
    if value.isdigit():
        return int(value)
    try:
        from mindspore.communication import get_local_rank
        return int(get_local_rank())
    except Exception:  # not initialized, or not supported on this device
        return 0


# -- device memory ------------------------------------------------------------------
def device_memory_reader() -> Callable[[], float] | None:
    """A function giving the MiB of device memory MindSpore holds now, or None
    when the device target is the CPU (MindSpore reports no device there:
    system.csv then has no device column rather than zeros). Checked on 2.10:
    ``mindspore.runtime.memory_allocated()`` answers bytes of the device's pool."""
    import mindspore as ms
    if ms.get_context("device_target") == "CPU":
        return None
    from mindspore import runtime

    def read() -> float:
        return float(runtime.memory_allocated()) / 2 ** 20
    return read
