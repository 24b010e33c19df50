"""Grid sweeps: the cartesian product of a config grid as a study in an Optuna storage.

The grid's points are trials of one study (see :mod:`.grid`): worker
processes (:class:`.driver.Crew`, the same workers as ``tune``'s) claim
open points from the storage and train them one after another, MindSpore
imported once per worker. ``--storage`` (an RDB URL or a journal file)
lets the same command on other machines join the sweep; without it the
study is a journal file inside the sweep's folder, ``<out>/sweeps/<sweep_id>/``,
which also holds ``sweep.json`` (the grid, the fixed values, each point's
run folder, id and status; rewritten atomically as runs start and end),
each point's output in ``logs/``, each worker's stderr in ``workers/`` and
the overlay plots.

Each point is trained once; a failed one is tried again up to ``retries``
times, then recorded failed (a worker that dies, even killed, fails only
its point and is replaced). The same command again continues: completed
points stay, interrupted runs resume in their folders, failed points are
trained anew. A command ends when every point is done, including those
that workers elsewhere are training. Signals follow :mod:`.signals`;
workers die with the sweep. On a full disk no further point starts and
sweep.json stays whole (space set aside for it).

:class:`Sweep` opens the study and folder and keeps each point's state;
:mod:`.sweep_loop` drives the workers, :mod:`.sweep_record` writes
sweep.json, :mod:`.sweep_takeup` finds the unfinished sweep to continue.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
from typing import Any, Callable, Sequence

from ..define.config import load_toml
from ..errors import ConfigError, MindexpError
from ..rundir.groups import under_root
from ..rundir.io import check_experiment_name, check_label, create_run_dir, is_run_dir, now_iso
from .grid import (FINAL, FULL_DISK, SWEEP_STUDY, SweepSpec, open_study, outcome,
                   point_state, point_trials, release_space, reopen_failed, reserve_space,
                   retired, tell)
from .liveness import dead_worker_error
from .signals import handlers
from .space import check_count, check_field
from .study import JOURNAL, LOGS, storage_path
from ..secrets import masked
from .sweep_loop import WORKERS_DIR, SweepLoop
from .sweep_record import SWEEP_JSON, SweepRun, apply_answer, read_record, write_record
from .sweep_takeup import SWEEPS, find_unfinished, import_record, sweeps_locked

logger = logging.getLogger(__name__)

DEFAULT_RETRIES = 0          # most failures are deterministic: the same command again retrains


def parse_grid(items: list[str], exp_cls: Any) -> dict[str, list[str]]:
    """``["optimizer=sgd,adam", "lr=0.1,0.2"]`` -> ``{"optimizer": ["sgd", "adam"], ...}``.

    Raises ConfigError for a malformed item, a key that is not a config
    field of ``exp_cls`` (naming the closest ones), an empty value or a key
    given twice.
    """
    known = [f.name for f in dataclasses.fields(exp_cls.Config)]
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--grid expects FIELD=VALUE1,VALUE2,... Received: {item!r}")
        _check_grid_key(key, known, exp_cls, grid)
        values = [v.strip() for v in raw.split(",")]
        if "" in values:
            raise ConfigError(f"--grid {key} has an empty value; give FIELD=VALUE1,VALUE2 with "
                              f"no empty item. Received: {item!r}", field=key)
        grid[key] = values
    return grid


SEED = "seed"   # the config field every experiment has (Experiment.Config)


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``"5"`` -> seeds 0..4, ``"3,7,11"`` -> those seeds (ConfigError
    for anything else: a count below 1, a seed that is not an integer in
    [0, 2**32), a seed listed twice)."""
    items = [item.strip() for item in str(text).split(",")]
    accepted = "a count N (seeds 0..N-1) or a list of seeds such as 3,7,11"
    if not all(item.isdigit() for item in items):
        raise ConfigError(f"--seeds expects {accepted}. Received: --seeds {text}", field=SEED)
    numbers = [int(item) for item in items]
    if len(numbers) == 1:
        if numbers[0] < 1:
            raise ConfigError(f"--seeds expects {accepted} (a count of at least 1). "
                              f"Received: --seeds {text}", field=SEED)
        return list(range(numbers[0]))
    if len(set(numbers)) < len(numbers) or max(numbers) >= 2 ** 32:
        raise ConfigError(f"--seeds expects {accepted}, each seed once and below 2**32. "
                          f"Received: --seeds {text}", field=SEED)
    return numbers


