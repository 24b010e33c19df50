"""Matplotlib plots of runs: one run (written into its ``plots/``) and several overlaid.

Figures are built with ``matplotlib.figure.Figure`` and rendered by Agg, never
through pyplot: no display is needed, nothing is left open in pyplot's
registry, and a notebook's own backend is left alone. Every plot function
takes an optional ``ax`` to draw into and returns the figure.
"""
import contextvars
import io
import math
import os
import re
import textwrap

import numpy as np

from ..callbacks import schema
from .. import layout
from .colors import run_colors
from .payload import HEALTHY, eval_metrics, is_number, param_base, param_kind
from .reports import as_runs, compare, config_labels, load_run, loss_components
from ..rundir.run import Run

DECADES_FOR_LOG = 2  # a curve spanning more than this many decades gets a log axis
RUN_PLOTS = ("loss.png", "params.png", "grad_norm.png", "eval.png")
LABEL_WIDTH = 40   # characters per line of a bar label
TITLE_CHARS = 52   # characters per title line that fit 6.4 inches at matplotlib's title size
# The layout engine of the figures being built: constrained, except for a run's own
# plots, which save_run_plots lays out itself (see _fixed_margins).
_LAYOUT: contextvars.ContextVar[str] = contextvars.ContextVar("layout", default="constrained")
STATUS_COLORS = {"completed": "tab:blue", "diverged": "tab:orange", "failed": "tab:red",
                 "interrupted": "tab:gray", "running": "tab:green", "pruned": "tab:olive"}


# -- one run -------------------------------------------------------------------

def loss_plot(run, ax=None):
    """The training loss per step (log scale when it spans decades), with
    each loss component as a thin dashed line."""
    run = _one(run)
    fig, ax = _axes(ax)
    line, = ax.plot(*_finite_xy(run.loss, schema.Col.LOSS), lw=1, label="train loss")
    components = loss_components(run)
    for name in components:
        ax.plot(*_finite_xy(run.loss, name), "--", lw=0.8, label=name)
    if schema.Col.LOSS in run.eval.columns:
        ax.plot(*_finite_xy(run.eval, schema.Col.LOSS), "o:", ms=3, lw=1, color=line.get_color(),
                label="eval_loss")
    if components or schema.Col.LOSS in run.eval.columns:
        _legend(ax)
    _finish_curve(ax, run, run.loss, schema.Col.LOSS, line, ("loss", "loss"))
    return fig


def eval_plot(run, ax=None):
    """Each eval metric per step, labelled ``eval_<metric>`` (one panel per metric without ``ax``)."""
    run = _one(run)
    metrics = eval_metrics([run])
    fig, axes = _panels(ax, len(metrics))
    for metric, panel in zip(metrics, axes):
        x, y = _finite_xy(run.eval, metric)
        panel.plot(x, y, "o-", ms=3, lw=1, label=f"eval_{metric}")
        if not len(y):
            panel.text(0.5, 0.5, "no finite values", ha="center", transform=panel.transAxes)
        _log_if_wide(panel, run.eval[metric])
        panel.set(ylabel=f"eval_{metric}", title=f"eval_{metric}" if ax is None else None)
    if ax is not None:
        _legend(ax)
    axes[0].set_title(_title(run, "eval"))
    axes[-1].set_xlabel("step")
    return fig


def params_plot(run, ax=None):
    """Tracked parameters, one panel per tensor: the value of a one-element
    tensor, the elements of a small one, the L2 norm of a large one; each
    target as a dashed line. With ``ax``: everything in that one axis."""
    run = _one(run)
    groups = _param_groups(run.params)
    fig, axes = _panels(ax, len(groups))
    for (base, series), panel in zip(groups, axes):
        for name, rows in series:
            line, = panel.plot(*_finite_xy(rows, schema.Col.VALUE), lw=1, label=name)
            if is_number(run.targets.get(name)):
                panel.axhline(run.targets[name], ls="--", lw=1, color=line.get_color(),
                              label=f"{name} target {run.targets[name]:g}")
        _fit_finite(panel, [rows[schema.Col.VALUE] for _, rows in series])
        if ax is None:
            panel.set(ylabel=param_kind(series[0][0]), title=base)
        if len(series) <= 8 or ax is not None:
            _legend(panel)
    if ax is None and len(groups) > 1:  # the run above all panels, each panel its tensor
        fig.suptitle(_title(run, "parameters"))
    else:
        axes[0].set_title(_title(run, "parameters"))
    axes[-1].set_xlabel("step")
    return fig


