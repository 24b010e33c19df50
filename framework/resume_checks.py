"""Checks that keep ``mindexp resume`` from building on a bad record.

- A CSV damaged in the middle (not just a cut last row, which the writer
  repairs) is refused naming the file and line: resuming would cut it back
  or append to a record nobody can read.
- A diverged run resumed with the very config that made it diverge does it
  again: refused unless some config value changes.
- Checkpoints saved after a divergence hold non-finite weights: skipped.
"""
import csv
import math
import os

from .errors import MindexpError

# Columns of the step logs that hold text; every other column is a number.
_TEXT_COLUMNS = {"param", "file", "kind"}
_INT_COLUMNS = {"step", "epoch"}


class DamagedLogError(MindexpError):
    """A run's CSV log cannot be read back (names the file and line)."""


def check_logs_readable(run_dir, names):
    """DamagedLogError naming the first damaged line of any of ``names``."""
    for name in names:
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            _check_csv(path, name)


def _check_csv(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # a cut last row (no newline): the writer repairs it on open
    if not lines:
        return
    header = _fields(lines[0], name, 1)
    for number, line in enumerate(lines[1:], start=2):
        why = _row_problem(header, _fields(line, name, number))
        if why:
            raise DamagedLogError(f"{name} line {number} is damaged ({why}): "
                                  f"{line[:80].decode('utf-8', 'replace')!r}; repair or delete "
                                  f"that line and every line after it, then resume again")


def _fields(line, name, number):
    try:
        return next(csv.reader([line.decode("utf-8").rstrip("\r")]), [])
    except (UnicodeDecodeError, csv.Error):
        raise DamagedLogError(f"{name} line {number} is damaged (not UTF-8 CSV text): "
                              f"{line[:80]!r}; repair or delete it, then resume again") from None


def _row_problem(header, row):
    if len(row) != len(header):
        return f"{len(row)} fields, the header has {len(header)}"
    for column, value in zip(header, row):
        if column in _TEXT_COLUMNS or value == "":
            continue
        try:
            number = float(value)
        except ValueError:
            return f"{column}={value!r} is not a number"
        if column in _INT_COLUMNS and (not math.isfinite(number) or number != int(number)):
            return f"{column}={value!r} is not a whole number"
    return None


def check_not_diverged_again(run_dir, meta, old_config, new_config):
    """A diverged run resumes only when the user changed some config value
    (``old_config``/``new_config``: the resolved config dicts)."""
    if meta.get("status") != "diverged" or old_config != new_config:
        return
    lr = f" (now lr={old_config['lr']})" if "lr" in old_config else ""
    why = (meta.get("error") or "diverged").removeprefix("diverged: ")
    raise MindexpError(f"cannot resume {run_dir}: it diverged ({why}) and the same config "
                       f"diverges again; change what caused it, e.g. --set lr=<smaller>{lr}")


def nonfinite_checkpoints(run_dir):
    """Paths of the checkpoints whose loss in checkpoints.csv is not finite."""
    path = os.path.join(run_dir, "checkpoints.csv")
    bad = set()
    if not os.path.exists(path):
        return bad
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                finite = math.isfinite(float(row.get("loss") or 0.0))
            except ValueError:
                finite = False
            if not finite and row.get("file"):
                bad.add(os.path.normpath(os.path.join(run_dir, row["file"])))
    return bad


def weights_finite(params):
    """True when every float parameter of a loaded checkpoint is finite."""
    import numpy as np
    for value in params.values():
        try:
            array = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16): not checked
            continue
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return False
    return True
