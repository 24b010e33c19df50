"""mindexp's framework: declare an Experiment, run it, compare runs.

Importing this package does not import mindspore (training does) nor
pandas/matplotlib (reports and plots import them when called).
"""
from .config import Config
from .errors import ConfigError, DataError, MindexpError, RunDirError
from .experiment import Experiment
from .reports import compare, history, load_run, load_runs
from .run import Run
from .runner import TrainingError

__all__ = ["Config", "ConfigError", "DataError", "Experiment", "MindexpError", "Run",
           "RunDirError", "TrainingError", "compare", "history", "load_run", "load_runs"]
