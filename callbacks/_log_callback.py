"""The lifecycle every CSV-writing callback shares."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ._quiet_callback import QuietCallback

if TYPE_CHECKING:
    from mindspore.train import RunContext

    from .csv_log import CsvLog


class LogCallback(QuietCallback):
    """A Callback whose CsvLogs are flushed when due at each epoch's end
    (every ``flush_seconds``; Checkpoint flushes them before each save, so a
    log is never behind a checkpoint) and closed at the end of training and
    when training's callback context ends (which MindSpore runs even when
    training raises; not when an evaluation of ``Model.fit`` ends).
    Subclasses list their logs in ``_logs()``."""

    def _logs(self) -> Sequence[CsvLog | None]:
        return (getattr(self, "_log", None),)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        for log in self._logs():
            if log is not None:
                log.flush_if_due()

    def on_train_end(self, run_context: RunContext) -> None:
        self.close()

    def _end_context(self) -> None:
        self.close()

    def flush(self) -> None:
        """Write buffered rows to disk (Checkpoint calls it before saving)."""
        for log in self._logs():
            if log is not None:
                log.flush()

    def unwritten_rows(self) -> int:
        """Rows the logs took that never reached their files (a flush failed,
        e.g. on a full disk): what a record of the run must not count."""
        return sum(log.pending for log in self._logs() if log is not None)

    def close(self) -> None:
        """Flush and close every log; safe to call twice."""
        for log in self._logs():
            if log is not None:
                log.close()
