"""compare()'s rows: one run's values (its cells) and the table they make.

A run's cells (:func:`~mindexp.rundir.summary.compare_cells`) come from its
files (:func:`file_cells`) or from the run store, which keeps them per
finished run, flattened (:func:`~mindexp.rundir.summary.flat_cells`: a
shape and its values); :func:`table_of` names the columns from every run's
config fields and eval metrics and makes the DataFrame. The rule of a row is
:func:`columns_of`, applied to all the runs of one shape at once;
:func:`row_of` is that rule for one run. ``reports.compare`` and its snapshot
(:mod:`.snapshot`) both make their rows here, so the two ways give the same
table; the snapshot's cold table is made a column at a time
(:func:`columnar_frame`), equal to the one made of rows.
"""
from __future__ import annotations

import collections
import functools
import itertools
import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Sequence

from ..errors import RunDirError
from ..rundir.meta import UNREADABLE, UnreadableRun
from ..rundir.run import Run
from ..rundir.summary import (TARGETS, cell_value, compare_cells, flat_cells, log_summary,
                              stored_summary)

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
    flat = flat_entries(entries)
    config = table_config(shape for _, shape, _ in flat)
    return frame_of(rows_of(flat, errors, config), config,
                    union_keys(part_keys(shape, "eval") for _, shape, _ in flat))


# A run's cells flattened: ``(run_dir, shape, values)`` (:func:`.summary.flat_cells`).
FlatEntry = tuple[str, tuple, list]


def flat_entries(entries: Iterable[tuple[str, dict]]) -> list[FlatEntry]:
    """``(run_dir, cells)`` entries as :data:`FlatEntry`."""
    return [(run_dir, *flat_cells(cells)) for run_dir, cells in entries]


def rows_of(entries: Sequence[FlatEntry], errors: Iterable[Skipped],
            config: Mapping[str, str]) -> list[dict]:
    """The rows of :func:`table_of` as dicts."""
    return [row_of(run_dir, shape, values, config) for run_dir, shape, values in entries] + \
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


class ShapeRuns(NamedTuple):
    """The runs of one flat shape in a table: the positions of their rows, their
    columns (:func:`columns_of`) and the types of each column's values."""
    positions: list[int]
    columns: dict[str, Sequence]
    types: dict[str, frozenset]


def shape_runs(positions: list[int], shape: tuple, values: Sequence[Sequence],
               run_dirs: Sequence[str], config: Mapping[str, str]) -> ShapeRuns:
    """:class:`ShapeRuns` of runs of one ``shape`` (their ``values`` and folders)
    at ``positions``."""
    columns = columns_of(shape, values, run_dirs, config)
    # a tuple holds values of the shape's one type; a list was made from them
    types = {name: frozenset((type(column[0]),)) if isinstance(column, tuple)
             else frozenset(map(type, column)) for name, column in columns.items()}
    return ShapeRuns(positions, columns, types)


def columnar_frame(groups: Sequence[ShapeRuns], extra: list[dict], config: Mapping[str, str],
                   evals: list[str], columns: list[str]) -> pd.DataFrame:
    """:func:`frame_of` of the rows that ``groups`` and then ``extra`` (rows as
    dicts: the unreadable runs) make, a column at a time: the same values,
    columns, dtypes and ``attrs``. A column of floats (missing: NaN), or of ints
    or bools in every row, is its array at once; any other is left to pandas'
    own inference of rows (:func:`frame_of`), fed with the same objects."""
    import numpy as np
    import pandas as pd
    n = sum(len(group.positions) for group in groups)
    at = [np.asarray(group.positions, dtype=np.intp) for group in groups]
    rest = (np.arange(n, n + len(extra)), extra)
    typed: dict[str, np.ndarray] = {}
    objects: dict[str, np.ndarray] = {}
    orders: dict[tuple, np.ndarray | None] = {}   # the rows' order of each set of positions
    for name in columns:
        parts = [(where, group.columns[name], group.types[name])
                 for where, group in zip(at, groups) if name in group.columns]
        # (the unreadable runs' rows hold text: a column they fill is objects)
        array = None if any(name in row for row in extra) else _typed(parts, n, extra, orders)
        if array is None:
            objects[name] = _objects(parts, n, rest, name, orders)
        else:
            typed[name] = array
    table = pd.DataFrame(list(zip(*objects.values())), columns=list(objects))
    table = pd.concat([table, pd.DataFrame(typed, index=table.index)], axis=1)[columns]
    table.attrs["config_columns"] = list(config.values())
    table.attrs["eval_columns"] = list(evals)
    return table


