"""``mindexp serve``: a read-only local dashboard over run directories.

The standard library's ``ThreadingHTTPServer`` is enough: a handful of GET
endpoints, no templates, no build step, no dependency beyond the report's
(Plotly's JavaScript is served from the installed package). The page is the
report's own page; it polls ``/api/data`` every second, and the server
answers "unchanged" cheaply when no file of any run changed (a signature of
sizes and modification times), so new rows show within about a second of
being flushed.

Paths: ``/`` (all runs), ``/run/<key>`` (one run), ``/files/<key>/...``
(a run's files, read-only), ``/api/data[?run=<key>]``, ``/static/plotly.min.js``.
A key is ``<root index>/<path below that root>``; anything that resolves
outside the served folders (``..``, absolute paths, encoded or not,
symlinks pointing out) is refused with 403.
"""
import hashlib
import html
import json
import logging
import mimetypes
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..callbacks import schema
from ..errors import MindexpError, RunDirError
from ..rundir.io import is_run_dir
from . import interactive, payload

logger = logging.getLogger(__name__)
RUN_FILES = (schema.RUN_JSON, schema.CONFIG_JSON) + tuple(
    schema.LOGS[name].filename for name in ("loss", "params", "grad_norm", "eval"))


class Refused(Exception):
    """A request for a path outside the served folders."""


class RunIndex:
    """The served folders and the runs below them, re-read when files change."""

    def __init__(self, roots):
        self.roots = [os.path.realpath(r) for r in roots]
        self._lock = threading.Lock()
        self._cache = {}  # run dir -> (signature, Run)

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
        if path != root and not path.startswith(root + os.sep):
            raise Refused(key)
        return path

    def key_of(self, path):
        """The key of a path below one of the roots."""
        for index, root in enumerate(self.roots):
            if path == root or path.startswith(root + os.sep):
                rel = os.path.relpath(path, root)
                return f"{index}/{'' if rel == '.' else rel.replace(os.sep, '/')}".rstrip("/")
        raise Refused(path)

    # -- runs ------------------------------------------------------------------------
    def run_dirs(self):
        """Run directories below every root (a root may not exist yet, or hold none)."""
        found = []
        for root in self.roots:
            for top, dirs, files in os.walk(root):
                if schema.RUN_JSON in files:
                    found.append(os.path.realpath(top))
                    dirs.clear()
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        return sorted(set(found))

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

        A run whose files are mid-write or gone is skipped this time and
        shown on a later refresh; a run read before and unchanged is reused.
        """
        from .reports import Skipped, skip_status, load_run
        runs, errors = [], []
        for run_dir in run_dirs:
            signature = self.signature([run_dir])
            with self._lock:
                cached = self._cache.get(run_dir)
            if cached and cached[0] == signature:
                runs.append(cached[1])
                continue
            try:
                run = load_run(run_dir)
            except (RunDirError, OSError, ValueError) as exc:
                errors.append(Skipped(run_dir, _one_line(exc), skip_status(exc)))
                continue
            with self._lock:
                self._cache[run_dir] = (signature, run)
            runs.append(run)
        return runs, errors

    def data(self, run_key=None, since=None):
        """The page's data (or ``{"unchanged": true}`` when ``since`` is current)."""
        dirs = self.run_dirs()
        if run_key:
            path = self.resolve(run_key)
            dirs = [d for d in dirs if d == path]
        version = self.signature(dirs)
        if since and since == version:
            return {"unchanged": True, "version": version}
        runs, errors = self.load(dirs)
        title = "mindexp dashboard: " + ", ".join(self.roots)
        if run_key:
            title = f"run {runs[0].run_id}" if runs else f"run {run_key} (not readable yet)"
        data = payload.build(runs, title, skipped=errors, progress=True,
                             link=lambda run: f"/files/{quote(self.key_of(run.dir))}/")
        for entry, run in zip(data["runs"], runs):
            entry["page"] = f"/run/{quote(self.key_of(run.dir))}"
        if run_key and runs:
            data["detail"] = {"config": runs[0].config, "meta": runs[0].meta}
        data["version"] = version
        return data


