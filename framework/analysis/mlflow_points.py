"""What a run's logs send to MLflow, read without pandas or mlflow: the one
reader of the sync (``mindexp mlflow``) and of the live sender (``--mlflow``).

Each log file (rank 0's ``loss.csv`` and any rank's ``loss.rank1.csv``) is
read from a byte offset (what was sent before ends there) up to its last
complete line; its numbers become points ``(key, value, timestamp_ms,
step)``. The timestamp is the run's start plus the row's ``time_s`` (the
start when the log has none), so a point sent live and again by a later
sync is the same point and MLflow's store keeps it once.

Keys: ``loss``, ``lr``, ``grad_norm``, ``eval_<metric>``, ``param/<name>...``
(see :data:`PARAMS_CHOICES`) and ``system/<name>`` (the machine's CPU under
MLflow's own system name ``system/cpu_utilization_percentage``); a rank
other than 0 sends its own files under ``rank<N>/<key>`` (``system/rank<N>/<name>``).
"""
from __future__ import annotations

import csv
import datetime as _dt
import math
import os
import re
from typing import Iterator, NamedTuple

from ..callbacks import schema

LOG_NAMES = ("loss", "grad_norm", "eval", "params", "system")
# --params: none; summary (a parameter's norm, mean and std at SUMMARY_POINTS of its
# logged steps: an element-wise parameter's computed from its elements); all (every
# row of params.csv at every logged step)
PARAMS_CHOICES = ("none", "summary", "all")
DEFAULT_PARAMS = "summary"
SUMMARY_STATS = ("norm", "mean", "std")
# A summary's points per parameter statistic: the first logged step, every k-th step
# (k from the run's planned or done steps) and the last one sent. A chart needs no
# more; at every step they were 84 % of a 2,800-step run's points.
SUMMARY_POINTS = 100
# system.csv column -> MLflow's own system metric name (the others keep theirs)
SYSTEM_NAMES = {schema.Col.MACHINE_CPU_PERCENT: "cpu_utilization_percentage"}
_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
_ELEMENT = re.compile(r"^(?P<name>.*)\[(?P<index>[0-9]+)\]$")


class Point(NamedTuple):
    """One metric point as MLflow stores it."""

    key: str
    value: float
    timestamp: int  # ms since the epoch
    step: int


class LogFile(NamedTuple):
    """One file of one log: ``name`` (``loss``), ``rank`` and its path."""

    name: str
    rank: int
    path: str

    @property
    def filename(self) -> str:
        """The file's name in the run folder (the local record's key)."""
        return os.path.basename(self.path)


def log_files(run_dir: str, params: str = DEFAULT_PARAMS) -> list[LogFile]:
    """The log files of ``run_dir`` whose points go to MLflow (params.csv not with
    ``params="none"``), each rank's."""
    names = [n for n in LOG_NAMES if n != schema.PARAMS.name or params != "none"]
    return [LogFile(name, rank, path) for name in names
            for rank, path in schema.rank_files(run_dir, name).items()]


