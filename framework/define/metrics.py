"""Eval metrics by name (MindSpore's own nn.Metric classes, plus max_error and
mindexp's eval-set loss)."""
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Union
from ..errors import ConfigError

if TYPE_CHECKING:
    from mindspore import nn
    from mindspore.train import Metric

    from ..callbacks.eval_loss import EvalCell

# an experiment's metrics(): names, or a dict of column -> name or Metric (None: none)
MetricSpec = Union[Sequence[str], Mapping[str, Union[str, "Metric"]], None]

METRIC_NAMES = ("mae", "mse", "rmse", "max_error", "accuracy", "top5", "loss")
LOSS = "loss"   # the eval.csv column of the eval loss, eval_loss everywhere else


def build_metrics(spec: MetricSpec) -> dict[str, "Metric"]:
    """``{"mae": "mae", "acc": Accuracy()}`` or ``["mae"]`` -> dict of Metric objects.

    ``"loss"`` is mindexp's :class:`~mindexp.callbacks.EvalLoss` (the eval
    set's sample-weighted mean loss; the eval network must be
    :func:`eval_network`'s), never MindSpore's ``Loss`` (batches weighted alike).
    """
    from mindspore.train import MAE, MSE, Accuracy, Top5CategoricalAccuracy
    from ..callbacks import EvalLoss
    from .extra_metrics import RMSE, MaxError
    table = {"mae": MAE, "mse": MSE, "rmse": RMSE, "max_error": MaxError, "accuracy": Accuracy,
             "top5": Top5CategoricalAccuracy, LOSS: EvalLoss}
    check_metric_names(spec)
    items = spec.items() if isinstance(spec, dict) else ((n, n) for n in spec or ())
    return {name: table[metric]() if isinstance(metric, str) else metric
            for name, metric in items}


def eval_network(net: "nn.Cell", loss_fn: "nn.Cell") -> "EvalCell":
    """The eval network runs and ``mindexp evaluate`` use, with
    ``eval_indexes=[0, 1, 2]``: (loss per sample, prediction, label)."""
    from ..callbacks import EvalCell
    return EvalCell(net, loss_fn)


def with_eval_loss(spec: MetricSpec, watched: Iterable[str]) -> MetricSpec:
    """The experiment's metrics ``spec``, plus ``"loss"`` when one of the
    ``watched`` values (early_stop, checkpoint_monitor) is ``eval_loss`` and
    the metrics lack it: the value stopped on or ranked by is then an
    eval.csv column like every other (resume replays it from there)."""
    names = list(spec) if spec else []
    if f"eval_{LOSS}" not in watched or not names or LOSS in names:
        return spec
    if isinstance(spec, dict):
        return {**spec, LOSS: LOSS}
    return names + [LOSS]


def check_metric_names(spec: MetricSpec) -> None:
    """Reject unknown metric names, and MindSpore's ``Loss`` (use ``"loss"``),
    before anything runs."""
    items = list(spec.values() if isinstance(spec, dict) else (spec or ()))
    shown = [m if isinstance(m, str) else type(m).__name__ for m in items]
    for metric in items:
        if isinstance(metric, str) and metric not in METRIC_NAMES:
            raise ConfigError(f"config field 'metrics': unknown metric {metric!r}; accepted: "
                              f"{', '.join(METRIC_NAMES)} (or nn.Metric objects). "
                              f"Received: metrics={shown!r}", field="metrics")
        if _is_mindspore_loss(metric):
            raise ConfigError("config field 'metrics': MindSpore's Loss() averages the batch losses "
                              "unweighted; accepted: 'loss' (mindexp's eval-set loss, weighted by "
                              f"each batch's samples). Received: metrics={shown!r}", field="metrics")


def _is_mindspore_loss(metric: Any) -> bool:
    # by module and name: this check runs before mindspore is imported
    cls = type(metric)
    return cls.__name__ == "Loss" and cls.__module__.startswith("mindspore.")
