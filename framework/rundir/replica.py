"""The dashboard's replica of a root's run store: a temporary file of the
server's own that follows the store's change feed.

``mindexp serve`` answers a poll every second per open page. Scanning the
runs for each poll cost one ``stat`` per file per run (22 s a poll at
100,000 runs); querying the root's store for every page would make the
server a reader that writers wait for (on a rollback journal, the store on a
network filesystem: a reader's lock holds every commit), and the server
never writes into the served folders. So the server keeps the store's rows
in a temporary file outside every served folder (a :class:`RunStore` of the
same tables, which the table's pages query) and keeps it current:

- :meth:`Replica.follow`: the runs the store wrote after the replica's last
  value of its feed (:meth:`RunStore.changes`) are copied from the store
  attached read-only (SQLite to SQLite, no row through Python),
  :data:`COPY_ROWS` rows a statement, each statement a transaction of its
  own (a writer waits for none longer than that), and the dropped ones
  removed;
- :meth:`RunStore.sync`: what no writer said (a run copied in by hand, or
  written by an older mindexp): a ``stat`` per folder holding runs, and the
  running runs' records;
- a rolling check of :data:`CHECKED_PER_REFRESH` finished runs a refresh,
  so that a finished run's record edited by hand is seen within a pass
  (at once below that many runs).

Each write to the replica is noted (a run new, changed, of another config,
removed): :meth:`Replica.refresh` returns them, the dashboard's change feed
answers from them.

The root's store is read only where it is safe (:func:`open_source`): it
lies in the served folder, where anyone who can write there may have
planted something. It and its journals must be regular files in a real
folder (no link, no FIFO, checked before anything opens it); it opens
read-only with ``query_only`` and ``trusted_schema=OFF`` (a planted schema's
views and triggers call no function with side effects) and answers within
:data:`BUSY_TIMEOUT_S`; it holds this mindexp's schema and was built from
this very folder (not a store copied with another root).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
from typing import Callable

from ..callbacks.schema import temp_name
from .leftovers import remove_dead_temp_files_here
from .store import (FLAT, RunStore, _columns_as_made, _Database, _folder_id, _read_run,
                    _run_signature, _uri_path, catalog_root, database_path, is_catalog_of,
                    plain_catalog_file, read_only_uri)

logger = logging.getLogger(__name__)

CHECKED_PER_REFRESH = 2000   # finished runs whose record is looked at per refresh
COPY_ROWS = 1000             # rows copied from the store per read
BUSY_TIMEOUT_S = 0.5   # a writer's lock held longer than this: followed at the next refresh
PREFIX = "mindexp-dashboard-"
STARTED_INDEX = "private_started"   # the runs table's default order, newest first
FAILED_STATUSES = ("failed", "diverged", "interrupted")   # runs whose record holds an error
FAILED = "(" + ", ".join(f"'{s}'" for s in FAILED_STATUSES) + ")"   # the same, as SQL
COPY_CACHE_KB = 32 * 1024   # the replica's page cache while it copies
SERVED_CACHE_KB = 2000      # then (SQLite's default)
# a row written with other values of these is a change the page shows (config first)
_SHOWN = ("config", "run_sig", "status", "problem")
_INDEXES = (  # the store's that the replica asks, and the table's default order
    "CREATE INDEX runs_parent ON runs (host, root, parent)",
    "CREATE INDEX runs_status ON runs (status)",
    "CREATE INDEX runs_problem ON runs (host, root, rel) WHERE problem IS NOT NULL",
    f"CREATE INDEX {STARTED_INDEX} ON runs (started_at, run_id)")


class Source(RunStore):
    """The root's store opened read-only (see :func:`open_source`): the feed the
    replica follows, and the table's first pages while the replica is made."""

    started_index = "runs_started"
    file_id: str | None = None   # the file's device:inode when it was opened

    def config_mark(self) -> tuple:
        """Changes whenever another connection commits to the file (SQLite's
        ``data_version``): the table's config columns are worked out again."""
        return ("source", self.db.execute("PRAGMA data_version").fetchone()[0])


def live_runs(store: RunStore, folder: str) -> list[str]:
    """The folders of this host's runs at or below ``folder`` that run or cannot
    be read (along an index each: with OR, SQLite read every row)."""
    scope, params = store.scope(folder, other_hosts=False)
    return [store.location(store.host, store.key_root, rel) for (rel,) in store.db.execute(
        f"SELECT rel FROM runs WHERE {scope} AND status = 'running' UNION SELECT rel FROM runs "
        f"WHERE {scope} AND problem IS NOT NULL", params + params).fetchall()]


