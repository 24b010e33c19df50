"""CallbackList: several callbacks behind one MindSpore callback, one record per step."""
from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

from mindspore.train import Callback

from ._common import check_steps_per_epoch
from ._mindspore import runs_in_evaluation
from ._quiet_callback import QuietCallback
from ._recorder import Recorder
from .step_record import RECORD_KEY, StepRecord

if TYPE_CHECKING:
    from mindspore.train import RunContext

__all__ = ["CallbackList"]

# Hooks MindSpore calls, and the old name each one forwards to by default.
_HOOKS = {"on_train_begin": "begin", "on_train_epoch_begin": "epoch_begin",
          "on_train_step_begin": "step_begin", "on_train_epoch_end": "epoch_end",
          "on_train_end": "end", "on_eval_begin": "begin", "on_eval_epoch_begin": "epoch_begin",
          "on_eval_step_begin": "step_begin", "on_eval_step_end": "step_end",
          "on_eval_epoch_end": "epoch_end", "on_eval_end": "end"}


class CallbackList(QuietCallback):
    """Runs ``callbacks`` in order as one MindSpore callback, and builds each
    step's :class:`StepRecord` once for all of them (Keras's ``CallbackList``).

    MindSpore calls every callback of ``Model.train``'s list on every hook,
    and each of mindexp's logging callbacks used alone reads the step again
    (its position, the loss, the gradient norm, the learning rate). In one
    list, MindSpore calls the list once per hook; at each step's end the list
    makes the step's record and hands it to each callback that defines
    ``on_train_step_record(record, run_context)`` (mindexp's LossMonitor,
    GradNormMonitor, ParameterTracker, or a user's own); any other callback
    gets ``on_train_step_end(run_context)`` as always and can read the
    record with ``StepRecord.of(run_context)``. A callback's hooks that do
    nothing are not called at all. Logs are the same, row for row, as with
    the callbacks given to ``Model.train`` one by one.

    Each callback is entered as a context when training starts and left,
    in reverse order, when it ends. The evaluations of ``Model.fit`` reach
    the callbacks MindSpore would hand them (not those named like
    MindSpore's own, e.g. ``LossMonitor``, as ``Model.fit`` does).

    Args:
        callbacks: the callbacks, in the order their hooks run.
        steps_per_epoch: a whole epoch's steps, when a ``Model.train`` call's
            dataset holds only the rest of an interrupted epoch; None: the
            dataset's size (see ``LossMonitor``).
        lr: the learning rate given to the optimizer, for the records (a
            number or a per-step sequence); None: read from the optimizer.
    """

    def __init__(self, callbacks: Iterable[Callback], steps_per_epoch: int | None = None,
                 lr: float | Sequence[float] | None = None) -> None:
        super().__init__()
        self.callbacks: list[Callback] = list(callbacks)
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError("CallbackList takes mindspore.train.Callback instances. "
                                f"Received: {cb!r} of type {type(cb).__name__}")
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self._recorder = Recorder(self.steps_per_epoch, lr)
        self._hooks: dict[str, list[Callable[[Any], Any]]] = {}
        self._ends: list[tuple[Callable[..., Any], bool]] = []
        self._eval_parts: list[Callback] = []
        self._eval_hooks: dict[str, list[Callable[[Any], Any]]] = {}
        self._bind()
        self._stacks: list[ExitStack] = []

    def _bind(self) -> None:
        """Each hook's list of the parts' methods that do something (made again
        at each train begin: the list of callbacks may have changed)."""
        cbs = self.callbacks
        self._hooks = {hook: _callers(cbs, hook) for hook in _HOOKS}
        self._ends = [(cb.on_train_step_record, True) if _takes_record(cb)  # type: ignore[attr-defined]
                      else (cb.on_train_step_end, False) for cb in cbs
                      if _takes_record(cb) or _overrides(type(cb), "on_train_step_end")]
        self._eval_parts = [cb for cb in cbs if runs_in_evaluation(cb)]
        self._eval_hooks = {hook: _callers(self._eval_parts, hook)
                            for hook in _HOOKS if hook.startswith("on_eval")}

    # -- the step: one record, every part -----------------------------------
    def on_train_step_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        record = None
        for end, takes_record in self._ends:
            if not takes_record:
                end(run_context)
                continue
            if record is None:   # made at the first callback that reads it
                record = self._recorder.record(cb_params)
                cb_params[RECORD_KEY] = record   # Recorder.publish, inline: every step
            end(record, run_context)

    def on_train_step_record(self, record: StepRecord, run_context: RunContext) -> None:
        """End a step whose record the caller made: a hand-written loop's
        driver (``mindexp.track``'s ``run.step``), or an enclosing list. Each
        part gets what :meth:`on_train_step_end` gives it, this record."""
        run_context.original_args()[RECORD_KEY] = record
        for end, takes_record in self._ends:
            if takes_record:
                end(record, run_context)
            else:
                end(run_context)

    def insert(self, index: int, callback: Callback, run_context: RunContext) -> None:
        """Add ``callback`` at ``index`` while training runs (a part known only
        later, e.g. a loop's eval log at its first evaluation): it is entered as
        a context like the others (left when the list's context ends) and gets
        ``on_train_begin`` now."""
        if self._stacks:
            target = self._stacks[0].enter_context(callback)
            callback = target if isinstance(target, Callback) else callback
        callback.on_train_begin(run_context)
        self.callbacks.insert(index, callback)
        self._bind()

    def on_train_begin(self, run_context: RunContext) -> None:
        self._bind()
        for hook in self._hooks["on_train_begin"]:
            hook(run_context)
        self._recorder.begin(run_context.original_args())  # after RunSteps made the step absolute

    def on_train_step_begin(self, run_context: RunContext) -> None:
        for hook in self._hooks["on_train_step_begin"]:
            hook(run_context)

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        for hook in self._hooks["on_train_epoch_begin"]:
            hook(run_context)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        for hook in self._hooks["on_train_epoch_end"]:
            hook(run_context)

    def on_train_end(self, run_context: RunContext) -> None:
        for hook in self._hooks["on_train_end"]:
            hook(run_context)

    # -- Model.fit's evaluations ---------------------------------------------
    def on_eval_begin(self, run_context: RunContext) -> None:
        self._forward("on_eval_begin", run_context)

    def on_eval_epoch_begin(self, run_context: RunContext) -> None:
        self._forward("on_eval_epoch_begin", run_context)

    def on_eval_step_begin(self, run_context: RunContext) -> None:
        self._forward("on_eval_step_begin", run_context)

    def on_eval_step_end(self, run_context: RunContext) -> None:
        self._forward("on_eval_step_end", run_context)

    def on_eval_epoch_end(self, run_context: RunContext) -> None:
        self._forward("on_eval_epoch_end", run_context)

    def on_eval_end(self, run_context: RunContext) -> None:
        self._forward("on_eval_end", run_context)

    def _forward(self, hook: str, run_context: RunContext) -> None:
        for call in self._eval_hooks[hook]:
            call(run_context)

    # -- the context: every part entered, the evaluations' only ---------------
    def __enter__(self) -> CallbackList:
        training = not self._stacks
        stack = ExitStack()
        try:
            targets = [stack.enter_context(cb)
                       for cb in (self.callbacks if training else self._eval_parts)]
        except BaseException:
            stack.close()
            raise
        if training:   # as MindSpore's own list does: a part's enter target stands for it
            self.callbacks = [t if isinstance(t, Callback) else cb
                              for cb, t in zip(self.callbacks, targets)]
            self._bind()
        self._stacks.append(stack)
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        if self._stacks:
            self._stacks.pop().__exit__(*exc)
        return False


def _takes_record(cb: Callback) -> bool:
    return callable(getattr(cb, "on_train_step_record", None))


def _callers(callbacks: Sequence[Callback], hook: str) -> list[Callable[[Any], Any]]:
    """The bound ``hook`` of each callback whose ``hook`` does something."""
    return [getattr(cb, hook) for cb in callbacks if _overrides(type(cb), hook)]


def _overrides(cls: type, hook: str) -> bool:
    """Whether ``cls``'s ``hook`` does anything: not QuietCallback's ``pass``,
    not MindSpore's default forwarding to an old name nobody overrides."""
    impl = getattr(cls, hook)
    if impl is QuietCallback.__dict__.get(hook):
        return False
    if impl is getattr(Callback, hook):
        old = _HOOKS.get(hook, "step_end")
        return getattr(cls, old) is not getattr(Callback, old)
    return True
