"""What changed in the served runs since a client's last poll (``/api/changes``).

The dashboard's page polls every second. Answering each poll with every
run's data costs the whole folder (172 MB at 10,000 runs); this answers
with what changed since the cursor the client holds: runs that appeared
(their listing entry), runs whose run.json changed (their new status),
runs that left, and each log's rows appended since then, read from the
byte offset the log had at that cursor (only whole lines; never a full
rescan of a CSV). When nothing changed the answer is a few bytes.

Which runs appeared, changed or left comes from the server's replica of
each root's run store (:mod:`mindexp.rundir.replica`), which follows the
store's change feed and notes what it writes: a poll asks the store what
it wrote since and stats the folders holding runs, never every run (a
quiet poll stat-ed every run's files: 22 s at 100,000 runs). Only the logs
of the runs that still run are looked at.

A cursor is a generation number of this server: each refresh that sees a
change starts a new one. A cursor this server did not give (another
server, one older than the history it keeps) gets ``reset``: the client
fetches the full data again.

The replicas are made in a thread of their own (:meth:`ChangeFeed.start`,
a second or two at 100,000 runs), and the runs table's first pages do not
wait for them: :meth:`ChangeFeed.early` answers them from each root's store
itself, through the read-only connection its replica follows it by
(:func:`mindexp.rundir.replica.open_source`), once every replica has read
the store's feed, with the cursor of that moment. What
changes after it (a writer's commit, a run copied in by hand, rows appended
to a running run's logs) is noted by the replica, so the client's next poll
gets it. A replica that fails (or falls back to a scan) after such a page
was answered resets the cursors given so far. A poll itself waits for the
replicas.
"""
import functools
import logging
import os
import sqlite3
import threading
import time
from typing import Callable

from ..callbacks import schema

logger = logging.getLogger(__name__)

LOGS = ("loss", "params", "grad_norm", "eval")
HISTORY = 64          # generations of log offsets kept per run
MAX_EVENTS = 100_000  # runs' appearances, changes and removals kept (older cursors: reset)
SNAPSHOT_WAIT_S = 5.0   # an early page waits this long for the copies' snapshots, at most
# the copies wait this long for the first page and its data, at most (the data or a poll
# ends the wait at once): a page whose data took longer than the pause shared the CPU
# with the copy's second of SQLite (page + data 1.20-1.27 s at 100,000 runs)
COPY_PAUSE_S = 5.0


