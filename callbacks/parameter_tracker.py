"""ParameterTracker: trajectories of network parameters to params.csv (tidy)."""
import fnmatch
import json
import os
import subprocess
import sys

import numpy as np

from ._common import (check_directory, check_every, log_path, step_info, tensor_values,
                      trained_parameters)
from ._log_callback import LogCallback
from ._stats import STATS, statistics as _statistics
from .csv_log import CsvLog

__all__ = ["ParameterTracker"]

# The shared-memory ring of the writer process: at most this many bytes...
RING_BYTES = 64 << 20
# ... and this many steps (the writer keeps up unless the machine is starved)
RING_SLOTS = 256
_RING_DTYPES = {"Float16": np.float32, "Float32": np.float32, "Float64": np.float64}


class ParameterTracker(LogCallback):
    """Write parameter values as tidy rows ``step,epoch,param,value``.

    A one-element parameter is written under its name (``dense.weight``),
    one with up to ``max_values`` elements as ``name[i]`` (flat index), a
    larger one as ``name:norm``, ``name:mean``, ``name:std``, ``name:min``
    and ``name:max``. Each selected parameter is copied once per logged
    step, and only on logged steps.

    With ``background=True`` (the default) the training thread only copies
    the parameters into a shared-memory ring (straight from their host
    memory on CPU, where ``asnumpy()`` is a view of it) and a writer
    process computes the statistics and writes the rows
    (``_param_writer.py``): the same file, the same rows, whole rows on
    disk; :meth:`flush` waits until every step handed over is written.

    Args:
        directory: folder of ``params.csv``.
        names: parameter names or glob patterns (``"dense.*"``); default:
            every parameter the optimizer updates.
        every: write every N-th global step (and each epoch's last step).
        max_values: largest parameter written element by element.
        all_ranks: ranks other than 0 write ``params.rankN.csv``.
        background: statistics and CSV rows in a writer process (False: on
            the training thread).
    """

    FILENAME = "params.csv"
    COLUMNS = ("step", "epoch", "param", "value")

    def __init__(self, directory, names=None, every=1, max_values=16, all_ranks=False,
                 background=False):
        super().__init__()
        self.background = bool(background)
        self._ring = None
        self.directory = check_directory(directory)
        self.names = _check_names(names)
        self.every = check_every("every", every)
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
        if self._log is not None and self.background and self._params:
            self._ring = _StepRing.for_plan(self._plan, self._log)

    def on_train_step_end(self, run_context):
        step, epoch, epoch_end = step_info(run_context.original_args())
        if self._log is None or (step % self.every and not epoch_end):
            return
        if self._ring is not None:
            self._ring.put(step, epoch)
            return
        rows = []
        for (param, labels, large), flat in zip(self._plan, self._host.arrays()):
            # labels made once, in on_train_begin; five statistics of a large one
            values = _statistics(flat) if large else flat.astype(np.float64).tolist()
            rows.extend([(step, epoch, label, value) for label, value in zip(labels, values)])
        self._log.write_rows(rows)

    def flush(self):
        """Write every logged step to disk (waits for the writer process)."""
        if self._ring is not None:
            self._ring.flush()
        super().flush()

    def close(self):
        if self._ring is not None:
            self._ring.close()   # writes the rest and closes params.csv
        super().close()

    def on_train_epoch_end(self, run_context):
        if self._ring is None:
            super().on_train_epoch_end(run_context)   # the writer flushes on its own clock

    def values(self, name, array):
        """The ``(label, value)`` pairs written for one parameter."""
        raw = np.asarray(array).reshape(-1)
        labels = self._labels(name, raw.size)
        if raw.size <= self.max_values:
            return list(zip(labels, raw.astype(np.float64).tolist()))
        return list(zip(labels, _statistics(raw)))

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


