"""Is a run's process alive? Checked by the pid and host recorded in run.json."""
import os
import platform

ALIVE, GONE, ELSEWHERE = "alive", "gone", "elsewhere"


def process_state(meta):
    """For a run marked running: ``alive``, ``gone`` (its process left this host
    without ending the run) or ``elsewhere`` (started on another host, which
    cannot be checked from here). None for a run not marked running."""
    if meta.get("status") != "running":
        return None
    pid, host = meta.get("pid"), meta.get("host")
    if host is not None and host != platform.node():
        return ELSEWHERE
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return GONE  # made before pids were recorded, or a hand-made run.json
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return GONE
    except PermissionError:  # alive, owned by another user
        return ALIVE
    return ALIVE


def may_be_running(meta):
    """True unless the run surely has no live process (never delete those)."""
    return process_state(meta) in (ALIVE, ELSEWHERE)
