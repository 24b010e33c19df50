"""The public layer: ``Experiment.run`` and resuming a run, returning a ``Run``.

The runner (``mindexp.train``) trains and returns the run's directory;
this layer draws the run's plots after it and wraps the directory in a
``Run``. The command line and sweep workers start runs here too.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import TrainingError
from .define.experiment import BaseExperiment
from .analysis.notebook import Run

if TYPE_CHECKING:
    from .train.request import RunRequest

logger = logging.getLogger(__name__)


class Experiment(BaseExperiment):
    __doc__ = BaseExperiment.__doc__

    def run(self, out: str | os.PathLike[str] = "outputs", name: str | None = None,
            quiet: bool | None = None) -> Run | None:
        """Train in a new run directory under ``out``; returns a ``Run``.

        ``quiet=None`` (the default): a progress bar in Jupyter (tqdm's
        notebook widget), nothing elsewhere; False: a bar in a terminal too.
        """
        if quiet is None:
            from .train.progress import in_notebook
            quiet = not in_notebook()
        return run_experiment(self, out=out, label=name, quiet=quiet)


def run_experiment(exp: BaseExperiment, out: str | os.PathLike[str] = "outputs",
                   label: str | None = None, quiet: bool = True,
                   entry: str | None = None) -> Run | None:
    """Train ``exp`` in a new run directory under ``out``; returns its ``Run``
    (None on a rank other than 0 under the user's own msrun).

    Raises ConfigError/DataError before anything is created, TrainingError
    (``.run`` set, run.json says failed) when training itself fails.
    """
    from .train.request import RunRequest
    return run_request(RunRequest(exp, out=os.fspath(out), label=label, quiet=quiet,
                                  entry=entry))


def run_request(request: RunRequest) -> Run | None:
    """Train what ``request`` (a :class:`~mindexp.train.request.RunRequest`)
    declares, a new run or a resume; returns its ``Run``, as
    :func:`run_experiment` does."""
    from .train.launch import train
    kept: dict[str, Run] = {}

    def keep(run_dir: str) -> None:  # the final record, read while the run's lock is held
        try:
            kept[run_dir] = _read_now(run_dir)
        except Exception:  # noqa: BLE001  an unreadable record: _finished reads it again
            pass
    return _finished(lambda: train(request, finish=_save_plots, keep=keep), kept)


def resume_run(run_dir: str, overrides: Mapping[str, Any] | None = None,
               quiet: bool = True) -> Run | None:
    """Continue a run in its own directory from its latest good checkpoint;
    returns its ``Run``. ``overrides`` change config fields (``epochs``).

    Holds the run directory's lock from before it reads the run until its
    record is final: a second resume, ``rm`` or ``gc`` of the run meanwhile
    is refused (RunLockedError, one line).
    """
    from .rundir.leftovers import remove_dead_temp_files
    from .rundir.run_lock import run_locked
    from .train.request import RunRequest
    from .train.resume import check_run_dir, prepare_resume
    with run_locked(check_run_dir(run_dir), "resume"):
        remove_dead_temp_files(run_dir)  # a killed checkpoint write's, a killed plot's
        exp, point = prepare_resume(run_dir, overrides)
        out = os.path.dirname(os.path.dirname(point.run_dir))
        return run_request(RunRequest(exp, out=out, quiet=quiet, resume=point))


def _finished(start: Callable[[], str | None], kept: Mapping[str, Run]) -> Run | None:
    """Run ``start()`` (which returns a run directory, its plots drawn), wrap it.

    The run's record is read before its lock is released (``kept``, filled by
    ``train``'s ``keep``): once the lock is free, ``mindexp gc`` may remove
    the folder, and the returned ``Run`` must still say how the run ended
    (a sweep's worker answers with it).
    """
    try:
        run_dir = start()
    except TrainingError as exc:
        if exc.run_dir is not None:
            exc.run = kept.get(os.fspath(exc.run_dir)) or _read_now(exc.run_dir)
        raise
    if run_dir is None:
        return None
    return kept.get(run_dir) or _read_now(run_dir)


def _read_now(run_dir: str | os.PathLike[str]) -> Run:
    run = Run(run_dir)
    run.meta  # noqa: B018  (cached from now on)
    return run


def _save_plots(run_dir: str, status: str) -> None:
    """Draw plots/ of the run (the runner calls it before the run's final
    record, with the status that record will hold: run.json still says
    running, and the titles name the status); plots are a convenience, so
    a failure only warns.

    Not in an msrun worker: ranks must leave the cluster together, and a
    rank 0 still plotting after the others exit is declared timed out (the
    launcher plots instead), nor with ``MINDEXP_PLOTS=0``.
    """
    from .train.distributed import under_msrun
    from .train.figures import drawing_wanted
    if under_msrun() or not drawing_wanted():
        return
    try:
        from .analysis import plots
        run = Run(run_dir)
        run.meta["status"] = status  # what the final record will say (run.json: running)
        plots.save_run_plots(run)
    except Exception as exc:
        logger.warning("could not draw the plots of %s: %s: %s", run_dir, type(exc).__name__, exc)
