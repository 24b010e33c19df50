"""run.json: the record of one run, its only writer.

Created ``running`` before training, updated by the resumes and at the end
(``completed``, ``failed``, ``interrupted``, ``diverged``), always written
atomically. A failure keeps its one-line ``error`` (the training session
keeps the full traceback in ``error.txt``, see ``train/failures.py``;
``traceback`` here is kept in run.json only when a caller gives it). An
interrupted run names the signal in ``signal`` (``SIGINT``, ``SIGTERM``).
"""
import contextlib
import fcntl
import logging
import os
import platform
import time

from ..callbacks import schema
from .. import layout
from ..errors import RunDirError
from .store import run_written
from .io import now_iso, write_json
from .meta import read_meta
from .run_lock import take_lock

logger = logging.getLogger(__name__)

# changed by mindexp tag / note / mlflow, also while a run trains
USER_FIELDS = ("tags", "note", "mlflow")
# Fields a resumed run carries over (a tuning trial stays one).
RESUME_KEEPS = ("study", "trial", "tuned")


class RunRecord:
    """run.json of ``run_dir`` as a dict (``meta``), and its transitions.

    ``writer``: False on ranks other than 0, which keep the record in memory
    only (rank 0 alone writes the run directory).
    """

    def __init__(self, run_dir, meta, writer=True):
        self.run_dir, self.meta, self.writer = run_dir, meta, writer

    @classmethod
    def new(cls, run_dir, experiment, entry, config, targets, writer=True, tags=(), note=None,
            fields=None):
        """A record of a run starting now (status ``running``), not yet written.

        ``tags``/``note``: the user's labels; ``fields``: more entries of the
        caller's (a tuning trial's ``study``, ``trial``, ``tuned``)."""
        import numpy
        meta = {
            "experiment": experiment,
            "run_id": os.path.basename(run_dir),
            "entry": entry,
            "status": "running",
            "started_at": now_iso(),
            "ended_at": None,
            "steps": 0,
            "epochs": 0,
            "final_loss": None,
            "train_time_s": None,
            "steps_per_s": None,
            "device": config.device,
            "mode": config.mode,
            "workers": config.workers,
            "pid": os.getpid(),  # shown only: liveness is the run lock (run_lock)
            "host": platform.node(),
            "versions": {"mindspore": _mindspore_version(), "numpy": numpy.__version__,
                         "python": platform.python_version()},
            "targets": dict(targets or {}),
            "tags": list(tags or []),
            "note": note,
            "params": {},
            "error": None,
            **(fields or {}),
            "stop_reason": None,
        }
        return cls(run_dir, meta, writer)

    @classmethod
    def read(cls, run_dir):
        """The record on disk (RunDirError when missing or malformed)."""
        return cls(run_dir, read_meta(run_dir, require=("entry",)))

    @property
    def status(self):
        return self.meta.get("status")

    def write(self):
        """Write run.json atomically (nothing on a rank that does not write)."""
        if self.writer:
            write_keeping_user_fields(self.run_dir, self.meta)

    def write_config(self, config_dict):
        """Write config.json (the full resolved config) atomically."""
        if self.writer:
            write_json(os.path.join(self.run_dir, layout.CONFIG_JSON), config_dict)
            run_written(self.run_dir)

    def resumed_from(self, previous, step, checkpoint):
        """Continue ``previous`` (the old run.json): its start, its time, one more resume."""
        self.meta.update({k: previous[k] for k in RESUME_KEEPS if k in previous})
        self.meta.pop("summary", None)  # the logs change: written again when this run ends
        self.meta.update(
            started_at=previous.get("started_at", self.meta["started_at"]),
            train_time_s=previous.get("train_time_s"),
            resumes=previous.get("resumes", []) + [
                {"at": now_iso(), "step": step,
                 "checkpoint": os.path.relpath(checkpoint, self.run_dir),
                 "previous_status": previous.get("status")}])

    def running(self, **fields):
        """Status ``running`` again (a launcher hands the run to its workers)."""
        self.meta.update(status="running", **fields)
        self.meta.pop("summary", None)  # the logs will change: written again at the end
        self.write()

    def failed(self, error, traceback=None):
        """Status ``failed`` with a one-line ``error`` (and the full ``traceback``
        when given), ended now; not written (the caller finishes the record)."""
        self.meta.update(status="failed", error=error, ended_at=now_iso())
        if traceback is not None:
            self.meta["traceback"] = traceback

    def ended(self, status, **fields):
        """The run ended with ``status``; ``fields`` are its totals."""
        self.meta.update(status=status, ended_at=now_iso(), **fields)


