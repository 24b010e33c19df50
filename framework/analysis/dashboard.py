"""``mindexp serve``: a read-only local dashboard over run directories.

The standard library's ``ThreadingHTTPServer`` is enough: a handful of GET
endpoints, no templates, no build step, no dependency beyond the report's
(Plotly's JavaScript is served from the installed package). The page is the
report's own page; it polls ``/api/data`` every second, and the server
answers "unchanged" cheaply when no file of any run changed (a signature of
sizes and modification times), so new rows show within about a second of
being flushed.

Paths: ``/`` (all runs), ``/run/<key>`` (one run), ``/files/<key>/...``
(a run's files, read-only), ``/api/data[?run=<key>]``,
``/api/changes?cursor=<n>`` (what changed since an earlier answer: see
cursor.py), ``/static/plotly.min.js``.
A key is ``<root index>/<path below that root>``; anything that resolves
outside the served folders (``..``, absolute paths, encoded or not,
symlinks pointing out) is refused with 403.

Safe to open: a run folder may hold files anyone planted (an SVG or HTML
with script), and any web page the browser visits may try to reach the
server (DNS rebinding). So run files are inert (text/plain or a download;
raster images only with their type), every response carries a
Content-Security-Policy (the page's own inline script by its hash, nothing
from elsewhere) and refuses framing, and a request whose Host header does
not name the bound address is refused with 403.
"""
import base64
import contextlib
import hashlib
import html
import ipaddress
import json
import logging
import math
import mimetypes
import os
import re
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..callbacks import schema
from .. import layout
from ..errors import MindexpError, RunDirError
from ..rundir.io import is_run_dir
from ..rundir.run import Run
from ..secrets import masked
from . import interactive, payload
from .cursor import LOGS, ChangeFeed, is_within
from .listing import Listing

logger = logging.getLogger(__name__)
# what a drawn run reads: its records and the logs its figures show
DRAWN = ("meta", "config", "loss", "params", "eval", "grad_norm")
RUN_FILES = (layout.RUN_JSON, layout.CONFIG_JSON) + tuple(
    log.filename for log in (schema.LOSS, schema.PARAMS, schema.GRAD_NORM, schema.EVAL))


# Sent on every response: never sniffed into another type, never framed, no referrer.
COMMON_HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                  ("Referrer-Policy", "no-referrer"))
# Anything but the page: nothing may load or run, even if a browser rendered it.
CSP_INERT = "default-src 'none'; sandbox; frame-ancestors 'none'; base-uri 'none'; " \
    "form-action 'none'"
# The page: its inline script by hash, Plotly and data from this origin only. Styles
# may be inline: Plotly and page.js set style attributes, and with every fetch limited
# to 'self' a style cannot send anything elsewhere.
CSP_PAGE = ("default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")
# Run files shown with their own type: raster images, which cannot carry script.
RASTER_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}
# Shown as plain text (also when a browser would run them: svg, html, js); the rest
# is a download.
TEXT_TYPES = ("application/json", "application/xml", "image/svg+xml",
              "application/xhtml+xml", "application/javascript")
TEXT_SUFFIXES = (".csv", ".json", ".txt", ".log", ".diff", ".py", ".yaml", ".yml", ".toml",
                 ".cfg", ".ini", ".md")
CHUNK_BYTES = 64 * 1024
IDLE_TIMEOUT_S = 60  # a client that neither sends nor reads for this long is dropped
MAX_SHOWN = 50       # runs loaded and drawn by the page at most (the most recent, or picked by ?q=)
PAGE_ROWS = 100      # rows of the runs table per page (paged by the server: /api/runs)


class Refused(Exception):
    """A request for a path outside the served folders."""


DEFAULT_CACHE_BYTES = 256 * 1024 * 1024  # drawn runs kept in memory (serve --cache-mb)
RUN_OVERHEAD_BYTES = 16 * 1024            # a loaded run beyond its tables: records, objects


