"""SystemMonitor: the machine's side of a run (CPU, memory, threads, I/O) to system.csv."""
from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ._common import check_directory, log_path
from ._log_callback import LogCallback
from ._mindspore import device_memory_reader
from . import schema
from .csv_log import CsvLog

if TYPE_CHECKING:
    from mindspore.train import RunContext

__all__ = ["SystemMonitor"]


def _psutil() -> Any:
    try:
        import psutil
    except ImportError:
        raise ImportError("SystemMonitor needs psutil (the optional extra: "
                          "pip install 'mindexp[system]')") from None
    return psutil


class SystemMonitor(LogCallback):
    """Write the process's and machine's load to ``<directory>/system.csv``.

    A daemon thread samples with psutil every ``every_s`` seconds (the first
    sample when training begins, the last when it ends, all on that thread: psutil
    keeps its previous CPU reading per thread), so the training
    thread only counts its steps. Columns: ``time_s, step,
    process_cpu_percent, machine_cpu_percent, rss_mb, threads, read_bytes,
    write_bytes`` and ``device_memory_mb`` where MindSpore reports device
    memory (not on CPU). The CPU columns of the first sample are empty (a
    percentage needs an interval).

    Under data parallelism a machine's load is shared by its workers: rank
    0 writes ``system.csv`` and the first worker of every other node (local
    rank 0, as msrun numbers them) ``system.rankN.csv`` (N its global rank),
    one file per machine.

    Args:
        directory: folder of ``system.csv``.
        every_s: seconds between samples (> 0).
        all_ranks: every rank other than 0 writes ``system.rankN.csv``.
        per_node: the first worker of each node writes its file (False: rank 0
            only, unless ``all_ranks``).
        start_step: steps trained before (a resumed run).
        time_offset: seconds added to ``time_s`` (a resumed run).
        append: continue an existing ``system.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
    """

    def __init__(self, directory: str | os.PathLike[str], every_s: float = 5.0, all_ranks: bool = False,
                 start_step: int = 0, time_offset: float = 0.0, per_node: bool = True,
                 append: bool = False) -> None:
        super().__init__()
        self.append = bool(append)
        self.directory = check_directory(directory)
        if isinstance(every_s, bool) or not isinstance(every_s, (int, float)) or every_s <= 0:
            raise ValueError(f"`every_s` must be a number > 0. Received: every_s={every_s!r}")
        self.every_s = float(every_s)
        self.all_ranks = bool(all_ranks)
        self.per_node = bool(per_node)
        self.step = int(start_step)
        self.time_offset = float(time_offset)
        self._psutil = _psutil()
        self._process = self._psutil.Process()
        self._log: CsvLog | None = None
        self._lock = threading.Lock()   # the sampler and flush()/close() share the log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self._device: Callable[[], float] | None = None
        self._first_error: BaseException | None = None
        self._previous: list[Any] = []  # time_s and step of the latest sample

    def on_train_begin(self, run_context: RunContext) -> None:
        path = log_path(self.directory, schema.SYSTEM.filename, self.all_ranks, self.per_node)
        if path is None:
            return
        self._device = device_memory_reader()
        columns = schema.SYSTEM.columns if self._device else schema.SYSTEM.required
        self._log = self._checked_log(path, columns)
        if self._t0 is None:  # a second Model.train on the same monitor keeps the clock
            self._t0 = time.monotonic()
        self._stop.clear()
        self._first_error = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="mindexp-system",
                                        daemon=True)
        self._thread.start()
        started.wait()  # the first row (step 0) is written before the first step
        if self._first_error is not None:
            self.close()
            raise self._first_error

    def on_train_step_end(self, run_context: RunContext) -> None:
        self.step += 1  # all the training thread does; the sampler reads it

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        pass  # each sample is written when taken (and the log is the sampler's)

    def _run(self, started: threading.Event) -> None:
        # Every sample is taken here: psutil keeps the previous machine-wide CPU
        # times per thread, so a reading on another thread than the one before it
        # would measure since boot (0.0 on a busy machine that had been idle).
        try:
            self._sample(first=True)
        except BaseException as exc:  # raised again on the training thread
            self._first_error = exc
            return
        finally:
            started.set()
        while not self._stop.wait(self.every_s):
            self._sample()
        self._sample(last=True)  # when training ends

    def _sample(self, first: bool = False, last: bool = False) -> None:
        row = self._read(first)
        if last and row[:2] == self._previous:
            return  # training ended within the millisecond of a sample: that one is the last
        self._previous = row[:2]
        with self._lock:
            if self._log is not None:
                self._log.write(row)
                self._log.flush()  # a sample every few seconds: written at once

    def _read(self, first: bool) -> list[Any]:
        proc, ps = self._process, self._psutil
        with proc.oneshot():
            cpu = proc.cpu_percent(None)
            machine = ps.cpu_percent(None)
            rss = proc.memory_info().rss / 2 ** 20
            threads = proc.num_threads()
            io = proc.io_counters() if hasattr(proc, "io_counters") else None
        assert self._t0 is not None  # set when training began
        row: list[Any] = [round(time.monotonic() - self._t0 + self.time_offset, 3), self.step,
               "" if first else round(cpu, 1), "" if first else round(machine, 1),
               round(rss, 2), threads, io.read_bytes if io else "", io.write_bytes if io else ""]
        if self._device:
            row.append(round(self._device(), 2))
        return row

    def on_train_end(self, run_context: RunContext) -> None:
        self.close()

    def flush(self) -> None:
        """Write buffered rows (each sample is written when taken)."""
        with self._lock:
            if self._log is not None:
                self._log.flush()

    def close(self) -> None:
        """Stop the sampler, take the last sample and close the log; safe twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()  # it takes the last sample
        with self._lock:
            if self._log is not None:
                self._log.close()
            self._log = None
