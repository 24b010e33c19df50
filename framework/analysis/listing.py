"""The dashboard's runs table at any number of runs (``/api/runs``): one row per
run, filtered, sorted and paged in SQL on the server's replica of the run
store (:mod:`mindexp.rundir.replica`), or on the root's store itself, read
in place while the replica is made.

At 100,000 runs the server cannot hold a row per run (1 GB) nor sort them
in Python per request: a page is one ``COUNT`` and one ``ORDER BY ... LIMIT
... OFFSET`` on the catalog, then the records of the page's rows alone (a
running run's progress from its loss.csv). The table's config columns (the
fields that differ between runs) are worked out in SQL when runs came, went
or changed their config.
"""
import json
import math
import os
from typing import Callable
from urllib.parse import quote

from ..callbacks import schema
from ..errors import ConfigError
from ..rundir import where as grammar
from ..rundir.meta import UNREADABLE
from ..rundir.replica import FAILED
from ..rundir.run import Run
from ..rundir.store import Query

MAX_LIMIT = 500          # rows per page at most
MAX_CONFIG_COLUMNS = 8   # differing config fields shown as columns
COLUMNS_SAMPLE = 5000    # runs whose configs say which fields differ, at most
OUTCOMES = ("final_loss", "min_loss", "steps")
SORTABLE = ("run", "status", "started", "progress", "steps_per_s") + OUTCOMES
# a finished run's progress is whole; a running one's is in its loss.csv (not in SQL)
_SORT_SQL = {"run": "run_id", "status": "status", "started": "COALESCE(started_at, '') || '|' || "
             "COALESCE(run_id, '')", "progress": "CASE WHEN status IN ('completed', 'pruned') "
             "THEN 1.0 END", "steps_per_s": "steps_per_s", "final_loss": "final_loss",
             "min_loss": "min_loss", "steps": "steps"}


class Listing:
    """Pages of the served runs from the change feed's replicas (or the
    roots' own, read in place while those are made)."""

    def __init__(self, roots: list[str], key_of: Callable[[str], str]):
        self.roots, self.key_of = roots, key_of
        self._columns: dict[str, tuple] = {}   # served root -> (config mark, columns)

    def page(self, served: list, offset: int = 0, limit: int = 100, query: str = "",
             sort: str = "-started", where: str = "") -> dict:
        """``{"total", "matched", "offset", "columns", "rows"}``: the runs of
        ``served`` (``[(root, replica)]``) holding every word of
        ``query`` and matching ``where`` (``mindexp runs --where``'s grammar, in
        SQL: a running run by its run.json), sorted by ``sort`` (``-`` first:
        descending; ``config.<field>``), from ``offset``, at most ``limit`` (at
        most MAX_LIMIT). ValueError for a ``where`` outside the grammar or that
        SQL cannot answer (a column only the logs give, arithmetic)."""
        limit = max(1, min(int(limit), MAX_LIMIT))
        offset = max(0, int(offset))
        expression, values = _sort_expression(sort)
        columns = self._shown_columns(served)
        words = str(query or "").lower().split()
        total = matched = 0
        picked = []   # (sort key, root, catalog, rel)
        for root, catalog in served:
            here = catalog.query(root, Query(other_hosts=False), ["COUNT(*)"]).fetchone()[0]
            condition, condition_values = _where_sql(catalog, root, where)
            match, match_values = _matching(words, columns)
            # one root: its page in SQL; several: the first offset + limit of each, merged
            first, count = (offset, limit) if len(served) == 1 else (0, offset + limit)
            rows, found = _ordered(catalog, f"{condition} AND {match}",
                                   condition_values + match_values, expression, values, sort,
                                   count, first, bool(words or where))
            total += here
            matched += here if found is None else found
            picked += [(value, root, catalog, rel) for value, rel in rows]
        if len(served) > 1:
            picked = _merged(picked, sort)[offset:offset + limit]
        return {"total": total, "matched": matched, "offset": offset,
                "limit": limit, "sort": sort, "q": query, "columns": columns,
                "rows": self._rows(picked, columns)}

    def columns(self, served: list) -> list[str]:
        """The table's config columns (the fields that differ), worked out now
        when runs came, went or changed config since."""
        return self._shown_columns(served)

    def top(self, served: list, count: int, query: str = "") -> tuple[list[str], int]:
        """The folders of the ``count`` most recent runs (by id) holding every word of
        ``query``, and how many hold them."""
        answer = self.page(served, 0, count, query, "-run")
        return [row["dir"] for row in answer["rows"]], answer["matched"]

    def _rows(self, picked, columns):
        """The table's rows of ``picked`` (``(sort key, root, catalog, rel)``): their
        config and problem from the catalog, their record from it when it holds
        it (the replica: the failed runs'; the root's catalog, read while
        the copy is made: every run's), else from the run's folder."""
        found = {}
        for catalog in {id(p[2]): p[2] for p in picked}.values():
            rels = [p[3] for p in picked if p[2] is catalog]
            marks = ", ".join("?" for _ in rels)
            for rel, problem, config, meta in catalog.db.execute(
                    f"SELECT r.rel, r.problem, r.config, c.meta FROM runs r LEFT JOIN records c "
                    f"ON c.host = r.host AND c.root = r.root AND c.rel = r.rel WHERE "
                    f"r.host = ? AND r.root = ? AND r.rel IN ({marks})",
                    (catalog.host, catalog.key_root) + tuple(rels)).fetchall():
                found[(id(catalog), rel)] = (problem, config, meta)
        out = []
        for _, root, catalog, rel in picked:
            run_dir = catalog._abs(rel)
            problem, config, meta = found.get((id(catalog), rel), (None, None, None))
            if problem is None and meta is not None and config is not None:
                run = Run.found(run_dir, json.loads(meta), json.loads(config))
            else:
                run = Run.found(run_dir)
            out.append(self._row(run_dir, run, columns))
        return out

    def _shown_columns(self, served):
        """The config fields that differ between the runs (at most
        MAX_CONFIG_COLUMNS), worked out again when runs came, went or changed config."""
        out = []
        for root, catalog in served:
            mark = catalog.config_mark()
            cached = self._columns.get(root)
            if cached is None or cached[0] != mark:
                cached = (mark, _differing(catalog, root))
                self._columns[root] = cached
            out += [name for name in cached[1] if name not in out]
        return out[:MAX_CONFIG_COLUMNS]

    def _row(self, run_dir, run=None, columns=()):
        """A run's row of the table; of its config, the ``columns`` shown (all of
        it was 1.4 of a row's 1.5 KB at 45 fields: the first page at 100,000
        runs 138 -> 40 KB)."""
        run = run or Run.found(run_dir)
        key = self.key_of(run_dir)
        base = {"key": key, "dir": run_dir, "page": f"/run/{quote(key)}",
                "href": f"/files/{quote(key)}/"}
        try:
            meta, config = run.meta, run.config
        except Exception as exc:   # noqa: BLE001 - mid-write or damaged: listed, said why
            name = os.path.basename(run_dir)
            return base | {"id": name, "short": name, "status": UNREADABLE,
                           "error": " ".join(str(exc).split()), "config": {}, "progress": {}}
        from .payload import first_line, short_id
        run_id = meta.get("run_id") or os.path.basename(run_dir)
        summary = (meta.get("summary") or {}).get(schema.LOSS.name) or {}
        return base | {
            "id": run_id, "short": short_id(run_id), "experiment": meta.get("experiment"),
            "status": meta.get("status") or "unknown", "started": meta.get("started_at"),
            "error": first_line(meta.get("error")), "stop_reason": meta.get("stop_reason"),
            "final_loss": _number(meta.get("final_loss")), "min_loss": _number(summary.get("min")),
            "steps": meta.get("steps"), "config": {k: _cell(config[k]) for k in columns if k in config},
            "progress": _progress(run)}


