"""The run store: the one object that finds, indexes and queries the runs of an
output root. Its index is one table of runs per root, in SQLite (the file
``.mindexp-catalog/runs.sqlite`` in the root) or in PostgreSQL (``--catalog URL`` or
``MINDEXP_CATALOG``), so that listing, filtering and sorting 100,000 runs is
a query instead of 200,000 file reads.

The run folders stay the truth; the index is derived from them:

- built from a scan when missing (or on ``mindexp runs --rebuild``);
- kept current by the writers: run.json (start, resume, end, tag, note) and
  config.json written (:func:`run_written` -> :meth:`RunStore.put`, called by
  ``record.py``), a run removed (:func:`run_removed` -> :meth:`RunStore.drop`,
  by ``rm`` and ``gc``);
- checked on every open for what writers did not say (a run copied in by
  hand, or written by an older mindexp): each folder that holds runs is
  remembered with its modification time; a folder whose time changed is
  listed again (new runs read, vanished ones dropped), and a run still
  ``running`` is read again when its run.json changed. A run.json edited
  by hand inside a finished run is seen after ``--rebuild``.

The change feed: one counter per root (table ``feed``) is bumped by every
write; each row of ``runs`` keeps the counter's value of its last write
(``seq``) and each dropped run is remembered with the value of its drop
(table ``dropped``), so that a reader holding the store's state at one value
asks :meth:`RunStore.changes` for what changed since, instead of reading
every row again. A rebuild starts the feed anew (``feed.start``): a reader
from before it reads everything again.

Each run also has ``cells``: compare()'s own values of that run when run.json
and config.json alone give them (a finished run whose run.json holds its final
summary), flattened (:func:`.summary.flat_cells`): its values as one JSON
array, and its shape (the parts, keys and types of those values) named by a
hash, each shape written once per root (table ``shapes``), so that a table of
100,000 runs is made a column at a time; none for a running or old run whose
row needs its logs.

Where WAL cannot work (a network filesystem) the file uses a rollback
journal; where the root cannot be written (a read-only copy) a current
index is read as it is and a missing or stale one is built in memory from
a scan: listing never needs to write.

On PostgreSQL every row also names its host (``MINDEXP_HOST``, else the
machine's name) and root: a rebuild touches only this host's rows of this
root, and another host's runs are listed with ``HOST:PATH`` (their files are
there, not here). The URL's password is never written or printed
(:func:`mindexp.secrets.masked`).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import math
import os
import platform
import re
import sqlite3
import stat
import uuid
from typing import Any, Iterator, NamedTuple, Sequence

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError, RunDirError
from ..secrets import masked
from .meta import UnreadableRun, UNREADABLE
from .run import Run
from .summary import cell_value, stored_cells, stored_summary
from . import where as grammar

logger = logging.getLogger(__name__)

VERSION = 3                      # the schema this code writes; an older index is made again
URL_VARIABLE = "MINDEXP_CATALOG"  # a PostgreSQL catalog for every command and run
HOST_VARIABLE = "MINDEXP_HOST"    # this machine's name in a shared catalog
BUSY_TIMEOUT_S = 30.0            # a writer waits this long for another's transaction
# Filesystems where SQLite's WAL (shared memory beside the file) is unsafe.
_NO_WAL_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "afs",
                       "ceph", "glusterfs", "lustre"}

# The run's columns the listing and the queries use, in table order (flat:
# one value each); config (JSON) and the whole run.json (in ``records``) beside.
FLAT = ("run_id", "experiment", "status", "problem", "started_at", "ended_at", "started_ts",
        "ended_ts", "steps", "epochs", "final_loss", "min_loss", "train_time_s", "steps_per_s",
        "tags", "note", "summarized", "compare_final_loss", "compare_steps")
# compare()'s own outcome columns, as it computes them from run.json's final summary
# (``summarized`` = 1): read from the catalog without the run's files.
COMPARE_COLUMNS = {"final_loss": "compare_final_loss", "steps": "compare_steps",
                   "min_loss": "min_loss", "train_time_s": "train_time_s",
                   "steps_per_s": "steps_per_s", "experiment": "experiment",
                   "run_id": "run_id", "status": "status", "tags": "tags", "note": "note"}
TEXT_COLUMNS = ("run_id", "experiment", "status", "problem", "started_at", "ended_at", "tags",
                "note")
_PG_TYPES = {c: "TEXT" for c in TEXT_COLUMNS} | {"steps": "BIGINT", "epochs": "BIGINT",
                                                 "summarized": "INTEGER",
                                                 "compare_steps": "BIGINT"}
REBUILD_BATCH = 1000   # runs read from their folders per insert on a rebuild
# A run's stored values beside FLAT, in table order (as :func:`_read_run` gives them).
STORED = ("config", "config_nan", "run_sig")


# The tables and indexes that read the same in both dialects.
_SHARED_DDL = (
    "CREATE INDEX runs_parent ON runs (host, root, parent)",
    "CREATE INDEX runs_started ON runs (started_at)",
    "CREATE INDEX runs_status ON runs (status)",
    "CREATE INDEX runs_seq ON runs (host, root, seq)",   # the change feed
    # the few runs that could not be read, found without a scan (warned about on listing)
    "CREATE INDEX runs_problem ON runs (host, root, rel) WHERE problem IS NOT NULL",
    "CREATE TABLE records (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL, "
    "meta TEXT, PRIMARY KEY (host, root, rel))",
    # the shapes of the cells, each once (kept on removals: a few per root)
    "CREATE TABLE shapes (host TEXT NOT NULL, root TEXT NOT NULL, id TEXT NOT NULL, "
    "shape TEXT NOT NULL, PRIMARY KEY (host, root, id))",
    # the runs whose row compare() reads from their files (running, old, unreadable)
    "CREATE INDEX runs_uncelled ON runs (host, root, rel) WHERE COALESCE(summarized, 0) = 0",
    "CREATE TABLE folders (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL, "
    "mtime_ns BIGINT, PRIMARY KEY (host, root, rel))",
    # every (config field, kind of value) a run of the root ever had: which fields
    # --where may ask SQL about without reading every config (kept on removals:
    # a stale kind only sends a query to pandas)
    "CREATE TABLE fields (host TEXT NOT NULL, root TEXT NOT NULL, key TEXT NOT NULL, "
    "kind TEXT NOT NULL, PRIMARY KEY (host, root, key, kind))",
    # which folder the rows were scanned from (device:inode): a copied root rebuilds
    "CREATE TABLE roots (host TEXT NOT NULL, root TEXT NOT NULL, folder_id TEXT, "
    "PRIMARY KEY (host, root))",
    # the change feed's counter (kept through a rebuild, which sets ``start``) and
    # its token (new with the feed and at each rebuild: a reader's state from another
    # index, one deleted and made again or copied from elsewhere, is never taken on)
    "CREATE TABLE feed (host TEXT NOT NULL, root TEXT NOT NULL, seq BIGINT NOT NULL, "
    "start BIGINT NOT NULL, token TEXT NOT NULL, PRIMARY KEY (host, root))",
    # the runs dropped since the feed's start, with the counter's value of the drop
    "CREATE TABLE dropped (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL, "
    "seq BIGINT NOT NULL, PRIMARY KEY (host, root, rel))",
)


def _ddl(dialect: str) -> list[str]:
    """The tables of this version. SQLite keeps each value's own type (no
    column affinity: a float stays a float); PostgreSQL gets types and JSONB."""
    pg = dialect == "postgresql"

    def typed(column):
        return f"{column} {_PG_TYPES.get(column, 'DOUBLE PRECISION')}" if pg else column
    flat = ", ".join(typed(c) for c in FLAT)
    json_type = "JSONB" if pg else "TEXT"
    # in SQLite, a root's cells in key order on disk: a cold compare() reads them in one sweep
    clustered = "" if pg else " WITHOUT ROWID"
    return [
        f"CREATE TABLE runs (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL, "
        f"parent TEXT NOT NULL, {flat}, config {json_type}, config_nan INTEGER, "
        f"run_sig TEXT, seq BIGINT NOT NULL DEFAULT 0, "
        f"PRIMARY KEY (host, root, rel))",
        # compare()'s values of each run that run.json and config.json give (beside
        # the runs, as the records: the listing's scans of ``runs`` stay narrow)
        "CREATE TABLE cells (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL, "
        f"shape TEXT NOT NULL, vals TEXT NOT NULL, PRIMARY KEY (host, root, rel)){clustered}",
        *_SHARED_DDL,
    ]


_TABLES = ("runs", "records", "cells", "shapes", "folders", "fields", "roots", "feed", "dropped")


@functools.lru_cache(maxsize=1)
def _columns_as_made() -> dict[str, list[str]]:
    """Each SQLite table's columns as :func:`_ddl` makes them (in a database in memory)."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in _ddl("sqlite"):
            conn.execute(statement)
        return {t: [row[1] for row in conn.execute(f"PRAGMA table_info({t})")] for t in _TABLES}
    finally:
        conn.close()