# How long ``tag``/``note`` wait for the write lock: each holder keeps it for
# one read-change-write of run.json (milliseconds).
WRITE_LOCK_WAIT_S = 10.0


@contextlib.contextmanager
def locked(run_dir, wait_s=None):
    """Hold the run's short write lock (a ``flock`` on ``<run_dir>/.run.lock``),
    waiting for it without end, or ``wait_s`` seconds (then RunDirError).

    Not the run's liveness lock (``run_lock``): this one is held only for
    each read-change-write of run.json."""
    try:  # never through a link (it would create or lock a file elsewhere)
        fd = schema.open_fd(os.path.join(run_dir, layout.RUN_LOCK), os.O_RDWR | os.O_CREAT)
    except schema.NotAFileError as exc:
        raise RunDirError(f"cannot update {os.path.join(run_dir, layout.RUN_JSON)}: its write "
                          f"lock {exc}; remove it (mindexp creates it itself)") from None
    try:
        _wait_for_lock(fd, run_dir, wait_s)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# Checks of a stop asked of this process (a SIGTERM its run noted): each returns
# the signal's number or None. An endless wait for a write lock polls them.
_STOP_CHECKS = []
# Once a stop is asked, how much longer the wait goes on: a tag or a note holds
# the lock for milliseconds; a holder past this is not one of them.
STOP_GRACE_S = 2.0


class StoppedWaitingError(SystemExit):
    """A stop (SIGINT/SIGTERM) came while another process held the run's write
    lock: the process exits ``128 + signal`` with run.json as it was."""


@contextlib.contextmanager
def stop_waiting_when(check):
    """While the block runs, an endless wait for a run's write lock gives up
    (:class:`StoppedWaitingError`) once ``check()`` returns a signal number and
    the lock stayed held :data:`STOP_GRACE_S` longer: a process holding
    ``.run.lock`` for good can no longer make a run ignore SIGTERM."""
    _STOP_CHECKS.append(check)
    try:
        yield
    finally:
        _STOP_CHECKS.remove(check)


def _stop_asked():
    for check in list(_STOP_CHECKS):
        signum = check()
        if signum is not None:
            return signum
    return None


def _wait_for_lock(fd, run_dir, wait_s):
    if wait_s is None:
        _wait_until_stopped(fd, run_dir)
        return
    if not take_lock(fd, fcntl.LOCK_EX, wait_s):
        raise RunDirError(f"cannot update {os.path.join(run_dir, layout.RUN_JSON)}: another "
                          f"process kept its write lock ({layout.RUN_LOCK}) for {wait_s:g} s; "
                          "try again")


def _wait_until_stopped(fd, run_dir):
    """Wait for the lock without end, unless a stop is asked meanwhile."""
    give_up_at = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        signum = _stop_asked()
        if signum is not None and give_up_at is None:
            give_up_at = time.monotonic() + STOP_GRACE_S
        if give_up_at is not None and time.monotonic() >= give_up_at:
            import signal
            name = signal.Signals(signum).name
            logger.warning("%s: stopped while another process holds %s; %s was not updated",
                           name, os.path.join(run_dir, layout.RUN_LOCK), layout.RUN_JSON)
            raise StoppedWaitingError(128 + int(signum))
        time.sleep(0.02)


def update_meta(run_dir, change):
    """Apply ``change(meta)`` to run.json under the run's lock; returns the new meta."""
    path = os.path.join(run_dir, layout.RUN_JSON)
    if not os.path.lexists(path):  # something else in its place: read_meta names it
        raise RunDirError(f"{run_dir} is not a run directory (it has no {layout.RUN_JSON}). "
                          f"Received: {run_dir!r}")
    try:
        with locked(run_dir, WRITE_LOCK_WAIT_S):
            meta = read_meta(run_dir)
            change(meta)
            write_json(path, meta)
    except OSError as exc:
        raise RunDirError(f"cannot update {path}: {exc.strerror}. Received: {run_dir!r}") from None
    run_written(run_dir)
    return meta


def write_keeping_user_fields(run_dir, meta):
    """The runner's write of run.json: tags and notes changed meanwhile on disk win."""
    path = os.path.join(run_dir, layout.RUN_JSON)
    with locked(run_dir):
        try:
            current = read_meta(run_dir)
        except RunDirError:  # damaged on disk: this record replaces it
            current = {}
        meta.update({k: current[k] for k in USER_FIELDS if k in current})
        write_json(path, meta)
    run_written(run_dir)


def _mindspore_version():
    from importlib import metadata
    try:
        return metadata.version("mindspore")
    except metadata.PackageNotFoundError:
        return None
