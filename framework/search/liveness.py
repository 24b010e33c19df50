"""Whether a RUNNING trial still has a live worker, and failing those that do not.

A worker that dies without telling the study (SIGKILL, the machine going
down) leaves its trial RUNNING. Two signs tell such a trial from one still
training:

* Optuna's heartbeat, on storages that support it (``RDBStorage``; Optuna's
  ``JournalStorage`` has none): each worker records a heartbeat every
  :data:`HEARTBEAT_S` seconds while it runs a trial, and
  ``optuna.storages.fail_stale_trials`` fails a trial silent for longer than
  :data:`GRACE_S`. This works across machines.
* On a journal file (which has no heartbeat of Optuna's), the same rule by
  hand: the worker writes the time into the trial's system attribute
  :data:`BEAT_ATTR` every :data:`HEARTBEAT_S` seconds, and a RUNNING trial of
  another host silent for longer than :data:`GRACE_S` is failed. The times
  are the hosts' clocks: machines sharing a journal must agree on the time
  to well within GRACE_S (NTP does).
* On the worker's own machine, a lock: each worker holds an ``flock`` on
  ``<study>/logs/worker-<host>-<pid>.lock`` while it lives and names that file
  in its trials (user attribute ``lock``). The kernel drops the lock when
  the process ends in any way, so a RUNNING trial of this host whose lock
  can be taken has a dead worker. This covers the journal file.

Such a trial is told FAIL without a ``status`` (only a worker's own outcome
sets one), which :func:`mindexp.search.study.counted` does not count: a rerun
runs it anew.
"""
import contextlib
import fcntl
import logging
import os
import platform
import threading
import time
import warnings

from ..callbacks import schema
from ..rundir.run_lock import lock_held

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10  # how often a worker records that its trial is alive
GRACE_S = 60      # silence after which a trial's worker is taken for dead
DEAD_WORKER = "its worker died before the trial ended"
BEAT_ATTR = "mindexp:heartbeat"  # a journal trial's last sign of life (seconds since the epoch)


def rdb_heartbeat():
    """The RDBStorage keywords turning Optuna's heartbeat on."""
    return {"heartbeat_interval": HEARTBEAT_S, "grace_period": GRACE_S}


@contextlib.contextmanager
def quiet_heartbeat():
    """Optuna warns that its heartbeat is experimental and meant for
    ``Study.optimize``; we drive it ourselves around ask/tell."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Hh]eartbeat.*")
        warnings.filterwarnings("ignore", message=".*experimental.*")
        yield


@contextlib.contextmanager
def worker_lock(study_dir):
    """Hold this process's worker lock for the block; yields the lock file's path."""
    name = schema.WORKER_LOCK.format(host=platform.node(), pid=os.getpid())
    path = os.path.join(study_dir, "logs", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


@contextlib.contextmanager
def heartbeat(study, trial_id):
    """Record the trial's heartbeat every HEARTBEAT_S seconds during the block
    (nothing on a storage without heartbeats)."""
    storage = study._storage
    from optuna.storages._heartbeat import is_heartbeat_enabled
    if is_heartbeat_enabled(storage):
        record = storage.record_heartbeat
    elif _is_journal(storage):
        def record(trial):
            storage.set_trial_system_attr(trial, BEAT_ATTR, time.time())
    else:
        yield
        return
    stop = threading.Event()

    def beat():
        while True:
            try:
                record(trial_id)
            except Exception as exc:  # noqa: BLE001  a busy database: try again next time
                logger.warning("could not record the heartbeat of a trial: %s", exc)
            if stop.wait(HEARTBEAT_S):
                return
    thread = threading.Thread(target=beat, name="mindexp-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_dead_trials(study):
    """FAIL every RUNNING trial whose worker is dead (by heartbeat, or by lock
    on this host); returns their numbers."""
    import optuna
    from optuna.storages import fail_stale_trials
    before = {t.number for t in study.get_trials(deepcopy=False,
                                                  states=(optuna.trial.TrialState.RUNNING,))}
    with quiet_heartbeat():
        fail_stale_trials(study)
    host, journal = platform.node(), _is_journal(study._storage)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        lock = trial.user_attrs.get("lock")
        if trial.user_attrs.get("host") == host and isinstance(lock, str) and not lock_held(lock):
            _fail(study, trial)
        elif journal and _silent(trial):
            _fail(study, trial)
    still = {t.number for t in study.get_trials(deepcopy=False,
                                                 states=(optuna.trial.TrialState.RUNNING,))}
    return sorted(before - still)


def _is_journal(storage):
    import optuna
    return isinstance(storage, optuna.storages.JournalStorage)


def _silent(trial):
    """A journal trial whose last heartbeat is older than GRACE_S (one with
    none, from an older mindexp, is left alone)."""
    beat = trial.system_attrs.get(BEAT_ATTR)
    return isinstance(beat, (int, float)) and time.time() - beat > GRACE_S


def _fail(study, trial):
    import optuna
    try:
        study._storage.set_trial_user_attr(trial._trial_id, "error", DEAD_WORKER)
        study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        pass  # another process failed it first, or its worker told it after all
