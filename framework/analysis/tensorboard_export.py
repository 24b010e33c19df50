"""``mindexp tensorboard``: TensorBoard event files from existing run directories.

Written with TensorBoard's own writer and protos (the ``tensorboard``
extra; no TensorFlow, no torch), the same writer :class:`TensorBoardLogger`
uses. Scalars: ``loss``, ``lr``, ``grad_norm``, ``eval_<metric>``,
``params/<name>``, ``system/<column>`` (system.csv; another node's file as
``system/rankN/<column>``); images: ``figures/<name>`` at the step of each
epoch the experiment's ``figures()`` drew; hparams: the config fields that
differ across the exported runs (one run: those that differ from the
experiment's defaults) plus any asked for, with ``final/loss``,
``final/min_loss`` and ``final/eval_<metric>`` as its metrics.
"""
import math
import numbers
import os
import shlex
import shutil
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..callbacks import schema
from .. import layout
from ..callbacks._tensorboard import EventWriter, check_available
from ..errors import MindexpError
from ..rundir.run import Run
from ..rundir.store import timestamp
from .payload import eval_metrics
from .reports import differing_config


Defaults = Callable[[Run], "Mapping[str, Any] | None"]


def export(runs: list[Run], out: str | None = None, hparams: Iterable[str] | None = None,
           defaults_of: Defaults | None = None) -> Iterator[tuple[Run, str]]:
    """Write each run's events; yields ``(run, folder)``.

    The folder is ``<run>/tensorboard/<run_id>`` (TensorBoard names a run by
    its folder below the logdir: ``tensorboard --logdir <run>/tensorboard``
    shows the run id) or, with ``out``, ``<out>/<experiment>/<run_id>``. An
    earlier export (``<run>/tensorboard``, or the folder under ``out``) is
    replaced whole (written beside it first, then swapped in). ``hparams``: config
    fields the hparams table shows besides the chosen ones
    (:func:`hparam_fields`, with ``defaults_of(run)`` the experiment's defaults).
    """
    try:
        check_available()
    except ImportError as exc:
        raise MindexpError(str(exc)) from None
    runs = list(runs)
    fields = hparam_fields(runs, hparams or (), defaults_of)
    metrics = sorted({f"final/{name}" for run in runs for name in _final_metrics(run)})
    for run in runs:
        inner = "" if out else run.run_id
        root = os.path.join(out, str(run.meta.get("experiment") or "runs"), run.run_id) if out \
            else os.path.join(run.dir, layout.TENSORBOARD_DIR)
        _write_swapped(run, os.path.abspath(root), inner, fields, metrics)
        yield run, os.path.join(root, inner) if inner else root


def hparam_fields(runs: list[Run], named: Iterable[str] = (),
                  defaults_of: Defaults | None = None) -> list[str]:
    """The config fields of the hparams table: ``named`` first (MindexpError for a
    name no run has), then those whose values differ across ``runs``; for one
    run, those that differ from ``defaults_of(run)`` (all when it is None or
    gives None: a script's own config). TensorBoard shows the first columns of
    a long table only: the ~45 common fields would hide lr and optimizer."""
    named = list(dict.fromkeys(named))
    known = {name for run in runs for name in run.config}
    unknown = [n for n in named if n not in known]
    if unknown:
        raise MindexpError(f"--hparams names no config field {unknown[0]!r}; the runs' fields: "
                           f"{', '.join(sorted(known))}. Received: --hparams {','.join(named)}")
    if len(runs) > 1:
        chosen = differing_config(runs)
    elif runs:
        defaults = defaults_of(runs[0]) if defaults_of else None
        chosen = [n for n, v in runs[0].config.items()
                  if defaults is None or n not in defaults or not _same(defaults[n], v)]
    else:
        chosen = []
    return named + [n for n in chosen if n not in named]


def _same(default, value):
    norm = (lambda v: list(v) if isinstance(v, (list, tuple)) else v)
    return norm(default) == norm(value)


def view_command(folders: list[tuple[Run, str]], out: str | None) -> str | None:
    """The command that opens the export in TensorBoard, each run named by its
    run id. TensorBoard names a run by its folder below a logdir (a logdir_spec
    name is put in front, and a folder of events itself is ``.``): ``--logdir
    OUT`` (``<experiment>/<run_id>``); one run's ``--logdir <run>/tensorboard``;
    several runs' ``--logdir_spec <run>/tensorboard,...`` (unnamed; named by
    experiment where run ids repeat). None when a path holds a comma."""
    if out:
        return f"tensorboard --logdir {shlex.quote(out)}"
    parents = [os.path.abspath(os.path.dirname(folder)) for _, folder in folders]
    if len(parents) == 1:
        return f"tensorboard --logdir {shlex.quote(parents[0])}"
    ids = [run.run_id for run, _ in folders]
    named = len(set(ids)) < len(ids)
    if any("," in p for p in parents):  # --logdir_spec separates its folders with commas
        return None
    spec = ",".join(f"{run.meta.get('experiment')}:{path}" if named else path
                    for (run, _), path in zip(folders, parents))
    return f"tensorboard --logdir_spec {shlex.quote(spec)}"


