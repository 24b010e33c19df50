"""Matplotlib plots of runs: one run (written into its ``plots/``) and several overlaid.

Figures are built with ``matplotlib.figure.Figure`` and rendered by Agg, never
through pyplot: no display is needed, nothing is left open in pyplot's
registry, and a notebook's own backend is left alone. Every plot function
takes an optional ``ax`` to draw into and returns the figure.
"""
import io
import logging
import math
import os

from .reports import as_runs, compare, config_labels, load_run
from ..rundir.run import Run

logger = logging.getLogger(__name__)

DECADES_FOR_LOG = 2  # a curve spanning more than this many decades gets a log axis
RUN_PLOTS = ("loss.png", "params.png", "grad_norm.png")
STATUS_COLORS = {"completed": "tab:blue", "diverged": "tab:orange", "failed": "tab:red",
                 "interrupted": "tab:gray", "running": "tab:green"}


# -- one run -------------------------------------------------------------------

def loss_plot(run, ax=None):
    """The training loss per step (log scale when it spans decades)."""
    run = _one(run)
    fig, ax = _axes(ax)
    ax.plot(run.loss["step"], run.loss["loss"], lw=1, label="train loss")
    _log_if_wide(ax, run.loss["loss"])
    ax.set(xlabel="step", ylabel="loss", title=_title(run, "loss"))
    return fig


def params_plot(run, ax=None):
    """Trajectories of the tracked scalar parameters, each target as a dashed line.

    A network without scalar parameters shows the norms of its large ones.
    """
    run = _one(run)
    fig, ax = _axes(ax)
    for name, rows in _param_series(run.params):
        line, = ax.plot(rows["step"], rows["value"], lw=1, label=name)
        if _is_number(run.targets.get(name)):
            ax.axhline(run.targets[name], ls="--", lw=1, color=line.get_color(),
                       label=f"{name} target {run.targets[name]:g}")
    ax.set(xlabel="step", ylabel="value", title=_title(run, "parameters"))
    _legend(ax)
    return fig


def grad_norm_plot(run, ax=None):
    """The global gradient norm per step, with the clipping threshold if any."""
    run = _one(run)
    fig, ax = _axes(ax)
    ax.plot(run.grad_norm["step"], run.grad_norm["grad_norm"], lw=1, label="grad norm")
    clip = run.config.get("clip_grad_norm")
    if _is_number(clip):
        ax.axhline(clip, ls=":", lw=1, color="black", label=f"clip_grad_norm {clip:g}")
        _legend(ax)
    _log_if_wide(ax, run.grad_norm["grad_norm"])
    ax.set(xlabel="step", ylabel="gradient L2 norm", title=_title(run, "gradient norm"))
    return fig


# -- several runs ----------------------------------------------------------------

def loss_overlay(runs, ax=None):
    """Loss curves of several runs, labelled by the config fields that differ."""
    runs = as_runs(runs)
    fig, ax = _axes(ax)
    for run, label in zip(runs, config_labels(runs)):
        ax.plot(run.loss["step"], run.loss["loss"], lw=1, label=label)
    _log_if_wide(ax, *(run.loss["loss"] for run in runs))
    ax.set(xlabel="step", ylabel="loss", title="loss")
    _legend(ax)
    return fig


def params_overlay(runs, ax=None, params=None):
    """Scalar parameter trajectories of several runs; targets dashed.

    Without ``ax``: one panel per parameter. With ``ax``: all in it.
    ``params`` picks parameter names (default: every scalar one).
    """
    runs = as_runs(runs)
    names = params or _scalar_names(runs)
    if ax is None:
        fig = _figure(figsize=(6.4, 2.6 * max(1, len(names))))
        axes = fig.subplots(max(1, len(names)), 1, sharex=True, squeeze=False)[:, 0]
    else:
        fig, axes = ax.figure, [ax] * max(1, len(names))
    labels = config_labels(runs)
    for name, panel in zip(names, axes):
        _overlay_param(panel, runs, labels, name, prefix=f"{name}: " if ax is not None else "")
    axes[-1].set_xlabel("step")
    return fig


def _overlay_param(ax, runs, labels, name, prefix):
    for index, (run, label) in enumerate(zip(runs, labels)):
        rows = run.params[run.params["param"] == name] if len(run.params) else run.params
        if len(rows):
            ax.plot(rows["step"], rows["value"], lw=1, color=f"C{index % 10}",
                    label=prefix + label)
    targets = {run.targets[name] for run in runs if _is_number(run.targets.get(name))}
    for target in sorted(targets):
        ax.axhline(target, ls="--", lw=1, color="black", label=f"{name} target {target:g}")
    ax.set(ylabel=name, title=name)
    _legend(ax)


