"""The dashboard's own copy of a root's run catalog, kept current without
scanning the run folders.

``mindexp serve`` answers a poll every second per open page. Scanning the
runs for each poll cost one ``stat`` per file per run (22 s a poll at
100,000 runs); reading the root's catalog in place would make the server
a reader that writers wait for, and the dashboard never writes into the
served folders. So the server copies the catalog's run rows (an ATTACH and
one INSERT ... SELECT a table: the whole file through SQLite's backup API
was 566 MB and 4 s at 100,000 runs, the rows 137 MB and 1 s) into a
temporary file of its own, outside any served folder, and keeps that copy
current:

- :meth:`PrivateCatalog.follow_source`: when the root's catalog changed
  (``PRAGMA data_version``, the file replaced), the rows whose run.json or
  config.json changed are copied over (the writers of runs keep the source
  current: start, end, resume, tag, note, rm, gc);
- :meth:`RunStore.sync`: what no writer said (a run copied in by hand, or
  written by an older mindexp): a ``stat`` per folder holding runs, and the
  running or unreadable runs' records;
- a rolling check of :data:`CHECKED_PER_REFRESH` finished runs a refresh,
  so that a finished run's record edited by hand is seen within a pass
  (at once below that many runs).

Triggers on the copy's runs table record each run that appeared, changed or
left (``changes``), which the dashboard's change feed answers from.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
from typing import Callable

from .store import (FLAT, RunStore, _connect_sqlite, _Database, _folder_id, _read_run,
                    _run_signature, _uri_path, catalog_root, database_path, is_catalog_of,
                    plain_catalog_file, read_only_uri, walk)
from ..errors import RunDirError

logger = logging.getLogger(__name__)

CHECKED_PER_REFRESH = 2000   # finished runs whose record is looked at per refresh
PREFIX = "mindexp-dashboard-"
STARTED_INDEX = "private_started"   # the runs table's default order, newest first
FAILED_STATUSES = ("failed", "diverged", "interrupted")   # runs whose record holds an error
FAILED = "(" + ", ".join(f"'{s}'" for s in FAILED_STATUSES) + ")"   # the same, as SQL
REBUILD_BATCH = 1000   # runs read from their folders per insert, without a catalog to copy
COPY_CACHE_KB = 32 * 1024   # the copy's page cache while it copies
SERVED_CACHE_KB = 2000      # then (SQLite's default)

_CHANGES = [
    # the table's default order (newest first), along an index: no sort of every run
    f"CREATE INDEX IF NOT EXISTS {STARTED_INDEX} ON runs (started_at, run_id)",
    "CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "rel TEXT NOT NULL, kind TEXT NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS runs_new AFTER INSERT ON runs BEGIN "
    "INSERT INTO changes (rel, kind) VALUES (NEW.rel, 'new'); END",
    # a config that changed also changes which fields differ (the table's columns)
    "CREATE TRIGGER IF NOT EXISTS runs_changed AFTER UPDATE ON runs WHEN "
    "OLD.run_sig IS NOT NEW.run_sig OR OLD.status IS NOT NEW.status OR "
    "OLD.problem IS NOT NEW.problem OR OLD.config IS NOT NEW.config BEGIN "
    "INSERT INTO changes (rel, kind) VALUES (NEW.rel, CASE WHEN OLD.config IS NOT NEW.config "
    "THEN 'config' ELSE 'status' END); END",
    "CREATE TRIGGER IF NOT EXISTS runs_gone AFTER DELETE ON runs BEGIN "
    "INSERT INTO changes (rel, kind) VALUES (OLD.rel, 'removed'); END",
]


class PrivateCatalog(RunStore):
    """A root's catalog copied into a temporary file: read and written by the
    server alone, removed by :meth:`close`."""

    def __init__(self, db: _Database, root: str, path: str):
        super().__init__(db, root, "", True)
        self.path = path                       # the temporary file
        self.source = database_path(root)      # the root's catalog (may come later)
        self._watch: sqlite3.Connection | None = None
        self._watched: tuple | None = None     # (file identity, data_version) last followed
        self._next_rel = ""                    # where the rolling check goes on
        self.copied = False                    # the root's catalog was copied (not scanned)
        self.started_index = STARTED_INDEX     # the index of the table's default order

    def close(self) -> None:
        """Close the copy and remove its file."""
        super().close()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self.remove_files()

    def remove_files(self) -> None:
        """Remove the copy's file (what has it open keeps reading it)."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.remove(self.path + suffix)
            except FileNotFoundError:
                pass

    # ---- keeping the copy current
    def refresh(self) -> None:
        """Follow the source, then what writers do not say: the folders' times,
        the running and unreadable runs, :data:`CHECKED_PER_REFRESH` others."""
        self.follow_source()
        self.sync()
        self._check_live()
        self._check_some(CHECKED_PER_REFRESH)

    def follow_source(self) -> bool:
        """Copy the rows the root's catalog changed since the last call (True
        when it had changed). A source that is missing, unbuilt for this root
        or of another schema version is not followed."""
        state = self._source_state()
        if state is None or state == self._watched:
            return False
        self._watched = state
        try:
            self._merge_source()
        except sqlite3.Error as exc:   # a source mid-rebuild, damaged: caught up next time
            logger.debug("dashboard: the run catalog %s was not followed: %s", self.source, exc)
            self._detach()
        return True

    def _source_state(self):
        """``(device, inode, data_version)`` of the source, or None without one (or
        with something else than a plain file there: a FIFO would hold the open)."""
        if not plain_catalog_file(self.source):
            return None
        try:
            st = os.lstat(self.source)
        except OSError:
            return None
        identity = (st.st_dev, st.st_ino)
        if self._watch is None or self._watched is None or self._watched[:2] != identity:
            self._open_watch()
        try:
            version = self._watch.execute("PRAGMA data_version").fetchone()[0]
        except (sqlite3.Error, AttributeError):
            self._watch = None
            return None
        return identity + (version,)

    def _open_watch(self):
        if self._watch is not None:
            self._watch.close()
        try:
            self._watch = _connect_sqlite(self.source, read_only=True).conn
        except sqlite3.Error:
            self._watch = None

    def _merge_source(self):
        db = self.db
        db.execute("ATTACH DATABASE ? AS src", (read_only_uri(self.source),))
        try:
            if not self._source_usable():
                return
            moved = db.execute(
                "SELECT s.rel, s.run_sig FROM src.runs s LEFT JOIN main.runs m ON m.host = "
                "s.host AND m.root = s.root AND m.rel = s.rel WHERE s.host = ? AND s.root = '' "
                "AND (m.rel IS NULL OR m.run_sig IS NOT s.run_sig OR m.problem IS NOT "
                "s.problem)", (self.host,)).fetchall()
            gone = [rel for (rel,) in db.execute(
                "SELECT m.rel FROM main.runs m WHERE m.host = ? AND m.root = '' AND NOT EXISTS "
                "(SELECT 1 FROM src.runs s WHERE s.host = m.host AND s.root = m.root AND "
                "s.rel = m.rel)", (self.host,)).fetchall()]
            if moved or gone:
                self._take(moved, gone)
        finally:
            self._detach()

    def copy_source(self, on_snapshot: Callable[[list[str]], None] | None = None) -> bool:
        """Copy the root's catalog into this empty one, when it is this root's
        and of this version: its runs, folders and fields, and the records of
        the runs that failed (their error is searched; a page reads the other
        records from the runs' folders). 137 of its 566 MB at 100,000 runs.

        ``on_snapshot(live run folders)`` is called once the copy's read of the
        source began (whatever commits there later is not in the copy, and is
        followed as a change), with the runs that the source says run or
        cannot be read: before the rows are copied."""
        if not plain_catalog_file(self.source):
            return False
        db = self.db
        try:
            db.execute("ATTACH DATABASE ? AS src", (read_only_uri(self.source),))
        except sqlite3.Error:
            return False
        try:
            # BEGIN reads the attached source from here on: one snapshot for every table
            self._begin()
            try:
                if not self._source_usable(own=_folder_id(self.root)):
                    self._rollback()
                    return False
                if on_snapshot is not None:
                    on_snapshot(self._live_in_source())
                self._copy_tables()
                self._commit()
            except BaseException:
                self._rollback()
                raise
            return True
        except sqlite3.Error as exc:   # damaged, mid-rebuild: built from a scan instead
            logger.debug("dashboard: the run catalog %s was not copied: %s", self.source, exc)
            return False
        finally:
            self._detach()

    def _live_in_source(self):
        """The folders of the source's runs that run or could not be read."""
        return [self._abs(rel) for (rel,) in self.db.execute(
            "SELECT rel FROM src.runs WHERE host = ? AND root = '' AND status = 'running' "
            "UNION SELECT rel FROM src.runs WHERE host = ? AND root = '' AND problem IS NOT NULL",
            (self.host, self.host)).fetchall()]

    def _copy_tables(self):
        db = self.db
        for table in ("runs", "folders", "fields", "roots"):
            names = self._columns_of(table)
            db.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM "
                       f"src.{table} WHERE host = ? AND root = ''", (self.host,))
        # by the status index (+: not by the host's, which holds every run)
        db.execute("INSERT INTO main.records (host, root, rel, meta) SELECT c.host, "
                   "c.root, c.rel, c.meta FROM src.runs r JOIN src.records c ON c.host "
                   "= r.host AND c.root = r.root AND c.rel = r.rel WHERE +r.host = ? AND "
                   f"+r.root = '' AND r.status IN {FAILED}", (self.host,))

    def _columns_of(self, table):
        return ", ".join(row[1] for row in self.db.execute(f"PRAGMA main.table_info({table})"))

    def _source_usable(self, own=None):
        """Whether the attached source is this root's catalog, of this version, built."""
        if own is None:
            row = self.db.execute("SELECT folder_id FROM main.roots WHERE host = ? AND "
                                  "root = ''", (self.host,)).fetchone()
            own = row and row[0]
        try:
            return is_catalog_of(self.db, "src", self.host, own)
        except sqlite3.Error:
            return False

    def _take(self, moved, gone):
        """Copy the source's rows that match the disk; read the others from their
        folder; drop the rows of runs gone from the disk too (a run the source
        does not know yet, copied in by hand, stays)."""
        from_source, from_disk = [], []
        for rel, signature in moved:
            if _run_signature(self._abs(rel)) == signature:
                from_source.append(rel)
            elif os.path.lexists(self._abs(rel)):
                from_disk.append(rel)
        self._begin()
        try:
            self._copy_rows(from_source)
            self._insert_runs([(rel, _read_run(self._abs(rel))) for rel in from_disk])
            for rel in gone:
                if not os.path.lexists(self._abs(rel)):
                    self._delete_run(rel)
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def _copy_rows(self, rels):
        db = self.db
        names = self._columns_of("runs")
        updates = ", ".join(f"{c} = excluded.{c}" for c in names.split(", ") if c not in
                            ("host", "root", "rel"))
        db.execute("CREATE TEMP TABLE IF NOT EXISTS taken (rel TEXT PRIMARY KEY)")
        db.execute("DELETE FROM temp.taken")
        db.executemany("INSERT OR IGNORE INTO temp.taken (rel) VALUES (?)", [(r,) for r in rels])
        mine = "s.host = ? AND s.root = '' AND s.rel IN (SELECT rel FROM temp.taken)"
        db.execute(f"INSERT INTO main.runs ({names}) SELECT {names} FROM src.runs s WHERE {mine} "
                   f"ON CONFLICT (host, root, rel) DO UPDATE SET {updates}", (self.host,))
        db.execute("INSERT INTO main.records (host, root, rel, meta) SELECT host, root, rel, meta "
                   f"FROM src.records s WHERE {mine} ON CONFLICT (host, root, rel) DO UPDATE "
                   "SET meta = excluded.meta", (self.host,))
        db.execute("INSERT OR IGNORE INTO main.fields SELECT * FROM src.fields s WHERE "
                   "s.host = ? AND s.root = ''", (self.host,))

    def _detach(self):
        try:
            self.db.execute("DETACH DATABASE src")
        except sqlite3.Error:
            pass

    def _check_live(self):
        """Read again the unreadable runs whose record changed (mid-write then)."""
        where, params = self._mine()
        rows = self.db.execute(f"SELECT rel, run_sig FROM runs WHERE {where} AND problem IS NOT "
                               "NULL", params).fetchall()
        self._read_stale(rows)

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
        if not stale:
            return
        self._begin()
        try:
            for rel in stale:
                if os.path.lexists(self._abs(rel)):
                    self._insert_runs([(rel, _read_run(self._abs(rel)))])
                else:
                    self._delete_run(rel)
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def rebuild(self) -> int:
        """:meth:`RunStore.rebuild` (the root has no catalog to copy) a thousand runs
        at a time: 100,000 runs' records are never held at once."""
        where, params = self._mine()
        count, batch, folders = 0, [], []
        self._begin()
        try:
            for table in ("runs", "records", "folders", "roots", "fields"):
                self.db.execute(f"DELETE FROM {table} WHERE {where}", params)
            for kind, rel, value in walk(self.root):
                if kind == "folder":
                    folders.append((rel, value))
                    continue
                batch.append((rel, value))
                if len(batch) == REBUILD_BATCH:
                    count += self._insert_batch(batch)
            count += self._insert_batch(batch)
            self._store_folders(folders)
            self.db.execute("INSERT INTO roots (host, root, folder_id) VALUES (?, ?, ?)",
                            params + (_folder_id(self.root),))
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return count

    def _insert_batch(self, batch):
        """Store ``batch`` (emptied) and how many runs it held."""
        count = len(batch)
        self._insert_runs(batch)
        batch.clear()
        return count

    def _insert_runs(self, runs):
        """:meth:`RunStore._insert_runs` keeping the record of the failed runs only
        (their error is searched; a page reads the others from their folder)."""
        status = FLAT.index("status")
        super()._insert_runs([(rel, entry if entry[0][status] in FAILED_STATUSES
                               else entry[:2] + (None,) + entry[3:]) for rel, entry in runs])

    # ---- what changed
    def last_change(self) -> int:
        """The sequence number of the latest recorded change (0: none)."""
        row = self.db.execute("SELECT MAX(seq) FROM changes").fetchone()
        return row[0] or 0

    def config_mark(self) -> int | None:
        """The latest change that can change which config fields differ (a run
        came, went or changed its config)."""
        return self.db.execute("SELECT MAX(seq) FROM changes WHERE kind <> 'status'").fetchone()[0]

    def changes_after(self, seq: int) -> list[tuple[int, str, str]]:
        """``(seq, rel, kind)`` recorded after ``seq``: kind is ``new``,
        ``status`` (run.json changed), ``config`` or ``removed``."""
        return self.db.execute("SELECT seq, rel, kind FROM changes WHERE seq > ? ORDER BY seq",
                               (seq,)).fetchall()


