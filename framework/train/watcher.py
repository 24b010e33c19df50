"""A watcher process for a run whose process cannot hear signals.

Python installs signal handlers only in the main thread: a ``track()`` block
in another thread runs without mindexp's SIGINT/SIGTERM handlers, and a
SIGTERM ends the process at once, before the run's final record. For such a
run a small process of its own waits for the end of a pipe only the run's
process holds (it ends when that process ends, however it ends); once it can
take the run's lock, a run.json still ``running`` is recorded ``interrupted``
(resumable from its last checkpoint) with the steps and loss loss.csv reached.
A run that ended normally closed the pipe after its final record: the watcher
finds it final and leaves it.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import Callable

from .. import layout

# the run's process ended: how long the watcher tries for its lock (a resume
# or gc may take it first; the kernel frees a dead holder's at once)
LOCK_WAIT_S = 30.0
ENDED_UNHEARD = ("the process ended before the run's final record (a signal: track() ran "
                 "outside the main thread, where no signal handler can be installed)")
logger = logging.getLogger(__name__)
_started: list[subprocess.Popen[bytes]] = []  # kept: reaped by later Popen calls, never waited


def start_watcher(run_dir: str) -> Callable[[], None]:
    """Start the watcher of ``run_dir``; returns what to call once its run.json
    is final (closes the pipe: the watcher then finds the run ended and exits)."""
    read, write = os.pipe()
    try:
        _started.append(subprocess.Popen(
            [sys.executable, "-m", "mindexp.train.watcher", run_dir], stdin=read,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    except OSError as exc:  # no process to spare: the run itself goes on
        os.close(write)
        logger.warning("no watcher for %s (%s): if a signal ends this process, %s "
                       "stays running", run_dir, exc, layout.RUN_JSON)
        return lambda: None
    finally:
        os.close(read)
    return lambda: os.close(write)


def end_unheard_run(run_dir: str) -> bool:
    """Record ``run_dir`` interrupted when its run.json still says ``running``
    (its process is gone); True when it did."""
    from ..callbacks import schema
    from ..errors import MindexpError
    from ..rundir.record import RunRecord
    from ..rundir.run_lock import acquire
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            lock = acquire(run_dir, "record the end of")
            break
        except MindexpError:  # held: the run's own process finishing, or a resume
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
    try:
        record = RunRecord.read(run_dir)
        if record.status != "running":
            return False
        rows = schema.read_rows(schema.path_of(run_dir, schema.LOSS.name))
        last = rows[-1] if rows else {}
        loss = last.get(schema.Col.LOSS)
        record.ended("interrupted", error=ENDED_UNHEARD,
                     steps=int(last.get(schema.Col.STEP) or record.meta.get("steps") or 0),
                     epochs=int(last.get(schema.Col.EPOCH) or record.meta.get("epochs") or 0),
                     final_loss=float(loss) if loss else record.meta.get("final_loss"))
        record.write()
        return True
    finally:
        lock.release()


def main(argv: list[str]) -> int:
    """``python -m mindexp.train.watcher RUN_DIR``: wait for the pipe on stdin to end."""
    sys.stdin.buffer.read()  # returns when every writer is gone
    try:
        end_unheard_run(argv[0])
    except Exception:  # noqa: BLE001  (nothing to tell: no terminal, the run's process is gone)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
