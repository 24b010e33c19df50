"""What the report page draws, as JSON-ready data: runs, the table and the
figures (curves downsampled for drawing only; the table keeps every value).

Shared by the offline report (embedded in the HTML file) and the live
dashboard (served as JSON and polled).
"""
import math
import os
import re

from ..callbacks import schema
from .. import layout
from .colors import run_colors
from .cells import format_value
from .reports import (compare, config_labels, differing_config, display_table, loss_components)

MAX_POINTS = 1000      # drawn points per curve at most (min and max of 500 buckets)
MAX_ELEMENTS = 16      # elements of a small tensor drawn one by one
MAX_PARAM_FIGURES = 12
MAX_DETAIL_RUNS = 10   # figures/ images: pages of this many runs at most
# system.csv panels: a run's own page (the dashboard's run page, a report of one run);
# across runs, compare's peak_rss_mb and mean_cpu_percent say it in one number each
MAX_SYSTEM_RUNS = 1
MAX_EMBEDDED_EPOCHS = 20  # images of a figure embedded in an offline report (the last kept)
# system.csv columns drawn (against time_s), with their titles
SYSTEM_FIGURES = (("rss_mb", "system: resident memory (MB)"),
                  ("process_cpu_percent", "system: process CPU (%)"),
                  ("device_memory_mb", "system: device memory (MB)"))
_EPOCH_PNG = re.compile(r"^epoch-(\d+)\.png$")
HEALTHY = ("completed", "running", "interrupted", "pruned")
UNDRAWN = "#c8c8c8"   # the swatch of a run in the table whose curves are not drawn
_RUN_ID = re.compile(r"^\d{8}-\d{6}-(.+)$")


def build(runs, title, skipped=(), link=None, progress=False, image_src=None, drawn=None):
    """The page's data for ``runs`` (loaded :class:`mindexp.Run` objects).

    ``skipped``: ``(run_dir, message, status)`` of runs that could not be read
    (status ``unreadable`` when run.json does not validate, else ``skipped``).
    ``link(run)``: the href of a run's folder (default: a file URI).
    ``progress``: add step/total, steps/s and ETA per run (the dashboard).
    ``image_src(run, relative_path)``: the URL of a run's image (the
    dashboard's); default: the PNG embedded as a data URI (the offline report).
    ``drawn``: the indices of the runs whose curves are drawn (default: all);
    every run is in the table.
    """
    link = link or (lambda run: _file_uri(run.dir))
    labels = config_labels(runs) if runs else []
    differing = differing_config(runs) if runs else []
    drawn = list(range(len(runs))) if drawn is None else list(drawn)
    palette = dict(zip(drawn, run_colors(len(drawn))))   # a colour per drawn run only
    colors = [palette.get(i, UNDRAWN) for i in range(len(runs))]
    entries = [_run_entry(run, label, color, link, progress) | {"fields": _fields(run, differing)}
               for run, label, color in zip(runs, labels, colors)]
    return {"title": title, "runs": entries,
            "skipped": [{"dir": s[0], "error": s[1], "status": s[2]} for s in skipped],
            "differing": differing,
            "table": _table(runs) if runs else {"columns": [], "rows": []},
            **_drawn_figures(runs, image_src, drawn)}


def _drawn_figures(runs, image_src, drawn):
    """Figures and images of the runs ``drawn`` (indices), their traces naming
    each run by its index in ``runs``."""
    drawn = list(drawn)
    picked = [runs[i] for i in drawn]
    out = {"figures": figures(picked),
           "images": images(picked, image_src) if len(picked) <= MAX_DETAIL_RUNS else []}
    for item in out["figures"] + out["images"]:
        if "run" in item:
            item["run"] = drawn[item["run"]]
        for member in item.get("traces", []) + item.get("points", []):
            member["run"] = drawn[member["run"]]
    return out


