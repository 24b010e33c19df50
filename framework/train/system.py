"""system.csv for a run: the SystemMonitor the config asks for, when psutil is there."""
from typing import TYPE_CHECKING, Any
import logging
import os

from ..callbacks import schema
from .features import Build, feature

if TYPE_CHECKING:
    from .resume_point import Resume
    from ..callbacks.system_monitor import SystemMonitor

logger = logging.getLogger(__name__)
_warned: list[bool] = []


def system_monitor(cfg: Any, run_dir: str,
                   resume: "Resume | None" = None) -> "SystemMonitor | None":
    """A :class:`~mindexp.callbacks.SystemMonitor` sampling every
    ``cfg.system_every_s`` seconds, or None when that is 0 or psutil (the
    optional extra ``system``) is missing (one warning per process).

    The first worker of each node writes its node's file where the run
    directory is on that node's disk (a run started with ``--workers``, or
    the user's own msrun with an output root all nodes share); a rank on a
    node that cannot see rank 0's run directory writes none."""
    if not cfg.system_every_s:
        return None
    try:
        import psutil  # noqa: F401  (the optional extra)
    except ImportError:
        if not _warned:
            _warned.append(True)
            logger.warning("%s is not written: it needs psutil (pip install 'mindexp[system]'); "
                           "system_every_s=0 silences this", schema.SYSTEM.filename)
        return None
    from ..callbacks import SystemMonitor
    return SystemMonitor(run_dir, every_s=cfg.system_every_s, all_ranks=cfg.log_all_ranks,
                         start_step=resume.step if resume else 0,
                         time_offset=resume.time_offset if resume else 0.0,
                         per_node=os.path.isdir(run_dir))


@feature("system", order=70)
def _system(run: Build, before: object) -> object:
    return system_monitor(run.cfg, run.run_dir, run.resume)