def with_seeds(grid: dict, seeds: Sequence[int | str] | None, sets: dict | None = None) -> dict:
    """``grid`` with ``seed`` as its last axis (every point trained with each of
    ``seeds``, the same seeds for every point); ``grid`` itself when ``seeds``
    is None. ConfigError when the grid or ``sets`` already give ``seed``."""
    if seeds is None:
        return grid
    for given, option in ((grid, "--grid"), (sets or {}, "--set")):
        if SEED in given:
            raise ConfigError(f"--seeds and {option} seed=... both give the seed; keep one "
                              f"(--seeds N trains every point with seeds 0..N-1). "
                              f"Received: {option} seed={given[SEED]}", field=SEED)
    return {**grid, SEED: list(seeds)}


def check_grid(grid: Any, exp_cls: Any) -> dict[str, list]:
    """A Python ``{field: [values]}`` grid checked as :func:`parse_grid` checks
    ``--grid`` (ConfigError naming the field); returns it as a dict of lists."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"grid must be a non-empty dict {{field: [values]}}. Received: "
                          f"grid={grid!r}", field="grid")
    known = [f.name for f in dataclasses.fields(exp_cls.Config)]
    checked: dict[str, list] = {}
    for key, values in grid.items():
        _check_grid_key(key, known, exp_cls, checked)
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or not list(values):
            raise ConfigError(f"grid[{key!r}] must be a non-empty list of values. Received: "
                              f"{values!r}", field=key)
        checked[key] = list(values)
    return checked


def _check_grid_key(key, known, exp_cls, grid):
    check_field(key, known, exp_cls, grid, "--grid key" if key not in grid else "--grid",
                f"list all its values in one --grid {key}=VALUE1,VALUE2")


def check_points(exp_cls: Any, grid: dict, sets: dict | None,
                 file_values: dict | None = None) -> None:
    """Build every grid point's config now, so a bad value stops the sweep
    before any run starts (ConfigError naming the field)."""
    both = [key for key in grid if key in (sets or {})]
    if both:
        raise ConfigError(f"config field {both[0]!r} is given by both --grid and --set; keep "
                          f"one. Received: --grid {both[0]}=..., --set {both[0]}=...",
                          field=both[0])
    for point in grid_points(grid):
        exp_cls({**(file_values or {}), **(sets or {}), **point})


def grid_points(grid: dict) -> list[dict]:
    """The cartesian product as a list of ``{field: value}``, first key varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*grid.values())]


