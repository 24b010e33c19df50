"""A summary index per output root: listing 10,000 runs without reading 20,000 JSON files.

``mindexp runs``, ``compare()`` and the dashboard need each run's run.json
and config.json. The index (:data:`schema.SUMMARY_INDEX`, in the folder
that was listed) keeps both for every run, keyed by the run's folder and
the signature (size, modification time, inode) of the two files. It is
never the source of truth: the runs are always found on disk (one ``stat``
per run), an entry is used only while both files' signatures match, a run
that left the disk is never listed, and a missing, damaged or foreign
index costs only the time to read every run again (it is rewritten,
atomically, when that is allowed).
"""
import hashlib
import json
import os
import stat

from ..callbacks import schema
from .run import Run

INDEX_VERSION = 1


def indexed_runs(path: str | os.PathLike, write: bool = True) -> list[Run]:
    """The runs at or below the folder ``path``, as :class:`Run` objects whose
    ``meta`` and ``config`` are filled from the index when it is current.

    A run whose run.json or config.json cannot be read comes back unfilled
    (reading it raises as usual). ``write``: update the index file when it
    changed (a reader that must never write, like the dashboard, says False).
    """
    root = os.path.abspath(os.fspath(path))
    old = _read_index(root)
    entries, runs = {}, []
    for run_dir, signature in found_runs(root):
        rel = run_dir[len(root) + 1:]   # found below root: a plain slice, not relpath
        entry = old.get(rel)
        if entry is None or entry.get("signature") != signature:
            entry = _entry(Run.found(run_dir), signature)
        if entry is not None:
            entries[rel] = entry
            runs.append(Run.found(run_dir, entry["meta"], entry["config"]))
        else:
            runs.append(Run.found(run_dir))
    if write and entries != old:
        _write_index(root, entries)
    return runs


def found_runs(root: str) -> list[tuple[str, list[int]]]:
    """``(run_dir, signature)`` of every run below ``root``, in sorted order, as
    reports find them (a folder with run.json; hidden folders skipped; a run's
    own subfolders not searched): one stat per folder instead of a listing."""
    found, stack = [], [root]
    while stack:
        folder = stack.pop()
        signature = _signature(folder)
        if signature is not None:
            found.append((folder, signature))
            continue
        try:
            with os.scandir(folder) as entries:
                stack.extend(e.path for e in entries
                             if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    return sorted(found)


def _signature(folder):
    """``[size, mtime_ns, inode]`` of run.json and config.json, or None when
    ``folder`` holds no run.json (config.json may be missing: ``[]``).

    Not followed (``lstat``): a link, FIFO or folder named run.json still
    makes a run, which its reader reports as unreadable."""
    out = []
    for name in (schema.RUN_JSON, schema.CONFIG_JSON):
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            if name == schema.RUN_JSON:
                return None
            continue
        out += [st.st_size, st.st_mtime_ns, st.st_ino, stat.S_IFMT(st.st_mode)]
    return out


def _entry(run, signature):
    """An index entry read from the run's files, or None when they cannot be read."""
    from ..errors import RunDirError
    try:
        meta, config = run.meta, run.config
    except (RunDirError, OSError, ValueError):
        return None
    # signature taken before the read: a write in between makes it stale, never wrong
    return {"signature": signature, "meta": meta, "config": config}


def _read_index(root):
    """The index's entries, or {} when it is missing, damaged, edited or of another
    version. Two lines: a header with the SHA-1 of the second, the entries: a
    checksum instead of validating 10,000 run.json copies again (the entries
    were validated when read from the runs)."""
    try:
        with schema.open_file(os.path.join(root, schema.SUMMARY_INDEX)) as f:
            head, _, body = f.read().partition(b"\n")
        header = json.loads(head)
        if header.get("version") != INDEX_VERSION or \
                header.get("sha1") != hashlib.sha1(body).hexdigest():
            return {}
        runs = json.loads(body)
        return runs if isinstance(runs, dict) else {}
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return {}


def _write_index(root, entries):
    """Write the index atomically; a read-only folder or a full disk only costs time later."""
    body = json.dumps(entries, separators=(",", ":"), allow_nan=True, default=str).encode()
    head = json.dumps({"version": INDEX_VERSION, "sha1": hashlib.sha1(body).hexdigest()})
    try:
        schema.atomic_write(os.path.join(root, schema.SUMMARY_INDEX), head.encode() + b"\n" + body)
    except OSError:
        pass
