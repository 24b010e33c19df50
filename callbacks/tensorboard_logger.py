"""TensorBoardLogger: loss, learning rate, gradient norm, eval metrics and
parameters as TensorBoard scalars."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, Mapping

from ._common import (eval_results, check_directory, check_every, check_steps_per_epoch, first_output,
                      net_outputs, optimizer_of, rank_id, to_float, trained_parameters)
from ._quiet_callback import QuietCallback
from ._tensorboard import EventWriter, check_available
from ._recorder import LearningRate

__all__ = ["TensorBoardLogger"]

if TYPE_CHECKING:
    from mindspore.train import RunContext


class TensorBoardLogger(QuietCallback):
    """Write TensorBoard event files into ``directory`` (``tensorboard --logdir``).

    Scalars: ``loss`` and ``lr`` each logged step; ``grad_norm`` when the
    train network returns it (``callbacks.TrainStep``); ``eval_<metric>``
    after each evaluation of ``Model.fit``; ``params/<name>`` (the value of
    one-element parameters, ``params/<name>:norm`` of larger ones). With
    ``hparams`` (name -> value), the hparams dashboard lists this run with
    its final ``loss``. Needs the ``tensorboard`` package
    (``pip install 'mindexp[tensorboard]'``), checked when constructed.

    Args:
        directory: the run's log folder (created if missing).
        every: log every N-th global step (and each epoch's last step).
        params: also log parameters (every ``every`` steps).
        hparams: config values to show in TensorBoard's hparams dashboard.
        all_ranks: ranks other than 0 write into ``directory/rankN``.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
    """

    def __init__(self, directory: str | os.PathLike[str], every: int = 1, params: bool = True,
                 hparams: Mapping[str, Any] | None = None, all_ranks: bool = False,
                 steps_per_epoch: int | None = None) -> None:
        super().__init__()
        check_available()
        self.directory = check_directory(directory)
        self.every = check_every("every", every)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.params = bool(params)
        if hparams is not None and not isinstance(hparams, dict):
            raise ValueError(f"`hparams` must be a dict of name -> value. Received: "
                             f"hparams={hparams!r}")
        self.hparams = dict(hparams or {})
        self.all_ranks = bool(all_ranks)
        self._writer: EventWriter | None = None
        self._lr: LearningRate | None = None
        self._params: list[Any] = []
        self._last: tuple[int, float | None] = (0, None)

    def on_train_begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        if self._writer is None:  # a second Model.train on the same logger appends
            path = self._logdir()
            self._writer = EventWriter(path) if path else None
            if self._writer is not None and self.hparams:
                self._writer.hparams(self.hparams, ["loss"])
        self._lr = LearningRate(optimizer_of(cb_params))
        self._params = trained_parameters(cb_params) if self.params else []

    def on_train_step_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        logged = self._logged_step(cb_params)
        if self._writer is None or logged is None:
            return
        assert self._lr is not None  # set at train begin
        step = logged[0]
        outputs = net_outputs(cb_params)
        loss = to_float(first_output(outputs))
        self._last = (step, loss)
        self._writer.scalar("loss", loss, step)
        self._writer.scalar("lr", self._lr(step), step)
        if isinstance(outputs, (tuple, list)) and len(outputs) > 1 and \
                getattr(cb_params.train_network, "returns_grad_norm", False):
            self._writer.scalar("grad_norm", to_float(outputs[1]), step)
        for param in self._params:
            self._write_param(param, step)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        results = eval_results(cb_params)
        if self._writer is None or not results:
            return
        step = self._step_info(cb_params)[0]
        for name, value in results.items():
            self._writer.scalar(f"eval_{name}", to_float(value), step)
        self._writer.flush()

    def on_train_end(self, run_context: RunContext) -> None:
        self.close()

    def __exit__(self, *exc: object) -> Literal[False]:
        # Model.fit leaves a callback context after each evaluation: only an
        # error ends the log there; on_train_end closes it otherwise.
        if exc and exc[0] is not None:
            self.close(ok=False)
        elif self._writer is not None:
            self._writer.flush()
        return False

    def close(self, ok: bool = True) -> None:
        """Finish the event file (the hparams session end when hparams were given)."""
        if self._writer is None:
            return
        if self.hparams:
            step, loss = self._last
            self._writer.session_end(ok and loss is not None and loss == loss, step)
        self._writer.close()
        self._writer = None

    def _logdir(self) -> str | None:
        rank = rank_id()
        if rank == 0:
            return self.directory
        return os.path.join(self.directory, f"rank{rank}") if self.all_ranks else None

    def _write_param(self, param: Any, step: int) -> None:
        import numpy as np
        assert self._writer is not None
        if int(param.size) == 1:
            self._writer.scalar(f"params/{param.name}", to_float(param), step)
        else:
            values = param.asnumpy().astype(np.float64).reshape(-1)
            self._writer.scalar(f"params/{param.name}:norm", float(np.linalg.norm(values)), step)
