"""Where a tracked step's time goes, on the loop path and on the ``Model`` path.

    python benchmarks/loop_parts.py [--rounds 3] [--quick] [--workload W1b,W2,FB]

The four trainings of benchmarks/loop_cost.py (loop off/on, model off/on),
interleaved by round in one process, with each callback's hooks timed by
``time.perf_counter_ns`` around each call (their step and epoch hooks, also
the ones that do nothing: MindSpore calls those too). Prints, per workload
and arm, microseconds per step (the median over the timed steps, the first
step left out, then the median over rounds: a neighbour's burst of load
that preempts one step moves a mean, not these):

- ``step``: end of one step to the end of the next, everything included;
- ``train``: the loop's call of the train cell (the loop arms only);
- ``run.step``: the loop's whole ``run.step`` (the record and every part);
- ``all hooks``: the step hooks of the CallbackList ``run.callbacks(model)``
  hands ``Model.train`` (the Model arm);
- ``record``: ``run.step`` (or ``all hooks``) minus its parts' step hooks
  (the step's record, the dispatch, the loop's bookkeeping);
- one column per callback: its step hooks' time (a part of the CallbackList,
  or a callback ``Model.train`` calls itself);
- ``epoch hooks``: the epoch ends and beginnings (``run.epochs`` moving on,
  or MindSpore's epoch hooks);
- ``read``: the loop's first reads of the step's loss and gradient norm
  (inside ``run.step``: where it would wait if the train call returned
  before its work was done);
- ``gc n`` and ``gc ms``: the garbage collections during the timed steps
  (all generations: how many, and their total milliseconds, per training).

The per-call timers cost ~0.1-0.2 us each; read the rows as where the time
goes, and loop_cost.py (no timers) for the ratios.
"""
import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

from benchmarks import loop_cost  # noqa: E402
from benchmarks.workloads import FULL, QUICK  # noqa: E402

STEP_HOOKS = ("on_train_step_begin", "on_train_step_end", "on_train_step_record")
EPOCH_HOOKS = ("on_train_epoch_begin", "on_train_epoch_end")
EPOCH = "epoch hooks"
ALL = "all hooks"    # the CallbackList's own step hooks: its parts and its record


class Meter:
    """Nanoseconds per label and step, counted only while ``on`` (after the
    first step); :meth:`tick` at each step's end closes the step."""

    def __init__(self):
        self.ns, self.on, self.steps = {}, False, {}
        self.gc_n, self.gc_ns, self._gc_start = 0, 0, 0

    def gc_phase(self, phase, info):
        """A ``gc.callbacks`` entry: the collections while ``on``, and their time."""
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        elif self.on:
            self.gc_n += 1
            self.gc_ns += time.perf_counter_ns() - self._gc_start

    def tick(self):
        """Close a step: each label's time in it joins its list."""
        if self.on:
            for label, ns in self.ns.items():
                self.steps.setdefault(label, []).append(ns)
                self.ns[label] = 0
        self.on = True

    def timed(self, fn, label):
        ns, clock, meter = self.ns, time.perf_counter_ns, self
        ns.setdefault(label, 0)

        def call(*args, **kwargs):
            if not meter.on:
                return fn(*args, **kwargs)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                ns[label] += clock() - t0
        return call

    def wrap_hooks(self, cb, epochs=True):
        """Time ``cb``'s step hooks under its class's name, its epoch hooks as
        ``epoch hooks``; a CallbackList's as ``all hooks`` and each of its parts'
        step hooks (instance attributes shadow the class's)."""
        parts = getattr(cb, "callbacks", None)
        label = ALL if parts is not None else type(cb).__name__
        for hook in STEP_HOOKS + (EPOCH_HOOKS if epochs else ()):
            if callable(getattr(cb, hook, None)):
                name = EPOCH if hook in EPOCH_HOOKS else label
                setattr(cb, hook, self.timed(getattr(cb, hook), name))
        for part in parts or ():
            self.wrap_hooks(part, epochs=False)


