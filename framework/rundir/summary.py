"""The outcome summary of a run's logs, kept in run.json when the run ends.

``compare()`` needs a handful of numbers per run (final, min and best step
of the loss, the last value of each scalar parameter, the last and best of
each eval metric). Computing them means reading every CSV of every run;
the runner computes them once, with :func:`log_summary`, when a run ends
(also after a resume), and stores them under run.json's ``summary``, so a
finished run is compared from run.json alone. A running run, a run killed
before its end and a run made before this record have none: reports read
their CSVs through the same function, so both ways give the same table.
"""

import functools
import json
import os

from ..callbacks import schema
from ..define.config import monitor_mode

SUMMARY_KEY = "summary"
# Bump when the content changes: a record of another version is ignored.
# (``system``, system.csv's peaks, came without a bump: runs older than it have no
# system.csv, and readers take a missing ``system`` as none)
SUMMARY_VERSION = 2  # 2: the loss components' final values


def log_summary(run):
    """The summary of ``run``'s logs (a :class:`~mindexp.rundir.run.Run`), a JSON-able dict.

    The logs are read as numpy arrays (:meth:`~mindexp.rundir.run.Run.read_arrays`):
    a run's end does not import pandas for it. Raises RunDirError when a log is
    unreadable (as reading it would)."""
    return {"version": SUMMARY_VERSION, "loss": _loss_summary(run.read_arrays(schema.LOSS.name)),
            "params": _final_scalar_params(run.read_arrays(
                schema.PARAMS.name, (schema.Col.PARAM, schema.Col.VALUE))),
            "eval": _eval_summary(run.read_arrays(schema.EVAL.name), run.config),
            "system": system_summary(*(run.read_arrays(os.path.basename(path)) for path in
                                       schema.rank_files(run.dir, schema.SYSTEM.name).values()))}


def stored_summary(meta):
    """run.json's summary when it can stand for the logs, else None.

    Only a run that is no longer running has a final one (a run killed
    mid-training still says ``running``: its CSVs are read instead)."""
    summary = meta.get(SUMMARY_KEY)
    if meta.get("status") == "running" or not isinstance(summary, dict) \
            or summary.get("version") != SUMMARY_VERSION:
        return None
    return summary


def _loss_summary(loss):
    """loss.csv's rows, final and min loss, the min's step, the last step and epoch,
    the last value of each component (``loss``: its columns by name)."""
    import numpy as np  # here: eval_name and stored_summary serve commands that need no numpy
    values = np.asarray(loss.get(schema.Col.LOSS, ()), dtype=float)
    if not len(values):
        return {"rows": 0, "final": None, "min": None, "best_step": None, "last_step": None,
                "last_epoch": None, "components": {}}
    best = None if np.isnan(values).all() else int(np.nanargmin(values))
    return {"rows": int(len(values)), "final": float(values[-1]),
            "min": float(values[best]) if best is not None else None,
            "best_step": int(loss[schema.Col.STEP][best]) if best is not None else None,
            "last_step": int(loss[schema.Col.STEP][-1]),
            "last_epoch": int(loss[schema.Col.EPOCH][-1]),
            "components": {str(c): float(column[-1]) for c, column in loss.items()
                           if c not in schema.LOSS.columns}}


def system_summary(*systems):
    """``peak_rss_mb`` and ``mean_cpu_percent`` (the process's) of system.csv
    tables (several: one per node or rank, the peak of all and the mean of all
    samples), plus ``peak_device_memory_mb`` where the device reports it; {}
    without samples. A table: a DataFrame, or numpy arrays by column name."""
    import numpy as np  # here: eval_name and stored_summary serve commands that need no numpy
    out = {}
    for key, column, how in (("peak_rss_mb", "rss_mb", np.nanmax),
                             ("mean_cpu_percent", "process_cpu_percent", np.nanmean),
                             ("peak_device_memory_mb", "device_memory_mb", np.nanmax)):
        values = np.concatenate([np.asarray(t[column], dtype=float)
                                 for t in systems if column in t] or [np.empty(0)])
        if not np.isnan(values).all():
            out[key] = round(float(how(values)), 2)
    return out


def _final_scalar_params(params):
    """Last logged value of each scalar parameter (not elements ``w[0]`` or statistics
    ``w:norm``), in the order of their last rows."""
    names, values = params.get(schema.Col.PARAM, ()), params.get(schema.Col.VALUE, ())
    last = {}
    for name, value in zip(reversed(names), reversed(values)):  # (tidy rows: last per name)
        last.setdefault(str(name), value)
    return {name: float(value) for name, value in reversed(last.items())
            if not ("[" in name or ":" in name)}


def _eval_summary(table, config):
    """``{eval_<metric>: last, best_eval_<metric>: best}`` over eval.csv's metric
    columns; no best for a metric whose direction is unknown (never guessed)."""
    import numpy as np  # here: eval_name and stored_summary serve commands that need no numpy
    out = {}
    for metric, column in table.items():
        if metric in (schema.Col.EPOCH, schema.Col.STEP):
            continue
        values = np.asarray(column, dtype=float)
        values = values[~np.isnan(values)]
        if not len(values):
            continue
        name = eval_name(metric)
        out[name] = float(values[-1])
        direction = run_direction(config, name)
        if direction is not None:
            out[f"best_{name}"] = float(values.min() if direction == "min" else values.max())
    return out