class ChangeFeed:
    """The served roots' replicas, refreshed on each request, and what
    changed between refreshes; answers ``changes(cursor)`` (thread-safe)."""

    def __init__(self, roots: list[str], directory: str | None = None):
        self.roots = list(roots)
        self.directory = directory    # where the replicas go (None: the system's)
        self.generation = 0
        self._served: list | None = None   # [(root, its Replica)]
        self._events: list[tuple[int, str, str]] = []   # (generation, run dir, kind)
        self._floor = 0                    # cursors below this are older than the events kept
        self._tracked: dict[str, _Tracked] = {}   # run dir -> its logs' sizes (runs that ran)
        self._closed = False
        self._lock = threading.Lock()      # the replicas, the events, the logs
        # while the replicas are made: the roots' stores read in place, for early pages
        self._early = threading.Condition()   # guards what follows
        self._started = False              # start() was called
        self._copying = False              # the replicas are being made
        self._copied: list[str] = []       # roots to copy
        self._snapshots: set[str] = set()  # roots whose copy has its snapshot
        self._sources: dict = {}           # root -> the store its copy reads (a Source)
        self._refused = False              # a store failed an early page: none till the next copy
        self._early_answered = False       # a page came from them (with _early_cursor)
        self._early_cursor = 0             # the generation of the copies' snapshot
        self._preparer: threading.Thread | None = None   # start()'s thread
        self._wanted = threading.Event()   # the copy goes on without pausing (see want_copy)
        self._pause_until = 0.0            # time.monotonic() when its pause ends anyway

    def changes(self, cursor: int | None, key_of: Callable[[str], str]) -> dict:
        """``{"cursor", "new", "status", "removed", "rows"}`` since ``cursor`` (an
        int from an earlier answer, or None for "now" with nothing listed), or
        ``{"reset": true, "cursor"}``. ``key_of(run_dir)``: the client's key of a run."""
        self.want_copy()   # this poll waits for the copies: no pause
        with self._lock:
            self._refresh()
            if cursor is None:
                return {"cursor": self.generation, "new": [], "status": [], "removed": [],
                        "rows": {}}
            if not 0 <= cursor <= self.generation or cursor < self._oldest_kept():
                return {"reset": True, "cursor": self.generation}
            return self._since(cursor, key_of)

    def refresh(self) -> int:
        """Bring the replicas up to date; the generation of that state."""
        with self._lock:
            self._refresh()
            return self.generation

    def query(self, fn: Callable):
        """``fn([(served root, its replica)])``, with no refresh in between."""
        with self._lock:
            return fn(self._catalogs())

    def start(self, then: Callable[[], object] | None = None) -> None:
        """Make the replicas in a thread of its own (once; a later
        request waits for them), then call ``then()`` there. Once a copy has
        its snapshot (early pages can be answered), it pauses until
        :meth:`want_copy` or for :data:`COPY_PAUSE_S` at most."""
        with self._early:
            if self._started or self._served is not None:
                return
            self._started = self._copying = True
        threading.Thread(target=self._prepare, args=(then,), name="mindexp-catalog-copy",
                         daemon=True).start()

    def early(self, fn: Callable):
        """``(fn([(served root, its root's catalog read in place)]), cursor)``
        while the replicas are being made, once each copy took its
        snapshot; None otherwise, and when a root's catalog is refused,
        damaged or busy (the caller then waits for the copies)."""
        with self._early:
            if not self._early.wait_for(self._snapshots_taken, timeout=SNAPSHOT_WAIT_S) or \
                    not self._copying:
                return None
            if self._refused:
                return None
            self._early_answered = True   # before reading: a copy failing now resets it
            try:
                return fn([(root, self._sources[root]) for root in self._copied]), \
                    self._early_cursor
            except sqlite3.Error as exc:   # damaged, locked by a writer: wait for the copy
                logger.debug("dashboard: a root's catalog read in place: %s", exc)
                self._refused = True
                return None

    def _snapshots_taken(self):
        return not self._copying or (bool(self._copied) and
                                     self._snapshots.issuperset(self._copied))

    def want_copy(self) -> None:
        """The page's first data was answered, or a client waits for the copies:
        they pause no more (see :meth:`start`)."""
        self._wanted.set()

    def _prepare(self, then):
        self._preparer = threading.current_thread()
        self._pause_until = time.monotonic() + COPY_PAUSE_S
        try:
            self.refresh()
            if then is not None:
                then()
        except Exception as exc:   # noqa: BLE001 - the next request builds again, and says
            logger.warning("dashboard: making the replica of the run store failed: %s", exc)
        finally:
            with self._early:   # made by a request before this thread came: none under way
                if self._served is not None:
                    self._copying = False
                self._early.notify_all()

    def close(self) -> None:
        """Close the replicas and remove their files; without waiting
        long for a refresh under way (the server is stopping): its files go
        then, and the process's end closes the rest."""
        self._closed = True   # a refresh under way closes what it makes from here
        self._wanted.set()    # a copy's pause ends
        locked = self._lock.acquire(timeout=1.0)
        try:
            for _, catalog in self._served or []:
                if locked:
                    catalog.close()
                else:   # in use by the refresh: its file goes, the process's end closes it
                    catalog.remove_files()
            self._served = []
        finally:
            if locked:
                self._lock.release()
        with self._early:
            self._refused = True

    # -- refreshing ------------------------------------------------------------------
    def _catalogs(self):
        if self._served is None:
            self._served = self._build()
        return self._served

    def _build(self):
        """``[(root, its replica)]``, made now."""
        from ..rundir.replica import replica
        roots = [root for root in self.roots if os.path.isdir(root)]
        self._begin_copies(roots)
        served = []
        try:
            for root in roots:
                served.append((root, replica(root, self.directory,
                                             functools.partial(self._snapshot_taken, root))))
        except BaseException:
            for _, catalog in served:
                catalog.close()
            self._tracked.clear()
            self._end_copies(copied=False)
            raise
        if self._closed:   # the server stopped meanwhile: nothing is left behind
            for _, catalog in served:
                catalog.close()
            served = []
        self._end_copies(copied=all(catalog.copied for _, catalog in served))
        return served

    def _begin_copies(self, roots):
        with self._early:
            self._copying, self._copied, self._snapshots = True, roots, set()
            self._early_answered, self._early_cursor = False, self.generation
            self._sources, self._refused = {}, False

    def _snapshot_taken(self, root, source, live):
        """A copy began reading ``root``'s catalog (``source``, which the early pages
        read meanwhile): the logs of the runs it says run are measured now (their
        rows after this go to the early pages' clients)."""
        for run_dir in live:
            if is_within(run_dir, root) and run_dir not in self._tracked:
                raw = _raw_sizes(run_dir)
                self._tracked[run_dir] = _Tracked(raw, _log_sizes(run_dir, raw),
                                                  self._early_cursor)
        with self._early:
            self._snapshots.add(root)
            self._sources[root] = source
            self._early.notify_all()
        if threading.current_thread() is self._preparer:
            # the rest of the copy is a second of CPU that the first page and its data
            # need not share on a small machine: it waits for them (or for a poll, which
            # waits for it) a moment. At 100,000 runs on 2 cores the first page and data
            # took 1.00-1.12 s beside the copy, 0.73-0.86 s before it (at load < 1)
            self._wanted.wait(max(0.0, self._pause_until - time.monotonic()))

    def _end_copies(self, copied):
        """The copies are made (or failed: ``copied`` False, also when one was built
        from a scan): the pages answered from the roots' catalogs meanwhile
        hold a cursor that no change recorded since follows: reset."""
        with self._early:
            if self._early_answered and not copied:
                self.generation += 1
                self._floor = self.generation
            self._copying = self._early_answered = False
            self._sources = {}
            self._early.notify_all()

    def _refresh(self):
        first = self._served is None
        events = []
        for root, catalog in self._catalogs():
            try:
                noted = catalog.refresh()
            except (sqlite3.Error, OSError) as exc:   # a folder going away meanwhile
                logger.debug("dashboard: refreshing %s: %s", root, exc)
                continue
            events += [(run_dir, kind) for run_dir, kind in
                       ((catalog._abs(rel), kind) for rel, kind in noted)
                       if is_within(run_dir, root)]
        grew = self._track_logs(events, first)
        if events or grew:
            self.generation += 1
            self._events += [(self.generation, run_dir, kind) for run_dir, kind in events]
            if len(self._events) > MAX_EVENTS:
                cut = len(self._events) - MAX_EVENTS // 2
                self._floor = self._events[cut - 1][0]
                del self._events[:cut]

    def _track_logs(self, events, first):
        """Stat the logs of the runs that run (or cannot be read yet), and of those
        whose record just changed (their last rows); True when a log gained whole
        lines."""
        from ..rundir.replica import live_runs
        live = {d for root, catalog in self._served for d in live_runs(catalog, root)}
        touched = {d for d, kind in events}
        for run_dir in [d for d, kind in events if kind == "removed"]:
            self._tracked.pop(run_dir, None)
        grew = False
        for run_dir in live | (touched & set(self._tracked)):
            raw = _raw_sizes(run_dir)
            tracked = self._tracked.get(run_dir)
            if tracked is None:
                start = self.generation if first else self.generation + 1
                self._tracked[run_dir] = _Tracked(raw, _log_sizes(run_dir, raw), start)
            elif raw != tracked.raw:
                grew |= tracked.update(raw, _log_sizes(run_dir, raw), self.generation + 1)
        return grew

    def _oldest_kept(self):
        """The oldest cursor every run's history still answers."""
        return max([self._floor] + [t.history[0][0] for t in self._tracked.values()
                                    if len(t.history) >= HISTORY])

    # -- answering ---------------------------------------------------------------------
    def _since(self, cursor, key_of):
        out = {"cursor": self.generation, "new": [], "status": [], "removed": [], "rows": {}}
        born, last = set(), {}
        for generation, run_dir, kind in reversed(self._events):
            if generation <= cursor:
                break
            last.setdefault(run_dir, kind)
            if kind == "new":
                born.add(run_dir)
        for run_dir, kind in sorted(last.items()):
            if kind == "removed":
                if run_dir not in born:
                    out["removed"].append(key_of(run_dir))
            else:
                out["new" if run_dir in born else "status"].append(_listing(run_dir, key_of))
        for run_dir, tracked in self._tracked.items():
            if run_dir in born or tracked.history[-1][0] <= cursor:
                continue   # nothing since the cursor: most runs, most polls
            rows = tracked.rows_since(cursor, run_dir)
            if rows:
                out["rows"][key_of(run_dir)] = rows
        return out


