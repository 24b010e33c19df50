"""StepRecord: what one training step produced, read once and shared by every callback."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from mindspore.train import RunContext

__all__ = ["StepRecord"]

# Where a CallbackList leaves the step's record in ``run_context.original_args()``
# (a dict), for callbacks inside it that do not take it as an argument.
RECORD_KEY = "mindexp_step_record"


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One training step, as every callback of a :class:`CallbackList` reads it.

    ``CallbackList`` builds it once per step (at the step's end) and hands
    it to each of its callbacks that defines
    ``on_train_step_record(record, run_context)``; any other callback in the
    list can read it with :meth:`StepRecord.of`. The values are the ones
    mindexp's logs hold for that step: ``loss.csv``'s ``loss``, ``lr`` and
    component columns, ``grad_norm.csv``'s ``grad_norm``.
    """

    step: int
    """The run's step, counted from 1 across epochs; after a resume it goes on
    from the checkpoint's step (MindSpore's own ``cur_step_num`` restarts)."""
    epoch: int
    """The epoch, counted from 1 (absolute after a resume)."""
    epoch_end: bool
    """Whether this is the last step of its epoch."""
    loss: float | None
    """The train network's first output (the optimised loss) as a float;
    None when the network returns nothing."""
    grad_norm: float | None
    """The global gradient norm before clipping, when the train network
    returns it (``TrainStep``), else None."""
    components: Mapping[str, float]
    """Loss components by name (``TrainStep(..., components=...)``), else empty."""
    lr: float | None
    """The learning rate at this step: the one given to the ``CallbackList``,
    else read from the optimizer (a number, a per-step list, a
    ``LearningRateSchedule``); None when it cannot be read."""
    param_stats: Mapping[str, tuple[float, float, float, float, float]]
    """``name -> (norm, mean, std, min, max)`` of the parameters whose
    statistics the train step computed in its graph
    (``TrainStep(..., param_stats=...)``), else empty. Statistics computed on
    the host are ``ParameterTracker``'s own (in blocks, see its doc)."""
    outputs: Any
    """What the train network returned this step, as it returned it."""

    @staticmethod
    def of(run_context: RunContext) -> StepRecord | None:
        """The record the enclosing :class:`CallbackList` built for the current
        step, or None outside one (a plain ``Model.train`` callback list) and
        before the first step ends. Valid during the step's end hooks."""
        cb_params = run_context.original_args()
        getter = getattr(cb_params, "get", None)
        return getter(RECORD_KEY) if getter is not None else None
