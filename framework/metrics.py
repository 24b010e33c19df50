"""Eval metrics by name (MindSpore's own nn.Metric classes)."""
from .errors import ConfigError

METRIC_NAMES = ("mae", "mse", "rmse", "accuracy", "loss", "top5")


def build_metrics(spec):
    """``{"mae": "mae", "acc": Accuracy()}`` or ``["mae"]`` -> dict of Metric objects."""
    from mindspore.train import MAE, MSE, Accuracy, Loss, RMSE, Top5CategoricalAccuracy
    table = {"mae": MAE, "mse": MSE, "rmse": RMSE, "accuracy": Accuracy, "loss": Loss,
             "top5": Top5CategoricalAccuracy}
    items = spec.items() if isinstance(spec, dict) else ((n, n) for n in spec or ())
    out = {}
    for name, metric in items:
        if isinstance(metric, str):
            if metric not in table:
                raise ConfigError(f"unknown metric {metric!r}; accepted: {', '.join(table)}. "
                                  f"Received: {metric!r}", field="metrics")
            metric = table[metric]()
        out[name] = metric
    return out


def check_metric_names(spec):
    """Reject unknown metric names before anything runs (no mindspore import)."""
    items = spec.values() if isinstance(spec, dict) else (spec or ())
    for metric in items:
        if isinstance(metric, str) and metric not in METRIC_NAMES:
            raise ConfigError(f"unknown metric {metric!r}; accepted: {', '.join(METRIC_NAMES)}. "
                              f"Received: {metric!r}", field="metrics")
