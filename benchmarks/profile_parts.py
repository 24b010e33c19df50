"""Microseconds per step of each callback of a real run, and of the rest.

    python benchmarks/profile_parts.py W1b [--runs 3] [--quick] [--clock cpu] [--json FILE]

Trains the workload with ``Experiment.run()`` (the runner with every
callback it installs, logging every step) and times each callback's
per-step hooks with ``time.perf_counter_ns`` around each call: the
callbacks MindSpore dispatches, and the parts of a composite callback
(``CallbackList``) inside it. Prints, per part, the microseconds it takes
per step (the first step, the graph compile, left out), and:

- ``all callbacks``: the time inside the hooks MindSpore calls (the
  composite's own work, building the step's record, is there minus its parts);
- ``step``: the median time from one step's end to the next (training,
  data, every hook);
- ``MindSpore dispatch``: the step's hooks called through MindSpore's
  callback manager, measured as the cost of N no-op callbacks is not: see
  benchmarks/run.py's ``mindexp cb noop`` column for that floor.

``--clock cpu`` times each hook with the training thread's CPU clock
(``time.thread_time_ns``, a system call: ~0.5 us a call) instead of the
wall clock: on a busy machine a neighbour preempting the thread inside a
hook adds to its wall time, not to its CPU time, so before/after tables
taken while others work compare in CPU time. The step stays wall time.

The wall timers cost ~0.2 us a call themselves. A first run warms up (compile,
imports); the figures are medians over ``--runs`` runs.
"""
import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

STEP_HOOKS = ("on_train_step_begin", "on_train_step_end", "on_train_step_record")


class Meter:
    """Nanoseconds and calls per (part, hook), from the second step on."""

    def __init__(self, clock=time.perf_counter_ns):
        self.ns, self.steps, self.ends = {}, 0, []
        self.clock = clock

    def wrap(self, cb, label):
        """Time ``cb``'s own per-step hooks (instance attributes shadow the class's)."""
        from mindspore.train import Callback
        for hook in STEP_HOOKS:
            method = getattr(type(cb), hook, None)
            if method is None or _inherited_noop(type(cb), hook, Callback):
                continue
            setattr(cb, hook, self._timed(getattr(cb, hook), f"{label}.{hook}"))
        for part in getattr(cb, "callbacks", ()) or ():
            self.wrap(part, f"  {type(part).__name__}")

    def _timed(self, bound, key):
        ns = self.ns
        ns.setdefault(key, 0)
        clock = self.clock
        meter = self

        def timed(*args):
            if meter.steps < 1:
                return bound(*args)
            t0 = clock()
            try:
                return bound(*args)
            finally:
                ns[key] += clock() - t0
        return timed

    def step_end(self):
        self.steps += 1
        self.ends.append(time.perf_counter_ns())


def _inherited_noop(cls, hook, base):
    """The hook does nothing for this class: MindSpore's default (forwarding
    to an old name nobody overrides) or a QuietCallback's ``pass``."""
    from mindexp.callbacks._quiet_callback import QuietCallback
    impl = getattr(cls, hook)
    if impl is getattr(QuietCallback, hook, None):
        return True
    if impl is getattr(base, hook, None):
        old = {"on_train_step_begin": "step_begin", "on_train_step_end": "step_end"}.get(hook)
        return old is None or getattr(cls, old) is getattr(base, old)
    return False


CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def profile_once(w, out, clock="wall"):
    """One run of the workload; ``(per-part us per step, median step us, timed steps)``."""
    from mindspore.train import Callback

    from benchmarks import ms_side
    from mindexp.train import session
    meter = Meter(CLOCKS[clock])

    class Ticks(Callback):
        def on_train_step_end(self, run_context):
            meter.step_end()

    original = session.Session._callbacks

    def instrumented(self, *args, **kwargs):
        cbs = original(self, *args, **kwargs)
        for cb in cbs:
            meter.wrap(cb, type(cb).__name__)
        return cbs

    session.Session._callbacks = instrumented
    try:
        run = ms_side.experiment(w, extra_callbacks=[Ticks()]).run(out=out, quiet=True)
    finally:
        session.Session._callbacks = original
    if run.status != "completed":
        raise RuntimeError(f"{run.dir} ended {run.status}")
    timed = meter.steps - 1
    per_part = {k: v / 1e3 / timed for k, v in meter.ns.items()}
    steps = sorted(b - a for a, b in zip(meter.ends, meter.ends[1:]))
    return per_part, steps[len(steps) // 2] / 1e3, timed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=("W1b", "W2", "FB", "W3"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="time the hooks by the wall clock or the thread's CPU clock")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)

    from benchmarks import ms_side
    from benchmarks.util import median
    from benchmarks.workloads import FULL, QUICK
    w = (QUICK if args.quick else FULL)[args.workload]
    ms_side.setup_context()
    tmp = tempfile.mkdtemp(prefix="mindexp-parts-")
    profile_once(w, os.path.join(tmp, "warm-up"), args.clock)
    runs = [profile_once(w, os.path.join(tmp, f"run{i}"), args.clock) for i in range(args.runs)]
    keys = list(runs[0][0])
    parts = {k: median([r[0].get(k, 0.0) for r in runs]) for k in keys}
    step = median([r[1] for r in runs])
    top = sum(v for k, v in parts.items() if not k.startswith(" "))
    print(f"{w.key}: {runs[0][2]} timed steps x {args.runs} runs; us per step (median of runs, "
          f"{args.clock} clock), load {os.getloadavg()[0]:.1f}")
    for k in keys:
        print(f"  {k:<52} {parts[k]:8.2f}")
    print(f"  {'all callbacks (the hooks MindSpore calls)':<52} {top:8.2f}")
    print(f"  {'step (median, end to end)':<52} {step:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": w.key, "clock": args.clock, "parts_us": parts, "callbacks_us": top,
                       "step_us": step, "load": os.getloadavg()[0]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
