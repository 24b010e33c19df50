"""ParameterTracker: trajectories of network parameters to params.csv (tidy)."""
import fnmatch

import numpy as np

from ._common import (check_directory, check_every, check_steps_per_epoch, log_path,
                      trained_parameters)
from ._log_callback import LogCallback
from ._stats import STATS, statistics as _statistics
from . import schema
from .csv_log import CsvLog

__all__ = ["ParameterTracker"]


class ParameterTracker(LogCallback):
    """Write parameter values as tidy rows ``step,epoch,param,value``.

    A one-element parameter is written under its name (``dense.weight``),
    one with up to ``max_values`` elements as ``name[i]`` (flat index), a
    larger one as ``name:norm``, ``name:mean``, ``name:std``, ``name:min``
    and ``name:max``. Each selected parameter is copied once per logged
    step, and only on logged steps (on CPU not even copied: ``asnumpy()``
    is a view of the parameter's memory, read in place).

    Args:
        directory: folder of ``params.csv``.
        names: parameter names or glob patterns (``"dense.*"``); default:
            every parameter the optimizer updates.
        every: write every N-th global step (and each epoch's last step).
        max_values: largest parameter written element by element.
        all_ranks: ranks other than 0 write ``params.rankN.csv``.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
    """

    FILENAME = schema.PARAMS.filename
    COLUMNS = schema.PARAMS.columns

    def __init__(self, directory, names=None, every=1, max_values=16, all_ranks=False,
                 steps_per_epoch=None):
        super().__init__()
        self.directory = check_directory(directory)
        self.names = _check_names(names)
        self.every = check_every("every", every)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.max_values = check_every("max_values", max_values)
        self.all_ranks = bool(all_ranks)
        self._params = []
        self._plan = []
        self._log = None

    def on_train_begin(self, run_context):
        cb_params = run_context.original_args()
        self._params = self._select(trained_parameters(cb_params))
        self._plan = [(p, self._labels(p.name, p.size), int(p.size) > self.max_values)
                      for p in self._params]
        path = log_path(self.directory, self.FILENAME, self.all_ranks)
        self._log = CsvLog(path, self.COLUMNS).check() if path else None
        self._host = _HostViews(self._params)

    def on_train_step_end(self, run_context):
        logged = self._logged_step(run_context.original_args())
        if self._log is None or logged is None:
            return
        step, epoch, _ = logged
        rows = []
        for (param, labels, large), flat in zip(self._plan, self._host.arrays()):
            # labels made once, in on_train_begin; five statistics of a large one
            values = _statistics(flat) if large else flat.astype(np.float64).tolist()
            rows.extend([(step, epoch, label, value) for label, value in zip(labels, values)])
        self._log.write_rows(rows)

    def _labels(self, name, size):
        """The ``param`` column of a parameter's rows, in the order of its values."""
        size = int(size)
        if size == 1:
            return (name,)
        if size <= self.max_values:
            return tuple(f"{name}[{i}]" for i in range(size))
        return tuple(f"{name}:{stat}" for stat in STATS)

    def _select(self, params):
        if self.names is None:
            return params
        chosen = [p for p in params if any(fnmatch.fnmatchcase(p.name, pat) for pat in self.names)]
        unmatched = [pat for pat in self.names
                     if not any(fnmatch.fnmatchcase(p.name, pat) for p in params)]
        if unmatched:
            raise ValueError(f"ParameterTracker: no parameter matches {unmatched}; "
                             f"parameters are {[p.name for p in params]}. Received: names={self.names!r}")
        return chosen


def _check_names(names):
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"`names` must be None or non-empty parameter names/glob patterns. "
                         f"Received: names={names!r}")
    return names


class _HostViews:
    """The parameters' values on the host, one flat array each, per step.

    On CPU ``asnumpy()`` returns a view of the parameter's own memory, which
    the next steps update in place: the views are made once and reused while
    each parameter's data pointer stays the same (``set_data`` or a loaded
    checkpoint replaces the memory: new views then). Elsewhere (a device
    copy), each call copies, as ``asnumpy()`` always did. A cached read costs
    ~1 us a parameter instead of ~35 us (numpy parses the buffer format on
    every ``asnumpy()``).
    """

    def __init__(self, params):
        self.params = list(params)
        self.views = self.ptrs = None

    def arrays(self):
        params = self.params
        if self.views is not None and all(p.data_ptr() == q for p, q in zip(params, self.ptrs)):
            for p in params:
                p.data_sync(True)   # the step's kernels have written it
            return self.views
        arrays = [_host_array(p) for p in params]
        again = [_host_array(p) for p in params]
        live = all(np.shares_memory(a, b) for a, b in zip(arrays, again))
        self.views, self.ptrs = (arrays, [p.data_ptr() for p in params]) if live else (None, None)
        return arrays


def _host_array(param):
    if getattr(param, "has_init", False):  # a lazily initialized Parameter
        param.init_data()
    return param.asnumpy().reshape(-1)

