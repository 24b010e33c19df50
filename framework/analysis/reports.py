"""Reports: read run directories back and compare them with pandas.

pandas is imported inside the functions, so importing ``framework`` stays
light (``mindexp list`` imports neither pandas nor mindspore).
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError, RunDirError
from ..rundir.run import Run
from ..rundir.io import is_run_dir
from ..rundir.meta import UNREADABLE
from .cells import format_value
from .rows import (IDENTITY, LABELS, Skipped, _load_for_compare, cells_of,
                   config_column, skip_status, table_of, union_keys, warn_skipped)
from ..rundir.summary import cell_value, eval_name

if TYPE_CHECKING:
    import pandas as pd

    from ..rundir.run import RunsOrPaths

logger = logging.getLogger(__name__)

OUTCOMES = ("final_loss", "min_loss", "best_step", "steps", "epochs", "train_time_s",
            "steps_per_s")
_MISSING = object()


class RunList(list):
    """The runs that loaded, plus ``errors``: a ``Skipped`` ``(run_dir, error,
    status)`` per broken run."""

    def __init__(self, runs: Iterable[Run] = (), errors: Iterable[Skipped] = ()) -> None:
        super().__init__(runs)
        self.errors = list(errors)


# -- loading -----------------------------------------------------------------

def load_run(path):
    """Read one run directory back as a ``mindexp.Run``.

    Reads run.json, config.json and the logs reports and the dashboard draw
    (loss, params, eval, grad_norm, system), so a broken run fails here,
    with a RunDirError naming the file (not later, while a page is built).
    """
    run = path if isinstance(path, Run) else Run(path)
    for part in ("meta", "config", "loss", "params", "eval", "grad_norm", "system"):
        getattr(run, part)
    return run


def find_run_dirs(path):
    """The run directories at or below ``path`` (sorted); RunDirError when none."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise RunDirError(f"{path} does not exist. Received: {path!r}")
    if is_run_dir(path):
        return [os.path.abspath(path)]
    if not os.path.isdir(path):
        raise RunDirError(f"{path} is neither a run directory nor a folder holding runs. "
                          f"Received: {path!r}")
    found = []
    for root, dirs, files in os.walk(path):
        if layout.RUN_JSON in files:
            found.append(os.path.abspath(root))
            dirs.clear()  # a run's own subfolders (checkpoints/, plots/) hold no runs
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    if not found:
        raise RunDirError(f"{path} holds no runs (no {layout.RUN_JSON} in it or in any folder below it). "
                          f"Received: {path!r}")
    return sorted(found)


def load_runs(paths):
    """Load run directories and every run below folders (recursively).

    A sweep's or a study's folder (``outputs/sweeps/<id>``) gives the runs
    its index names. Folders that are not runs are skipped. A broken run (unreadable JSON,
    malformed or truncated CSV) does not fail the whole call: it is logged
    as a warning and listed in the result's ``errors``. Raises RunDirError
    when a path does not exist or holds no runs, or when no run loads.
    """
    runs, errors = _read_each(paths, load_run)
    return RunList(runs, errors)


def list_runs(paths):
    """Like :func:`load_runs`, reading only run.json and config.json of each run
    (from the run catalog); logs are read when used."""
    return RunList(*_read_each(paths, _load_records))