def eval_name(metric):
    """The name of an eval.csv column everywhere else: ``eval_<metric>``
    (``loss`` -> ``eval_loss``; a name already starting with ``eval_`` stays)."""
    metric = str(metric)
    return metric if metric in (schema.Col.EPOCH, schema.Col.STEP) or metric.startswith("eval_") \
        else f"eval_{metric}"


def run_direction(config, name):
    """``"min"``, ``"max"`` or None (unknown) for a value a run logged, named
    as everywhere but eval.csv (``loss``, ``eval_loss``, ``eval_accuracy``).

    The rule of :mod:`mindexp.callbacks.direction`, with the run's own
    ``early_stop_mode`` winning for the value it stopped on (``config``: the
    run's config.json)."""
    mode = config.get("early_stop_mode", "auto") if name == config.get("early_stop") else "auto"
    return monitor_mode(name, mode)


# run.json's own fields a compare() row shows as they are
_CELL_META = ("experiment", "run_id", "status", "study", "trial", "tags", "note", "targets")


def compare_cells(meta, config, summary):
    """compare()'s values of one run, from its run.json (``meta``), config.json
    (``config``) and the summary of its logs (run.json's or :func:`log_summary`'s),
    JSON-able: what the run's row holds before the table names its columns
    (which depend on every run's config fields and eval metrics: the table
    does that, ``reports.compare``). The run store keeps them per finished
    run, flattened (:func:`stored_cells`)."""
    loss = summary[schema.LOSS.name]
    outcomes = {
        "final_loss": loss["final"] if loss["rows"] else meta.get("final_loss"),
        "min_loss": loss["min"],
        "best_step": loss["best_step"],
        # run.json holds the totals once the run ended; loss.csv while it runs
        "steps": meta.get("steps") or (loss["last_step"] if loss["rows"] else 0),
        "epochs": meta.get("epochs") or (loss["last_epoch"] if loss["rows"] else 0),
        "train_time_s": meta.get("train_time_s"),
        "steps_per_s": meta.get("steps_per_s"),
        **{f"final_{name}": value for name, value in loss.get("components", {}).items()},
    }
    finals = dict(summary["params"])   # the last logged value, then run.json's for the untracked
    for name, value in (meta.get("params") or {}).items():
        finals.setdefault(name, value)
    block = meta.get("provenance")     # the captured provenance (mindexp.provenance)
    git = block.get("git") if isinstance(block, dict) else None
    git = git if isinstance(git, dict) else {}
    return {"meta": {k: meta.get(k) for k in _CELL_META}, "config": config,
            "outcomes": outcomes, "finals": finals, "eval": summary["eval"],
            "system": summary.get("system") or {}, "git": [git.get("commit"), git.get("dirty")]}


# The parts of compare()'s cells flattened for the store, in order (``git``: [commit, dirty]).
CELL_PARTS = ("meta", "config", "outcomes", "finals", "eval", "system")
GIT_KEYS = ("commit", "dirty")
TARGETS = "targets"   # a run's targets (a dict): a part of their own once flattened


def flat_cells(cells):
    """:func:`compare_cells`' ``cells`` flattened: ``(shape, values)``, one value per
    ``(part, key, type name)`` of ``shape`` (a tuple). Runs of one shape give
    their table the same columns of the same types, so a table of many runs
    is made a column at a time, one shape after the other; the targets (a
    dict) are a part of their own for that (their keys name columns)."""
    shape, values = [], []
    for part in CELL_PARTS:
        for key, value in cells[part].items():
            if part == "meta" and key == TARGETS and isinstance(value, dict):
                shape.extend((TARGETS, name, type(v).__name__) for name, v in value.items())
                values.extend(value.values())
                continue
            shape.append((part, key, type(value).__name__))
            values.append(value)
    shape.extend(("git", key, type(value).__name__) for key, value in zip(GIT_KEYS, cells["git"]))
    values.extend(cells["git"])
    return tuple(shape), values


def stored_cells(meta, config):
    """:func:`flat_cells` of :func:`compare_cells` as two JSON texts (shape, values)
    when run.json holds the final summary (a finished run), else None (a running
    or old run: its row needs its logs; a summary of another shape: the logs say
    what it should have; a value JSON would give back as another type)."""
    summary = stored_summary(meta)
    if summary is None:
        return None
    try:
        shape, values = flat_cells(compare_cells(meta, config, summary))
        if not all(kind in _JSON_TYPES for _, _, kind in shape):
            return None
        return _shape_text(shape), json.dumps(values, allow_nan=True)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None


@functools.lru_cache(maxsize=64)
def _shape_text(shape):
    """A shape as JSON (a writer's runs share a few: each written once)."""
    return json.dumps(shape)


# the types of the values json.loads gives (a value of another type comes back as one of these)
_JSON_TYPES = frozenset(t.__name__ for t in (str, int, float, bool, type(None), list, dict))


def cell_value(value):
    """A config value as compare() shows it: fit for a table cell and a set
    (lists become tuples, objects tuples of their sorted items)."""
    if isinstance(value, list):
        return tuple(cell_value(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, cell_value(v)) for k, v in value.items()))
    return value