class RunCache:
    """Loaded runs by folder, the least recently drawn first out: at most
    ``max_bytes`` of their tables (pandas' deep memory use) are kept. Without a
    bound each run drawn stayed for good: 32 -> 505 MB over 300 runs of 6,000
    steps, also after they were deleted. Thread-safe."""

    def __init__(self, max_bytes=DEFAULT_CACHE_BYTES):
        from collections import OrderedDict
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._entries = OrderedDict()  # run dir -> (signature, Run, bytes)
        self._dropped = False          # since memory was last returned
        self._answering = 0            # requests being answered (they may hold dropped runs)
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._entries)

    def __contains__(self, run_dir):
        return run_dir in self._entries

    def get(self, run_dir, signature):
        """The run loaded with this ``signature``, or None (a stale one is dropped)."""
        with self._lock:
            entry = self._entries.get(run_dir)
            if entry is None:
                return None
            if entry[0] != signature:
                self._drop(run_dir)
                return None
            self._entries.move_to_end(run_dir)
            return entry[1]

    def put(self, run_dir, signature, run):
        """Keep ``run``, dropping the least recently used until it fits (a run
        bigger than the whole bound is not kept)."""
        size = run_bytes(run)
        with self._lock:
            if run_dir in self._entries:
                self._drop(run_dir)
            if size > self.max_bytes:
                return
            while self._entries and self.bytes + size > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[run_dir] = (signature, run, size)
            self.bytes += size

    def folders(self):
        """The run folders kept."""
        with self._lock:
            return list(self._entries)

    def keep_only(self, run_dirs):
        """Free the runs not in ``run_dirs`` (removed, or moved away)."""
        present = set(run_dirs)
        with self._lock:
            for run_dir in [d for d in self._entries if d not in present]:
                self._drop(run_dir)

    def _drop(self, run_dir):
        self.bytes -= self._entries.pop(run_dir)[2]
        self._dropped = True

    @contextlib.contextmanager
    def answering(self):
        """Around each request: the last one out gives the memory of dropped runs
        back to the system (the C allocator otherwise keeps freed pages, and RSS
        stayed at its peak after the runs went). Not before: a request still
        sending a dropped run's curves holds its tables until it ends."""
        with self._lock:
            self._answering += 1
        try:
            yield
        finally:
            with self._lock:
                self._answering -= 1
                release = self._dropped and not self._answering
                if release:
                    self._dropped = False
            if release:
                return_freed_memory()


_LIBC: list = []  # glibc's malloc_trim, or None where the C library has none


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``;
    a no-op elsewhere). Freed pandas tables are otherwise kept by the allocator:
    300 drawn runs of 6,000 steps then removed left the server at 451 MB."""
    if not _LIBC:
        import ctypes
        try:
            _LIBC.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](0)


def use_system_memory_pool() -> None:
    """Let pyarrow's CSV reader allocate with the C allocator, so that what it
    freed can be returned (:func:`return_freed_memory`); its default pool
    (jemalloc) kept a 129 MB loss.csv's 330 MB after the run was removed."""
    import pyarrow
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def run_bytes(run):
    """The memory a loaded run holds: its tables read so far, deep, and a fixed overhead."""
    import pandas as pd
    tables = [v for v in vars(run).values() if isinstance(v, pd.DataFrame)]
    tables += [t for v in vars(run).values() if isinstance(v, dict)
               for t in v.values() if isinstance(t, pd.DataFrame)]  # system_by_rank
    return RUN_OVERHEAD_BYTES + sum(table_bytes(t) for t in tables)


def table_bytes(table) -> int:
    """What pandas' ``memory_usage(deep=True)`` sums for ``table``, without a
    Series per column: fixed-size columns by their dtype, the others (text,
    categories, nullable numbers) asked one by one. The whole call was a third
    of the time reading 50 small runs took (0.15 of 0.45 s; now 0.02)."""
    import numpy as np
    rows, total = len(table), int(table.index.memory_usage(deep=True))
    for i, dtype in enumerate(table.dtypes.tolist()):
        if isinstance(dtype, np.dtype) and dtype.kind != "O":
            total += rows * dtype.itemsize
        else:
            total += int(table.iloc[:, i].memory_usage(index=False, deep=True))
    return total


