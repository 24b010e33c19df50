"""The run directory's one owner: the name of every file in it, the columns
of each log, their readers, and the one atomic write.

Everything that writes or reads a run directory (the callbacks, the run
record, resume, reports, plots, provenance, use, manage) takes names from
here. It lives in ``callbacks/`` because the callbacks write most of these
files and must not import the framework; it imports only the standard
library (pandas lazily, through ``read_log``). The writers are
``atomic_write`` (whole files) and ``CsvLog`` (appended logs); the
readers ``read_log`` (a DataFrame) and ``read_rows`` (dicts).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from ._files import atomic_replace, atomic_write, fsync_folder, temp_name  # noqa: F401
from .csv_log import read_csv, read_rows  # noqa: F401  (the readers of the logs)

if TYPE_CHECKING:
    import pandas as pd

# -- files and folders of a run directory ---------------------------------------
CONFIG_JSON = "config.json"            # the full resolved config
RUN_JSON = "run.json"                  # the run record (status, totals, provenance)
RUN_LOCK = ".run.lock"                 # held for each read-change-write of run.json
RESUME_LOCK = ".lock"                  # held by a resume for its whole run (pid, host inside)
WORKER_LOCK = "worker-{host}-{pid}.lock"  # a search worker's, in <study>/logs/, held while it lives
SPACE_RESERVE = ".space-reserve"       # freed when the disk fills, so run.json can still say why
ERROR_FILE = "error.txt"               # the full traceback of a failed run
EVALUATIONS_CSV = "evaluations.csv"    # one row per `mindexp evaluate`
CHECKPOINT_DIR = "checkpoints"         # <CHECKPOINT_DIR>/epochEEEE-stepSSSSSSS.ckpt
PLOTS_DIR = "plots"                    # PNGs drawn after a run
SOURCE_DIR = "source"                  # copies of the experiment's code (provenance)
ENVIRONMENT_FILE = "environment.txt"   # sorted `name==version`, one a line (provenance)
TENSORBOARD_DIR = "tensorboard"        # event files of `mindexp tensorboard`
REWRITTEN_NETWORK_DIR = "rewritten_network"  # AMP O1's rewritten module source
MSRUN_DIR = "msrun"                    # msrun's own log and the workers' logs (--workers N)
# -- beside the runs ------------------------------------------------------------
SUMMARY_INDEX = ".mindexp-index.json"  # per output root: each run's run.json + config.json, by file signature
FIGURES_DIR = "figures"                # <name>/epoch-<k>.png and the latest <name>.png
FIGURES_LOG = "figures.log"            # tracebacks of an experiment's figures() hook that raised


class Log:
    """One CSV log of a run: its file name and its columns, in order.

    ``required`` are the columns reports rely on (a log with extra columns,
    e.g. eval.csv's metrics, names only its fixed ones).
    """

    def __init__(self, name: str, filename: str, columns: Sequence[str],
                 required: Sequence[str] | None = None) -> None:
        self.name, self.filename, self.columns = name, filename, tuple(columns)
        self.required = tuple(columns if required is None else required)

    def __repr__(self) -> str:
        return f"Log({self.filename!r}, columns={self.columns!r})"


LOSS = Log("loss", "loss.csv", ("step", "epoch", "loss", "lr", "time_s"),
           required=("step", "epoch", "loss"))
PARAMS = Log("params", "params.csv", ("step", "epoch", "param", "value"))
GRAD_NORM = Log("grad_norm", "grad_norm.csv", ("step", "epoch", "grad_norm"))
GRAD_NORM_PARAMS = Log("grad_norm_params", "grad_norm_params.csv",
                       ("step", "epoch", "param", "grad_norm"))
EVAL = Log("eval", "eval.csv", ("epoch", "step"))  # then one column per metric
CHECKPOINTS = Log("checkpoints", "checkpoints.csv",
                  ("step", "epoch", "loss", "file", "kind", "score"),
                  required=("step", "epoch", "file"))
# The machine's side of a run, sampled off the training thread (SystemMonitor);
# the device column is there only where MindSpore reports device memory.
SYSTEM = Log("system", "system.csv",
             ("time_s", "step", "process_cpu_percent", "machine_cpu_percent", "rss_mb",
              "threads", "read_bytes", "write_bytes", "device_memory_mb"),
             required=("time_s", "step", "process_cpu_percent", "machine_cpu_percent", "rss_mb",
                       "threads", "read_bytes", "write_bytes"))

# The logs a run reads back by name (Run.read("loss")), and those whose rows
# carry a global step (resume cuts each back to the checkpoint's step).
LOGS = {log.name: log for log in (LOSS, PARAMS, GRAD_NORM, GRAD_NORM_PARAMS, EVAL, CHECKPOINTS,
                                  SYSTEM)}
STEP_LOGS = tuple(log.filename for log in LOGS.values())
# Columns that hold text; every other column holds numbers, these integers.
TEXT_COLUMNS = ("param", "file", "kind")
INTEGER_COLUMNS = ("step", "epoch")


def path_of(run_dir: str | os.PathLike[str], name: str) -> str:
    """The path of ``name`` (a file name above, or a log's short name) in ``run_dir``."""
    log = LOGS.get(name)
    return os.path.join(os.fspath(run_dir), log.filename if log else name)


def read_log(run_dir: str | os.PathLike[str], name: str) -> pd.DataFrame:
    """A log of ``run_dir`` as a pandas DataFrame (see ``csv_log.read_csv``)."""
    return read_csv(path_of(run_dir, name))
