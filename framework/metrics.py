"""Eval metrics by name (MindSpore's own nn.Metric classes, plus max_error)."""
from .errors import ConfigError

METRIC_NAMES = ("mae", "mse", "rmse", "max_error", "accuracy", "top5", "loss")


def build_metrics(spec):
    """``{"mae": "mae", "acc": Accuracy()}`` or ``["mae"]`` -> dict of Metric objects."""
    from mindspore.train import MAE, MSE, Accuracy, Loss, Top5CategoricalAccuracy
    from .extra_metrics import RMSE, MaxError
    table = {"mae": MAE, "mse": MSE, "rmse": RMSE, "max_error": MaxError, "accuracy": Accuracy,
             "top5": Top5CategoricalAccuracy, "loss": Loss}
    check_metric_names(spec)
    items = spec.items() if isinstance(spec, dict) else ((n, n) for n in spec or ())
    return {name: table[metric]() if isinstance(metric, str) else metric
            for name, metric in items}


def check_metric_names(spec):
    """Reject unknown metric names before anything runs (no mindspore import)."""
    items = list(spec.values() if isinstance(spec, dict) else (spec or ()))
    for metric in items:
        if isinstance(metric, str) and metric not in METRIC_NAMES:
            shown = [m if isinstance(m, str) else type(m).__name__ for m in items]
            raise ConfigError(f"config field 'metrics': unknown metric {metric!r}; accepted: "
                              f"{', '.join(METRIC_NAMES)} (or nn.Metric objects). "
                              f"Received: metrics={shown!r}", field="metrics")
