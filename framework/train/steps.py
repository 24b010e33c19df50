"""The run's step count in what every callback reads: after a resume,
``cb_params.cur_step_num`` counts from the run's start, as ``cur_epoch_num``
does (MindSpore restarts the step count in each ``Model.train`` call)."""
from typing import TYPE_CHECKING, Any
from ..callbacks._common import count_steps_from
from ..callbacks._quiet_callback import QuietCallback
from .features import Build, feature

if TYPE_CHECKING:
    from ..callbacks.timer import Timer


class RunSteps(QuietCallback):
    """The first callback of a run's list: at each train call's begin it makes
    ``cur_step_num`` count from the run's start, so that every callback after
    it, the user's too, reads the run's step. ``steps_before``: the steps of
    the run done before the next ``Model.train``/``Model.fit`` call, set by
    the session before each one (a resume may make two: the rest of an
    interrupted epoch, then the others)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps_before = 0

    def on_train_begin(self, run_context: Any) -> None:
        count_steps_from(run_context.original_args(), self.steps_before)


@feature("steps", order=0)
def run_steps(run: Build, before: object) -> RunSteps:
    """First: every callback after it reads the run's step."""
    return RunSteps()


@feature("timer", order=20)
def timer(run: Build, before: object) -> "Timer":
    """Training time and steps per second for run.json."""
    from ..callbacks import Timer
    return Timer()
