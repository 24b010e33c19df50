"""``mindexp tensorboard``: TensorBoard event files from existing run directories.

Written with TensorBoard's own writer and protos (the ``tensorboard``
extra; no TensorFlow, no torch), the same writer :class:`TensorBoardLogger`
uses. Scalars: ``loss``, ``lr``, ``grad_norm``, ``eval_<metric>``,
``params/<name>``; hparams: the config, with ``final/loss``,
``final/min_loss`` and ``final/eval_<metric>`` as its metrics.
"""
import datetime as _dt
import math
import numbers
import os
import shutil

from ..callbacks import schema
from ..callbacks._tensorboard import EventWriter, check_available
from ..errors import MindexpError



def export(runs, out=None):
    """Write each run's events; yields ``(run, folder)``.

    The folder is ``<run>/tensorboard`` or, with ``out``,
    ``<out>/<experiment>/<run_id>``. An earlier export there is replaced
    whole (written beside it first, then swapped in).
    """
    try:
        check_available()
    except ImportError as exc:
        raise MindexpError(str(exc)) from None
    for run in runs:
        folder = os.path.join(out, str(run.meta.get("experiment") or "runs"), run.run_id) \
            if out else os.path.join(run.dir, schema.TENSORBOARD_DIR)
        _write_swapped(run, os.path.abspath(folder))
        yield run, folder


def _write_swapped(run, folder):
    tmp = f"{folder}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(tmp)
        write_run(run, tmp)
        shutil.rmtree(folder, ignore_errors=True)
        schema.atomic_replace(tmp, folder)
    except OSError as exc:
        raise MindexpError(f"cannot write TensorBoard events to {folder}: {exc.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_run(run, logdir):
    """All scalars and the hparams of one run into ``logdir``."""
    writer = EventWriter(logdir, flush_secs=3600)
    clock = _Clock(run)
    try:
        metrics = _final_metrics(run)
        writer.hparams(_hparams(run.config), [f"final/{name}" for name in metrics])
        for column in (schema.Col.LOSS, schema.Col.LR):
            _write_column(writer, run.loss, column, column, clock)
        _write_column(writer, run.grad_norm, schema.Col.GRAD_NORM, schema.Col.GRAD_NORM, clock)
        for column in run.eval.columns:
            if column not in (schema.Col.EPOCH, schema.Col.STEP):
                _write_column(writer, run.eval, column, f"eval_{column}", clock)
        _write_params(writer, run.params, clock)
        last = int(run.loss[schema.Col.STEP].iloc[-1]) if len(run.loss) else 0
        for name, value in metrics.items():
            writer.scalar(f"final/{name}", value, last, clock(last))
        writer.session_end(run.status == "completed", last)
    finally:
        writer.close()


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
    out = {}
    losses = run.loss[schema.Col.LOSS].tolist() if len(run.loss) else []
    finite = [v for v in losses if isinstance(v, numbers.Real) and math.isfinite(v)]
    if losses and isinstance(losses[-1], numbers.Real):
        out["loss"] = float(losses[-1])
    if finite:
        out["min_loss"] = min(finite)
    for column in run.eval.columns:
        if column not in (schema.Col.EPOCH, schema.Col.STEP):
            values = run.eval[column].dropna()
            if len(values):
                out[f"eval_{column}"] = float(values.iloc[-1])
    return out


def _hparams(config):
    """Config values TensorBoard can show: numbers, booleans, text (lists as ``a,b``)."""
    out = {}
    for name, value in config.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        elif isinstance(value, dict):
            continue
        out[name] = value
    return out


class _Clock:
    """Wall time of a step: the run's start plus loss.csv's ``time_s`` (TensorBoard's
    relative time axis then shows the real training time)."""

    def __init__(self, run):
        self.start = _start_time(run.meta.get("started_at"))
        loss = run.loss
        self.times = {}
        if schema.Col.TIME_S in loss.columns:
            self.times = {int(s): float(t)
                          for s, t in zip(loss[schema.Col.STEP], loss[schema.Col.TIME_S])
                          if isinstance(t, numbers.Real) and math.isfinite(t)}

    def __call__(self, step):
        return self.start + self.times.get(step, 0.0)


def _start_time(text):
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return 0.0
