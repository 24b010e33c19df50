"""What tracking costs a hand-written loop (``run.step``) beside a ``Model`` run.

    python benchmarks/loop_cost.py [--rounds 5] [--quick] [--workload W1b,W2,FB]

For each workload (benchmarks/workloads.py) four trainings of the same
network, data and batches, in a rotating order each round (interleaved, so a
neighbour's burst of load lands on all four alike):

- ``loop off``: a loop calling the TrainStep cell on each batch;
- ``loop on``:  the same loop inside ``mindexp.track`` with
  ``run.step(loss, net=..., grad_norm=..., optimizer=...)`` after each step
  (loss.csv, params.csv, grad_norm.csv, system.csv every step, as a Model run);
- ``model off``: ``Model(TrainStep).train`` without callbacks;
- ``model on``:  the same with ``run.callbacks(model, checkpoint_every=None)``
  (the loop saves no checkpoint unless asked: neither path saves one per epoch).

Each training is timed from the end of its first step (the graph compile)
to the end of its last. Prints, per workload, the median over the rounds of
each training's seconds per step, the ratios on/off of each path and their
difference (the issue's bound: the loop's ratio within 0.03 of the Model
path's), and what tracking adds to a step in microseconds on each path (on
minus off; the ratios divide it by different steps: a ``Model`` step also
carries MindSpore's own loop and dataset pipeline). Three ways: the mean
step (the workload's row), the median step (a neighbour's burst of load
that stalls a few steps barely moves it) and the process's CPU time per
step (all threads; not lengthened by waiting for a core); then the load
average before and after. Never asserted anywhere: machines are noisy.
The figures measured, and what they show: benchmarks/README.md (the section
on what tracking costs a loop beside a ``Model`` run); benchmarks/loop_chunks.py measures the same inside one training
per path, benchmarks/loop_parts.py where a step's time goes.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

from benchmarks.workloads import FULL, QUICK, data  # noqa: E402

VARIANTS = ("loop off", "loop on", "model off", "model on")


def _parts(w):
    """A fresh network, optimizer and TrainStep of a workload."""
    from mindspore import nn
    from mindexp.callbacks import TrainStep
    if w.kind == "linear":
        net = nn.Dense(1, 1)
    else:
        net = nn.SequentialCell(nn.Dense(1, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(),
                                nn.Dense(256, 1))
    opt = (nn.Adam if w.optimizer == "adam" else nn.SGD)(net.trainable_params(), w.lr)
    return net, opt, TrainStep(nn.WithLossCell(net, nn.MSELoss()), opt)


def _batches(w):
    from mindspore import Tensor
    x, y = data(w)
    n = w.steps_per_epoch * w.batch
    return [(Tensor(x[i:i + w.batch]), Tensor(y[i:i + w.batch])) for i in range(0, n, w.batch)]


class Clock:
    """A training's step ends: the wall clock at each, the process's CPU time
    (every thread: MindSpore's runtime and dataset workers too) at the first
    and the last (``process_time`` is a system call, ~1-2 us: not every step)."""

    def __init__(self, steps):
        self.times, self.cpu, self.steps = [], [], steps

    def tick(self):
        times = self.times
        times.append(time.perf_counter())
        if len(times) == 1 or len(times) == self.steps:
            self.cpu.append(time.process_time())

    def per_step(self):
        """``(mean, median, CPU)`` seconds per step after the first (the compile)."""
        t, n = self.times, len(self.times) - 1
        gaps = [b - a for a, b in zip(t, t[1:])]
        return (t[-1] - t[0]) / n, statistics.median(gaps), (self.cpu[-1] - self.cpu[0]) / n


def _loop(w, batches, out, tracked):
    import mindexp
    net, opt, step = _parts(w)
    clock = Clock(w.steps)
    if not tracked:
        for _ in range(w.epochs):
            for x, y in batches:
                step(x, y)
                clock.tick()
        return clock
    with mindexp.track(out, "loop", {"workload": w.key}) as run:
        for _ in run.epochs(w.epochs):
            for x, y in batches:
                loss, norm = step(x, y)
                run.step(loss, net=net, grad_norm=norm, optimizer=opt)
                clock.tick()
    return clock


def _model(w, out, tracked):
    import mindexp
    from mindspore.train import Callback, Model
    from mindexp.define.data import make_dataset

    class Ticks(Callback):
        def __init__(self, clock):
            super().__init__()
            self.tick = clock.tick

        def on_train_step_end(self, run_context):
            self.tick()

    net, opt, step = _parts(w)
    model, clock = Model(step), Clock(w.steps)
    dataset = make_dataset(data(w), ("x", "y"), w.batch, shuffle=False, seed=0)
    if not tracked:
        model.train(w.epochs, dataset, callbacks=[Ticks(clock)], dataset_sink_mode=False)
        return clock
    with mindexp.track(out, "model", {"workload": w.key}) as run:
        # no checkpoint each epoch: the loop saves only when asked (both save at the end)
        model.train(w.epochs, dataset, callbacks=run.callbacks(model, checkpoint_every=None)
                    + [Ticks(clock)],
                    dataset_sink_mode=False)
    return clock


def measure(w, rounds, out):
    """``{variant: [(mean, median, CPU) seconds per step of each round]}``, the
    variants rotating."""
    batches = _batches(w)
    runs = {"loop off": lambda: _loop(w, batches, out, False),
            "loop on": lambda: _loop(w, batches, out, True),
            "model off": lambda: _model(w, out, False),
            "model on": lambda: _model(w, out, True)}
    seconds = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for v in VARIANTS[r % 4:] + VARIANTS[:r % 4]:
            seconds[v].append(runs[v]().per_step())
    return seconds


STATISTICS = ("mean", "median step", "CPU")


def _table_row(label, med):
    loop_x, model_x = med["loop on"] / med["loop off"], med["model on"] / med["model off"]
    loop_us, model_us = [(med[f"{p} on"] - med[f"{p} off"]) * 1e6 for p in ("loop", "model")]
    return (f"{label:12} " + " ".join(f"{med[v] * 1e3:9.3f}m" for v in VARIANTS)
            + f" {loop_x:7.3f} {model_x:7.3f} {loop_x - model_x:+7.3f}"
            f" {loop_us:+8.1f} {model_us:+8.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", default="W1b,W2,FB")
    args = parser.parse_args(argv)
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)   # as a runner trains (ms_side.py too)
    workloads = QUICK if args.quick else FULL
    print(f"{'workload':12} {'loop off':>10} {'loop on':>10} {'model off':>10} {'model on':>10}"
          f" {'loop x':>7} {'model x':>7} {'diff':>7} {'loop us':>8} {'model us':>8}"
          f"  (medians of {args.rounds} rounds)")
    with tempfile.TemporaryDirectory() as out:
        for key in args.workload.split(","):
            load = os.getloadavg()[0]
            found = measure(workloads[key], args.rounds, out)
            for i, stat in enumerate(STATISTICS):
                med = {v: statistics.median(s[i] for s in found[v]) for v in VARIANTS}
                print(_table_row(key if i == 0 else f"  {stat}", med), flush=True)
            print(f"  load {load:.1f}-{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