def _tables_as_made(db) -> bool:
    """Whether every table of the SQLite catalog ``db`` has the columns :func:`_ddl`
    gives it (a file of this version but another shape is made again)."""
    return all([row[1] for row in db.execute(f"PRAGMA table_info({table})")] == columns
               for table, columns in _columns_as_made().items())


def this_host() -> str:
    """This machine's name in a catalog: ``MINDEXP_HOST`` when set (tests fake a
    second machine with it), else the network name."""
    return os.environ.get(HOST_VARIABLE) or platform.node() or "localhost"


# -- finding the catalog -------------------------------------------------------------

# How far above a listed folder (or a run's folder) a catalog is looked for:
# ``<root>/<experiment>/<run>`` and a sweep's or study's folder below the root.
_LEVELS_UP = 2


def catalog_root(path: str | os.PathLike, shared: bool = False) -> str:
    """The output root whose catalog covers the folder ``path``: the nearest of
    ``path`` and the two folders above it holding :data:`layout.CATALOG`, else
    ``path`` itself (never a folder above it: a catalog made in a shared
    parent would be found, and scanned, by every folder below it). For a
    shared catalog (PostgreSQL, no file): ``path``, or its parent when runs
    lie right in ``path`` (an experiment's folder), as :func:`_roots_of_run`."""
    start = os.path.abspath(os.fspath(path))
    if shared:
        return os.path.dirname(start) if _holds_runs(start) else start
    for folder in _above(start, _LEVELS_UP):
        if os.path.lexists(os.path.join(folder, layout.CATALOG)):
            return folder
    return start


def _above(folder, levels):
    """``folder`` and up to ``levels`` folders above it."""
    out = [folder]
    for _ in range(levels):
        parent = os.path.dirname(out[-1])
        if parent == out[-1]:
            break
        out.append(parent)
    return out


def _holds_runs(folder):
    try:
        with os.scandir(folder) as entries:
            return any(e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                       and os.path.lexists(os.path.join(e.path, layout.RUN_JSON))
                       for e in entries)
    except OSError:
        return False


def _roots_of_run(run_dir):
    """The roots whose SQLite catalog holds ``run_dir`` (the folders up to three
    levels above it holding one), and the root of its row in a shared catalog
    (``<root>/<experiment>/<run>``)."""
    local = [f for f in _above(os.path.dirname(run_dir), _LEVELS_UP)
             if os.path.lexists(os.path.join(f, layout.CATALOG))]
    return local, os.path.dirname(os.path.dirname(run_dir))


def catalog_url(url: str | None = None) -> str | None:
    """The PostgreSQL catalog asked for: ``url``, else ``MINDEXP_CATALOG``, else None."""
    return url or os.environ.get(URL_VARIABLE) or None


# -- the database --------------------------------------------------------------------

_CURSOR_NAMES = itertools.count()   # a name for each server-side cursor


class _Database:
    """One connection and the few things SQLite and PostgreSQL spell differently."""

    def __init__(self, conn, dialect, journal=None):
        self.conn, self.dialect, self.journal = conn, dialect, journal

    def sql(self, text):
        return text.replace("?", "%s") if self.dialect == "postgresql" else text

    def execute(self, text, params=()):
        cursor = self.conn.cursor()
        cursor.execute(self.sql(text), tuple(params))
        return cursor

    def stream(self, text: str, params: Sequence = ()) -> Any:
        """A cursor over the query's rows for ``fetchmany``: on PostgreSQL a
        server-side cursor, so that the rows are not all held here at once
        (SQLite steps through them anyway)."""
        if self.dialect != "postgresql":
            return self.execute(text, params)
        cursor = self.conn.cursor(name=f"mindexp_{id(self)}_{next(_CURSOR_NAMES)}")
        cursor.execute(self.sql(text), tuple(params))
        return cursor

    def executemany(self, text, rows):
        rows = list(rows)
        if rows:
            self.conn.cursor().executemany(self.sql(text), rows)

    def json_value(self, key_param="?"):
        """SQL for the config field named by the parameter (the field as data, never text)."""
        if self.dialect == "postgresql":
            return f"(config -> {key_param})"
        return f"json_extract(config, {key_param})"

    def json_kind(self, key_param="?"):
        """SQL giving ``number``, ``text``, ``bool``, ``other`` or NULL (absent) of a field."""
        if self.dialect == "postgresql":
            return (f"(CASE jsonb_typeof(config -> {key_param}) WHEN 'number' THEN 'number' "
                    f"WHEN 'string' THEN 'text' WHEN 'boolean' THEN 'bool' WHEN 'array' THEN "
                    f"'other' WHEN 'object' THEN 'other' END)")
        return (f"(CASE json_type(config, {key_param}) WHEN 'integer' THEN 'number' "
                f"WHEN 'real' THEN 'number' WHEN 'text' THEN 'text' WHEN 'true' THEN 'bool' "
                f"WHEN 'false' THEN 'bool' WHEN 'array' THEN 'other' WHEN 'object' THEN 'other' "
                f"END)")

    def typed_field(self, kind):
        """SQL of a config field (one parameter: :meth:`key`) whose values are all of
        ``kind`` (``number`` or ``text``) where present, as :meth:`RunStore.field_kinds`
        says; NULL where absent."""
        if self.dialect == "postgresql":
            return "((config ->> ?)::double precision)" if kind == "number" else "(config ->> ?)"
        return "json_extract(config, ?)"

    def key(self, field):
        """The parameter that names config field ``field``."""
        return field if self.dialect == "postgresql" else '$."' + field.replace('"', '""') + '"'

    def contains_tag(self):
        """SQL true when the run has the tag given as the parameter."""
        fn = "strpos" if self.dialect == "postgresql" else "instr"
        return f"{fn}(',' || tags || ',', ',' || ? || ',') > 0"

    def text_order(self, column):
        return f'{column} COLLATE "C"' if self.dialect == "postgresql" else column

    def commit(self):
        self.conn.commit()

    def close(self):
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
            pass