class RunIndex:
    """The served folders and the runs below them, re-read when files change."""

    def __init__(self, roots, cache_bytes=DEFAULT_CACHE_BYTES):
        self.roots = [os.path.realpath(r) for r in roots]
        self.cache = RunCache(cache_bytes)
        self.feed = ChangeFeed(self.roots, private_folder(self.roots))
        self.listing = Listing(self.roots, self.key_of)
        self._started = False
        self._start_lock = threading.Lock()

    # -- paths -----------------------------------------------------------------------
    def resolve(self, key):
        """The real path of ``<root index>/<relative path>``; Refused when outside."""
        index, _, rel = key.partition("/")
        if not index.isdigit() or int(index) >= len(self.roots):
            raise Refused(key)
        root = self.roots[int(index)]
        if "\x00" in rel or os.path.isabs(rel) or rel.startswith("~"):
            raise Refused(key)
        path = os.path.realpath(os.path.join(root, rel))  # follows symlinks, folds ".."
        if not is_within(path, root):
            raise Refused(key)
        return path

    def key_of(self, path):
        """The key of a path below one of the roots."""
        for index, root in enumerate(self.roots):
            if is_within(path, root):
                rel = os.path.relpath(path, root)
                return f"{index}/{'' if rel == '.' else rel.replace(os.sep, '/')}".rstrip("/")
        raise Refused(path)

    # -- runs ------------------------------------------------------------------------
    def signature(self, run_dirs):
        """A short hash of every run file's size and modification time."""
        digest = hashlib.sha1()
        for run_dir in run_dirs:
            digest.update(run_dir.encode())
            for name in RUN_FILES:
                try:
                    st = os.stat(os.path.join(run_dir, name))
                    digest.update(f"{name}:{st.st_size}:{st.st_mtime_ns};".encode())
                except OSError:
                    digest.update(f"{name}:-;".encode())
        return digest.hexdigest()[:16]

    def load(self, run_dirs):
        """Loaded runs and ``(run_dir, message, status)`` of the unreadable ones.

        Each run's records and the logs its figures draw are read now, so a
        broken one is listed here (system.csv only where it is drawn: a run
        alone). A run whose files are mid-write or gone is skipped this time
        and shown on a later refresh; a run read before and unchanged is reused.
        """
        from .reports import Skipped, skip_status
        parts = DRAWN + (("system_by_rank",) if len(run_dirs) <= payload.MAX_SYSTEM_RUNS else ())
        runs, errors = [], []
        for run_dir in run_dirs:
            signature = self.signature([run_dir])
            run = self.cache.get(run_dir, signature)
            unread = [p for p in parts if p not in vars(run)] if run is not None else parts
            try:
                run = run or Run(run_dir)
                for part in unread:
                    getattr(run, part)
            except (RunDirError, OSError, ValueError) as exc:
                errors.append(Skipped(run_dir, _one_line(exc), skip_status(exc)))
                continue
            if unread:   # (counted again when a part was read later)
                self.cache.put(run_dir, signature, run)
            runs.append(run)
        return runs, errors

    def start(self):
        """Make the replicas of the run stores in the background, then the table's
        config columns on them (pages meanwhile come from the roots' stores: see
        cursor.py); import pandas meanwhile, for the drawn runs' data. Once."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=_import_readers, name="mindexp-import", daemon=True).start()
        self.feed.start(then=self._after_copies)

    def _after_copies(self):
        """The table's config columns on the replicas, before a page asks;
        then the memory the copies freed goes back to the system (the threads'
        heaps kept it: 191 -> 159 MB at 100,000 runs)."""
        self.feed.query(self.listing.columns)
        return_freed_memory()

    def runs_page(self, offset=0, limit=100, query="", sort="-started", where=""):
        """One page of the runs table (see listing.py): counted, filtered (``where``:
        ``mindexp runs --where``'s grammar), sorted and paged in SQL on the server's
        replica of the run store (on the root's store itself while that is made),
        whatever the number of runs."""
        answer, cursor = self._on_catalogs(lambda served: self.listing.page(
            served, offset, limit, query, sort, where))
        # the cursor of this state: the page's next poll asks for what changed after it
        return answer | {"cursor": cursor}

    def selection(self, query=""):
        """The runs the page loads by default: the ``MAX_SHOWN`` most recent (by run
        id: it starts with the start time) of those holding every word of ``query``,
        and how many hold them."""
        (dirs, matched), _ = self._on_catalogs(lambda served: self.listing.top(
            served, MAX_SHOWN, query))
        return sorted(dirs), matched

    def _on_catalogs(self, fn):
        """``(fn(served), cursor)``: on the roots' stores while the replicas are
        made, else on these, brought up to date first."""
        self.start()
        early = self.feed.early(fn)
        if early is not None:
            return early
        self.feed.want_copy()   # this request waits for the copies: no pause
        generation = self.feed.refresh()
        return self.feed.query(fn), generation

    def picked(self, keys):
        """The run folders of ``keys`` that hold a run (at most MAX_SHOWN; the others,
        unknown or gone, are left out)."""
        out = []
        for key in keys[:MAX_SHOWN]:   # a stat per key: no scan of every run
            try:
                path = self.resolve(key)
            except Refused:
                continue
            if is_run_dir(path) and path not in out:
                out.append(path)
        return out

    def data(self, run_key=None, since=None, query="", keys=None):
        """The page's data (or ``{"unchanged": true}`` when ``since`` is current).

        Past ``MAX_SHOWN`` runs, only the most recent ``MAX_SHOWN`` of those
        holding every word of ``query`` (as the table's filter) are loaded and
        drawn (the title says how many of how many): loading all of 10,000 runs
        took minutes and 2 GB. Only the runs drawn are read, never the whole table."""
        if run_key:
            path = self.resolve(run_key)
            dirs, total = ([path] if is_run_dir(path) else []), 1
        elif keys is None:
            dirs, total = self.selection(query)
        else:
            dirs = self.picked(keys)
            total = len(dirs)
        self.cache.keep_only([d for d in self.cache.folders() if is_run_dir(d)])  # removed: freed
        version = self.signature(dirs) + f"-{total}"
        if since and since == version:
            return {"unchanged": True, "version": version}
        runs, errors = self.load(dirs)
        title = "mindexp dashboard: " + ", ".join(self.roots)
        if len(dirs) < total:
            title += (f" (the {len(dirs)} most recent of {total} runs"
                      f"{' matching ' + repr(query) if query else ''}; /?q=WORDS picks others)")
        if run_key:
            title = f"run {runs[0].run_id}" if runs else f"run {run_key} (not readable yet)"
        data = payload.build(runs, title, skipped=errors, progress=True,
                             link=lambda run: f"/files/{quote(self.key_of(run.dir))}/",
                             image_src=lambda run, rel: f"/files/{quote(self.key_of(run.dir))}/"
                                                        f"{quote(rel)}")
        for entry, run in zip(data["runs"], runs):
            entry["key"] = self.key_of(run.dir)
            entry["page"] = f"/run/{quote(entry['key'])}"
            entry["logs"] = log_headers(run.dir)
        if run_key and runs:
            data["detail"] = {"config": runs[0].config, "meta": runs[0].meta}
        data["version"] = version
        self.feed.want_copy()   # the page has its first data: the copy need not wait
        return data


def _import_readers():
    """Import pandas, which the drawn runs' tables are read into, before the
    page's first ``/api/data`` asks (0.3 s of its answer otherwise)."""
    try:
        import pandas  # noqa: F401
    except ImportError:   # said by the request that needs it
        pass


def log_headers(run_dir):
    """``{log: its header's column names}``: the live page places appended rows by them."""
    from .mlflow_points import read_lines
    headers = {name: read_lines(os.path.join(run_dir, schema.LOGS[name].filename), 0, 0)[0]
               for name in LOGS}
    return {name: header for name, header in headers.items() if header}


def private_folder(roots):
    """Where the server keeps its replicas of the run stores: the system's
    temporary folder, or another outside every served folder (the server never writes
    into them). MindexpError when every candidate is inside one."""
    import tempfile
    for folder in (tempfile.gettempdir(), "/dev/shm", "/var/tmp", os.path.expanduser("~")):
        real = os.path.realpath(folder)
        if os.path.isdir(real) and os.access(real, os.W_OK) and \
                not any(is_within(real, root) for root in roots):
            return real
    raise MindexpError("cannot keep the dashboard's run catalog outside the served folders: "
                       "set TMPDIR to a writable folder outside them. Received: "
                       + ", ".join(roots))


class Handler(BaseHTTPRequestHandler):
    """GET only; every answer is read from the served folders, nothing is written."""

    server_version = "mindexp"
    index = None  # the RunIndex, set on the server's handler class
    timeout = IDLE_TIMEOUT_S  # a silent or stalled client never holds a thread for good

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self):  # noqa: N802 - http.server's name
        with self.index.cache.answering():  # the answer's locals are gone at its end
            self._answer()

    def _answer(self):
        try:
            if not self._host_allowed():
                return self._send_text(HTTPStatus.FORBIDDEN, "refused: the Host header does not "
                                       "name this server's address")
            self._route(urlsplit(self.path))
        except Refused:
            self._send_text(HTTPStatus.FORBIDDEN, "refused: outside the served folders")
        except schema.NotAFileError:
            self._send_text(HTTPStatus.FORBIDDEN, "refused: not a regular file")
        except FileNotFoundError:
            self._send_text(HTTPStatus.NOT_FOUND, "not found")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the browser went away, or stopped reading
        except Exception as exc:  # one bad request must not end the server
            logger.warning("dashboard request %s failed: %s", self.path, _one_line(exc))
            self._send_text(HTTPStatus.INTERNAL_SERVER_ERROR, f"error: {_one_line(exc)}")

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def parse_request(self):
        """The standard library's parse, refusing HTTP/0.9: its answers have no
        headers at all, so none of the security headers could be sent."""
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/0.9 is not served")
            return False
        return True

    def send_error(self, code, message=None, explain=None):
        """The standard library's error page (400, 414, 431, 501, 505, ...) with
        the headers every answer of this server carries (see :meth:`end_headers`)."""
        if self.request_version in ("HTTP/0.9", ""):  # a request line it could not read
            self.request_version = "HTTP/1.0"
        self._error_page = True
        super().send_error(code, message, explain)

    def end_headers(self):
        if getattr(self, "_error_page", False):
            self._error_page = False
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP_INERT)
            for name, value in COMMON_HEADERS:
                self.send_header(name, value)
        super().end_headers()

    def _host_allowed(self):
        """A DNS-rebinding page sends its own name as Host: answer only names of this server."""
        host = (self.headers.get("Host") or "").strip().lower()
        return host in allowed_hosts(self.server.server_address,
                                     self.connection.getsockname()[0])

    def _route(self, url):
        path = unquote(url.path)  # decoded once: "%252e" stays the name "%2e"
        query = parse_qs(url.query)
        if path in ("/", "/index.html"):
            return self._send_page(None, (query.get("q") or [""])[0])
        if path.startswith("/run/"):
            key = path[len("/run/"):].strip("/")
            self.index.resolve(key)
            return self._send_page(key)
        if path == "/api/data":
            run_key = (query.get("run") or [None])[0]
            since = (query.get("since") or [None])[0]
            words = (query.get("q") or [""])[0]
            keys = query.get("runs")
            keys = [k for k in ",".join(keys).split(",") if k] if keys is not None else None
            return self._send_json(self.index.data(run_key, since, words, keys))
        if path == "/api/runs":
            return self._send_runs(query)
        if path == "/api/changes":
            cursor = (query.get("cursor") or [""])[0]
            return self._send_json(self.index.feed.changes(
                int(cursor) if cursor.isdigit() else None, self.index.key_of))
        if path == "/static/plotly.min.js":
            return self._send(HTTPStatus.OK, _plotly_bytes(), "text/javascript",
                              cache="max-age=3600")
        if path.startswith("/files/"):
            return self._send_file(path[len("/files/"):])
        raise FileNotFoundError(path)

    def _send_json(self, answer, status=HTTPStatus.OK):
        try:
            body = json.dumps(answer, separators=(",", ":"), allow_nan=False, default=str)
        except ValueError:   # a NaN or infinity planted in a run's files: no JSON word
            body = json.dumps(_finite(answer), separators=(",", ":"), allow_nan=False,
                              default=str)
        # masked again here: a run recorded before masking kept its storage URL
        self._send(status, masked(body).encode(), "application/json")

    def _send_runs(self, query):
        """``/api/runs?offset=&limit=&q=&sort=&where=``; a bad value is a 400 naming it."""
        def first(name, default):
            return (query.get(name) or [default])[0]

        def whole(name, default):
            text = first(name, default)
            if not text.isdigit():
                raise ValueError(f"{name} must be a whole number (0 or more). Received: {text!r}")
            return int(text)
        try:
            offset, limit = whole("offset", "0"), whole("limit", str(PAGE_ROWS))
            answer = self.index.runs_page(offset, limit, first("q", ""), first("sort", "-started"),
                                          first("where", ""))
        except ValueError as exc:
            return self._send_json({"error": _one_line(exc)}, HTTPStatus.BAD_REQUEST)
        self._send_json(answer)

    def _send_page(self, run_key, words=""):
        live = {"api": "/api/data", "changes": "/api/changes", "every_ms": 1000,
                "max_points": payload.MAX_POINTS}
        if run_key:
            live |= {"api": f"/api/data?run={quote(run_key)}", "key": run_key}
        else:
            live |= {"runs": "/api/runs", "q": words, "page_rows": PAGE_ROWS,
                     "max_drawn": MAX_SHOWN}
        title = f"mindexp: {run_key}" if run_key else "mindexp dashboard"
        text = interactive.page(title, {"live": live, "title": title},
                                plotly_src="/static/plotly.min.js")
        self._send(HTTPStatus.OK, text.encode(), "text/html; charset=utf-8",
                   csp=CSP_PAGE.format(hashes=" ".join(inline_script_hashes(text))))

    def _send_file(self, key):
        path = self.index.resolve(key.rstrip("/"))
        if os.path.isdir(path):
            return self._send_listing(key.rstrip("/"), path)
        kind, disposition = file_type(path)
        if os.path.basename(path) == layout.RUN_JSON:
            return self._send_run_json(path, kind, disposition)
        with schema.open_file(path) as f:
            size = os.fstat(f.fileno()).st_size
            self._send_head(HTTPStatus.OK, size, kind,
                            extra=[("Content-Disposition", disposition)] if disposition else [])
            if self.command != "HEAD":
                _copy_bytes(f, self.wfile, size)

    def _send_run_json(self, path, kind, disposition):
        """A run record with any URL password masked (one written before masking)."""
        with schema.open_file(path) as f:
            body = masked(f.read().decode("utf-8", errors="replace")).encode()
        self._send_head(HTTPStatus.OK, len(body), kind,
                        extra=[("Content-Disposition", disposition)] if disposition else [])
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_listing(self, key, path):
        names = sorted(os.listdir(path))
        items = "".join(
            f'<li><a href="/files/{quote(key)}/{quote(n)}{"/" if os.path.isdir(os.path.join(path, n)) else ""}">'
            f"{html.escape(n)}</a></li>" for n in names)
        up = f'<p><a href="/run/{quote(key)}">run page</a> · <a href="/">all runs</a></p>' \
            if is_run_dir(path) else '<p><a href="/">all runs</a></p>'
        body = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(path)}"
                f"</title></head><body><h1>{html.escape(path)}</h1>{up}<ul>{items}</ul></body></html>")
        self._send(HTTPStatus.OK, body.encode(), "text/html; charset=utf-8")

    def _send_text(self, status, text):
        self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")

    def _send(self, status, body, kind, cache="no-store", csp=CSP_INERT):
        self._send_head(status, len(body), kind, cache, csp)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_head(self, status, length, kind, cache="no-store", csp=CSP_INERT, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", cache)
        self.send_header("Content-Security-Policy", csp)
        for name, value in (*COMMON_HEADERS, *extra):
            self.send_header(name, value)
        self.end_headers()


def allowed_hosts(bound, local_ip):
    """The Host values that name this server: loopback names and the bound
    address (and ``local_ip``, the address the client reached) with the port;
    without it too on port 80."""
    port = bound[1]
    names = {"127.0.0.1", "localhost", "[::1]", _bracketed(bound[0]), _bracketed(local_ip)}
    return {f"{name}:{port}" for name in names} | (names if port == 80 else set())


def _bracketed(address):
    return f"[{address}]" if ":" in address else address


def is_loopback(host):
    """Whether the bound address ``host`` is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def exposure_warning(server):
    """The warning to print when ``server`` listens beyond this machine, else None."""
    host, port = server.server_address[:2]
    if is_loopback(host):
        return None
    return (f"warning: listening on {host}:{port}, so every file of the served runs is "
            f"readable by anyone on the network who can reach this machine (no password); "
            f"--host 127.0.0.1 keeps them to this machine")


def inline_script_hashes(text):
    """CSP sources (``'sha256-...'``) of the page's inline executable scripts
    (a bare ``<script>``; the JSON data block is not run and needs none)."""
    return [f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
            for body in re.findall(r"<script>(.*?)</script>", text, flags=re.S)]


def file_type(path):
    """``(Content-Type, Content-Disposition or None)`` of a run file: raster images
    with their type, text as text/plain, everything else a download."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in RASTER_TYPES:
        return RASTER_TYPES[suffix], None
    guessed = mimetypes.guess_type(path)[0] or ""
    if guessed.startswith("text/") or guessed in TEXT_TYPES or suffix in TEXT_SUFFIXES:
        return "text/plain; charset=utf-8", None
    name = quote(os.path.basename(path), safe="")
    return "application/octet-stream", f"attachment; filename*=UTF-8''{name}"


def _copy_bytes(source, target, size):
    """Copy ``size`` bytes in chunks (a file still growing sends what its length said)."""
    left = size
    while left > 0:
        chunk = source.read(min(CHUNK_BYTES, left))
        if not chunk:
            break  # truncated meanwhile: the client sees a short body
        target.write(chunk)
        left -= len(chunk)


_PLOTLY: list[bytes] = []


def _plotly_bytes():
    if not _PLOTLY:
        _PLOTLY.append(interactive.plotly_js().encode())
    return _PLOTLY[0]


def _finite(value):
    """``value`` with each NaN as None and each infinity as the text ``inf`` or
    ``-inf`` (as the table's cells show them), for a browser's JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if value != value else str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def make_server(paths, host="127.0.0.1", port=0, cache_bytes=DEFAULT_CACHE_BYTES):
    """A ready (not yet serving) server over the folders ``paths``, keeping at
    most ``cache_bytes`` of drawn runs in memory (:class:`RunCache`).

    Raises MindexpError for a missing folder, a missing extra or a port in use.
    """
    for path in paths:
        if not os.path.isdir(path):
            raise MindexpError(f"cannot serve {path}: it is not a folder. Received: {path!r}")
    try:
        interactive.plotly_js()
    except interactive.MissingExtraError as exc:
        raise MindexpError(str(exc).replace("interactive report", "dashboard")) from None
    use_system_memory_pool()  # a long-lived process: what it frees must go back
    handler = type("BoundHandler", (Handler,), {"index": RunIndex(paths, cache_bytes)})
    server_class = DashboardServer6 if ":" in host else DashboardServer
    try:
        return server_class((host, port), handler)
    except OSError as exc:
        raise MindexpError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another "
                           f"--port (0 picks a free one). Received: --host {host} --port {port}"
                           ) from None


class DashboardServer(ThreadingHTTPServer):
    """Request threads never hold up the stop: they are daemons and closing the
    server does not wait for them (a client reading slowly, a poll still loading)."""

    daemon_threads = True
    block_on_close = False

    def server_close(self):
        """Close the socket, then the replicas (their files are removed)."""
        super().server_close()
        index = getattr(self.RequestHandlerClass, "index", None)
        if index is not None:
            index.feed.close()


class DashboardServer6(DashboardServer):
    """The same on an IPv6 address (``--host ::1``)."""

    address_family = socket.AF_INET6


def url_of(server):
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve_until_stopped(server, ready=None):
    """Serve until Ctrl-C or SIGTERM, then close the socket; returns normally
    and at once, whatever request threads are still doing (they are daemons:
    a caller that wants the process gone ends it, see ``cmd_serve``).

    ``ready()`` is called once both signals are handled (announce the URL there).
    """
    import signal
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    index = getattr(server.RequestHandlerClass, "index", None)
    if index is not None:   # the replicas are made meanwhile
        index.start()
    try:
        if ready is not None:
            ready()
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        # a second Ctrl-C must not interrupt the close: ignore both while closing
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            server.server_close()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _one_line(exc):
    return " ".join(str(exc).split())
