"""The framework's own names in a run directory and beside the runs.

``callbacks/schema.py`` names the files the callbacks write (the logs, their
columns, ``checkpoints/``, ``logs.json``) and owns the readers and the atomic
write; the framework's own files (run.json, config.json, the locks, the
catalog, provenance, plots, ...) are named here, each in one place. A name
lives in exactly one of the two modules: framework code takes
``schema.LOSS`` from the schema and ``layout.RUN_JSON`` from here.

This module imports only the schema, so every room of the framework may
import it (tests/framework/test_architecture.py puts it on floor 1, with
``errors``: define/ reads run.json and source/ by these names).
"""
from __future__ import annotations

from .callbacks import schema

# -- files and folders of a run directory ---------------------------------------
CONFIG_JSON = "config.json"            # the full resolved config
RUN_JSON = "run.json"                  # the run record (status, totals, provenance)
RUN_LOCK = ".run.lock"                 # held for each read-change-write of run.json
RESUME_LOCK = ".lock"                  # held by a resume for its whole run (pid, host inside)
SPACE_RESERVE = ".space-reserve"       # freed when the disk fills, so run.json can still say why
ERROR_FILE = "error.txt"               # the full traceback of a failed run
EVALUATIONS_CSV = "evaluations.csv"    # one row per `mindexp evaluate`
INPUT_TRANSFORM_FILE = "input_transform.npz"  # a fitted input transform's state (numbers, no pickle)
PLOTS_DIR = "plots"                    # PNGs drawn after a run
SOURCE_DIR = "source"                  # copies of the experiment's code (provenance)
ENVIRONMENT_FILE = "environment.txt"   # sorted `name==version`, one a line (provenance)
TENSORBOARD_DIR = "tensorboard"        # event files of `mindexp tensorboard`
MLFLOW_RECORD = "mlflow.json"          # what was sent to MLflow, per tracking URI (never a password)
MSRUN_DIR = "msrun"                    # msrun's own log and the workers' logs (--workers N)
FIGURES_DIR = "figures"                # <name>/epoch-<k>.png and the latest <name>.png
FIGURES_LOG = "figures.log"            # tracebacks of an experiment's figures() hook that raised
# -- beside the runs ------------------------------------------------------------
WORKER_LOCK = "worker-{host}-{pid}.lock"  # a search worker's, in <study>/logs/, held while it lives
CATALOG = ".mindexp-catalog"          # per output root: a folder holding CATALOG_DB (its journals come and go there, not beside the runs)
CATALOG_DB = "runs.sqlite"             # the table of the root's runs (derived; rebuilt when missing)
COMPARE_SNAPSHOT = "compare-{}.arrow"   # in CATALOG: compare() of a folder (its hash), as columns, with the feed value it is of
SUMMARY_INDEX = ".mindexp-index.json"  # what the catalog replaced (0.x): left alone, never read


class EvalCol:
    """evaluations.csv's own columns; its step and epoch are ``schema.Col``'s,
    and one column per metric follows."""

    EVALUATED_AT = "evaluated_at"  # when
    CHECKPOINT = "checkpoint"      # which checkpoint file
    SPLIT = "split"                # "eval" or "train"


# Written by `mindexp evaluate` after the run, never by a callback, never cut back by a resume.
EVALUATIONS = schema.Log("evaluations", EVALUATIONS_CSV,
                         (EvalCol.EVALUATED_AT, EvalCol.CHECKPOINT, schema.Col.STEP,
                          schema.Col.EPOCH, EvalCol.SPLIT))
