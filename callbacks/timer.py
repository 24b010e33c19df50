"""Timer: training throughput with the first step (graph compile) left out."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._quiet_callback import QuietCallback

if TYPE_CHECKING:
    from mindspore.train import RunContext

__all__ = ["Timer"]


class Timer(QuietCallback):
    """Measures ``steps_per_s`` from the end of the first step to the end of
    the last, so the one-off graph compile does not count; ``train_time_s``
    is the whole wall time from ``on_train_begin``. Both include the
    evaluations ``Model.fit`` runs between epochs, like the ``time_s``
    column of loss.csv: the rate is the one a user sees. Writes nothing.
    Accumulates over several ``Model.train`` calls on the same instance.
    """

    def __init__(self) -> None:
        super().__init__()
        self.train_time_s = 0.0
        self.steps = 0
        self._timed_steps = 0
        self._timed_s = 0.0
        self._begin: float | None = None
        self._first_end: float | None = None
        self._last_end: float | None = None

    def on_train_begin(self, run_context: RunContext) -> None:
        self._begin = time.monotonic()
        self._first_end = self._last_end = None

    def on_train_step_end(self, run_context: RunContext) -> None:
        now = time.monotonic()
        self.steps += 1
        if self._first_end is None:
            self._first_end = now
        else:
            self._timed_steps += 1
        self._last_end = now

    def on_train_end(self, run_context: RunContext) -> None:
        self._close_phase()

    def _end_context(self) -> None:
        # Model.fit's evaluations exit their own context: that is not the end
        # of the phase (QuietCallback counts the contexts).
        self._close_phase()

    def _close_phase(self) -> None:
        if self._begin is None:
            return
        self.train_time_s += time.monotonic() - self._begin
        if self._first_end is not None and self._last_end is not None:
            self._timed_s += self._last_end - self._first_end
        self._begin = None

    @property
    def steps_per_s(self) -> float | None:
        """Steps per second after the first step; None before two steps."""
        return self._timed_steps / self._timed_s if self._timed_s > 0 else None
