"""EvalMonitor: eval metrics after each evaluation to eval.csv."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ._common import (calling_model_metrics, check_directory, check_steps_per_epoch, eval_key,
                      eval_results, eval_value, first_output, is_finite, log_path, to_float)
from .eval_loss import HOW_TO_ADD, check_loss_metric, reads_eval_loss
from ._log_callback import LogCallback
from . import schema
from .csv_log import CsvLog

__all__ = ["EvalMonitor"]

if TYPE_CHECKING:
    from mindspore.train import RunContext


class EvalMonitor(LogCallback):
    """Write ``epoch,step,<metric>...`` to ``<directory>/eval.csv``.

    Reads the results ``Model.fit`` puts in ``eval_results`` after each
    evaluation (``valid_frequency``), at the epoch's end: the names of the
    Model's ``metrics``, each also spelled ``eval_<name>``; any other name
    is rejected at train begin, listing them. ``"eval_loss"`` (and
    ``"loss"``) is the Model's ``"loss"`` metric, which must be mindexp's
    ``mindexp.callbacks.EvalLoss`` (the eval set's sample-weighted
    mean loss) or a metric of your own: never MindSpore's ``eval_loss``
    (the last batch's) nor its ``Loss`` metric (batches weighted alike),
    refused at train begin with what to add.

    A row is written for completed epochs only: not for an epoch cut
    short (a stop request mid-epoch still runs Model.fit's evaluation, on a
    partial epoch), nor after the loss or an
    eval value became NaN/Inf (a diverged run). So after any number of
    interruptions and resumes each epoch is in eval.csv once.

    Args:
        directory: folder of ``eval.csv``.
        metrics: metric names, in column order.
        all_ranks: ranks other than 0 write ``eval.rankN.csv``.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
        append: continue an existing ``eval.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
    """

    def __init__(self, directory: str | os.PathLike[str], metrics: str | Sequence[str],
                 all_ranks: bool = False, steps_per_epoch: int | None = None,
                 append: bool = False) -> None:
        super().__init__()
        self.append = bool(append)
        self.directory = check_directory(directory)
        if isinstance(metrics, str):
            metrics = [metrics]
        self.metrics = list(metrics or ())
        if not self.metrics or not all(isinstance(m, str) and m for m in self.metrics):
            raise ValueError(f"`metrics` must name at least one metric. Received: metrics={metrics!r}")
        self.all_ranks = bool(all_ranks)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.last: dict[str, float | None] = {}
        self.skipped: list[tuple[int, str]] = []  # (epoch, why) of evaluations not written
        self._log: CsvLog | None = None
        self._names_checked = False

    def on_train_begin(self, run_context: RunContext) -> None:
        metric_fns = calling_model_metrics()
        if metric_fns is not None:
            if any(reads_eval_loss(m) for m in self.metrics):
                check_loss_metric("EvalMonitor")
            self._check_names(list(metric_fns))
        path = log_path(self.directory, schema.EVAL.filename, self.all_ranks)
        self._log = self._checked_log(path, list(schema.EVAL.columns) + self.metrics, flush_rows=1) \
            if path else None

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        results = eval_results(cb_params)
        if not results:
            return
        self._check_names(list(results))
        step, epoch, complete = self._step_info(cb_params)
        values = {k: eval_value(results, k) for k in self.metrics}  # each found: checked above
        why = self._reason_to_skip(cb_params, complete, values)
        if why:
            self.skipped.append((epoch, why))
            return
        self.last = values
        if self._log is not None:
            self._log.write([epoch, step] + [values[k] for k in self.metrics])

    def _check_names(self, names: Sequence[str]) -> None:
        if self._names_checked:
            return
        unknown = [m for m in self.metrics if eval_key(m, names) is None]
        if unknown:
            loss = (f" (eval_loss is the 'loss' metric: {HOW_TO_ADD})"
                    if any(reads_eval_loss(m) for m in unknown) else "")
            raise ValueError(
                f"EvalMonitor: Model does not produce the metric(s) {', '.join(unknown)}; it "
                f"reports {', '.join(names) or 'none (Model was built without metrics)'} "
                f"(the keys of Model(..., metrics={{...}}), also as eval_<name>){loss}. "
                f"Received: metrics={self.metrics!r}")
        self._names_checked = True

    @staticmethod
    def _reason_to_skip(cb_params: Any, complete: bool,
                        values: Mapping[str, float | None]) -> str | None:
        if not complete:
            return "the epoch was cut short"
        loss = to_float(first_output(cb_params.get("net_outputs")))
        if loss is not None and not is_finite(loss):
            return f"the training loss is {loss}"
        bad = [k for k, v in values.items() if not is_finite(v)]
        if bad:
            return f"{', '.join(bad)} is not finite"
        return None