def _connect_sqlite(path, read_only=False):
    """A connection with WAL where it is safe (else a rollback journal) and a busy timeout."""
    if read_only:
        uri = "file:" + _uri_path(path) + "?mode=ro"
        if not os.access(os.path.dirname(path), os.W_OK):
            uri += "&immutable=1"   # no -shm can be made beside it: read as a still file
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        return _Database(conn, "sqlite", journal="read-only")
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                           check_same_thread=False)
    journal = "delete"
    if _filesystem_of(path) not in _NO_WAL_FILESYSTEMS:
        try:
            journal = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError:
            journal = "delete"
    if journal != "wal":
        conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=NORMAL")
    return _Database(conn, "sqlite", journal=journal)


def _uri_path(path):
    from urllib.parse import quote
    return quote(os.path.abspath(path))


def read_only_uri(path: str) -> str:
    """The SQLite URI that opens the catalog file ``path`` read-only: a still
    file (``immutable``) where its folder takes no ``-shm`` beside it."""
    uri = "file:" + _uri_path(path) + "?mode=ro"
    return uri if os.access(os.path.dirname(path), os.W_OK) else uri + "&immutable=1"


def is_catalog_of(db: _Database, schema: str, host: str, folder_id: str | None) -> bool:
    """Whether the catalog attached as ``schema`` ("main", "src") to ``db`` is of
    this version and was built for the folder ``folder_id`` on ``host`` (a
    catalog copied in with another root is not). Raises sqlite3.Error when it
    cannot be read."""
    version = db.execute(f"SELECT version FROM {schema}.catalog_version").fetchone()
    row = db.execute(f"SELECT folder_id FROM {schema}.roots WHERE host = ? AND root = ''",
                     (host,)).fetchone()
    return bool(version and version[0] == VERSION and row and row[0] and folder_id and
                row[0] == folder_id)


def _filesystem_of(path):
    """The filesystem type of the mount holding ``path`` (from /proc/self/mountinfo), or ''."""
    path = os.path.realpath(os.path.dirname(path))
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                point = left.split()[4].replace("\\040", " ")
                if (path == point or path.startswith(point.rstrip("/") + "/")) \
                        and len(point) >= len(best):
                    best, kind = point, right.split()[0]
    except (OSError, IndexError):
        return ""
    return kind


def _connect_postgres(url):
    try:
        import psycopg
    except ImportError:
        raise ConfigError("a PostgreSQL catalog needs psycopg (pip install 'mindexp[catalog]'). "
                          f"Received: --catalog {masked(url)}", field="catalog") from None
    conninfo = _libpq_url(url)
    try:
        conn = psycopg.connect(conninfo, connect_timeout=10)
    except psycopg.Error as exc:
        detail = masked(" ".join(str(exc).split()))
        raise ConfigError(f"cannot open the catalog {masked(url)}: {detail}",
                          field="catalog") from None
    return _Database(conn, "postgresql")


def _libpq_url(url):
    """``postgresql+psycopg://...`` (SQLAlchemy's spelling, as for --storage) -> libpq's."""
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or base not in ("postgresql", "postgres"):
        raise ConfigError("--catalog takes a PostgreSQL URL (postgresql://USER@HOST:PORT/DB, "
                          "also postgresql+psycopg://...); the default catalog is SQLite in "
                          f"the output root. Received: --catalog {masked(url)}", field="catalog")
    return "postgresql://" + rest


# -- the store ------------------------------------------------------------------------

class Changes(NamedTuple):
    """:meth:`RunStore.changes`: the feed's value now, the runs written and the
    runs dropped since the value asked with (None: start over)."""
    seq: int
    changed: list[str]
    dropped: list[str] | None


class Query(NamedTuple):
    """Which runs :meth:`RunStore.query` gives, and in which order. ``where``: the
    ``--where`` grammar (text or its parsed :class:`~.where.Condition`); ``sort``:
    one of its columns (``-`` first: descending), missing values last, then
    newest first; ``live``: running runs pass ``where`` (the caller matches them
    on their live loss) and a sort by what their loss log changes is refused."""
    where: str | grammar.Condition | None = None
    status: Sequence[str] = ()
    tags: Sequence[str] = ()
    experiments: Sequence[str] = ()
    since: float | None = None      # started at or after (a timestamp)
    older: float | None = None      # ended (or started) at or before
    sort: str | None = None
    live: bool = False
    skipped: bool = True            # whether runs marked skipped are given
    other_hosts: bool = True        # on a shared store: other hosts' runs of the folder too


