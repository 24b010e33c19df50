"""The runs table behind ``mindexp runs`` and ``mindexp gc``: one row per run,
filtered, sorted and fitted to the terminal.

Rows come from run.json and config.json alone (cheap for hundreds of runs).
A ``--where`` or ``--sort`` that names a column only the logs give
(``min_loss``, ``best_step``, eval values, parameter errors) adds
``compare()``'s columns, read from each run's CSV logs.
"""
import datetime as _dt

from ..callbacks import schema
from ..analysis.cells import format_age
from ..analysis.reports import _read_each, compare, sort_table
from ..analysis.rows import config_column, outcome_column, unreadable_rows
from ..rundir.run_lock import GONE, shown_status
from ..rundir import where as condition
from .filters import mentioned
from .table_text import fitted_columns, short_paths

OUTCOMES = ("steps", "epochs", "final_loss", "train_time_s", "steps_per_s")
SHOWN = ("path", "status", "tags", "age", "steps", "final_loss")


def runs_table(paths):
    """One row per run below ``paths`` (newest first), from run.json and config.json.

    Columns: run_id, experiment, status (``running (process gone)`` for a
    run marked running whose lock no process holds), tags (comma-separated), note,
    started_at, ended_at, age_s, the config fields, steps, epochs_done,
    final_loss, train_time_s, steps_per_s, the final scalar parameters,
    run_dir. A run whose run.json does not validate has the status
    ``unreadable``. ``attrs["errors"]`` lists the runs that could not be read.
    """
    import pandas as pd
    rows, errors = _read_each(paths, _row)
    rows += unreadable_rows(errors, tags="", note="", started_at=None, ended_at=None,
                            age_s=None)
    table = pd.DataFrame(rows)
    table = table[[c for c in table.columns if c != "run_dir"] + ["run_dir"]]
    table = table.sort_values("started_at", ascending=False, kind="stable", na_position="last")
    table = table.reset_index(drop=True)
    table.attrs["errors"] = errors
    return table


def _row(run):
    meta, config = run.meta, run.config
    row = {"run_id": run.run_id, "experiment": meta.get("experiment"),
           "status": shown_status(run.dir, meta.get("status")),
           "tags": ",".join(meta.get("tags") or []), "note": meta.get("note") or "",
           "started_at": meta.get("started_at"), "ended_at": meta.get("ended_at"),
           "age_s": _age_s(meta.get("started_at"))}
    row.update({config_column(k): _cell(v) for k, v in config.items()})
    outcomes = {k: meta.get(k) for k in OUTCOMES}
    if meta.get("status") == "running":  # run.json is final only at the end: ask loss.csv
        loss = run.loss
        outcomes["steps"] = int(loss[schema.Col.STEP].iloc[-1]) if len(loss) else 0
        outcomes["final_loss"] = float(loss[schema.Col.LOSS].iloc[-1]) if len(loss) else None
    row.update({outcome_column(k, config): v for k, v in outcomes.items()})
    for name, value in (meta.get("params") or {}).items():
        row[f"param.{name}" if name in row else name] = value
    row["run_dir"] = run.dir
    return row


def select(table, filters):
    """The rows of ``table`` that pass ``filters`` (a :class:`.filters.Filters`)."""
    keep = _plain_mask(table, filters)
    table = table[keep].reset_index(drop=True)
    if filters.where:
        table = where(table, filters.where)
    return table


def _plain_mask(table, filters):
    import pandas as pd
    keep = pd.Series(True, index=table.index)
    if filters.experiments:
        keep &= table["experiment"].isin(filters.experiments)
    if filters.statuses:
        raw = table["status"].replace({GONE: "running"})
        keep &= raw.isin(filters.statuses)
    for tag in filters.tags:
        keep &= table["tags"].map(lambda text: tag in text.split(","))
    started = table["started_at"].map(_timestamp)
    if filters.since is not None:
        keep &= started >= filters.since
    if filters.older is not None:
        ended = table["ended_at"].map(_timestamp).fillna(started)
        keep &= ended <= filters.older
    return keep


