"""ParameterTracker's writer process: statistics and CSV rows off the training thread.

The training process copies each logged step's tracked parameters into a
slot of a shared-memory ring (``StepRing``) and sends the slot's number
down a pipe; this process, started with ``python _param_writer.py`` (a
file path: no package import, no re-import of the user's script), computes
the statistics, formats the rows and appends them through :class:`CsvLog`
(whole rows, one ``write`` per flush). A thread would not do: the GIL it
takes delays the training thread's return from each step.

Protocol on stdin (one line each): ``S <slot> <step> <epoch>`` a step is
in that slot; ``F`` flush, then answer ``ok`` on stdout; end of input:
flush, close and exit (also when the trainer was killed, so every step
it handed over is written whole).

Imports only numpy and the standard library (it runs beside the user's
interpreter, not inside the package).
"""
import json
import signal
import sys

import numpy as np

# Run as a script, this file's folder is first on sys.path: its siblings
# are imported by name, without the package (numpy and the stdlib only).
from _stats import statistics  # noqa: E402
from csv_log import CsvLog  # noqa: E402

def slot_values(flat, plan):
    """The values of one step's rows, in row order, from the slot's flat copy.

    ``plan``: ``(offset, size, large)`` per parameter."""
    out = []
    for offset, size, large in plan:
        part = flat[offset:offset + size]
        out.extend(statistics(part) if large else part.astype(np.float64).tolist())
    return out


class _Writer:
    def __init__(self, spec):
        from multiprocessing import shared_memory
        self.shm = shared_memory.SharedMemory(name=spec["shm"])
        _forget(self.shm)
        self.slots = spec["slots"]
        self.slot_size = spec["slot_size"]
        self.ring = np.ndarray((self.slots, self.slot_size), dtype=spec["dtype"],
                               buffer=self.shm.buf)
        self.plan = [tuple(p) for p in spec["plan"]]
        self.labels = spec["labels"]
        self.log = CsvLog(spec["path"], spec["columns"], flush_rows=spec["flush_rows"],
                          flush_seconds=spec["flush_seconds"]).check()

    def step(self, slot, step, epoch):
        values = slot_values(self.ring[slot], self.plan)
        self.log.write_rows([(step, epoch, label, value)
                             for label, value in zip(self.labels, values)])

    def close(self):
        self.log.close()
        del self.ring
        self.shm.close()


def _forget(shm):
    """The trainer owns (and unlinks) the segment: keep Python's resource
    tracker of this process from unlinking it too."""
    try:
        from multiprocessing import resource_tracker
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
    except Exception:  # another Python: nothing registered
        pass


def main():
    # The trainer decides when to stop (Ctrl-C ends its run at a step's end):
    # this process ends when its input does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = json.loads(sys.stdin.readline())
    writer = _Writer(spec)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    try:
        for line in sys.stdin:
            kind = line[:1]
            if kind == "S":
                _, slot, step, epoch = line.split()
                writer.step(int(slot), int(step), int(epoch))
                out.write(f"{slot}\n")   # the slot is free again
                out.flush()
            elif kind == "F":
                writer.log.flush()
                out.write("ok\n")
                out.flush()
    finally:
        writer.close()


if __name__ == "__main__":
    main()
