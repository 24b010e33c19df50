"""Data parallel through MindSpore's own launcher, msrun.

``mindexp run NAME --workers N`` creates the run directory, then starts
``msrun`` with N local workers on loopback; each worker runs
``mindexp _worker RUN_DIR``. A process that msrun started itself (the
multi-node case, or a user's own msrun command) is detected from msrun's
environment and joins the cluster instead of launching another one.
"""
from typing import Any
import contextlib
import glob
import logging
import os
import shutil
import socket
import subprocess
import sys

from .. import layout
from .._mindspore import (MSRUN_LOGS, MSRUN_WORKER_LOGS, all_reduce_sum,  # noqa: F401
                          env_rank, log_error_message, msrun_scheduler, under_msrun)
from .._mindspore import MSRUN_SCHEDULER_ADDRESS

logger = logging.getLogger(__name__)

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = "msrun"  # MindSpore's launcher executable (not the run folder's MSRUN_DIR)
# a file of cli/ (the top floor): msrun runs the command line in each worker
ENTRY_SCRIPT = os.path.join(PACKAGE_DIR, "cli", "_msrun_entry.py")
REPO_ROOT = os.path.dirname(PACKAGE_DIR)


def init_data_parallel() -> tuple[int, int]:
    """Join msrun's cluster in DATA_PARALLEL with mean gradients; returns (rank, size)."""
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    return get_rank(), get_group_size()


RUN_ID_BYTES = 256  # a run id is at most 87 ASCII characters (io.create_run_dir)


def share_run_id(run_id: str | None) -> str:
    """Rank 0's run id on every rank, with one all-reduce (sum) over the world:
    rank 0 passes its id (None when it has no run folder), the others None and
    contribute zeros. Returns '' when rank 0 had none. Every rank must call it
    once, at the same point, or the others wait."""
    import numpy as np
    sent = np.zeros(RUN_ID_BYTES, dtype=np.float32)  # bytes < 256 are exact in float32
    if run_id:
        encoded = run_id.encode("ascii")[:RUN_ID_BYTES]
        sent[:len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    total = all_reduce_sum(sent)
    return bytes(total.astype(np.uint8)).rstrip(b"\0").decode("ascii")


def create_shared_run_dir(held: contextlib.ExitStack, out: str | os.PathLike[str],
                          experiment: str, label: str | None = None) -> str:
    """Rank 0 of the user's own msrun: create the locked run folder (released
    when ``held`` closes) and send its id to every rank."""
    from ..rundir.run_lock import create_locked
    try:
        run_dir, lock = create_locked(out, experiment, label)
        held.callback(lock.release)
    except Exception:
        share_run_id(None)  # the other ranks wait for an id: none
        raise
    share_run_id(os.path.basename(run_dir))
    return run_dir


def joined_run_dir(out: str | os.PathLike[str], experiment: str) -> str:
    """A rank other than 0: the path of rank 0's run folder, from the id rank 0
    sent (whether this node sees it: :func:`visible`)."""
    run_id = share_run_id(None)
    if not run_id:
        from ..errors import TrainingError
        raise TrainingError("rank 0 created no run folder (rank 0's log says why)")
    return os.path.join(os.fspath(out), experiment, run_id)


def unseen_rank_dir(out: str | os.PathLike[str], experiment: str, rank: int) -> str:
    """Where a rank that cannot see rank 0's folder "writes": a path never
    created, so nothing of it reaches a disk."""
    return os.path.join(os.fspath(out), experiment, f".rank{rank}")


def visible(run_dir: str) -> bool:
    """True when ``run_dir`` exists from here; a listing of its parent first
    refreshes a network file system's cached lookup of a folder just made."""
    if os.path.isdir(run_dir):
        return True
    with contextlib.suppress(OSError):
        os.listdir(os.path.dirname(run_dir))
    return os.path.isdir(run_dir)


def barrier() -> None:
    """Wait until every rank of msrun's world got here (one all-reduce of one
    number); every rank must call it once, at the same point."""
    import numpy as np
    all_reduce_sum(np.zeros(1, dtype=np.float32))


def serve_as_scheduler() -> None:
    """Be msrun's scheduler: serve the cluster until its workers are done.

    MindSpore's ``init()`` in the scheduler role blocks while the cluster
    lives; nothing is trained or written here. msrun starts a scheduler on
    every node whose own address is ``--master_addr``: two launchers on one
    host (loopback) both do, and one of them cannot bind the port. That one
    leaves quietly when the other serves the cluster (its workers join that
    one); any other failure is raised.
    """
    from mindspore.communication import init
    try:
        init()
    except RuntimeError:
        if not _scheduler_answers():
            raise
        logger.info("msrun's scheduler on this host is already serving the cluster; leaving")


def _scheduler_answers() -> bool:
    """True when something accepts connections at msrun's scheduler address."""
    host, port = os.environ.get(MSRUN_SCHEDULER_ADDRESS[0]), os.environ.get(MSRUN_SCHEDULER_ADDRESS[1])
    if not host or not port or not port.isdigit():
        return False
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port free on loopback right now (msrun's scheduler binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(run_dir: str, workers: int, resume: bool = False, timeout_s: float = 300) -> int:
    """Run msrun with ``workers`` local workers on ``run_dir``; returns its exit code.

    msrun's own output and the workers' logs go to ``run_dir/msrun/``.
    """
    log_dir = os.path.join(run_dir, layout.MSRUN_DIR)
    os.makedirs(log_dir, exist_ok=True)
    cmd = [_msrun(), f"--worker_num={workers}", f"--local_worker_num={workers}",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--join=True",
           f"--log_dir={log_dir}", f"--cluster_time_out={int(timeout_s)}",
           ENTRY_SCRIPT, "_worker", run_dir] + (["--resume"] if resume else [])
    with open(os.path.join(log_dir, MSRUN_LOGS[0]), "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_worker_env(),
                                start_new_session=True)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            _stop(proc)
            raise


def _stop(proc: Any) -> None:
    import signal
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # workers stop cleanly at the next step
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def _msrun() -> str:
    found = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
    return found if os.path.exists(found) else (shutil.which(LAUNCHER) or LAUNCHER)


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # msrun starts workers with the `python` on PATH: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("GLOG_v", "3")
    return env


def worker_failure(run_dir: str, lines: int = 12) -> tuple[str, str]:
    """``(log name, text)``: the error lines msrun and the workers logged, the
    log of a worker with a traceback first, else msrun's and the scheduler's
    ``[ERROR]`` lines (a worker killed outright leaves no trace of its own)."""
    log_dir = os.path.join(run_dir, layout.MSRUN_DIR)
    for path in sorted(glob.glob(os.path.join(log_dir, MSRUN_WORKER_LOGS))):
        tail = _tail(path, lines)
        if "Traceback" in tail or "Error" in tail:
            return os.path.basename(path), tail
    errors = []
    for name in MSRUN_LOGS:
        errors += _error_lines(os.path.join(log_dir, name))
    return "msrun.log and scheduler.log", "\n".join(errors[-lines:])


def _error_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = [ln.strip() for ln in f if ln.startswith("[ERROR]")]
    except OSError:
        return []
    return [log_error_message(ln) for ln in found]


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            kept = [ln.rstrip() for ln in f if ln.strip() and "[INFO]" not in ln]
    except OSError:
        return ""
    return "\n".join(kept[-lines:])
