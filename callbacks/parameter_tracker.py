"""ParameterTracker: trajectories of network parameters to params.csv (tidy)."""
import fnmatch
import math

import numpy as np

from ._common import (check_directory, check_every, check_steps_per_epoch, log_path,
                      tensor_values, trained_parameters)
from ._log_callback import LogCallback
from . import schema
from .csv_log import CsvLog

__all__ = ["ParameterTracker"]

STATS = ("norm", "mean", "std", "min", "max")
# largest float32 parameter whose statistics are summed in float32 (see _statistics)
FLOAT32_SUM_MAX = 1 << 20


class ParameterTracker(LogCallback):
    """Write parameter values as tidy rows ``step,epoch,param,value``.

    A one-element parameter is written under its name (``dense.weight``),
    one with up to ``max_values`` elements as ``name[i]`` (flat index), a
    larger one as ``name:norm``, ``name:mean``, ``name:std``, ``name:min``
    and ``name:max``. Each selected parameter is copied to the host once per
    logged step, and only on logged steps.

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

    def on_train_step_end(self, run_context):
        logged = self._logged_step(run_context.original_args())
        if self._log is None or logged is None:
            return
        step, epoch, _ = logged
        rows = []
        for param, labels, large in self._plan:   # labels made once, in on_train_begin
            if large:   # five statistics of one host copy
                values = _statistics(param.asnumpy().reshape(-1))
            else:       # its elements
                values = tensor_values(param)
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


def _statistics(raw):
    """L2 norm, mean, standard deviation, min and max of a flat array.

    Up to ``FLOAT32_SUM_MAX`` float32 elements are summed in float32 (numpy's
    pairwise sum and einsum: ~1e-7 relative here, and no float64 copy, which
    was a third of the cost); larger or other arrays in float64. The
    variance E[x^2] - mean^2 takes two sums instead of np.std's three
    passes; unless the spread is large against the mean (std > 3 |mean|,
    as for most weights), where it could lose digits, np.var recomputes it
    in float64. np.einsum, not np.dot: a BLAS call leaves OpenBLAS's
    threads spinning, and they take the cores from MindSpore's kernels of
    the next step.
    """
    flat = raw
    if flat.dtype != np.float32 or flat.size > FLOAT32_SUM_MAX:
        flat = flat.astype(np.float64)
    n = flat.size
    sq = float(np.einsum("i,i->", flat, flat))
    mean = float(flat.sum()) / n
    var = sq / n - mean * mean
    if not var > 10.0 * mean * mean:   # could lose digits (or NaN): the two-pass way
        var = float(flat.var(dtype=np.float64))
    std = math.sqrt(var) if var >= 0 else var   # var < 0: only NaN
    return math.sqrt(sq), mean, std, float(flat.min()), float(flat.max())


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
