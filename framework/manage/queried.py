"""``mindexp runs`` answered by the run catalog: filters, ``--where`` (the
grammar's SQL back end), ``--sort`` and ``--limit`` as one query, the table printed
without pandas. Prints exactly what :mod:`.runs` prints from a DataFrame;
whatever this module cannot answer (``--csv``/``--json``, a ``--where``
the SQL back end cannot answer, a column only the logs give, several folders, a folder
without runs) returns None and the DataFrame path answers, as before.
"""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Iterable, NamedTuple

from ..analysis.cells import format_age
from ..callbacks import schema
from .. import layout
from ..rundir.store import Query, RunStore, open_store
from ..rundir.meta import UNREADABLE
from ..rundir.run_lock import shown_status
from ..rundir import where as w
from .filters import mentioned
from .table_text import TableSpool, fitted_columns, more_line, short_paths, short_paths_below

if TYPE_CHECKING:
    from .filters import Filters

_BASE = ("host", "root", "rel", "status", "problem", "tags", "started_ts", "steps",
         "final_loss", "note")
SHOWN = ("path", "status", "tags", "age", "steps", "final_loss")


PAGE = 5000   # rows fetched and formatted at a time: a piped listing holds one page


def listed(path: str, filters: Filters, sort: str | None = None, limit: int | None = None,
           wide: bool = False, url: str | None = None, rebuild: bool = False,
           screen: int | None = None) -> Iterable[str] | None:
    """The text ``mindexp runs PATH`` prints, as blocks of lines each ending with
    a line end, or None when the catalog cannot answer (the caller then builds
    the DataFrame). ``screen``: without a ``limit``, at most that many runs,
    then a line saying how many more match. Without either (a pipe or a file
    gets every run) the rows are fetched, formatted and given back a page at
    a time: memory does not grow with the number of runs."""
    if not os.path.isdir(path) or os.path.lexists(os.path.join(path, layout.RUN_JSON)):
        return None
    catalog = open_store(path, url=url, rebuild=rebuild)
    streamed = False
    try:
        asked = plan(catalog, os.path.abspath(path), filters, sort, wide)
        if asked is None:
            return None
        if limit or screen:
            return [_listed(catalog, asked, limit, None if limit else screen) + "\n"]
        streamed = True
        return _streamed(catalog, asked)   # which closes the catalog
    finally:
        if not streamed:
            catalog.close()


class _Plan(NamedTuple):
    """What one listing asks the store: which runs, in which order, which columns."""
    folder: str
    query: Query
    tree: w.Condition | None   # the checked ``--where`` (running runs: matched in Python)
    kinds: dict          # name -> (flat|config, number|text) of each name the query uses
    extra: list          # the columns shown after the usual ones
    wide: bool


def _running_records(catalog: RunStore, plan: _Plan) -> list[dict]:
    """The running runs ``plan`` lists (matched in Python on their live loss),
    each as the record :func:`_row_pages` gives."""
    status = plan.query.status
    if status and "running" not in status:
        return []
    return _rows(catalog, plan._replace(query=plan.query._replace(status=("running",))), None)


def plan(catalog: RunStore, folder: str, filters: Filters, sort: str | None = None,
         wide: bool = False) -> _Plan | None:
    """Which runs a listing of ``folder`` by ``filters`` asks ``catalog`` for, or
    None when the catalog cannot answer it as pandas would (the unreadable runs
    warned about first, as the DataFrame path does)."""
    scope, params = catalog.scope(folder)
    if not catalog.select(["1"], f"{scope} AND problem IS NULL", params, limit=1):
        return None      # no run loads: the DataFrame path says why, as before
    try:
        tree = w.parse(filters.where) if filters.where else None
        query = Query(where=tree, status=tuple(filters.statuses), tags=tuple(filters.tags),
                      experiments=tuple(filters.experiments), since=filters.since,
                      older=filters.older, sort=sort, live=True, skipped=False)
        kinds = _kinds(catalog, scope, params, (list(tree.columns) if tree else []) +
                       ([sort.lstrip("-")] if sort else []))
        catalog.query(folder, query, limit=0)   # refused here, not mid-listing
    except w.Unsupported:
        return None
    _warn_problems(catalog, scope, params)
    extra = [n for n in _mentioned(catalog, scope, params, kinds, filters.where, sort)
             if n not in SHOWN]
    return _Plan(folder, query, tree, kinds, extra, wide)


