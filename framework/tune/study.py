"""A study: its storage, sampler and pruner, and the loop that runs its trials.

Storage: by default one Optuna journal file, ``<out>/studies/<name>/journal.log``
(``JournalStorage`` over ``JournalFileBackend``). Why a journal and not
SQLite: every worker process (and every ``mindexp tune`` sharing the study)
writes trials at the same time, and SQLite serialises writers with a
database lock that makes concurrent writers fail with "database is locked"
under load (Optuna advises against it for parallel studies). The journal is
append-only under a file lock that needs no server, also on a shared file
system (``JournalFileOpenLock`` uses ``open(O_CREAT|O_EXCL)``, which NFS
honours). ``--storage`` takes an RDB URL (``postgresql://...``,
``mysql+pymysql://...``, ``sqlite:///...``) or the path of a journal file.

The budget: a study holds at most ``trials`` counted trials. Trials are
claimed one at a time: under a lock file beside a journal (exact across
processes and machines sharing the file), and for an RDB by trial number
(a trial asked beyond the budget is told FAIL with ``surplus`` and never
run). Interrupted trials do not count, so running the command again runs
them anew.
"""
import contextlib
import dataclasses
import json
import logging
import os
import platform
import signal
import time

from ..errors import ConfigError, MindexpError

logger = logging.getLogger(__name__)

STUDIES = "studies"
JOURNAL = "journal.log"
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")
EXTRA = "mindexp[tune]"


def import_optuna():
    """Optuna, quiet; MindexpError naming the extra when it is not installed."""
    try:
        import optuna
    except ImportError:
        raise MindexpError(f"mindexp tune needs Optuna; install it with: pip install "
                           f"'{EXTRA}' (or: pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclasses.dataclass
class TuneSpec:
    """Everything a worker needs to run trials of a study (JSON-ready)."""

    entry: str
    experiment: str
    study: str
    study_dir: str
    storage: str
    space: dict
    objective: str
    direction: str = "minimize"
    base: dict = dataclasses.field(default_factory=dict)
    trials: int = 20
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int = None
    timeout_s: float = None
    deadline: float = None

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))


def study_dir(out, name):
    return os.path.join(os.path.abspath(os.fspath(out)), STUDIES, name)


def default_storage(folder):
    return os.path.join(folder, JOURNAL)


