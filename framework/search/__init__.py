"""Hyper-parameter search on Optuna: ``mindexp tune`` and :func:`tune`.

Optuna is the optional extra ``mindexp[tune]``; it is imported only when a
study is made or read. Every trial is a normal run directory (label
``trial-<n>``, run.json naming ``study`` and ``trial``) under
``<out>/studies/<study>/``, beside the study's journal file, its logs and
its plots.
"""
from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import ConfigError
from .results import best, save_plots, study_frame
from .study import run_trials

__all__ = ["tune", "study_frame", "sweep"]

if TYPE_CHECKING:
    from ..analysis.notebook import Run, Runs
    from ..define.experiment import BaseExperiment


def tune(experiment: type[BaseExperiment] | str, space: Mapping[str, str | Sequence[Any]],
         trials: int = 20, objective: str = "final_loss", direction: str | None = None,
         sampler: str = "tpe", pruner: str = "median", workers: int = 1,
         timeout: float | str | None = None, study: str | None = None,
         storage: str | None = None, config: Mapping[str, Any] | None = None,
         seed: int | None = None, out: str | os.PathLike[str] = "outputs",
         mlflow: str | None = None) -> Run | None:
    """Search ``space`` for ``experiment`` and return the best trial's ``mindexp.Run``
    (None when no trial completed).

    Args:
        experiment: an Experiment subclass, or what ``mindexp run`` accepts
            (``"linear"``, ``"path/file.py:Class"``).
        space: ``{field: "loguniform:1e-4:1" | "uniform:A:B" | "int:A:B" |
            "int-log:A:B" | "choice:a,b" | [a, b]}``.
        trials: the study's total number of trials (a resumed study runs the rest).
        objective: a column ``compare()`` reports for a run (``final_loss``,
            ``min_loss``, ``dense.weight_error``, an eval metric's column).
        direction: ``"minimize"`` or ``"maximize"``; None infers it from the
            objective's name as ``early_stop_mode=auto`` does (``loss``, ``mse``,
            ``error``: minimize; ``accuracy``, ``f1``, ``auc``, ``r2``: maximize),
            ConfigError when the name does not tell.
        sampler: ``"tpe"``, ``"random"`` or ``"grid"``.
        pruner: ``"median"``, ``"hyperband"`` or ``"none"``.
        workers: trials at once, each worker a process (needs an importable
            experiment class); 1 runs the trials in this process.
        timeout: no new trial after this long (seconds or ``"10m"``).
        study: the study's name (default: the experiment's). An existing study
            is continued; with another space, objective or direction it is
            refused (ConfigError naming the difference).
        storage: an RDB URL or a journal file (default:
            ``<out>/studies/<study>/journal.log``).
        config: fixed config values of every trial.
        seed: the sampler's seed (same seed, sampler and ``workers=1``: same
            sequence of parameters; a continued study draws new ones).
        out: the output root; the study's folder is ``<out>/studies/<study>/``.
        mlflow: an MLflow tracking URI: the study is a parent run there and each
            trial's run streams to it as a child while it trains.
    """
    from ..analysis.notebook import load_run  # renders in Jupyter
    from .driver import (close_mlflow_parent, finish, make_spec, open_mlflow_parent,
                         run_workers, start)
    uri = _mlflow_uri(mlflow)
    cls, entry = _experiment(experiment)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1. Received: workers={workers!r}",
                          field="workers")
    if workers > 1 and entry.split(":")[0] == "__main__":
        raise ConfigError(f"workers > 1 runs trials in other processes, which cannot import "
                          f"{cls.__name__} from __main__; move it into a module. "
                          f"Received: workers={workers}", field="workers")
    spec = make_spec(cls, entry, space, objective, trials, direction, sampler, pruner, seed,
                     timeout, study, storage, config, out)
    study_obj = start(spec)
    open_mlflow_parent(spec, study_obj, uri)
    try:
        if workers == 1:
            signum = _in_process(spec, cls)
        else:
            signum = run_workers(spec, workers)
    finally:
        finish(spec)
    close_mlflow_parent(spec, study_obj, signum)
    save_plots(study_obj, spec.study_dir)
    if signum is not None:
        raise KeyboardInterrupt(f"study {spec.study} stopped by signal {signum}")
    found = best(study_obj)
    return load_run(found.user_attrs["run_dir"]) if found else None


