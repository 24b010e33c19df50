"""The run directory's one owner: the name of every file in it, the columns
of each log, their readers, and the one atomic write.

Everything that writes or reads a run directory (the callbacks, the run
record, resume, reports, plots, provenance, use, manage) takes names from
here. It lives in ``callbacks/`` because the callbacks write most of these
files and must not import the framework; it imports only the standard
library (pandas lazily, through :func:`read_log`). The writers are
:func:`atomic_write` (whole files) and ``CsvLog`` (appended logs); the
readers :func:`read_log` (a DataFrame) and :func:`read_rows` (dicts).
"""
import os

from ._files import atomic_replace, atomic_write, fsync_folder, temp_name  # noqa: F401
from .csv_log import read_csv, read_rows  # noqa: F401  (the readers of the logs)

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


class Log:
    """One CSV log of a run: its file name and its columns, in order.

    ``required`` are the columns reports rely on (a log with extra columns,
    e.g. eval.csv's metrics, names only its fixed ones).
    """

    def __init__(self, name, filename, columns, required=None):
        self.name, self.filename, self.columns = name, filename, tuple(columns)
        self.required = tuple(columns if required is None else required)

    def __repr__(self):
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
    EVALUATED_AT = "evaluated_at"  # evaluations.csv: when
    CHECKPOINT = "checkpoint"      # evaluations.csv: which checkpoint file
    SPLIT = "split"                # evaluations.csv: "eval" or "train"


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
# Not in LOGS: written by `mindexp evaluate` after the run, never cut back by a resume.
EVALUATIONS = Log("evaluations", EVALUATIONS_CSV,
                  (Col.EVALUATED_AT, Col.CHECKPOINT, Col.STEP, Col.EPOCH, Col.SPLIT))

# The logs a run reads back by name (Run.read("loss")), and those whose rows
# carry a global step (resume cuts each back to the checkpoint's step).
LOGS = {log.name: log for log in (LOSS, PARAMS, GRAD_NORM, GRAD_NORM_PARAMS, EVAL, CHECKPOINTS)}
STEP_LOGS = tuple(log.filename for log in LOGS.values())
# Columns that hold text; every other column holds numbers, these integers.
TEXT_COLUMNS = (Col.PARAM, Col.FILE, Col.KIND)
INTEGER_COLUMNS = (Col.STEP, Col.EPOCH)


def path_of(run_dir, name):
    """The path of ``name`` (a file name above, or a log's short name) in ``run_dir``."""
    log = LOGS.get(name)
    return os.path.join(os.fspath(run_dir), log.filename if log else name)


def read_log(run_dir, name):
    """A log of ``run_dir`` as a pandas DataFrame (see :func:`csv_log.read_csv`)."""
    return read_csv(path_of(run_dir, name))
