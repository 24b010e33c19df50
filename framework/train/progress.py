"""A tqdm progress bar over steps (in a terminal, or tqdm's notebook bar in Jupyter)."""
from typing import Any
import sys

from ..callbacks._quiet_callback import QuietCallback
from .features import Build, feature


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython with a kernel attached), where
    stdout is no terminal and carriage returns would pile up as text."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def wanted(quiet: bool) -> bool:
    """Whether a run shows a progress bar: not quiet, and a terminal or a notebook."""
    return not quiet and (sys.stdout.isatty() or in_notebook())


class Progress(QuietCallback):
    """Shows steps, epoch and the last loss in a tqdm bar (tqdm's widget
    in a notebook: ``tqdm.auto`` picks it when ipywidgets is installed)."""

    def __init__(self, epochs: int, steps_per_epoch: int, every: int = 10) -> None:
        super().__init__()
        self.total = epochs * steps_per_epoch
        self.every = every
        self._bar: Any = None

    def on_train_begin(self, run_context: Any) -> None:
        if in_notebook():
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm
        self._bar = tqdm(total=self.total, unit="step", dynamic_ncols=True, leave=False)

    def on_train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self._bar.update(1)
        if cb_params.cur_step_num % self.every == 0:
            loss = cb_params.net_outputs
            loss = loss[0] if isinstance(loss, (tuple, list)) else loss
            self._bar.set_postfix(epoch=cb_params.cur_epoch_num, loss=f"{float(loss.asnumpy()):.4g}")

    def on_train_end(self, run_context: Any) -> None:
        self.close()

    def _end_context(self) -> None:  # not at the end of an evaluation of Model.fit
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@feature("progress", order=90)
def _progress(run: Build, before: object) -> object:
    return Progress(run.cfg.epochs, run.steps_per_epoch) if wanted(run.quiet) else None
