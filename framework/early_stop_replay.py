"""Put an EarlyStopping back where it was at a resume point, from the run's logs.

A resumed run must stop early exactly where the uninterrupted run would
have: the best value and the epochs waited are replayed from loss.csv (the
last loss of each epoch, always logged) or eval.csv (one row per evaluation).
"""
import csv
import logging
import math
import os

logger = logging.getLogger(__name__)


def replay_early_stop(callback, run_dir, step, steps_per_epoch):
    """Feed ``callback`` the values of the epochs completed by ``step``.

    Returns False (and warns; the counter starts afresh) when the logs lack
    the monitored value.
    """
    done = step // steps_per_epoch
    values = _epoch_values(run_dir, callback.monitor, done, steps_per_epoch)
    if values is None:
        logger.warning("early_stop: the logs of %s lack %s; the patience counter starts afresh",
                       run_dir, callback.monitor)
        return False
    for value in values:
        callback.update(value)
    return True


def _epoch_values(run_dir, monitor, done, steps_per_epoch):
    if monitor == "loss":
        rows = _rows(os.path.join(run_dir, "loss.csv"))
        by_step = {int(r["step"]): _number(r.get("loss")) for r in rows}
        return [by_step.get(e * steps_per_epoch) for e in range(1, done + 1)]
    rows = _rows(os.path.join(run_dir, "eval.csv"))
    column = monitor if rows and monitor in rows[0] else monitor[len("eval_"):]
    if rows and column not in rows[0]:
        return None
    return [_number(r[column]) for r in rows if int(r["epoch"]) <= done]


def _rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