class Handler(BaseHTTPRequestHandler):
    """GET only; every answer is read from the served folders, nothing is written."""

    server_version = "mindexp"
    index = None  # the RunIndex, set on the server's handler class

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self):  # noqa: N802 - http.server's name
        try:
            self._route(urlsplit(self.path))
        except Refused:
            self._send_text(HTTPStatus.FORBIDDEN, "refused: outside the served folders")
        except FileNotFoundError:
            self._send_text(HTTPStatus.NOT_FOUND, "not found")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away
        except Exception as exc:  # one bad request must not end the server
            logger.warning("dashboard request %s failed: %s", self.path, _one_line(exc))
            self._send_text(HTTPStatus.INTERNAL_SERVER_ERROR, f"error: {_one_line(exc)}")

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def _route(self, url):
        path = unquote(url.path)  # decoded once: "%252e" stays the name "%2e"
        query = parse_qs(url.query)
        if path in ("/", "/index.html"):
            return self._send_page(None)
        if path.startswith("/run/"):
            key = path[len("/run/"):].strip("/")
            self.index.resolve(key)
            return self._send_page(key)
        if path == "/api/data":
            run_key = (query.get("run") or [None])[0]
            since = (query.get("since") or [None])[0]
            body = json.dumps(self.index.data(run_key, since), separators=(",", ":"),
                              allow_nan=False)
            return self._send(HTTPStatus.OK, body.encode(), "application/json")
        if path == "/static/plotly.min.js":
            return self._send(HTTPStatus.OK, _plotly_bytes(), "text/javascript",
                              cache="max-age=3600")
        if path.startswith("/files/"):
            return self._send_file(path[len("/files/"):])
        raise FileNotFoundError(path)

    def _send_page(self, run_key):
        api = "/api/data" + (f"?run={quote(run_key)}" if run_key else "")
        title = f"mindexp: {run_key}" if run_key else "mindexp dashboard"
        text = interactive.page(title, {"live": {"api": api, "every_ms": 1000}, "title": title},
                                plotly_src="/static/plotly.min.js")
        self._send(HTTPStatus.OK, text.encode(), "text/html; charset=utf-8")

    def _send_file(self, key):
        path = self.index.resolve(key.rstrip("/"))
        if os.path.isdir(path):
            return self._send_listing(key.rstrip("/"), path)
        kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if kind.startswith("text/") or path.endswith((".csv", ".json", ".txt", ".log")):
            kind = "text/plain; charset=utf-8"  # shown, never run
        with open(path, "rb") as f:
            self._send(HTTPStatus.OK, f.read(), kind)

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

    def _send(self, status, body, kind, cache="no-store"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


_PLOTLY = []


def _plotly_bytes():
    if not _PLOTLY:
        _PLOTLY.append(interactive.plotly_js().encode())
    return _PLOTLY[0]


def make_server(paths, host="127.0.0.1", port=0):
    """A ready (not yet serving) server over the folders ``paths``.

    Raises MindexpError for a missing folder, a missing extra or a port in use.
    """
    for path in paths:
        if not os.path.isdir(path):
            raise MindexpError(f"cannot serve {path}: it is not a folder. Received: {path!r}")
    try:
        interactive.plotly_js()
    except interactive.MissingExtraError as exc:
        raise MindexpError(str(exc).replace("interactive report", "dashboard")) from None
    handler = type("BoundHandler", (Handler,), {"index": RunIndex(paths)})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise MindexpError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another "
                           f"--port (0 picks a free one). Received: --host {host} --port {port}"
                           ) from None
    server.daemon_threads = True  # a hanging browser never blocks the exit
    return server


def url_of(server):
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve_until_stopped(server, ready=None):
    """Serve until Ctrl-C or SIGTERM, then close the socket; returns normally.

    ``ready()`` is called once both signals are handled (announce the URL there).
    """
    import signal
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if ready is not None:
            ready()
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _one_line(exc):
    return " ".join(str(exc).split())