def _where_sql(catalog, root, text):
    """The store's SQL of ``root``'s runs matching ``where`` (all of them when
    empty); ValueError in one line for text outside the grammar or a condition
    SQL cannot answer."""
    try:
        return catalog.condition(root, Query(where=text or None, other_hosts=False))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    except grammar.Unsupported:
        raise ValueError("where takes comparisons of config fields and of "
                         f"{', '.join(grammar.NUMBER_COLUMNS + grammar.TEXT_COLUMNS)} with "
                         "numbers, quoted strings and lists, joined by and, or, not (columns "
                         "only the logs give and arithmetic: mindexp runs --where). "
                         f"Received: where={text!r}") from None


def _sort_expression(sort):
    """SQL of the sort column (and its parameters); ValueError naming what is accepted."""
    name = (sort or "-started").lstrip("-")
    if name.startswith("config."):
        return "json_extract(config, ?)", [_json_key(name[len("config."):])]
    if name in _SORT_SQL:
        return _SORT_SQL[name], []
    raise ValueError(f"cannot sort by {name!r}; sort by one of {', '.join(SORTABLE)} or "
                     f"config.<field> (- first: descending). Received: sort={sort!r}")


def _ordered(catalog, where, values, expression, expression_values, sort, count, offset=0,
             counted=False):
    """``([(sort value, rel)], matched)``: ``count`` rows from ``offset`` in the
    order asked (missing values last whichever the direction, numbers before
    text, ties by folder) and, when ``counted``, how many rows match (None
    otherwise). Only the value and the folder go through the sort: the value
    is worked out once a row, and a row's config is read for the page alone."""
    direction = "DESC" if (sort or "-started").startswith("-") else "ASC"
    if (sort or "-started").lstrip("-") == "started" and not counted:   # the default
        return catalog.db.execute(
            f"SELECT started_at, rel FROM runs INDEXED BY {catalog.started_index} WHERE {where} "
            f"ORDER BY started_at {direction}, run_id {direction}, rel LIMIT {int(count)} "
            f"OFFSET {int(offset)}", list(values)).fetchall(), None
    rows = catalog.db.execute(
        f"WITH t AS MATERIALIZED (SELECT ({expression}) AS v, rel FROM runs WHERE {where}) "
        "SELECT v, rel, COUNT(*) OVER () FROM t ORDER BY v IS NULL, typeof(v) = 'text', "
        f"v {direction}, rel LIMIT {int(count)} OFFSET {int(offset)}",
        list(expression_values) + list(values)).fetchall()
    if not counted:
        return [(v, rel) for v, rel, _ in rows], None
    if rows:
        return [(v, rel) for v, rel, _ in rows], rows[0][2]
    matched = catalog.db.execute(f"SELECT COUNT(*) FROM runs WHERE {where}", list(values))
    return [], matched.fetchone()[0]