def sweep(experiment: type[BaseExperiment] | str, grid: Mapping[str, Sequence[Any]],
          config: Mapping[str, Any] | None = None, out: str | os.PathLike[str] = "outputs",
          workers: int = 1, storage: str | os.PathLike[str] | None = None, retries: int = 0,
          name: str | None = None, mlflow: str | None = None,
          seeds: int | Sequence[int] | None = None) -> Runs:
    """Train every point of ``grid`` (the cartesian product of its values) and
    return the points' runs (``Runs``; ``.compare()`` gives the table).

    The points are trials of an Optuna study that worker processes claim, as
    ``mindexp sweep`` does (see its documentation): the same call again
    continues an unfinished sweep (completed points stay, interrupted ones
    resume, failed ones train anew).

    Args:
        experiment: an Experiment subclass in an importable module (workers
            import it), or what ``mindexp run`` accepts (``"linear"``).
        grid: ``{field: [values]}``, e.g. ``{"optimizer": ["sgd", "adam"], "lr": [0.01, 0.1]}``.
        config: fixed config values of every point.
        out: the output root; runs go to ``<out>/<experiment>/``, the record to
            ``<out>/sweeps/<sweep_id>/sweep.json``.
        workers: points trained at the same time by this process's workers.
        storage: an RDB URL (``postgresql+psycopg://...``) or a journal file
            that other machines running the same sweep share; None: a
            journal file in the sweep's folder.
        retries: times a failed point is trained again before it is recorded failed.
        name: label for the sweep id and its runs' ids.
        mlflow: an MLflow tracking URI: the sweep is a parent run there and each
            run streams to it as a child while it trains.
        seeds: train every point with each seed, recorded as the config field
            ``seed``: ``5`` for seeds 0..4, or a list (``[3, 7, 11]``); the same
            seeds for every point.

    Raises ConfigError (nothing started) for a bad grid, config, ``workers``,
    ``retries`` or storage; KeyboardInterrupt when a signal stopped the sweep
    (its runs are interrupted, resumable by the same call).
    """
    from ..analysis.notebook import load_runs
    from .sweeps import Sweep, check_grid, check_points, parse_seeds, with_seeds
    uri = _mlflow_uri(mlflow)
    cls, entry = _experiment(experiment)
    if entry.split(":")[0] == "__main__":
        raise ConfigError(f"a sweep trains in worker processes, which cannot import "
                          f"{cls.__name__} from __main__; move it into a module. "
                          f"Received: experiment={cls.__name__}", field="experiment")
    points = check_grid(grid, cls) if grid or seeds is None else {}
    if seeds is not None:
        listed = str(seeds) if isinstance(seeds, int) and not isinstance(seeds, bool) else \
            ",".join(map(str, seeds)) if isinstance(seeds, (list, tuple, range)) else repr(seeds)
        points = with_seeds(points, parse_seeds(listed), dict(config or {}))
    check_points(cls, points, dict(config or {}))
    spec = experiment if isinstance(experiment, str) else entry
    job = Sweep(spec, points, dict(config or {}), out=out, workers=workers, name=name,
                entry=entry, storage=storage, retries=retries, mlflow=uri)
    job.start(cls.experiment_name())
    if job.run() == "interrupted":
        raise KeyboardInterrupt(f"sweep {job.sweep_id} stopped by signal {job.signum}")
    trained = job.run_dirs()
    if not trained:  # a shared sweep whose points other machines trained: none here
        from ..analysis.notebook import Runs
        return Runs([])
    return load_runs(trained)


def _experiment(experiment: type[BaseExperiment] | str) -> tuple[type[BaseExperiment], str]:
    if isinstance(experiment, str):
        from ..define.catalog import resolve_spec
        return resolve_spec(experiment)
    from ..define.experiment import BaseExperiment
    if not (inspect.isclass(experiment) and issubclass(experiment, BaseExperiment)):
        raise ConfigError(f"experiment must be an Experiment subclass or a name. "
                          f"Received: experiment={experiment!r}", field="experiment")
    module = experiment.__module__
    if module != "__main__" and module.startswith("mindexp_user_"):
        module = os.path.abspath(inspect.getfile(experiment))  # a file loaded by path
    return experiment, f"{module}:{experiment.__qualname__}"


def _mlflow_uri(uri: str | None) -> str | None:
    if uri is None:
        return None
    from ..train.mlflow_stream import tracking_uri
    try:
        return tracking_uri(uri)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--mlflow", "mlflow="), field="mlflow") from None


def _in_process(spec: Any, cls: type[BaseExperiment]) -> int | None:
    from .signals import StopFlag, handlers
    stop = StopFlag()
    with handlers(stop.handler):
        run_trials(spec, cls, stop)
    return stop.signum
