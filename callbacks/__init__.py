"""Reusable MindSpore callbacks that write crash-safe CSV logs.

Import only mindspore, numpy and the standard library (pandas lazily in
``read_csv``), so they work in any MindSpore project.

Names are imported on first use: reading logs (``read_csv``) does not pay
for importing mindspore.
"""
import importlib

_EXPORTS = {
    "CallbackList": "callback_list", "Checkpoint": "checkpoint", "latest_checkpoint": "checkpoint",
    "list_checkpoints": "checkpoint", "load_callback_state": "checkpoint", "CsvLog": "csv_log",
    "CsvFormatError": "csv_log",
    "read_csv": "csv_log", "register_log": "_registry", "registered_logs": "_registry",
    "EarlyStopping": "early_stopping", "EvalCell": "eval_loss", "EvalLoss": "eval_loss",
    "EvalMonitor": "eval_monitor",
    "GradNormMonitor": "grad_norm_monitor", "LossMonitor": "loss_monitor",
    "ParameterTracker": "parameter_tracker", "StepRecord": "step_record",
    "SystemMonitor": "system_monitor",
    "TensorBoardLogger": "tensorboard_logger",
    "Timer": "timer", "TrainStep": "train_step", "metric_direction": "direction",
    "global_norm": "gradients", "clip_by_global_norm": "gradients",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
