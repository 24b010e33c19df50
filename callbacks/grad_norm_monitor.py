"""GradNormMonitor: the global gradient norm of every step to grad_norm.csv."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ._common import check_directory, check_every, check_steps_per_epoch, log_path, to_float
from ._log_callback import LogCallback
from ._recorder import Recorder
from . import schema
from .csv_log import CsvLog
from .step_record import StepRecord

__all__ = ["GradNormMonitor"]

if TYPE_CHECKING:
    from mindspore.train import RunContext


class GradNormMonitor(LogCallback):
    """Write ``step,epoch,grad_norm`` to ``<directory>/grad_norm.csv``.

    The norm comes from the train network's second output: build the model
    with ``TrainStep.model(net, loss_fn, optimizer, metrics=...)`` (or
    ``Model(TrainStep(nn.WithLossCell(net, loss_fn), optimizer))`` plus
    ``eval_network=EvalCell(net, loss_fn), eval_indexes=[0, 1, 2]``
    when there are metrics). Without it, training is refused at train begin,
    before any callback has created a file (they all create theirs on their
    first write). With ``per_param=True`` (and
    ``TrainStep(..., per_param_norms=True)``) each parameter's gradient norm
    also goes to ``grad_norm_params.csv`` as ``step,epoch,param,grad_norm``.

    Args:
        directory: folder of ``grad_norm.csv``.
        every: write every N-th global step (and each epoch's last step).
        per_param: also write per-parameter norms.
        all_ranks: ranks other than 0 write ``grad_norm.rankN.csv``.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
        append: continue an existing ``grad_norm.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
    """

    def __init__(self, directory: str | os.PathLike[str], every: int = 1, per_param: bool = False,
                 all_ranks: bool = False, steps_per_epoch: int | None = None,
                 append: bool = False) -> None:
        super().__init__()
        self.append = bool(append)
        self.directory = check_directory(directory)
        self.every = check_every("every", every)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.per_param = bool(per_param)
        self.all_ranks = bool(all_ranks)
        self.last_grad_norm: float | None = None
        self._log: CsvLog | None = None
        self._params_log: CsvLog | None = None
        self._names: tuple[str, ...] = ()
        self._recorder = Recorder(self.steps_per_epoch)

    def on_train_begin(self, run_context: RunContext) -> None:
        network = run_context.original_args().train_network
        self._check_network(network)
        self._names = tuple(getattr(network, "param_names", ()))
        self._recorder.begin(run_context.original_args())
        path = log_path(self.directory, schema.GRAD_NORM.filename, self.all_ranks)
        self._log = self._checked_log(path, schema.GRAD_NORM.columns) if path else None
        ppath = log_path(self.directory, schema.GRAD_NORM_PARAMS.filename, self.all_ranks)
        if self.per_param and ppath:
            self._params_log = self._checked_log(ppath, schema.GRAD_NORM_PARAMS.columns)

    def on_train_step_end(self, run_context: RunContext) -> None:
        self._record_when_due(run_context)

    def on_train_step_record(self, record: StepRecord, run_context: RunContext) -> None:
        """Write the step's norm when due (see :class:`StepRecord`)."""
        if record.step % self.every and not record.epoch_end:
            return
        step, epoch = record.step, record.epoch
        self.last_grad_norm = record.grad_norm
        if self._log is not None:
            self._log.write((step, epoch, self.last_grad_norm))
        if self._params_log is not None:
            for name, param_norm in zip(self._names, record.outputs[2]):
                self._params_log.write((step, epoch, name, to_float(param_norm)))

    def _logs(self) -> Sequence[CsvLog | None]:
        return (self._log, self._params_log)

    def _check_network(self, network: Any) -> None:
        kind = type(network).__name__
        if not getattr(network, "returns_grad_norm", False):
            raise TypeError(
                "GradNormMonitor needs a train network that returns (loss, grad_norm): build "
                "the Model with model = TrainStep.model(net, loss_fn, optimizer, metrics=...) "
                "(from mindexp.callbacks), which is Model(TrainStep(nn.WithLossCell(net, "
                "loss_fn), optimizer), eval_network=EvalCell(net, loss_fn), "
                "eval_indexes=[0, 1, 2], metrics=...). Nothing was written. "
                f"Received: train network of type {kind}")
        if self.per_param and not getattr(network, "returns_param_grad_norms", False):
            raise TypeError(
                "GradNormMonitor(per_param=True) needs TrainStep(..., per_param_norms=True). "
                f"Received: train network of type {kind} without per-parameter norms")