def where(table, expression):
    """The rows of ``table`` matching ``--where`` (:mod:`..rundir.where`: checked,
    never run as code); a column only the logs give adds compare()'s columns
    first. ConfigError (one line) for an unknown column or a refused expression."""
    checked = condition.parse(expression)
    if len(table) and any(name not in table.columns for name in checked.columns):
        table = with_log_columns(table)
    return condition.select(table, expression)


def with_log_columns(table):
    """``table`` plus the columns of ``compare()`` it lacks (min_loss, best_step,
    eval values, parameter errors), read from each run's logs."""
    if not len(table):
        return table
    full = compare(list(table["run_dir"]))
    extra = [c for c in full.columns if c not in table.columns]
    merged = table.merge(full[["run_dir"] + extra], on="run_dir", how="left")
    return merged[[c for c in merged.columns if c != "run_dir"] + ["run_dir"]]


def with_column(table, column, paths):
    """``table`` plus compare()'s ``column`` (gc's ``--by``): read as one column
    from the run catalog when it can tell, else every compare() column from
    each run's logs (:func:`with_log_columns`)."""
    from ..analysis.reports import catalog_columns
    if not len(table):
        return table
    parts = [catalog_columns(path, ["run_dir", column]) for path in paths]
    if any(part is None for part in parts):
        return with_log_columns(table)
    import pandas as pd
    found = pd.concat(parts).drop_duplicates("run_dir")
    merged = table.merge(found, on="run_dir", how="left")
    return merged[[c for c in merged.columns if c != "run_dir"] + ["run_dir"]]


def order(table, sort=None, limit=None):
    """Sorted by ``sort`` (``-col`` descending; default newest first), then the first ``limit``."""
    if sort:
        column = sort.lstrip("-")
        if column not in table.columns and len(table):
            table = with_log_columns(table)
        table = sort_table(table, sort)
    return table.head(limit) if limit else table


def named_columns(table, *texts):
    """The columns of ``table`` that ``--where``/``--sort`` texts mention (to show them)."""
    found = mentioned(*texts)
    return [c for c in table.columns if str(c) in found]


# -- display -----------------------------------------------------------------------

def display(table, extra=(), wide=False):
    """The table a person reads: short path, status, tags, age, steps, final loss,
    plus the ``extra`` columns (and with ``wide`` the note)."""
    import pandas as pd
    shown = pd.DataFrame({"path": table["run_dir"].map(short_path),
                          "status": table["status"], "tags": table["tags"],
                          "age": table["age_s"].map(format_age), "steps": table["steps"],
                          "final_loss": pd.to_numeric(table["final_loss"], errors="coerce")})
    for column in extra:
        if column not in shown.columns and column in table.columns:
            shown[column] = table[column]
    if wide:
        shown["note"] = table["note"]
    return shown


def short_path(path):
    """``path`` relative to the working folder when below it, else as it is."""
    return short_paths([path])[0]


def format_fitted(table, width=100):
    """Aligned text no wider than ``width`` (None: no limit): the widest text
    cells are cut with an ellipsis (paths keep their end, the run id)."""
    columns = {c: list(table[c]) for c in table.columns}
    numeric = {c: _is_numeric(table[c]) for c in table.columns}
    return fitted_columns(columns, numeric, width, floats=False)


def _is_numeric(series):
    import pandas as pd
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


# -- helpers -----------------------------------------------------------------------

def _cell(value):
    if isinstance(value, list):
        return tuple(_cell(v) for v in value)
    return value


def _timestamp(text):
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return float("nan")


def _age_s(started_at):
    stamp = _timestamp(started_at)
    if stamp != stamp:
        return None
    return max(0.0, _dt.datetime.now().timestamp() - stamp)
