"""Which checkpoint of a run a user means: ``"last"``, ``"best"`` or a step."""
import os

from ..callbacks import schema
from ..errors import MindexpError, RunDirError

CHOICES = ("best", "last")


def parse_checkpoint(text):
    """``"best"``, ``"last"`` or a step number (int) from a command-line value."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in CHOICES:
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise MindexpError(f"--checkpoint must be best, last or a step number >= 1. Received: {text!r}")


def find_checkpoint(run, which="last"):
    """The file of checkpoint ``which`` of ``run`` (a :class:`Run`).

    ``"last"``: the newest regular checkpoint; ``"best"``: the best one by the
    run's ``checkpoint_monitor`` (scores from checkpoints.csv); an int: the
    checkpoint of that global step. RunDirError names what exists otherwise.
    """
    from ..callbacks import list_checkpoints
    which = parse_checkpoint(which)
    found = list_checkpoints(run.dir, "all")
    if which == "last":
        paths = [p for _, _, p in found if not _is_best(p)]
    elif which == "best":
        paths = _best_first(run, [p for _, _, p in found if _is_best(p)])[::-1]
    else:
        # a best and a regular file of one step hold the same weights: either will do
        paths = sorted((p for step, _, p in found if step == which), key=_is_best, reverse=True)
    if not paths:
        what = f"step {which}" if isinstance(which, int) else which
        raise RunDirError(f"{run.dir} has no {what} checkpoint; accepted: {_available(found)}. "
                          f"Received: checkpoint={which!r}")
    return paths[-1]


def checkpoint_position(path):
    """``(step, epoch)`` of a checkpoint file named by the Checkpoint callback."""
    import re
    match = re.search(r"epoch(\d+)-step(\d+)\.ckpt$", os.path.basename(path))
    return (int(match[2]), int(match[1])) if match else (None, None)


def _is_best(path):
    return os.path.basename(path).startswith("best-")


def _best_first(run, paths):
    """Best checkpoints ordered best first by their score and the monitor's direction
    (newest first when the direction or the scores are unknown)."""
    from ..define.config import monitor_mode
    newest_first = sorted(paths, key=_step_of, reverse=True)
    cfg = run.config
    monitor = cfg.get("checkpoint_monitor") or ""
    mode = cfg.get("early_stop_mode", "auto") if monitor == cfg.get("early_stop") else "auto"
    metrics = run.experiment().metrics() if monitor.startswith("eval_") else None
    direction = monitor_mode(monitor, mode, metrics) if monitor else None
    from ..callbacks.checkpoint import best_scores
    scores = best_scores(schema.path_of(run.dir, schema.CHECKPOINTS.name))
    if direction is None or any(os.path.basename(p) not in scores for p in paths):
        return newest_first
    # stable sort over newest-first: among equal scores the newest wins
    return sorted(newest_first, key=lambda p: scores[os.path.basename(p)],
                  reverse=direction == "max")


def _step_of(path):
    return checkpoint_position(path)[0] or 0


def _available(found):
    if not found:
        return "none (the run has no checkpoints)"
    kinds = [k for k, has in (("last", any(not _is_best(p) for _, _, p in found)),
                              ("best", any(_is_best(p) for _, _, p in found))) if has]
    steps = sorted({step for step, _, _ in found})
    return f"{', '.join(kinds)} or a step of {', '.join(map(str, steps))}"
