"""Objectives: the ``compare()`` columns a tuned run can be judged by.

The accepted names are whatever :func:`mindexp.compare` reports for one run
of the experiment, found by comparing a tiny synthetic run directory made in
a temporary folder (never under ``--out``). So when compare() names or adds
columns, ``--objective`` follows without a list kept here.
"""
import json
import math
import os
import tempfile

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError

_PROBE_LOSS = ",".join(schema.LOSS.required) + "\n1,1,0.5\n"


class Objective:
    """A column of ``compare()``, its direction and, for pruning, what to
    report during training: an eval ``metric`` (``best`` for a running best)
    or each epoch's mean training loss (``metric`` None)."""

    def __init__(self, column, direction, metric=None, best=False):
        self.column, self.direction, self.metric, self.best = column, direction, metric, best
        self.inferred = False  # the direction came from the name (no --direction)

    def value_of(self, run_dir):
        """The objective of a finished run, or None when compare() has no number for it."""
        from ..analysis.reports import compare
        table = compare(run_dir)
        value = table[self.column].iloc[0] if self.column in table.columns else None
        try:
            value = float(value)
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) else None


def resolve_objective(exp, column, direction=None):
    """Check ``column`` against the columns compare() reports for ``exp``'s runs
    and return the :class:`Objective` (ConfigError listing the valid names).

    ``direction`` None: inferred from the name as ``early_stop_mode=auto``
    does (:func:`mindexp.define.config.monitor_mode`); ConfigError when the name
    does not tell. :attr:`Objective.inferred` says which it was."""
    if direction not in ("minimize", "maximize", None):
        raise ConfigError(f"--direction must be minimize or maximize. Received: --direction "
                          f"{direction}", field="direction")
    metrics = _eval_metrics(exp)
    train_columns = _probe_columns(exp, [])
    eval_columns = [c for c in _probe_columns(exp, metrics) if c not in train_columns]
    if column in train_columns:
        found = Objective(column, direction)
    elif column in eval_columns:
        metric = max((m for m in metrics if m in column), key=len)
        found = Objective(column, direction, metric=metric, best="best" in column)
    else:
        valid = train_columns + eval_columns
        raise ConfigError(f"unknown objective {column!r}; {exp.experiment_name()}'s runs have "
                          f"the numeric compare() columns: {', '.join(valid)}"
                          f"{_missing_metric_hint(exp, column, metrics)}. Received: --objective "
                          f"{column}", field="objective")
    if direction is None:
        found.direction, found.inferred = _infer_direction(exp, found), True
    return found


def _missing_metric_hint(exp, column, metrics):
    """For ``eval_<m>`` / ``best_eval_<m>`` whose metric the runs do not compute:
    how to add it (the ``metrics`` config field, or the experiment's ``metrics()``)."""
    name = column[len("best_"):] if column.startswith("best_") else column
    if not name.startswith("eval_") or name == "eval_":
        return ""
    wanted = name[len("eval_"):]
    if not metrics:
        return (f" ({column} needs an eval split: {exp.experiment_name()}'s source('eval') "
                "gives none)")
    from_config = list(getattr(exp.config, "metrics", None) or []) == metrics
    how = (f"--set metrics={','.join(metrics + [wanted])}" if from_config
           else f"add {wanted!r} to {type(exp).__name__}.metrics()")
    return f" ({column} needs the eval metric {wanted!r}, which these runs lack: {how})"


def _infer_direction(exp, objective):
    """``minimize``/``maximize`` from the objective's name (an eval column by its metric)."""
    from ..define.config import monitor_mode
    name = f"eval_{objective.metric}" if objective.metric else objective.column
    mode = monitor_mode(name, "auto", exp.metrics() if objective.metric else None)
    if mode is None and objective.metric:
        mode = monitor_mode(objective.column)
    if mode is None:
        raise ConfigError(f"cannot tell whether objective {objective.column!r} should be "
                          "minimized or maximized from its name; add --direction minimize or "
                          f"--direction maximize. Received: --objective {objective.column}",
                          field="direction")
    return {"min": "minimize", "max": "maximize"}[mode]


def _eval_metrics(exp):
    """The eval.csv columns of ``exp``'s runs ([] when it has no eval split)."""
    try:
        has_eval = exp.source("eval") is not None
    except Exception:  # the user's code: training reports it properly
        return []
    return [str(m) for m in (exp.metrics() or [])] if has_eval else []


def _probe_columns(exp, metrics):
    """compare()'s outcome columns for a one-step run of ``exp`` with these eval metrics."""
    from ..analysis.reports import compare
    from ..define.config import to_dict
    targets = {k: float(v) for k, v in (exp.targets() or {}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    with tempfile.TemporaryDirectory(prefix="mindexp-objective-") as tmp:
        run_dir = os.path.join(tmp, "probe")
        os.mkdir(run_dir)
        _write(run_dir, layout.RUN_JSON, json.dumps({
            "experiment": exp.experiment_name(), "run_id": "probe", "status": "completed",
            "steps": 1, "epochs": 1, "final_loss": 0.5, "train_time_s": 1.0, "steps_per_s": 1.0,
            "targets": targets, "params": {k: 0.0 for k in targets}}))
        _write(run_dir, layout.CONFIG_JSON, json.dumps(to_dict(exp.config)))
        _write(run_dir, schema.LOSS.filename, _PROBE_LOSS)
        if metrics:
            _write(run_dir, schema.EVAL.filename, ",".join(schema.EVAL.columns + tuple(metrics)) + "\n1,1,"
                   + ",".join("0.5" for _ in metrics) + "\n")
        table = compare(run_dir)
    skip = set(table.attrs.get("config_columns", [])) | {"experiment", "run_id", "status",
                                                         "run_dir"}
    return [c for c in table.columns if c not in skip and _numeric(table[c])]


def _numeric(column):
    """A column a study can optimise: numbers, not text (tags, note, git_commit) or flags."""
    import pandas as pd
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _write(folder, name, text):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(text)
