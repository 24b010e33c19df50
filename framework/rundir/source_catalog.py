"""A root's own run catalog read in place, read-only: the dashboard's runs
table while its private copy (:mod:`.private_catalog`) is being made.

Copying 100,000 runs' rows takes about a second; the first page of the
table need not wait for it: it is a ``COUNT`` and an ``ORDER BY ... LIMIT``
that the root's catalog answers as well. But that file lies in the served
folder, where anyone who can write there may have planted something, so it
is read only when:

- it and its journals are regular files in a real folder: no link (it could
  lead anywhere), no FIFO (opening one waits for a writer), checked before
  anything opens it;
- it opens read-only (``mode=ro``), with ``query_only`` and
  ``trusted_schema=OFF`` (a planted schema's views and triggers call no
  function with side effects), and answers within :data:`BUSY_TIMEOUT_S`
  (a writer holding it: the page waits for the copy instead);
- it holds this mindexp's schema version and was built from this very
  folder (``roots.folder_id``: not a catalog copied with another root).

A damaged file raises ``sqlite3.DatabaseError`` on the query that meets the
damage: its reader then gives up and the page waits for the copy, which
refuses the same file for the same reasons.
"""
from __future__ import annotations

import logging
import os
import sqlite3

from .store import (RunStore, _Database, _folder_id, catalog_root, database_path,
                    is_catalog_of, plain_catalog_file, read_only_uri)

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 0.5   # a writer's lock held longer than this: the page waits for the copy
STARTED_INDEX = "runs_started"   # the root catalog's index on the start time


class SourceCatalog(RunStore):
    """A root's catalog opened read-only for the runs table's pages (see the
    module's docstring); :func:`open_source` opens one."""

    started_index = STARTED_INDEX

    def __init__(self, db: _Database, root: str):
        super().__init__(db, root, "", False)

    def config_mark(self) -> tuple:
        """Changes whenever another connection commits to the file (SQLite's
        ``data_version``): the table's config columns are worked out again."""
        return ("source", self.db.execute("PRAGMA data_version").fetchone()[0])


def open_source(folder: str) -> SourceCatalog | None:
    """The catalog of ``folder``'s root, opened read-only, or None when there is
    none or it is refused (see the module's docstring)."""
    root = catalog_root(os.path.realpath(folder))
    path = database_path(root)
    if not plain_catalog_file(path):
        return None
    try:
        conn = _connect(path)
    except sqlite3.Error as exc:
        logger.debug("dashboard: the run catalog %s was not opened: %s", path, exc)
        return None
    catalog = SourceCatalog(_Database(conn, "sqlite", journal="read-only"), root)
    try:
        usable = _usable(catalog)
    except sqlite3.Error as exc:   # damaged, locked past the timeout
        logger.debug("dashboard: the run catalog %s was not read: %s", path, exc)
        usable = False
    if not usable:
        catalog.close()
        return None
    return catalog


def _connect(path):
    conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=BUSY_TIMEOUT_S,
                           isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _usable(catalog):
    """Whether the catalog is of this version and this root's, built."""
    return is_catalog_of(catalog.db, "main", catalog.host, _folder_id(catalog.root))