class Sweep:
    """A grid of runs of one experiment, trained by workers from a storage.

    Args:
        spec: what ``mindexp run`` accepts (a shipped name or ``file.py:Class``).
        grid: ``{field: [values as text]}`` from :func:`parse_grid`.
        sets: fixed ``{field: value as text}`` for every run.
        config_file: a TOML file every run reads (``--set`` and the grid win).
        out: output root; runs go to ``<out>/<experiment>/``.
        workers: runs at the same time on this machine (None: the cores, at most the points).
        name: label for the sweep id and its runs' ids.
        entry: the experiment's entry (``module:Class``); default: from ``spec``.
        storage: an RDB URL or a journal file shared with other machines
            (None: a journal file in the sweep's folder).
        retries: times a failed point is trained again before it is recorded failed.
        mlflow: an MLflow tracking URI: the sweep is a parent run there and each
            run streams to it as a child (``--mlflow``).
    """

    def __init__(self, spec: str, grid: dict, sets: dict | None = None,
                 config_file: str | None = None, out: str | os.PathLike[str] = "outputs",
                 workers: int | None = None, name: str | None = None, entry: str | None = None,
                 storage: str | os.PathLike[str] | None = None,
                 retries: int = DEFAULT_RETRIES, mlflow: str | None = None):
        self.spec, self.grid, self.sets = spec, dict(grid), dict(sets or {})
        self.entry = entry
        self.config_file = os.path.abspath(config_file) if config_file else None
        self.out = os.path.abspath(out)
        self.name = check_label(name)
        self.runs = [SweepRun(i, values, f"{name or 'sweep'}-{i + 1}")
                     for i, values in enumerate(grid_points(self.grid))]
        self.workers = _check_workers(workers, len(self.runs))
        self.retries = check_count(retries, 0, "--retries",
                                   " (times a failed point is trained again)")
        for run in self.runs:
            check_label(run.label)
        self.storage = os.fspath(storage) if storage is not None else None
        self.dir, self.sweep_id, self.experiment = "", "", ""   # set by start()
        self.tags: list[str] = []
        self.note: str | None = None          # every run's tags and note (mindexp tag / note)
        self.status, self.started_at, self.ended_at = "pending", None, None
        self.signum: int | None = None        # the first signal that stopped the sweep
        self.disk_error: str | None = None    # why a write failed (a full disk): nothing new starts
        self.record_error: str | None = None  # why sweep.json could not be written
        self.continued = False                # True when start() took up an unfinished sweep
        self._spec: SweepSpec | None = None
        self._study: Any = None
        self._answers: dict[int, dict] = {}   # trial id -> what this process knows of its end
        self._started = 0                     # workers started
        self._old_record: dict | None = None  # the unfinished sweep.json taken up
        self.mlflow = mlflow

    # -- starting ----------------------------------------------------------------------
    def start(self, experiment: str, resume: bool | str = "auto") -> str:
        """Open the sweep's study and folder (new, or the unfinished one of this
        same command); returns the folder.

        ``resume``: ``"auto"`` continues an unfinished sweep of the same
        command when there is one; True requires one (ConfigError otherwise);
        False always starts anew (without ``storage`` only: a shared storage
        holds one sweep per command). A storage that cannot be opened is
        MindexpError naming it, before anything is created.
        """
        self.experiment = check_experiment_name(experiment)
        if self.storage is None:
            with sweeps_locked(self.out):   # one sweep per command, even started at once
                self._spec = self._make_spec(self._own_folder(resume), SWEEP_STUDY)
                self._open()
        else:
            self._spec = self._make_spec(storage_path(self.storage, None), self._study_name())
            self._study = open_study(self._spec, create=True)
            self._shared_folder(resume)
            self._open()
        return self.dir

    def _open(self):
        if self._study is None:
            self._study = open_study(self._spec, create=True)
        self._settle_record()
        self.status = "running"
        self.save()
        if self.mlflow:
            from ..analysis.mlflow_groups import start_parent, sweep_group
            self._spec.mlflow = self.mlflow
            self._spec.mlflow_parent = start_parent(self.mlflow,
                                                    sweep_group(self.dir, self._record()))

    def _own_folder(self, resume):
        """The sweep folder (taken up or new) and its journal's path."""
        found = find_unfinished(self.out, self._identity(), [r.values for r in self.runs]) \
            if resume else None
        if found is None and resume is True:
            raise ConfigError(f"--resume: no unfinished sweep of this command in "
                              f"{os.path.join(self.out, SWEEPS)} (same experiment, --grid, "
                              f"--set, --config and --name); run it without --resume to start one",
                              field="resume")
        if found is None:
            self.dir = create_run_dir(self.out, SWEEPS, self.name)
            self.started_at = now_iso()
        else:
            self.dir, record = found
            self.started_at, self.continued = record.get("started_at"), True
            self._old_record = record
        self.sweep_id = os.path.basename(self.dir)
        return os.path.join(self.dir, JOURNAL)

    def _shared_folder(self, resume):
        """``<out>/sweeps/<study>`` for a sweep in a shared storage."""
        self.sweep_id = self._spec.study
        self.continued = bool(self._study.get_trials(deepcopy=False))
        if resume is True and not self.continued:
            raise ConfigError(f"--resume: no sweep of this command in "
                              f"{masked(self._spec.storage)} (study {self.sweep_id}); run it "
                              "without --resume to start one", field="resume")
        self.dir = os.path.join(self.out, SWEEPS, self.sweep_id)
        try:
            os.makedirs(self.dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the sweep folder {self.dir}: {exc.strerror}",
                              field="out") from None
        self._spec.sweep_dir = self.dir
        old = read_record(os.path.join(self.dir, SWEEP_JSON)) or {}
        self.started_at = old.get("started_at") or now_iso()

    def _make_spec(self, storage, study_name):
        if self.entry is None:
            from ..define.catalog import resolve_spec
            self.entry = resolve_spec(self.spec)[1]
        return SweepSpec(
            entry=self.entry, experiment=self.experiment, storage=storage, study=study_name,
            sweep_dir=self.dir or "", out=self.out, points=[r.values for r in self.runs],
            labels=[r.label for r in self.runs], base={**self._file_values(), **self.sets},
            retries=self.retries, tags=list(self.tags), note=self.note,
            runs_per_worker=None if "device" not in self.grid else 1)

    def _file_values(self):
        return load_toml(self.config_file) if self.config_file else {}

    def _study_name(self):
        """The same name on every machine for the same command (its grid, fixed
        values and name), so that they share one study."""
        key = json.dumps([self.experiment, _texts(self.grid), sorted(_texts(self.sets).items()),
                          sorted(_texts(self._file_values()).items()), self.name])
        return f"sweep-{self.name or self.experiment}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"

    def _settle_record(self):
        """Folders for logs, the record of an older sweep moved into the study,
        failed points reopened, space set aside."""
        try:
            for sub in (LOGS, WORKERS_DIR):
                os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        except OSError as exc:
            raise MindexpError(f"cannot start the sweep in {self.dir}: {exc.strerror}") from None
        old = self._old_record
        if old is not None and not self._study.get_trials(deepcopy=False):
            import_record(self._study, self._spec, old)   # a sweep.json of mindexp 0.2: no study
        if self.continued:
            reopen_failed(self._study, self._spec)
        reserve_space(self.dir, len(self.runs))
        self.refresh()

    def _identity(self):
        """This command's IDENTITY fields, as an unfinished sweep.json must hold them."""
        return {"experiment": self.experiment, "spec": self.spec, "grid": self.grid,
                "set": self.sets, "config_file": self.config_file, "name": self.name}

    def todo(self) -> list[SweepRun]:
        """The points still to train."""
        return [r for r in self.runs if r.status not in FINAL]

    # -- running ----------------------------------------------------------------------
    def run(self, on_finish: Callable[[SweepRun], None] | None = None) -> str:
        """Train every point not done yet (after :meth:`start`) until every point
        is done, here or by workers elsewhere; returns the sweep's status.

        ``on_finish(run)`` is called as each run of this machine ends. Workers
        are started from the calling thread and die with it: call it from the
        main thread.
        """
        from .driver import Crew
        crew = Crew()
        loop = SweepLoop(self, crew, on_finish)
        try:
            with handlers(crew.forwarding.handler):
                loop.drive()
            self.signum, self._started = crew.forwarding.signum, loop.started
            self._finish(loop.worker_failure)
        finally:
            release_space(self.dir)
        return self.status

    def worker_spec(self) -> str:
        """The sweep as a worker reads it (JSON), with the tags and note of now."""
        spec = self._spec
        assert spec is not None, "start() makes the spec"
        spec.tags, spec.note = list(self.tags), self.note
        return spec.to_json()

    def forget_answer(self, trial_id: int) -> None:
        """A point's attempt ``trial_id`` (re)started: what was known of its end is void."""
        self._answers.pop(trial_id, None)

    def point_ended(self, run: SweepRun, trial_id: int, answer: dict,
                    tell_storage: bool = False) -> None:
        """Record how ``run``'s attempt ``trial_id`` ended (``tell_storage``: also
        in its trial, when its worker died before it could); saves sweep.json."""
        if tell_storage:
            tell(self._study, trial_id, answer)
        self._answers[trial_id] = answer
        apply_answer(run, answer, self.out)
        if run.error and FULL_DISK in run.error:
            self.disk_error = self.disk_error or \
                f"the disk is full: run {run.run_id or run.label} failed with {FULL_DISK}"
        self.save()

    # -- each point's state, the record ------------------------------------------------
    def refresh(self, dead: bool = False) -> dict[int, str]:
        """Each point as the storage (and this process's workers) tell it;
        returns ``{point: open|running|done|failed}``. ``dead``: first fail
        the trials whose workers died (elsewhere; no worker of ours claims now)."""
        try:
            if dead:
                from .liveness import fail_dead_trials
                fail_dead_trials(self._study)
            trials, gone = point_trials(self._study), retired(self._study)
        except Exception as exc:  # noqa: BLE001  a storage gone away: keep what we know
            logger.warning("could not read the sweep's storage: %s", exc)
            return {r.index: ("done" if r.status in FINAL else "running") for r in self.runs}
        states, named = {}, [r.run_dir for r in self.runs]
        for run in self.runs:
            mine = trials.get(run.index, [])
            states[run.index] = point_state(mine, self.retries, gone)
            if mine:
                self._from_trials(run, mine)
        if [r.run_dir for r in self.runs] != named:
            self.save()   # a run's folder named as soon as it exists: a sweep killed
            # meanwhile still names (and removes) it
        return states

    def named_run_dir(self, trial_id: int) -> str | None:
        """The run folder attempt ``trial_id`` named in the storage as it was made
        (None: not made yet, or the storage cannot be read)."""
        try:
            attrs = self._study._storage.get_trial(trial_id).user_attrs
        except Exception:  # noqa: BLE001  a storage gone away: the folder stays unnamed
            return None
        return under_root(self.out, attrs.get("run_dir"))

    def _from_trials(self, run, trials):
        last = trials[-1]
        known = self._answers.get(last._trial_id)
        if known is not None:
            apply_answer(run, known, self.out)
        elif outcome(last) == "running":
            run.status = "running"
            run.run_dir = under_root(self.out, last.user_attrs.get("run_dir")) or \
                (run.run_dir if run.pid == last.user_attrs.get("pid") else None)
        else:
            apply_answer(run, {**last.user_attrs, "status": outcome(last),
                               "error": _error_of(last)}, self.out)
        earlier = [under_root(self.out, t.user_attrs.get("run_dir")) for t in trials[:-1]]
        run.previous = list(dict.fromkeys(d for d in earlier if d and d != run.run_dir))
        run.attempts = [{"run_dir": d, "status": outcome(t), "host": t.user_attrs.get("host"),
                         "error": _error_of(t)} for t, d in zip(trials[:-1], earlier)]

    def _finish(self, worker_failure):
        """The final record: points not trained say why, the sweep's status."""
        self.refresh()
        why = self.disk_error or ("the sweep was stopped" if self.signum else None)
        for run in self.runs:
            if run.status == "pending" and why:
                run.status, run.error = "not started", why
            elif run.status == "pending" and worker_failure:
                run.status, run.error = "failed", worker_failure
        self.status = "interrupted" if self.signum else \
            "completed" if all(r.status == "completed" for r in self.runs) else "failed"
        self.ended_at = now_iso()
        self.save()
        if self.mlflow:
            from ..analysis.mlflow_groups import end_parent, sweep_group
            end_parent(self.mlflow, sweep_group(self.dir, self._record()),
                       self._spec.mlflow_parent)

    def failures(self) -> list[SweepRun]:
        """The runs that did not complete."""
        return [r for r in self.runs if r.status != "completed"]

    def run_dirs(self) -> list[str]:
        """The points' run directories that exist (``gc`` may have removed some)."""
        return [r.run_dir for r in self.runs if r.run_dir and is_run_dir(r.run_dir)]

    def save(self) -> None:
        """Write ``sweep.json`` (:func:`.sweep_record.write_record`). A write that
        fails even after the space set aside is given back (a full disk) is
        kept in ``record_error`` and ``disk_error``: no further run starts,
        the command says it in one line, sweep.json keeps its last whole version.
        """
        self.record_error = write_record(self.dir, self._record())
        if self.record_error is not None:
            self.disk_error = self.disk_error or self.record_error

    def _record(self):
        return {"sweep_id": self.sweep_id, "experiment": self.experiment, "spec": self.spec,
                "name": self.name, "grid": self.grid, "set": self.sets,
                "config_file": self.config_file, "workers": self.workers, "out": self.out,
                "storage": masked(self._spec.storage), "study": self._spec.study,
                "retries": self.retries, "status": self.status, "started_at": self.started_at,
                "ended_at": self.ended_at, "runs": [r.as_dict() for r in self.runs]}


def _error_of(trial):
    """A finished trial's error: its run's, or the dead worker it names."""
    error = trial.user_attrs.get("error")
    return error if error or outcome(trial) != "failed" else dead_worker_error(trial.user_attrs)


def _texts(values):
    """Values as the command line writes them (``0.1``, ``true``), lists item by
    item: a Python sweep and the same command line share one study."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)
    return {k: [text(x) for x in v] if isinstance(v, list) else text(v) for k, v in values.items()}


def _check_workers(workers, n_runs):
    if workers is None:
        return max(1, min(os.cpu_count() or 1, n_runs))
    return min(check_count(workers, 1, "--workers", " (runs at the same time)"), max(1, n_runs))
