"""Types of mindexp.callbacks' exports for type checkers: ``__init__.py``
imports each name on first use, which a checker cannot follow. Keep the names
equal to ``__init__.py``'s ``_EXPORTS`` (tests/test_types.py checks)."""
from .callback_list import CallbackList as CallbackList
from .checkpoint import Checkpoint as Checkpoint
from .checkpoint import latest_checkpoint as latest_checkpoint
from .checkpoint import load_callback_state as load_callback_state
from .checkpoint import list_checkpoints as list_checkpoints
from .csv_log import CsvFormatError as CsvFormatError
from .csv_log import CsvLog as CsvLog
from .csv_log import read_csv as read_csv
from .direction import metric_direction as metric_direction
from ._registry import register_log as register_log
from ._registry import registered_logs as registered_logs
from .early_stopping import EarlyStopping as EarlyStopping
from .eval_loss import EvalCell as EvalCell
from .eval_loss import EvalLoss as EvalLoss
from .eval_monitor import EvalMonitor as EvalMonitor
from .grad_norm_monitor import GradNormMonitor as GradNormMonitor
from .loss_monitor import LossMonitor as LossMonitor
from .parameter_tracker import ParameterTracker as ParameterTracker
from .step_record import StepRecord as StepRecord
from .system_monitor import SystemMonitor as SystemMonitor
from .tensorboard_logger import TensorBoardLogger as TensorBoardLogger
from .timer import Timer as Timer
from .train_step import TrainStep as TrainStep
from .gradients import clip_by_global_norm as clip_by_global_norm
from .gradients import global_norm as global_norm

__all__: list[str]

def __dir__() -> list[str]: ...
