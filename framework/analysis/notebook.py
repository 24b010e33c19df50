"""Runs in Jupyter: rich HTML for a run, a compare() table and a list of runs,
and matplotlib figures that display inline.

Nothing here imports IPython: Jupyter calls ``_repr_html_`` by itself.
The inline loss curves are small SVG polylines (no matplotlib, no
network), so a table of many runs renders at once.
"""
from __future__ import annotations

import base64
import functools
import html
import math
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..callbacks import schema
from .. import layout
from ..rundir.run import Run as _RunReader
from . import reports
from .cells import format_value
from .reports import as_runs, display_table, history, loss_components

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from ..rundir.run import RunsOrPaths

SPARK_POINTS = 120   # a loss curve is thinned to this many points for the inline SVG
SPARK_SIZE = (160, 36)


class Run(_RunReader):
    """A run directory (see ``mindexp.rundir.run.Run``) that also
    renders in Jupyter (status, config, final values, a small loss curve)
    and plots itself with ``plot``."""

    def plot(self, what: str = "loss") -> Figure:
        """A matplotlib figure of this run: ``"loss"`` (with loss components),
        ``"eval"``, ``"params"`` or ``"grad_norm"``; Jupyter shows it inline."""
        from . import plots
        draw = {"loss": plots.loss_plot, "eval": plots.eval_plot, "params": plots.params_plot,
                "grad_norm": plots.grad_norm_plot}
        if what not in draw:
            from ..errors import ConfigError
            raise ConfigError(f"unknown plot {what!r}; accepted: {', '.join(draw)}. "
                              f"Received: what={what!r}", field="what")
        return inline(draw[what](self))

    def _repr_html_(self) -> str:
        return run_html(self)


def compare(runs_or_paths: RunsOrPaths, sort: str = "final_loss",
            columns: Sequence[str] | None = None,
            group_by: str | Sequence[str] | None = None, against: Any = None,
            where: str | None = None) -> pd.DataFrame:
    if group_by is not None or against is not None:   # one row per group: no run to draw
        return reports.compare(runs_or_paths, group_by=group_by, against=against, where=where)
    return run_table(reports.compare(runs_or_paths, sort=sort, columns=columns, where=where))


compare.__doc__ = (reports.compare.__doc__ or "") + """
    The table is a pandas DataFrame subclass that Jupyter renders with the
    columns worth reading and a small loss curve per run.
    """


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read one run directory back as a ``mindexp.Run`` (RunDirError
    naming the file when it is broken)."""
    reports.load_run(path)  # reads everything reports use: a broken run fails here
    return Run(path)


def load_runs(paths: RunsOrPaths) -> Runs:
    """The runs at or below ``paths`` as ``Runs`` (a list); broken
    ones are skipped with a warning (RunDirError when none is readable)."""
    loaded = reports.load_runs(paths)
    return Runs([Run(run.dir) for run in loaded], loaded.errors)


def run_html(run: Run) -> str:
    """A run as an HTML card: identity and status, final values, a loss curve, config."""
    table = reports.compare([run])
    row = table.iloc[0]
    # eval values as compare() knows them: a config field named eval_* is not one
    finals = {k: row[k] for k in ["final_loss", "min_loss", "steps", "train_time_s"]
              + [f"final_{c}" for c in loss_components(run)]
              + [c for c in table.attrs["eval_columns"] if not c.startswith("best_")]
              if k in row.index}
    config = ", ".join(f"{k}={format_value(v)}" for k, v in run.config.items())
    return (f"<div class='mindexp-run'><b>{_e(run.meta.get('experiment'))}</b> "
            f"<code>{_e(run.run_id)}</code> {_status(run.status)}<br>"
            f"{_sparkline(run)}<br>{_pairs(finals)}{_last_figures(run)}"
            f"<details><summary>config</summary><small>{_e(config)}</small></details>"
            f"<small>{_e(run.dir)}</small></div>")


MAX_CARD_FIGURES = 4     # the latest figures/<name>.png a Run card shows
CARD_FIGURE_WIDTH = 240  # px


def _last_figures(run: Run) -> str:
    """The latest picture of each of the experiment's figures (figures/<name>.png),
    embedded so the notebook keeps them."""
    folder = os.path.join(run.dir, layout.FIGURES_DIR)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".png"))[:MAX_CARD_FIGURES]
    except OSError:
        return ""
    images = []
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
        except OSError:
            continue
        images.append(f"<img src='data:image/png;base64,{data}' alt='{_e(name[:-4])}' "
                      f"title='{_e(name[:-4])}' width='{CARD_FIGURE_WIDTH}'>")
    return "<br>" + " ".join(images) if images else ""


def run_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (compare()'s DataFrame) as a ``RunFrame``: the same
    DataFrame, rendered in Jupyter as the display table plus a loss curve per run."""
    frame = _frame_class()(table)
    frame.attrs.update(table.attrs)
    return frame


