"""compare()'s rows: one run's values (its cells) and the table they make.

A run's cells (:func:`~mindexp.rundir.summary.compare_cells`) come from its
files (:func:`file_cells`) or from the run store, which keeps them per
finished run; :func:`table_of` names the columns from every run's config
fields and eval metrics and makes the DataFrame. ``reports.compare`` and its
snapshot (:mod:`.snapshot`) both make their rows here, so the two ways give
the same table.
"""
from __future__ import annotations

import collections
import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import RunDirError
from ..rundir.meta import UNREADABLE, UnreadableRun
from ..rundir.run import Run
from ..rundir.summary import cell_value, compare_cells, log_summary, stored_summary

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

IDENTITY = ("experiment", "run_id", "status")


LABELS = ("tags", "note")  # set by the user (mindexp tag / note), after the identity


# A run that could not be read: ``status`` is ``unreadable`` when its run.json
# does not validate (listed with that status), ``skipped`` when a log is broken.
Skipped = collections.namedtuple("Skipped", "run_dir error status")


def warn_skipped(errors: Iterable[Skipped]) -> None:
    """One warning per run that could not be read."""
    for skipped in errors:
        logger.warning("%s: %s", "unreadable run" if skipped.status == UNREADABLE
                       else "skipped a broken run", skipped.error)


def file_cells(run_dir: str) -> tuple[dict | None, Skipped | None]:
    """``(cells, None)`` of the run in ``run_dir`` read from its files (a running
    or old run: its logs too), or ``(None, Skipped)`` when it cannot be read."""
    try:
        return cells_of(_load_for_compare(Run.found(run_dir))), None
    except RunDirError as exc:
        return None, Skipped(run_dir, str(exc), skip_status(exc))


def skip_status(error):
    """``unreadable`` for a run.json that does not validate, ``skipped`` for another error."""
    return UNREADABLE if isinstance(error, UnreadableRun) else "skipped"


def unreadable_rows(errors, **blank):
    """One row per run of ``errors`` whose run.json does not validate: its id,
    status ``unreadable``, folder, and ``blank`` (the other columns' empty values)."""
    return [{"run_id": os.path.basename(s.run_dir), "experiment": None, "status": UNREADABLE,
             **blank, "run_dir": s.run_dir} for s in errors if s.status == UNREADABLE]


def _load_for_compare(path):
    """A run with what ``compare`` reads: run.json and config.json, and its
    logs only when run.json holds no final summary (running or old runs)."""
    run = path if isinstance(path, Run) else Run(path)
    parts = ("meta", "config") if stored_summary(run.meta) else \
        ("meta", "config", "loss", "params", "eval")
    for part in parts:
        getattr(run, part)
    return run


def cells_of(run: Run) -> dict:
    """compare()'s values of ``run`` from its files
    (:func:`~mindexp.rundir.summary.compare_cells`)."""
    return compare_cells(run.meta, run.config, _summary_of(run))


def table_of(entries: Sequence[tuple[str, dict]], errors: Iterable[Skipped] = ()) -> pd.DataFrame:
    """compare()'s table, unsorted, of ``entries`` (``(run_dir, cells)`` in folder
    order), then a row per unreadable run of ``errors``: the columns are named
    here, from every run's config fields and eval metrics."""
    config = table_config(entries)
    return frame_of(rows_of(entries, errors, config), config,
                    _union(cells["eval"] for _, cells in entries))


def rows_of(entries: Sequence[tuple[str, dict]], errors: Iterable[Skipped],
            config: Mapping[str, str]) -> list[dict]:
    """The rows of :func:`table_of` as dicts."""
    return [row_of(run_dir, cells, config) for run_dir, cells in entries] + \
        unreadable_rows(errors, tags="", note="")


def frame_of(rows: list[dict], config: Mapping[str, str], evals: list[str],
             columns: list[str] | None = None) -> pd.DataFrame:
    """The DataFrame of :func:`rows_of`'s ``rows``, with its ``attrs``;
    ``columns``: their :func:`column_order` when the caller knows it."""
    import pandas as pd
    table = pd.DataFrame(rows, columns=columns or column_order(rows, config))
    # what each column is, for readers that must not guess from names
    table.attrs["config_columns"] = list(config.values())
    table.attrs["eval_columns"] = list(evals)
    return table


