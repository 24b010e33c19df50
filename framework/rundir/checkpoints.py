"""Which checkpoint of a run a user means: the one chooser.

:func:`choose_checkpoint` resolves ``"best"``, ``"last"``, a step number or a
file path to a checkpoint that loads and holds finite weights. Resume,
evaluate, predict, export, ``Run.checkpoint``, ``Run.network`` and ``mindexp
mlflow`` all ask it, so they agree on what "best" is: the best-ranked by the
run's ``checkpoint_monitor`` and its direction (:mod:`mindexp.callbacks.direction`;
equal scores: the earlier checkpoint), never merely the newest best file.
"""
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

from ..callbacks import schema
from ..errors import MindexpError, RunDirError

logger = logging.getLogger(__name__)

CHOICES = ("best", "last")


@dataclass(frozen=True)
class ChosenCheckpoint:
    """A checkpoint file the chooser picked, with its parameters loaded."""

    path: str
    step: int | None
    epoch: int | None
    params: dict[str, Any]


class NoCheckpointError(RunDirError):
    """A run has no usable checkpoint of the kind asked for; ``found`` files
    were candidates, ``unusable`` of them corrupt or not finite."""

    def __init__(self, message: str, found: int, unusable: int) -> None:
        super().__init__(message)
        self.found, self.unusable = found, unusable


