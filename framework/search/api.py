"""The public searches: :func:`tune` (an Optuna study) and :func:`sweep` (a grid).

Both check every input before anything starts (ConfigError), train through
the same workers as ``mindexp tune``/``mindexp sweep`` and hand back what
the notebook reads (``mindexp.Run``/``mindexp.Runs``).
"""
from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import ConfigError
from .results import best, save_plots
from .space import check_count
from .study import TuneSpec, run_trials

if TYPE_CHECKING:
    from optuna import Study

    from ..analysis.notebook import Run, Runs
    from ..define.experiment import BaseExperiment
    from .sweeps import Sweep

__all__ = ["tune", "sweep"]


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
    from .driver import make_spec
    uri = _mlflow_uri(mlflow)
    cls, entry = _experiment(experiment)
    if check_count(workers, 1, "workers", sep="=") > 1:
        _check_importable(cls, entry, "workers > 1 runs trials in other processes", "workers",
                          workers)
    spec = make_spec(cls, entry, space, objective, trials, direction, sampler, pruner, seed,
                     timeout, study, storage, config, out)
    found = best(_run_study(spec, cls, workers, uri))
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
    from .sweeps import Sweep
    uri = _mlflow_uri(mlflow)
    cls, entry = _experiment(experiment)
    _check_importable(cls, entry, "a sweep trains in worker processes", "experiment",
                      cls.__name__)
    points = _sweep_points(cls, grid, seeds, dict(config or {}))
    spec = experiment if isinstance(experiment, str) else entry
    job = Sweep(spec, points, dict(config or {}), out=out, workers=workers, name=name,
                entry=entry, storage=storage, retries=retries, mlflow=uri)
    job.start(cls.experiment_name())
    if job.run() == "interrupted":
        raise KeyboardInterrupt(f"sweep {job.sweep_id} stopped by signal {job.signum}")
    return _sweep_runs(job)


def _run_study(spec: TuneSpec, cls: type[BaseExperiment], workers: int,
               uri: str | None) -> Study:
    """Run the study's trials here (``workers`` 1) or in worker processes; returns
    the study once its plots are saved, KeyboardInterrupt when a signal stopped it."""
    from .driver import close_mlflow_parent, finish, open_mlflow_parent, run_workers, start
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
    return study_obj


def _check_importable(cls: type[BaseExperiment], entry: str, why: str, field: str,
                      value: object) -> None:
    """ConfigError when worker processes (``why``) could not import ``cls`` (from ``__main__``)."""
    if entry.split(":")[0] == "__main__":
        raise ConfigError(f"{why}, which cannot import {cls.__name__} from __main__; move it "
                          f"into a module. Received: {field}={value}", field=field)


def _sweep_points(cls: type[BaseExperiment], grid: Mapping[str, Sequence[Any]],
                  seeds: int | Sequence[int] | None,
                  config: dict[str, Any]) -> dict[str, list[Any]]:
    """``grid`` checked, with ``seed`` as its last axis when ``seeds`` is given (ConfigError)."""
    from .sweeps import check_grid, check_points, parse_seeds, with_seeds
    points = check_grid(grid, cls) if grid or seeds is None else {}
    if seeds is not None:
        points = with_seeds(points, parse_seeds(_seeds_text(seeds)), config)
    check_points(cls, points, config)
    return points


def _seeds_text(seeds: int | Sequence[int]) -> str:
    """``seeds`` as ``--seeds`` takes it, so both paths share one parser and its errors."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        return str(seeds)
    if isinstance(seeds, (list, tuple, range)):
        return ",".join(map(str, seeds))
    return repr(seeds)


def _sweep_runs(job: Sweep) -> Runs:
    """The runs this process's workers trained for ``job``."""
    from ..analysis.notebook import Runs, load_runs
    trained = job.run_dirs()
    if not trained:  # a shared sweep whose points other machines trained: none here
        return Runs([])
    return load_runs(trained)


def _experiment(experiment: type[BaseExperiment] | str) -> tuple[type[BaseExperiment], str]:
    """The experiment class and its importable ``module:Class`` entry (ConfigError)."""
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
    """The tracking URI checked as ``--mlflow`` is, its errors naming ``mlflow=``."""
    if uri is None:
        return None
    from ..train.mlflow_stream import tracking_uri
    try:
        return tracking_uri(uri)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--mlflow", "mlflow="), field="mlflow") from None


def _in_process(spec: TuneSpec, cls: type[BaseExperiment]) -> int | None:
    """Run the trials in this process; the signal that stopped them, if any."""
    from .signals import StopFlag, handlers
    stop = StopFlag()
    with handlers(stop.handler):
        run_trials(spec, cls, stop)
    return stop.signum