def table_config(entries: Sequence[tuple[str, dict]]) -> dict[str, str]:
    """``{config field: its column}`` of a table of ``entries`` (:func:`table_of`)."""
    evals = _union(cells["eval"] for _, cells in entries)
    return {n: config_column(n, evals) for n in _union(cells["config"] for _, cells in entries)}


# A tuning trial's run status as Optuna's trial state (``mindexp tune``).
TRIAL_STATES = {"completed": "COMPLETE", "pruned": "PRUNED", "interrupted": "INTERRUPTED",
                "running": "RUNNING"}


def row_of(run_dir: str, cells: Mapping[str, Any], config: Mapping[str, str]) -> dict:
    """One run's row from its cells (:func:`cells_of`); ``config``: ``{field: its column}``."""
    meta = cells["meta"]
    row = {name: meta.get(name) for name in IDENTITY}
    row["run_id"] = meta.get("run_id") or os.path.basename(run_dir)
    if meta.get("study") is not None:  # a trial: its number and state next to the status
        row.update(study=meta["study"], trial=meta.get("trial"),
                   trial_state=TRIAL_STATES.get(meta.get("status"), "FAIL"))
    row.update(tags=",".join(meta.get("tags") or []), note=meta.get("note") or "")
    _put_config(row, cells["config"], config)
    outcomes = cells["outcomes"]
    row.update(outcomes if config.keys().isdisjoint(outcomes) else
               {outcome_column(k, config): v for k, v in outcomes.items()})
    finals = cells["finals"]
    # A parameter named like a config field (a bare Parameter "lr") must not hide it.
    column = dict(zip(finals, finals)) if row.keys().isdisjoint(finals) else \
        {name: f"param.{name}" if name in row else name for name in finals}
    row.update(zip(column.values(), finals.values()))
    row.update({f"{column[name]}_error": abs(finals[name] - float(target))
                for name, target in (meta.get("targets") or {}).items()
                if finals.get(name) is not None and _is_number(target)})
    row.update(cells["eval"])
    row.update(cells["system"])
    row.update(git_commit=cells["git"][0], dirty=cells["git"][1])
    row["run_dir"] = run_dir
    return row


def _put_config(row, values, config):
    """``row``'s config columns (``config``: ``{field: its column}``) from the run's
    config ``values``: a row per run and a column per field, so at C speed (map,
    zip, list.index) but for the lists and objects, made cells by :func:`~mindexp.rundir.summary.cell_value`."""
    columns = list(config.values())
    if list(values) == columns and list(config) == columns:   # every field, none renamed
        row.update(values)
        got = list(values.values())
    else:
        got = list(map(values.get, config))
        row.update(zip(columns, got))
    types = list(map(type, got))
    for kind in _NESTED:
        at = -1
        for _ in range(types.count(kind)):
            at = types.index(kind, at + 1)
            row[columns[at]] = cell_value(got[at])


def config_column(name: str, metrics: Sequence[str] = ()) -> str:
    """compare()'s column of the config field ``name``: ``config.<name>`` when
    an identity column or a metric (of ``metrics``) has that name, else ``name``."""
    return f"config.{name}" if name in IDENTITY + LABELS or name == "run_dir" \
        or name in metrics else name


def outcome_column(name: str, config_names: Iterable[str]) -> str:
    """compare()'s column of the outcome ``name``: ``<name>_done`` when a config
    field has that name, else ``name``."""
    return f"{name}_done" if name in config_names else name


def column_order(rows: Sequence[Mapping], config: Mapping[str, str]) -> list[str]:
    """compare()'s columns of ``rows`` (identity, labels, trial, config, the rest as
    the rows name them first, ``run_dir``)."""
    trial = [c for c in ("study", "trial", "trial_state") if any(c in row for row in rows)]
    head = list(IDENTITY + LABELS) + trial + list(config.values())
    seen: dict[str, Any] = {}
    for row in rows:   # every row's names in order of first appearance, at C speed
        seen.update(row)
    skip = set(head) | {"run_dir"}
    rest = [k for k in seen if k not in skip]
    return head + rest + ["run_dir"]


def _summary_of(run):
    """run.json's summary of a finished run, else the same computed from its CSVs."""
    return stored_summary(run.meta) or log_summary(run)


def _union(dicts):
    return list(dict.fromkeys(k for d in dicts for k in d))


_NESTED = (list, dict)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)