def _listed(catalog, plan, limit, screen=None):
    """The whole text of a listing cut to ``limit`` runs, or to ``screen`` runs and
    a line saying how many more match."""
    rows = _rows(catalog, plan, limit or screen)
    if not rows:
        return "no runs match"
    text = _format(catalog, rows, plan.extra, plan.wide)
    if screen and len(rows) == screen:
        more = _matching_count(catalog, plan) - screen
        if more > 0:
            text += "\n" + more_line(more)
    return text


def _streamed(catalog, plan):
    """Every matching run's line, a page of rows at a time: each page's cells go
    to a spool (a temporary file) with the widths seen so far, then the fitted
    table is read back from it. The catalog is closed once its rows are read."""
    with TableSpool(_NUMERIC) as spool:
        try:
            now = time.time()
            for page in _row_pages(catalog, plan, now, size=PAGE):
                spool.add(_page_columns(catalog, page, plan.extra, plan.wide, now))
        finally:
            catalog.close()
        if not spool.rows:
            yield "no runs match\n"
            return
        yield from spool.lines(width=None if plan.wide else 100)


def counts(catalog: RunStore, plan: _Plan) -> dict[str, int]:
    """``{status as listed: runs}`` of ``plan``: one grouped query, and when some
    runs are running, their records matched on their live loss as the listing does."""
    found: dict[str, int] = {}
    running = False
    for status, broken, number in catalog.query(
            plan.folder, plan.query, ["status", "problem IS NOT NULL", "COUNT(*)"],
            group="status, problem IS NOT NULL"):
        if status == "running":   # shown and matched on their live loss: below
            running = True
            continue
        shown = UNREADABLE if broken else str(status)
        found[shown] = found.get(shown, 0) + number
    for record in _running_records(catalog, plan) if running else ():
        found[record["status"]] = found.get(record["status"], 0) + 1
    return found


def _matching_count(catalog, plan):
    """How many runs the listing matches: one COUNT without ``--where`` (running
    runs pass it in SQL alike), else :func:`counts`."""
    if plan.tree is None:
        return catalog.query(plan.folder, plan.query, ["COUNT(*)"]).fetchone()[0]
    return sum(counts(catalog, plan).values())


def _kinds(catalog, scope, params, names):
    """name -> (``flat``|``config``, ``number``|``text``) for each name the query
    uses; Unsupported for a name the catalog cannot answer like pandas would."""
    return {name: w.catalog_kind(catalog, scope, params, name) for name in dict.fromkeys(names)}


def _rows(catalog, plan, limit):
    """The matching rows (see :func:`_row_pages`), in order, at most ``limit``."""
    out = []
    for page in _row_pages(catalog, plan, time.time(), size=limit or PAGE):
        out += page
        if limit and len(out) >= limit:
            return out[:limit]
    return out