class RunStore:
    """The runs under one output root (``root``), indexed, open.

    :func:`open_store` makes one, up to date. Writers: ``put(run_dir)`` and
    ``drop(run_dir)`` (through :func:`run_written` / :func:`run_removed`),
    ``sync()`` (what no writer said), ``rebuild()``. Readers: ``runs(folder)``
    (:class:`Run` objects with their records), ``find(run_id)``,
    ``changes(folder, since)`` (the feed), ``query()`` (THE listing of runs:
    filters, ``--where``, sort and page, for ``runs``, ``--count`` and the
    dashboard), ``select()``/``scope()`` (plain lookups), ``compare_columns()``.
    """

    def __init__(self, db: _Database, root: str, key_root: str, writable: bool,
                 shared: bool = False):
        self.db, self.root, self.key_root = db, root, key_root
        self.writable, self.shared, self.host = writable, shared, this_host()

    # ---- life
    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def journal(self) -> str | None:
        """``wal``, ``delete``, ``read-only``, ``memory`` (SQLite) or None (PostgreSQL)."""
        return self.db.journal

    def _mine(self):
        return "host = ? AND root = ?", (self.host, self.key_root)

    # ---- schema
    def ensure_schema(self) -> None:
        """Create the tables, or migrate them to :data:`VERSION`, in one transaction."""
        db = self.db
        self._begin()
        try:
            version = self._version()
            if version is None:
                db.execute("CREATE TABLE catalog_version (version INTEGER NOT NULL)")
                for statement in _ddl(db.dialect):
                    db.execute(statement)
                db.execute("INSERT INTO catalog_version (version) VALUES (?)", (VERSION,))
            elif version > VERSION:
                raise RunDirError(f"the run catalog in {self.root} has schema version "
                                  f"{version}, newer than this mindexp's {VERSION}; upgrade "
                                  "mindexp, or remove the catalog file to rebuild it")
            elif version < VERSION or db.dialect == "sqlite" and not _tables_as_made(db):
                self._make_again()
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def _make_again(self) -> None:
        """Drop the index's tables and make them empty (it is derived: the next
        listing scans the runs into it; on a shared index each host's next
        listing scans its own), inside the caller's transaction. An index of
        an older version, or of another shape, is made again so."""
        logger.warning("the run catalog in %s is of an older version or another shape; "
                       "building it again from the runs", self.root)
        for table in (*_TABLES, "catalog_version"):
            self.db.execute(f"DROP TABLE IF EXISTS {table}")
        self.db.execute("CREATE TABLE catalog_version (version INTEGER NOT NULL)")
        for statement in _ddl(self.db.dialect):
            self.db.execute(statement)
        self.db.execute("INSERT INTO catalog_version (version) VALUES (?)", (VERSION,))

    def _version(self):
        db = self.db
        if db.dialect == "postgresql":
            exists = db.execute("SELECT to_regclass('catalog_version')").fetchone()[0]
        else:
            exists = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                "name = 'catalog_version'").fetchone()
        if not exists:
            return None
        row = db.execute("SELECT version FROM catalog_version").fetchone()
        return row[0] if row else None

    def _begin(self):
        if self.db.dialect == "sqlite":
            self.db.execute("BEGIN IMMEDIATE")   # one writer at a time, waited for

    def _commit(self):
        if self.db.dialect == "sqlite":
            self.db.execute("COMMIT")
        else:
            self.db.commit()

    def _rollback(self):
        try:
            if self.db.dialect == "sqlite":
                self.db.execute("ROLLBACK")
            else:
                self.db.conn.rollback()
        except Exception:  # noqa: BLE001 - nothing was begun
            pass

    # ---- keeping it current
    def is_built(self) -> bool:
        """Whether this root's folder was scanned into the catalog (not another
        folder's: a catalog copied with its runs, ``cp -a``, is built again)."""
        where, params = self._mine()
        row = self.db.execute(f"SELECT folder_id FROM roots WHERE {where}", params).fetchone()
        return row is not None and row[0] == _folder_id(self.root)

    def rebuild(self) -> int:
        """Forget this host's rows of this root and scan the root again, a
        thousand runs at a time (100,000 runs' records are never held at
        once); the number of runs."""
        batch: list[tuple[str, Any]] = []
        folders: list[tuple[str, Any]] = []
        count = 0
        self._begin()
        try:
            params = self._forget_rows()
            self._next_seq(start=True)   # what a reader held before is gone: it starts over
            for kind, rel, value in walk(self.root):
                (folders if kind == "folder" else batch).append((rel, value))
                if len(batch) == REBUILD_BATCH:
                    count += len(batch)
                    self._insert_runs(batch)
                    batch.clear()
            count += len(batch)
            self._insert_runs(batch)
            self._store_folders(folders)
            self.db.execute("INSERT INTO roots (host, root, folder_id) VALUES (?, ?, ?)",
                            params + (_folder_id(self.root),))
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return count

    def _forget_rows(self) -> tuple:
        """Delete this host's rows of this root from every table but the feed
        (inside the caller's transaction); the parameters naming them."""
        where, params = self._mine()
        for table in _TABLES:
            if table != "feed":
                self.db.execute(f"DELETE FROM {table} WHERE {where}", params)
        return params

    def sync(self) -> None:
        """Bring the catalog up to date with the disk: built when it never was,
        folders whose modification time changed listed again, running runs
        whose run.json changed read again."""
        if not self.is_built():
            self.rebuild()
            return
        where, params = self._mine()
        known = dict(self.db.execute(f"SELECT rel, mtime_ns FROM folders WHERE {where}",
                                     params).fetchall())
        changed = [rel for rel, mtime in known.items() if _mtime_ns(self._abs(rel)) != mtime]
        running = self.db.execute(f"SELECT rel, run_sig FROM runs WHERE {where} AND "
                                  "status = 'running'", params).fetchall()
        stale = [rel for rel, sig in running if _run_signature(self._abs(rel)) != sig]
        if not changed and not stale:
            return
        self._begin()
        try:
            for rel in sorted(changed):
                self._rescan_folder(rel, known)
            self._insert_runs([(rel, _read_run(self._abs(rel))) for rel in stale
                               if os.path.lexists(self._abs(rel))])
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def _rescan_folder(self, rel, known):
        """List one folder again: its new runs read, its vanished ones (and
        vanished subfolders with their runs) dropped, new subfolders scanned."""
        where, params = self._mine()
        folder = self._abs(rel)
        mtime = _mtime_ns(folder)
        if mtime is None:   # the folder went: everything below it goes too
            self._drop_below(rel)
            return
        old_runs = {r for (r,) in self.db.execute(
            f"SELECT rel FROM runs WHERE {where} AND parent = ?", params + (rel,)).fetchall()}
        # a run known here is not looked into again (100,000 stats in a big folder)
        children = _children(folder, {r.rsplit("/", 1)[-1] for r in old_runs})
        present = {_join(rel, name) for name, _ in children}
        for gone in old_runs - present:
            self._delete_run(gone)
        for sub in [r for r in known if r and os.path.dirname(r) == rel and r not in present]:
            self._drop_below(sub)
        new_runs, new_folders = [], []
        for name, is_run in children:
            child = _join(rel, name)
            if is_run and child not in old_runs:
                new_runs.append((child, _read_run(self._abs(child))))
            elif not is_run and child not in known:
                runs, folders = _scan(self._abs(child), child)
                new_runs += runs
                new_folders += folders
        self._insert_runs(new_runs)
        self._store_folders(new_folders + [(rel, mtime)])

    def _drop_below(self, rel):
        where, params = self._mine()
        below = "(rel = ? OR substr(rel, 1, ?) = ?)"
        self._note_dropped(f"SELECT rel FROM runs WHERE {where} AND {below}",
                           params + (rel, len(rel) + 1, rel + "/"))
        for table in ("runs", "records", "cells", "folders"):
            self.db.execute(f"DELETE FROM {table} WHERE {where} AND (rel = ? OR "
                            f"substr(rel, 1, ?) = ?)", params + (rel, len(rel) + 1, rel + "/"))

    def _delete_run(self, rel):
        where, params = self._mine()
        self._note_dropped(f"SELECT rel FROM runs WHERE {where} AND rel = ?", params + (rel,))
        for table in ("runs", "records", "cells"):
            self.db.execute(f"DELETE FROM {table} WHERE {where} AND rel = ?", params + (rel,))

    def _note_dropped(self, select, params):
        """Remember the runs of ``select`` (SQL giving ``rel``) as dropped now, in the feed."""
        rels = [rel for (rel,) in self.db.execute(select, params).fetchall()]
        if not rels:
            return
        seq = self._next_seq()
        self.db.executemany(
            "INSERT INTO dropped (host, root, rel, seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (host, root, rel) DO UPDATE SET seq = excluded.seq",
            [(self.host, self.key_root, rel, seq) for rel in rels])

    def _next_seq(self, start: bool = False) -> int:
        """Bump this root's counter (inside the caller's transaction) and give its
        new value; ``start``: the feed starts anew there (a rebuild)."""
        where, params = self._mine()
        self.db.execute("INSERT INTO feed (host, root, seq, start, token) VALUES (?, ?, 0, 0, ?) "
                        "ON CONFLICT (host, root) DO NOTHING", params + (uuid.uuid4().hex,))
        starting = ", start = seq + 1, token = ?" if start else ""
        self.db.execute(f"UPDATE feed SET seq = seq + 1{starting} WHERE {where}",
                        ((uuid.uuid4().hex,) if start else ()) + params)
        return self.db.execute(f"SELECT seq FROM feed WHERE {where}", params).fetchone()[0]

    def _store_folders(self, folders):
        self.db.executemany(
            "INSERT INTO folders (host, root, rel, mtime_ns) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (host, root, rel) DO UPDATE SET mtime_ns = excluded.mtime_ns",
            [(self.host, self.key_root, rel, mtime) for rel, mtime in folders])

    def _insert_runs(self, runs):
        """Upsert ``[(rel, entry of _read_run)]``, all with one new value of the feed's
        counter (a run dropped before and back now is no longer dropped)."""
        if not runs:
            return
        columns = ("host", "root", "rel", "parent") + FLAT + STORED + ("seq",)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns[3:])
        marks = ", ".join("?" for _ in columns)
        rows, records, kinds, seq = [], [], set(), self._next_seq()
        cells, uncelled, shapes = [], [], {}
        for rel, entry in runs:
            flat, stored, meta, fields, cell = entry
            key = (self.host, self.key_root, rel)
            rows.append(key + (os.path.dirname(rel),) + flat + stored + (seq,))
            records.append(key + (meta,))
            kinds.update(fields)
            if cell is None:
                uncelled.append(key)
                continue
            shape_id = shapes.setdefault(cell[0], _shape_id(cell[0]))
            cells.append(key + (shape_id, cell[1]))
        self._forget_dropped([row[2] for row in rows])
        self._store_cells(cells, uncelled, shapes)
        self.db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({marks}) "
                            f"ON CONFLICT (host, root, rel) DO UPDATE SET {updates}", rows)
        self.db.executemany("INSERT INTO records (host, root, rel, meta) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (host, root, rel) DO UPDATE SET meta = excluded.meta",
                            records)
        self.db.executemany("INSERT INTO fields (host, root, key, kind) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (host, root, key, kind) DO NOTHING",
                            [(self.host, self.key_root) + pair for pair in sorted(kinds)])

    def _store_cells(self, cells, uncelled, shapes):
        self.db.executemany("INSERT INTO shapes (host, root, id, shape) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (host, root, id) DO NOTHING",
                            [(self.host, self.key_root, shape_id, shape)
                             for shape, shape_id in shapes.items()])
        self.db.executemany("INSERT INTO cells (host, root, rel, shape, vals) "
                            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (host, root, rel) DO UPDATE "
                            "SET shape = excluded.shape, vals = excluded.vals", cells)
        self.db.executemany("DELETE FROM cells WHERE host = ? AND root = ? AND rel = ?",
                            uncelled)

    def _forget_dropped(self, rels):
        where, params = self._mine()
        if self.db.execute(f"SELECT 1 FROM dropped WHERE {where} LIMIT 1", params).fetchone():
            self.db.executemany(f"DELETE FROM dropped WHERE {where} AND rel = ?",
                                [params + (rel,) for rel in rels])

    def put(self, run_dir: str) -> None:
        """Read one run from its folder into the store (a writer changed it)."""
        rel = self.rel_of(run_dir)
        self._begin()
        try:
            self._insert_runs([(rel, _read_run(run_dir))])
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def drop(self, run_dir: str) -> None:
        """Forget one run (removed by ``rm`` or ``gc``); the feed says it went."""
        self._begin()
        try:
            self._delete_run(self.rel_of(run_dir))
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def rel_of(self, run_dir: str) -> str:
        return os.path.relpath(os.path.abspath(run_dir), self.root).replace(os.sep, "/")

    def _abs(self, rel):
        return f"{self.root.rstrip('/')}/{rel}" if rel else self.root

    # ---- reading
    def scope(self, folder: str, other_hosts: bool = True, alias: str = "") -> tuple[str, tuple]:
        """SQL (and parameters) selecting the runs at or below ``folder``: this
        host's below this root; on a shared catalog also other hosts' runs whose
        path below their root is the same (``outputs/linear`` lists every
        host's ``linear``)."""
        prefix = self.rel_of(folder)
        prefix = "" if prefix == "." else prefix
        a = alias
        below = f"({a}rel = ? OR substr({a}rel, 1, ?) = ?)" if prefix else "1 = 1"
        below_params = (prefix, len(prefix) + 1, prefix + "/") if prefix else ()
        mine = f"({a}host = ? AND {a}root = ? AND {below})"
        params = (self.host, self.key_root) + below_params
        if self.shared and other_hosts:
            return f"({mine} OR ({a}host <> ? AND {below}))", params + (self.host,) + below_params
        return mine, params

    def select(self, columns: Sequence[str], where: str = "1 = 1", params: Sequence = (),
               order: str | None = None, limit: int | None = None) -> list[tuple]:
        """``SELECT columns FROM runs WHERE where ORDER BY order LIMIT limit``
        (``where`` and ``order`` are SQL made by mindexp; values are parameters)."""
        text = f"SELECT {', '.join(columns)} FROM runs WHERE {where}"
        if order:
            text += f" ORDER BY {order}"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return self.db.execute(text, params).fetchall()

    def query(self, folder: str, query: Query = Query(), columns: Sequence[str] = ("rel",),
              values: Sequence = (), *, limit: int | None = None, offset: int = 0,
              group: str | None = None, stream: bool = False) -> Any:
        """A cursor over ``columns`` (SQL made by mindexp; ``values``: their
        parameters) of the runs at or below ``folder`` that ``query`` keeps, in
        its order, at most ``limit`` from ``offset``; ``group``: grouped by that
        (aggregates then, unordered, as a COUNT alone is). ``stream``: a cursor
        for ``fetchmany`` (server-side on PostgreSQL).
        :class:`~.where.Unsupported` when ``where`` or ``sort`` names what the
        store cannot answer as the runs table would (a column only the logs give)."""
        condition, params = self.condition(folder, query)
        text = f"SELECT {', '.join(columns)} FROM runs WHERE {condition}"
        if group:
            text += f" GROUP BY {group}"
        elif not any(c.startswith("COUNT(") for c in columns):
            order, order_values = self._order(folder, query)
            text += f" ORDER BY {order}"
            params += order_values
        if limit is not None:
            text += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        run = self.db.stream if stream else self.db.execute
        return run(text, list(values) + params)

    def condition(self, folder: str, query: Query = Query()) -> tuple[str, list]:
        """The SQL (and parameters) of :meth:`query`'s WHERE: the runs of ``folder``
        that ``query``'s filters and ``where`` keep."""
        scope, scope_params = self.scope(folder, other_hosts=query.other_hosts)
        parts, params = [scope], list(scope_params)
        if not query.skipped:
            parts.append("(status IS NULL OR status <> 'skipped')")
        for column, chosen in (("experiment", query.experiments), ("status", query.status)):
            if chosen:
                parts.append(f"{column} IN ({', '.join('?' for _ in chosen)})")
                params += chosen
        parts += [self.db.contains_tag()] * len(query.tags)
        params += query.tags
        for test, value in (("started_ts >= ?", query.since),
                            ("COALESCE(ended_ts, started_ts) <= ?", query.older)):
            if value is not None:
                parts.append(test)
                params.append(value)
        if query.where:
            tree = grammar.parse(query.where) if isinstance(query.where, str) else query.where
            sql, where_params = grammar.catalog_sql(self, scope, scope_params, tree)
            parts.append(f"({sql} OR status = 'running')" if query.live else f"({sql})")
            params += where_params
        return " AND ".join(parts), params

    def _order(self, folder, query):
        """ORDER BY of :meth:`query`: newest first (then by folder; unreadable runs
        last), or by ``query.sort`` with missing values last and that order among equals."""
        db = self.db
        base = (f"started_at IS NULL, {db.text_order('started_at')} DESC, problem IS NOT NULL, "
                f"{db.text_order('rel')}")
        if not query.sort:
            return base, []
        name = query.sort.lstrip("-")
        scope, params = self.scope(folder, other_hosts=query.other_hosts)
        place, kind = grammar.catalog_kind(self, scope, params, name)
        if query.live and name in ("steps", "final_loss", "status") and self.select(
                ["1"], "status = 'running'", (), limit=1):
            raise grammar.Unsupported("sorted by a value a running run's loss log may change")
        column, values = (name, []) if place == "flat" else (db.typed_field(kind), [db.key(name)])
        if kind == "text" and place == "flat":
            column = db.text_order(column)
        direction = " DESC" if query.sort.startswith("-") else ""
        return f"{column.split(' COLLATE')[0]} IS NULL, {column}{direction}, {base}", values * 2

    def location(self, host: str, root: str, rel: str) -> str:
        """Where a row's run lives: its folder here, ``HOST:PATH`` on another host."""
        if host == self.host and root == self.key_root:
            return self._abs(rel)
        return f"{host}:{root}/{rel}"

    def runs(self, folder: str) -> list[Run]:
        """The runs at or below ``folder`` on this host, sorted by folder, as
        :class:`Run` objects holding run.json and config.json from the catalog
        (a run that could not be read is left to be read, and to fail, again)."""
        where, params = self.scope(folder, other_hosts=False, alias="r.")
        rows = self.db.execute(
            "SELECT r.rel, r.problem, r.config, c.meta FROM runs r LEFT JOIN records c ON "
            f"c.host = r.host AND c.root = r.root AND c.rel = r.rel WHERE {where}",
            params).fetchall()
        return [self._run_of(*row) for row in sorted(rows, key=lambda r: self._abs(r[0]))]

    def _run_of(self, rel, problem, config, meta):
        """A row's :class:`Run` (one that could not be read is left to be read again)."""
        run_dir = self._abs(rel)
        if problem is not None or meta is None:
            return Run.found(run_dir)
        return Run.found(run_dir, _loads(meta), _loads(config))

    def compare_columns(self, folder: str, names: Sequence[str]) -> dict[str, list] | None:
        """``{name: [value per run]}`` of compare()'s columns ``names`` for this
        host's runs at or below ``folder`` (in folder order), read as columns;
        None when compare() must read the runs instead: a run without its final
        summary in run.json (running, older) or unreadable, a name that is
        neither a config field nor one of :data:`COMPARE_COLUMNS` (nor
        ``run_dir``), or a config field named like one of them."""
        db = self.db
        scope, params = self.scope(folder, other_hosts=False)
        if self.has_nan_config() or \
                self.select(["1"], f"{scope} AND (problem IS NOT NULL OR summarized = 0)",
                            params, limit=1) or \
                not self.select(["1"], scope, params, limit=1):
            return None
        expressions, values, kinds = ["rel"], [], {}
        for name in names:
            kind = self._config_kinds(scope, params, name)
            if name == "run_dir" or (name in COMPARE_COLUMNS and not kind):
                expressions.append("rel" if name == "run_dir" else COMPARE_COLUMNS[name])
            elif kind and name not in COMPARE_COLUMNS and not name.startswith(
                    ("eval_", "best_eval_", "config.")):
                expressions += [db.json_value(), db.json_kind()]
                values += [db.key(name), db.key(name)]
                kinds[name] = kind
            else:
                return None
        rows = self.db.execute(f"SELECT {', '.join(expressions)} FROM runs WHERE {scope} "
                               f"ORDER BY {db.text_order('rel')}", values + list(params)).fetchall()
        out, i = {}, 1
        for name in names:
            if name in kinds:
                out[name] = [_json_cell(r[i], r[i + 1]) for r in rows]
                i += 2
            else:
                out[name] = [self._abs(r[i]) for r in rows] if name == "run_dir" else \
                    [r[i] for r in rows]
                i += 1
        return out

    def _config_kinds(self, scope, params, name):
        return self.field_kinds(scope, params, name)

    def has_nan_config(self) -> bool:
        """Whether a run of this root (any root, when shared) ever had a NaN or an
        infinity in its config (which SQLite's JSON functions refuse)."""
        where = "kind = 'nan'" if self.shared else "kind = 'nan' AND host = ? AND root = ?"
        values = () if self.shared else (self.host, self.key_root)
        return self.db.execute(f"SELECT 1 FROM fields WHERE {where} LIMIT 1",
                               values).fetchone() is not None

    def field_kinds(self, scope: str, params: Sequence, name: str) -> list[str]:
        """The kinds of value (``number``, ``text``, ``bool``, ``other``) config
        field ``name`` holds in the runs of ``scope``; [] when none has it."""
        where = "key = ?" if self.shared else "key = ? AND host = ? AND root = ?"
        values = (name,) if self.shared else (name, self.host, self.key_root)
        kinds = sorted(k for (k,) in self.db.execute(
            f"SELECT DISTINCT kind FROM fields WHERE {where}", values).fetchall())
        if kinds and not self.select(["1"], f"{scope} AND {self.db.json_kind()} IS NOT NULL",
                                     tuple(params) + (self.db.key(name),), limit=1):
            return []   # the runs that had it are gone
        return kinds

    def changes(self, folder: str, since: int) -> Changes:
        """What changed among this host's runs at or below ``folder`` after the
        feed's value ``since`` (0: nothing seen yet): ``(seq, changed, dropped)``,
        ``seq`` the value to ask with next time, ``changed`` the folders (``rel``
        below the root) of the runs written since (new, rewritten, read again),
        ``dropped`` those of the runs gone since, or None when the feed started
        anew after ``since`` (a rebuild: the reader starts over from ``changed``,
        which then holds every run). The counter is read first: a write racing
        this call is given now and again next time, never lost."""
        where, params = self._mine()
        row = self.db.execute(f"SELECT seq, start FROM feed WHERE {where}", params).fetchone()
        seq, start = row if row else (0, 0)
        scope, scoped = self.scope(folder, other_hosts=False)
        whole = since < start
        changed = [rel for (rel,) in self.db.execute(
            f"SELECT rel FROM runs WHERE {scope} AND seq > ?",
            scoped + (0 if whole else since,)).fetchall()]
        dropped = None if whole else [rel for (rel,) in self.db.execute(
            f"SELECT rel FROM dropped WHERE {scope} AND seq > ?", scoped + (since,)).fetchall()]
        return Changes(seq, changed, dropped)

    def feed(self) -> tuple[str, int]:
        """``(token, seq)``: the feed's token and value now (``("", 0)``: nothing
        written yet). A reader keeps both: a state taken at another token (a
        rebuild, an index deleted and made again, copied from elsewhere) is read
        anew, not brought up to date with :meth:`changes`."""
        where, params = self._mine()
        row = self.db.execute(f"SELECT token, seq FROM feed WHERE {where}", params).fetchone()
        return (row[0], row[1]) if row else ("", 0)

    def cells(self, folder: str) -> StoredCells:
        """compare()'s cells of this host's runs at or below ``folder``, sorted by
        folder (a running, old or unreadable run has none: its row is read from
        its files)."""
        where, params = self.scope(folder, other_hosts=False)
        # one statement (one state of the store): the cells, then the runs without
        rows = self.db.execute(
            f"SELECT rel, shape, vals FROM cells WHERE {where} UNION ALL SELECT rel, NULL, "
            f"NULL FROM runs WHERE {where} AND COALESCE(summarized, 0) = 0",
            params + params).fetchall()
        rows.sort()
        return StoredCells(rows, self._shapes())

    def cells_of(self, rels: Sequence[str]) -> StoredCells:
        """:meth:`cells` of those of ``rels`` this host's root holds, sorted."""
        rows = []
        for start in range(0, len(rels), 500):   # under every database's parameter limit
            part = tuple(rels[start:start + 500])
            marks = ", ".join("?" for _ in part)
            rows += self.db.execute(
                "SELECT r.rel, c.shape, c.vals FROM runs r LEFT JOIN cells c ON c.host = r.host "
                "AND c.root = r.root AND c.rel = r.rel WHERE r.host = ? AND r.root = ? AND "
                f"r.rel IN ({marks})", (self.host, self.key_root) + part).fetchall()
        rows.sort()
        return StoredCells(rows, self._shapes())

    def _shapes(self) -> dict[str, str]:
        """``{id: shape as JSON}`` of the cells of this host's root."""
        where, params = self._mine()
        return dict(self.db.execute(f"SELECT id, shape FROM shapes WHERE {where}",
                                    params).fetchall())

    def uncelled(self, folder: str) -> list[str]:
        """The runs at or below ``folder`` (rel) without cells: running, old or
        unreadable, their compare() row is read from their files each time."""
        scope, params = self.scope(folder, other_hosts=False)
        return [rel for (rel,) in self.db.execute(
            f"SELECT rel FROM runs WHERE {scope} AND COALESCE(summarized, 0) = 0",
            params).fetchall()]

    def find(self, part: str, folder: str | None = None) -> list[str]:
        """The folders (sorted) of this host's runs at or below ``folder`` (the
        root when None) whose folder name (the run id) holds ``part``: one query
        instead of a walk of the root."""
        scope, params = self.scope(folder or self.root, other_hosts=False)
        holds = "strpos(rel, ?)" if self.db.dialect == "postgresql" else "instr(rel, ?)"
        rows = self.db.execute(f"SELECT rel FROM runs WHERE {scope} AND {holds} > 0",
                               params + (part,)).fetchall()
        return sorted(self._abs(rel) for (rel,) in rows if part in rel.rsplit("/", 1)[-1])

    def host_of(self, run_id: str) -> list[tuple[str, str]]:
        """``(host, path on that host)`` of every run named ``run_id`` in the catalog."""
        rows = self.db.execute("SELECT host, root, rel FROM runs WHERE run_id = ?",
                               (run_id,)).fetchall()
        return [(host, os.path.join(root, *rel.split("/"))) for host, root, rel in rows]


