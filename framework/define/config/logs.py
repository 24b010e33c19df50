"""What a run logs and records of itself: the step logs, the parameters'
statistics (``train/logs.py``) and the data's fingerprint (provenance)."""
from dataclasses import dataclass
from typing import Optional, Tuple

from ._fields import owns

PARAM_STATS = ("auto", "host", "graph")
DATA_FINGERPRINTS = ("stat", "content", "off")


@owns(rules={
    "log_every": (lambda v: v >= 1, "an integer >= 1"),
    "max_param_values": (lambda v: v >= 1, "an integer >= 1"),
    "param_log_budget": (lambda v: v is None or 0 < v <= 1, "a fraction in (0, 1], or none"),
}, choices={"param_stats": PARAM_STATS, "data_fingerprint": DATA_FINGERPRINTS})
@dataclass
class LoggingFields:
    """The logs' cadence and the parameters they track."""

    log_every: int = 1
    """log loss, parameters and gradient norm every N steps"""
    track_params: bool = True
    """write params.csv"""
    track_names: Tuple[str, ...] = ()
    """parameters to track, names or globs (empty: all)"""
    max_param_values: int = 16
    """largest parameter tracked element by element (else its stats)"""
    param_log_budget: Optional[float] = 0.05
    """fraction of a step's cost the statistics of large parameters may take, both estimated from sizes (never timed); above it they are logged every k steps (none: every step)"""
    param_stats: str = "auto"
    """where large parameters' statistics are computed: host (numpy), graph (in the train step), auto (graph off the CPU)"""
    data_fingerprint: str = "stat"
    """what run.json records of the data: stat (arrays hashed, files on disk by path, size, time), content (files hashed too), off"""
