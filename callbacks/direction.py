"""Whether a watched value is minimised or maximised: the one rule every reader uses.

EarlyStopping and Checkpoint use it, and so does mindexp around them (early
stopping and checkpoint ranking of a run, ``best_*`` in compare, ``show``,
``gc --by``, tune's objective, the best checkpoint of ``evaluate``, ``predict``,
``export`` and ``mlflow``):

- an explicit ``mode`` (``"min"`` or ``"max"``) always wins;
- otherwise the words of the name say it, the last word that does
  (``loss``, ``eval_loss``, ``eval_mae``, ``final_loss``: min; ``accuracy``,
  ``eval_f1``, ``best_eval_auc``: max; ``top5_error``: the error of top5, min);
- a name whose words do not say it needs ``mode``: refused, never guessed
  (a wrong guess silently keeps the worst model).

Only the standard library: callbacks used in any MindSpore project import it.
"""
from __future__ import annotations

import math
import re

__all__ = ["MODES", "LOWER_IS_BETTER", "HIGHER_IS_BETTER", "UnknownDirectionError",
           "direction_of_name", "metric_direction", "rank_key"]

MODES = ("min", "max")
# Words that say a value is better low, or better high.
LOWER_IS_BETTER = frozenset({"loss", "error", "err", "mae", "mse", "rmse", "mape", "nll", "l1",
                             "l2", "perplexity", "distance", "hausdorff"})
HIGHER_IS_BETTER = frozenset({"accuracy", "acc", "top1", "top5", "auc", "f1", "precision",
                              "recall", "r2", "iou", "dice", "bleu", "rouge"})
_EVAL_PREFIX = "eval_"


class UnknownDirectionError(ValueError):
    """A watched value's name does not say whether lower or higher is better,
    and no ``mode`` was given."""


def direction_of_name(name: object) -> str | None:
    """``"min"``, ``"max"`` or None (the name does not say) from the words of
    ``name``, an ``eval_`` prefix stripped; the last word that says wins
    (``top5_error``: min, ``dense.weight_error``: min)."""
    text = str(name).lower()
    text = text[len(_EVAL_PREFIX):] if text.startswith(_EVAL_PREFIX) else text
    for word in reversed(re.split(r"[^a-z0-9]+", text)):
        if word in LOWER_IS_BETTER:
            return "min"
        if word in HIGHER_IS_BETTER:
            return "max"
    return None


def metric_direction(name: str, mode: str | None = None) -> str:
    """``"min"`` or ``"max"`` for the value ``name``: ``mode`` when given
    (``"min"``/``"max"``), else from the name (``None`` or ``"auto"``).

    Raises UnknownDirectionError (one line) when the name does not say and
    ``mode`` is not given, ValueError for a ``mode`` that is none of these.
    """
    if mode in MODES:
        return str(mode)
    if mode not in (None, "auto"):
        raise ValueError(f"`mode` must be one of min, max, auto or None. Received: mode={mode!r}")
    found = direction_of_name(name)
    if found is None:
        raise UnknownDirectionError(
            f"{name!r} needs `mode`: its name does not say whether lower or higher is better; "
            f"accepted: mode='min' or 'max', or a name with a word of {', '.join(sorted(LOWER_IS_BETTER))} "
            f"(minimised) or {', '.join(sorted(HIGHER_IS_BETTER))} (maximised). "
            f"Received: monitor={name!r}, mode={mode!r}")
    return found


def rank_key(score: float, step: int, mode: str) -> tuple[float, int]:
    """Sort key putting the best first: the better score, then (equal scores)
    the earlier step: a later value must be strictly better to outrank one
    already kept, as EarlyStopping's improvement is. A NaN score goes last."""
    if math.isnan(score):
        return (math.inf, step)
    return (score if mode == "min" else -score, step)