def summary_every(meta: dict) -> int:
    """Every how many steps a summary sends a parameter's statistics: the run's
    planned steps (else those done) over :data:`SUMMARY_POINTS`."""
    total = meta.get("total_steps") or meta.get("steps") or 0
    total = total if isinstance(total, int) and not isinstance(total, bool) else 0
    return max(1, -(-total // SUMMARY_POINTS))


def new_points(log: LogFile, offset: int, start_ms: int, params: str = DEFAULT_PARAMS,
               final: bool = True, limit: int | None = None,
               every: int = 1) -> tuple[list[Point], int]:
    """The points of ``log``'s complete lines after byte ``offset``, and the offset
    after the last line they came from. A summary of params.csv leaves the last
    step's lines for later unless ``final`` (the rest of its elements may follow),
    and sends the steps that are the first, a multiple of ``every``
    (:func:`summary_every`) or the last read when ``final``.
    ``limit``: read at most that many bytes (the rest comes next time)."""
    header, lines = read_lines(log.path, offset, limit)
    final = final and (limit is None or not lines or bool(_read_all(log.path, lines)))
    if not lines:
        return [], offset
    rows = [fields for _end, fields in lines]
    if log.name == schema.PARAMS.name and params == "summary" and not final:
        rows, end = _whole_steps(header, lines, offset)
    else:
        end = lines[-1][0]
    if log.name == schema.PARAMS.name and params == "summary" and every > 1:
        rows = _thinned(header, rows, every, final)
    return list(_points(log, header, rows, start_ms, params)), end


def _thinned(header, rows, every, final):
    """The rows of the steps a summary sends (see :func:`new_points`)."""
    at = header.index(schema.Col.STEP) if schema.Col.STEP in header else None
    if at is None or not rows:
        return rows
    last = rows[-1][at] if final and len(rows[-1]) > at else None
    kept = []
    for fields in rows:
        step = _int(fields, at)
        if step is not None and (step == 1 or step % every == 0 or fields[at] == last):
            kept.append(fields)
    return kept


def _read_all(path, lines):
    try:
        return os.path.getsize(path) <= lines[-1][0]
    except OSError:
        return True


def read_lines(path: str, offset: int,
               limit: int | None = None) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """``(header, [(offset after the line, fields), ...])`` of the complete lines
    of the CSV ``path`` after byte ``offset`` (0: after the header); a file
    shorter than ``offset`` (cut back by a resume) is read from its start;
    at most ``limit`` bytes when given."""
    try:
        with schema.open_file(path, "rb") as f:
            head = f.readline()
            size = os.fstat(f.fileno()).st_size
            start = len(head) if offset < len(head) or offset > size else offset
            f.seek(start)
            data = f.read() if limit is None else f.read(limit)
    except OSError:  # gone meanwhile, or not a regular file: nothing to send
        return [], []
    if not head.endswith(b"\n"):
        return [], []
    header = next(csv.reader([head.decode("utf-8", "replace").strip()]))
    lines, position = [], start
    for raw in data.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            break  # a line still being written
        position += len(raw)
        text = raw.decode("utf-8", "replace").strip()
        if text:
            lines.append((position, _fields(text)))
    return header, lines


def _fields(text):
    """A CSV line's fields: a plain split when it has no quote (a log's numbers;
    csv's reader costs 5x more a line), else csv's reader."""
    return text.split(",") if '"' not in text else next(csv.reader([text]))


def _whole_steps(header, lines, offset):
    """The rows of every step but the last, and the offset where the last begins."""
    at = header.index(schema.Col.STEP)
    last = lines[-1][1][at] if len(lines[-1][1]) > at else None
    kept = [(end, f) for end, f in lines if len(f) > at and f[at] != last]
    return [f for _e, f in kept], kept[-1][0] if kept else offset


def _points(log: LogFile, header: list[str], rows: list[list[str]], start_ms: int,
            params: str) -> Iterator[Point]:
    col = schema.Col
    if col.STEP not in header:
        return
    at_step = header.index(col.STEP)
    at_time = header.index(col.TIME_S) if col.TIME_S in header else None
    prefix = f"rank{log.rank}/" if log.rank else ""
    if log.name == schema.PARAMS.name:
        yield from _param_points(header, rows, at_step, start_ms, prefix, params)
        return
    skip = {col.STEP, col.EPOCH, col.TIME_S}
    columns = [(i, _metric_key(log.name, c, prefix)) for i, c in enumerate(header) if c not in skip]
    for fields in rows:
        step = _int(fields, at_step)
        if step is None:
            continue
        stamp = start_ms + int(1000 * (_float(fields, at_time) or 0.0))
        for i, key in columns:
            value = _float(fields, i)
            if value is not None:
                yield Point(key, value, stamp, step)


def _param_points(header, rows, at_step, start_ms, prefix, params):
    at_name, at_value = header.index(schema.Col.PARAM), header.index(schema.Col.VALUE)
    elements: dict[tuple[int, str], list[float]] = {}
    for fields in rows:
        step, value = _int(fields, at_step), _float(fields, at_value)
        if step is None or value is None or len(fields) <= at_name:
            continue
        name = fields[at_name]
        if params == "all":
            yield Point(prefix + _param_key(name), value, start_ms, step)
            continue
        element = _ELEMENT.match(name)
        base, _, stat = name.partition(":")
        if element:
            elements.setdefault((step, element.group("name")), []).append(value)
        elif not stat or stat in SUMMARY_STATS:
            yield Point(prefix + _param_key(name), value, start_ms, step)
    for (step, name), values in elements.items():
        for stat, value in zip(SUMMARY_STATS, _summary(values)):
            yield Point(prefix + _param_key(f"{name}:{stat}"), value, start_ms, step)


def _summary(values):
    """L2 norm, mean and (population) standard deviation of ``values``."""
    n = len(values)
    mean = sum(values) / n
    return (math.sqrt(sum(v * v for v in values)), mean,
            math.sqrt(sum((v - mean) ** 2 for v in values) / n))


def _metric_key(log, column, prefix=""):
    if log == "eval":
        from ..rundir.summary import eval_name
        return prefix + eval_name(column)
    if log == "system":
        return "system/" + prefix + SYSTEM_NAMES.get(column, column)
    return prefix + column


def _param_key(param):
    """``w`` -> ``param/w``, ``w[3]`` -> ``param/w/3``, ``w:norm`` -> ``param/w/norm``."""
    key = "param/" + str(param).replace("[", "/").replace("]", "").replace(":", "/")
    return _BAD_KEY.sub("_", key)


def _float(fields, i):
    if i is None or i >= len(fields) or not fields[i]:
        return None
    try:
        value = float(fields[i])
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _int(fields, i):
    value = _float(fields, i)
    return None if value is None else int(value)


def start_ms(meta: dict) -> int:
    """Milliseconds since the epoch of the run's start (now when run.json has none)."""
    return ms(meta.get("started_at"))


def ms(iso) -> int:
    """Milliseconds since the epoch of an ISO time (now when absent)."""
    try:
        when = _dt.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        when = _dt.datetime.now(_dt.timezone.utc)
    return int(when.timestamp() * 1000)
