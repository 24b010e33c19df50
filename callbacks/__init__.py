"""Reusable MindSpore callbacks that write crash-safe CSV logs.

Import only mindspore, numpy and the standard library (pandas lazily in
:func:`read_csv`), so they work in any MindSpore project.
"""
from .checkpoint import Checkpoint, latest_checkpoint, list_checkpoints
from .csv_log import CsvLog, read_csv
from .early_stopping import EarlyStopping
from .grad_norm_monitor import GradNormMonitor
from .loss_monitor import LossMonitor
from .parameter_tracker import ParameterTracker
from .timer import Timer
from .train_step import TrainStep

__all__ = ["Checkpoint", "CsvLog", "EarlyStopping", "GradNormMonitor", "LossMonitor", "ParameterTracker",
           "Timer", "TrainStep", "latest_checkpoint", "list_checkpoints", "read_csv"]
