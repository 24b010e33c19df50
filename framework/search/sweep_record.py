"""A sweep's record, ``sweep.json``: each grid point as it shows there, and
the atomic write that survives a full disk."""
from __future__ import annotations

import os

from ..rundir.io import read_json, write_json
from ..rundir.record import locked
from ..rundir.groups import under_root
from .grid import release_space

SWEEP_JSON = "sweep.json"


class SweepRun:
    """One grid point as sweep.json shows it: its values and what became of it.

    ``previous``: run directories of earlier attempts at this point, which
    ``mindexp rm`` of the sweep removes too; ``attempts``: each earlier
    attempt's run folder, status, host and error (a worker that died names
    itself there, see :mod:`.liveness`).
    """

    def __init__(self, index: int, values: dict, label: str):
        self.index, self.values, self.label = index, values, label
        self.status = "pending"
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.returncode: int | None = None
        self.error: str | None = None
        self.final_loss: float | None = None
        self.pid: int | None = None
        self.log_path: str | None = None
        self.previous: list[str] = []
        self.attempts: list[dict] = []

    def as_dict(self) -> dict:
        """The point's entry in sweep.json."""
        return {"index": self.index, "values": self.values, "label": self.label,
                "status": self.status, "run_id": self.run_id, "run_dir": self.run_dir,
                "final_loss": self.final_loss, "returncode": self.returncode,
                "error": self.error, "log": self.log_path, "pid": self.pid,
                "previous_runs": list(self.previous), "attempts": list(self.attempts)}


def apply_answer(run: SweepRun, answer: dict, out: str) -> None:
    """Take what an attempt at ``run`` ended with (a worker's answer, or its
    trial's attributes) into ``run``; run folders land under ``out``."""
    run.status = answer.get("status") or "failed"
    run.run_dir = under_root(out, answer.get("run_dir")) or run.run_dir
    run.run_id = answer.get("run_id") or (os.path.basename(run.run_dir)
                                          if run.run_dir else None)
    run.final_loss, run.returncode = answer.get("final_loss"), answer.get("returncode")
    run.error = None if run.status == "completed" else answer.get("error")


def write_record(folder: str, record: dict) -> str | None:
    """Write ``<folder>/sweep.json`` atomically, under the lock ``mindexp rm``
    takes to drop a removed run from it; None when written, else why not.

    When the write fails (a full disk), the space the sweep set aside is
    given back and the write tried once more; after a second failure
    sweep.json keeps its last whole version.
    """
    try:
        _write_locked(folder, record)
    except OSError as exc:
        if not release_space(folder):
            return _cannot_write(folder, exc)
        try:
            _write_locked(folder, record)
        except OSError as again:
            return _cannot_write(folder, again)
    return None


def read_record(path: str) -> dict | None:
    """A sweep.json as a dict, or None when it cannot be read."""
    try:
        record = read_json(path)
    except Exception:  # noqa: BLE001  (a damaged record is simply not taken up)
        return None
    return record if isinstance(record, dict) else None


def _write_locked(folder, record):
    with locked(folder):
        write_json(os.path.join(folder, SWEEP_JSON), record)


def _cannot_write(folder, exc):
    return f"cannot write {os.path.join(folder, SWEEP_JSON)}: {exc.strerror}"
