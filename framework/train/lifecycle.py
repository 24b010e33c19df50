"""The life of a run, one object for every run: a tracked script's
(:class:`~mindexp.train.tracked.TrackedRun`, ``mindexp.track``) and an
experiment's (``Experiment.run``, ``mindexp run``/``resume``, sweep and tune
workers, msrun workers: :func:`~mindexp.train.launch.train`).

:class:`RunLifecycle` is entered around the run's training and decides, in
one place (:func:`run_status`, recorded by :meth:`RunLifecycle.conclude`),
how the run ended:

- ``completed`` when the block ends normally (``sys.exit()``/``sys.exit(0)``
  inside it too), ``diverged`` when the loss monitor stopped it, a
  callback's own status when it stopped the run and names one (a trial's
  ``pruned``);
- ``failed`` with the exception in one line and its traceback in error.txt,
  for any exception, ``SystemExit(N)`` with N not 0 included;
- ``interrupted`` when a signal (SIGINT/SIGTERM) stopped it (run.json names
  it), or a KeyboardInterrupt no signal explains (``interrupted by
  KeyboardInterrupt``).

What leaves the block after the record is final is the one thing the two
kinds differ in, by contract (DESIGN.md): a tracked script's block exits
``130``/``143`` on a signal and re-raises its exception; ``Experiment.run``
returns an interrupted run, and raises TrainingError for a failure (a
``SystemExit`` asked for by the user's code is re-raised as it is).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import types
from typing import Any, Callable, Mapping

from ..errors import TrainingError
from ..rundir.record import RunRecord, StoppedWaitingError
from ..rundir.run_lock import create_locked
from . import failures, mlflow_stream
from .signals import SignalStop

logger = logging.getLogger(__name__)

Finish = Callable[[str, str], None]  # finish(run_dir, status): the plots, before the final record

# run.json's error of a run a KeyboardInterrupt stopped that no signal explains
# (the user's code raised it, or no handler of ours was installed)
KEYBOARD_INTERRUPT = "interrupted by KeyboardInterrupt"


@dataclasses.dataclass(frozen=True)
class Stopped:
    """What the run's callbacks said when training ended: ``diverged``, why the
    loss monitor stopped it; ``status``, a callback's own final status (a
    trial's ``pruned``); ``reason``, why a callback stopped it early."""

    diverged: str | None = None
    status: str | None = None
    reason: str | None = None


