"""The run folders declared active in this process, and the hook a log calls
on opening a file: kept apart from the registry (``_registry``), which
imports the schema, which imports ``csv_log``, which calls this."""
from __future__ import annotations

import contextlib
import os
import weakref
from typing import Any, Callable, Iterator

# (folder, the function that registers a log with it), innermost last
_active: list[tuple[str, Callable[[str, str | None], object]]] = []
# per active folder: the logs made inside it, each flushed before a checkpoint of
# the run (a user's own CsvLog too: its rows never lag behind the checkpoint)
_logs: dict[str, Any] = {}


@contextlib.contextmanager
def declared(folder: str, register: Callable[[str, str | None], object]) -> Iterator[str]:
    """``folder`` (absolute) is an active run's while the block runs; a log
    opened inside it is handed to ``register(path, step_column)``."""
    entry = (folder, register)
    _active.append(entry)
    try:
        yield folder
    finally:
        _active.remove(entry)
        if not any(f == folder for f, _ in _active):
            _logs.pop(folder, None)


def note_log(log: Any) -> None:
    """Keep ``log`` (a CsvLog, weakly) with the active run holding its path."""
    folder = holding(log.path)
    if folder is not None:
        _logs.setdefault(folder, weakref.WeakSet()).add(log)


def flush_logs(folder: str) -> None:
    """Flush every log made inside the active run ``folder`` (absolute)."""
    for log in list(_logs.get(folder, ())):
        log.flush()


def holding(path: str | os.PathLike[str]) -> str | None:
    """The innermost active run folder that holds ``path``, or None."""
    target = os.path.abspath(os.fspath(path))
    for folder, _ in reversed(_active):
        if target != folder and os.path.commonpath([folder, target]) == folder:
            return folder
    return None


def register_if_in_run(path: str | os.PathLike[str], step_column: str | None) -> str | None:
    """Register ``path`` with the active run that holds it (what ``CsvLog``
    does on opening a file); that run's folder, or None (nothing registered)."""
    folder = holding(path)
    for active, register in reversed(_active):
        if active == folder:
            register(os.fspath(path), step_column)
            break
    return folder