def check_choices(sampler, pruner, trials):
    """ConfigError for an unknown sampler/pruner or a trial count below 1."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"--sampler must be one of {', '.join(SAMPLERS)}. "
                          f"Received: --sampler {sampler}", field="sampler")
    if pruner not in PRUNERS:
        raise ConfigError(f"--pruner must be one of {', '.join(PRUNERS)}. "
                          f"Received: --pruner {pruner}", field="pruner")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"--trials must be an integer >= 1. Received: --trials {trials!r}",
                          field="trials")


# -- storage and study ---------------------------------------------------------

def is_url(storage):
    return "://" in storage


def open_storage(storage):
    """An Optuna storage for an RDB URL or a journal file path."""
    optuna = import_optuna()
    if is_url(storage):
        try:
            return optuna.storages.RDBStorage(storage)
        except Exception as exc:  # a driver missing, a server not reachable, a bad URL
            raise MindexpError(f"cannot open the storage {storage}: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:300]}") from None
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    os.makedirs(os.path.dirname(os.path.abspath(storage)), exist_ok=True)
    return optuna.storages.JournalStorage(
        JournalFileBackend(storage, lock_obj=JournalFileOpenLock(storage)))


def load_study(spec, worker=0, create=False):
    """The study of ``spec`` with this worker's sampler and pruner.

    ``create``: make it when missing (and check an existing one was made for
    the same experiment, objective and direction).
    """
    optuna = import_optuna()
    storage = open_storage(spec.storage)
    kwargs = dict(study_name=spec.study, storage=storage, sampler=make_sampler(spec, worker),
                  pruner=make_pruner(spec))
    if not create:
        return optuna.load_study(**kwargs)
    study = optuna.create_study(direction=spec.direction, load_if_exists=True, **kwargs)
    _check_same_study(study, spec)
    return study


def _check_same_study(study, spec):
    mine = {"experiment": spec.experiment, "objective": spec.objective,
            "direction": spec.direction}
    saved = study.user_attrs.get("mindexp")
    if saved is None:
        study.set_user_attr("mindexp", {**mine, "entry": spec.entry, "study_dir": spec.study_dir})
        return
    differ = [k for k in mine if saved.get(k) != mine[k]]
    if differ:
        raise ConfigError(f"study {spec.study!r} in {spec.storage} was made for "
                          + ", ".join(f"{k}={saved.get(k)}" for k in differ)
                          + "; use another --study name, or the same values. Received: "
                          + ", ".join(f"{k}={mine[k]}" for k in differ), field="study")


def make_sampler(spec, worker=0):
    """TPE (default), random or grid; seeded with ``seed + worker`` when seeded."""
    optuna = import_optuna()
    seed = None if spec.seed is None else spec.seed + worker
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return optuna.samplers.GridSampler(grid_space(spec.space), seed=seed)
    # Optuna's 10 random start-up trials would leave a small budget almost no TPE trials.
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, spec.trials // 3)))


def grid_space(space):
    """``{name: [values]}`` for the grid sampler (choice and int parameters only)."""
    grid = {}
    for name, item in space.items():
        if isinstance(item, (list, tuple)):
            grid[name] = list(item)
            continue
        kind, low, high = item.split(":")
        if kind not in ("int", "int-log"):
            raise ConfigError(f"--sampler grid needs choice or int parameters; {name}={item} is "
                              f"continuous. Received: --param {name}={item}", field=name)
        grid[name] = list(range(int(low), int(high) + 1))
    return grid


def spec_space(space):
    """``{name: Param}`` -> the JSON form workers take: a list of typed
    choices, or ``"kind:low:high"`` with exact bounds."""
    return {name: list(p.choices) if p.kind == "choice" else f"{p.kind}:{p.low!r}:{p.high!r}"
            for name, p in space.items()}


def make_pruner(spec):
    optuna = import_optuna()
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1)
    # A few finished trials first, so the median means something.
    return optuna.pruners.MedianPruner(n_startup_trials=min(5, max(1, spec.trials // 4)),
                                       n_warmup_steps=1)


# -- claiming trials ---------------------------------------------------------------

def counted(trial):
    """Trials that use up the budget: all but interrupted and surplus ones."""
    return not (trial.user_attrs.get("interrupted") or trial.user_attrs.get("surplus"))


def remaining(study, trials):
    return max(0, trials - sum(1 for t in study.get_trials(deepcopy=False) if counted(t)))


@contextlib.contextmanager
def _claim_lock(storage):
    if is_url(storage):
        yield
        return
    from optuna.storages.journal import JournalFileOpenLock
    lock = JournalFileOpenLock(storage + ".claim")
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def claim_trial(study, spec):
    """A new trial within the budget, or None when the budget is used up."""
    optuna = import_optuna()
    with _claim_lock(spec.storage):
        if remaining(study, spec.trials) == 0:
            return None
        trial = study.ask()
    earlier = [t for t in study.get_trials(deepcopy=False)
               if counted(t) and t.number <= trial.number]
    if len(earlier) > spec.trials:  # an RDB shared with another process: it asked first
        trial.set_user_attr("surplus", True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    trial.set_user_attr("host", platform.node())
    trial.set_user_attr("pid", os.getpid())
    return trial


# -- running trials -----------------------------------------------------------------

class StopFlag:
    """What a signal handler sets: the first signal number received."""

    def __init__(self):
        self.signum = None

    def handler(self, signum, frame):
        if self.signum is None:
            self.signum = signum


def run_trials(spec, exp_cls, stop, worker=0, on_trial=None, log_for=None):
    """Claim and run trials one after another until the budget, the deadline
    or a signal ends it; returns the trial numbers this call ran.

    ``on_trial(number, state, value, params)`` is called after each; ``log_for(number)``
    gives a context manager that sends the trial's output to its log.
    """
    study = load_study(spec, worker)
    done = []
    while stop.signum is None and (spec.deadline is None or time.time() < spec.deadline):
        trial = claim_trial(study, spec)
        if trial is None:
            break
        with log_for(trial.number) if log_for else contextlib.nullcontext():
            state, value = run_one(study, trial, spec, exp_cls, stop)
        done.append(trial.number)
        if on_trial:
            on_trial(trial.number, state, value, dict(trial.params))
        if state == "interrupted":  # the run caught the signal itself
            stop.signum = stop.signum or signal.SIGINT
            break
    return done


def sample(trial, space):
    """The trial's config values: one ``suggest_*`` per searched field."""
    values = {}
    for name, item in space.items():
        if isinstance(item, (list, tuple)):
            values[name] = trial.suggest_categorical(name, list(item))
            continue
        kind, low, high = item.split(":")
        if kind in ("int", "int-log"):
            values[name] = trial.suggest_int(name, int(low), int(high), log=kind == "int-log")
        else:
            values[name] = trial.suggest_float(name, float(low), float(high),
                                               log=kind == "loguniform")
    return values


