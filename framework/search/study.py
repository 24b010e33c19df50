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
run). Interrupted trials, and trials whose worker died (see :mod:`.liveness`),
do not count, so running the command again runs them anew.

The space: a study keeps the ``--param`` space it was made with; another
space on an existing study is refused before anything runs (its trials
would not be comparable, and Optuna's samplers assume one space).

Seeds: with ``--seed``, trial ``n``'s sampler is seeded from the seed and
``n``, so a study continued by a later command draws new points (a sampler
seeded afresh would repeat the first ones) while the same commands in the
same order still give the same sequence.
"""
import contextlib
import dataclasses
import functools
import json
import logging
import os
import shutil
import signal
import time
import traceback

from .. import layout
from ..errors import ConfigError, MindexpError
from ..rundir.groups import STUDIES, STUDY_JOURNAL, open_journal
from ..secrets import masked
from .disk import is_full_disk, release_space
from .space import check_count


logger = logging.getLogger(__name__)

JOURNAL = STUDY_JOURNAL
LOGS = "logs"
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")
EXTRA = "mindexp[tune]"
NO_SPACE = "no_space"   # a trial's user attribute: it failed for a full disk (not counted)


def import_optuna():
    """Optuna, quiet; MindexpError naming the extra when it is not installed."""
    try:
        import optuna
    except ImportError:
        raise MindexpError(f"mindexp tune and sweep need Optuna; install it with: pip install "
                           f"'{EXTRA}' (or: pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class JsonSpec:
    """A spec a worker reads: a dataclass as one JSON text."""

    def to_json(self):
        """The spec as one JSON text (a worker's argument)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text):
        """The spec :meth:`to_json` wrote."""
        return cls(**json.loads(text))


@dataclasses.dataclass
class TuneSpec(JsonSpec):
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
    seed: int | None = None
    timeout_s: float | None = None
    deadline: float | None = None
    direction_inferred: bool = False  # from the objective's name, not --direction
    mlflow: str | None = None          # the tracking URI each trial's run streams to (--mlflow)
    mlflow_parent: str | None = None   # the study's parent run there


def study_dir(out, name):
    return os.path.join(os.path.abspath(os.fspath(out)), STUDIES, name)


def storage_path(storage, folder):
    """An RDB URL as given, a journal file as an absolute path (ConfigError for a
    folder); None: the journal in the study's ``folder``."""
    if storage is None:
        return os.path.join(folder, JOURNAL)
    if is_url(storage):
        return storage
    path = os.path.abspath(storage)
    if os.path.isdir(path):
        raise ConfigError(f"--storage must be an RDB URL or a journal file, not a folder. "
                          f"Received: --storage {storage}", field="storage")
    return path


def check_choices(sampler, pruner, trials):
    """ConfigError for an unknown sampler/pruner or a trial count below 1."""
    for option, value, accepted in (("sampler", sampler, SAMPLERS), ("pruner", pruner, PRUNERS)):
        if value not in accepted:
            raise ConfigError(f"--{option} must be one of {', '.join(accepted)}. "
                              f"Received: --{option} {value}", field=option)
    check_count(trials, 1, "--trials")


# -- storage and study ---------------------------------------------------------

def is_url(storage):
    return "://" in storage


def open_storage(storage):
    """An Optuna storage for an RDB URL or a journal file path."""
    optuna = import_optuna()
    if is_url(storage):
        try:
            return _open_rdb(optuna, storage)
        except Exception as exc:  # a driver missing, a server not reachable, a bad URL
            raise MindexpError(f"cannot open the storage {masked(storage)}: "
                               f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
    os.makedirs(os.path.dirname(os.path.abspath(storage)), exist_ok=True)
    return open_journal(storage)


# Two machines starting on an empty database race to create Optuna's tables:
# the loser's CREATE TABLE fails, although the tables are then there.
_SCHEMA_ATTEMPTS = 5
_CREATED_MEANWHILE = ("already exists", "duplicate key value")


def _open_rdb(optuna, storage):
    """Optuna's RDBStorage for ``storage``, opened again while the error says
    another process was creating the same tables at that moment."""
    from .liveness import quiet_heartbeat, rdb_heartbeat
    for attempt in range(1, _SCHEMA_ATTEMPTS + 1):
        try:
            with quiet_heartbeat():
                return optuna.storages.RDBStorage(storage, **rdb_heartbeat())
        except Exception as exc:  # noqa: BLE001  judged by its text: the drivers' classes differ
            if attempt == _SCHEMA_ATTEMPTS or not any(t in str(exc) for t in _CREATED_MEANWHILE):
                raise
            time.sleep(0.2 * attempt)


def load_study(spec, create=False):
    """The study of ``spec`` with its sampler and pruner.

    ``create``: make it when missing (and check an existing one was made for
    the same experiment, objective, direction and space: ConfigError).
    """
    optuna = import_optuna()
    storage = open_storage(spec.storage)
    kwargs = dict(study_name=spec.study, storage=storage, sampler=make_sampler(spec),
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
        _check_same_space(spec, _space_of_trials(study))  # a study made by Optuna itself
        study.set_user_attr("mindexp", {**mine, "entry": spec.entry, "study_dir": spec.study_dir,
                                        "space": spec.space})
        return
    differ = [k for k in mine if saved.get(k) != mine[k]]
    if differ:
        raise ConfigError(f"study {spec.study!r} in {masked(spec.storage)} was made for "
                          + ", ".join(f"{k}={saved.get(k)}" for k in differ)
                          + "; use another --study name, or the same values. Received: "
                          + ", ".join(f"{k}={mine[k]}" for k in differ), field="study")
    # Studies made before the space was recorded: the space their trials used.
    _check_same_space(spec, saved["space"] if "space" in saved else _space_of_trials(study))


def _check_same_space(spec, saved):
    """ConfigError naming the first parameter whose distribution differs
    (``saved`` empty: a study without trials yet, nothing to compare)."""
    for name in (list(saved) + [n for n in spec.space if n not in saved]) if saved else ():
        was, now = saved.get(name), spec.space.get(name)
        if _same(was, now):
            continue
        study = (f"searches {name}={space_text(was)}" if was is not None
                 else f"does not search {name}")
        given = f"--param {name}={space_text(now)}" if now is not None else f"no --param {name}"
        raise ConfigError(f"study {spec.study!r} {study}, but this command gives {given}; a "
                          f"study keeps its search space: start a new one with --study NEW_NAME "
                          f"(or give the study's own --param values). Received: {given}",
                          field=name)


def _same(was, now):
    if isinstance(was, (list, tuple)) and isinstance(now, (list, tuple)):
        return list(was) == list(now) and [type(v) for v in was] == [type(v) for v in now]
    return was == now


def space_text(item):
    """``"loguniform:0.001:1"`` or ``"choice:sgd,adam"`` for a space entry of a TuneSpec."""
    if isinstance(item, (list, tuple)):
        return "choice:" + ",".join(map(str, item))
    kind, low, high = item.split(":")
    return f"{kind}:{float(low):g}:{float(high):g}"


def _space_of_trials(study):
    """The space (TuneSpec form) the trials of ``study`` were sampled from."""
    dist, space = import_optuna().distributions, {}
    for trial in study.get_trials(deepcopy=False):
        for name, d in trial.distributions.items():
            if isinstance(d, dist.CategoricalDistribution):
                space[name] = list(d.choices)
            elif isinstance(d, dist.IntDistribution):
                space[name] = f"{'int-log' if d.log else 'int'}:{d.low!r}:{d.high!r}"
            elif isinstance(d, dist.FloatDistribution):
                kind = "loguniform" if d.log else "uniform"
                space[name] = f"{kind}:{float(d.low)!r}:{float(d.high)!r}"
    return space


def make_sampler(spec, number=0):
    """TPE (default), random or grid for trial ``number``; seeded from
    ``spec.seed`` and ``number`` when seeded (see the module's docstring)."""
    samplers, seed = import_optuna().samplers, trial_seed(spec.seed, number)
    if spec.sampler == "random":
        return samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return _grid_sampler_class()(grid_space(spec.space), seed=seed)
    # Optuna's 10 random start-up trials would leave a small budget almost no TPE trials.
    return samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, spec.trials // 3)))


def trial_seed(seed, number):
    """The sampler seed of trial ``number`` of a study seeded with ``seed`` (None: unseeded)."""
    if seed is None:
        return None
    import numpy as np
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


@functools.cache
def _grid_sampler_class():
    """Optuna's GridSampler without its ``study.stop()`` once the grid is done:
    that works only inside ``Study.optimize`` (here it raised after the last
    grid point's tell); our loop has its own budget."""
    class BudgetGridSampler(import_optuna().samplers.GridSampler):
        def after_trial(self, study, trial, state, values):
            pass

        def _get_unvisited_grid_ids(self, study):
            # Optuna's own (checked on 5.0) takes the point of every finished trial
            # as visited; an interrupted trial or one whose worker died is not
            # counted (see counted()), so its point must be drawn again.
            return _unvisited_points(self, study)
    return BudgetGridSampler


def _unvisited_points(sampler, study):
    """Grid ids with no counted finished trial, those not running first
    (Optuna's rule, minus trials that do not count)."""
    done, running = set(), set()
    for trial in study._storage.get_all_trials(study._study_id, deepcopy=False):
        attrs = trial.system_attrs
        if "grid_id" not in attrs or not sampler._same_search_space(attrs["search_space"]):
            continue
        if trial.state.is_finished() and counted(trial):
            done.add(attrs["grid_id"])
        elif trial.state.name == "RUNNING":
            running.add(attrs["grid_id"])
    every = set(range(sampler._n_min_trials))
    return list(every - done - running or every - done)


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
    pruners = import_optuna().pruners
    if spec.pruner == "none":
        return pruners.NopPruner()
    if spec.pruner == "hyperband":
        return pruners.HyperbandPruner(min_resource=1)
    # A few finished trials first, so the median means something.
    return pruners.MedianPruner(n_startup_trials=min(5, max(1, spec.trials // 4)), n_warmup_steps=1)


# -- claiming trials ---------------------------------------------------------------

def counted(trial):
    """Trials that use up the budget: all but interrupted and surplus ones, those
    that failed for a full disk, and failed ones that no worker finished
    (``status`` is set only by the worker that ran the trial: one failed
    without it had a dead worker)."""
    attrs = trial.user_attrs
    if attrs.get("interrupted") or attrs.get("surplus") or attrs.get(NO_SPACE):
        return False
    return not (trial.state.name == "FAIL" and "status" not in attrs)


def remaining(study, trials):
    """Trials still to start: the budget minus the counted ones (running included)."""
    return max(0, trials - sum(map(counted, study.get_trials(deepcopy=False))))


def finished_short(study, trials):
    """How many of the budget's ``trials`` have not ended counted (0: the study is whole)."""
    return max(0, trials - sum(counted(t) and t.state.is_finished()
                               for t in study.get_trials(deepcopy=False)))


@contextlib.contextmanager
def claim_lock(storage):
    """Held while a worker claims work: a lock file beside a journal (an RDB settles
    claims by trial number instead, see claim_trial)."""
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


def claim_trial(study, spec, lock=None):
    """A new trial within the budget, or None when the budget is used up.

    ``lock``: this worker's lock file, named in the trial (see :mod:`.liveness`)."""
    optuna = import_optuna()
    from .liveness import fail_dead_trials, host, quiet_heartbeat
    with claim_lock(spec.storage):
        fail_dead_trials(study)
        if remaining(study, spec.trials) == 0:
            return None
        number = len(study.get_trials(deepcopy=False))  # exact under the journal's claim lock
        study.sampler = make_sampler(spec, number)
        with quiet_heartbeat():
            trial = study.ask()
        for key, value in {"host": host(), "pid": os.getpid(), "lock": lock}.items():
            if value:
                trial.set_user_attr(key, value)
    if trial.number != number:  # an RDB shared with another process took that number
        study.sampler = make_sampler(spec, trial.number)
    earlier = [t for t in study.get_trials(deepcopy=False)
               if counted(t) and t.number <= trial.number]
    if len(earlier) > spec.trials:  # an RDB shared with another process: it asked first
        trial.set_user_attr("surplus", True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    return trial


# -- running trials -----------------------------------------------------------------

def trial_log(spec, number):
    """The log of trial ``number``: its output in a worker, its traceback when it failed."""
    return os.path.join(spec.study_dir, LOGS, f"trial-{number}.log")


def run_trials(spec, exp_cls, stop, on_trial=None, log_for=None):
    """Claim and run trials one after another until the budget, the deadline
    or a signal ends it; returns the trial numbers this call ran.

    ``on_trial(number, state, value, params, error)`` is called after each;
    ``log_for(number)`` gives a context manager that sends the trial's output
    to its log. While it runs, this process holds its worker lock and records
    each trial's heartbeat (see :mod:`.liveness`). Once the budget is used up
    it waits for the trials running elsewhere, and runs the replacement of one
    whose worker died (:func:`.liveness.wait_for_others`). A trial that failed
    for a full disk ends the loop: no further one could succeed.
    """
    from .liveness import heartbeat, wait_for_others, worker_lock
    study = load_study(spec)
    done = []
    with worker_lock(spec.study_dir) as lock:
        while stop.signum is None and (spec.deadline is None or time.time() < spec.deadline):
            trial = claim_trial(study, spec, lock)
            if trial is None:
                if wait_for_others(study, lambda: remaining(study, spec.trials) > 0, stop,
                                   spec.deadline):
                    continue
                break
            with heartbeat(study, trial._trial_id), \
                    log_for(trial.number) if log_for else contextlib.nullcontext():
                state, value, error = run_one(study, trial, spec, exp_cls, stop)
            done.append(trial.number)
            if on_trial:
                on_trial(trial.number, state, value, dict(trial.params), error)
            if state == "interrupted":  # the run caught the signal itself
                stop.signum = stop.signum or signal.SIGINT
                break
            if is_full_disk(error):
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
    returns ``(state, value, error)``, state one of complete, pruned, failed,
    interrupted, error the one-line reason of a failed trial (its traceback
    goes to the trial's log).

    A failed or diverged run is told FAIL (not a worst value: a made-up
    number would mislead the sampler and the importances); so is a run
    whose objective is not a finite number."""
    from ..api import run_request
    from .objective import Objective
    optuna = import_optuna()
    say = functools.partial(_append, trial_log(spec, trial.number))
    answer = train_run(lambda created: run_request(_trial_request(trial, spec, exp_cls, created)),
                       stop, say, namer(study, trial._trial_id))
    run_dir, status, error = answer["run_dir"], answer["status"], answer["error"]
    value = Objective(spec.objective, spec.direction).value_of(run_dir) \
        if status == "completed" else None
    if status == "completed" and value is None:
        error = f"the run has no value of {spec.objective}"
        say(f"trial {trial.number} failed: {error}")
    no_space = status != "completed" and is_full_disk(error)
    if no_space:
        release_space(spec.study_dir)   # room for the storage's write of this outcome
    attrs = {"run_dir": run_dir, "status": status, "error": error,
             "interrupted": True if status == "interrupted" else None,
             NO_SPACE: True if no_space else None}
    TrialState = optuna.trial.TrialState
    if status == "completed" and value is not None:
        _tell(study, trial, attrs, values=value)
        return "complete", value, None
    if status == "pruned":
        _tell(study, trial, attrs, state=TrialState.PRUNED)
        return "pruned", None, None
    _tell(study, trial, attrs, state=TrialState.FAIL)
    return ("interrupted" if status == "interrupted" else "failed"), None, error


def one_line(text):
    """``text`` on one line, its runs of white space one blank."""
    return " ".join(str(text).split())


def _tell(study, trial, attrs, **outcome):
    """Record the trial's attributes and outcome; a trial that another process
    failed meanwhile (taken for dead, see :mod:`.liveness`) keeps that."""
    optuna = import_optuna()
    try:
        for key, value in attrs.items():
            if value is not None:
                trial.set_user_attr(key, value)
        study.tell(trial, skip_if_finished=True, **outcome)
    except optuna.exceptions.UpdateFinishedTrialError:
        logger.warning("trial %s was failed by another process meanwhile (taken for dead)",
                       trial.number)


def _append(path, text):
    """Append ``text`` to the log ``path`` (a full disk must not turn the outcome into a crash)."""
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(text.rstrip("\n") + "\n")
    except OSError as exc:
        logger.warning("could not write %s: %s", path, exc)


def _trial_request(trial, spec, exp_cls, created):
    """The trial's run: its sampled config, the study's fields in run.json, and
    the pruning callback after the experiment's own."""
    from ..train.request import RunRequest
    from .objective import resolve_objective
    from .pruning import TrialPruning
    values = sample(trial, spec.space)
    exp = exp_cls({**spec.base, **values})
    objective = resolve_objective(exp, spec.objective, spec.direction)
    added = ()
    if spec.pruner != "none" and (objective.metric or spec.direction == "minimize"):
        added = (TrialPruning(trial, objective.metric, objective.best,
                              maximize=spec.direction == "maximize"),)
    return RunRequest(exp, out=spec.study_dir, label=f"trial-{trial.number}", entry=spec.entry,
                      fields={"study": spec.study, "trial": trial.number,
                              "tuned": list(spec.space)},
                      callbacks=added, created=created,
                      mlflow=spec.mlflow, mlflow_parent=spec.mlflow_parent)


def namer(study, trial_id):
    """Record a run's folder in its trial as soon as it exists: should its
    worker die, the trial (failed for it) still names the run, and a sweep on
    another machine learns it from the storage."""
    def named(run_dir):
        try:
            study._storage.set_trial_user_attr(trial_id, "run_dir", run_dir)
        except Exception as exc:  # noqa: BLE001  its outcome names it later anyway
            logger.warning("could not name the run %s in the storage: %s", run_dir, exc)
    return named


# -- training one run in a worker (a trial, a grid point) ----------------------------------

def train_run(start, stop, say, named=None):
    """Train one run in this process as ``mindexp run`` would; returns its answer
    ``{run_dir, run_id, status, error, returncode, final_loss}`` (``returncode``:
    what ``mindexp run`` would have exited with, ``error`` its one line).

    ``start(created)`` starts it (a new run or a resumed one, ``created(run_dir)``
    once its folder exists, which also calls ``named(run_dir)``) and returns
    its Run; ``say(text)`` writes to its log (why it failed, the traceback). A
    folder a failure left without run.json is removed: no listing would show it."""
    from ..errors import TrainingError
    started = {}

    def created(run_dir):
        started["run_dir"] = run_dir
        if named:
            named(run_dir)
    try:
        if stop.signum is not None:
            return _failed(say, "stopped before training", 128 + stop.signum, "interrupted")
        run = start(created)
    except MindexpError as exc:
        _drop_unrecorded(started.get("run_dir"), say)
        return _failed(say, one_line(exc), 2, said=f"mindexp: error: {one_line(exc)}")
    except TrainingError as exc:
        trace = read_text(os.path.join(exc.run_dir, layout.ERROR_FILE)) if exc.run_dir else None
        say(f"mindexp: training failed: {one_line(exc)}" + (f"\n{trace}" if trace else ""))
        meta = exc.run.meta if getattr(exc, "run", None) is not None else {}
        return _answer(exc.run_dir, meta.get("status") or "failed", one_line(exc), 1, meta)
    except KeyboardInterrupt:  # a second signal: the run's folder is still resumable
        say("mindexp: interrupted")
        return _answer(started.get("run_dir"), "interrupted", "mindexp: interrupted", 130)
    except BaseException as exc:  # noqa: BLE001  (its log says what it was)
        _drop_unrecorded(started.get("run_dir"), say)
        return _failed(say, f"{type(exc).__name__}: {one_line(exc)}", 1,
                       said=traceback.format_exc())
    say(f"run directory: {run.dir}\nstatus: {run.status}  final loss: "
        f"{run.meta.get('final_loss')}")
    return _answer(run.dir, run.status, run.meta.get("error"),
                   0 if run.status == "completed" else 1, run.meta)


def _drop_unrecorded(run_dir, say):
    """Remove the new run folder a failure left without run.json (the disk
    filled while its first files were written)."""
    from ..rundir.io import is_run_dir
    if run_dir and os.path.isdir(run_dir) and not is_run_dir(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        say(f"mindexp: removed {run_dir}: the run failed before its {layout.RUN_JSON} was written")


def _failed(say, error, code, status="failed", said=None):
    say(said or error)
    return _answer(None, status, error, code)


def _answer(run_dir, status, error, returncode, meta=None):
    answer = {"run_dir": run_dir, "status": status, "error": error, "returncode": returncode,
              "run_id": None, "final_loss": None}
    if run_dir and meta:
        answer.update(run_id=meta.get("run_id"), final_loss=meta.get("final_loss"))
    return answer


def read_text(path):
    """The text of the file ``path``, None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except (OSError, TypeError):
        return None
