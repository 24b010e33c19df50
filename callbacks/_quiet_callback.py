"""A Callback whose hooks it does not use cost nothing, and whose context
ends with training, not with Model.fit's evaluations."""
from __future__ import annotations

import os
from typing import Any, Literal, Sequence

from mindspore.train import Callback, RunContext

from ._common import step_info
from ._runs import holding
from .csv_log import CsvLog


class QuietCallback(Callback):
    """MindSpore's ``Callback`` forwards each ``on_train_*`` hook to its
    deprecated name (``step_begin``, ...): one more Python call per callback
    per step. Here the four step and epoch hooks do nothing instead;
    subclasses override the ones they use.

    ``Model.fit`` enters every callback again for each evaluation, inside
    the training's own ``with``, and exits it when the evaluation ends. The
    context is therefore counted: :meth:`_end_context` runs on the exit that
    balances the first enter (the end of training, or of a failure), never
    on an evaluation's. Subclasses release files there, not in ``__exit__``.
    """

    _context_depth = 0
    every: int = 1               # a logging callback writes every N-th step ...
    steps_per_epoch: int | None = None  # ... of epochs this long (None: the dataset's size)

    append: bool = False         # a log file holding rows already is continued, not refused
    _continued: frozenset[str] = frozenset()  # files this callback wrote (a next train call goes on)

    def _checked_log(self, path: str, columns: Sequence[str], **kwargs: Any) -> CsvLog:
        """A :class:`CsvLog` of ``path``, its header checked. A file that holds
        rows already is refused (one line) unless ``append`` is true, an active
        run holds it (its resume cut it back) or this callback wrote it (a
        second ``Model.train`` with the same callback continues it)."""
        log = CsvLog(path, columns, **kwargs).check()
        if not (self.append or path in self._continued or holding(path)) and log.holds_rows():
            raise ValueError(
                f"{type(self).__name__}: {os.fspath(path)} holds rows of an earlier training "
                "already; pass append=True to continue it, or write to another directory. "
                f"Received: append={self.append!r}")
        self._continued = self._continued | {path}
        return log

    def _step_info(self, cb_params: Any) -> tuple[int, int, bool]:
        """``(global step, epoch, is the epoch's last step)``, see :func:`step_info`."""
        return step_info(cb_params, self.steps_per_epoch)

    def _logged_step(self, cb_params: Any) -> tuple[int, int, bool] | None:
        """:meth:`_step_info` on a step to log (every ``every``-th global step
        and each epoch's last), else None: the one "log every N steps" gate."""
        info = step_info(cb_params, self.steps_per_epoch)
        return None if info[0] % self.every and not info[2] else info

    def _record_when_due(self, run_context: RunContext) -> None:
        """``on_train_step_end`` of a callback taking a :class:`StepRecord`
        (``on_train_step_record``) used alone: it builds its own record, on
        the steps it logs. Inside a ``CallbackList`` the list's record is
        handed to it instead, built once for all its callbacks."""
        cb_params = run_context.original_args()
        if self._logged_step(cb_params) is not None:
            self.on_train_step_record(self._recorder.record(cb_params), run_context)  # type: ignore[attr-defined]

    def on_train_step_begin(self, run_context: RunContext) -> None:
        pass

    def on_train_step_end(self, run_context: RunContext) -> None:
        pass

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        pass

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        pass

    def __enter__(self) -> QuietCallback:
        self._context_depth += 1
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        # An exit without an enter (a caller closing by hand) also ends the context.
        self._context_depth = max(0, self._context_depth - 1)
        if not self._context_depth:
            self._end_context()
        return False

    def _end_context(self) -> None:
        """Training's context ended (normally or by an exception)."""
