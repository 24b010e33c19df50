"""Data-parallel training with msrun (``train/distributed.py``)."""
from dataclasses import dataclass

from ._fields import owns


@owns(rules={"workers": (lambda v: v >= 1, "an integer >= 1")})
@dataclass
class DistributedFields:
    """How many workers, and which of them write logs."""

    workers: int = 1
    """data-parallel workers launched with msrun"""
    log_all_ranks: bool = False
    """every rank writes its own logs, not rank 0 alone"""
