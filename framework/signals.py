"""Stop training cleanly on SIGINT/SIGTERM."""
import logging
import signal
import threading

from .callbacks._quiet_callback import QuietCallback

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
        self.active = False  # handlers installed (see installed())

    def handler(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        from .failures import signal_name
        logger.warning("%s: stopping after this step", signal_name(signum))

    def on_train_step_end(self, run_context):
        if self.signum is not None:
            run_context.request_stop()
        elif self.active:
            # MindSpore's runtime installs its own C-level SIGINT handler during
            # the first steps (and may again later), which turns Ctrl-C into a
            # SIGTERM: take SIGINT back after every step (one cheap syscall).
            signal.signal(signal.SIGINT, self.handler)

    def installed(self):
        """Context manager installing the handlers for its block (main thread
        only) and restoring the previous ones after."""
        return _Installed(self)


class _Installed:
    """The handlers of a SignalStop, installed for a ``with`` block. Not the
    callback's own ``__enter__``/``__exit__``: Model calls those around every
    evaluation of ``Model.fit``, which must not uninstall them mid-run."""

    def __init__(self, stopper):
        self.stopper, self.saved = stopper, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self.stopper.handler)
        self.stopper.active = bool(self.saved)
        return self.stopper

    def __exit__(self, *exc):
        self.stopper.active = False
        for sig, old in self.saved.items():
            signal.signal(sig, old)
        self.saved = {}
        return False