def _loop_on(w, batches, out, meter):
    """loop_cost's tracked loop, its parts and its train cell timed."""
    import mindexp
    from mindexp.train import loop as loop_mod
    original = loop_mod._callbacks

    def timed_callbacks(loop, *args):
        cbl = original(loop, *args)
        for cb in cbl.callbacks:
            meter.wrap_hooks(cb, epochs=False)
        loop.step = meter.timed(loop.step, "run.step")
        loop._read_loss = meter.timed(loop._read_loss, "read")
        loop._read_norm = meter.timed(loop._read_norm, "read")
        loop._close_epoch = meter.timed(loop._close_epoch, EPOCH)
        loop._open_epoch = meter.timed(loop._open_epoch, EPOCH)
        return cbl

    net, opt, step = loop_cost._parts(w)
    train = meter.timed(step, "train")
    times = []
    loop_mod._callbacks = timed_callbacks
    try:
        with mindexp.track(out, "loop", {"workload": w.key}) as run:
            for _ in run.epochs(w.epochs):
                for x, y in batches:
                    loss, norm = train(x, y)
                    run.step(loss, net=net, grad_norm=norm, optimizer=opt)
                    times.append(time.perf_counter())
                    meter.tick()
    finally:
        loop_mod._callbacks = original
        meter.on = False
    return times


def _loop_off(w, batches, meter):
    net, opt, step = loop_cost._parts(w)
    train = meter.timed(step, "train")
    times = []
    for _ in range(w.epochs):
        for x, y in batches:
            train(x, y)
            times.append(time.perf_counter())
            meter.tick()
    meter.on = False
    return times


def _model(w, out, meter, tracked):
    """loop_cost's Model run, each callback's hooks timed."""
    import mindexp
    from mindspore.train import Callback, Model
    from mindexp.define.data import make_dataset

    class Clock(Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_step_end(self, run_context):
            self.times.append(time.perf_counter())
            meter.tick()

    net, opt, step = loop_cost._parts(w)
    model, clock = Model(step), Clock()
    dataset = make_dataset(loop_cost.data(w), ("x", "y"), w.batch, shuffle=False, seed=0)
    try:
        if not tracked:
            model.train(w.epochs, dataset, callbacks=[clock], dataset_sink_mode=False)
            return clock.times
        with mindexp.track(out, "model", {"workload": w.key}) as run:
            cbs = run.callbacks(model, checkpoint_every=None)
            for cb in cbs:
                meter.wrap_hooks(cb)
            model.train(w.epochs, dataset, callbacks=cbs + [clock], dataset_sink_mode=False)
    finally:
        meter.on = False
    return clock.times


def measure(w, rounds, out):
    """``{arm: [{label: us per step} of each round]}``, the arms rotating."""
    batches = loop_cost._batches(w)
    arms = {"loop off": lambda m: _loop_off(w, batches, m),
            "loop on": lambda m: _loop_on(w, batches, out, m),
            "model off": lambda m: _model(w, out, m, False),
            "model on": lambda m: _model(w, out, m, True)}
    names = list(arms)
    found = {a: [] for a in names}
    for r in range(rounds):
        for arm in names[r % 4:] + names[:r % 4]:
            meter = Meter()
            gc.callbacks.append(meter.gc_phase)
            try:
                times = arms[arm](meter)
            finally:
                gc.callbacks.remove(meter.gc_phase)
            steps = len(times) - 1
            gaps = [b - a for a, b in zip(times, times[1:])]
            row = {"step": statistics.median(gaps) * 1e6}
            row.update({k: statistics.median(v) / 1e3 for k, v in meter.steps.items()})
            whole = "run.step" if "run.step" in row else ALL
            if whole in row:
                parts = sum(v for k, v in row.items()
                            if k not in ("step", "train", "run.step", EPOCH, ALL, "read"))
                row["record"] = row[whole] - parts
            row.update({"gc n": meter.gc_n, "gc ms": meter.gc_ns / 1e6})
            found[arm].append(row)
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", default="W1b,W2,FB")
    args = parser.parse_args(argv)
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    workloads = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as out:
        for key in args.workload.split(","):
            found = measure(workloads[key], args.rounds, out)
            print(f"{key}: us per step (median over the steps, then over {args.rounds} rounds), "
                  f"load {os.getloadavg()[0]:.1f}")
            for arm, rows in found.items():
                labels = list(dict.fromkeys(k for row in rows for k in row))
                med = {k: statistics.median(row.get(k, 0.0) for row in rows) for k in labels}
                print(f"  {arm:10} " + "  ".join(f"{k} {v:.1f}" for k, v in med.items()),
                      flush=True)


if __name__ == "__main__":
    main()
