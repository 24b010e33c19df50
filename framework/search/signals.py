"""The one signal rule of everything that trains many runs (``tune``, ``sweep``).

First SIGINT/SIGTERM: start nothing new and stop the running runs cleanly
(each worker gets the same signal: its run stops after the current step,
status ``interrupted``, resumable). Second: forwarded again, the runs stop
at once. Third: the workers are killed. Workers run in their own sessions
(a terminal's Ctrl-C reaches only the driver, which forwards it once), and
die with the driver (:func:`.children.die_with_parent`).
"""
from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import threading
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)

STOPPING = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def handlers(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM during the block, the old ones restored
    after; nothing off the main thread (Python delivers signals there only)."""
    on_main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.signal(sig, handler) for sig in STOPPING} if on_main else {}
    try:
        yield
    finally:
        for number, old in saved.items():
            signal.signal(number, old)


class StopFlag:
    """What a signal handler sets: the first signal number received."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, frame: Any) -> None:
        """Remember the first signal (a handler for :func:`handlers`)."""
        if self.signum is None:
            self.signum = signum


class Forwarding(StopFlag):
    """The driver's handler: remember the first signal, forward each one to the
    live workers (the third as SIGKILL). ``procs`` may grow while it is used."""

    def __init__(self, procs: list[subprocess.Popen] | None = None, what: str = "runs"):
        super().__init__()
        self.procs = procs if procs is not None else []  # the caller's list, as it grows
        self.count, self.what = 0, what

    def handler(self, signum: int, frame: Any) -> None:
        """Forward ``signum`` (third time: SIGKILL) to every live worker."""
        super().handler(signum, frame)
        self.count += 1
        sent = signum if self.count < 3 else signal.SIGKILL
        logger.warning("signal %s: %s", signum, "killing the workers" if self.count >= 3 else
                       f"starting nothing new, stopping the {self.what} after their current step"
                       if self.count == 1 else f"stopping the {self.what} now")
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(sent)
