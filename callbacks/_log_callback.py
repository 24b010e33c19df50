"""The lifecycle every CSV-writing callback shares."""
from mindspore.train import Callback


class LogCallback(Callback):
    """A Callback whose CsvLogs are flushed at each epoch's end and closed at
    the end of training and in ``__exit__`` (which MindSpore runs even when
    training raises). Subclasses list their logs in ``_logs()``."""

    def _logs(self):
        return (getattr(self, "_log", None),)

    def on_train_epoch_end(self, run_context):
        self.flush()

    def on_train_end(self, run_context):
        self.close()

    def __exit__(self, *exc):
        self.close()
        return False

    def flush(self):
        """Write buffered rows to disk (Checkpoint calls it before saving)."""
        for log in self._logs():
            if log is not None:
                log.flush()

    def close(self):
        for log in self._logs():
            if log is not None:
                log.close()