def grad_norm_plot(run, ax=None):
    """The global gradient norm per step, with the clipping threshold if any."""
    run = _one(run)
    fig, ax = _axes(ax)
    line, = ax.plot(*_finite_xy(run.grad_norm, schema.Col.GRAD_NORM), lw=1, label="grad norm")
    clip = run.config.get("clip_grad_norm")
    if is_number(clip):
        ax.axhline(clip, ls=":", lw=1, color="black", label=f"clip_grad_norm {clip:g}")
        _legend(ax)
    _finish_curve(ax, run, run.grad_norm, schema.Col.GRAD_NORM, line,
                  ("gradient L2 norm", "gradient norm"))
    return fig


def _finish_curve(ax, run, table, column, line, labels):
    """Log scale when ``column`` spans decades, the divergence marked, the axes
    named: ``labels`` is ``(y label, title)``."""
    _log_if_wide(ax, table[column])
    _mark_divergence(ax, run, table, column, line.get_color())
    ax.set(xlabel="step", ylabel=labels[0], title=_title(run, labels[1]))


# -- several runs ----------------------------------------------------------------

def loss_overlay(runs, ax=None):
    """Loss curves of several runs, labelled by the config fields that differ."""
    runs = as_runs(runs)
    fig, ax = _axes(ax)
    logged = [run for run in runs if schema.Col.LOSS in run.loss.columns]  # (a run failed
    healthy = [run.loss[schema.Col.LOSS] for run in logged if run.status in HEALTHY] or \
        [run.loss[schema.Col.LOSS] for run in logged]  # before its first step logged none)
    _log_if_wide(ax, *healthy)
    _fit_finite(ax, healthy)
    for run, label, color in zip(runs, config_labels(runs), run_colors(len(runs))):
        if run not in logged:
            continue
        ax.plot(*_cut_outliers(ax, run, *_finite_xy(run.loss, schema.Col.LOSS)), lw=1, color=color,
                label=_short_label(run, label))
        if schema.Col.LOSS in run.eval.columns:
            ax.plot(*_cut_outliers(ax, run, *_finite_xy(run.eval, schema.Col.LOSS)), "o:", ms=3, lw=1,
                    color=color)
        _mark_divergence(ax, run, run.loss, schema.Col.LOSS, color)
    ax.set(xlabel="step", ylabel="loss (eval dotted)" if any(
        schema.Col.LOSS in run.eval.columns for run in runs) else "loss", title="loss")
    _legend_below(fig, ax)
    return fig


def params_overlay(runs, ax=None, params=None):
    """Scalar parameter trajectories of several runs; targets dashed.

    Without ``ax``: one panel per parameter. With ``ax``: all in it.
    ``params`` picks parameter names (default: every scalar one).
    """
    runs = as_runs(runs)
    names = params or _scalar_names(runs)
    fig, axes = _panels(ax, len(names), figsize=(6.4, 2.6 * max(1, len(names))))
    labels = config_labels(runs)
    for name, panel in zip(names, axes):
        _overlay_param(panel, runs, labels, name, prefix=f"{name}: " if ax is not None else "")
    axes[-1].set_xlabel("step")
    if ax is None:
        _legend_below(fig, axes[0])  # one legend for every panel, covering none
    else:
        _legend(ax)
    return fig


def _overlay_param(ax, runs, labels, name, prefix):
    tables = [run.params[run.params[schema.Col.PARAM] == name] if len(run.params) else run.params
              for run in runs]
    healthy = [rows[schema.Col.VALUE] for run, rows in zip(runs, tables) if run.status in HEALTHY]
    _fit_finite(ax, healthy + [[run.targets[name]] for run in runs
                               if is_number(run.targets.get(name))])
    for run, label, rows, color in zip(runs, labels, tables, run_colors(len(runs))):
        if len(rows):
            ax.plot(*_cut_outliers(ax, run, *_finite_xy(rows, schema.Col.VALUE)), lw=1,
                    color=color, label=prefix + _short_label(run, label))
            _mark_divergence(ax, run, rows, schema.Col.VALUE, color)
    targets = {run.targets[name] for run in runs if is_number(run.targets.get(name))}
    for target in sorted(targets):
        ax.axhline(target, ls="--", lw=1, color="black", label=f"{name} target {target:g}")
    ax.set(ylabel=name, title=name)