def private_catalog(folder: str, directory: str | None = None,
                    on_snapshot: Callable[[list[str]], None] | None = None) -> PrivateCatalog:
    """A private, current copy of the catalog of ``folder``'s root (built from
    a scan when the root has none), in a temporary file in ``directory``
    (default: the system's temporary folder). ``on_snapshot``: see
    :meth:`PrivateCatalog.copy_source` (not called when nothing is copied).

    Its ``copied`` says whether the root's catalog was copied. Every change
    its ``changes`` table holds came after the copy's snapshot: what the scan
    then finds beyond the copy (a run copied in by hand since the root's
    catalog was written) is one, so that a page read from the root's catalog
    meanwhile learns it at its next poll."""
    root = catalog_root(os.path.realpath(folder))
    directory = directory or tempfile.gettempdir()
    _remove_orphans(directory)
    fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", suffix=".sqlite",
                                dir=directory)
    os.close(fd)
    try:
        catalog = _open_copy(root, path)
    except BaseException:
        os.remove(path)
        raise
    try:
        catalog._watched = catalog._source_state()   # what changes after this is followed
        catalog.copied = catalog.copy_source(on_snapshot)
        if catalog.copied:   # what the scan adds is a change (not 100,000 after no copy)
            _record_changes(catalog)
        catalog.sync()            # built when nothing was copied (no catalog, another folder's)
        if not catalog.copied:
            _record_changes(catalog)
        # the planner's statistics (a sample): one host and root is no filter, an index
        # on the status or the start time is
        catalog.db.execute("PRAGMA analysis_limit=1000")
        catalog.db.execute("ANALYZE")
        # the copy's page cache, given back for the server's life (SQLite's default size)
        catalog.db.execute(f"PRAGMA cache_size=-{SERVED_CACHE_KB}")
    except BaseException:
        catalog.close()
        raise
    return catalog


def _record_changes(catalog):
    """The default order's index, the changes table and its triggers."""
    for statement in _CHANGES:
        catalog.db.execute(statement)


def _remove_orphans(directory):
    """Remove the private catalogs of servers that ended without closing them
    (killed): their file names hold the process id."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's: alive
        return True
    return True


def _open_copy(root, path, again=True):
    """The copy opened for this process alone (no journal on disk: it is derived)."""
    conn = sqlite3.connect("file:" + _uri_path(path), uri=True, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=MEMORY")
    conn.execute("PRAGMA synchronous=OFF")
    # the copy's INSERT ... SELECT walks the source's indexes and builds its own: with
    # SQLite's default 2 MB of page cache it re-read pages (1.26-1.32 -> 0.96-1.04 CPU-s
    # at 100,000 runs)
    conn.execute(f"PRAGMA cache_size=-{COPY_CACHE_KB}")
    catalog = PrivateCatalog(_Database(conn, "sqlite", journal="private"), root, path)
    try:
        catalog.ensure_schema()
    except (RunDirError, sqlite3.DatabaseError):   # another version, damaged: start empty
        conn.close()
        if not again:
            raise
        open(path, "wb").close()
        return _open_copy(root, path, again=False)
    return catalog
