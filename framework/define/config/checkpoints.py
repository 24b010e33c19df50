"""The checkpoints a run keeps: the periodic ones and the best ranked by a
watched value (``train/monitors.py``'s checkpoint feature)."""
from dataclasses import dataclass
from typing import Any, Optional

from ...errors import ConfigError
from ._fields import MONITOR_ACCEPTED, is_monitor, owns


@owns(rules={
    "checkpoint_every": (lambda v: v >= 0, "an integer >= 0 (0: only at the end)"),
    "checkpoint_interval_s": (lambda v: v >= 0, "a number >= 0"),
    "keep_checkpoints": (lambda v: v >= 1, "an integer >= 1"),
})
@dataclass
class CheckpointFields:
    """The periodic checkpoints."""

    checkpoint_every: int = 1
    """save a checkpoint every N epochs (0: only at the end)"""
    checkpoint_interval_s: float = 10.0
    """skip a periodic checkpoint younger than this"""
    keep_checkpoints: int = 3
    """newest regular checkpoints kept"""


def _check_keep_best(config: Any) -> None:
    if getattr(config, "keep_best", None) is not None and not getattr(config, "checkpoint_monitor", ""):
        raise ConfigError("config field 'keep_best' needs checkpoint_monitor (the value the best "
                          "checkpoints are ranked by, e.g. eval_accuracy or loss). "
                          f"Received: keep_best={config.keep_best!r}, checkpoint_monitor=''",
                          field="keep_best")


@owns(rules={
    "checkpoint_monitor": (lambda v: is_monitor(v, empty_ok=True), MONITOR_ACCEPTED),
    "keep_best": (lambda v: v is None or v >= 1, "an integer >= 1, or none"),
}, checks=[_check_keep_best])
@dataclass
class BestCheckpointFields:
    """The best checkpoints, ranked by a watched value."""

    checkpoint_monitor: str = ""
    """value that ranks the best checkpoints (loss or eval_<metric>); empty = none"""
    keep_best: Optional[int] = None
    """how many best checkpoints to keep (1 when checkpoint_monitor is set)"""