def parse_checkpoint(text: Any) -> str | int:
    """``"best"``, ``"last"``, a step number (int) or a ``.ckpt`` path from a
    command-line value."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    value = str(text).strip()
    if value.lower() in CHOICES:
        return value.lower()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    if value.endswith(".ckpt"):
        return value
    raise MindexpError("--checkpoint must be best, last, a step number >= 1 or a .ckpt file. "
                       f"Received: {text!r}")


def choose_checkpoint(run: Any, which: str | int = "last") -> ChosenCheckpoint:
    """The checkpoint ``which`` of ``run`` (a :class:`~mindexp.rundir.run.Run`), loaded.

    ``"last"``: the newest checkpoint of either kind; ``"best"``: the best by
    the run's ``checkpoint_monitor`` and direction; a step: the checkpoint of
    that global step; a path (absolute, or relative to the run directory): that
    file. Of ``last`` and ``best`` a file that does not load or holds non-finite
    weights (or a non-finite loss in checkpoints.csv) is skipped with a warning
    for the next one. Raises NoCheckpointError (one line, naming what exists).
    """
    which = parse_checkpoint(which)
    if isinstance(which, str) and which not in CHOICES:
        return _load_named(run.dir, which)
    from ..callbacks import list_checkpoints
    found = list_checkpoints(run.dir, "all")
    candidates = _candidates(run, which, found)
    chosen, unusable = _first_usable(run.dir, candidates)
    if chosen is not None:
        return chosen
    what = f"step {which}" if isinstance(which, int) else which
    what = f"usable {what} checkpoint ({len(unusable)} corrupt or not finite)" if unusable \
        else f"{what} checkpoint"
    raise NoCheckpointError(f"{run.dir} has no {what}; accepted: {_available(found)}. "
                            f"Received: checkpoint={which!r}", len(candidates), len(unusable))


def find_checkpoint(run: Any, which: str | int = "last") -> str:
    """The path :func:`choose_checkpoint` picks."""
    return choose_checkpoint(run, which).path


def _candidates(run, which, found):
    """Paths to try, in order: newest first (last), best first (best), or of one step."""
    newest_first = [p for _, _, p in sorted(found, key=lambda f: (f[0], not _is_best(f[2])),
                                            reverse=True)]
    if which == "last":
        return newest_first
    if which == "best":
        return _best_first(run, [p for p in newest_first if _is_best(p)])
    # a best and a regular file of one step hold the same weights: either will do
    return [p for p in newest_first if _step_of(p) == which]


def _first_usable(run_dir, paths):
    """``(ChosenCheckpoint or None, [(path, why)] skipped)``; the skipped are logged
    once a usable one is found."""
    unusable, nonfinite = [], nonfinite_checkpoints(run_dir)
    for path in paths:
        params, why = _load(path)
        if params is not None and (os.path.normpath(path) in nonfinite
                                   or not weights_finite(params)):
            params, why = None, "its loss or weights are not finite"
        if params is None:
            unusable.append((path, why))
            continue
        for bad, reason in unusable:
            kind = "non-finite" if reason.endswith("not finite") else "corrupt"
            logger.warning("skipping %s checkpoint %s (%s)", kind, bad, reason)
        return ChosenCheckpoint(path, *checkpoint_position(path), params), unusable
    return None, unusable


def _load_named(run_dir, path):
    """A checkpoint named by its path: it must load (no fallback to another)."""
    full = path if os.path.isabs(path) or os.path.exists(path) else os.path.join(run_dir, path)
    params, why = _load(full) if os.path.isfile(full) else (None, "no such file")
    if params is None:
        raise NoCheckpointError(f"cannot read checkpoint {full}: {why}. Received: "
                                f"checkpoint={path!r}", 1, 1)
    return ChosenCheckpoint(os.path.abspath(full), *checkpoint_position(full), params)


def _load(path):
    """``(params, None)``, or ``(None, why)`` for a file MindSpore cannot load."""
    import mindspore as ms
    try:
        return ms.load_checkpoint(path), None
    except Exception as exc:  # MindSpore raises several types for a bad file
        text = str(exc).strip()
        return None, text.splitlines()[0] if text else type(exc).__name__


def nonfinite_checkpoints(run_dir: str) -> set[str]:
    """Paths of the checkpoints whose loss in checkpoints.csv is not finite."""
    import csv
    path = os.path.join(run_dir, schema.CHECKPOINTS.filename)
    bad: set[str] = set()
    if not os.path.exists(path):
        return bad
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                finite = math.isfinite(float(row.get(schema.Col.LOSS) or 0.0))
            except ValueError:
                finite = False
            if not finite and row.get(schema.Col.FILE):
                bad.add(os.path.normpath(os.path.join(run_dir, row[schema.Col.FILE])))
    return bad


def weights_finite(params: dict[str, Any]) -> bool:
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


def checkpoint_position(path):
    """``(step, epoch)`` of a checkpoint file named by the Checkpoint callback."""
    import re
    match = re.search(r"epoch(\d+)-step(\d+)\.ckpt$", os.path.basename(path))
    return (int(match[2]), int(match[1])) if match else (None, None)


def _is_best(path):
    return os.path.basename(path).startswith("best-")


def _best_first(run, paths):
    """Best checkpoints, best first by their score in checkpoints.csv and the run's
    direction (equal scores: the earlier first, as the Checkpoint callback ranks them).

    One file needs no ranking; files without scores (runs older than the score
    column) come newest first; several files of a run whose direction is unknown
    are refused (never guessed)."""
    from ..callbacks.checkpoint import best_scores
    from ..callbacks.direction import rank_key
    if len(paths) <= 1:
        return paths
    scores = best_scores(schema.path_of(run.dir, schema.CHECKPOINTS.name))
    if any(os.path.basename(p) not in scores for p in paths):
        return paths
    direction = checkpoint_direction(run)
    return sorted(paths, key=lambda p: rank_key(scores[os.path.basename(p)], _step_of(p),
                                                direction))


def checkpoint_direction(run: Any) -> str:
    """``"min"``/``"max"``: how ``run``'s best checkpoints rank, its checkpoint_monitor
    read as the run read it (early_stop_mode applies when it is also early_stop's
    value; an experiment's metrics() may rename an eval metric)."""
    from ..define.config import monitor_mode
    from ..define.entry import is_script_entry
    cfg = run.config
    monitor = cfg.get("checkpoint_monitor") or ""
    mode = cfg.get("early_stop_mode", "auto") if monitor == cfg.get("early_stop") else "auto"
    script = is_script_entry(run.meta.get("entry"))  # a script's run: no metrics() to rename
    metrics = run.experiment().metrics() if monitor.startswith("eval_") and not script else None
    direction = monitor_mode(monitor, mode, metrics) if monitor else None
    if direction is None:
        raise RunDirError(f"cannot rank the best checkpoints of {run.dir}: its config names "
                          "no checkpoint_monitor whose direction is known; accepted: "
                          "--checkpoint last, a step or a path. "
                          f"Received: checkpoint_monitor={monitor!r}")
    return direction


def _step_of(path):
    return checkpoint_position(path)[0] or 0


def _available(found):
    if not found:
        return "none (the run has no checkpoints)"
    kinds = ["last"] + (["best"] if any(_is_best(p) for _, _, p in found) else [])
    steps = sorted({step for step, _, _ in found})
    return f"{', '.join(kinds)} or a step of {', '.join(map(str, steps))}"