def run_one(study, trial, spec, exp_cls, stop):
    """Train one trial as a normal run (label ``trial-<n>``) and tell the study;
    returns ``(state, value)``, state one of complete, pruned, failed, interrupted.

    A failed or diverged run is told FAIL (not a worst value: a made-up
    number would mislead the sampler and the importances); so is a run
    whose objective is not a finite number."""
    optuna = import_optuna()
    run_dir, status, error = None, "failed", None
    try:
        exp = _trial_experiment(trial, spec, exp_cls)
        if stop.signum is None:
            run_dir, status, error = _train(exp, spec, trial.number)
        else:
            status, error = "interrupted", "stopped before training"
    except MindexpError as exc:  # this point of the space is not a valid run
        error = " ".join(str(exc).split())
    except Exception as exc:  # noqa: BLE001  (the trial's log has the traceback)
        logger.exception("trial %s failed", trial.number)
        error = f"{type(exc).__name__}: {exc}"
    for key, value in (("run_dir", run_dir), ("status", status), ("error", error)):
        if value is not None:
            trial.set_user_attr(key, value)
    value = _objective_value(spec, run_dir) if status == "completed" else None
    TrialState = optuna.trial.TrialState
    if status == "completed" and value is not None:
        study.tell(trial, value)
        return "complete", value
    if status == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
        return "pruned", None
    if status == "interrupted":
        trial.set_user_attr("interrupted", True)
    elif status == "completed":
        trial.set_user_attr("error", f"the run has no value of {spec.objective}")
    study.tell(trial, state=TrialState.FAIL)
    return ("interrupted" if status == "interrupted" else "failed"), None


def _trial_experiment(trial, spec, exp_cls):
    from .objective import resolve_objective
    from .pruning import TrialPruning
    values = sample(trial, spec.space)
    exp = exp_cls({**spec.base, **values})
    exp.entry = spec.entry
    exp.run_fields = {"study": spec.study, "trial": trial.number, "tuned": list(spec.space)}
    objective = resolve_objective(exp, spec.objective, spec.direction)
    pruning = None
    if spec.pruner != "none" and (objective.metric or spec.direction == "minimize"):
        pruning = TrialPruning(trial, objective.metric, objective.best,
                               maximize=spec.direction == "maximize")
        own = exp.callbacks
        exp.callbacks = lambda: list(own() or []) + [pruning]
    return exp


def _train(exp, spec, number):
    from ..api import run_experiment
    from ..errors import TrainingError
    try:
        run = run_experiment(exp, out=spec.study_dir, label=f"trial-{number}", quiet=True,
                             entry=spec.entry)
    except TrainingError as exc:
        if getattr(exc, "run", None) is None:
            return None, "failed", str(exc)
        run = exc.run
    return run.dir, run.status, run.meta.get("error")


def _objective_value(spec, run_dir):
    from .objective import Objective
    if run_dir is None:
        return None
    return Objective(spec.objective, spec.direction).value_of(run_dir)
