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
sets one), which :func:`mindexp.search.study.counted` does not count: a
command still running replaces it (it waits for the trials running elsewhere,
:func:`wait_for_others`), and a rerun runs it anew. Its user attributes say
whose it was: ``error`` names the dead worker's host, pid and run folder,
``dead_worker`` holds them.

Two environment variables: :data:`HOST_VARIABLE` names this machine in a
shared storage (default: its host name; two workers on one host must agree
on it, their locks are only visible there), :data:`GRACE_VARIABLE` sets the
grace in seconds (default :data:`GRACE_S`; the heartbeat then comes at least
four times within it). Every machine sharing a storage must use one grace.
"""
import contextlib
import fcntl
import logging
import os
import platform
import threading
import time
import warnings

from .. import layout
from ..rundir.run_lock import lock_held

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10  # how often a worker records that its trial is alive (at most)
GRACE_S = 60      # silence after which a trial's worker is taken for dead (default)
DEAD_WORKER = "its worker died before the trial ended"
BEAT_ATTR = "mindexp:heartbeat"  # a journal trial's last sign of life (seconds since the epoch)
DEAD_ATTR = "dead_worker"        # a trial failed for its dead worker: {host, pid, run_dir}
HOST_VARIABLE = "MINDEXP_HOST"
GRACE_VARIABLE = "MINDEXP_HEARTBEAT_GRACE_S"
WAIT_POLL_S = 1.0  # how often a command waiting for trials elsewhere reads the storage


def host() -> str:
    """This machine's name in a shared storage: ``$MINDEXP_HOST`` or the host name."""
    return os.environ.get(HOST_VARIABLE) or platform.node()


def grace_s() -> float:
    """The silence after which a trial's worker is taken for dead (``$MINDEXP_HEARTBEAT_GRACE_S``
    seconds, default GRACE_S; a value that is not a number > 0 is ignored with a warning)."""
    text = os.environ.get(GRACE_VARIABLE)
    try:
        value = float(text) if text else GRACE_S
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        logger.warning("%s must be a number of seconds > 0; using %s. Received: %r",
                       GRACE_VARIABLE, GRACE_S, text)
        return GRACE_S
    return value


def heartbeat_s() -> float:
    """How often a worker records its trial's heartbeat: four times within the grace."""
    return min(HEARTBEAT_S, grace_s() / 4)


def rdb_heartbeat():
    """The RDBStorage keywords turning Optuna's heartbeat on (whole seconds)."""
    return {"heartbeat_interval": max(1, round(heartbeat_s())),
            "grace_period": max(1, round(grace_s()))}


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
    name = layout.WORKER_LOCK.format(host=host(), pid=os.getpid())
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
    """Record the trial's heartbeat every :func:`heartbeat_s` seconds during the
    block (nothing on a storage without heartbeats)."""
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
    stop, every = threading.Event(), heartbeat_s()

    def beat():
        while True:
            try:
                record(trial_id)
            except Exception as exc:  # noqa: BLE001  a busy database: try again next time
                logger.warning("could not record the heartbeat of a trial: %s", exc)
            if stop.wait(every):
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
    on this host), naming that worker; returns their numbers."""
    import optuna
    from optuna.storages._heartbeat import is_heartbeat_enabled
    storage = study._storage
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    # Optuna's own rule (its fail_stale_trials), but failed here so that the trial names its worker
    stale = set(storage._get_stale_trial_ids(study._study_id)) \
        if is_heartbeat_enabled(storage) else set()
    me, journal = host(), _is_journal(storage)
    failed = []
    for trial in running:
        lock = trial.user_attrs.get("lock")
        if trial._trial_id in stale:
            why = f"no heartbeat for more than {grace_s():g} s"
        elif trial.user_attrs.get("host") == me and isinstance(lock, str) and not lock_held(lock):
            why = "its worker lock is free"
        elif journal and _silent(trial):
            why = f"no heartbeat for more than {grace_s():g} s"
        else:
            continue
        if _fail(study, trial, why):
            failed.append(trial.number)
    return sorted(failed)


def wait_for_others(study, room, stop, deadline=None):
    """Wait while trials run elsewhere (other workers, other machines) and the
    budget is used up, failing those whose worker died; True once ``room()``
    says the budget has room again (a dead trial failed, a trial interrupted),
    False once nothing runs, or on a signal (``stop.signum``) or ``deadline``."""
    import optuna
    while stop.signum is None and (deadline is None or time.time() < deadline):
        fail_dead_trials(study)
        if room():
            return True
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            return False
        time.sleep(WAIT_POLL_S)
    return False


def _is_journal(storage):
    import optuna
    return isinstance(storage, optuna.storages.JournalStorage)


def _silent(trial):
    """A journal trial whose last heartbeat is older than the grace (one with
    none, from an older mindexp, is left alone)."""
    beat = trial.system_attrs.get(BEAT_ATTR)
    return isinstance(beat, (int, float)) and time.time() - beat > grace_s()


def dead_worker_error(attrs):
    """The ``error`` of a trial failed for its dead worker, naming it."""
    dead = attrs.get(DEAD_ATTR)
    if not isinstance(dead, dict):
        return DEAD_WORKER
    run = f", run {dead['run_dir']}" if dead.get("run_dir") else ""
    return (f"{DEAD_WORKER} (host {dead.get('host')}, pid {dead.get('pid')}{run}; "
            f"{dead.get('why')})")


def _fail(study, trial, why):
    """FAIL ``trial`` naming its dead worker; False when it had ended meanwhile."""
    import optuna
    attrs = trial.user_attrs
    dead = {"host": attrs.get("host"), "pid": attrs.get("pid"), "run_dir": attrs.get("run_dir"),
            "why": why, "failed_by": host()}
    storage = study._storage
    try:
        storage.set_trial_user_attr(trial._trial_id, DEAD_ATTR, dead)
        storage.set_trial_user_attr(trial._trial_id, "error",
                                    dead_worker_error({DEAD_ATTR: dead}))
        return storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False  # another process failed it first, or its worker told it after all