class StoredCells(NamedTuple):
    """compare()'s cells of runs as the store keeps them: ``rows``, ``(rel,
    shape id, values as a JSON array)`` per run (the last two None for a run
    without cells), and ``shapes``, ``{shape id: shape as JSON}``
    (:func:`.summary.flat_cells`)."""
    rows: list[tuple[str, str | None, str | None]]
    shapes: dict[str, str]


def _shape_id(shape: str) -> str:
    """The name of a shape (JSON) in the store: the same for the same shape."""
    return hashlib.sha256(shape.encode()).hexdigest()[:16]


def _json_cell(value, kind):
    """A config value fetched from SQL as compare() shows it (:func:`~mindexp.rundir.summary.cell_value`:
    lists and objects become tuples, so a column can be grouped and compared)."""
    if kind == "bool":
        return bool(value)
    if kind == "other" and isinstance(value, str):
        value = json.loads(value)
    return cell_value(value)


def _loads(text):
    if text is None:
        return {}
    return text if isinstance(text, dict) else json.loads(text)


# -- opening ---------------------------------------------------------------------------

def open_store(path: str | os.PathLike, url: str | None = None, sync: bool = True,
                 rebuild: bool = False) -> RunStore:
    """The catalog covering the folder ``path`` (see :func:`catalog_root`), up to date.

    ``url``: a PostgreSQL catalog (else ``MINDEXP_CATALOG``, else the SQLite
    file in the root). A root that cannot be written: its catalog is read as
    it is when current, else built in memory from a scan (read-only roots
    still list). ``rebuild``: scan this host's runs of the root again.
    """
    url = catalog_url(url)
    root = catalog_root(path, shared=bool(url))
    if url:
        catalog = RunStore(_connect_postgres(url), root, os.path.realpath(root), True, shared=True)
    else:
        catalog = _open_sqlite(root)
    try:
        if catalog.writable:
            catalog.ensure_schema()
            if rebuild:
                catalog.rebuild()
            elif sync:
                catalog.sync()
        elif sync and not _is_current(catalog):
            catalog.close()
            catalog = _in_memory(root)
    except sqlite3.DatabaseError as exc:
        catalog.close()
        if url:
            raise
        logger.warning("the run catalog in %s could not be used (%s); listing by scanning",
                       root, exc)
        catalog = _in_memory(root)
    except BaseException:
        catalog.close()
        raise
    return catalog


