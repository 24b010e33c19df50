"""Groups of runs: a sweep's folder (sweep.json) and a tune study's (study.json),
and the run directories their index names."""
from __future__ import annotations

import os
from typing import Any, Iterator

from ..errors import RunDirError
from .io import inside, is_run_dir, read_json

STUDIES = "studies"          # <out>/studies/<study>/: a tune study's folder
STUDY_JOURNAL = "journal.log"  # a study's own Optuna journal in its folder (the default storage)
# The index files of a group of runs: a sweep's, and a tune study's.
INDEX_FILES = ("sweep.json", "study.json")
# Where an index keeps its runs (a list of objects with run_dir and/or run_id).
INDEX_LISTS = ("runs", "trials")


def index_name(folder: str | os.PathLike[str]) -> str | None:
    """The index file a sweep or study folder holds (None: not such a folder)."""
    for name in INDEX_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return name
    return None


def group_kind(folder: str | os.PathLike[str]) -> str | None:
    """``"sweep"`` for a sweep's folder (sweep.json), ``"study"`` for a tune study's
    (``<out>/studies/<study>/``), None for any other path."""
    folder = os.path.abspath(os.fspath(folder))
    if not os.path.isdir(folder):
        return None
    if os.path.isfile(os.path.join(folder, INDEX_FILES[0])):
        return "sweep"
    if os.path.basename(os.path.dirname(folder)) == STUDIES:
        return "study"
    return None


def index_runs(folder: str | os.PathLike[str], previous: bool = True,
               refusal: str = "refusing to read it") -> list[str]:
    """The run directories a sweep or study folder's index names (those that
    exist); with ``previous``, also the earlier attempts at each point.

    An index records absolute paths; a run is looked up by its place under the
    index's own output root (``<out>/<experiment>/<run_id>`` beside
    ``<out>/sweeps/<id>/``), so an output folder copied or moved elsewhere
    never points at the original runs. A path that resolves outside the root
    (``../x``, a symlink) is refused: RunDirError ending in ``refusal``.
    """
    folder = os.fspath(folder)
    index = os.path.join(folder, index_name(folder) or INDEX_FILES[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(folder)))
    found = []
    for entry in entries(read_json(index)):
        named = [entry.get("run_dir")] + (_strings(entry.get("previous_runs")) if previous else [])
        for run_dir in named:
            there = under_root(root, run_dir, refused=(index, refusal))
            if there and is_run_dir(there):
                found.append(there)
    return found


def under_root(root: str, run_dir: object, refused: tuple[str, str] | None = None) -> str | None:
    """``<root>/<experiment>/<run_id>`` for a run folder that an index or a trial
    names: the same run under this output root (another machine's, or a moved
    root, names it elsewhere). None when ``run_dir`` names no run folder, or one
    that resolves outside ``root`` (``..``, a symlink); with ``refused``
    (``(the index's path, what is refused)``) that is RunDirError instead."""
    key = layout_key(run_dir) if isinstance(run_dir, str) else None
    if not key or not all(key):
        return None
    there = os.path.join(os.path.abspath(root), *key)
    if inside(root, there):
        return there
    if refused:
        raise RunDirError(f"{refused[0]} names a run outside the output root {root}; "
                          f"{refused[1]}. Received: {run_dir!r}")
    return None


def open_journal(path: str) -> Any:
    """Optuna's storage over the journal file ``path`` (a study's or a sweep's
    default storage; its lock is ``open(O_CREAT|O_EXCL)``, which needs no server)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.storages.JournalStorage(JournalFileBackend(path,
                                                             lock_obj=JournalFileOpenLock(path)))


def entries(data: object) -> Iterator[dict]:
    """The run entries of an index's JSON (objects only)."""
    for key in INDEX_LISTS:
        for entry in (data.get(key) or []) if isinstance(data, dict) else []:
            if isinstance(entry, dict):
                yield entry


def layout_key(run_dir: str | None) -> tuple[str, str] | None:
    """``(experiment folder, run id)``: the last two parts of a run directory."""
    if not run_dir:
        return None
    run_dir = os.path.normpath(run_dir)
    return os.path.basename(os.path.dirname(run_dir)), os.path.basename(run_dir)


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
