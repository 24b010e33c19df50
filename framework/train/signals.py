"""Stop training cleanly on SIGINT/SIGTERM."""
import logging
import signal
import threading

from ..callbacks._quiet_callback import QuietCallback
from .failures import signal_name

logger = logging.getLogger(__name__)


class SignalStop(QuietCallback):
    """Turns SIGINT/SIGTERM into a clean stop at the next step end.

    The first signal requests a stop, so the step finishes, the final
    checkpoint matches the logs and the status becomes ``interrupted``; a
    second signal raises KeyboardInterrupt at once.
    """

    def __init__(self):
        super().__init__()
        self.signum = None
        self._saved = {}

    def handler(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        logger.warning("%s: stopping after this step", signal_name(signum))

    def on_train_step_end(self, run_context):
        if self.signum is not None:
            run_context.request_stop()
        elif self._saved:
            # MindSpore's runtime installs its own C-level SIGINT handler during
            # the first steps (and may again later), which turns Ctrl-C into a
            # SIGTERM; its dataset pipeline (parallel workers) installs SIGINT and
            # SIGTERM handlers when its iterator starts: take them back after every
            # step (a cheap syscall each).
            for sig in self._saved:
                signal.signal(sig, self.handler)

    def installed(self):
        """Context manager installing the handlers (main thread only)."""
        return self

    def __enter__(self):
        if not self._context_depth and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self.handler)
        return super().__enter__()

    def _end_context(self):
        # The outermost exit only: Model enters it again (and Model.fit once per
        # evaluation); restoring there would let a later signal kill the run.
        for sig, old in self._saved.items():
            signal.signal(sig, old)
        self._saved = {}
