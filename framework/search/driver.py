"""Driving workers: check everything, then run trials or grid points in worker processes.

Each of ``workers`` child processes (``python -m mindexp _search_worker``, see
:mod:`.worker`) imports MindSpore once and claims work from the shared
storage one after another (a study's trials, or a sweep's grid points, see
:mod:`.grid`), training each in-process exactly as ``mindexp run`` does,
its output in the study's or sweep's ``logs/``. Nothing but the storage
ties the workers together, which is why two ``mindexp tune`` (or ``mindexp
sweep``) commands, on this machine or on two sharing the storage, simply
cooperate on one study. :class:`Crew` starts the workers and gathers what
they report; ``tune`` and ``sweep`` both drive theirs through it.

Signals follow the one rule of :mod:`.signals` (first: start nothing new,
stop the running runs after their step; second: at once; third: kill).
A driver killed outright (SIGKILL) cannot forward anything: the kernel
sends each worker SIGTERM when its parent dies (``children.die_with_parent``),
with the same outcome. A worker killed outright leaves its trial RUNNING
until :func:`.liveness.fail_dead_trials` fails it (here once the workers
are gone, and before every claim).
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time

from .children import die_with_parent
from .disk import release_space, reserve_space
from .liveness import host
from .signals import Forwarding, handlers
from ..errors import ConfigError
from .space import check_count, parse_duration, parse_space
from .study import (LOGS, TuneSpec, check_choices, grid_space, import_optuna, load_study,
                    spec_space, storage_path, study_dir)

WORKER_COMMAND = "_search_worker"  # the hidden command a worker process runs
# The spec holds the storage URL, perhaps with its password: it goes to the
# worker in its environment (readable by its owner alone), never on its
# command line (readable by every local user in ps and /proc/*/cmdline).
SPEC_VARIABLE = "MINDEXP_WORKER_SPEC"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_spec(exp_cls, entry, space, objective, trials, direction=None, sampler="tpe",
              pruner="median", seed=None, timeout=None, study=None, storage=None, base=None,
              out="outputs"):
    """Check every input (ConfigError, nothing created) and return the :class:`TuneSpec`
    (``direction`` None: inferred from the objective's name)."""
    from ..rundir.io import check_experiment_name, check_label
    import_optuna()
    check_experiment_name(exp_cls.experiment_name())  # names its trials' folder
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
    if seed is not None:
        check_count(seed, 0, "--seed")
    name = check_label(study or exp_cls.experiment_name(), "--study", "study")
    folder = study_dir(out, name)
    spec = TuneSpec(entry=entry, experiment=exp_cls.experiment_name(), study=name,
                    study_dir=folder, storage=storage_path(storage, folder),
                    space=spec_space(params), objective=objective, direction=found.direction,
                    base=base, trials=trials, sampler=sampler, pruner=pruner, seed=seed,
                    timeout_s=parse_duration(timeout), direction_inferred=found.inferred)
    if sampler == "grid":
        grid_space(spec.space)
    return spec


def start(spec):
    """Create the study folder and the study (or load it to continue); returns the study.
    Sets space aside in the folder, so that a full disk can still be told to
    the study (:func:`.disk.reserve_space`; :func:`finish` gives it back)."""
    from .liveness import fail_dead_trials
    study = load_study(spec, create=True)  # first: a storage that cannot be had creates nothing
    os.makedirs(os.path.join(spec.study_dir, LOGS), exist_ok=True)
    if spec.timeout_s:
        spec.deadline = time.time() + spec.timeout_s
    fail_dead_trials(study)  # so that they are not counted as run
    reserve_space(spec.study_dir, spec.trials)
    return study


def finish(spec):
    """Give back the space :func:`start` set aside."""
    release_space(spec.study_dir)


def open_mlflow_parent(spec, study, uri):
    """With ``uri`` (``tune --mlflow``): the study's parent run in MLflow, before its
    first trial; every trial's run streams there as its child."""
    if not uri:
        return
    from ..analysis.mlflow_groups import start_parent, study_group
    spec.mlflow = uri
    spec.mlflow_parent = start_parent(uri, study_group(spec.study_dir, study))


def close_mlflow_parent(spec, study, signum):
    """The parent run's best value and status once this command's trials ended."""
    if spec.mlflow:
        from ..analysis.mlflow_groups import end_parent, study_group
        end_parent(spec.mlflow, study_group(spec.study_dir, study, signum is not None),
                   spec.mlflow_parent)


def to_run(study, spec):
    """Whether this command has trials to run or wait for: the budget has room,
    or trials run elsewhere (one whose worker died is then replaced)."""
    from .study import remaining
    optuna = import_optuna()
    return remaining(study, spec.trials) > 0 or bool(
        study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))


def run_workers(spec, workers, on_line=None):
    """Run ``workers`` worker processes on the study until they finish; returns
    the first signal received (None when none was)."""
    crew = Crew()
    with handlers(crew.forwarding.handler):
        for k in range(workers):
            log = os.path.join(spec.study_dir, LOGS,
                               f"worker-{host()}-{os.getpid()}-{k}.log")
            crew.spawn(spec.to_json(), k, log)
        while crew.running():
            found = crew.next_event(0.2)  # short waits: signals are handled meanwhile
            if found and found[1] is not None and on_line:
                on_line(found[1])
        crew.wait()
    from .liveness import fail_dead_trials
    fail_dead_trials(load_study(spec))  # a worker killed outright left its trial RUNNING
    return crew.forwarding.signum


class Crew:
    """Worker processes (``python -m mindexp _search_worker INDEX``, the spec in
    :data:`SPEC_VARIABLE`, see :mod:`.worker`)
    and the events they print, one JSON object a line, in one queue.

    Each worker runs in its own session (a terminal's Ctrl-C reaches only the
    driver, whose :attr:`forwarding` handler passes it on, see :mod:`.signals`)
    and dies with the driver (:func:`.children.die_with_parent`): spawn from
    the main thread.
    """

    def __init__(self):
        self.procs = []
        self.forwarding = Forwarding(self.procs)
        self._events = queue.Queue()
        self._open = 0  # workers whose output has not ended

    def spawn(self, spec_json, index, log):
        """Start a worker whose stderr goes to ``log``; returns its Popen."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env.setdefault("GLOG_v", "3")
        env[SPEC_VARIABLE] = spec_json
        with open(log, "a", encoding="utf-8") as stderr:
            proc = subprocess.Popen([sys.executable, "-m", "mindexp", WORKER_COMMAND, str(index)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=stderr, env=env, text=True, start_new_session=True,
                                    preexec_fn=die_with_parent())
        proc.log_path = log
        self.procs.append(proc)
        self._open += 1
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc):
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._events.put((proc, event))
        self._events.put((proc, None))  # its output ended: it exited (or is about to)

    def next_event(self, timeout):
        """``(proc, event)``, ``(proc, None)`` when a worker's output ended, or None
        after ``timeout`` seconds without either."""
        try:
            found = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if found[1] is None:
            self._open -= 1
        return found

    def running(self):
        """How many workers' output has not ended yet."""
        return self._open

    def wait(self):
        """Wait for every worker to exit."""
        for proc in self.procs:
            proc.wait()
