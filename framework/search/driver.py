"""Driving a study: check everything, then run trials in worker processes.

Each of ``workers`` child processes (``python -m mindexp _tune_worker``)
imports MindSpore once and claims trials from the shared storage one after
another, training each in-process exactly as ``mindexp run`` does, its
output in ``<study>/logs/trial-<n>.log``. Nothing but the storage ties the
workers together, which is why two ``mindexp tune`` commands, on this
machine or on two sharing the storage, simply cooperate on one study.
(The sweep's workers take one ``mindexp run`` command line per task from
their parent; here the storage hands out the work instead, so the same
worker code serves one machine and several.)

SIGINT/SIGTERM: the driver forwards one SIGTERM to each worker (they run in
their own sessions so a terminal's Ctrl-C reaches only the driver); each
stops its run after the current step (status interrupted), tells the study
the trial failed with ``interrupted`` set, and exits. A second signal is
forwarded again (the runs stop at once), a third kills the workers.
A driver killed outright (SIGKILL) cannot forward anything: the kernel
sends each worker SIGTERM when its parent dies (``children.die_with_parent``),
with the same outcome. A worker killed outright leaves its trial RUNNING
until :func:`.liveness.fail_dead_trials` fails it (here once the workers
are gone, and before every claim of a trial).
"""
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time

from .children import die_with_parent
from ..errors import ConfigError
from .space import parse_duration, parse_space
from .study import (LOGS, TuneSpec, check_choices, default_storage, grid_space,
                    import_optuna, load_study, spec_space, study_dir)

logger = logging.getLogger(__name__)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_spec(exp_cls, entry, space, objective, trials, direction=None, sampler="tpe",
              pruner="median", seed=None, timeout=None, study=None, storage=None, base=None,
              out="outputs"):
    """Check every input (ConfigError, nothing created) and return the :class:`TuneSpec`
    (``direction`` None: inferred from the objective's name)."""
    import_optuna()
    check_choices(sampler, pruner, trials)
    base = dict(base or {})
    exp = exp_cls(base)  # the fixed values alone must make a valid experiment
    params = parse_space(space, exp_cls, base)
    both = [name for name in params if name in base]
    if both:
        raise ConfigError(f"config field {both[0]!r} is given by both --param and --set; keep "
                          f"one. Received: --param {both[0]}=..., --set {both[0]}=...",
                          field=both[0])
    from .objective import resolve_objective
    found = resolve_objective(exp, objective, direction)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ConfigError(f"--seed must be an integer >= 0. Received: --seed {seed!r}",
                          field="seed")
    name = _check_study_name(study or exp_cls.experiment_name())
    folder = study_dir(out, name)
    spec = TuneSpec(entry=entry, experiment=exp_cls.experiment_name(), study=name,
                    study_dir=folder, storage=_storage(storage, folder), space=spec_space(params),
                    objective=objective, direction=found.direction, base=base, trials=trials,
                    sampler=sampler, pruner=pruner, seed=seed, timeout_s=parse_duration(timeout),
                    direction_inferred=found.inferred)
    if sampler == "grid":
        grid_space(spec.space)
    return spec


def _check_study_name(name):
    from ..rundir.io import check_label
    try:
        return check_label(name)
    except ConfigError:
        raise ConfigError("--study must be 1-64 characters of letters, digits, '.', '_', '-', "
                          f"'+', '=' (it names a folder). Received: --study {name!r}",
                          field="study") from None


def _storage(storage, folder):
    if storage is None:
        return default_storage(folder)
    if "://" in storage:
        return storage
    path = os.path.abspath(storage)
    if os.path.isdir(path):
        raise ConfigError(f"--storage must be an RDB URL or a journal file, not a folder. "
                          f"Received: --storage {storage}", field="storage")
    return path


def start(spec):
    """Create the study folder and the study (or load it to continue); returns the study."""
    from .liveness import fail_dead_trials
    study = load_study(spec, create=True)  # first: a storage that cannot be had creates nothing
    os.makedirs(os.path.join(spec.study_dir, LOGS), exist_ok=True)
    if spec.timeout_s:
        spec.deadline = time.time() + spec.timeout_s
    fail_dead_trials(study)  # so that they are not counted as run
    return study


def run_workers(spec, workers, on_line=None):
    """Run ``workers`` worker processes on the study until they finish; returns
    the first signal received (None when none was)."""
    procs = [_spawn(spec, k) for k in range(workers)]
    forward = _Forwarding(procs)
    with forward:
        _relay(procs, on_line)
        for proc in procs:
            proc.wait()
    from .liveness import fail_dead_trials
    fail_dead_trials(load_study(spec))  # a worker killed outright left its trial RUNNING
    return forward.signum


def _spawn(spec, index):
    log = os.path.join(spec.study_dir, LOGS, f"worker-{platform.node()}-{os.getpid()}-{index}.log")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("GLOG_v", "3")
    with open(log, "a", encoding="utf-8") as stderr:
        return subprocess.Popen([sys.executable, "-m", "mindexp", "_tune_worker", spec.to_json(),
                                 str(index)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr, env=env, text=True, start_new_session=True,
                                preexec_fn=die_with_parent())


def _relay(procs, on_line):
    """Pass each worker's progress lines (one JSON object each) to ``on_line``."""
    threads = [threading.Thread(target=_read_lines, args=(p, on_line), daemon=True) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # short joins: signals are handled in the main thread meanwhile


def _read_lines(proc, on_line):
    for line in proc.stdout:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if on_line:
            on_line(event)


class _Forwarding:
    """SIGINT/SIGTERM in the driver: remember the first, forward SIGTERM (third: SIGKILL)."""

    def __init__(self, procs):
        self.procs, self.signum, self.count, self.saved = procs, None, 0, {}

    def handler(self, signum, frame):
        self.signum = self.signum or signum
        self.count += 1
        logger.warning("signal %s: stopping the study after the current step of each trial",
                       signum)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if self.count < 3 else signal.SIGKILL)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self.handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self.saved.items():
            signal.signal(sig, old)
        return False
