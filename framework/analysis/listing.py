"""The dashboard's runs table at any number of runs (``/api/runs``): one row per
run from its run.json and config.json, filtered, sorted and paged on the server.

At 10,000 runs the page cannot load every run's logs (172 MB, minutes): a
row holds what run.json says (status, steps, final loss, the error) and the
config fields that differ between the runs. Rows are kept in memory and
read again only for a run whose run.json or config.json changed (the change
feed's scan says which), or, for a run that is still running, whose
loss.csv grew (its progress is read from loss.csv). The first answer reads
the root's run catalog (read only) when it is current.
"""
import math
import os
import threading
from typing import Callable

from ..callbacks import schema
from ..rundir.run import Run
from .reports import differing_fields

MAX_LIMIT = 500          # rows per page at most
MAX_CONFIG_COLUMNS = 8   # differing config fields shown as columns
OUTCOMES = ("final_loss", "min_loss", "steps")
SORTABLE = ("run", "status", "started", "progress", "steps_per_s") + OUTCOMES


class Listing:
    """Rows of every served run, refreshed from the change feed's scan."""

    def __init__(self, roots: list[str], key_of: Callable[[str], str]):
        self.roots, self.key_of = roots, key_of
        self._rows: dict[str, tuple] = {}   # run dir -> (state, row)
        self._generation: int | None = None
        self._seeded = False
        self._columns: list[str] = []
        self._lock = threading.Lock()

    def page(self, found: dict, generation: int, offset: int = 0, limit: int = 100,
             query: str = "", sort: str = "-started") -> dict:
        """``{"total", "matched", "offset", "columns", "rows"}``: the rows of
        ``found`` (run dir -> its feed state) holding every word of ``query``,
        sorted by ``sort`` (``-`` first: descending; ``config.<field>``), from
        ``offset``, at most ``limit`` (at most MAX_LIMIT)."""
        with self._lock:
            if generation != self._generation:
                self._refresh(found)
                self._generation = generation
            rows = [row for _, row in self._rows.values()]
            columns = list(self._columns)
        total = len(rows)
        words = str(query or "").lower().split()
        if words:
            rows = [r for r in rows if all(w in r["text"] for w in words)]
        rows = _sorted(rows, sort)
        limit = max(1, min(int(limit), MAX_LIMIT))
        offset = max(0, int(offset))
        return {"total": total, "matched": len(rows), "offset": offset,
                "limit": limit, "sort": sort, "q": query, "columns": columns,
                "rows": [{k: v for k, v in r.items() if k != "text"}
                         for r in rows[offset:offset + limit]]}

    def _refresh(self, found):
        for run_dir in [d for d in self._rows if d not in found]:
            del self._rows[run_dir]
        todo = {d: state for d, state in found.items()
                if d not in self._rows or self._rows[d][0] != state}
        if not self._seeded:   # a row per catalog record as it comes: never all records at once
            for run_dir, run in self._seed():
                if run_dir in todo:
                    self._rows[run_dir] = (todo.pop(run_dir), self._row(run_dir, run))
        for run_dir, state in todo.items():
            self._rows[run_dir] = (state, self._row(run_dir))
        # the feed's order (by folder), which sorting keeps among equals
        self._rows = {d: self._rows[d] for d in found}
        configs = [r["config"] for _, r in self._rows.values()]
        self._columns = differing_fields(configs)[:MAX_CONFIG_COLUMNS]
        for _, row in self._rows.values():
            row["text"] = _text(row, self._columns)

    def _seed(self):
        """``(run dir, Run)`` with run.json and config.json from the run catalog
        when it is current (read only: the dashboard never writes), one at a time."""
        from ..rundir.catalog import current_runs
        self._seeded = True
        for root in self.roots:
            if os.path.isdir(root):
                for run in current_runs(root):
                    if "meta" in run.__dict__:
                        yield os.path.realpath(run.dir), run

    def _row(self, run_dir, run=None):
        run = run or Run.found(run_dir)
        key = self.key_of(run_dir)
        base = {"key": key, "dir": run_dir, "page": f"/run/{_quote(key)}",
                "href": f"/files/{_quote(key)}/"}
        try:
            meta, config = run.meta, run.config
        except Exception as exc:   # noqa: BLE001 - mid-write or damaged: listed, said why
            name = os.path.basename(run_dir)
            return base | {"id": name, "short": name, "status": "unreadable",
                           "error": " ".join(str(exc).split()), "config": {}, "progress": {}}
        from .payload import short_id
        run_id = meta.get("run_id") or os.path.basename(run_dir)
        summary = (meta.get("summary") or {}).get(schema.LOSS.name) or {}
        return base | {
            "id": run_id, "short": short_id(run_id), "experiment": meta.get("experiment"),
            "status": meta.get("status") or "unknown", "started": meta.get("started_at"),
            "error": _first_line(meta.get("error")), "stop_reason": meta.get("stop_reason"),
            "final_loss": _number(meta.get("final_loss")), "min_loss": _number(summary.get("min")),
            "steps": meta.get("steps"), "config": {k: _cell(v) for k, v in config.items()},
            "progress": _progress(run, meta)}


def _progress(run, meta):
    """A finished run's progress from run.json; a running or failed one's from
    loss.csv (its last step, its recent rate), as the run page shows it."""
    status = meta.get("status")
    if status in ("completed", "pruned") and meta.get("steps") is not None:
        step = int(meta["steps"])
        stop = "pruned" if status == "pruned" else ("early stop" if meta.get("stop_reason")
                                                    else None)
        total = meta.get("total_steps")
        return {"step": step, "total": step if stop or not total else total,
                "steps_per_s": meta.get("steps_per_s"), "eta_s": None, "stop": stop,
                "planned": total}
    from .payload import run_progress
    try:
        return run_progress(run)
    except Exception:   # noqa: BLE001 - a log mid-write: no progress this time
        return {}


def _text(row, columns):
    """What the filter searches: the key, id, status, error and shown config values."""
    parts = [row["key"], row["id"], row["status"], row.get("error") or "",
             row.get("experiment") or ""]
    parts += [f"{n}={row['config'].get(n)}" for n in columns if n in row["config"]]
    return " ".join(map(str, parts)).lower()


def _sorted(rows, sort):
    """Rows sorted by a column (missing values last, whichever the direction)."""
    sort = sort or "-started"
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    if name.startswith("config."):
        field = name[len("config."):]

        def value(row):
            return row["config"].get(field)
    elif name in SORTABLE:
        def value(row):
            if name == "run":
                return row["id"]
            if name == "started":
                return f"{row.get('started') or ''}|{row['id']}"   # ties: by id
            if name in ("progress", "steps_per_s"):
                p = row["progress"] or {}
                step = p.get(schema.Col.STEP)
                return (step / p["total"] if p.get("total") and step is not None
                        else None) if name == "progress" else p.get("steps_per_s")
            return row.get(name)
    else:
        raise ValueError(f"cannot sort by {name!r}; sort by one of {', '.join(SORTABLE)} or "
                         f"config.<field> (- first: descending). Received: sort={sort!r}")
    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    numbers = [r for r in present if isinstance(value(r), (int, float))]
    texts = [r for r in present if not isinstance(value(r), (int, float))]
    numbers.sort(key=value, reverse=descending)
    texts.sort(key=lambda r: str(value(r)), reverse=descending)
    return numbers + texts + missing


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


def _first_line(text):
    return str(text).strip().splitlines()[0] if text else None


def _quote(key):
    from urllib.parse import quote
    return quote(key)
