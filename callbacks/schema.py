"""The callbacks' side of a run directory: the name of every file a callback
writes, the columns of each log, their readers, and the one atomic write.

Everything that writes or reads those files (the callbacks, resume, reports,
plots, use, manage) takes their names from here. It lives in ``callbacks/``
because the callbacks must not import the framework; the framework's own
names (run.json, config.json, the locks, ...) are in
``mindexp.layout``, which builds on this module: each name has one
owner. It imports only the standard library (pandas lazily, through
``read_log``). The writers are
``atomic_write`` (whole files) and ``CsvLog`` (appended logs); the
readers ``read_log`` (a DataFrame) and ``read_rows`` (dicts).
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Sequence

from ._files import (NotAFileError, atomic_replace, atomic_write, fsync_folder,  # noqa: F401
                     open_fd, open_file, temp_name)
from .csv_log import (read_arrays, read_csv, read_header, read_rows,  # noqa: F401  (the readers)
                      release_memory)

if TYPE_CHECKING:
    import pandas as pd

# -- the files the callbacks write (the logs' names are in the Logs below) -------
# The framework's own names (run.json, config.json, locks, plots, provenance,
# the catalog, ...) live in framework/layout.py: this module is copied
# alone into other projects and names only what a callback writes.
LOG_REGISTRY = "logs.json"             # every log of the run and its step column (resume cuts each)
CHECKPOINT_DIR = "checkpoints"         # <CHECKPOINT_DIR>/epochEEEE-stepSSSSSSS.ckpt


class Log:
    """One CSV log of a run: its file name and its columns, in order.

    ``required`` are the columns reports rely on (a log with extra columns,
    e.g. eval.csv's metrics, names only its fixed ones).
    """

    def __init__(self, name: str, filename: str, columns: Sequence[str],
                 required: Sequence[str] | None = None) -> None:
        self.name, self.filename, self.columns = name, filename, tuple(columns)
        self.required = tuple(columns if required is None else required)

    @property
    def step_column(self) -> str | None:
        """The column holding the global step (a resume cuts the log back by
        it), or None for a log without one."""
        return Col.STEP if Col.STEP in self.columns else None

    def __repr__(self) -> str:
        return f"Log({self.filename!r}, columns={self.columns!r})"


class Col:
    """The name of each column of the logs, one definition each: the logs
    below are built from these, and readers index rows by them
    (``loss[schema.Col.STEP]``)."""

    STEP = "step"            # the global step, 1-based, counted across epochs
    EPOCH = "epoch"          # 1-based
    LOSS = "loss"            # the training loss (eval.csv: the eval loss metric)
    LR = "lr"                # the learning rate used at the step
    TIME_S = "time_s"        # training seconds since the run started, resumes included
    PARAM = "param"          # a watched parameter's name (with ``:norm`` or ``[i]``)
    VALUE = "value"          # its value
    GRAD_NORM = "grad_norm"  # the global (or one parameter's) gradient L2 norm
    FILE = "file"            # a checkpoint's path, relative to the run directory
    KIND = "kind"            # a checkpoint's kind: "last" or "best"
    SCORE = "score"          # a best checkpoint's monitored value
    PROCESS_CPU_PERCENT = "process_cpu_percent"  # system.csv: this process, % of one core
    MACHINE_CPU_PERCENT = "machine_cpu_percent"  # system.csv: the whole machine, %
    RSS_MB = "rss_mb"                            # system.csv: this process's resident memory
    THREADS = "threads"                          # system.csv: this process's threads
    READ_BYTES = "read_bytes"                    # system.csv: bytes read by this process so far
    WRITE_BYTES = "write_bytes"                  # system.csv: bytes written so far
    DEVICE_MEMORY_MB = "device_memory_mb"        # system.csv: device memory held (not on CPU)


LOSS = Log("loss", "loss.csv", (Col.STEP, Col.EPOCH, Col.LOSS, Col.LR, Col.TIME_S),
           required=(Col.STEP, Col.EPOCH, Col.LOSS))
PARAMS = Log("params", "params.csv", (Col.STEP, Col.EPOCH, Col.PARAM, Col.VALUE))
GRAD_NORM = Log("grad_norm", "grad_norm.csv", (Col.STEP, Col.EPOCH, Col.GRAD_NORM))
GRAD_NORM_PARAMS = Log("grad_norm_params", "grad_norm_params.csv",
                       (Col.STEP, Col.EPOCH, Col.PARAM, Col.GRAD_NORM))
EVAL = Log("eval", "eval.csv", (Col.EPOCH, Col.STEP))  # then one column per metric
CHECKPOINTS = Log("checkpoints", "checkpoints.csv",
                  (Col.STEP, Col.EPOCH, Col.LOSS, Col.FILE, Col.KIND, Col.SCORE),
                  required=(Col.STEP, Col.EPOCH, Col.FILE))
# The machine's side of a run, sampled off the training thread (SystemMonitor);
# the device column is there only where MindSpore reports device memory.
_SYSTEM_COLUMNS = (Col.TIME_S, Col.STEP, Col.PROCESS_CPU_PERCENT, Col.MACHINE_CPU_PERCENT,
                   Col.RSS_MB, Col.THREADS, Col.READ_BYTES, Col.WRITE_BYTES)
SYSTEM = Log("system", "system.csv", _SYSTEM_COLUMNS + (Col.DEVICE_MEMORY_MB,),
             required=_SYSTEM_COLUMNS)

# The logs a run reads back by name (Run.read("loss")), and those whose rows
# carry a global step (resume cuts each back to the checkpoint's step).
LOGS = {log.name: log for log in (LOSS, PARAMS, GRAD_NORM, GRAD_NORM_PARAMS, EVAL, CHECKPOINTS,
                                  SYSTEM)}
STEP_LOGS = tuple(log.filename for log in LOGS.values())
# Columns that hold text; every other column holds numbers, these integers.
TEXT_COLUMNS = (Col.PARAM, Col.FILE, Col.KIND)
INTEGER_COLUMNS = (Col.STEP, Col.EPOCH)


def path_of(run_dir: str | os.PathLike[str], name: str) -> str:
    """The path of ``name`` (a file name above, or a log's short name) in ``run_dir``."""
    log = LOGS.get(name)
    return os.path.join(os.fspath(run_dir), log.filename if log else name)


def log_of_file(filename: str) -> Log | None:
    """The log a file of a run is (``loss.csv``, also a rank's ``loss.rank3.csv``,
    given as its name inside the run folder), or None for a file no callback
    here writes (a user's own log)."""
    stem, ext = os.path.splitext(filename)
    rankless = re.sub(r"\.rank[1-9][0-9]*$", "", stem) + ext
    return next((log for log in LOGS.values() if log.filename == rankless), None)


def rank_filename(filename: str, rank: int) -> str:
    """The name of ``filename`` written by rank ``rank`` (> 0): ``loss.csv`` ->
    ``loss.rank3.csv`` (rank 0 writes ``filename`` itself)."""
    stem, ext = os.path.splitext(filename)
    return f"{stem}.rank{int(rank)}{ext}"


def rank_files(run_dir: str | os.PathLike[str], name: str) -> dict[int, str]:
    """``{rank: path}`` of log ``name``'s files in ``run_dir``, rank 0's first
    (when present), then the other ranks' (:func:`rank_filename`) in rank order."""
    filename = LOGS[name].filename if name in LOGS else name
    stem, ext = os.path.splitext(filename)
    pattern = re.compile(re.escape(stem) + r"\.rank([1-9][0-9]*)" + re.escape(ext) + "$")
    try:
        names = os.listdir(run_dir)
    except OSError:
        return {}
    found = {int(m.group(1)): os.path.join(os.fspath(run_dir), n)
             for n in names for m in [pattern.match(n)] if m}
    first = {0: os.path.join(os.fspath(run_dir), filename)} if filename in names else {}
    return {**first, **dict(sorted(found.items()))}


def read_log(run_dir: str | os.PathLike[str], name: str) -> pd.DataFrame:
    """A log of ``run_dir`` as a pandas DataFrame (see ``csv_log.read_csv``)."""
    return read_csv(path_of(run_dir, name))