@functools.cache
def _frame_class() -> type:
    """The DataFrame subclass, made on first use (pandas is imported lazily)."""
    import pandas as pd

    class RunFrame(pd.DataFrame):
        """compare()'s table: a pandas DataFrame that Jupyter renders with
        the columns worth reading and a small loss curve per run."""

        @property
        def _constructor(self) -> type:
            return RunFrame

        def _repr_html_(self) -> str:
            return table_html(self)

    RunFrame.__module__ = __name__
    return RunFrame


def table_html(table: pd.DataFrame) -> str:
    """The display table of ``table`` with a ``loss curve`` column (when run_dir is known)."""
    import pandas as pd
    needed = ("experiment", "run_id", "status")
    if not all(c in table.columns for c in needed):  # a slice of the table: plain pandas
        return pd.DataFrame._repr_html_(table)
    shown = pd.DataFrame(display_table(table)).copy()
    if "run_dir" in table.columns:
        shown.insert(2, "loss curve", [_sparkline_of(d) for d in table["run_dir"]])
    return shown.to_html(escape=False, index=False, na_rep="-",
                         float_format=lambda v: f"{v:.6g}")


class Runs(reports.RunList):
    """A list of ``Run`` (a sweep's or a study's runs; ``errors`` lists
    the broken ones) that Jupyter renders as their ``mindexp.compare`` table."""

    def compare(self, sort: str = "final_loss") -> pd.DataFrame:
        """``mindexp.compare`` of these runs."""
        return compare(list(self), sort=sort)

    def _repr_html_(self) -> str:
        if not self:
            return "<i>no runs</i>"
        return f"<p>{len(self)} runs</p>" + table_html(self.compare())


def plot(runs: RunsOrPaths, metric: str = "loss") -> Figure:
    """A matplotlib figure of ``metric`` per step for each run (any name
    ``mindexp.history`` accepts: ``loss``, a loss component,
    ``eval_accuracy``, a parameter); Jupyter shows it inline."""
    from .plots import _figure
    from .reports import config_labels
    runs = as_runs(runs)
    table = history(runs, metric)
    labels = dict(zip((r.run_id for r in runs), config_labels(runs)))
    fig = _figure()
    ax = fig.add_subplot()
    for run_id, rows in table.groupby("run_id", sort=False):
        ax.plot(rows[schema.Col.STEP], rows[metric], lw=1,
                label=f"{run_id} {labels.get(run_id, '')}")
    ax.set(xlabel="step", ylabel=metric, title=metric)
    if len(runs) <= 12:
        ax.legend(fontsize=7)
    return inline(fig)


def inline(fig: Figure) -> Figure:
    """``fig``, and in IPython a PNG formatter for matplotlib figures, so the
    figure displays inline without pyplot (the plots never use pyplot)."""
    import sys
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        from matplotlib.figure import Figure
        from .plots import figure_png
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)
    return fig


# -- helpers -----------------------------------------------------------------------

def _e(value: object) -> str:
    return html.escape(str(value))


def _status(status: str | None) -> str:
    color = {"completed": "#2a7", "running": "#27a", "diverged": "#d80",
             "failed": "#c33"}.get(status or "", "#777")
    return f"<span style='color:{color}'>{_e(status)}</span>"


def _pairs(values: Mapping[str, Any]) -> str:
    cells = []
    for key, value in values.items():
        text = f"{value:.6g}" if isinstance(value, float) else format_value(value)
        cells.append(f"{_e(key)}=<b>{_e(text)}</b>")
    return " &middot; ".join(cells)


def _sparkline_of(run_dir: str) -> str:
    try:
        return _sparkline(_RunReader(run_dir))
    except Exception:  # a broken run still gets its row
        return ""


def _sparkline(run: _RunReader) -> str:
    """The training loss as a small inline SVG (log scale when it spans decades)."""
    loss = run.loss
    if not len(loss):
        return ""
    every = max(1, len(loss) // SPARK_POINTS)
    values = [float(v) for v in loss[schema.Col.LOSS].to_numpy(dtype=float)[::every]]
    values = [v for v in values if math.isfinite(v)]
    if len(values) < 2:
        return ""
    if min(values) > 0 and max(values) / min(values) > 100:
        values = [math.log10(v) for v in values]
    low, high = min(values), max(values)
    width, height = SPARK_SIZE
    span = (high - low) or 1.0
    points = " ".join(f"{i * (width - 2) / (len(values) - 1) + 1:.1f},"
                      f"{height - 1 - (v - low) / span * (height - 2):.1f}"
                      for i, v in enumerate(values))
    return (f"<svg width='{width}' height='{height}' role='img' aria-label='loss curve'>"
            f"<polyline fill='none' stroke='#1f77b4' stroke-width='1' points='{points}'/></svg>")