def final_loss_bar(runs, ax=None):
    """Final loss per config as horizontal bars on a log axis, best at the top,
    colored by status; long labels are wrapped, never squeezed away."""
    runs = as_runs(runs)
    by_id = dict(zip((run.run_id for run in runs), config_labels(runs)))
    table = compare(runs)  # sorted by final loss, NaN last
    labels = ["\n".join(textwrap.wrap(by_id[r], LABEL_WIDTH, break_on_hyphens=False)[:3]) or r
              for r in table["run_id"]]
    lines = sum(label.count("\n") + 1 for label in labels)
    width = 6.4 + 0.07 * max((len(line) for label in labels for line in label.split("\n")),
                             default=0)
    fig, ax = _axes(ax, figsize=(width, 1.4 + 0.3 * lines + 0.15 * len(table)))
    values = [_finite_or_zero(v) for v in table["final_loss"]]
    colors = [STATUS_COLORS.get(s, "tab:purple") for s in table["status"]]
    ax.barh(range(len(table)), values, color=colors)
    ax.set_yticks(range(len(table)), labels)
    ax.invert_yaxis()
    positive = [v for v in values if v > 0]
    if positive:  # final losses are compared by ratio: 1.05e-4 vs 1.07e-4 must differ
        _log_axis(ax, "x")
        ax.set_xlim(min(positive) / 3, max(positive) * 30)  # room for the value labels
    for y, (value, status) in enumerate(zip(table["final_loss"], table["status"])):
        note = f"{value:.4g}" if _finite(value) else "no finite loss"
        x = values[y] if values[y] > 0 else (min(positive) / 3 if positive else 0)
        ax.annotate(f" {note}" + ("" if status == "completed" else f" ({status})"),
                    (x, y), va="center", fontsize=8)
    ax.set(xlabel="final loss (log)" if positive else "final loss", title="final loss per config")
    return fig


# -- files ---------------------------------------------------------------------------

def save_run_plots(run, out_dir=None):
    """Write ``loss.png``, ``params.png``, ``grad_norm.png`` and ``eval.png`` of a run.

    ``run`` is a Run or a run directory; the files go to ``<run>/plots/``
    unless ``out_dir`` is given. A plot with no data is skipped; a run with
    no loss rows gets none. Each file is written to a temporary name and
    moved into place, so a reader never sees half a PNG. Returns the paths.
    """
    run = run if isinstance(run, Run) else Run(run)
    if not len(run.loss):
        return []
    if out_dir is None:
        _refuse_linked_out(run.dir)
    out_dir = out_dir or os.path.join(run.dir, layout.PLOTS_DIR)
    plots = [("loss.png", loss_plot)]
    if _param_groups(run.params):  # what params_plot draws: name[i] elements too
        plots.append(("params.png", params_plot))
    if len(run.grad_norm):
        plots.append(("grad_norm.png", grad_norm_plot))
    if eval_metrics([run]):
        plots.append(("eval.png", eval_plot))
    token = _LAYOUT.set("none")
    try:
        return [save_figure(_fixed_margins(draw(run)), os.path.join(out_dir, name))
                for name, draw in plots]
    finally:
        _LAYOUT.reset(token)


def _refuse_linked_out(run_dir):
    """RunDirError (one line naming it) when the run's plots/ is a link out of
    the run folder: plots are written only into the run's own folder."""
    from ..errors import RunDirError
    from ..rundir.io import linked_out
    why = linked_out(run_dir, (layout.PLOTS_DIR,))
    if why:
        raise RunDirError(f"no plots drawn for {run_dir}: {why}; mindexp never writes "
                          "through such a link (replace it with a folder, or give --out)")