def open_source(folder: str) -> Source | None:
    """The store of ``folder``'s root, opened read-only, or None when there is
    none or it is refused (see the module's docstring)."""
    root = catalog_root(os.path.realpath(folder))
    path = database_path(root)
    if not plain_catalog_file(path):
        return None
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=BUSY_TIMEOUT_S,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        logger.debug("dashboard: the run store %s was not opened: %s", path, exc)
        return None
    source = Source(_Database(conn, "sqlite", journal="read-only"), root, "", False)
    source.file_id = _folder_id(path)
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
        usable = is_catalog_of(source.db, "main", source.host, _folder_id(root))
    except sqlite3.Error as exc:   # damaged, locked past the timeout
        logger.debug("dashboard: the run store %s was not read: %s", path, exc)
        usable = False
    if not usable:
        source.close()
        return None
    return source


class Replica(RunStore):
    """A root's store replicated into a temporary file: read and written by the
    server alone, removed by :meth:`close`; :func:`replica` makes one."""

    def __init__(self, db: _Database, root: str, path: str):
        super().__init__(db, root, "", True)
        self.path = path                  # the temporary file
        self._token: str | None = None    # the store's feed followed (None: not yet)
        self.seq = 0                      # and its value followed up to
        self.copied = False               # the root's store was copied (not scanned)
        self.started_index = STARTED_INDEX
        self._source: Source | None = None
        self._next_rel = ""               # where the rolling check goes on
        self._noted: list[tuple[str, str]] = []   # (rel, kind) written since the last refresh
        self._quiet = False               # writes are not noted (the first copy, a scan)
        self._config_seq = 0              # bumped when runs came, went or changed config

    def close(self) -> None:
        """Close the replica and remove its file."""
        super().close()
        if self._source is not None:
            self._source.close()
        self.remove_files()

    def remove_files(self) -> None:
        """Remove the replica's file (what has it open keeps reading it)."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.remove(self.path + suffix)
            except FileNotFoundError:
                pass

    def config_mark(self) -> int:
        """The latest change that can change which config fields differ (a run
        came, went or changed its config)."""
        return self._config_seq

    # ---- keeping it current
    def refresh(self) -> list[tuple[str, str]]:
        """Follow the store, then what writers do not say: the folders' times,
        the running runs, :data:`CHECKED_PER_REFRESH` others.
        What changed: ``(rel, kind)``, kind ``new``, ``status`` (run.json
        changed), ``config`` or ``removed``."""
        self.follow()
        self.sync()
        self._check_some(CHECKED_PER_REFRESH)
        noted, self._noted = self._noted, []
        return noted

    def follow(self, on_snapshot: Callable[[Source, list[str]], None] | None = None) -> bool:
        """Copy what the store wrote since the last call, drop what it dropped
        (False without a usable store). The first call copies every run; of
        those, the runs written after its first read are noted as changes.
        ``on_snapshot(store, live run folders)``: called after that first read, with
        the store opened read-only (others may query it meanwhile: the early pages)
        and the runs it says run or cannot be read, before any row is copied."""
        if self._source is not None and \
                self._source.file_id != _folder_id(database_path(self.root)):
            self._source.close()   # the file made anew (a damaged one is): its feed too
            self._source = None
        if self._source is None:
            self._source = open_source(self.root)
            if self._source is None:
                return False
        try:
            self._follow(self._source, on_snapshot)
        except sqlite3.Error as exc:   # locked past the timeout, mid-rebuild: caught up later
            logger.debug("dashboard: the run store of %s was not followed: %s", self.root, exc)
            self._source.close()
            self._source = None
            return False
        return True

    def _follow(self, source, on_snapshot):
        (token, snapshot), first = source.feed(), self._token is None
        if first and on_snapshot is not None:   # the early pages read the store from here
            on_snapshot(source, live_runs(source, self.root))
        since = self.seq if token == self._token else 0   # another token: the store made anew
        seq, changed, dropped = source.changes(self.root, since)
        full = dropped is None or not since   # every run given: what the store lacks goes
        if full:
            dropped = sorted(set(self._rels()) - set(changed))
        if changed or full:
            self._copy(full, changed, snapshot if first else None)
        if dropped:
            self._transaction(lambda: self._read_again(dropped, from_disk=False))
        self._token, self.seq = token, seq

    def _copy(self, full, changed, snapshot):
        """Copy every row (``full``) or those of ``changed``, noting those written
        after the feed's ``snapshot`` (None: not the first copy, all of them)."""
        first = snapshot is not None
        with self._attached():
            last, existed = (0 if full else None), (set(changed) if first else set())
            while last is not None:   # every row, in the store's own order: rowid ranges
                last = self._take("s.rowid > ? AND s.rowid <= ?", self._rowids(last),
                                  snapshot or 0, existed)
            for start in range(0, 0 if full else len(changed), COPY_ROWS):
                part = changed[start:start + COPY_ROWS]
                self._take(f"s.rel IN ({', '.join('?' for _ in part)})", part, 0, set())
            self._copy_tables(first)

    def _rels(self):
        where, params = self._mine()
        return [rel for (rel,) in self.db.execute(f"SELECT rel FROM runs WHERE {where}", params)]

    @contextlib.contextmanager
    def _attached(self):
        """The root's store attached as ``src`` (read-only), once it is this root's,
        of this version: rows go from one file to the other without Python
        (a third of the time, and the interpreter free for the page's data)."""
        path = database_path(self.root)
        if not plain_catalog_file(path):   # swapped for a link or a FIFO since it was opened
            raise sqlite3.DatabaseError(f"{path} is not a plain file")
        self.db.execute("ATTACH DATABASE ? AS src", (read_only_uri(path),))
        try:
            if not is_catalog_of(self.db, "src", self.host, _folder_id(self.root)):
                raise sqlite3.DatabaseError("the store is not this root's")
            yield
        finally:
            self.db.execute("DETACH DATABASE src")

    def _rowids(self, last):
        """``(last, end)``: the next :data:`COPY_ROWS` rowids of the store after ``last``."""
        end = self.db.execute(f"SELECT MAX(rowid) FROM (SELECT rowid FROM src.runs WHERE rowid "
                              f"> ? ORDER BY rowid LIMIT {COPY_ROWS})", (last,)).fetchone()[0]
        return last, last if end is None else end

    def _take(self, condition, values, quiet_to, existed):
        """Copy the store's rows of ``condition`` (and the failed runs' records), one
        transaction, and give the last of ``values`` (None: nothing was left). The
        rows written after the feed's ``quiet_to`` and unlike the replica's are
        noted (``existed``: runs a page may show already)."""
        mine = f"{condition} AND +s.host = ? AND +s.root = ''"
        params = (*values, self.host)
        differ = " OR ".join(f"m.{c} IS NOT s.{c}" for c in _SHOWN)
        for rel, new, same in self.db.execute(
                "SELECT s.rel, m.rel IS NULL, m.config IS s.config FROM src.runs s LEFT JOIN "
                "main.runs m ON m.host = s.host AND m.root = s.root AND m.rel = s.rel WHERE "
                f"{mine} AND s.seq > ? AND (m.rel IS NULL OR {differ})",
                (*params, quiet_to)).fetchall():
            self._note(rel, "new" if new and rel not in existed else
                       "status" if same else "config")
        names = _columns_as_made()["runs"]
        updates = ", ".join(f"{c} = excluded.{c}" for c in names[3:])
        # a statement each, no transaction around them: a transaction begun with the
        # store attached locks it for writers until it ends (BEGIN IMMEDIATE, even
        # before a row is read); a statement holds the store's read lock while it reads
        self.db.execute(f"INSERT INTO main.runs ({', '.join(names)}) SELECT "
                        f"{', '.join('s.' + c for c in names)} FROM src.runs s WHERE {mine} "
                        f"ON CONFLICT (host, root, rel) DO UPDATE SET {updates}", params)
        self.db.execute("INSERT OR REPLACE INTO main.records SELECT c.host, c.root, c.rel, "
                        "c.meta FROM src.runs s JOIN src.records c ON c.host = s.host AND "
                        f"c.root = s.root AND c.rel = s.rel WHERE {mine} AND s.status IN "
                        f"{FAILED}", params)
        return values[-1] if values and values[0] != values[-1] else None

    def _shown(self, rels):
        """``{rel: its values of _SHOWN}`` of the replica's runs among ``rels``."""
        where, params = self._mine()
        marks = ", ".join("?" for _ in rels)
        return {row[0]: row[1:] for row in self.db.execute(
            f"SELECT rel, {', '.join(_SHOWN)} FROM runs WHERE {where} AND rel IN ({marks})",
            params + tuple(rels)).fetchall()}

    def _copy_tables(self, first):
        """The store's config fields; the first time, its folders and their times too
        (:meth:`sync` lists again those whose time changed since: a run copied in
        or removed by hand)."""
        for table in ("fields", "folders", "roots") if first else ("fields",):
            self.db.execute(f"INSERT OR REPLACE INTO main.{table} SELECT * FROM src.{table} "
                            "WHERE host = ? AND root = ''", (self.host,))

    def _transaction(self, work):
        self._begin()
        try:
            work()
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def _check_some(self, count):
        """Compare the next ``count`` runs' records with the disk (a rolling pass)."""
        if count <= 0:
            return
        where, params = self._mine()
        rows = self.db.execute(f"SELECT rel, run_sig FROM runs WHERE {where} AND rel > ? "
                               f"ORDER BY rel LIMIT {int(count)}",
                               params + (self._next_rel,)).fetchall()
        self._next_rel = rows[-1][0] if len(rows) == count else ""
        self._read_stale(rows)

    def _read_stale(self, rows):
        stale = [rel for rel, sig in rows if _run_signature(self._abs(rel)) != sig]
        if stale:
            self._transaction(lambda: self._read_again(stale))

    def _read_again(self, rels, from_disk=True):
        """Each run of ``rels`` read from its folder again, or dropped (gone, or
        not ``from_disk``)."""
        for rel in rels:
            if from_disk and os.path.lexists(self._abs(rel)):
                self._insert_runs([(rel, _read_run(self._abs(rel)))])
            else:
                self._delete_run(rel)

    # ---- what was written
    def _insert_runs(self, runs):
        """:meth:`RunStore._insert_runs`, noted, keeping the record of the failed runs
        only (their error is searched; a page reads the others from their folder)."""
        status = FLAT.index("status")
        runs = [(rel, entry if entry[0][status] in FAILED_STATUSES else
                 entry[:2] + (None,) + entry[3:]) for rel, entry in runs]
        old = self._shown([rel for rel, _ in runs]) if runs and not self._quiet else {}
        for rel, entry in runs:
            self._note(rel, "new" if rel not in old else
                       "status" if old[rel][0] == entry[1][0] else "config")
        super()._insert_runs(runs)

    def _note_dropped(self, select, params):
        """Each run dropped is noted as removed (the replica keeps no feed of its own)."""
        for (rel,) in self.db.execute(select, params).fetchall():
            self._note(rel, "removed")

    def _note(self, rel, kind):
        if self._quiet:
            return
        self._noted.append((rel, kind))
        if kind != "status":
            self._config_seq += 1


