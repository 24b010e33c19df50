"""EvalLoss: the eval set's loss, the sample-weighted mean over every batch.

MindSpore's own ``eval_loss`` (the one ``Model.fit`` hands to callbacks) is
the last batch's loss, and its ``Loss`` metric averages batch losses with
equal weights, so a small last batch counts as much as a full one. mindexp
weights each batch's loss by its number of samples: ``EvalCell``
returns the batch's loss once per sample, and ``EvalLoss`` averages
those, which is the mean loss over the whole eval set, whatever the batch
size. The loss is computed once, inside the eval network.

The callbacks read the eval loss from the Model's ``"loss"`` metric only
(``"eval_loss"`` is its name everywhere else, as for every eval metric);
``check_loss_metric`` refuses a Model without it, or with MindSpore's
``Loss`` there, in one line naming what to add.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.train import Loss

from ._common import calling_model_eval_network, calling_model_metrics

__all__ = ["EvalCell", "EvalLoss", "EVAL_LOSS", "LOSS_METRIC", "check_loss_metric",
           "reads_eval_loss"]

LOSS_METRIC = "loss"  # the Model's metric that "eval_loss" names
EVAL_LOSS = f"eval_{LOSS_METRIC}"
HOW_TO_ADD = ("add mindexp's metric to the Model: metrics={..., 'loss': EvalLoss()} with "
               "eval_network=EvalCell(net, loss_fn), eval_indexes=[0, 1, 2] (TrainStep.model "
               "builds both; from mindexp.callbacks import EvalCell, EvalLoss)")


class EvalCell(nn.WithEvalCell):
    """``nn.WithEvalCell`` whose loss output holds the batch's loss once per
    sample (shape ``(batch,)``), for ``EvalLoss``.

    Returns ``(loss per sample, outputs, label)``; use it with
    ``eval_indexes=[0, 1, 2]``. MindSpore's own ``Loss`` metric and
    ``eval_loss`` see the same batch losses as with ``nn.WithEvalCell`` (they
    average the copies). The batch's size is the label's first dimension;
    a loss of more than one value (``reduction="none"``) is averaged first.
    """

    def construct(self, data: Tensor, label: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        outputs = self._network(data)
        if self.add_cast_fp32:
            label = ops.mixed_precision_cast(mstype.float32, label)
            outputs = ops.cast(outputs, mstype.float32)
        loss = self._loss_fn(outputs, label)
        if loss.ndim:  # a loss_fn with reduction="none": its mean is the batch's loss
            loss = loss.mean()
        return ops.broadcast_to(loss, (ops.shape(label)[0],)), outputs, label


class EvalLoss(Loss):
    """The mean loss over the whole eval set: each batch weighted by its samples.

    Register it as the Model's ``"loss"`` metric, with ``EvalCell`` as
    the eval network; ``EvalMonitor``, ``EarlyStopping`` and ``Checkpoint``
    read it as ``"eval_loss"`` (or ``"loss"``)::

        model = Model(TrainStep(nn.WithLossCell(net, loss_fn), opt),
                      eval_network=EvalCell(net, loss_fn), eval_indexes=[0, 1, 2],
                      metrics={"mae": MAE(), "loss": EvalLoss()})

    (``TrainStep.model(net, loss_fn, opt, metrics=...)`` builds the same.)
    The eval network's loss must average over the batch
    (``reduction="mean"``, MindSpore's default).
    """

    def clear(self) -> None:
        """Forget the batches seen (Model calls it before each evaluation)."""
        self._total, self._samples = 0.0, 0

    def update(self, *inputs: Any) -> None:
        """Add one batch: its loss per sample (``EvalCell``'s first output)."""
        if len(inputs) != 1:
            raise ValueError(f"EvalLoss.update takes the eval network's loss output alone. "
                             f"Received: {len(inputs)} inputs")
        per_sample = np.asarray(self._convert_data(inputs[0]), dtype=np.float64)
        if per_sample.ndim != 1:
            raise ValueError(f"EvalLoss needs the loss once per sample (shape (batch,)), not "
                             f"shape {per_sample.shape}: build the Model with "
                             f"eval_network=EvalCell(net, loss_fn), eval_indexes=[0, 1, 2] "
                             f"(TrainStep.model does)")
        self._total += float(per_sample.sum())
        self._samples += per_sample.size

    def eval(self) -> float:
        """The sample-weighted mean loss of the batches since ``clear``."""
        if not self._samples:
            raise RuntimeError("EvalLoss.eval: no batch was evaluated (an empty eval dataset?)")
        return float(self._total / self._samples)


def reads_eval_loss(name: str) -> bool:
    """True when a callback asked for ``name`` reads the eval loss."""
    return name in (LOSS_METRIC, EVAL_LOSS)


def check_loss_metric(who: str) -> None:
    """ValueError (one line, naming what to add) unless the calling Model's
    ``"loss"`` metric is one mindexp can read as the eval set's loss; called
    from a callback's ``on_train_begin``.

    Nothing is checked when the Model is unknown (a hand-built RunContext).
    A metric of the user's own under ``"loss"`` is theirs to define;
    MindSpore's ``Loss`` is refused (each batch counts alike, however many
    samples it holds), and so is ``EvalLoss`` with MindSpore's own
    ``nn.WithEvalCell`` as the eval network (one loss a batch: its first
    evaluation would fail).
    """
    metric_fns = calling_model_metrics()
    if metric_fns is None:
        return
    metric = metric_fns.get(LOSS_METRIC)
    if metric is None:
        raise ValueError(f"{who}: eval_loss is the eval set's loss only with mindexp's EvalLoss "
                         f"metric (MindSpore's own eval_loss is the last batch's); {HOW_TO_ADD}. "
                         f"The Model's metrics: {', '.join(metric_fns) or 'none'}")
    if type(metric) is Loss:
        raise ValueError(f"{who}: the Model's 'loss' metric is MindSpore's Loss, the unweighted "
                         f"mean of batch losses (a small last batch counts as much as a full one); "
                         f"{HOW_TO_ADD}")
    if isinstance(metric, EvalLoss) and type(calling_model_eval_network()) is nn.WithEvalCell:
        raise ValueError(f"{who}: EvalLoss needs the eval network's loss once per sample, and the "
                         f"Model's eval network is MindSpore's nn.WithEvalCell (one loss a "
                         f"batch); build the Model with eval_network=EvalCell(net, loss_fn), "
                         f"eval_indexes=[0, 1, 2] (TrainStep.model does)")