def _typed(parts, n, extra, orders):
    """The column of ``parts`` as pandas would type it from rows, when it is a
    float64 (floats, NaN where missing), int64 or bool one in every row; else None."""
    import numpy as np
    types = frozenset().union(*(types for _, _, types in parts))
    full = not extra and sum(len(where) for where, _, _ in parts) == n
    dtype = {float: np.float64, int: np.int64, bool: np.bool_}.get(next(iter(types))) \
        if len(types) == 1 else None
    if dtype is None or not full and dtype is not np.float64:
        return None
    try:
        if full:
            return _placed([(where, column) for where, column, _ in parts], n, dtype, orders)
        array = np.full(n + len(extra), np.nan)
        for where, column, _ in parts:
            array[where] = column
        return array
    except OverflowError:   # an int past int64: pandas says what it becomes
        return None


def _objects(parts, n, rest, name, orders):
    """The column of ``parts`` and of the ``rest`` of the rows (``(positions,
    rows as dicts)``) as objects, NaN where a row has none (as pandas fills rows)."""
    import numpy as np
    where, rows = rest
    parts = [(at, column) for at, column, _ in parts] + \
        ([(where, [row.get(name, np.nan) for row in rows])] if rows else [])
    total = n + len(rows)
    if sum(len(at) for at, _ in parts) == total:
        return _placed(parts, total, object, orders)
    array = np.full(total, np.nan, dtype=object)
    for at, column in parts:
        array[at] = np.fromiter(column, dtype=object, count=len(column))
    return array


def _placed(parts, total, dtype, orders):
    """The values of ``parts`` (``[(positions, values)]`` that fill every row
    once) as one array of ``dtype``, each at its row. ``orders``: the order of
    the rows of each set of positions, kept for the next column."""
    import numpy as np
    key = tuple(id(at) for at, _ in parts)
    if key not in orders:
        positions = np.concatenate([at for at, _ in parts])
        orders[key] = None if (positions == np.arange(total)).all() else \
            np.argsort(positions, kind="stable")
    values = np.fromiter(itertools.chain.from_iterable(column for _, column in parts),
                         dtype=dtype, count=total)
    return values if orders[key] is None else values[orders[key]]


def table_config(shapes: Iterable[tuple]) -> dict[str, str]:
    """``{config field: its column}`` of a table of runs of ``shapes`` (in the
    order of their runs; :func:`~mindexp.rundir.summary.flat_cells`)."""
    shapes = list(shapes)
    evals = union_keys(part_keys(shape, "eval") for shape in shapes)
    return {n: config_column(n, evals) for n in union_keys(part_keys(s, "config") for s in shapes)}


def part_keys(shape: tuple, part: str) -> list[str]:
    """The keys of ``part`` (``config``, ``eval``, ...) of a flat ``shape``, in order."""
    return [key for at, key, _ in shape if at == part]


# A tuning trial's run status as Optuna's trial state (``mindexp tune``).
TRIAL_STATES = {"completed": "COMPLETE", "pruned": "PRUNED", "interrupted": "INTERRUPTED",
                "running": "RUNNING"}


def row_of(run_dir: str, shape: tuple, values: Sequence, config: Mapping[str, str]) -> dict:
    """One run's row from its flat cells (``shape``, ``values``: :func:`flat_entries`);
    ``config``: ``{field: its column}``."""
    return {name: column[0] for name, column in
            columns_of(shape, [values], [run_dir], config).items()}


