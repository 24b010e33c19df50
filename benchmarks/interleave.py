"""Callback overhead measured inside ONE Model.train, variants interleaved.

On a shared, noisy machine two separate training runs differ by +-20% for
reasons that have nothing to do with the code. Here one ``Model.train``
runs, and a dispatcher callback hands each chunk of steps (one epoch when
epochs are short, else ``chunk`` steps) to one set of callbacks in turn:
``off`` (none), then e.g. the four defaults, every ordering of the sets in
turn (A B C, A C B, B A C, ...). Each chunk is timed from the end of the
previous chunk to its own end (data fetch + steps + the set's hooks), the
first chunk (graph compile) is
dropped, and a set's cost is its mean chunk time. A burst of load from a
neighbour lands on all sets alike, so the ratio against ``off`` isolates
what the callbacks cost, to a few percent.
"""
import itertools
import os
import time

import numpy as np
from mindspore.train import Callback, Model

HOOKS = ("on_train_step_begin", "on_train_step_end", "on_train_epoch_begin",
         "on_train_epoch_end")


class Dispatcher(Callback):
    """Forwards every hook to the active set of callbacks (see the module doc).

    ``by_epoch``: a chunk is one epoch and epoch hooks go to the active set
    only; else a chunk is ``chunk`` steps and epoch hooks go to every set
    (each flushes its own logs; rare with long epochs).
    """

    def __init__(self, sets, by_epoch, chunk=None):
        super().__init__()
        self.names = list(sets)
        self.sets = sets
        self.by_epoch, self.chunk = by_epoch, chunk
        self.times = {name: [] for name in self.names}
        self.cpu = {name: [] for name in self.names}   # the training thread's CPU seconds
        self._last_cpu = None
        self._perms = list(itertools.permutations(self.names)) if len(self.names) <= 4 \
            else [self.names, self.names[::-1]]
        self._k = -1                # chunk index
        self._in_chunk = 0
        self._active = None
        self._last = None

    def _order(self, k):
        # Every ordering of the sets in turn (A B C, A C B, B A C, ...): each set
        # runs first, in the middle and last equally often. The earlier A B C C
        # B A pattern left the last set ~4% slower than the same callbacks in
        # the middle (measured: two identical sets swapped places).
        perms = self._perms
        block, pos = divmod(k, len(self.names))
        return perms[block % len(perms)][pos]

    def _next_chunk(self):
        now, cpu = time.perf_counter(), time.thread_time()
        if self._active is not None and self._k >= 1:   # chunk 0 holds the compile
            self.times[self._active].append(now - self._last)
            self.cpu[self._active].append(cpu - self._last_cpu)
        self._last, self._last_cpu = now, cpu
        self._k += 1
        self._active = self._order(self._k)
        self._in_chunk = 0

    def _call(self, hook, run_context, every_set=False):
        for name in (self.names if every_set else [self._active]):
            for cb in self.sets[name]:
                getattr(cb, hook)(run_context)

    def on_train_begin(self, run_context):
        for name in self.names:
            for cb in self.sets[name]:
                cb.on_train_begin(run_context)

    def on_train_epoch_begin(self, run_context):
        if self.by_epoch:
            self._next_chunk()
            self._call("on_train_epoch_begin", run_context)
        else:
            if self._active is None:
                self._next_chunk()
            self._call("on_train_epoch_begin", run_context, every_set=True)

    def on_train_step_begin(self, run_context):
        if not self.by_epoch and self._in_chunk == self.chunk:
            self._next_chunk()
        self._call("on_train_step_begin", run_context)

    def on_train_step_end(self, run_context):
        self._in_chunk += 1
        self._call("on_train_step_end", run_context)

    def on_train_epoch_end(self, run_context):
        self._call("on_train_epoch_end", run_context, every_set=not self.by_epoch)

    def on_train_end(self, run_context):
        # the last chunk ends with the last step's hooks: close it here, before
        # the sets' end-of-training work (final checkpoints)
        if self._active is not None and self._k >= 1:
            self.times[self._active].append(time.perf_counter() - self._last)
            self.cpu[self._active].append(time.thread_time() - self._last_cpu)
        self._active = None
        for name in self.names:
            for cb in self.sets[name]:
                cb.on_train_end(run_context)

    def __exit__(self, *exc):
        for name in self.names:
            for cb in self.sets[name]:
                cb.__exit__(*exc)
        return False

    def result(self):
        out = {}
        for name in self.names:
            t = np.asarray(self.times[name])
            c = np.asarray(self.cpu[name])
            out[name] = {"chunks": len(t), "mean_chunk_s": float(t.mean()) if len(t) else None,
                         "median_chunk_s": float(np.median(t)) if len(t) else None,
                         "mean_chunk_cpu_s": float(c.mean()) if len(c) else None}
        return out


def chunking(w, n_sets):
    """(by_epoch, chunk): whole epochs when there are enough of them for ~8 per
    set, else chunks of steps giving ~16 per set."""
    if w.epochs >= 8 * n_sets:
        return True, None
    return False, max(1, min(w.steps_per_epoch, w.steps // (16 * n_sets)))


def default_sets(pkg_by_name, out):
    """name -> the four default callbacks of a callbacks package, as the runner
    sets them: inside one CallbackList (one record a step) when the package
    has it, else one by one."""
    sets = {}
    for name, pkg in pkg_by_name.items():
        if pkg is None:
            sets[name] = []
            continue
        d = os.path.join(out, name)
        cbs = [pkg.LossMonitor(d), pkg.ParameterTracker(d), pkg.GradNormMonitor(d),
               pkg.Checkpoint(d, every_epochs=1, keep_last=3, min_interval_s=10.0)]
        listed = getattr(pkg, "__all__", ())
        sets[name] = [pkg.CallbackList(cbs)] if "CallbackList" in listed else cbs
    return sets


def measure(w, pkg_by_name, out, train_step_pkg=None):
    """Train workload ``w`` once with the sets interleaved; returns per-set chunk times
    and each set's time ratio against the first set (``off``)."""
    import mindspore as ms

    from mindexp import callbacks
    from benchmarks import ms_side
    from mindexp.define.data import as_arrays
    exp = ms_side.experiment(w)
    arrays = as_arrays(exp.source("train"), exp.columns, "train")
    ms.set_seed(0)
    net = exp.network()
    opt = exp.optimizer(net.trainable_params(), exp.learning_rate(w.steps_per_epoch))
    cell = (train_step_pkg or callbacks).TrainStep(exp.loss_network(net), opt)
    by_epoch, chunk = chunking(w, len(pkg_by_name))
    disp = Dispatcher(default_sets(pkg_by_name, out), by_epoch, chunk)
    dataset = exp.dataset("train", arrays)
    from mindexp.train.session import startup_objects_frozen
    with startup_objects_frozen():   # as the runner trains: no 150 ms full collections
        Model(cell).train(w.epochs, dataset, callbacks=[disp], dataset_sink_mode=False)
    res = disp.result()
    base = res[next(iter(res))]
    for r in res.values():
        r["time_ratio"] = (r["mean_chunk_s"] / base["mean_chunk_s"]
                           if r["mean_chunk_s"] and base["mean_chunk_s"] else None)
        r["median_ratio"] = (r["median_chunk_s"] / base["median_chunk_s"]
                             if r["median_chunk_s"] and base["median_chunk_s"] else None)
        r["cpu_ratio"] = (r["mean_chunk_cpu_s"] / base["mean_chunk_cpu_s"]
                          if r["mean_chunk_cpu_s"] and base["mean_chunk_cpu_s"] else None)
    return res