def _merged(picked, sort):
    """Rows of several roots in one order (as :func:`_ordered` sorts each)."""
    if len({id(p[2]) for p in picked}) <= 1:
        return picked
    descending = (sort or "-started").startswith("-")
    numbers = [p for p in picked if isinstance(p[0], (int, float))]
    texts = [p for p in picked if isinstance(p[0], str)]
    missing = [p for p in picked if p[0] is None]
    numbers.sort(key=lambda p: p[0], reverse=descending)
    texts.sort(key=lambda p: p[0], reverse=descending)
    return numbers + texts + missing


def _matching(words, columns):
    """SQL true for the runs whose text (folder, id, status, error, experiment,
    ``field=value`` of the shown config columns) holds every word."""
    if not words:
        return "1 = 1", []
    parts, values = ["rel", "run_id", "status", "problem", "experiment",
                     f"CASE WHEN status IN {FAILED} THEN (SELECT json_extract(c.meta, "
                     "'$.error') FROM records c WHERE c.host = runs.host AND c.root = runs.root "
                     "AND c.rel = runs.rel) END"], []
    for name in columns:
        key = _json_key(name)
        parts.append("CASE json_type(config, ?) WHEN 'true' THEN ? || '=true' WHEN 'false' "
                     "THEN ? || '=false' WHEN 'null' THEN ? || '=none' ELSE ? || '=' || "
                     "json_extract(config, ?) END")
        values += [key, name, name, name, name, key]
    text = "lower(" + " || ' ' || ".join(f"COALESCE({p}, '')" for p in parts) + ")"
    return " AND ".join(f"instr({text}, ?) > 0" for _ in words), \
        [v for word in words for v in values + [word]]


def _differing(catalog, root):
    """The config fields whose values are not the same in every run of ``root``
    (a field missing from a run counts as a value), in their order in the
    configs. Past :data:`COLUMNS_SAMPLE` runs, among that many spread evenly
    over them (each config is parsed: 17 s at 100,000 runs)."""
    scope, params = catalog.scope(root, other_hosts=False, alias="runs.")
    top = catalog.db.execute("SELECT MAX(rowid) FROM runs").fetchone()[0] or 0
    every = max(1, -(-top // COLUMNS_SAMPLE))
    # every run up to COLUMNS_SAMPLE, else one rowid in ``every``, looked up by rowid
    # (a join on a generated series of rowids, or a scope's index, walked far more rows:
    # 0.35 -> 0.17 s at 100,000 runs); MIN IS NOT MAX: two values or more, without
    # COUNT(DISTINCT)'s second sort
    picked = "" if every == 1 else \
        f"runs.rowid IN ({', '.join(str(i) for i in range(1, top + 1, every))}) AND "
    rows = catalog.db.execute(
        "SELECT j.key, MIN(j.value) IS NOT MAX(j.value), COUNT(*), MIN(j.id) FROM runs, "
        f"json_each(runs.config) j WHERE {picked}{scope} AND runs.config IS NOT NULL "
        "GROUP BY j.key", params).fetchall()
    sampled = catalog.db.execute(f"SELECT COUNT(*) FROM runs WHERE {picked}{scope} AND "
                                 "runs.config IS NOT NULL", params).fetchone()[0]
    return [key for key, differ, count, _ in sorted(rows, key=lambda r: (r[3], r[0]))
            if differ or count < sampled]


def _json_key(field):
    return '$."' + field.replace('"', '""') + '"'


def _progress(run):
    """The run's progress as the run page shows it (:func:`.payload.run_progress`:
    a finished run's from run.json alone); ``{}`` while its loss.csv is mid-write."""
    from .payload import run_progress
    try:
        return run_progress(run)
    except Exception:   # noqa: BLE001 - a log mid-write: no progress this time
        return {}


def _cell(value):
    """A config value as one comparable, JSON-ready scalar."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _number(value):
    """A finite number, or None (a diverged run's NaN sorts with the missing)."""
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None
