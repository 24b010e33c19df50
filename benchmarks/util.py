"""Small helpers of the benchmark: a quiet-machine gate, medians, subprocess timing."""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_busy(interval=0.5):
    """Fraction of all cores busy over ``interval`` seconds (from /proc/stat), or None."""
    def read():
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
        return idle, sum(fields)
    try:
        i0, t0 = read()
        time.sleep(interval)
        i1, t1 = read()
    except OSError:
        return None
    total = t1 - t0
    return None if total <= 0 else 1.0 - (i1 - i0) / total


class QuietGate:
    """Wait (bounded) until other processes leave the cores alone.

    This machine is shared: a test suite running next to a measurement
    slows it down 2-4x. Before each measurement the gate waits until the
    cores are less than ``threshold`` busy (we are idle at that moment), at
    most ``max_wait`` seconds; measurements that had to start on a busy
    machine are counted and reported.
    """

    def __init__(self, threshold=0.25, max_wait=5.0, enabled=True):
        self.threshold, self.max_wait, self.enabled = threshold, max_wait, enabled
        self.checks = self.busy_starts = 0
        self.waited = 0.0

    def wait(self):
        if not self.enabled:
            return True
        self.checks += 1
        start = time.monotonic()
        while True:
            busy = cpu_busy(0.5)
            if busy is None or busy < self.threshold:
                self.waited += time.monotonic() - start
                return True
            if time.monotonic() - start > self.max_wait:
                self.waited += time.monotonic() - start
                self.busy_starts += 1
                return False
            time.sleep(1.0)

    def summary(self):
        if not self.enabled:
            return "quiet gate off"
        return (f"quiet gate: {self.checks} checks, waited {self.waited:.0f} s, "
                f"{self.busy_starts} started on a busy machine")


class LoadMeter:
    """CPU used by everything else while our children ran: total busy time
    of the machine (/proc/stat) minus our children's (RUSAGE_CHILDREN),
    in cores (1.0 = one core kept busy by neighbours)."""

    def __enter__(self):
        import resource
        self._busy0, self._t0 = _busy_seconds(), time.monotonic()
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._own0 = r.ru_utime + r.ru_stime
        return self

    def __exit__(self, *exc):
        import resource
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = r.ru_utime + r.ru_stime - self._own0
        busy1, wall = _busy_seconds(), time.monotonic() - self._t0
        self.neighbours = None if busy1 is None or self._busy0 is None or wall <= 0 \
            else max(0.0, (busy1 - self._busy0 - own) / wall)
        return False


def _busy_seconds():
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def median(values):
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else float("nan")


def env_for_children(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("GLOG_v", "3")
    env.update(extra)
    return env


def timed_run(cmd, cwd=ROOT, timeout=900, env=None):
    """Run ``cmd``; return (seconds, CompletedProcess)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env or env_for_children(), capture_output=True,
                          text=True, timeout=timeout)
    return time.perf_counter() - t0, proc


def python():
    return sys.executable