class _Tracked:
    """One run that ran while served: its logs' sizes per generation."""

    def __init__(self, raw, sizes, generation):
        self.raw = raw   # the logs' file sizes: a change is looked at closer
        self.history = [(generation, sizes)]

    def update(self, raw, sizes, generation):
        """Record a new state; True when a log gained whole lines."""
        self.raw = raw
        if sizes == self.history[-1][1]:
            return False
        self.history.append((generation, sizes))
        del self.history[:-HISTORY]
        return True

    def rows_since(self, cursor, run_dir):
        """``{log: [row, ...]}`` appended after the sizes known at ``cursor`` (or
        since it was first looked at, when that came later)."""
        then = next((sizes for gen, sizes in reversed(self.history) if gen <= cursor),
                    self.history[0][1])
        now = self.history[-1][1]
        out = {}
        for name in LOGS:
            if now.get(name, 0) > then.get(name, 0):
                rows = _rows_between(os.path.join(run_dir, schema.LOGS[name].filename),
                                     then.get(name, 0), now[name])
                if rows:
                    out[name] = rows
        return out


def is_within(path: str, root: str) -> bool:
    """Whether the absolute ``path`` is ``root`` or below it, compared by path
    components (``/a/runs-private`` is not within ``/a/runs``)."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # one relative, one absolute
        return False


def _raw_sizes(run_dir):
    """``{log: file size}`` of the logs that exist."""
    sizes = {}
    for name in LOGS:
        try:
            sizes[name] = os.stat(os.path.join(run_dir, schema.LOGS[name].filename)).st_size
        except OSError:
            pass
    return sizes


def _log_sizes(run_dir, raw):
    """``{log: byte offset just past its last whole line}``: a row being written
    is not counted until its line ends."""
    return {name: _whole_lines_end(os.path.join(run_dir, schema.LOGS[name].filename), size)
            for name, size in raw.items()}


def _whole_lines_end(path, size, back=4096):
    """The offset just past the last newline before ``size`` (0: none)."""
    try:
        with schema.open_file(path) as f:
            end = size
            while end > 0:
                start = max(0, end - back)
                f.seek(start)
                found = f.read(end - start).rfind(b"\n")
                if found >= 0:
                    return start + found + 1
                end = start
    except OSError:
        pass
    return 0


def _rows_between(path, start, end):
    """The whole lines of ``path`` between byte offsets (the header, at offset 0,
    included as the first row), as lists of strings."""
    from .mlflow_points import read_lines
    header, lines = read_lines(path, start, end - start)
    return ([header] if start == 0 and header else []) + [f for at, f in lines if at <= end]


def _listing(run_dir, key_of):
    """A run's listing entry from its run.json (status and the few numbers the table shows)."""
    from ..rundir.meta import read_meta
    try:
        meta = read_meta(run_dir)
    except Exception as exc:   # a run mid-write or damaged: listed by key, said why
        return {"key": key_of(run_dir), "status": "unreadable", "error": " ".join(str(exc).split())}
    return {"key": key_of(run_dir), "run_id": meta.get("run_id") or os.path.basename(run_dir),
            "experiment": meta.get("experiment"), "status": meta.get("status"),
            "started_at": meta.get("started_at"), "steps": meta.get("steps"),
            "final_loss": meta.get("final_loss")}