def best_runs(runs, most):
    """Indices of at most ``most`` runs to draw: the lowest final losses of the
    healthy runs first, then the others, in the runs' order."""
    def final(run):
        value = run.meta.get("final_loss")
        return value if _finite(value) else math.inf
    order = sorted(range(len(runs)), key=lambda i: (runs[i].status not in HEALTHY,
                                                   final(runs[i])))
    return sorted(order[:most])


# -- runs ------------------------------------------------------------------------

def short_id(run_id):
    """``20261201-101500-adam-1a2b3c`` -> ``adam-1a2b3c`` (the date lives in the full id)."""
    match = _RUN_ID.match(str(run_id))
    return match.group(1) if match else str(run_id)


def _run_entry(run, label, color, link, progress):
    entry = {"id": run.run_id, "short": short_id(run.run_id), "label": label,
             "experiment": run.meta.get("experiment"), "status": run.status or "unknown",
             "error": first_line(run.meta.get("error")), "stop_reason": run.meta.get("stop_reason"),
             "dir": run.dir, "href": link(run), "color": color, "diverged_at": _diverged_at(run)}
    if progress:
        entry["progress"] = run_progress(run)
    return entry


def _fields(run, names):
    """The run's values of the config fields ``names`` (those differing between the
    runs), as typed on a command line; null where empty (``""``, None) or absent:
    the page builds its legend labels from the ones that differ between the shown runs."""
    return {n: None if run.config.get(n) in ("", None) else format_value(run.config[n])
            for n in names}


def first_line(text: object) -> str | None:
    """The first line of an error message (None for none)."""
    return str(text).strip().splitlines()[0] if text else None


def _diverged_at(run):
    """The step where a diverged run's loss stopped being finite (or its last step)."""
    if run.status != "diverged" or not len(run.loss):
        return None
    import numpy as np
    values = run.loss[schema.Col.LOSS].to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    return int(run.loss[schema.Col.STEP].iloc[bad[0] if len(bad) else -1])


def run_progress(run):
    """``{step, total, steps_per_s, eta_s, stop, planned}``: a finished run's
    (completed, pruned) from run.json, any other's from loss.csv (total: run.json
    or config). A run that ended on purpose before its planned steps
    (early stop, pruning) is complete: ``total`` is its last step, ``stop`` says
    why (``"early stop"``, ``"pruned"``) and ``planned`` keeps the plan."""
    meta, stop = run.meta, _stopped_on_purpose(run)
    if run.status in ("completed", "pruned") and meta.get("steps") is not None:
        step, total = int(meta["steps"]), meta.get("total_steps")
        return {"step": step, "total": step if stop or not total else total,
                "steps_per_s": meta.get("steps_per_s"), "eta_s": None, "stop": stop,
                "planned": total}
    loss = run.loss
    step = int(loss[schema.Col.STEP].iloc[-1]) if len(loss) else 0
    total = meta.get("total_steps") or _planned_steps(run)
    rate = _recent_rate(loss) if run.status == "running" else meta.get("steps_per_s")
    eta = (total - step) / rate if run.status == "running" and rate and total else None
    progress = {"step": step, "total": total, "steps_per_s": rate,
                "eta_s": max(0.0, eta) if eta is not None else None, "stop": None, "planned": total}
    if stop and step and (not total or step < total):
        progress.update(total=step, stop=stop)
    return progress


def _stopped_on_purpose(run):
    """``"early stop"`` or ``"pruned"`` when the run ended so; None otherwise."""
    if run.status == "pruned":
        return "pruned"
    if run.status == "completed" and run.meta.get("stop_reason"):
        return "early stop"
    return None


def _planned_steps(run):
    """epochs x steps per epoch, once epoch 1 is logged whole (its last step is always logged)."""
    loss, epochs = run.loss, run.config.get("epochs")
    if not isinstance(epochs, int) or not len(loss) or int(loss[schema.Col.EPOCH].iloc[0]) != 1 \
            or int(loss[schema.Col.EPOCH].iloc[-1]) < 2:  # a resumed run's log may start later
        return None
    return int(loss.loc[loss[schema.Col.EPOCH] == 1, schema.Col.STEP].max()) * epochs


