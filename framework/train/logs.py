"""The run's step logs: which callbacks write loss.csv, params.csv,
grad_norm.csv and eval.csv, as the config asks (registered features)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .features import Build, feature

if TYPE_CHECKING:
    from ..callbacks.eval_monitor import EvalMonitor
    from ..callbacks.grad_norm_monitor import GradNormMonitor
    from ..callbacks.loss_monitor import LossMonitor
    from ..callbacks.parameter_tracker import ParameterTracker


@feature("loss", order=30)
def loss_log(run: Build, before: object) -> LossMonitor:
    """loss.csv (and lr, time, loss components); a NaN loss ends the run diverged."""
    from ..callbacks import LossMonitor
    cfg, resume = run.cfg, run.resume
    return LossMonitor(run.run_dir, every=cfg.log_every, all_ranks=cfg.log_all_ranks,
                       time_offset=resume.time_offset if resume else 0.0,
                       on_nan="stop",  # the run records "diverged" instead
                       steps_per_epoch=run.steps_per_epoch)  # its lr: the list's records


@feature("params", order=40)
def params_log(run: Build, before: object) -> ParameterTracker | None:
    """params.csv, when track_params."""
    from ..callbacks import ParameterTracker
    cfg = run.cfg
    if not cfg.track_params:
        return None
    return ParameterTracker(run.run_dir, names=list(cfg.track_names) or None,
                            all_ranks=cfg.log_all_ranks, every=cfg.log_every,
                            max_values=cfg.max_param_values, steps_per_epoch=run.steps_per_epoch,
                            budget=cfg.param_log_budget, stats=cfg.param_stats,
                            batch_size=cfg.batch_size * cfg.grad_accumulation)  # the budget's estimate


@feature("grad_norm", order=50)
def _grad_norm(run: Build, before: object) -> GradNormMonitor:
    """grad_norm.csv (TrainStep returns the norm before clipping)."""
    from ..callbacks import GradNormMonitor
    cfg = run.cfg
    return GradNormMonitor(run.run_dir, every=cfg.log_every, all_ranks=cfg.log_all_ranks,
                           steps_per_epoch=run.steps_per_epoch)


@feature("eval", order=60)
def _eval(run: Build, before: object) -> EvalMonitor | None:
    """eval.csv, when the experiment has an eval split and metrics."""
    if not run.metrics:
        return None
    from ..callbacks.eval_monitor import EvalMonitor
    return EvalMonitor(run.run_dir, list(run.metrics), steps_per_epoch=run.steps_per_epoch)
