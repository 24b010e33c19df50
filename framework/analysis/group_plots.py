"""Plots of groups of runs: per group one mean curve and its shaded 95 %
t-interval (:func:`.reports.history` with ``group_by``), for the loss, each
scalar parameter and each eval metric (``mindexp plot DIR --group-by FIELD``).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence, cast

from ..callbacks import schema
from .cells import format_value
from .colors import run_colors
from .payload import eval_metrics
from .plots import _figure, _legend_below, _log_if_wide, _panels, _scalar_names, save_figure
from .reports import as_runs, compare, eval_name, history

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..rundir.run import RunsOrPaths

LOSS_GROUPS, PARAMS_GROUPS, EVAL_GROUPS = "loss_groups.png", "params_groups.png", "eval_groups.png"
BAND_ALPHA = 0.25   # the interval shows the curve through it


def group_curves(runs: RunsOrPaths, metric: str, group_by: str | Sequence[str],
                 ax: Axes | None = None, colors: dict[tuple, str] | None = None) -> Figure:
    """``metric`` per step: one mean curve per group with its 95 % interval
    shaded (no band where a step has fewer than two runs). ``colors``: a
    group's colour by its values as text (the same group, the same colour
    in every plot), see :func:`group_colors`."""
    import numpy as np
    table = history(runs, metric, group_by=group_by)
    fields = table.attrs["group_by"]
    fig = cast("Figure", ax.figure) if ax is not None else _figure()
    ax = ax if ax is not None else fig.add_subplot()
    groups = list(table.groupby(fields, sort=True, dropna=False, observed=True)) if fields \
        else [((), table)]   # no field: one group of every run
    means = table[f"{metric}_mean"]
    _log_if_wide(ax, means)
    floor = _log_floor(ax, means)
    palette = run_colors(len(groups))
    for i, (key, rows) in enumerate(groups):
        values = key if isinstance(key, tuple) else (key,)
        color = (colors or {}).get(tuple(map(format_value, values)), palette[i])
        label = ", ".join(f"{f}={format_value(v)}" for f, v in zip(fields, values)) or "all runs"
        step = rows[schema.Col.STEP].to_numpy()
        ax.plot(step, rows[f"{metric}_mean"].to_numpy(), lw=1.2, color=color,
                label=f"{label} (n={int(rows['n'].max())})")
        low = rows[f"{metric}_ci_low"].to_numpy()
        ax.fill_between(step, low if floor is None else np.where(low > floor, low, floor),
                        rows[f"{metric}_ci_high"].to_numpy(), color=color, alpha=BAND_ALPHA,
                        lw=0)
    ax.set(xlabel="step", ylabel=metric, title=f"{metric}: mean and 95 % interval per group")
    return fig


def _log_floor(ax, means):
    """On a log axis: fit it to the means, and return the value below its
    bottom that stands for an interval reaching zero or below (drawn to the
    axis' edge: a log axis has no place for it); None on a linear axis."""
    import numpy as np
    if ax.get_yscale() != "log":
        return None
    positive = means[np.isfinite(means) & (means > 0)]
    low, high = float(positive.min()), float(positive.max())
    ax.set_ylim(low / 4, high * 2)
    return low / 40


def group_colors(runs: RunsOrPaths, group_by: str | Sequence[str]) -> dict[tuple, str]:
    """A colour per group of compare(runs, group_by=...), keyed by its values as text."""
    groups = compare(runs, group_by=group_by)
    fields = groups.attrs["group_by"]
    keys = [tuple(map(format_value, row)) for row in groups[fields].itertuples(index=False)] \
        if fields else [()]
    return dict(zip(keys, run_colors(len(keys))))


def _panels_of(runs, metrics, group_by, colors):
    """One figure, a panel per metric, one legend below."""
    fig, axes = _panels(None, len(metrics), figsize=(6.4, 0.6 + 2.8 * len(metrics)))
    for metric, ax in zip(metrics, axes):
        group_curves(runs, metric, group_by, ax=ax, colors=colors)
        ax.set_title(metric)
    _legend_below(fig, axes[0])
    return fig


def save_group_plots(runs: RunsOrPaths, out_dir: str,
                     group_by: str | Sequence[str]) -> list[str]:
    """Write ``loss_groups.png``, ``params_groups.png`` (scalar parameters)
    and ``eval_groups.png`` (eval metrics) into ``out_dir``; returns the paths."""
    runs = as_runs(runs)
    colors = group_colors(runs, group_by)
    fig = group_curves(runs, schema.Col.LOSS, group_by, colors=colors)
    _legend_below(fig, fig.axes[0])
    written = [save_figure(fig, os.path.join(out_dir, LOSS_GROUPS))]
    for name, metrics in ((PARAMS_GROUPS, _scalar_names(runs)), (EVAL_GROUPS, [eval_name(m) for m in eval_metrics(runs)])):
        if metrics:
            written.append(save_figure(_panels_of(runs, metrics, group_by, colors),
                                       os.path.join(out_dir, name)))
    return written