def _write_swapped(run, folder, inner, fields, metrics):
    """The events in ``folder/inner``, ``folder`` replacing an earlier one whole."""
    tmp = f"{folder}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(os.path.join(tmp, inner))
        write_run(run, os.path.join(tmp, inner), fields, metrics)
        shutil.rmtree(folder, ignore_errors=True)
        schema.atomic_replace(tmp, folder)
    except OSError as exc:
        raise MindexpError(f"cannot write TensorBoard events to {folder}: {exc.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_run(run: Run, logdir: str, fields: Iterable[str] | None = None,
              metrics: Iterable[str] | None = None) -> None:
    """All scalars, figures and the hparams of one run into ``logdir``: the
    config ``fields`` (None: all) and the hparams ``metrics`` tags (None: the
    run's own final values)."""
    writer = EventWriter(logdir, flush_secs=3600)
    clock = _Clock(run)
    try:
        finals = _final_metrics(run)
        config = run.config if fields is None else {f: run.config.get(f) for f in fields}
        writer.hparams(_hparams(config),
                       list(metrics) if metrics is not None else [f"final/{n}" for n in finals])
        for column in (schema.Col.LOSS, schema.Col.LR):
            _write_column(writer, run.loss, column, column, clock)
        _write_column(writer, run.grad_norm, schema.Col.GRAD_NORM, schema.Col.GRAD_NORM, clock)
        for column in eval_metrics([run]):
            _write_column(writer, run.eval, column, f"eval_{column}", clock)
        _write_params(writer, run.params, clock)
        _write_system(writer, run, clock)
        _write_figures(writer, run, clock)
        last = int(run.loss[schema.Col.STEP].iloc[-1]) if len(run.loss) else 0
        for name, value in finals.items():
            writer.scalar(f"final/{name}", value, last, clock(last))
        writer.session_end(run.status == "completed", last)
    finally:
        writer.close()


def _write_system(writer, run, clock):
    """system.csv's columns as ``system/<column>`` at its steps (time: its own
    ``time_s``); another node's file as ``system/rankN/<column>``."""
    skip = {schema.Col.STEP, schema.Col.TIME_S}
    for rank, table in run.system_by_rank.items():
        if not len(table) or schema.Col.STEP not in table.columns:
            continue
        prefix = "system" if rank == 0 else f"system/rank{rank}"
        times = table[schema.Col.TIME_S].tolist() if schema.Col.TIME_S in table.columns \
            else [None] * len(table)
        for column in [c for c in table.columns if c not in skip]:
            for step, value, t in zip(table[schema.Col.STEP].tolist(), table[column].tolist(),
                                      times):
                wall = clock.start + t if isinstance(t, numbers.Real) and math.isfinite(t) \
                    else clock(int(step))
                writer.scalar(f"{prefix}/{column}", value, int(step), wall)


def _write_figures(writer, run, clock):
    """figures/<name>/epoch-<k>.png as images ``figures/<name>`` at epoch k's step."""
    from .payload import images
    steps = _epoch_steps(run)
    for entry in images([run], src=lambda _run, relative: relative):
        for frame in entry["frames"]:
            step = steps.get(frame["epoch"])
            if step is None:
                continue
            try:
                with schema.open_file(os.path.join(run.dir, *frame["src"].split("/"))) as f:
                    png = f.read()
            except OSError:  # removed meanwhile, or not a regular file
                continue
            writer.image(f"{layout.FIGURES_DIR}/{entry['name']}", png, step, clock(step))


def _epoch_steps(run):
    """``{epoch: step}``: eval.csv's step of each evaluation (figures are drawn
    after one), else the last step loss.csv logged in that epoch."""
    steps = {}
    for table in (run.loss, run.eval):  # eval.csv's step wins
        if len(table) and schema.Col.EPOCH in table.columns:
            for epoch, step in zip(table[schema.Col.EPOCH].tolist(), table[schema.Col.STEP].tolist()):
                steps[int(epoch)] = int(step)
    return steps


def _write_column(writer, table, column, tag, clock):
    if column not in table.columns or not len(table):
        return
    for step, value in zip(table[schema.Col.STEP].tolist(), table[column].tolist()):
        if isinstance(value, numbers.Real):
            writer.scalar(tag, value, int(step), clock(int(step)))


def _write_params(writer, params, clock):
    if not len(params):
        return
    columns = (schema.Col.STEP, schema.Col.PARAM, schema.Col.VALUE)
    for step, name, value in zip(*(params[c].tolist() for c in columns)):
        writer.scalar(f"params/{name}", value, int(step), clock(int(step)))


def _final_metrics(run):
    """The run's final loss, its min and each eval metric's last value (the summary
    compare() shows: run.json's when final, else from the logs)."""
    from ..rundir.summary import log_summary, stored_summary
    summary = stored_summary(run.meta) or log_summary(run)
    loss = summary[schema.LOSS.name]
    finals = {schema.Col.LOSS: loss["final"], "min_loss": loss["min"],
              **{k: v for k, v in summary[schema.EVAL.name].items() if not k.startswith("best_")}}
    return {name: value for name, value in finals.items() if value is not None}


def _hparams(config):
    """Config values TensorBoard can show: numbers, booleans, text (lists as ``a,b``)."""
    return {name: ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
            for name, value in config.items() if not isinstance(value, dict)}


class _Clock:
    """Wall time of a step: the run's start plus loss.csv's ``time_s`` (TensorBoard's
    relative time axis then shows the real training time)."""

    def __init__(self, run):
        self.start = timestamp(run.meta.get("started_at")) or 0.0
        loss = run.loss
        self.times = {}
        if schema.Col.TIME_S in loss.columns:
            self.times = {int(s): float(t)
                          for s, t in zip(loss[schema.Col.STEP], loss[schema.Col.TIME_S])
                          if isinstance(t, numbers.Real) and math.isfinite(t)}

    def __call__(self, step):
        return self.start + self.times.get(step, 0.0)