def final_loss_bar(runs, ax=None):
    """Final loss per config as horizontal bars, best at the top, colored by status."""
    runs = as_runs(runs)
    by_id = dict(zip((run.run_id for run in runs), config_labels(runs)))
    table = compare(runs)  # sorted by final loss, NaN last
    fig, ax = _axes(ax, figsize=(6.4, 1.2 + 0.4 * len(table)))
    values = [_finite_or_zero(v) for v in table["final_loss"]]
    colors = [STATUS_COLORS.get(s, "tab:purple") for s in table["status"]]
    ax.barh(range(len(table)), values, color=colors)
    ax.set_yticks(range(len(table)), [by_id[r] for r in table["run_id"]])
    ax.invert_yaxis()
    for y, (value, status) in enumerate(zip(table["final_loss"], table["status"])):
        note = f"{value:.3g}" if _finite(value) else "no finite loss"
        ax.annotate(f" {note}" + ("" if status == "completed" else f" ({status})"),
                    (values[y], y), va="center", fontsize=8)
    _log_if_wide(ax, [v for v in values if v > 0], axis="x")
    ax.margins(x=0.2)  # room for the value labels
    ax.set(xlabel="final loss", title="final loss per config")
    return fig


# -- files ---------------------------------------------------------------------------

def save_run_plots(run, out_dir=None):
    """Write ``loss.png``, ``params.png`` and ``grad_norm.png`` of a run.

    ``run`` is a Run or a run directory; the files go to ``<run>/plots/``
    unless ``out_dir`` is given. A plot with no data is skipped; a run with
    no loss rows gets none. Each file is written to a temporary name and
    moved into place, so a reader never sees half a PNG. Returns the paths.
    """
    run = run if isinstance(run, Run) else Run(run)
    if not len(run.loss):
        return []
    out_dir = out_dir or os.path.join(run.dir, "plots")
    plots = [("loss.png", loss_plot)]
    if any(True for _ in _param_series(run.params)):
        plots.append(("params.png", params_plot))
    if len(run.grad_norm):
        plots.append(("grad_norm.png", grad_norm_plot))
    return [save_figure(draw(run), os.path.join(out_dir, name)) for name, draw in plots]


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
    """Save ``fig`` as PNG at ``path`` atomically (temp file + ``os.replace``)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(figure_png(fig, dpi))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def figure_png(fig, dpi=100):
    """The figure as PNG bytes (no metadata: the bytes depend on the picture only)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


# -- helpers -----------------------------------------------------------------------

def _figure(figsize=(6.4, 4.0)):
    from matplotlib.figure import Figure  # lazy: framework imports stay light
    return Figure(figsize=figsize, layout="constrained")


def _axes(ax, figsize=(6.4, 4.0)):
    if ax is not None:
        return ax.figure, ax
    fig = _figure(figsize)
    return fig, fig.add_subplot()


def _one(run):
    return run if isinstance(run, Run) else load_run(run)


def _title(run, what):
    status = run.status if run.status == "completed" else f"{run.status}!"
    return f"{run.meta.get('experiment')} {run.run_id}: {what} ({status})"


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _param_series(params):
    """``(name, rows)`` per scalar parameter, or per ``name:norm`` when there are none."""
    if not len(params):
        return []
    names = [str(n) for n in params["param"].unique()]
    picked = [n for n in names if "[" not in n and ":" not in n] or \
        [n for n in names if n.endswith(":norm")]
    return [(name, params[params["param"] == name]) for name in picked]


def _scalar_names(runs):
    names = {}
    for run in runs:
        for name, _ in _param_series(run.params):
            names.setdefault(name)
    return list(names)


def _log_if_wide(ax, *series, axis="y"):
    """Log scale when the positive finite values span more than DECADES_FOR_LOG decades."""
    values = [float(v) for s in series for v in s if _finite(v)]
    if not values or min(values) <= 0:
        return
    if math.log10(max(values) / min(values)) > DECADES_FOR_LOG:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def _finite(value):
    return _is_number(value) and math.isfinite(value)


def _finite_or_zero(value):
    return float(value) if _finite(value) else 0.0


def _is_number(value):
    import numbers
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
