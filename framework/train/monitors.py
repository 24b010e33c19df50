"""Watched values of a run: early stopping and the best checkpoints.

``early_stop`` and ``checkpoint_monitor`` name ``loss`` or ``eval_<metric>``;
this module checks those names against the experiment (before a run
directory exists), builds the callbacks' arguments, and puts an
EarlyStopping back where it was at a resume point: the best value and the
epochs waited are replayed from loss.csv (the last loss of each epoch is
always logged) or eval.csv (one row per evaluation), so a resumed run stops
where the uninterrupted run would have.
"""
import logging
import math
from typing import Any, Iterable, Sequence

from ..define import config as _config
from ..callbacks import schema
from ..errors import ConfigError
from .features import Build, feature
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..callbacks.early_stopping import EarlyStopping
    from ..define.experiment import BaseExperiment
    from .resume_point import Resume

logger = logging.getLogger(__name__)


def check_monitors(exp: "BaseExperiment", eval_: Any, workers: int = 1) -> None:
    """early_stop / checkpoint_monitor name a value this run has, with a known direction."""
    cfg = exp.config
    if cfg.early_stop == "loss" and workers > 1:
        # each rank sees the loss of its own shard: ranks could stop at different
        # epochs and leave the others waiting in a collective
        raise ConfigError("config field 'early_stop': loss is each worker's own shard loss, so "
                          f"with {workers} workers they could stop at different epochs; accepted: "
                          "an eval_<metric> (the same on every worker). Received: early_stop='loss'",
                          field="early_stop")
    for field, name in (("early_stop", cfg.early_stop), ("checkpoint_monitor", cfg.checkpoint_monitor)):
        if not name:
            continue
        accepted = monitored_values(exp, eval_)
        if name not in accepted:
            raise ConfigError(f"config field {field!r}: {exp.experiment_name()} has no value {name!r} "
                              f"to watch; accepted: {', '.join(accepted)} (or empty: off). "
                              f"Received: {field}={name!r}", field=field)
        if monitor_mode_of(exp, name) is None:
            raise ConfigError(f"config field {field!r}: cannot tell whether {name!r} should go up "
                              "or down; set early_stop_mode=min or max (and early_stop to the same "
                              f"value). Received: {field}={name!r}", field=field)


def monitored_values(exp: "BaseExperiment", eval_: Any) -> list[str]:
    """Values early_stop / checkpoint_monitor can watch: loss, eval_loss, eval_<metric>."""
    metrics = exp.metrics() if eval_ is not None else []
    names = list(metrics) if metrics else []
    evals = ["eval_loss"] + [f"eval_{m}" for m in names if m != "loss"] if names else []
    return ["loss"] + evals


def monitor_mode_of(exp: "BaseExperiment", name: str) -> str | None:
    """``"min"``/``"max"`` for a watched value; early_stop_mode applies to early_stop's value."""
    cfg = exp.config
    mode = cfg.early_stop_mode if name == cfg.early_stop else "auto"
    return _config.monitor_mode(name, mode, exp.metrics())


def early_stopping(exp: "BaseExperiment", run_dir: str, resume: "Resume | None",
                   steps_per_epoch: int) -> "EarlyStopping | None":
    """The run's EarlyStopping, or None when ``early_stop`` is off.

    On a resume its state is replayed from the logs (an interrupted run
    stops where it would have), except after an early stop the user asked to
    train on from: then the patience counter starts afresh.
    """
    from ..callbacks import EarlyStopping
    cfg = exp.config
    if not cfg.early_stop:
        return None
    callback = EarlyStopping(cfg.early_stop, patience=cfg.patience, min_delta=cfg.min_delta,
                             mode=monitor_mode_of(exp, cfg.early_stop))
    if resume is not None and not resume.early_stopped:
        replay_early_stop(callback, run_dir, resume.step, steps_per_epoch)
    return callback


def best_checkpoint_args(exp: "BaseExperiment") -> dict[str, Any]:
    """``monitor``, ``mode`` and ``keep_best`` for the Checkpoint callback."""
    cfg = exp.config
    if not cfg.checkpoint_monitor:
        return {}
    return {"monitor": cfg.checkpoint_monitor, "keep_best": cfg.keep_best or 1,
            "mode": monitor_mode_of(exp, cfg.checkpoint_monitor)}


def replay_early_stop(callback: "EarlyStopping", run_dir: str, step: int,
                      steps_per_epoch: int) -> bool:
    """Feed ``callback`` the values of the epochs completed by ``step``.

    Returns False (and warns; the counter starts afresh) when the logs lack
    the monitored value.
    """
    done = step // steps_per_epoch
    values = _epoch_values(run_dir, callback.monitor, done, steps_per_epoch)
    if values is None:
        logger.warning("early_stop: the logs of %s lack %s; the patience counter starts afresh",
                       run_dir, callback.monitor)
        return False
    for epoch, value in values:
        callback.update(value, epoch)
    return True


def _epoch_values(run_dir: str, monitor: str, done: int,
                  steps_per_epoch: int) -> list[tuple[int, float | None]] | None:
    """``(epoch, value)`` of each epoch done (loss: its last step's; eval: each evaluation)."""
    if monitor == "loss":
        rows = schema.read_rows(schema.path_of(run_dir, schema.LOSS.name))
        by_step = {int(r[schema.Col.STEP]): _number(r.get(schema.Col.LOSS)) for r in rows}
        return [(e, by_step.get(e * steps_per_epoch)) for e in range(1, done + 1)]
    rows = schema.read_rows(schema.path_of(run_dir, schema.EVAL.name))
    column = monitor if rows and monitor in rows[0] else monitor[len("eval_"):]
    if rows and column not in rows[0]:
        return None
    return [(int(r[schema.Col.EPOCH]), _number(r[column])) for r in rows
            if int(r[schema.Col.EPOCH]) <= done]


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


@feature("early_stop", order=110)
def early_stop_callback(run: Build, before: object) -> "EarlyStopping | None":
    return early_stopping(run.exp, run.run_dir, run.resume, run.steps_per_epoch)


@feature("checkpoint", order=120)
def _checkpoint(run: Build, before: Sequence[Any]) -> object:
    """After every log: it flushes the callbacks before it that buffer (ours
    and the experiment's: anything with a flush()), so no log is ever
    behind a checkpoint."""
    from ..callbacks import Checkpoint
    cfg = run.cfg
    flush = [cb for cb in before if callable(getattr(cb, "flush", None))]
    return Checkpoint(run.run_dir, every_epochs=cfg.checkpoint_every or None,
                      keep_last=cfg.keep_checkpoints, min_interval_s=cfg.checkpoint_interval_s,
                      flush=flush, steps_per_epoch=run.steps_per_epoch,
                      stateful=stateful_callbacks(before, run.resume),  # state in each checkpoint
                      **best_checkpoint_args(run.exp))


def stateful_callbacks(cbs: Iterable[Any], resume: Any = None) -> list[Any]:
    """The callbacks of ``cbs`` that keep state beyond their files (opt-in:
    ``state_dict()`` and ``load_state_dict(state)``), saved with each
    checkpoint; on a resume (``resume``, a Resume) they get their state back
    here, before training starts."""
    from ..callbacks.checkpoint import load_callback_state
    stateful = [cb for cb in cbs if callable(getattr(cb, "state_dict", None))
                and callable(getattr(cb, "load_state_dict", None))]
    if resume is not None and stateful:
        load_callback_state(resume.params, stateful)
    return stateful