def columns_of(shape: tuple, values: Sequence[Sequence], run_dirs: Sequence[str],
               config: Mapping[str, str]) -> dict[str, Sequence]:
    """compare()'s columns of runs of one ``shape``: ``values``, each run's values
    in ``shape``'s order, ``run_dirs`` their folders (one or more runs); ``config``:
    ``{field: its column}``. The rule of a row, a column at a time: a column
    straight from the cells is a tuple (its values all of the shape's type for
    it), one made from them a list. Later names win as in a dict."""
    cells = _Cells(shape, values, len(run_dirs))
    meta = functools.partial(cells.column, "meta")
    out: dict[str, Sequence] = {name: meta(name) for name in IDENTITY}
    out["run_id"] = [run_id or os.path.basename(d) for run_id, d in zip(out["run_id"], run_dirs)]
    if cells.type_of("meta", "study") != "NoneType":  # a trial: its number and state
        out.update(study=meta("study"), trial=meta("trial"),
                   trial_state=[TRIAL_STATES.get(s, "FAIL") for s in out["status"]])
    out["tags"] = [",".join(tags or []) for tags in meta("tags")]
    out["note"] = [note or "" for note in meta("note")]
    for field, column in config.items():
        out[column] = cells.column("config", field)
        if cells.type_of("config", field) in _NESTED:   # an empty one is () at once
            out[column] = [cell_value(v) if v else () for v in out[column]]
    outcomes = part_keys(shape, "outcomes")
    renamed = not config.keys().isdisjoint(outcomes)
    out.update((outcome_column(k, config) if renamed else k, cells.column("outcomes", k))
               for k in outcomes)
    finals = part_keys(shape, "finals")
    # A parameter named like a config field (a bare Parameter "lr") must not hide it.
    named = dict(zip(finals, finals)) if out.keys().isdisjoint(finals) else \
        {name: f"param.{name}" if name in out else name for name in finals}
    out.update((named[name], cells.column("finals", name)) for name in finals)
    out.update(_errors(cells, named))
    out.update((k, cells.column("eval", k)) for k in part_keys(shape, "eval"))
    out.update((k, cells.column("system", k)) for k in part_keys(shape, "system"))
    out.update(git_commit=cells.column("git", "commit"), dirty=cells.column("git", "dirty"))
    out["run_dir"] = list(run_dirs)
    return out


class _Cells:
    """The values of runs of one flat shape, by part and key, a column each."""

    def __init__(self, shape, values, n):
        self.shape, self.n = shape, n
        self.columns = list(zip(*values))
        self.at = {(part, key): i for i, (part, key, _) in enumerate(shape)}

    def column(self, part, key):
        """The column of ``part``'s ``key`` (all None where the runs have none)."""
        i = self.at.get((part, key))
        return self.columns[i] if i is not None else (None,) * self.n

    def type_of(self, part, key):
        """The type name of ``part``'s ``key`` (``NoneType`` where absent)."""
        i = self.at.get((part, key))
        return self.shape[i][2] if i is not None else "NoneType"


def _errors(cells, named):
    """``{<param>_error: its column}``: each final parameter's distance to the
    run's target (``named``: each final's column)."""
    if ("meta", TARGETS) in cells.at:   # targets that are no dict: none, or as a dict fails
        for targets in cells.column("meta", TARGETS):
            (targets or {}).items()
    out = {}
    for name in part_keys(cells.shape, TARGETS):
        if cells.type_of("finals", name) != "NoneType" and \
                cells.type_of(TARGETS, name) in ("int", "float"):
            out[f"{named[name]}_error"] = [
                abs(final - float(target)) for final, target in
                zip(cells.column("finals", name), cells.column(TARGETS, name))]
    return out


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


def union_keys(groups: Iterable[Iterable[str]]) -> list[str]:
    """Every name of ``groups`` once, in the order first seen."""
    return list(dict.fromkeys(k for names in groups for k in names))


_NESTED = ("list", "dict")