def _recent_rate(loss, window=50):
    if schema.Col.TIME_S not in loss.columns or len(loss) < 2:
        return None
    tail = loss.tail(window)
    dt = float(tail[schema.Col.TIME_S].iloc[-1]) - float(tail[schema.Col.TIME_S].iloc[0])
    steps = int(tail[schema.Col.STEP].iloc[-1]) - int(tail[schema.Col.STEP].iloc[0])
    return steps / dt if dt > 0 and steps > 0 else None


# -- the table -------------------------------------------------------------------

def _table(runs):
    """Columns (run, status, differing config, outcomes, error, folder) and one row per run."""
    full = compare(runs, sort="final_loss")
    shown = display_table(full)
    config_columns = set(full.attrs.get("config_columns", []))
    order = {run.run_id: i for i, run in enumerate(runs)}
    columns = [{"key": c, "kind": "config" if c in config_columns else _kind(shown[c]),
                "extra": c not in config_columns and _is_extra(c, shown.columns)}
               for c in shown.columns if c not in ("run_id", "experiment")]
    columns.sort(key=lambda c: c["extra"])  # stable: the columns worth reading first
    rows = []
    for record in shown.to_dict("records"):
        rows.append({"run": order[record["run_id"]],
                     "cells": [_jsonable(record[c["key"]]) for c in columns]})
    return {"columns": columns, "rows": rows}


EXTRA_COLUMNS = ("best_step", "epochs_done", "epochs", "train_time_s", "steps_per_s")


def _is_extra(column, columns):
    """Columns shown only on request: timings, bests, and parameter values that
    have an ``_error`` column (the distance to the target says more)."""
    return (column in EXTRA_COLUMNS or column.startswith("best_")
            or f"{column}_error" in columns)


def _kind(series):
    import pandas as pd
    return "num" if pd.api.types.is_numeric_dtype(series) else "text"


def _jsonable(value):
    if value is None:
        return None
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return value
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return _round(value) if math.isfinite(value) else (None if math.isnan(value)
                                                          else str(value))
    return value


# -- figures -----------------------------------------------------------------------

def figures(runs):
    """Figure specs: loss, eval metrics, lr, grad norm, parameters, final loss."""
    out = [_loss_figure(runs)]
    out += _component_figures(runs)
    out += _eval_figures(runs)
    out += [f for f in (_column_figure(runs, "loss", schema.Col.LR, "learning rate"),
                        _column_figure(runs, "grad_norm", schema.Col.GRAD_NORM, "gradient norm (L2)"))
            if f is not None]
    out += _param_figures(runs)
    if len(runs) <= MAX_SYSTEM_RUNS:
        out += _system_figures(runs)
    out.append(_final_loss_figure(runs))
    return [f for f in out if f is not None]


def _loss_figure(runs):
    traces = []
    for index, run in enumerate(runs):
        traces.append(_trace(index, run.loss, schema.Col.LOSS, smooth=True, log="loss"))
        if schema.Col.LOSS in run.eval.columns:
            traces.append(_trace(index, run.eval, schema.Col.LOSS, kind="eval", name="eval_loss",
                                 log="eval"))
    return _figure("loss", "loss (train; eval dotted)", "loss", traces)


def _component_figures(runs):
    """One figure per loss component (loss.csv's extra columns), in logged order."""
    names = dict.fromkeys(n for run in runs for n in loss_components(run))
    return [f for f in (_column_figure(runs, "loss", n, f"loss component {n}") for n in names)
            if f is not None]


def eval_metrics(runs: list) -> list[str]:
    """eval.csv's metric columns of ``runs`` (its loss too), in order of appearance."""
    return list(dict.fromkeys(c for run in runs for c in run.eval.columns
                              if c not in schema.EVAL.columns))


