"""mindexp's framework: declare an Experiment, run it, compare runs.

Importing this package does not import mindspore; training does.
"""
from .config import Config
from .errors import ConfigError, DataError, MindexpError, RunDirError
from .experiment import Experiment
from .run import Run
from .runner import TrainingError

__all__ = ["Config", "ConfigError", "DataError", "Experiment", "MindexpError", "Run",
           "RunDirError", "TrainingError", "load_run"]


def load_run(path):
    """Read a run directory back as a :class:`Run`."""
    return Run(path)
