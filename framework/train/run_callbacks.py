"""The callbacks of a tracked run, built in one place for both its drivers.

A ``Model.train`` run of ``mindexp.track`` (``run.callbacks(model)``) and a
hand-written loop (``run.step``) hand MindSpore's hooks to one CallbackList
of the same parts in the same order; :func:`build_run_callbacks` makes it
from what differs between the two, so a log added to every tracked run is
one edit here (an experiment's run builds its list from the features
registered in :mod:`~mindexp.train.features`).

The order is part of the behaviour: the signal stop's head first (a signal
is taken before any part of a step runs), the Timer, the logs, early
stopping and the user's own callbacks, then the Checkpoint after every log
(it flushes each of them first: no log is ever behind a checkpoint), and
the signal stop last (a signal during any part of step s stops at s).
"""
from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..callbacks import CallbackList, Checkpoint, LossMonitor, Timer
    from .resume_point import Resume
    from .signals import SignalStop

__all__ = ["RunCallbacks", "RunCallbackSettings", "build_run_callbacks"]


@dataclasses.dataclass(frozen=True)
class RunCallbackSettings:
    """What differs between tracked runs' callbacks (the defaults are
    ``run.callbacks()``'s).

    ``grad_norm``: the trained cell returns the gradient norm (grad_norm.csv);
    ``steps_per_epoch``: a whole epoch's steps when the data holds only the
    rest of an interrupted one; ``checkpoint_every``: epochs between
    checkpoints (None: only when asked and at the end);
    ``checkpoint_monitor``: the value the best checkpoints are chosen by.
    """

    every: int = 1
    track_params: bool = True
    grad_norm: bool = False
    steps_per_epoch: int | None = None
    system_every_s: float = 5.0
    checkpoint_every: int | None = 1
    keep_checkpoints: int | None = 3
    checkpoint_monitor: str | None = None
    keep_best: int = 1


@dataclasses.dataclass
class RunCallbacks:
    """The run's CallbackList and the parts of it the run reads back."""

    callbacks: CallbackList
    timer: Timer
    loss: LossMonitor
    checkpoint: Checkpoint


def build_run_callbacks(run_dir: str, stopper: SignalStop, settings: RunCallbackSettings,
                        resume: Resume | None = None, *, early_stop: Any = None,
                        extra: Sequence[Any] = (), stateful: Sequence[Any] = ()) -> RunCallbacks:
    """The tracked run's CallbackList writing into ``run_dir`` (see the module).

    Args:
        run_dir: the run folder.
        stopper: the run's signal stop (its head first, itself last).
        settings: what the caller chose (:class:`RunCallbackSettings`).
        resume: the resume point, or None for a new run: the logs' time and
            the stateful callbacks continue from it.
        early_stop: an EarlyStopping (or None), after the logs.
        extra: the user's own callbacks, in order, before the Checkpoint.
        stateful: further parts saved in each checkpoint ahead of the
            callbacks' own state (given back by the caller on a resume).
    """
    from ..callbacks import CallbackList, LossMonitor, Timer
    s = settings
    timer = Timer()
    loss = LossMonitor(run_dir, every=s.every, on_nan="stop", steps_per_epoch=s.steps_per_epoch,
                       time_offset=resume.time_offset if resume else 0.0)
    cbs: list[Any] = [stopper.head(), timer, loss, *_logs(run_dir, s, resume)]
    cbs += ([early_stop] if early_stop is not None else []) + list(extra)
    checkpoint = _checkpoint(run_dir, s, cbs, resume, stateful)
    cbs += [checkpoint, stopper]
    return RunCallbacks(CallbackList(cbs, steps_per_epoch=s.steps_per_epoch),
                        timer, loss, checkpoint)


def _logs(run_dir: str, s: RunCallbackSettings, resume: Resume | None) -> list[Any]:
    """params.csv, grad_norm.csv and system.csv's writers, as ``s`` asks."""
    from ..callbacks import GradNormMonitor, ParameterTracker
    from .system import system_monitor
    spe = s.steps_per_epoch
    cbs: list[Any] = []
    if s.track_params:
        cbs.append(ParameterTracker(run_dir, every=s.every, steps_per_epoch=spe))
    if s.grad_norm:
        cbs.append(GradNormMonitor(run_dir, every=s.every, steps_per_epoch=spe))
    system = system_monitor(types.SimpleNamespace(system_every_s=s.system_every_s,
                                                  log_all_ranks=False), run_dir, resume)
    return cbs + ([system] if system is not None else [])


def _checkpoint(run_dir: str, s: RunCallbackSettings, before: list[Any],
                resume: Resume | None, stateful: Sequence[Any]) -> Checkpoint:
    """The Checkpoint after ``before``: it flushes each of them that buffers,
    and saves the state of each that keeps one."""
    from ..callbacks import Checkpoint
    from .monitors import stateful_callbacks
    best: dict[str, Any] = {"monitor": s.checkpoint_monitor, "keep_best": s.keep_best} \
        if s.checkpoint_monitor else {}
    flush = [cb for cb in before if callable(getattr(cb, "flush", None))]
    return Checkpoint(run_dir, every_epochs=s.checkpoint_every, keep_last=s.keep_checkpoints,
                      flush=flush, steps_per_epoch=s.steps_per_epoch,
                      stateful=list(stateful) + stateful_callbacks(before, resume), **best)