def _fixed_margins(fig):
    """``fig`` with margins set from its titles instead of constrained layout.

    A run's plots are drawn at the end of every run (and every trial of a
    search): constrained layout measured every tick label twice before the
    real draw, a third of each run's plotting time (3 plots: 1.5 s of CPU
    here, 1.0 s with these margins). Their layout is known: one or more
    title lines above, stacked panels each with a one-line title, the step
    axis below, tick labels of a few characters on the left.
    """
    width, height = fig.get_size_inches()
    axes = fig.axes
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    head = suptitle or axes[0].get_title()
    panel_titles = bool(suptitle) and any(ax.get_title() for ax in axes)
    top = 0.15 + 0.23 * (head.count("\n") + 1) + (0.35 if panel_titles else 0.0)
    if suptitle:  # at a fixed distance from the top, not a fraction of a tall figure
        fig._suptitle.set_y(1 - 0.1 / height)
    gap = 0.45 if any(ax.get_title() for ax in axes[1:]) else 0.15
    panel = (height - top - 0.6 - gap * (len(axes) - 1)) / len(axes)
    fig.subplots_adjust(left=0.95 / width, right=1 - 0.2 / width, bottom=0.6 / height,
                        top=1 - top / height, hspace=gap / panel)
    return fig


def save_overlay_plots(runs, out_dir):
    """Write ``loss_overlay.png``, ``params_overlay.png`` (when there are
    scalar parameters) and ``final_loss.png`` of several runs; returns the paths."""
    runs = as_runs(runs)
    plots = [("loss_overlay.png", loss_overlay)]
    if _scalar_names(runs):
        plots.append(("params_overlay.png", params_overlay))
    plots.append(("final_loss.png", final_loss_bar))
    return [save_figure(draw(runs), os.path.join(out_dir, name)) for name, draw in plots]


def save_figure(fig, path, dpi=100):
    """Save ``fig`` as PNG at ``path`` atomically (:func:`schema.atomic_write`)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return schema.atomic_write(path, figure_png(fig, dpi))


def figure_png(fig, dpi=100):
    """The figure as PNG bytes (no metadata: the bytes depend on the picture only)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


# -- helpers -----------------------------------------------------------------------

def _figure(figsize=(6.4, 4.0)):
    from matplotlib.figure import Figure  # lazy: framework imports stay light
    return Figure(figsize=figsize, layout=_LAYOUT.get())


def _axes(ax, figsize=(6.4, 4.0)):
    if ax is not None:
        return ax.figure, ax
    fig = _figure(figsize)
    return fig, fig.add_subplot()


def _one(run):
    return run if isinstance(run, Run) else load_run(run)


def _title(run, what):
    """``<experiment> <run id>: <what> (<status>)``, on two or more lines when
    longer than TITLE_CHARS (a centred title wider than the figure is cut on
    both sides; constrained layout makes room for more lines, not more width)."""
    status = run.status if run.status == "completed" else f"{run.status}!"
    head, tail = f"{run.meta.get('experiment')} {run.run_id}", f"{what} ({status})"
    if len(head) + len(tail) + 2 <= TITLE_CHARS:
        return f"{head}: {tail}"
    lines = textwrap.wrap(f"{head}:", TITLE_CHARS, break_on_hyphens=False)
    return "\n".join(lines + textwrap.wrap(tail, TITLE_CHARS))


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _panels(ax, count, figsize=None):
    """``(figure, axes)``: ``count`` stacked panels (``figsize``: by default 2.6
    inches a panel), or ``ax`` repeated."""
    if ax is not None:
        return ax.figure, [ax] * max(1, count)
    fig = _figure(figsize=figsize or (6.4, max(4.0, 0.6 + 2.6 * max(1, count))))
    return fig, list(fig.subplots(max(1, count), 1, sharex=True, squeeze=False)[:, 0])


def _param_groups(params):
    """``[(tensor, [(series name, rows), ...]), ...]``: a one-element tensor's
    value, a small one's elements, a large one's norm (:func:`.payload.param_base`)."""
    if not len(params):
        return []
    groups = {}
    for name, rows in params.groupby(schema.Col.PARAM, sort=False):
        base, drawn = param_base(str(name))
        if drawn:
            groups.setdefault(base, []).append((str(name), rows))
    return list(groups.items())


def _finite_xy(table, column):
    """Steps and values of a column without NaN or infinities (matplotlib would
    break the line there anyway; the axis limits must not see them)."""
    values = table[column].to_numpy(dtype=float)
    keep = np.isfinite(values)
    return table[schema.Col.STEP].to_numpy()[keep], values[keep]


