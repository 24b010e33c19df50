"""How MindSpore runs (the context the session sets) and the system metrics
sampled beside the run (``train/system.py``)."""
from dataclasses import dataclass

from ._fields import owns

MODES = ("graph", "pynative")
DEVICES = ("CPU", "GPU", "Ascend")
AMP_LEVELS = ("O0", "O1", "O2", "O3")
MEMORY_LEVELS = ("O0", "O1")


@owns(rules={"loss_scale": (lambda v: v > 0, "a number > 0")},
      choices={"mode": MODES, "device": DEVICES, "amp_level": AMP_LEVELS,
               "memory_optimize_level": MEMORY_LEVELS})
@dataclass
class ContextFields:
    """MindSpore's mode, device and precision."""

    mode: str = "graph"
    """MindSpore graph (compiled) or PyNative (eager) mode"""
    device: str = "CPU"
    """MindSpore device target"""
    amp_level: str = "O0"
    """mixed precision level of mindspore.amp (O0: float32)"""
    memory_optimize_level: str = "O0"
    """MindSpore memory optimisation: O0 speed first, O1 memory first (SOMAS reuse, less peak)"""
    loss_scale: float = 1.0
    """fixed loss scale; gradients are unscaled before the update"""


@owns()
@dataclass
class ExecutionFields:
    """How MindSpore feeds and compiles the steps."""

    sink: bool = False
    """MindSpore dataset sink mode (on CPU it trains per step anyway)"""
    graph_kernel: bool = False
    """MindSpore graph-kernel fusion (GPU/Ascend, graph mode)"""


@owns(rules={"system_every_s": (lambda v: v >= 0, "a number >= 0 (0: off)")})
@dataclass
class SystemMetricsFields:
    """system.csv's sampling."""

    system_every_s: float = 5.0
    """seconds between samples of system.csv (CPU, memory, I/O; needs psutil); 0 = off"""