def _row_pages(catalog, plan, now, size=PAGE):
    """The matching rows in order, fetched ``size`` at a time: the query's own
    tuple ``(host, root, rel, status, problem, tags, started_ts, steps,
    final_loss, note, ...)`` where it needs nothing more, else a record (a dict:
    running, unreadable, another host's, columns named by ``--where``/``--sort``).
    A page is what one fetch kept (a running run ``--where`` does not match is left out)."""
    db, kinds, tree = catalog.db, plan.kinds, plan.tree
    extra = [n for n in kinds if kinds[n][0] == "config"]
    flat = [n for n in kinds if kinds[n][0] == "flat" and n not in _BASE]
    # this host's rows (all of them, on SQLite: its scope is this host's) carry no
    # host and root: two strings fewer to make per row at 100,000 rows
    if catalog.shared:
        columns = ["CASE WHEN host = ? AND root = ? THEN NULL ELSE host END",
                   "CASE WHEN host = ? AND root = ? THEN NULL ELSE root END"]
        select_values = [catalog.host, catalog.key_root] * 2
    else:
        columns, select_values = ["NULL", "NULL"], []
    columns += list(_BASE[2:])
    for name in extra:
        columns += [db.json_value(), db.json_kind()]
        select_values += [db.key(name), db.key(name)]
    columns += flat
    # a running run's config, for the config fields named (a third less SQL time without)
    columns.append("CASE WHEN status = 'running' THEN config END" if extra else "NULL")
    plain = not extra and not flat
    cursor = catalog.query(plan.folder, plan.query, columns, select_values, stream=True)
    while True:
        batch = cursor.fetchmany(size)
        if not batch:
            return
        page = []
        for row in batch:
            if plain and row[0] is None and row[3] != "running" and row[4] is None:
                page.append(row)   # most rows: read as they are, a column at a time
                continue
            record = _record(catalog, row, extra, flat, now)
            if tree is None or row[3] != "running" or w.matches(tree, record):
                page.append(record)
        if page:
            yield page


def _record(catalog, row, extra, flat, now):
    host, root, rel, status, problem, tags, started_ts, steps, final_loss, note = row[:10]
    here = host is None
    run_dir = catalog.location(catalog.host, catalog.key_root, rel) if here else \
        catalog.location(host, root, rel)
    record = {"run_dir": run_dir, "status": status, "tags": tags or "", "note": note or "",
              "age_s": None if started_ts is None else max(0.0, now - started_ts),
              "steps": steps, "final_loss": final_loss}
    if problem is not None:   # unreadable: listed with its status only
        record.update(status=UNREADABLE, steps=None, final_loss=None)
    for i, name in enumerate(extra):
        record[name] = _json_cell(row[10 + 2 * i], row[11 + 2 * i])
    for i, name in enumerate(flat):
        record[name] = row[10 + 2 * len(extra) + i]
    if status == "running" and here:
        record["status"] = shown_status(run_dir, status)
        record["steps"], record["final_loss"] = _live_progress(run_dir)
        config = row[-1]
        for name in extra:   # a running run's config as pandas would see it
            record[name] = _plain(json.loads(config).get(name)) if config else None
    return record


def _json_cell(value, kind):
    if kind == "bool":
        return bool(value)
    if kind == "other" and isinstance(value, str):
        return _plain(json.loads(value))
    return _plain(value)


def _plain(value):
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return value


def _live_progress(run_dir):
    """A running run's last step and loss from the end of its loss.csv (as
    ``runs`` has always shown them), without reading the whole log."""
    path = os.path.join(run_dir, schema.LOSS.filename)
    try:
        with schema.open_file(path) as f:
            header = f.readline().decode().strip().split(",")
            start = f.tell()
            size = f.seek(0, os.SEEK_END)
            f.seek(max(start, size - 65536))
            lines = f.read().decode(errors="replace").split("\n")
    except (OSError, ValueError):
        return 0, None
    # the first line of a tail may be cut, the last one not yet ended: neither is a row
    lines = lines[1 if size - 65536 > start else 0:-1]
    rows = [r for r in (line.split(",") for line in lines) if len(r) == len(header)]
    if not rows:
        return 0, None
    last = dict(zip(header, rows[-1]))
    try:
        return int(float(last[schema.Col.STEP])), float(last[schema.Col.LOSS])
    except (KeyError, ValueError):
        return 0, None


