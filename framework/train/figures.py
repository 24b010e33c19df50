"""An experiment's pictures: its ``figures(network, split)`` hook, drawn after
each evaluation (or once at the end of a run without an eval split) and saved
as ``figures/<name>/epoch-<k>.png`` plus the latest as ``figures/<name>.png``.

The hook runs on the training thread (it may call the network); the PNGs are
rendered and written by one background thread, so the next step does not
wait for them. A hook that raises fails nothing: one warning line, and the
traceback goes to ``figures.log`` beside ``error.txt``.
"""
from typing import TYPE_CHECKING, Any
import io
import logging
import os
import queue
import re
import threading
import traceback

from ..callbacks import schema
from .. import layout
from ..callbacks._quiet_callback import QuietCallback
from ..callbacks._mindspore import eval_results
from ..callbacks._common import step_info
from .features import Build, feature

if TYPE_CHECKING:
    from ..define.experiment import BaseExperiment

logger = logging.getLogger(__name__)

_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


PLOTS_ENV = "MINDEXP_PLOTS"


def drawing_wanted() -> bool:
    """False when the environment says ``MINDEXP_PLOTS=0`` (also ``false``, ``no``,
    ``off``): runs then draw neither ``plots/`` nor ``figures/``, which saves a
    headless batch of many runs (and a test suite) a second or two of CPU per run;
    ``mindexp plot RUN`` draws a run's plots later."""
    value = os.environ.get(PLOTS_ENV, "").strip().lower()
    return value not in ("0", "false", "no", "off")


def has_figures(exp: "BaseExperiment") -> bool:
    """True when the experiment implements the optional ``figures`` hook and
    drawing is wanted (:func:`drawing_wanted`)."""
    return callable(getattr(exp, "figures", None)) and drawing_wanted()


def as_named(result: Any) -> dict[str, Any]:
    """The hook's result as ``{name: figure}``: one figure, a list, or a dict."""
    if result is None:
        return {}
    if isinstance(result, dict):
        return {_safe_name(k): v for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return {f"figure-{i}": fig for i, fig in enumerate(result)}
    return {"figure": result}


def _safe_name(name: Any) -> str:
    return _NAME.sub("_", str(name)).strip("._") or "figure"


class Figures(QuietCallback):
    """Calls ``exp.figures(network, split)`` after each evaluation (split
    ``"eval"``), or at the end of training when the run has no evaluation
    (split ``"train"``), and saves what it returns under ``figures/``."""

    def __init__(self, exp: "BaseExperiment", network: Any, run_dir: str, evaluates: bool,
                 steps_per_epoch: int | None = None) -> None:
        super().__init__()
        self.exp, self.network, self.run_dir = exp, network, run_dir
        self.evaluates = evaluates
        self.steps_per_epoch = steps_per_epoch
        self.failures = 0
        self._queue: queue.Queue[Any] | None = None
        self._thread: threading.Thread | None = None
        self._epoch = 0

    def on_train_begin(self, run_context: Any) -> None:
        if self._thread is None:
            self._queue = queue.Queue()
            thread = threading.Thread(target=self._write_loop, name="mindexp-figures",
                                      daemon=True)
            self._thread = thread
            thread.start()

    def on_train_epoch_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self._epoch = step_info(cb_params, self.steps_per_epoch)[1]
        if self.evaluates and eval_results(cb_params):
            self.draw("eval", self._epoch)

    def on_train_end(self, run_context: Any) -> None:
        if not self.evaluates and self._epoch:
            self.draw("train", self._epoch)
        self.close()

    def _end_context(self) -> None:
        self.close()

    def draw(self, split: str, epoch: int) -> None:
        """Call the hook and queue its figures for writing; never raises."""
        was_training = getattr(self.network, "training", False)
        hook = self.exp.figures
        assert hook is not None, "a Figures callback is made for a figures() hook only"
        try:
            self.network.set_train(False)
            figures = as_named(hook(self.network, split))
        except Exception as exc:
            self._failed(f"{type(self.exp).__name__}.figures() raised at epoch {epoch}", exc)
            return
        finally:
            self.network.set_train(was_training)
        if self._queue is not None:
            self._queue.put((epoch, figures))

    def _write_loop(self) -> None:
        while True:
            assert self._queue is not None  # made before the thread starts
            item = self._queue.get()
            if item is None:
                return
            epoch, figures = item
            for name, fig in figures.items():
                try:
                    _save(fig, self.run_dir, name, epoch)
                except Exception as exc:
                    self._failed(f"figure {name!r} of epoch {epoch} could not be saved", exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        path = os.path.join(self.run_dir, layout.FIGURES_LOG)
        logger.warning("%s: %s: %s (traceback in %s); training goes on",
                       what, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                       path)
        try:
            fd = schema.open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never a link
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(f"{what}\n{''.join(traceback.format_exception(exc))}\n")
        except OSError:
            logger.debug("cannot write %s", path, exc_info=True)

    def close(self) -> None:
        """Wait for the queued figures to be written; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None or self._queue is None:
            return
        self._queue.put(None)
        thread.join()


def _save(fig: Any, run_dir: str, name: str, epoch: int | None) -> None:
    """Render ``fig`` to PNG once and write it atomically twice: the epoch's
    file and the latest ``<name>.png``; the figure is closed after."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=fig.get_dpi())
    finally:
        _close(fig)
    data = buffer.getvalue()
    folder = os.path.join(run_dir, layout.FIGURES_DIR)
    if os.path.islink(folder):  # planted: never written through (resume refuses such a run)
        raise OSError(f"{folder} is a link; figures are written only into the run's folder")
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    schema.atomic_write(os.path.join(folder, name, f"epoch-{epoch}.png"), data)
    schema.atomic_write(os.path.join(folder, f"{name}.png"), data)


def _close(fig: Any) -> None:
    """Release a pyplot figure (a plain ``Figure`` needs nothing)."""
    import sys
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


@feature("figures", order=80)
def _figures(run: Build, before: object) -> object:
    """The experiment's figures() hook, drawn by rank 0 after each evaluation."""
    if run.shard_id != 0 or not has_figures(run.exp):
        return None
    return Figures(run.exp, run.net, run.run_dir, bool(run.metrics),
                   steps_per_epoch=run.steps_per_epoch)
