"""TrialPruning: report a trial's progress to Optuna and stop it when pruned."""
import math

from mindspore.train import Callback

from ..callbacks._common import first_output, to_float
from ..callbacks._mindspore import eval_results, net_outputs

__all__ = ["TrialPruning"]


class TrialPruning(Callback):
    """Report the objective to ``trial`` at each epoch's end; stop when Optuna prunes.

    With an eval ``metric`` it reports that metric after each evaluation
    (the running best when ``best``); without, each epoch's mean training
    loss. When ``trial.should_prune()`` says so it requests a stop and sets
    :attr:`stop_status` to ``"pruned"``, which the runner records as the
    run's status: the run ends cleanly, with its logs and final checkpoint.

    Args:
        trial: an ``optuna.Trial``.
        metric: eval metric name, or None for the mean training loss.
        best: report the best value so far (``maximize``: the largest).
        maximize: the study's direction (for the running best).
    """

    def __init__(self, trial, metric=None, best=False, maximize=False):
        super().__init__()
        self.trial, self.metric, self.best, self.maximize = trial, metric, bool(best), maximize
        self.stop_status = self.stop_reason = None
        self._sum, self._count, self._best = 0.0, 0, None

    def on_train_step_end(self, run_context):
        if self.metric is None:
            loss = to_float(first_output(net_outputs(run_context.original_args())))
            self._sum, self._count = self._sum + loss, self._count + 1

    def on_train_epoch_end(self, run_context):
        cb_params = run_context.original_args()
        value = self._epoch_value(cb_params)
        self._sum, self._count = 0.0, 0
        if value is None or not math.isfinite(value):
            return  # no evaluation this epoch, or a NaN the loss monitor reports as diverged
        epoch = int(cb_params.cur_epoch_num)
        self.trial.report(value, epoch)
        if self.trial.should_prune():
            self.stop_status = "pruned"
            self.stop_reason = f"pruned at epoch {epoch} (reported value {value:.6g})"
            run_context.request_stop()

    def _epoch_value(self, cb_params):
        if self.metric is None:
            return self._sum / self._count if self._count else None
        results = eval_results(cb_params) or {}
        if self.metric not in results:
            return None
        value = to_float(results[self.metric])
        if self.best and self._best is not None:
            value = max(value, self._best) if self.maximize else min(value, self._best)
        self._best = value
        return value