class _StepRing:
    """The trainer's end of the writer process (see ``_param_writer.py``).

    One slot per logged step in a shared-memory ring; :meth:`put` copies
    the tracked parameters into the next free slot (from cached host views
    when ``asnumpy()`` gives one, checked by data pointer every step) and
    hands the slot over with one small write to the writer's stdin.
    The process starts with the first step (never for a run that logs
    none) and again after :meth:`close` when training goes on.
    """

    def __init__(self, params, plan, sizes, dtype, log):
        self.params, self.plan, self.sizes, self.dtype, self.log = params, plan, sizes, dtype, log
        self.labels = [label for _, labels, _ in plan for label in labels]
        self.slot_size = int(sum(sizes))
        self.slots = max(2, min(RING_SLOTS, RING_BYTES // max(1, self.slot_size *
                                                            np.dtype(dtype).itemsize)))
        self.proc = self.shm = self.ring = None
        self.host = _HostViews(params)
        self.next_slot = self.in_flight = 0

    @classmethod
    def for_plan(cls, plan, log):
        """A ring for ``plan``, or None when a parameter's dtype is not a float
        numpy can hold (those stay on the training thread)."""
        params = [p for p, _, _ in plan]
        kinds = [_RING_DTYPES.get(str(p.dtype)) for p in params]
        if not params or any(k is None for k in kinds):
            return None
        dtype = np.float64 if np.float64 in kinds else np.float32
        return cls(params, plan, [int(p.size) for p in params], dtype, log)

    def put(self, step, epoch):
        if self.proc is None:
            self._start()
        if self.in_flight == self.slots:   # the writer is a whole ring behind: wait for a slot
            self._read_ack()
        slot = self.ring[self.next_slot]
        offset = 0
        for view, size in zip(self.host.arrays(), self.sizes):
            slot[offset:offset + size] = view
            offset += size
        os.write(self.fd, b"S %d %d %d\n" % (self.next_slot, step, epoch))
        self.next_slot = (self.next_slot + 1) % self.slots
        self.in_flight += 1

    def _start(self):
        from multiprocessing import shared_memory
        nbytes = self.slots * self.slot_size * np.dtype(self.dtype).itemsize
        self.shm = shared_memory.SharedMemory(create=True, size=max(1, nbytes))
        self.ring = np.ndarray((self.slots, self.slot_size), dtype=self.dtype,
                               buffer=self.shm.buf)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_param_writer.py")
        self.proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0, close_fds=True,
                                     start_new_session=True)  # no terminal signals
        offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).tolist()
        spec = {"shm": self.shm.name, "slots": self.slots, "slot_size": self.slot_size,
                "dtype": np.dtype(self.dtype).name, "labels": self.labels,
                "plan": [(int(o), int(s), bool(large)) for o, s, (_, _, large)
                         in zip(offsets, self.sizes, self.plan)],
                "path": self.log.path, "columns": self.log.fieldnames,
                "flush_rows": self.log.flush_rows * 32, "flush_seconds": self.log.flush_seconds}
        self.fd = self.proc.stdin.fileno()
        os.write(self.fd, (json.dumps(spec) + "\n").encode())
        if self.proc.stdout.readline() != b"ready\n":
            self._stop()
            raise RuntimeError(f"ParameterTracker: the writer process of {self.log.path} "
                               f"did not start. Received: exit status {self.proc.poll()}")
        self.next_slot = self.in_flight = 0

    def _read_ack(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"ParameterTracker: the writer process of {self.log.path} "
                               f"ended. Received: exit status {self.proc.wait()}")
        self.in_flight -= 1
        return line

    def flush(self):
        """Wait until every step handed over is on disk."""
        if self.proc is None:
            return
        os.write(self.fd, b"F\n")
        while self._read_ack() != b"ok\n":
            pass
        self.in_flight += 1   # "ok" is no slot
        
    def close(self):
        """Let the writer write the rest and exit; free the ring."""
        if self.proc is not None:
            self._stop()

    def _stop(self):
        proc, self.proc = self.proc, None
        proc.stdin.close()            # end of input: the writer flushes and exits
        proc.stdout.read()
        code = proc.wait()
        self.ring = None
        self.shm.close()
        self.shm.unlink()
        self.shm = None
        if code != 0:
            raise RuntimeError(f"ParameterTracker: the writer process of {self.log.path} "
                               f"failed. Received: exit status {code}")