def _read_each(paths, read):
    """``read(run)`` for every run below ``paths`` (a :class:`Run`, its run.json
    and config.json from the run catalog); broken
    runs are collected, not fatal."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise RunDirError("no run paths given. Received: []")
    runs = {}
    for path in paths:
        for run in _runs_below(path):
            runs.setdefault(run.dir, run)
    done, errors = [], []
    for run_dir, run in runs.items():
        try:
            done.append(read(run))
        except RunDirError as exc:
            errors.append(Skipped(run_dir, str(exc), skip_status(exc)))
    if not done:
        raise RunDirError(_nothing_loaded(errors))
    warn_skipped(errors)
    return done, errors


def _runs_below(path):
    """The runs at or below ``path`` (a folder's through the run catalog of its
    root; a sweep or study folder's: the runs its sweep.json or study.json names);
    RunDirError as :func:`find_run_dirs` raises it."""
    from ..rundir.store import open_store
    from ..rundir.groups import index_name, index_runs
    path = os.fspath(path)
    if is_run_dir(path) or not os.path.isdir(path):
        return [Run(d) for d in find_run_dirs(path)]
    name = index_name(path)
    if name:  # a sweep's or a study's folder: the runs its index names
        named = index_runs(path, previous=False)
        if not named:
            raise RunDirError(f"{path} is a sweep or study folder whose {name} names no run "
                              f"that exists (yet). Received: {path!r}")
        return [Run(d) for d in named]
    with open_store(path) as catalog:
        runs = catalog.runs(os.path.abspath(path))
    if not runs:
        find_run_dirs(path)   # raises the error that says why
    return runs


def _nothing_loaded(errors):
    if len(errors) == 1:
        return errors[0][1]
    return f"none of the {len(errors)} runs could be read; the first: {errors[0][1]}"


def as_runs(runs_or_paths: RunsOrPaths, read: Callable[[str], Run] | None = None) -> list[Run]:
    """Runs from a Run, a path, or a list of either (paths go through ``load_runs``,
    or through ``read(run_dir)`` when given)."""
    items = [runs_or_paths] if isinstance(runs_or_paths, (str, os.PathLike, Run)) \
        else list(runs_or_paths)
    runs = [i for i in items if isinstance(i, Run)]
    if items and len(runs) == len(items):
        return runs_or_paths if isinstance(runs_or_paths, RunList) else runs
    paths = [i.dir if isinstance(i, Run) else i for i in items]
    return load_runs(paths) if read is None else RunList(*_read_each(paths, read))


def _load_records(path):
    """A run with its run.json and config.json read; logs are read when used."""
    run = path if isinstance(path, Run) else Run(path)
    run.meta, run.config  # noqa: B018  (cached: a broken JSON is skipped here)
    return run


# -- comparing ---------------------------------------------------------------

def compare(runs_or_paths, sort="final_loss", columns=None, group_by=None, against=None,
            where=None):
    """One row per run, as a pandas DataFrame (one row per group with ``group_by``).

    Columns: ``experiment, run_id, status, tags`` (comma-separated),
    ``note``; every config field under its own name; ``final_loss, min_loss,
    best_step, steps, epochs_done, train_time_s, steps_per_s``
    (``epochs_done`` because ``epochs`` is the config field); ``final_<name>``
    of each loss component (the last loss.csv value of that column); the
    final value of each tracked scalar parameter; ``<param>_error`` (absolute
    error to the run's ``targets``); ``eval_<metric>`` (the last evaluation)
    and ``best_eval_<metric>`` from eval.csv, so an eval metric named ``loss``
    is ``eval_loss`` and never hides the training ``final_loss``;
    ``git_commit`` and ``dirty`` of the experiment file's repository (None
    outside git); ``run_dir``. A config field named like an identity column
    or an eval column (a field ``eval_loss`` beside the metric) is
    ``config.<name>``; ``table.attrs["config_columns"]`` and
    ``attrs["eval_columns"]`` say which columns are which (never guess from a
    name: ``eval_every`` is a config field).

    ``sort`` names a column (prefix ``-`` for descending); missing values go
    last. An unknown column raises ConfigError listing the valid ones.

    ``columns``: only these columns, in this order (``sort`` may name
    another). Of one folder, they come from the run store's columns when it
    can tell them; the full table from its per-run cells, as a snapshot kept
    current with its change feed (:mod:`.snapshot`; the manual's "Many runs").

    ``group_by``: config fields (a name or a list), or ``"auto"`` (the fields
    whose values differ, except ``seed``): one row per group, in the order of
    its values, with ``n`` (its runs) and, per numeric outcome ``m`` (never a
    config field), ``m_mean``, ``m_std`` (ddof 1), ``m_ci_low`` and
    ``m_ci_high`` (the 95 % t-interval of the mean). ``against``: the baseline
    group's value (``{field: value}`` for several fields) adds ``test``
    (``paired``, runs matched by ``seed``, when both groups hold the same
    seeds; else ``welch``), ``m_diff`` with ``m_diff_ci_low`` and
    ``m_diff_ci_high`` (95 %), ``m_p`` and ``m_p_holm`` (Holm-corrected). A
    group with fewer than two values of ``m`` has NaN there; unreadable runs
    are left out (the manual's "Compare and plot"; :mod:`.groups`).

    ``where``: only the runs matching it, before ``columns`` and ``group_by``
    (``mindexp runs --where``'s grammar, :mod:`mindexp.rundir.where`).
    """
    if where is not None:
        return _compare_where(runs_or_paths, sort, columns, group_by, against, where)
    if group_by is not None or against is not None:
        return _grouped(compare(runs_or_paths, sort), group_by, against)
    if columns is not None:
        return _compare_columns(runs_or_paths, sort, list(columns))
    return _compare_all(runs_or_paths, sort)


def _compare_columns(runs_or_paths, sort, columns):
    """compare() of ``columns`` alone: from the run catalog when it can tell
    them, else cut from the full table."""
    table = _compare_from_catalog(runs_or_paths, sort, columns)
    if table is not None:
        return table
    return _selected(compare(runs_or_paths, sort), columns)


def _compare_all(runs_or_paths, sort):
    """compare() with every column: of one folder through the run store (its
    snapshot brought up to date, :mod:`.snapshot`), else every run read."""
    from . import snapshot
    table = snapshot.folder_table(runs_or_paths)
    if table is None:
        runs = as_runs(runs_or_paths, _load_for_compare)
        table = table_of([(run.dir, cells_of(run)) for run in runs],
                         getattr(runs, "errors", ()))
    return sort_table(table, sort)


def _compare_where(runs_or_paths, sort, columns, group_by, against, where):
    """compare() of the runs matching ``where``, then its columns or groups."""
    from ..rundir.where import select
    table = select(compare(runs_or_paths, sort), where)
    if group_by is not None or against is not None:
        return _grouped(table, group_by, against)
    return table if columns is None else _selected(table, columns)


def _grouped(table, group_by, against):
    """compare()'s per-run ``table`` as one row per group (:func:`.groups.group_table`)."""
    from .groups import group_fields, group_table
    if group_by is None:
        raise ConfigError(f"against needs group_by: the baseline is one of the groups. "
                          f"Received: against={against!r}", field="against")
    table = table[~table["status"].isin((UNREADABLE, "skipped"))]
    columns = {_field_of(c): c for c in table.attrs.get("config_columns", [])}
    differing = [f for f, c in columns.items()
                 if table[c].astype(str).nunique(dropna=False) > 1]
    fields = group_fields(group_by, list(columns), differing)
    return group_table(table.reset_index(drop=True), [columns[f] for f in fields], against)


def _field_of(column):
    """The config field of a compare() config column (``config.<name>`` or ``<name>``)."""
    return column[len("config."):] if column.startswith("config.") else column


def catalog_columns(path, columns):
    """compare()'s ``columns`` of the runs below the folder ``path`` (in folder
    order), read from the run catalog; None when it cannot tell them."""
    return _compare_from_catalog(path, None, columns)


def _compare_from_catalog(path, sort, columns):
    """compare()'s ``columns`` of the runs below the folder ``path``, sorted by
    ``sort``, from the run catalog; None when the catalog cannot tell."""
    import pandas as pd
    from ..rundir.store import open_store
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path) or is_run_dir(path):
        return None
    key = sort.lstrip("-") if isinstance(sort, str) else None
    names = list(dict.fromkeys(columns + ([key] if key else [])))
    with open_store(path) as catalog:
        found = catalog.compare_columns(os.path.abspath(path), names)
    if found is None:
        return None
    table = pd.DataFrame(found, columns=names)
    table = (sort_table(table, sort) if sort else table)[columns]
    table.attrs["config_columns"] = [c for c in columns if c not in IDENTITY + LABELS + OUTCOMES
                                     and c != "run_dir"]
    table.attrs["eval_columns"] = []
    return table


def _selected(table, columns):
    unknown = [c for c in columns if c not in table.columns]
    if unknown:
        raise ConfigError(f"unknown column {unknown[0]!r}; valid columns: "
                          f"{', '.join(map(str, table.columns))}. Received: columns={columns!r}",
                          field="columns")
    selected = table[columns]
    selected.attrs = dict(table.attrs)
    return selected


def sort_table(table, sort):
    """``table`` sorted by column ``sort`` (``-col``: descending), NaN last."""
    if not isinstance(sort, str) or not sort.lstrip("-"):
        raise ConfigError(f"sort must name a column. Received: sort={sort!r}", field="sort")
    column, descending = (sort[1:], True) if sort.startswith("-") else (sort, False)
    if column not in table.columns:
        raise ConfigError(f"unknown sort column {column!r}; valid columns: "
                          f"{', '.join(map(str, table.columns))}. Received: sort={sort!r}",
                          field="sort")
    try:
        ordered = table.sort_values(column, ascending=not descending, na_position="last",
                                    kind="stable")
    except TypeError:  # mixed types in a config column: order by their text
        ordered = table.sort_values(column, ascending=not descending, na_position="last",
                                    kind="stable", key=lambda s: s.astype(str))
    return ordered.reset_index(drop=True)


def loss_components(run):
    """Names of the loss components a run logged (loss.csv's extra columns)."""
    return [c for c in run.loss.columns if c not in schema.LOSS.columns]


def _eval_table(run):
    """run.eval with its metric columns named ``eval_<metric>``."""
    table = run.eval
    return table.rename(columns=eval_name) if len(table.columns) else table


# -- history -----------------------------------------------------------------

def history(runs: RunsOrPaths, metric: str = "loss",
            group_by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Every logged value of ``metric`` in long format, never sampled.

    Columns: ``run_id, step, epoch, <metric>`` then the config fields that
    differ between the runs, ready for ``groupby``/``pivot``. ``metric`` is
    a loss.csv column (``loss``, ``lr``, ``time_s``, a loss component), ``grad_norm``, a
    params.csv parameter (``dense.weight``, ``w[0]``, ``w:norm``) or an
    eval.csv metric as ``eval_<metric>`` (``eval_loss``, ``eval_accuracy``;
    rows per evaluation). Raises ConfigError listing the available metrics when
    no run logged it, and saying so when ``metric`` is a config field
    (``eval_every``): history is for logged values, config fields are
    compare()'s columns.

    ``group_by`` (config fields, or ``"auto"`` as for compare()): one row
    per group and step instead: the fields, ``step``, ``n`` (the runs of the
    group that logged that step: early-stopped and diverged runs drop out),
    ``<metric>_mean``, ``<metric>_std``, ``<metric>_ci_low`` and
    ``<metric>_ci_high`` (the 95 % t-interval; NaN where ``n`` < 2).
    """
    runs = as_runs(runs, _load_records)
    varying = differing_config(runs)
    fields = None
    if group_by is not None:
        from .groups import group_fields
        fields = group_fields(group_by, union_keys(run.config for run in runs), varying)
        varying = fields
    found = [(run, arrays) for run, arrays in zip(runs, _each_run(_readable_metric_arrays, runs, metric))
             if arrays is not None]
    if not found:
        available = sorted(set().union(*(available_metrics(run) for run in runs)))
        if any(metric in run.config for run in runs):
            raise ConfigError(f"{metric!r} is a config field, not a logged metric: history() "
                              f"gives logged values (available: {', '.join(available)}); "
                              f"compare() has one column per config field. "
                              f"Received: metric={metric!r}", field="metric")
        raise ConfigError(f"no run logged the metric {metric!r}; available: "
                          f"{', '.join(available)}. Received: metric={metric!r}", field="metric")
    table = _long_table(found, metric, varying)
    if fields is None:
        return table
    from .groups import group_history
    return group_history(table, metric, list(table.columns[4:]))


def _each_run(read, runs, metric):
    """``read(run, metric)`` of every run, in order, on a few threads: the CSV
    parser releases the GIL, so one run's parse overlaps another's Python."""
    from concurrent.futures import ThreadPoolExecutor
    if len(runs) < 2:
        return [read(run, metric) for run in runs]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(read, runs, [metric] * len(runs)))


def _readable_metric_arrays(run, metric):
    """The run's ``(step, epoch, values)`` of ``metric``; None (with a warning)
    when its log is broken."""
    try:
        return _metric_arrays(run, metric)
    except RunDirError as exc:
        logger.warning("skipped a broken run: %s", exc)
        return None


_STEP_EPOCH = (schema.Col.STEP, schema.Col.EPOCH)


def _metric_arrays(run, metric):
    # one log after the other: most metrics are in the first (loss.csv), of
    # which only three columns are read (the log has five) and not kept on the run
    if metric not in _STEP_EPOCH:
        for log in (schema.LOSS, schema.GRAD_NORM):
            if metric in (schema.read_header(schema.path_of(run.dir, log.name)) or ()):
                arrays = run.read_arrays(log.name, (*_STEP_EPOCH, metric))
                if metric in arrays:   # not when even the header is in flight
                    return tuple(arrays[c] for c in (*_STEP_EPOCH, metric))
        table = _eval_table(run)
        if metric in table.columns:
            return tuple(table[c].to_numpy() for c in (*_STEP_EPOCH, metric))
    params = run.params
    if len(params):
        mask = params[schema.Col.PARAM].to_numpy() == metric
        if mask.any():
            return tuple(params[c].to_numpy()[mask] for c in (*_STEP_EPOCH, schema.Col.VALUE))
    return None


_WAVE_ROWS = 4_000_000   # rows copied between two releases of the parser's memory


def _long_table(found, metric, varying):
    """One frame from every run's arrays, built column by column (a frame per
    run and a concat cost ~4 ms a run). Each column is allocated once and
    filled in place by a few threads (numpy copies release the GIL), a wave
    of runs at a time, each run's arrays let go once copied: the peak stays
    near the size of the result (20 million rows: 0.94 GB, was 1.9)."""
    import numpy as np
    import pandas as pd
    bounds = np.cumsum([0] + [len(arrays[0]) for _, arrays in found]).tolist()
    per_run = {"run_id": [run.run_id for run, _ in found]}
    for name in varying:
        column = config_column(name)
        if column in per_run or column in (*_STEP_EPOCH, metric):   # loss="mse" stays apart
            column = f"config.{name}"
        per_run[column] = [cell_value(run.config.get(name)) for run, _ in found]
    logged = {name: np.empty(bounds[-1], np.result_type(*(a[i] for _, a in found)))
              for i, name in enumerate((*_STEP_EPOCH, metric))}
    filled = {name: _per_run(values, bounds[-1]) for name, values in per_run.items()}

    def fill(runs):
        for k in runs:
            rows = slice(bounds[k], bounds[k + 1])
            for out, values in zip(logged.values(), found[k][1]):
                out[rows] = values
            for out, each, _ in filled.values():
                out[rows] = each[k]
            found[k] = (found[k][0], None)

    _fill_in_waves(fill, bounds)
    columns = {"run_id": filled.pop("run_id")[2](), **logged}
    columns.update((name, finish()) for name, (_, _, finish) in filled.items())
    return pd.DataFrame(columns, copy=False)   # no copy: the arrays are the frame's own


def _fill_in_waves(fill, bounds):
    """``fill(runs)`` over every run, on two threads, a wave of about
    ``_WAVE_ROWS`` rows at a time, the parser's freed memory released after each."""
    from concurrent.futures import ThreadPoolExecutor
    waves, first = [], 0
    for k in range(1, len(bounds)):
        if bounds[k] - bounds[first] >= _WAVE_ROWS or k == len(bounds) - 1:
            waves.append(range(first, k))
            first = k
    with ThreadPoolExecutor(max_workers=2) as pool:
        for wave in waves:
            list(pool.map(fill, (wave[:len(wave) // 2], wave[len(wave) // 2:])))
            schema.release_memory()


def _per_run(values, rows):
    """A column of ``rows`` rows holding each run's value on each of its rows,
    as ``(out, each, finish)``: ``out[run's rows] = each[k]`` fills it,
    ``finish()`` gives the column. Numbers as numbers, text as a categorical
    (one code a row: a string column of 20 million rows took seconds and a
    gigabyte), tuples as objects."""
    import numpy as np
    import pandas as pd
    if any(isinstance(v, tuple) for v in values):
        out = np.empty(rows, object)
        return out, [_object_scalar(v) for v in values], lambda: out
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        each = np.asarray(values)
        out = np.empty(rows, each.dtype)
        return out, each, lambda: out
    categories = pd.Categorical(values)
    out = np.empty(rows, categories.codes.dtype)
    return out, categories.codes, lambda: pd.Categorical.from_codes(out, categories.categories)


def _object_scalar(value):
    """``value`` as a 0-d object array: assigned to a slice, a tuple fills
    every row whole instead of being spread over the rows."""
    import numpy as np
    scalar = np.empty((), object)
    scalar[()] = value
    return scalar


def available_metrics(run):
    """Metric names ``history`` accepts for this run."""
    names = set()
    for table in (run.loss, run.grad_norm, _eval_table(run)):
        names.update(c for c in table.columns if c not in (schema.Col.STEP, schema.Col.EPOCH))
    if len(run.params):
        names.update(map(str, run.params[schema.Col.PARAM].unique()))
    return names


# -- labels and display --------------------------------------------------------

def differing_config(runs):
    """Config field names whose values are not the same in every run, in config order."""
    return differing_fields([run.config for run in runs])


def differing_fields(configs: list[Mapping[str, Any]]) -> list[str]:
    """Names whose values are not the same in every mapping (a name missing
    from one counts as a value), in order of first appearance."""
    names = union_keys(configs)
    return [n for n in names if len({cell_value(c.get(n, _MISSING)) for c in configs}) > 1]


def config_labels(runs):
    """One label per run from the config fields that differ, e.g. ``"optimizer=adam, lr=0.1"``.

    Runs whose configs are all equal are labelled by run id; equal labels
    get ``#2``, ``#3``... so every run stays distinguishable.
    """
    fields = differing_config(runs)
    experiments = {run.meta.get("experiment") for run in runs}
    labels = []
    for run in runs:
        parts = [f"{n}={format_value(run.config[n])}" for n in fields if n in run.config]
        if len(experiments) > 1:
            parts.insert(0, str(run.meta.get("experiment")))
        labels.append(", ".join(parts) or run.run_id)
    return _numbered(labels)


def _numbered(labels):
    seen, out = {}, []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def display_table(table):
    """The columns worth reading: who, status, the config fields that differ, the outcomes."""
    config_columns = table.attrs.get("config_columns", [])
    known = table[table["status"] != UNREADABLE]  # an unreadable run has no config to differ
    differing = [c for c in config_columns if known[c].astype(str).nunique(dropna=False) > 1]
    head = ["experiment"] if known["experiment"].nunique(dropna=False) > 1 else []
    trial = [c for c in ("trial", "trial_state") if c in table.columns]
    tags = ["tags"] if "tags" in table and table["tags"].astype(bool).any() else []
    head += ["run_id", "status"] + trial + tags + differing
    rest = [c for c in table.columns if c not in IDENTITY + LABELS and c not in config_columns
            and c not in trial and c not in ("run_dir", "study")]
    return table[head + rest]


def export_table(table):
    """``table`` with list-valued config cells as the text ``--set`` takes (``a,b``), for CSV."""
    return table.map(lambda v: format_value(v) if isinstance(v, tuple) else v)


def format_table(table):
    """Aligned plain text of a (display) table, numbers to 6 significant digits."""
    return table.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.6g}")


# -- helpers -------------------------------------------------------------------