def _eval_figures(runs):
    metrics = [m for m in eval_metrics(runs) if m != schema.Col.LOSS]   # loss: dotted in "loss"
    return [_figure(f"eval_{m}", f"eval_{m}", f"eval_{m}",
                    [_trace(i, run.eval, m, kind="eval", name=f"eval_{m}", log="eval")
                     for i, run in enumerate(runs) if m in run.eval.columns])
            for m in metrics]


def _column_figure(runs, table, column, title):
    traces = [_trace(i, getattr(run, table), column, smooth=column == schema.Col.GRAD_NORM,
                     log=table)
              for i, run in enumerate(runs) if column in getattr(run, table).columns]
    traces = [t for t in traces if t["x"]]
    return _figure(column, title, column, traces) if traces else None


def _param_figures(runs):
    """One figure per tensor: its value (one element), its elements (small) or
    its L2 norm (large); ``targets()`` of the same name as dashed lines."""
    groups = {}
    for index, run in enumerate(runs):
        if not len(run.params):
            continue
        for name, rows in run.params.groupby(schema.Col.PARAM, sort=False):
            base, shown = param_base(str(name))
            if shown:
                groups.setdefault(base, []).append((index, run, str(name), rows))
    out = []
    for base, members in list(groups.items())[:MAX_PARAM_FIGURES]:
        traces, targets = [], {}
        for index, run, name, rows in members:
            traces.append(_trace(index, rows, schema.Col.VALUE, name=name,
                                 legend=not any(t["run"] == index for t in traces),
                                 log="params", param=name))
            target = run.targets.get(name)
            if is_number(target):
                targets[float(target)] = f"{name} target {target:g}"
        out.append(_figure(f"param:{base}", f"{base} ({param_kind(members[0][2])})", base, traces,
                           targets=[{"y": y, "name": n} for y, n in sorted(targets.items())]))
    return out


def _system_figures(runs):
    """system.csv's memory and CPU against the run's time (a small panel per column);
    data parallel, a trace per node's or rank's file (``rank N``)."""
    out = []
    for column, title in SYSTEM_FIGURES:
        traces = [_trace(i, table, column, x="time_s",
                         name=f"rank {rank}" if len(run.system_by_rank) > 1 else None)
                  for i, run in enumerate(runs) for rank, table in run.system_by_rank.items()
                  if column in table.columns]
        fig = _figure(f"system:{column}", title, column.replace("_", " "), traces)
        if fig is not None:
            out.append(dict(fig, xtitle="time (s)"))
    return out


def images(runs, src=None):
    """The experiments' pictures (figures/<name>/epoch-<k>.png): per run and name,
    its frames ``{"epoch": k, "src": url}`` in epoch order, for the epoch slider."""
    out = []
    for index, run in enumerate(runs):
        folder = os.path.join(run.dir, layout.FIGURES_DIR)
        names = sorted(n for n in _listing(folder) if os.path.isdir(os.path.join(folder, n)))
        for name in names:
            epochs = sorted(int(m.group(1)) for m in map(_EPOCH_PNG.match,
                                                         _listing(os.path.join(folder, name))) if m)
            if src is None:
                epochs = _spread(epochs, MAX_EMBEDDED_EPOCHS)
            frames = [{"epoch": k, "src": _image_src(run, name, k, src)} for k in epochs]
            frames = [f for f in frames if f["src"]]
            if frames:
                out.append({"run": index, "name": name, "frames": frames})
    return out


