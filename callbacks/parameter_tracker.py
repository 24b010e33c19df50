"""ParameterTracker: trajectories of network parameters to params.csv (tidy)."""
import csv
import fnmatch
import io
import time

import numpy as np
from mindspore import dtype as mstype

from ._common import (check_directory, check_every, check_steps_per_epoch, log_path, net_outputs,
                      trained_parameters)
from ._log_callback import LogCallback
from ._mindspore import HostViews
from ._stats import STATS, block_statistics, statistics
from . import schema
from .csv_log import CsvLog

__all__ = ["ParameterTracker"]

# Steps a tracker keeps between writes, at most, and the bytes of raw values
# they may take; parameters up to RAW_MAX elements are kept raw, larger ones
# as their statistics (see _Block).
BLOCK_STEPS = 256
BLOCK_BYTES = 1 << 20
RAW_MAX = 1024


class ParameterTracker(LogCallback):
    """Write parameter values as tidy rows ``step,epoch,param,value``.

    A one-element parameter is written under its name (``dense.weight``),
    one with up to ``max_values`` elements as ``name[i]`` (flat index), a
    larger one as ``name:norm``, ``name:mean``, ``name:std``, ``name:min``
    and ``name:max``. Parameters are read only on logged steps, in place
    on CPU (``asnumpy()`` is a view of the parameter's memory). The steps
    are written in blocks (up to 256 steps, or ``flush_seconds`` of the
    log, and before every checkpoint): a small parameter's values are
    copied at the step and their statistics and rows made for the whole
    block at once, a large one's statistics computed at the step; every
    row holds its step's values.

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
        self._log = None
        self._host = None
        self._block = None

    def on_train_begin(self, run_context):
        cb_params = run_context.original_args()
        self._params = self._select(trained_parameters(cb_params))
        path = log_path(self.directory, schema.PARAMS.filename, self.all_ranks)
        self._log = CsvLog(path, schema.PARAMS.columns).check() if path else None
        self._host = HostViews(self._params)
        self._block = _Block([(int(p.size), self._labels(p.name, p.size), p.dtype == mstype.float32)
                              for p in self._params], self.max_values)

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        logged = self._logged_step(cb_params)
        if self._log is None or logged is None:
            return
        block = self._block
        block.add(logged[0], logged[1], self._host.arrays(net_outputs(cb_params)))
        if block.full() or block.waited() >= self._log.flush_seconds:
            self._write_block()

    def on_train_epoch_end(self, run_context):
        if self._log is not None and self._block.waited() >= self._log.flush_seconds:
            self._write_block()
        super().on_train_epoch_end(run_context)

    def flush(self):
        """Write the kept steps and buffered rows to disk (Checkpoint calls it before saving)."""
        self._write_block()
        super().flush()

    def close(self):
        self._write_block()
        super().close()

    def _write_block(self):
        """Statistics and rows of the steps kept so far, handed to the log."""
        if self._block is not None and self._log is not None and self._block.n:
            self._log.write_text(*self._block.take_text())

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


class _Block:
    """The logged steps' parameter values, kept until written as one block.

    A small parameter (up to ``RAW_MAX`` elements) is only copied per step,
    into one preallocated row of raw values; its statistics, for every step
    of the block at once, and the text of every row are made in a few numpy
    calls when the block is written. The per-call overhead of five
    statistics per parameter and of formatting each row, not the
    arithmetic, was most of the tracker's cost on small parameters (see
    benchmarks/README.md). A larger parameter's statistics are computed at
    the step, from the parameter's own memory: copying it would cost more
    than the calls it saves, and would push the training's data out of the
    CPU's cache.

    Args:
        specs: ``(size, labels, is_float32)`` of each parameter, in order.
        max_values: largest parameter written element by element.
        max_steps: most steps kept between writes (fewer when their raw
            values would pass ``BLOCK_BYTES``).
    """

    def __init__(self, specs, max_values, max_steps=BLOCK_STEPS):
        self.large = [size > max_values for size, _, _ in specs]
        keep = [size <= RAW_MAX for size, _, _ in specs]
        kept = [spec for spec, k in zip(specs, keep) if k]
        bounds = np.cumsum([0] + [size for size, _, _ in kept]).tolist()
        dtype = np.float32 if all(f32 for _, _, f32 in kept) else np.float64
        row_bytes = max(1, bounds[-1] * np.dtype(dtype).itemsize)
        self.capacity = int(max(1, min(max_steps, BLOCK_BYTES // row_bytes)))
        self.raw = np.empty((self.capacity, bounds[-1]), dtype)
        self.columns = self._columns(specs)
        spans = iter(zip(bounds, bounds[1:]))
        # where each kept parameter's raw values sit in a row (None: statistics at the step)
        self.raw_columns = [slice(*next(spans)) if k else None for k in keep]
        width = sum(len(labels) for _, labels, _ in specs)
        self.values = np.empty((self.capacity, width), np.float64)
        self.steps = [None] * self.capacity
        self.cells = [_csv_cell(label) + "," for _, labels, _ in specs for label in labels]
        self.n = 0
        self.since = None

    @staticmethod
    def _columns(specs):
        """The slice of the value columns each parameter fills, in order."""
        out, col = [], 0
        for _, labels, _ in specs:
            out.append(slice(col, col + len(labels)))
            col += len(labels)
        return out

    def add(self, step, epoch, arrays):
        """Keep one step's values (``arrays``: each parameter's flat values)."""
        k = self.n
        row, values = self.raw[k], self.values[k]
        for array, raw_cols, cols in zip(arrays, self.raw_columns, self.columns):
            if raw_cols is not None:
                row[raw_cols] = array
            else:   # statistics now, from the parameter's memory
                values[cols] = statistics(array)
        self.steps[k] = f"{step},{epoch},"
        self.n = k + 1
        if k == 0:
            self.since = time.monotonic()

    def full(self):
        return self.n >= self.capacity

    def waited(self):
        """Seconds since the block's oldest step (0 when empty)."""
        return time.monotonic() - self.since if self.n else 0.0

    def take_text(self):
        """``(text, rows)``: the CSV rows of every kept step; empties the block."""
        k = self.n
        self._fill_kept(k)
        values = list(map(repr, self.values[:k].ravel().tolist()))
        end, cells, width = _LINE_END, self.cells, len(self.cells)
        text = "".join([head + cell + value + end
                        for i, head in enumerate(self.steps[:k])
                        for cell, value in zip(cells, values[i * width:(i + 1) * width])])
        self.n = 0
        return text, k * width

    def _fill_kept(self, k):
        """The value columns of the kept (small) parameters, for the first ``k`` steps."""
        for raw_cols, large, cols in zip(self.raw_columns, self.large, self.columns):
            if raw_cols is None:
                continue
            block = self.raw[:k, raw_cols]
            if large:
                for j, stat in enumerate(block_statistics(block)):
                    self.values[:k, cols.start + j] = stat
            else:
                self.values[:k, cols] = block


_LINE_END = csv.excel.lineterminator   # as CsvLog's csv.writer ends its rows


def _csv_cell(text):
    """``text`` as one CSV field (quoted only when it must be), as csv.writer writes it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([text])
    return buf.getvalue()