def database_path(root: str) -> str:
    """The SQLite file of ``root``'s catalog (in a hidden folder of its own)."""
    return os.path.join(root, layout.CATALOG, layout.CATALOG_DB)


def plain_catalog_file(path: str) -> bool:
    """Whether the SQLite file ``path`` exists as a regular file, in a real
    folder, and its journals (``-wal``, ``-shm``, ``-journal``) are regular
    files or absent: no link (it could lead anywhere), no FIFO (opening one
    waits for a writer), no device. Checked with ``lstat``, nothing opened."""
    try:
        if not stat.S_ISDIR(os.lstat(os.path.dirname(path)).st_mode) or \
                not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            if not stat.S_ISREG(os.lstat(path + suffix).st_mode):
                return False
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return True


def _open_sqlite(root):
    folder, path = os.path.join(root, layout.CATALOG), database_path(root)
    if os.path.islink(folder) or os.path.lexists(folder) and not os.path.isdir(folder) or \
            os.path.islink(path) or os.path.lexists(path) and not os.path.isfile(path):
        logger.warning("%s is not the run catalog's folder (or holds something else than its "
                       "%s); listing by scanning. Remove it: mindexp makes it again",
                       folder, layout.CATALOG_DB)
        return _in_memory(root)
    exists = os.path.lexists(path)
    writable = os.access(root, os.W_OK) and (not exists or os.access(folder, os.W_OK) and
                                              os.access(path, os.W_OK))
    if not writable:
        if not exists:
            return _in_memory(root)
        return RunStore(_connect_sqlite(path, read_only=True), root, "", False)
    try:
        os.makedirs(folder, exist_ok=True)
        try:
            return RunStore(_connect_sqlite(path), root, "", True)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise
            _remove_damaged(path)    # derived data: made again from the runs
            return RunStore(_connect_sqlite(path), root, "", True)
    except (sqlite3.OperationalError, OSError) as exc:   # a filesystem refusing its locks
        logger.warning("the run catalog %s cannot be opened (%s); listing by scanning", path, exc)
        return _in_memory(root)


