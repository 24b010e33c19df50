"""Tracking's cost on each path measured inside ONE training, on and off in turn.

    python benchmarks/loop_chunks.py [--rounds 5] [--quick] [--workload W1b,W2,FB]

On a shared machine two trainings differ by more than tracking costs (a
neighbour's burst lands on one of them). Here each path trains once per
round and its steps go, by chunks of ``chunk`` steps, to tracking and to
none in turn (on, off, off, on, ...: each first as often as the other):

- the loop: one loop inside ``mindexp.track``, calling
  ``run.step(loss, net=..., grad_norm=..., optimizer=...)`` after the steps of
  the "on" chunks only;
- ``Model``: one ``Model.train`` whose dispatcher hands the hooks of the "on"
  chunks' steps (and of their epochs) to ``run.callbacks(model,
  checkpoint_every=None)`` and nothing of the others'.

The first step (the graph compile, and the callbacks' train begin) is
tracked and not timed. A chunk is timed from the end of the chunk before to
the end of its last step; a path's ratio is its "on" chunks' mean time over
its "off" chunks' (medians over rounds, the two paths' trainings alternating
which goes first). An epoch's end runs at the next epoch's first step on both
paths (``run.epochs`` moving on, MindSpore's epoch end), so it is counted in
the chunk after its last step, on both alike. The "off" chunks of the loop
still pass through ``run.epochs`` (a generator step per epoch, ~1 us).
"""
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

from benchmarks.loop_cost import _batches, _parts, data  # noqa: E402

ORDER = (True, False, False, True)   # on, off, off, on: each set first as often


def chunk_of(w):
    """Steps per chunk: about 64 chunks a training (32 per set)."""
    return max(1, (w.steps - 1) // 64)


def tracked_at(i, chunk):
    """Whether step ``i`` (0-based; 0 is the compile, always tracked) is tracked."""
    return True if i == 0 else ORDER[((i - 1) // chunk) % len(ORDER)]


def ratios(times, chunk):
    """``(mean on chunk / mean off chunk, seconds tracking adds per step)``
    from the step ends ``times`` (step 0's end first)."""
    on, off = [], []
    for start in range(1, len(times) - chunk + 1, chunk):
        span = times[start + chunk - 1] - times[start - 1]
        (on if tracked_at(start, chunk) else off).append(span)
    mean_on, mean_off = statistics.mean(on), statistics.mean(off)
    return mean_on / mean_off, (mean_on - mean_off) / chunk


def loop_run(w, batches, out, chunk):
    """One tracked loop, ``run.step`` on the "on" chunks' steps; the step ends."""
    import mindexp
    net, opt, step = _parts(w)
    times, i = [], 0
    with mindexp.track(out, "loop", {"workload": w.key}) as run:
        for _ in run.epochs(w.epochs):
            for x, y in batches:
                loss, norm = step(x, y)
                if tracked_at(i, chunk):
                    run.step(loss, net=net, grad_norm=norm, optimizer=opt)
                times.append(time.perf_counter())
                i += 1
    return times


def model_run(w, out, chunk):
    """One ``Model.train``, the run's CallbackList called on the "on" chunks'
    steps and epochs; the step ends."""
    import mindexp
    from mindspore.train import Model
    from mindexp.define.data import make_dataset
    net, opt, step = _parts(w)
    model = Model(step)
    dataset = make_dataset(data(w), ("x", "y"), w.batch, shuffle=False, seed=0)
    with mindexp.track(out, "model", {"workload": w.key}) as run:
        cbs = run.callbacks(model, checkpoint_every=None)
        # one CallbackList (or, in an older mindexp, the callbacks one by one)
        cbl = cbs[0] if len(cbs) == 1 else _Each(cbs)
        dispatcher = _dispatcher(cbl, chunk)
        model.train(w.epochs, dataset, callbacks=[dispatcher], dataset_sink_mode=False)
    return dispatcher.times


class _Each:
    """Callbacks called one after another, as MindSpore's own list calls them."""

    def __init__(self, cbs):
        self.cbs = cbs

    def __enter__(self):
        for cb in self.cbs:
            cb.__enter__()
        return self

    def __exit__(self, *exc):
        for cb in reversed(self.cbs):
            cb.__exit__(*exc)
        return False

    def __getattr__(self, hook):
        calls = [getattr(cb, hook) for cb in self.cbs]

        def each(run_context):
            for call in calls:
                call(run_context)
        setattr(self, hook, each)   # looked up once
        return each


def _dispatcher(cbl, chunk):
    from mindspore.train import Callback

    class Dispatcher(Callback):
        """Hands ``cbl`` the hooks of the tracked steps, their epochs', and
        train begin and end; ticks at each step's end (after ``cbl``)."""

        def __init__(self):
            super().__init__()
            self.times, self.i, self.on = [], 0, True

        def __enter__(self):
            cbl.__enter__()
            return self

        def __exit__(self, *exc):
            return cbl.__exit__(*exc)

        def on_train_begin(self, run_context):
            cbl.on_train_begin(run_context)

        def on_train_epoch_begin(self, run_context):
            if tracked_at(self.i, chunk):
                cbl.on_train_epoch_begin(run_context)

        def on_train_step_begin(self, run_context):
            self.on = tracked_at(self.i, chunk)
            if self.on:
                cbl.on_train_step_begin(run_context)

        def on_train_step_end(self, run_context):
            if self.on:
                cbl.on_train_step_end(run_context)
            self.times.append(time.perf_counter())
            self.i += 1

        def on_train_epoch_end(self, run_context):
            if self.on:   # the epoch's last step's set
                cbl.on_train_epoch_end(run_context)

        def on_train_end(self, run_context):
            cbl.on_train_end(run_context)

    return Dispatcher()


def measure(w, rounds, out):
    """``{"loop": [(ratio, s added a step) of each round], "model": [...]}``."""
    batches, chunk = _batches(w), chunk_of(w)
    runs = {"loop": lambda: loop_run(w, batches, out, chunk),
            "model": lambda: model_run(w, out, chunk)}
    found = {"loop": [], "model": []}
    for r in range(rounds):
        for path in (("loop", "model") if r % 2 == 0 else ("model", "loop")):
            found[path].append(ratios(runs[path](), chunk))
    return found


def table(workloads, keys, rounds, out):
    """Print one row per workload (see the module's doc)."""
    print(f"{'within one training':20} {'chunk':>5} {'loop x':>7} {'model x':>7} {'diff':>7}"
          f" {'loop us':>8} {'model us':>8}  (on/off chunks; medians of {rounds} rounds)")
    for key in keys:
        w = workloads[key]
        load = os.getloadavg()[0]
        found = measure(w, rounds, out)
        x = {p: statistics.median(r[0] for r in found[p]) for p in found}
        us = {p: statistics.median(r[1] for r in found[p]) * 1e6 for p in found}
        print(f"{key:20} {chunk_of(w):5d} {x['loop']:7.3f} {x['model']:7.3f}"
              f" {x['loop'] - x['model']:+7.3f} {us['loop']:+8.1f} {us['model']:+8.1f}"
              f"  load {load:.1f}-{os.getloadavg()[0]:.1f}", flush=True)


def main(argv=None):
    import argparse
    import tempfile
    from benchmarks.workloads import FULL, QUICK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", default="W1b,W2,FB")
    args = parser.parse_args(argv)
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    with tempfile.TemporaryDirectory() as out:
        table(QUICK if args.quick else FULL, args.workload.split(","), args.rounds, out)


if __name__ == "__main__":
    main()
