"""ParameterTracker: trajectories of network parameters to params.csv (tidy)."""
from __future__ import annotations

import csv
import fnmatch
import io
import math
import os
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from mindspore import dtype as mstype

from ._common import (check_directory, check_every, check_steps_per_epoch, log_path,
                      trained_parameters)
from ._fused import kernels
from ._log_callback import LogCallback
from ._mindspore import HostViews, batch_size_of, train_network_of
from ._recorder import Recorder
from ._stats import (CHUNK, RAW_MAX, STATS, block_statistics, default_workers,
                     statistics)
from . import schema
from .csv_log import CsvLog
from .step_record import StepRecord

__all__ = ["ParameterTracker"]

if TYPE_CHECKING:
    from mindspore.train import RunContext

# Steps a tracker keeps between writes, at most, and the bytes of raw values
# they may take; parameters up to RAW_MAX elements are kept raw, larger ones
# as their statistics (see _Block).
BLOCK_STEPS = 256
BLOCK_BYTES = 1 << 20


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
        budget: fraction of a train step's cost the statistics of the large
            parameters (over 1,024 elements, computed at the step) may take,
            e.g. 0.05; None: every logged step, whatever they cost. Both
            costs are estimated from sizes, never timed, so the same model,
            data and budget log the same steps on any machine load: the
            statistics ``ELEMENT_COST_MACS`` multiply-adds per element of
            the large parameters, a step 3 x the trained parameters' elements
            x ``batch_size`` (a dense network's forward and backward pass). They are then logged every
            ``large_every`` logged steps (on the logged steps whose
            ``(step - 1) // every`` is a multiple of it, so a resume keeps
            the grid), the smallest interval that keeps them under it;
            small parameters stay on every logged step.
        batch_size: the samples of one train step, for the budget's
            estimate; None: the dataset's ``get_batch_size()`` (1 when it
            does not say).
        stats: where the statistics of parameters over 1,024 elements are
            computed: ``"host"`` (numpy, from the parameter's memory),
            ``"graph"`` (read from the train step's outputs: a
            ``TrainStep(..., param_stats=True)``, so no parameter is copied
            to the host; the budget then does not apply, their cost is part
            of the step) or ``"auto"``: the graph's when the train network
            returns them for every such parameter, else the host's.
        append: continue an existing ``params.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
    """

    def __init__(self, directory: str | os.PathLike[str], names: str | Sequence[str] | None = None,
                 every: int = 1, max_values: int = 16, all_ranks: bool = False,
                 steps_per_epoch: int | None = None, budget: float | None = None,
                 stats: str = "auto", batch_size: int | None = None,
                 append: bool = False) -> None:
        super().__init__()
        self.append = bool(append)
        self.directory = check_directory(directory)
        self.names = _check_names(names)
        self.every = check_every("every", every)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.max_values = check_every("max_values", max_values)
        self.all_ranks = bool(all_ranks)
        self.budget = _check_budget(budget)
        self.batch_size = None if batch_size is None else check_every("batch_size", batch_size)
        if stats not in STATS_SOURCES:
            raise ValueError(f"`stats` must be one of {', '.join(STATS_SOURCES)}. "
                             f"Received: stats={stats!r}")
        self.stats = stats
        self.stats_source = "host"   # where they are computed in this run: host or graph
        self._graph: _GraphStats | None = None
        self._threads = 1      # threads of a large parameter's host statistics (from sizes)
        self.large_every = 1   # logged steps between two of the large parameters' (the budget's choice)
        self._params: list[Any] = []
        self._log: CsvLog | None = None
        self._host: HostViews | None = None
        self._block: _Block | None = None
        self._recorder = Recorder(self.steps_per_epoch)

    def on_train_begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        self._recorder.begin(cb_params)
        self._params = self._select(trained_parameters(cb_params))
        path = log_path(self.directory, schema.PARAMS.filename, self.all_ranks)
        self._log = self._checked_log(path, schema.PARAMS.columns) if path else None
        self._block = _Block([(int(p.size), self._labels(p.name, p.size), p.dtype == mstype.float32)
                              for p in self._params], self.max_values)
        self._graph = self._graph_stats(cb_params, self._block)
        self.stats_source = "host" if self._graph is None else "graph"
        on_host = [p for i, p in enumerate(self._params)
                   if self._graph is None or i not in self._graph.rows]
        self._host = HostViews(on_host)
        self.large_every = 1
        if self.budget is not None and self._block.any_at_step and self._graph is None:
            large = sum(int(p.size) for p in on_host if int(p.size) > RAW_MAX)
            trained = sum(int(p.size) for p in trained_parameters(cb_params))
            self.large_every = large_interval(large, trained,
                                              self.batch_size or batch_size_of(cb_params),
                                              self.budget)
        self._threads = stats_threads([int(p.size) for p in on_host])
        if any(int(p.size) > CHUNK for p in on_host):
            kernels()   # numba's import and kernels (fast extra: 0.4 s; 3 s once) here, not in a step

    @property
    def stats_threads(self) -> int:
        """Threads each large parameter's host statistics use in this run
        (:func:`stats_threads`: from the parameters' sizes)."""
        return self._threads

    def on_train_step_end(self, run_context: RunContext) -> None:
        if self._log is not None:
            self._record_when_due(run_context)

    def on_train_step_record(self, record: StepRecord, run_context: RunContext) -> None:
        """Keep the step's parameter values when due (see :class:`StepRecord`)."""
        if self._log is None or (record.step % self.every and not record.epoch_end):
            return
        block = self._block
        assert block is not None and self._host is not None  # made with the log
        # the grid of the run's steps, not of this process's hooks: a resume keeps it
        with_large = ((record.step - 1) // self.every) % self.large_every == 0
        # the record's loss was read from the step's outputs: the step (its update
        # included) has run, nothing more to wait for
        arrays = self._host.arrays(record.outputs if record.loss is None else None)
        if self._graph is not None:
            arrays = self._graph.merge(arrays, record.param_stats)
        block.add(record.step, record.epoch, arrays, with_large,
                  self._threads if with_large else 1)
        if block.n >= block.capacity or time.monotonic() - block.since >= self._log.flush_seconds:
            self._write_block()   # (full() or waited(), inline: every logged step)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        block = self._block
        if self._log is not None and block is not None and block.waited() >= self._log.flush_seconds:
            self._write_block()
        super().on_train_epoch_end(run_context)

    def flush(self) -> None:
        """Write the kept steps and buffered rows to disk (Checkpoint calls it before saving)."""
        self._write_block()
        super().flush()

    def close(self) -> None:
        """Write the kept steps, then flush and close the log; safe to call twice."""
        self._write_block()
        super().close()

    def _write_block(self) -> None:
        """Statistics and rows of the steps kept so far, handed to the log."""
        if self._block is not None and self._log is not None and self._block.n:
            self._log.write_text(*self._block.take_text())

    def _graph_stats(self, cb_params: Any, block: _Block) -> _GraphStats | None:
        """The reader of the train step's statistics output, or None for the host's."""
        if self.stats == "host":
            return None
        network = train_network_of(cb_params)
        names = list(getattr(network, "stats_names", ()) or ())
        index = getattr(network, "stats_index", None)
        wanted = [i for i, p in enumerate(self._params)
                  if block.raw_columns[i] is None and block.large[i]]
        missing = [self._params[i].name for i in wanted if self._params[i].name not in names]
        if missing and self.stats == "graph":
            raise ValueError("ParameterTracker(stats='graph') needs a train network returning "
                             f"the statistics of {missing}: TrainStep(..., param_stats=True). "
                             f"Received: a {type(network).__name__} returning those of {names}")
        if missing or not wanted or index is None:
            return None
        block.given = set(wanted)
        return _GraphStats({i: self._params[i].name for i in wanted}, len(self._params))

    def _labels(self, name: str, size: Any) -> tuple[str, ...]:
        """The ``param`` column of a parameter's rows, in the order of its values."""
        size = int(size)
        if size == 1:
            return (name,)
        if size <= self.max_values:
            return tuple(f"{name}[{i}]" for i in range(size))
        return tuple(f"{name}:{stat}" for stat in STATS)

    def _select(self, params: list[Any]) -> list[Any]:
        if self.names is None:
            return params
        chosen = [p for p in params if any(fnmatch.fnmatchcase(p.name, pat) for pat in self.names)]
        unmatched = [pat for pat in self.names
                     if not any(fnmatch.fnmatchcase(p.name, pat) for p in params)]
        if unmatched:
            raise ValueError(f"ParameterTracker: no parameter matches {unmatched}; "
                             f"parameters are {[p.name for p in params]}. Received: names={self.names!r}")
        return chosen


STATS_SOURCES = ("auto", "host", "graph")


class _GraphStats:
    """Puts the statistics a ``TrainStep(param_stats=...)`` returned (the step
    record's ``param_stats``) among the host's arrays.

    Args:
        names: tracked parameter's position -> its name, for those the graph computes.
        count: how many parameters are tracked.
    """

    def __init__(self, names: dict[int, str], count: int) -> None:
        self.rows = names
        self.host_positions = [i for i in range(count) if i not in names]

    def merge(self, host_arrays: Sequence[Any], stats: Any) -> list[Any]:
        """Every tracked parameter's entry in order: the host's arrays, and
        for the graph's parameters their five statistics."""
        merged: list[Any] = [None] * (len(host_arrays) + len(self.rows))
        for i, array in zip(self.host_positions, host_arrays):
            merged[i] = array
        for i, name in self.rows.items():
            merged[i] = stats[name]
        return merged


def _check_budget(budget: float | None) -> float | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 1:
        raise ValueError(f"`budget` must be None or a fraction of a step's cost in (0, 1]. "
                         f"Received: budget={budget!r}")
    return float(budget)


# What one element of a large parameter's statistics costs, in multiply-adds of a
# train step: 8.4 M parameters' statistics took 1.8-2.0 ms, a 1-2048-2048-2048-1
# MLP's step at batch 16 (3 x 8.4 M x 16 multiply-adds) 56-58 ms, on this 2-core
# CPU with the fast extra (tests/callbacks/test_param_budget.py's former timing).
ELEMENT_COST_MACS = 1.6


def large_interval(large: int, trained: int, batch_size: int | None, budget: float) -> int:
    """Logged steps between two of the large parameters' statistics: the smallest
    interval keeping their estimated cost (``large`` elements at
    ``ELEMENT_COST_MACS`` each) under ``budget`` of a step's (3 x ``trained``
    elements x ``batch_size``), from sizes alone."""
    step = 3.0 * max(trained, 1) * max(batch_size or 1, 1)
    return max(1, math.ceil(large * ELEMENT_COST_MACS / (budget * step) - 1e-9))


# A parameter's host statistics share its chunks with helper threads from this
# many elements on (4 chunks): helpers pay on an idle machine above it; below it
# their start-up is most of the gain. Decided from sizes, so a run's choice does
# not depend on the load (the sums are the same bit for bit either way).
THREADS_FROM = 4 * CHUNK


def stats_threads(sizes: Sequence[int]) -> int:
    """Threads of the large parameters' host statistics: the CPUs this process may
    use (at most 4) when one has ``THREADS_FROM`` elements or more, else 1."""
    return default_workers() if any(n >= THREADS_FROM for n in sizes) else 1


def _check_names(names: str | Sequence[str] | None) -> list[str] | None:
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

    def __init__(self, specs: Sequence[tuple[int, tuple[str, ...], bool]], max_values: int,
                 max_steps: int = BLOCK_STEPS) -> None:
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
        self.steps: list[str] = [""] * self.capacity
        self.cells = [_csv_cell(label) + "," for _, labels, _ in specs for label in labels]
        self.at_step = [c for c, raw in zip(self.columns, self.raw_columns) if raw is None]
        self.any_at_step = bool(self.at_step)
        self.kept = [i for i, k in enumerate(keep) if k and specs[i][0] > 0]
        self.all_raw = len(self.kept) == len(specs)
        self.at_step_index = [i for i, raw in enumerate(self.raw_columns) if raw is None]
        skipped = set().union(*[range(c.start, c.stop) for c in self.at_step])
        self.every_step_cells = [i for i in range(width) if i not in skipped]
        self.with_large = [True] * self.capacity
        self.given: set[int] = set()   # parameters whose statistics come computed (the graph's)
        self.n = 0
        self.since = 0.0

    @staticmethod
    def _columns(specs: Sequence[tuple[int, tuple[str, ...], bool]]) -> list[slice]:
        """The slice of the value columns each parameter fills, in order."""
        out: list[slice] = []
        col = 0
        for _, labels, _ in specs:
            out.append(slice(col, col + len(labels)))
            col += len(labels)
        return out

    def add(self, step: int, epoch: int, arrays: Sequence[np.ndarray], with_large: bool = True,
            workers: int = 1) -> None:
        """Keep one step's values (``arrays``: each parameter's flat values,
        or the five statistics of a parameter in ``given``);
        ``with_large=False`` leaves out the parameters whose statistics are
        computed at the step (a budget's skipped step); ``workers``: the
        threads each of those statistics uses."""
        k = self.n
        kept = self.kept
        if kept:   # the kept parameters' values side by side: one copy, in their order
            np.concatenate(arrays if self.all_raw else [arrays[i] for i in kept], out=self.raw[k])
        if with_large and self.at_step_index:
            self._add_statistics(k, arrays, workers)
        self.with_large[k] = with_large
        self.steps[k] = f"{step},{epoch},"
        self.n = k + 1
        if k == 0:
            self.since = time.monotonic()

    def _add_statistics(self, k: int, arrays: Sequence[np.ndarray], workers: int) -> None:
        """Step ``k``'s values of the parameters not kept raw: their statistics
        now, from the parameter's memory (or as given, or element by element)."""
        values, columns, large, given = self.values[k], self.columns, self.large, self.given
        for i in self.at_step_index:
            array = arrays[i]
            values[columns[i]] = (array if i in given or not large[i]
                                  else statistics(array, workers))

    def full(self) -> bool:
        return self.n >= self.capacity

    def waited(self) -> float:
        """Seconds since the block's oldest step (0 when empty)."""
        return time.monotonic() - self.since if self.n else 0.0

    def take_text(self) -> tuple[str, int]:
        """``(text, rows)``: the CSV rows of every kept step; empties the block."""
        k = self.n
        self._fill_kept(k)
        values = list(map(repr, self.values[:k].ravel().tolist()))
        end, cells, width = _LINE_END, self.cells, len(self.cells)
        if all(self.with_large[:k]):
            text = "".join([head + cell + value + end
                            for i, head in enumerate(self.steps[:k])
                            for cell, value in zip(cells, values[i * width:(i + 1) * width])])
            self.n = 0
            return text, k * width
        return self._take_text_sparse(k, values)

    def _take_text_sparse(self, k: int, values: list[str]) -> tuple[str, int]:
        """:meth:`take_text` when some steps left the large parameters out."""
        end, cells, width = _LINE_END, self.cells, len(self.cells)
        lines: list[str] = []
        for i, head in enumerate(self.steps[:k]):
            row = values[i * width:(i + 1) * width]
            chosen = range(width) if self.with_large[i] else self.every_step_cells
            lines.extend(head + cells[c] + row[c] + end for c in chosen)
        self.n = 0
        return "".join(lines), len(lines)

    def _fill_kept(self, k: int) -> None:
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


def _csv_cell(text: str) -> str:
    """``text`` as one CSV field (quoted only when it must be), as csv.writer writes it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([text])
    return buf.getvalue()