def _remove_damaged(path):
    logger.warning("the run catalog %s was damaged; building it again from the runs", path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def _in_memory(root):
    """A catalog in memory, built from a scan of ``root`` (nothing written)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    catalog = RunStore(_Database(conn, "sqlite", journal="memory"), root, "", True)
    catalog.ensure_schema()
    catalog.rebuild()
    catalog.writable = False
    return catalog


def _is_current(catalog):
    """Whether a catalog opened read-only holds the disk as it is (else it is not used)."""
    try:
        if catalog._version() != VERSION or not catalog.is_built():
            return False
        where, params = catalog._mine()
        folders = catalog.db.execute(f"SELECT rel, mtime_ns FROM folders WHERE {where}",
                                     params).fetchall()
        running = catalog.db.execute(f"SELECT rel, run_sig FROM runs WHERE {where} AND "
                                     "status = 'running'", params).fetchall()
    except sqlite3.DatabaseError:
        return False
    return all(_mtime_ns(catalog._abs(rel)) == m for rel, m in folders) and \
        all(_run_signature(catalog._abs(rel)) == s for rel, s in running)


# -- the writers' hooks ------------------------------------------------------------------

def run_written(run_dir: str) -> None:
    """A writer changed run.json or config.json of ``run_dir``: update every
    catalog that holds its root (the SQLite file when it exists; the
    PostgreSQL catalog of ``MINDEXP_CATALOG``). Never fails the writer: a
    catalog that cannot be updated is caught up by the next listing."""
    _each_catalog(os.path.abspath(run_dir), RunStore.put)


def run_removed(run_dir: str) -> None:
    """``run_dir`` is being removed (``rm``, ``gc``): forget it in every catalog."""
    _each_catalog(os.path.abspath(run_dir), RunStore.drop)


def _each_catalog(run_dir, change):
    local, shared_root = _roots_of_run(run_dir)
    targets = [(root, None) for root in local]
    if catalog_url(None):
        targets.append((shared_root, catalog_url(None)))
    for root, url in targets:
        if not url and not plain_catalog_file(database_path(root)):
            continue   # a link or a non-folder is never written through; the listing warns
        try:
            catalog = (RunStore(_connect_postgres(url), root, os.path.realpath(root), True,
                               shared=True) if url else
                       RunStore(_connect_sqlite(database_path(root)), root, "", True))
        except (ConfigError, sqlite3.Error, OSError) as exc:
            logger.debug("run catalog not updated for %s: %s", run_dir, masked(str(exc)))
            continue
        try:
            catalog.ensure_schema()
            if catalog.is_built():   # an unbuilt catalog is scanned whole at its first listing
                change(catalog, run_dir)
        except Exception as exc:  # noqa: BLE001 - the next listing's check catches up
            logger.debug("run catalog not updated for %s: %s", run_dir, masked(str(exc)))
        finally:
            catalog.close()


# -- reading the disk ----------------------------------------------------------------------

def _scan(folder, rel=""):
    """``([(rel, entry)], [(rel, mtime_ns)])``: every run at or below ``folder``
    (a folder with run.json; hidden folders skipped; a run's own subfolders not
    searched) and every folder that was searched, with its time before listing."""
    runs, folders = [], []
    for kind, found, value in walk(folder, rel):
        (runs if kind == "run" else folders).append((found, value))
    return runs, folders


def walk(folder: str, rel: str = "") -> Iterator[tuple[str, str, Any]]:
    """:func:`_scan` one item at a time: ``("run", rel, entry)`` and
    ``("folder", rel, mtime_ns)`` (a reader that stores runs as they come
    never holds every run's record at once)."""
    stack = [(folder, rel)]
    while stack:
        path, rel = stack.pop()
        if os.path.lexists(os.path.join(path, layout.RUN_JSON)):
            yield "run", rel, _read_run(path)
            continue
        mtime = _mtime_ns(path)
        if mtime is None:
            continue
        yield "folder", rel, mtime
        stack.extend((os.path.join(path, name), _join(rel, name))
                     for name in _subfolders(path))


def _subfolders(folder):
    """The names of the visible subfolders of ``folder`` (links not followed)."""
    try:
        with os.scandir(folder) as entries:
            return [e.name for e in entries
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _children(folder, runs=frozenset()):
    """``[(name, is_run)]`` of the visible subfolders of ``folder``; the names in
    ``runs`` (known runs) are taken as runs without a look inside."""
    return [(n, n in runs or os.path.lexists(os.path.join(folder, n, layout.RUN_JSON)))
            for n in _subfolders(folder)]


def _join(rel, name):
    return f"{rel}/{name}" if rel else name


def _folder_id(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def _mtime_ns(path):
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return None


def _run_signature(run_dir):
    """run.json's and config.json's ``size:mtime:inode``, to see a rewrite."""
    parts = []
    for name in (layout.RUN_JSON, layout.CONFIG_JSON):
        try:
            st = os.lstat(os.path.join(run_dir, name))
            parts.append(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{stat.S_IFMT(st.st_mode)}")
        except OSError:
            parts.append("-")
    return "|".join(parts)


def _read_run(run_dir):
    """``(flat values, (config JSON, has NaN, signature), run.json as JSON, [(config
    field, kind)], compare()'s cells as JSON (shape, values) or None)`` of one run
    (see :data:`STORED`); a run that cannot be read is a row with ``problem`` (its
    error) and status ``unreadable`` (run.json does not validate) or ``skipped``
    (another file)."""
    signature = _run_signature(run_dir)   # before the read: a write in between makes it stale
    run = Run.found(run_dir)
    try:
        meta, config = run.meta, run.config
        config_text = sqlite_json(config)
        meta_text = sqlite_json(meta)
    except (RunDirError, OSError, ValueError, TypeError, RecursionError) as exc:
        status = UNREADABLE if isinstance(exc, UnreadableRun) else "skipped"
        flat = {"run_id": os.path.basename(run_dir), "status": status, "tags": "", "note": "",
                "problem": str(exc) or type(exc).__name__}
        return tuple(flat.get(c) for c in FLAT), (None, 0, signature), None, (), None
    fields = [(k, _kind(v)) for k, v in config.items() if v is not None]
    if _has_nan(config):   # one mark per root: --where then asks pandas (NaN is no JSON)
        fields.append(("", "nan"))
    cells = stored_cells(meta, config)
    stored = (config_text, int(_has_nan(config)), signature)
    return _flat(run_dir, meta, cells), stored, meta_text, fields, cells


# A JSON string, or a number JSON has no word for (Python writes them; SQLite's JSON
# functions refuse them, and one such run made every query of its root fail).
_NON_FINITE = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')
_FINITE_SPELLING = {"NaN": "null", "Infinity": "9e999", "-Infinity": "-9e999"}


def sqlite_json(value: Any) -> str:
    """``value`` as JSON that SQLite's JSON functions read: NaN as null, an
    infinity as ``9e999`` (read back as an infinity by SQLite and Python)."""
    text = json.dumps(value, allow_nan=True, default=str)
    return _NON_FINITE.sub(lambda m: _FINITE_SPELLING.get(m.group(), m.group()), text)


def _kind(value):
    """A config value's kind as :meth:`_Database.json_kind` names it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else "other"


def _flat(run_dir, meta, cells):
    stored = stored_summary(meta)
    summary = (stored or {}).get(schema.LOSS.name) or {}
    rows = bool(summary.get("rows"))
    values = {
        "run_id": meta.get("run_id") or os.path.basename(run_dir),
        "experiment": meta.get("experiment"), "status": meta.get("status"), "problem": None,
        "started_at": meta.get("started_at"), "ended_at": meta.get("ended_at"),
        "started_ts": timestamp(meta.get("started_at")),
        "ended_ts": timestamp(meta.get("ended_at")),
        "steps": meta.get("steps"), "epochs": meta.get("epochs"),
        "final_loss": _finite_or_none(meta.get("final_loss")),
        "min_loss": _finite_or_none(summary.get("min")) if stored else None,
        "train_time_s": meta.get("train_time_s"), "steps_per_s": meta.get("steps_per_s"),
        "tags": ",".join(meta.get("tags") or []), "note": meta.get("note") or "",
        # compare()'s outcomes of a run whose run.json holds the final summary
        "summarized": int(cells is not None),
        "compare_final_loss": _finite_or_none(summary.get("final") if rows
                                              else meta.get("final_loss")),
        "compare_steps": meta.get("steps") or (summary.get("last_step") if rows else 0)}
    return tuple(values[c] for c in FLAT)


def _finite_or_none(value):
    """A number as stored (NaN, inf: NULL, which pandas shows and compares as NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _has_nan(value):
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    return False


def timestamp(text: Any) -> float | None:
    """An ISO time as a POSIX timestamp (a time without zone: local), else None."""
    import datetime as _dt
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


def elsewhere(spec: str, url: str | None = None) -> list[tuple[str, str]]:
    """``(host, path)`` of the runs named ``spec`` (a run id, or a path's last
    part) that a shared catalog knows on other hosts; [] without one."""
    url = catalog_url(url)
    if not url:
        return []
    run_id = os.path.basename(os.path.normpath(spec.split(":", 1)[-1]))
    with RunStore(_connect_postgres(url), os.getcwd(), "", False, shared=True) as catalog:
        try:
            found = catalog.host_of(run_id)
        except Exception:  # noqa: BLE001 - no table yet: nothing is known elsewhere
            return []
    return [(host, path) for host, path in found if host != this_host()]
