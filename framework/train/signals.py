"""Stop training cleanly on SIGINT/SIGTERM."""
import _signal  # type: ignore[import-not-found]  # CPython's C module under signal
from typing import Any, Iterator
import contextlib
import logging
import signal
import threading

from ..callbacks._quiet_callback import QuietCallback
from .failures import signal_name
from .features import Build, Stopper, feature
from ..rundir.record import stop_waiting_when

logger = logging.getLogger(__name__)


class SignalStop(QuietCallback):
    """Turns SIGINT/SIGTERM into a clean stop at the next step end.

    The first signal requests a stop, so the step finishes, the final
    checkpoint matches the logs and the status becomes ``interrupted``; a
    second signal during training raises KeyboardInterrupt at once.

    The runner holds it from before the run's folder exists until run.json
    is final (``with stopper:``); outside :meth:`training` a signal is only
    noted, so the run's creation and its final bookkeeping (summary, plots,
    run.json) always finish and the record never stays ``running``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}
        self._training = False
        self._late: int | None = None
        self._waits: Any = None  # stop_waiting_when's context while our handlers are held

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None and self._training:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum
        if not self._training:
            self._late = signum  # heard by the caller's own handler once we are done
        logger.warning("%s: %s", signal_name(signum),
                       "stopping after this step" if self._training else
                       "stopping once the run's record is written")

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """The block trains: a second signal in it stops at once. Our handlers
        are taken back on the way out (MindSpore may have replaced them)."""
        self._training = True
        try:
            yield
        finally:
            self._training = False
            self.take_back()

    def take_back(self) -> None:
        """Install our handlers again over whatever replaced them since :meth:`__enter__`.

        Through ``_signal.signal``, the C function ``signal.signal`` wraps:
        the wrapper turns the old handler into a ``Handlers`` enum member,
        and for a Python function that conversion raises and catches a
        ValueError, ~3 us a call here; twice a step, two signals each, that
        was 12-24 us of a 330 us step (benchmarks/profile_parts.py)."""
        handler = self.handler
        for sig in self._saved:
            _signal.signal(sig, handler)

    def head(self) -> "TakeBack":
        """The callback to put first: it takes these handlers back before any
        other callback's step end runs (this one runs last, see the runner)."""
        return TakeBack(self)

    def on_train_step_end(self, run_context: Any) -> None:
        if self.signum is not None:
            run_context.request_stop()
        elif self._saved:
            # MindSpore's runtime installs its own C-level SIGINT handler during
            # the first steps (and may again later), which turns Ctrl-C into a
            # SIGTERM; its dataset pipeline (parallel workers) installs SIGINT and
            # SIGTERM handlers when its iterator starts: take them back after every
            # step (a cheap syscall each): the head's TakeBack did before the other
            # callbacks, and one of them may have started an iterator since.
            self.take_back()

    def __enter__(self) -> Any:
        """Install the handlers (main thread only; the outermost enter)."""
        if not self._context_depth and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self.handler)
            # a wait for the run's write lock gives up once we heard a signal
            self._waits = stop_waiting_when(lambda: self.signum)
            self._waits.__enter__()
        return super().__enter__()

    def _end_context(self) -> None:
        # The outermost exit only: Model enters it again (and Model.fit once per
        # evaluation); restoring there would let a later signal kill the run.
        saved, self._saved = self._saved, {}
        waits, self._waits = self._waits, None
        if waits is not None:
            waits.__exit__(None, None, None)
        for sig, old in saved.items():  # None: a handler not set from Python
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        late, self._late = self._late, None
        caller = saved.get(late) if late is not None else None
        if callable(caller) and caller is not signal.default_int_handler:
            caller(late, None)  # a tuning worker's flag: it stops after this run


class TakeBack(QuietCallback):
    """The first callback of a run: puts the :class:`SignalStop` handlers back
    at each step end, before the others run.

    MindSpore's runtime installs its own C-level SIGINT handler while it runs a
    graph (every step in graph mode; the backward pass in PyNative) and leaves
    it there after the step: until the stop's handlers were taken back, a
    Ctrl-C during the other callbacks' step ends became a SIGTERM (exit 143,
    "interrupted by SIGTERM"). A signal inside the step itself still can.
    """

    def __init__(self, stop: SignalStop) -> None:
        super().__init__()
        self._stop = stop

    def on_train_step_end(self, run_context: Any) -> None:
        self._stop.take_back()


@feature("signals_head", order=10)
def _take_back(run: Build, before: object) -> TakeBack:
    return run.stopper.head()


@feature("signals", order=1000)
def _signal_stop(run: Build, before: object) -> Stopper:
    """Last, so a signal that arrives during any callback of step s stops at s."""
    return run.stopper