def _listing(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _spread(items, most):
    """At most ``most`` of ``items``, evenly spread, the last always kept."""
    if len(items) <= most:
        return items
    picked = {items[round(i * (len(items) - 1) / (most - 1))] for i in range(most)}
    return sorted(picked)


def _image_src(run, name, epoch, src):
    relative = f"{layout.FIGURES_DIR}/{name}/epoch-{epoch}.png"
    if src is not None:
        return src(run, relative)
    import base64
    try:
        with schema.open_file(os.path.join(run.dir, *relative.split("/"))) as f:
            return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")
    except OSError:  # removed meanwhile
        return None


def param_base(name: str) -> tuple[str, bool]:
    """``(tensor name, drawn?)`` of a params.csv name: elements up to MAX_ELEMENTS
    and norms are drawn (the report, the dashboard and params.png alike)."""
    if ":" in name:
        base, stat = name.rsplit(":", 1)
        return base, stat == "norm"
    if name.endswith("]") and "[" in name:
        base, index = name[:-1].rsplit("[", 1)
        return base, index.isdigit() and int(index) < MAX_ELEMENTS
    return name, True


def param_kind(name: str) -> str:
    """What a tensor's drawn series show, from the name of its first."""
    return "L2 norm" if name.endswith(":norm") else "elements" if "[" in name else "value"


def _final_loss_figure(runs):
    points = [{"run": i, "value": _round(float(v))} for i, run in enumerate(runs)
              if len(run.loss) and _finite(v := run.loss[schema.Col.LOSS].iloc[-1])]
    return {"id": "final_loss", "kind": "final", "title": "final loss per run", "ytitle":
            "final loss", "points": points, "log": True} if points else None


def _figure(fig_id, title, ytitle, traces, targets=()):
    traces = [t for t in traces if t["x"]]
    if not traces:
        return None
    # log or linear y: the page decides from the healthy runs (a diverged one must not)
    return {"id": fig_id, "kind": "lines", "title": title, "ytitle": ytitle,
            "traces": traces, "targets": list(targets), "log": None}


def _trace(run_index, table, column, kind="train", name=None, smooth=False, legend=True,
           x=schema.Col.STEP, log=None, param=None):
    """A curve; ``src`` (``log``, its ``x`` and ``col`` columns, the ``param`` of
    params.csv rows) lets the live page append rows that arrive later."""
    if x not in table or column not in table:  # a log made but not yet written
        xs, y = [], []
    else:
        xs, y = downsample(table[x].to_numpy(), table[column].to_numpy(dtype=float))
    trace = {"run": run_index, "name": name or column, "kind": kind, "smooth": smooth,
             "legend": legend, "x": xs, "y": y}
    if log is not None:
        trace["src"] = {"log": log, "x": x, "col": column} | ({"param": param} if param else {})
    return trace


def downsample(steps, values, max_points=MAX_POINTS):
    """Finite points of a curve, at most ``max_points``: the min and the max of
    each of ``max_points/2`` buckets (spikes stay visible), in step order;
    runs of equal values keep their ends only. Returns two lists."""
    import numpy as np
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if len(values) > max_points:
        buckets = np.array_split(np.arange(len(values)), max_points // 2)
        picked = sorted({int(b[np.argmin(values[b])]) for b in buckets} |
                        {int(b[np.argmax(values[b])]) for b in buckets} | {0, len(values) - 1})
        steps, values = steps[picked], values[picked]
    if len(values) > 2:
        inner = (values[1:-1] == values[:-2]) & (values[1:-1] == values[2:])
        keep = np.concatenate(([True], ~inner, [True]))
        steps, values = steps[keep], values[keep]
    whole = np.issubdtype(steps.dtype, np.integer)  # steps; time_s stays a float
    return ([int(s) if whole else _round(float(s)) for s in steps],
            [_round(v) for v in values.tolist()])


# -- helpers -----------------------------------------------------------------------

def _round(value, digits=6):
    return float(f"{value:.{digits}g}")


def _finite(value):
    return is_number(value) and math.isfinite(value)


def is_number(value: object) -> bool:
    """A real number, not a bool."""
    import numbers
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _file_uri(path):
    from pathlib import Path
    return Path(os.path.abspath(path)).as_uri()
