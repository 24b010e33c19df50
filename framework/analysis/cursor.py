"""What changed in the served runs since a client's last poll (``/api/changes``).

The dashboard's page polls every second. Answering each poll with every
run's data costs the whole folder (172 MB at 10,000 runs); this answers
with what changed since the cursor the client holds: runs that appeared
(their listing entry), runs whose run.json changed (their new status),
runs that left, and each log's rows appended since then, read from the
byte offset the log had at that cursor (only whole lines; never a full
rescan of a CSV). When nothing changed the answer is a few bytes.

A cursor is a generation number of this server: each scan that sees a
change starts a new one. A cursor this server did not give (another
server, one older than the history it keeps) gets ``reset``: the client
fetches the full data again.
"""
import os
import threading
from typing import Callable

from ..callbacks import schema
from ..rundir.index import found_runs

LOGS = ("loss", "params", "grad_norm", "eval")
HISTORY = 64          # generations of log offsets kept per run


class ChangeFeed:
    """Scans the served roots and answers ``changes(cursor)`` (thread-safe)."""

    def __init__(self, roots: list[str]):
        self.roots = list(roots)
        self.generation = 0
        self._runs: dict[str, _Tracked] = {}      # run dir -> _Tracked
        self._gone: dict[str, int] = {}           # run dir -> generation it left in
        self._lock = threading.Lock()

    def changes(self, cursor: int | None, key_of: Callable[[str], str]) -> dict:
        """``{"cursor", "new", "status", "removed", "rows"}`` since ``cursor`` (an
        int from an earlier answer, or None for "now" with nothing listed), or
        ``{"reset": true, "cursor"}``. ``key_of(run_dir)``: the client's key of a run."""
        with self._lock:
            self._scan()
            if cursor is None:
                return {"cursor": self.generation, "new": [], "status": [], "removed": [],
                        "rows": {}}
            if not 0 <= cursor <= self.generation or cursor < self._oldest_kept():
                return {"reset": True, "cursor": self.generation}
            return self._since(cursor, key_of)

    def states(self) -> tuple[int, dict[str, tuple]]:
        """``(generation, {run dir: state})`` after a scan; a state changes when the
        run's run.json or config.json does or, while it runs, its loss.csv grows."""
        with self._lock:
            self._scan()
            return self.generation, {d: (tuple(t.signature), t.raw.get(schema.LOSS.name) if t.live else None)
                                     for d, t in self._runs.items()}

    # -- scanning --------------------------------------------------------------------
    def _scan(self):
        found = {}
        for root in self.roots:
            if os.path.isdir(root):
                found.update(found_runs(root))
        changed = False
        # the first scan: whether a run still runs, from the catalog when it read the
        # same run.json (100,000 run.json parsed otherwise)
        known = _catalog_states(self.roots) if not self._runs else {}
        for run_dir, signature in found.items():
            tracked = self._runs.get(run_dir)
            if tracked is None:
                raw = _raw_sizes(run_dir)
                self._runs[run_dir] = _Tracked(signature, raw, _log_sizes(run_dir, raw),
                                               self.generation + 1,
                                               _is_live(run_dir, signature, known))
                self._gone.pop(run_dir, None)
                changed = True
                continue
            if signature == tracked.signature and not tracked.live:
                continue   # a finished run's logs do not grow: its run.json would change first
            if signature != tracked.signature:
                tracked.live = _is_live(run_dir)
            raw = _raw_sizes(run_dir)
            if signature != tracked.signature or raw != tracked.raw:   # stats only, usually
                changed |= tracked.update(signature, raw, _log_sizes(run_dir, raw),
                                          self.generation + 1)
        for run_dir in [d for d in self._runs if d not in found]:
            del self._runs[run_dir]
            self._gone[run_dir] = self.generation + 1
            changed = True
        if changed:
            self.generation += 1

    def _oldest_kept(self):
        """The oldest cursor every run's history still answers."""
        return max((t.history[0][0] for t in self._runs.values()
                    if len(t.history) >= HISTORY), default=0)

    # -- answering ---------------------------------------------------------------------
    def _since(self, cursor, key_of):
        out = {"cursor": self.generation, "new": [], "status": [], "removed": [], "rows": {}}
        for run_dir, tracked in self._runs.items():
            if tracked.meta_changed <= cursor and tracked.history[-1][0] <= cursor:
                continue   # nothing since the cursor: most runs, most polls
            if tracked.born > cursor:
                out["new"].append(_listing(run_dir, key_of))
                continue
            if tracked.meta_changed > cursor:
                out["status"].append(_listing(run_dir, key_of))
            rows = tracked.rows_since(cursor, run_dir)
            if rows:
                out["rows"][key_of(run_dir)] = rows
        out["removed"] = [key_of(d) for d, gen in self._gone.items() if gen > cursor]
        return out


class _Tracked:
    """One run: its run.json signature, and its logs' sizes per generation."""

    def __init__(self, signature, raw, sizes, generation, live):
        self.signature, self.born, self.meta_changed = signature, generation, generation
        self.live = live   # run.json says running (or cannot be read yet): its logs may grow
        self.raw = raw   # the logs' file sizes: a change is looked at closer
        self.history = [(generation, sizes)]

    def update(self, signature, raw, sizes, generation):
        """Record a new state; True when the client sees a change (run.json, or a
        log gained whole lines)."""
        self.raw = raw
        changed = signature != self.signature
        if changed:
            self.signature, self.meta_changed = signature, generation
        if sizes != self.history[-1][1]:
            self.history.append((generation, sizes))
            del self.history[:-HISTORY]
            changed = True
        return changed

    def rows_since(self, cursor, run_dir):
        """``{log: [row, ...]}`` appended after the sizes known at ``cursor``."""
        then = next(sizes for gen, sizes in reversed(self.history) if gen <= cursor)
        now = self.history[-1][1]
        out = {}
        for name in LOGS:
            if now.get(name, 0) > then.get(name, 0):
                rows = _rows_between(os.path.join(run_dir, schema.LOGS[name].filename),
                                     then.get(name, 0), now[name])
                if rows:
                    out[name] = rows
        return out


def _catalog_states(roots):
    """``{run dir: (signature, live)}`` from the roots' current catalogs (read only)."""
    from ..rundir.catalog import current_signatures
    out = {}
    for root in roots:
        if os.path.isdir(root):
            out.update(current_signatures(root))
    return out


def _is_live(run_dir, signature=None, known=None):
    """Whether a run's logs may still grow: run.json says ``running``, or is unreadable
    (mid-write, damaged: looked at again on every scan). ``known``: run dir ->
    (signature, live) the catalog read, used when ``signature`` (found_runs') is that one."""
    from ..rundir.meta import read_meta
    if known and signature is not None and run_dir in known:
        catalog_signature, live = known[run_dir]
        if catalog_signature == _joined(signature):
            return live
    try:
        return read_meta(run_dir).get("status") == "running"
    except Exception:   # noqa: BLE001 - any damage means "look again"
        return True


def _joined(signature):
    """found_runs' ``[size, mtime, inode, kind]`` per file as the catalog writes it."""
    parts = [":".join(map(str, signature[i:i + 4])) for i in range(0, len(signature), 4)]
    return "|".join(parts + ["-"] * (2 - len(parts)))


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
    try:
        with schema.open_file(path) as f:
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return []
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")[:-1]   # the last piece is a line not yet ended
    return [line.rstrip("\r").split(",") for line in lines if line]


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
