"""Types of mindexp's exports for type checkers: ``__init__.py`` imports each
name on first use (so ``import mindexp`` stays light), which a checker cannot
follow. Keep the names equal to ``__init__.py``'s ``_EXPORTS`` (tests/test_types.py
checks)."""
from .analysis.notebook import Run as Run
from .analysis.notebook import Runs as Runs
from .analysis.notebook import compare as compare
from .analysis.notebook import load_run as load_run
from .analysis.notebook import load_runs as load_runs
from .analysis.notebook import plot as plot
from .analysis.mlflow_export import to_mlflow as to_mlflow
from .analysis.reports import history as history
from .api import Experiment as Experiment
from .define.config import Config as Config
from .define.sources import Lazy as Lazy
from .define.transforms import Standardize as Standardize
from .errors import ConfigError as ConfigError
from .errors import DataError as DataError
from .errors import MindexpError as MindexpError
from .errors import RunDirError as RunDirError
from .errors import TrainingError as TrainingError
from .manage.diff import diff as diff
from .search import study_frame as study_frame
from .search import sweep as sweep
from .search import tune as tune
from .train.tracked import TrackedRun as TrackedRun
from .train.tracked import track as track

__version__: str
__all__: list[str]

def __dir__() -> list[str]: ...