def _warn_problems(catalog, scope, params):
    """The warnings the DataFrame path logs for runs that could not be read."""
    for status, problem in catalog.select(["status", "problem"], f"{scope} AND problem IS NOT "
                                          "NULL", params, order="rel"):
        from ..analysis.reports import logger   # only then: it imports numpy
        logger.warning("%s: %s", "unreadable run" if status == UNREADABLE
                       else "skipped a broken run", problem)


def _mentioned(catalog, scope, params, kinds, where_text, sort):
    """The columns ``--where``/``--sort`` name, in the runs table's column order
    (config fields in the order of the first run's config.json)."""
    words = mentioned(where_text, (sort or "").lstrip("-"))
    head = ("run_id", "experiment", "status", "tags", "note", "started_at", "ended_at")
    config = [n for n in kinds if kinds[n][0] == "config"]
    if len(config) > 1:
        first = catalog.select(["config"], f"{scope} AND problem IS NULL", params,
                               order=catalog.db.text_order("rel"), limit=1)
        keys = list(json.loads(first[0][0]) if isinstance(first[0][0], str) else first[0][0])
        config.sort(key=lambda n: keys.index(n) if n in keys else len(keys))
    tail = ("steps", "epochs", "final_loss", "train_time_s", "steps_per_s")
    order = [n for n in head if n in kinds] + config + [n for n in tail if n in kinds]
    return [n for n in order if n in words]


# -- the table --------------------------------------------------------------------

_NUMERIC = {"path": False, "status": False, "tags": False, "age": False, "final_loss": True}


def _format(catalog, records, extra, wide):
    """The table of ``records`` (see :func:`_page_columns`) as aligned text."""
    return fitted_columns(_page_columns(catalog, records, extra, wide, time.time()), _NUMERIC,
                          width=None if wide else 100)


def _page_columns(catalog, records, extra, wide, now):
    """``{column: [values]}`` of ``records``: a dict per row that needed one
    (running, unreadable, another host's, extra columns), else the query's own tuple."""
    head = catalog.root.rstrip("/") + "/"
    # most listings are tuples only: their columns by one transposition
    by_index = None if any(type(r) is dict for r in records) else list(zip(*records))  # noqa: E721

    def column(name, index, tuple_value=None):
        if by_index is not None:
            values = by_index[index]
            return list(values) if tuple_value is None else list(map(tuple_value, values))
        return [r[name] if type(r) is dict else  # noqa: E721 - the two shapes of a row
                (r[index] if tuple_value is None else tuple_value(r[index])) for r in records]
    if by_index is not None:
        paths, ages = short_paths_below(head, by_index[2]), _ages_since(by_index[6], now)
    else:
        paths = short_paths(column("run_dir", 2, lambda rel: head + rel))
        ages = _ages(column("age_s", 6, lambda ts: None if ts is None else max(0.0, now - ts)))
    columns = {"path": paths, "status": column("status", 3),
               "tags": column("tags", 5, lambda t: t or ""), "age": ages,
               "steps": column("steps", 7),
               "final_loss": column("final_loss", 8)}
    for name in extra:   # the note is the one named column a plain row (a tuple) holds
        columns[name] = column("note", 9, lambda n: n or "") if name == "note" else \
            [r.get(name) for r in records]
    if wide and "note" not in columns:   # (named by --sort or --where: already there)
        columns["note"] = column("note", 9, lambda n: n or "")
    return columns


def _ages_since(starts, now):
    """:func:`_ages` of the time since each start (a timestamp, or None)."""
    # (now - ts) // 86400 >= 1 exactly when now - ts >= 86400: most rows in one expression
    return [f"{int(d)}d" if ts is not None and (d := (now - ts) // 86400) >= 1 else
            format_age(None if ts is None else max(0.0, now - ts)) for ts in starts]


def _ages(seconds):
    """:func:`format_age` of each, the days (most of a long listing) without a call each."""
    return [f"{int(s // 86400)}d" if s is not None and s >= 86400 else format_age(s)
            for s in seconds]