def _fit_finite(ax, series, margin=0.05):
    """y limits from the finite values of ``series`` (the healthy runs), so a
    diverged run's 1e26 does not flatten every other curve."""
    values = [float(v) for s in series for v in s if _finite(v)]
    if not values:
        return
    if ax.get_yscale() == "log":
        values = [v for v in values if v > 0]
        if not values:
            return
        lo, hi = math.log10(min(values)), math.log10(max(values))
        pad = (hi - lo) * margin or 0.5
        ax.set_ylim(10 ** (lo - pad), 10 ** (hi + pad))
        return
    lo, hi = min(values), max(values)
    pad = (hi - lo) * margin or abs(hi) * 0.1 or 1.0
    ax.set_ylim(lo - pad, hi + pad)


def _mark_divergence(ax, run, table, column, color):
    """An ``x`` where a diverged or failed run stopped, kept inside the axis."""
    if run.status not in ("diverged", "failed") or not len(table):
        return
    values = table[column].to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    stop = int(bad[0]) if len(bad) else len(values) - 1
    finite = values[:stop + 1][np.isfinite(values[:stop + 1])]
    y = float(finite[-1]) if len(finite) else float("nan")
    lo, hi = ax.get_ylim()
    y = min(max(y, lo), hi) if math.isfinite(y) else hi
    ax.plot([table[schema.Col.STEP].iloc[stop]], [y], "x", ms=9, mew=2, color=color,
            label="_stop")  # "_": not in the legend; the run's label says [diverged]


def _cut_outliers(ax, run, x, y):
    """A diverged or failed run's points far outside the y limits become gaps
    (no streaks across the plot; the x marker shows where it went)."""
    if run.status in HEALTHY or not len(y):
        return x, y
    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log":
        with np.errstate(divide="ignore", invalid="ignore"):
            v, lo, hi = np.log10(np.where(y > 0, y, np.nan)), math.log10(lo), math.log10(hi)
    else:
        v = y
    span = hi - lo
    y = np.where((v < lo - span) | (v > hi + span) | np.isnan(v), np.nan, y)
    return x, y


def _legend_below(fig, ax):
    """The runs' legend under the plot (constrained layout makes room for it)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", fontsize=8, ncols=1)


def _short_label(run, label, width=48):
    text = label if len(label) <= width else label[:width - 1] + "…"
    return text if run.status in HEALTHY else f"{text} [{run.status}]"


def _scalar_names(runs):
    """Each run's scalar parameters (its ``name:norm`` ones when it has none), in order."""
    names = {}
    for run in runs:
        found = [str(n) for n in run.params[schema.Col.PARAM].unique()] if len(run.params) else []
        names.update(dict.fromkeys([n for n in found if "[" not in n and ":" not in n]
                                   or [n for n in found if n.endswith(":norm")]))
    return list(names)


def _log_if_wide(ax, *series, axis="y"):
    """Log scale when the positive finite values span more than DECADES_FOR_LOG decades."""
    values = [float(v) for s in series for v in s if _finite(v)]
    if not values or min(values) <= 0:
        return
    if math.log10(max(values) / min(values)) > DECADES_FOR_LOG:
        _log_axis(ax, axis)


def _log_axis(ax, axis="y"):
    """A log scale whose tick labels are plain text (``10⁻⁴``, ``2×10⁻⁴``).

    matplotlib labels a log axis in mathtext, and the first mathtext label of a
    process builds its parser: 0.35 s of every run's plotting (of about 1 s),
    paid by every run and every trial. Unicode superscripts draw the same
    label without it.
    """
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(_plain_log_formatter())
    target.set_minor_formatter(_plain_log_formatter(labelOnlyBase=False))


def _plain_log_formatter(**kwargs):
    """matplotlib's own log formatter (same ticks labelled, same minor-tick
    rules), its mathtext labels turned into plain text."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            return _plain_log_label(super().__call__(x, pos))
    return PlainLogFormatter(base=10, **kwargs)


_SUPERSCRIPTS = str.maketrans("0123456789-−", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁻")


def _plain_log_label(label: str) -> str:
    """A log tick label in matplotlib's mathtext (``$\\mathdefault{2\\times10^{-4}}$``)
    as plain text (``2×10⁻⁴``); any other label unchanged."""
    match = re.fullmatch(r"\$\\mathdefault\{(.*)\}\$", label)
    if match is None:
        return label
    body = match.group(1).replace("\\times", "×")
    return re.sub(r"\^\{([^{}]*)\}", lambda m: m.group(1).translate(_SUPERSCRIPTS), body)


def _finite(value):
    return is_number(value) and math.isfinite(value)


def _finite_or_zero(value):
    return float(value) if _finite(value) else 0.0
