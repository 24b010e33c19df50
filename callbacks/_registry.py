"""The logs of a run: every CSV written inside the folder of an active run
registers itself here, so that a resume cuts each one back to its checkpoint,
the user's logs as well as ours.

A runner declares its run folder for the time it trains
(:func:`run_declared`); a :class:`~mindexp.callbacks.CsvLog` that opens a
file inside it registers that file with its step column, and any other
writer calls :func:`register_log`. The registry is persisted in the run
folder (``schema.LOG_REGISTRY``, JSON, replaced atomically and under a lock:
the ranks of a distributed run share it), so a resume in another process
knows every log. Runs made before the registry have no such file
(:func:`registered_logs` answers None).
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Callable, Iterator

from . import _runs, schema
from ._files import atomic_write

try:  # the callbacks stay importable where there is no fcntl (one writer then)
    import fcntl
except ImportError:  # pragma: no cover  (not on Linux or macOS)
    fcntl = None  # type: ignore[assignment]

__all__ = ["register_log", "registered_logs", "run_declared"]

_VERSION = 1
_written: dict[str, dict[str, str | None]] = {}  # per run folder: what this process registered
_holders: dict[str, int] = {}  # per run folder: the thread writing its registry now
_pending: dict[str, dict[str, str | None]] = {}  # logs handed to that write by a re-entry


@contextlib.contextmanager
def run_declared(run_dir: str | os.PathLike[str]) -> Iterator[str]:
    """Declare ``run_dir`` the folder of an active run while the block runs:
    a ``CsvLog`` opened inside it registers itself (and may continue rows
    already there: the run's resume cut them back). Yields the absolute folder."""
    folder = os.path.abspath(os.fspath(run_dir))
    try:
        with _runs.declared(folder, _register_in(folder)):
            yield folder
    finally:
        _written.pop(folder, None)  # another process may change the file before a next run


def _register_in(folder: str) -> Callable[[str, str | None], object]:
    return lambda path, step_column: register_log(path, step_column, run_dir=folder)


def register_log(path: str | os.PathLike[str], step_column: str | None = schema.Col.STEP,
                 run_dir: str | os.PathLike[str] | None = None) -> str:
    """Register the CSV log ``path`` with its run, so that a resume cuts its rows
    after the checkpoint's step (by ``step_column``; None: a log a resume
    leaves as it is). ``run_dir``: the run's folder, by default the active
    run holding ``path``. Returns the run folder; ValueError when no run
    holds ``path``."""
    folder = os.path.abspath(os.fspath(run_dir)) if run_dir is not None else _runs.holding(path)
    target = os.path.abspath(os.fspath(path))
    if folder is None or target == folder or os.path.commonpath([folder, target]) != folder:
        raise ValueError(f"register_log: the log must lie inside a run's folder (an active run, "
                         f"or run_dir=); Received: path={os.fspath(path)!r}, run_dir={run_dir!r}")
    name = os.path.relpath(target, folder).replace(os.sep, "/")
    if _written.get(folder, {}).get(name, "?") != step_column:
        _add(folder, name, step_column)
    return folder


def registered_logs(run_dir: str | os.PathLike[str]) -> dict[str, str | None] | None:
    """``{path inside the run folder: step column or None}`` of every registered
    log, or None for a run made before the registry (no file)."""
    try:
        with open(os.path.join(os.fspath(run_dir), schema.LOG_REGISTRY), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    logs = data.get("logs") if isinstance(data, dict) else None
    if not isinstance(logs, dict):
        raise ValueError(f"{os.path.join(os.fspath(run_dir), schema.LOG_REGISTRY)} is not a log "
                         f"registry (expected {{\"logs\": {{...}}}}); Received: {str(data)[:80]}")
    return {str(k): (None if v is None else str(v)) for k, v in logs.items()}


def _add(folder: str, name: str, step_column: str | None) -> None:
    """Add one log to the folder's registry file: read, change, replace, locked.

    Re-entered on the thread that holds the folder's lock (a signal handler that
    closes a log while this thread writes the registry), the log is handed to the
    outer write instead: a second flock of the folder from this process would wait
    for the first for ever."""
    if _holders.get(folder) == threading.get_ident():
        _pending.setdefault(folder, {})[name] = step_column
        return
    os.makedirs(folder, exist_ok=True)
    with _locked(folder):
        _holders[folder] = threading.get_ident()
        try:
            _write_registry(folder, {name: step_column})
        finally:
            _holders.pop(folder, None)
    _written.setdefault(folder, {})[name] = step_column
    for late, column in _pending.pop(folder, {}).items():  # handed over after the last write
        _add(folder, late, column)


def _write_registry(folder: str, added: dict[str, str | None]) -> None:
    """Read, change, replace the registry until no re-entered log waits for it."""
    logs = registered_logs(folder) or {}
    while added:
        logs.update(added)
        atomic_write(os.path.join(folder, schema.LOG_REGISTRY),
                     json.dumps({"version": _VERSION, "logs": logs}, indent=1, sort_keys=True))
        _written.setdefault(folder, {}).update(added)
        added = _pending.pop(folder, {})


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """An exclusive flock on the run folder itself (no file of its own): the
    ranks of a distributed run register their logs in one registry."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
