"""Stopping a run early when a watched value stops improving
(``train/monitors.py``'s early stop)."""
from dataclasses import dataclass

from ._fields import MONITOR_ACCEPTED, is_monitor, owns

MONITOR_MODES = ("auto", "min", "max")


@owns(rules={
    "early_stop": (lambda v: is_monitor(v, empty_ok=True), MONITOR_ACCEPTED),
    "patience": (lambda v: v >= 1, "an integer >= 1"),
    "min_delta": (lambda v: v >= 0, "a number >= 0"),
}, choices={"early_stop_mode": MONITOR_MODES})
@dataclass
class EarlyStopFields:
    """The watched value, its patience and direction."""

    early_stop: str = ""
    """value watched to stop early: loss or eval_<metric>; empty = never"""
    patience: int = 5
    """epochs without improvement before an early stop"""
    min_delta: float = 0.0
    """smallest change that counts as an improvement"""
    early_stop_mode: str = "auto"
    """min, max, or auto (from the watched name)"""
