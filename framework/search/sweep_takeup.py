"""Continuing a sweep: the unfinished sweep.json of the same command found
under the output root, and the record of an older sweep (mindexp 0.2, which
had no study) turned into trials."""
from __future__ import annotations

import contextlib
import fcntl
import glob
import os
from typing import Any, Iterator

from ..errors import MindexpError
from ..rundir.groups import under_root
from .grid import SweepSpec, add_trial
from .sweep_record import SWEEP_JSON, read_record

SWEEPS = "sweeps"
# What makes two sweeps the same command (a rerun continues the unfinished one).
IDENTITY = ("experiment", "spec", "grid", "set", "config_file", "name")


def find_unfinished(out: str, identity: dict, points: list[dict]) -> tuple[str, dict] | None:
    """``(folder, record)`` of the newest unfinished sweep under ``out`` whose
    IDENTITY fields are ``identity`` and whose points are ``points`` (in that
    order), its run folders pointed under ``out``; None when there is none.
    RunDirError when such a record names a run folder outside ``out``."""
    for path in sorted(glob.glob(os.path.join(out, SWEEPS, "*", SWEEP_JSON)),
                       reverse=True):     # sweep ids start with the time
        record = read_record(path)
        if record is None or not _takes_up(record, identity, points):
            continue
        for entry in record["runs"]:
            _relocate(entry, out, path)
        return os.path.dirname(path), record
    return None


@contextlib.contextmanager
def sweeps_locked(out: str) -> Iterator[None]:
    """Held while a command finds the unfinished sweep of its command or makes a
    new one, until that one's sweep.json is written: an ``flock`` on the folder
    ``<out>/sweeps`` itself (no lock file beside the sweeps). So one sweep owns
    a command's identity: the same command started twice at once makes one
    sweep, which the later one joins (it finds the first's record). A
    ``sweeps`` folder made here and still empty is removed on the way out."""
    folder = os.path.join(out, SWEEPS)
    made = not os.path.lexists(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise MindexpError(f"cannot start the sweep in {folder}: {exc.strerror} (it must be "
                           "a folder, not a link)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only when empty: a refused --resume leaves nothing


def import_record(study: Any, spec: SweepSpec, record: dict) -> None:
    """Trials for what an older sweep.json recorded: its finished points
    stay, its interrupted runs resume, its earlier attempts stay named."""
    for index, entry in enumerate(record["runs"]):
        for previous in entry["previous_runs"]:
            add_trial(study, spec, index, {"run_dir": previous,
                      "status": "failed", "retired": True}, state="FAIL")
        status, run_dir = entry.get("status"), entry.get("run_dir")
        if run_dir is None or status in ("pending", "not started"):
            continue
        status = {"running": "interrupted"}.get(status, status)
        attrs = {k: entry.get(k) for k in ("run_id", "error", "final_loss")
                 if entry.get(k) is not None}
        add_trial(study, spec, index, {**attrs, "run_dir": run_dir,
                  "status": status}, state="COMPLETE" if status == "completed" else "FAIL",
                  value=0.0 if status == "completed" else None)


def _takes_up(record, identity, points):
    """``record`` is an unfinished sweep of this same command."""
    return record.get("status") != "completed" and \
        {k: record.get(k) for k in IDENTITY} == identity and \
        _matches_points(record, identity["grid"], points)


def _matches_points(record, grid, points):
    entries = record.get("runs")
    return isinstance(entries, list) and len(entries) == len(points) and all(
        isinstance(e, dict) and e.get("values") == values
        for e, values in zip(entries, points)) and \
        list(record.get("grid") or {}) == list(grid)   # same order of points


def _relocate(entry, out, path):
    """Point ``entry``'s run folders at their place under ``out``; RunDirError
    when one resolves outside it (a continued sweep writes there)."""
    refused = (path, "refusing to continue that sweep")
    entry["run_dir"] = under_root(out, entry.get("run_dir"), refused)
    previous = entry.get("previous_runs")
    entry["previous_runs"] = [under_root(out, p, refused) for p in previous] \
        if isinstance(previous, list) else []