def replica(folder: str, directory: str | None = None,
            on_snapshot: Callable[[Source, list[str]], None] | None = None) -> Replica:
    """A replica of the store of ``folder``'s root (built from a scan when the
    root has none, or one refused), current, in a temporary file in
    ``directory`` (default: the system's temporary folder). ``on_snapshot``:
    see :meth:`Replica.follow` (not called when nothing is copied).

    Its ``copied`` says whether the root's store was copied. What it noted
    came after the copy's first read: what the scan then finds beyond the
    copy (a run copied in by hand since the store was written) is one, so
    that a page read from the store meanwhile learns it at its next poll."""
    root = catalog_root(os.path.realpath(folder))
    directory = directory or tempfile.gettempdir()
    # named as every temporary file of mindexp (its writer's pid and host): the
    # replicas of servers killed without closing them go as their dead writers' files
    remove_dead_temp_files_here(directory)
    fd, path = tempfile.mkstemp(prefix=os.path.basename(temp_name(PREFIX, prefix=True)),
                                suffix=".sqlite", dir=directory)
    os.close(fd)
    try:
        made = _open_copy(root, path)
    except BaseException:
        os.remove(path)
        raise
    try:
        made.copied = made.follow(on_snapshot)
        for statement in _INDEXES:
            made.db.execute(statement)
        made._quiet = not made.copied   # a scan of every run is no change
        made.sync()
        made._quiet = False
        # the planner's statistics (a sample): one host and root is no filter, an index
        # on the status or the start time is
        made.db.execute("PRAGMA analysis_limit=1000")
        made.db.execute("ANALYZE")
        made.db.execute(f"PRAGMA cache_size=-{SERVED_CACHE_KB}")   # SQLite's default again
    except BaseException:
        made.close()
        raise
    return made


def _open_copy(root, path):
    """The replica opened for this process alone (no journal on disk: it is derived)."""
    conn = sqlite3.connect("file:" + _uri_path(path), uri=True, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=MEMORY")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA trusted_schema=OFF")   # the store it attaches lies in a served folder
    # the copy builds the indexes as it goes: with SQLite's default 2 MB of page cache
    # it re-read pages
    conn.execute(f"PRAGMA cache_size=-{COPY_CACHE_KB}")
    made = Replica(_Database(conn, "sqlite", journal="private"), root, path)
    try:
        made.ensure_schema()   # an empty file of its own: nothing else to take on
        # the store's indexes are made once the first copy is in (not kept current
        # row by row: 2.4 -> 1.4 s at 100,000 runs), those the replica never asks not
        for index in ("runs_parent", "runs_status", "runs_problem", "runs_started", "runs_seq",
                      "runs_uncelled"):
            conn.execute(f"DROP INDEX {index}")
    except BaseException:
        conn.close()
        raise
    return made