def run_status(exc: BaseException | None, signum: int | None, stopped: Stopped) -> str | None:
    """The final status of a run whose training ended with ``exc`` (None:
    normally), ``signum`` the signal its stop noted: the one rule (see the
    module's docstring). None for a stop that came while another process held
    the run's write lock (``StoppedWaitingError``): run.json stays as it was."""
    if isinstance(exc, StoppedWaitingError):
        return None
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if exc is not None and not (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return "failed"
    if signum is not None:
        return "interrupted"
    if stopped.diverged:
        return "diverged"
    return stopped.status or "completed"


class RunLifecycle:
    """One run's life around its training; use it as a context manager.

    ``__enter__`` opens the run (:meth:`_open`: a subclass holds the signals,
    the folder and the record there) and starts the training section of its
    signal stop (a second signal stops at once); ``__exit__`` ends that
    section, decides and records the status (:meth:`conclude`), writes the
    final record, releases what the run held (its lock last) and says what
    leaves the block (:meth:`_outcome`).

    Used as is, by an experiment's runner: ``RunLifecycle(record, stopper,
    stopped=..., totals=..., finish=...)`` around ``Session.execute``.
    """

    def __init__(self, record: RunRecord | None = None, stopper: SignalStop | None = None, *,
                 stopped: Callable[[], Stopped] | None = None,
                 totals: Callable[[dict[str, Any], float], None] | None = None,
                 finish: Finish | None = None) -> None:
        self.record = record
        self._stopper = stopper
        self._stopped_now = stopped
        self._totals_now = totals
        self._finish = finish
        self._held = contextlib.ExitStack()
        self._training: Any = None
        self._start = 0.0

    # -- the block -------------------------------------------------------------
    def __enter__(self) -> RunLifecycle:
        try:
            self._open()
        except BaseException:
            self._held.close()
            raise
        assert self._stopper is not None  # set by the caller or by _open
        self._training = self._stopper.training()  # from here a second signal stops at once
        self._training.__enter__()
        self._start = time.monotonic()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> bool:
        self._training.__exit__(None, None, None)  # a signal from here on is only noted
        try:
            status = self.conclude(exc, time.monotonic() - self._start)
        finally:
            self._held.close()  # the lock last: after run.json is final
        return self._outcome(status, exc)

    def conclude(self, exc: BaseException | None, elapsed: float) -> str | None:
        """Decide the status (:func:`run_status`) and put it, why, and the run's
        totals into the record, then write the final record (a rank that does
        not write only keeps them); returns the status (None: run.json left
        as it was)."""
        assert self._stopper is not None
        stopped = self._stopped()
        status = run_status(exc, self._stopper.signum, stopped)
        if status is None or self.record is None:
            return status
        meta = self.record.meta
        if status == "failed":
            assert exc is not None
            record_failure(self.record, exc)
            logger.debug("training failed", exc_info=exc)
        elif status == "interrupted":
            note_signal(meta, self._stopper.signum)
            if self._stopper.signum is None:
                meta["error"] = KEYBOARD_INTERRUPT
        elif status == "diverged":
            meta["error"] = f"diverged: {stopped.diverged}"
        else:
            meta["stop_reason"] = stopped.reason
        meta["status"] = status
        self._totals(meta, elapsed)
        finish_record(self.record, self._finish)
        return status

    # -- what a kind of run adds -------------------------------------------------
    def _open(self) -> None:
        """Open the run before its training (an experiment's runner did: nothing)."""
        assert self._stopper is not None
        self._held.enter_context(self._stopper)  # installs the handlers if none were held

    def _stopped(self) -> Stopped:
        return self._stopped_now() if self._stopped_now is not None else Stopped()

    def _totals(self, meta: dict[str, Any], elapsed: float) -> None:
        """Steps, final loss, times into ``meta`` (the status is set)."""
        if self._totals_now is not None:
            self._totals_now(meta, elapsed)

    def _outcome(self, status: str | None, exc: BaseException | None) -> bool:
        """What leaves an experiment's run (True: nothing): an interrupted run
        returns; a failure raises TrainingError (the run's exception as its
        cause), except a ``SystemExit`` the user's code asked for, re-raised as
        is after the record is final."""
        if status == "interrupted" or exc is None:
            return True
        if status == "failed" and not isinstance(exc, SystemExit):
            assert self.record is not None
            record = self.record
            raise TrainingError(record.meta.get("error") or "training failed",
                                run_dir=record.run_dir if record.writer else None) from exc
        return False  # a SystemExit (the run ended as asked), or run.json left as it was


# -- the steps of a run's life, shared by both kinds --------------------------------

def hold_signals(held: contextlib.ExitStack, stopper: SignalStop | None = None) -> SignalStop:
    """SIGINT/SIGTERM handlers of a run (``stopper``'s, a new SignalStop by
    default), from before its folder exists until ``held`` closes (main thread
    only; earlier handlers restored, and a signal noted outside training
    passed on to them)."""
    return held.enter_context(stopper or SignalStop())


def hold_new_run(held: contextlib.ExitStack, out: str | os.PathLike[str], experiment: str,
                 label: str | None = None) -> str:
    """A new locked run folder under ``out/experiment``; its lock is released
    when ``held`` closes (after run.json is final)."""
    run_dir, lock = create_locked(out, experiment, label)
    held.callback(lock.release)
    return run_dir


def open_record(record: RunRecord, config: Mapping[str, Any], mlflow: str | None,
                mlflow_parent: str | None = None) -> None:
    """A starting run's first writes, a script's and an experiment's alike:
    config.json, run.json ``running`` (with the MLflow URI it streams to),
    the space set aside for its final record, then the MLflow sender (which
    follows run.json; ``mlflow_parent``: its sweep's or study's MLflow run). Only
    config.json's no-op on a rank that does not write."""
    record.write_config(dict(config))
    if not record.writer:
        return
    if mlflow:
        mlflow_stream.note_uri(record.meta, mlflow)
    record.write()
    reserve_or_fail(record)
    if mlflow:
        mlflow_stream.start_sender(record.run_dir, mlflow, mlflow_parent)


def record_failure(record: RunRecord, exc: BaseException) -> None:
    """Status ``failed`` with ``exc`` in one line, and its full traceback in
    error.txt (by the rank that writes); the caller finishes the record."""
    record.failed(failures.one_line(exc))
    if record.writer:
        failures.save_traceback(record.run_dir, exc)


def reserve_or_fail(record: RunRecord) -> None:
    """Set space aside for the final record, or fail the run now, while run.json
    can still be rewritten: training on would fail at a later write, with no room
    left to record why (its run.json would say running for good)."""
    error = failures.reserve_space(record.run_dir)
    if error is None:
        return
    record.failed(f"{failures.one_line(error)}: not even {failures.RESERVE_BYTES // 1024} KB "
                  f"free for the run's records")
    record.write()
    raise TrainingError(record.meta["error"], run_dir=record.run_dir)


def finish_record(record: RunRecord,
                  finish: Callable[[str, str], None] | None = None) -> None:
    """The run's last writes: ``finish(run_dir, status)`` (plots), the log
    summary, the space set aside given back, then the final run.json."""
    if not record.writer:
        return
    if finish is not None:
        finish(record.run_dir, record.status)  # before the final record: it has all its files
    record_log_summary(record)
    failures.release_space(record.run_dir)
    record.write()
    mlflow_stream.run_ended(record.run_dir)  # a sender still waiting: the end-of-run sync


def record_log_summary(record: RunRecord) -> None:
    """Keep the summary of the logs in run.json, so reports read a finished run
    from run.json alone (see rundir.summary); the logs are closed by now."""
    from ..rundir.run import Run
    from ..rundir.summary import SUMMARY_KEY, log_summary
    record.meta.pop(SUMMARY_KEY, None)
    try:
        record.meta[SUMMARY_KEY] = log_summary(Run(record.run_dir))
    except Exception:  # a report reads the CSVs instead; never fail the run for it
        logger.debug("no log summary for %s", record.run_dir, exc_info=True)


def note_signal(meta: dict[str, Any], signum: int | None) -> None:
    """run.json names the signal that stopped the run (``signal``: ``"SIGINT"``)."""
    if signum is not None:
        name = failures.signal_name(signum)
        meta.update(signal=name, error=f"interrupted by {name}")


