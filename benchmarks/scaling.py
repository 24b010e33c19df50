"""ParameterTracker's cost as the model grows, one model per process.

    python benchmarks/scaling.py MODEL STEPS OUT [--rev REV] [--sets host,loss,...]   ->  one JSON line

MODEL is H (an MLP 1-H-H-H-1) or ``transformer`` (the shipped experiment's
network in its default config: 17 k parameters, a step of many small
kernels). Batch 64, Adam, graph mode. One
``Model.train``, its steps handed in chunks, in turn (interleave.py), to:

- ``off``: no callbacks;
- ``host``: ParameterTracker logging every step, statistics on the host
  (numpy, as on a CPU by default);
- ``budget``: the same with the default budget of 0.05;
- ``graph``: ParameterTracker reading the statistics the train step computes
  in its graph (``TrainStep(param_stats=True)``): for its chunks the Model's
  train cell is swapped for one that returns them (sharing the parameters
  and the optimizer), so its ratio includes their cost inside the step;
- ``before``: the tracker of git revision REV, when given;
- ``loss`` and ``loss_host``: a LossMonitor alone, and with the ``host``
  tracker: their ratio (``over_loss``) is what turning the tracker on costs
  in a mindexp run, whose LossMonitor already runs a hook between the steps.

Prints each set's chunk-time ratio against ``off`` (mean and median), its
tracker's hook time per step, and the load average before and after.
"""
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402

CHUNK = 4   # steps per chunk
BATCH = 64


def _timed(tracker, spent):
    """Wrap ``tracker.on_train_step_end`` to add its seconds to ``spent``."""
    hook = tracker.on_train_step_end

    def timed(run_context):
        start = time.perf_counter()
        hook(run_context)
        spent.append(time.perf_counter() - start)
    tracker.on_train_step_end = timed
    return tracker


def _cell_callback(model, cell, tracker=None):
    """A callback that makes ``cell`` the Model's train cell for its set's
    chunks (``Model._train_network``, read at each step: benchmark only),
    and shows it to ``tracker`` at train begin."""
    from mindspore.train import Callback

    class UseCell(Callback):
        def on_train_begin(self, run_context):
            if tracker is not None:
                params = run_context.original_args()
                shown, params["train_network"] = params["train_network"], cell
                tracker.on_train_begin(run_context)
                params["train_network"] = shown

        def on_train_step_begin(self, run_context):
            model._train_network = cell
    return UseCell()


def _mlp(hidden, steps):
    from mindspore import dataset as ds, nn
    net = nn.SequentialCell(nn.Dense(1, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU(),
                            nn.Dense(hidden, hidden), nn.ReLU(), nn.Dense(hidden, 1))
    x = np.random.default_rng(0).normal(size=(steps * BATCH, 1)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": np.sin(x)}, shuffle=False).batch(BATCH)
    return net, nn.MSELoss(), data, (x[:BATCH], np.sin(x[:BATCH]))


def _transformer(steps):
    from mindspore import dataset as ds
    from mindexp.experiments.transformer import Transformer
    exp = Transformer(samples=steps * BATCH)
    tokens, labels = exp.source("train")
    data = ds.NumpySlicesDataset({"tokens": tokens, "label": labels}, shuffle=False).batch(BATCH)
    return exp.network(), exp.loss_fn(), data, (tokens[:BATCH], labels[:BATCH])


def _load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def measure(model_name, steps, out, before=None, only=None):
    """Chunk-time ratios against ``off`` and hook seconds per step, per set."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from mindspore.train import Model

    from benchmarks.interleave import Dispatcher
    from mindexp import callbacks
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net, loss, data, batch = (_transformer(steps) if model_name == "transformer"
                              else _mlp(int(model_name), steps))
    opt = nn.Adam(net.trainable_params(), 1e-4)
    plain = callbacks.TrainStep(nn.WithLossCell(net, loss), opt)
    with_stats = callbacks.TrainStep(nn.WithLossCell(net, loss), opt, param_stats=True)
    with_stats(*[Tensor(b) for b in batch])   # compiled before the timing (one update)
    model = Model(plain)
    trackers = {"host": lambda d: callbacks.ParameterTracker(d, stats="host"),
                "budget": lambda d: callbacks.ParameterTracker(d, budget=0.05, stats="host"),
                "graph": lambda d: callbacks.ParameterTracker(d, stats="graph")}
    if before is not None:
        trackers["before"] = lambda d: before.ParameterTracker(d)
    hooks, made = {}, {}
    sets = {"off": [_cell_callback(model, plain)]}
    for name, make in trackers.items():
        hooks[name] = []
        made[name] = _timed(make(os.path.join(out, name)), hooks[name])
        cell = with_stats if name == "graph" else plain
        if name == "graph":   # shown the cell that returns the statistics
            sets[name] = [_cell_callback(model, cell, made[name]), _Forward(made[name])]
        else:
            sets[name] = [_cell_callback(model, cell), made[name]]
    # the tracker's own cost in a mindexp run, where a LossMonitor reads every step anyway
    # (benchmarks/README.md, section 1d: what a LossMonitor alone costs against no callbacks)
    sets["loss"] = [_cell_callback(model, plain), callbacks.LossMonitor(os.path.join(out, "loss"))]
    hooks["loss_host"] = []
    made["loss_host"] = _timed(callbacks.ParameterTracker(os.path.join(out, "loss_host"), stats="host"),
                               hooks["loss_host"])
    sets["loss_host"] = [_cell_callback(model, plain),
                         callbacks.LossMonitor(os.path.join(out, "loss_host")), made["loss_host"]]
    if only:   # fewer sets: each gets more chunks, and all their orders take turns
        sets = {name: sets[name] for name in ["off", *only]}
    disp = Dispatcher(sets, by_epoch=False, chunk=CHUNK)
    from mindexp.train.session import startup_objects_frozen
    load = [_load()]
    with startup_objects_frozen():
        model.train(1, data, callbacks=[disp], dataset_sink_mode=False)
    load.append(_load())
    return _row(model_name, net, steps, disp.result(), hooks, made, load)


class _Forward:
    """Forwards every hook but on_train_begin (given by the UseCell callback)."""

    def __init__(self, callback):
        self.callback = callback

    def __getattr__(self, name):
        if name == "on_train_begin":
            return lambda run_context: None
        return getattr(self.callback, name)


def _row(model_name, net, steps, res, hooks, made, load):
    base = res["off"]
    params = sum(int(p.size) for p in net.trainable_params())
    row = {"model": model_name, "params": params, "steps": steps,
           "step_ms": base["median_chunk_s"] / CHUNK * 1e3, "load": load, "sets": {}}
    for name, r in res.items():
        spent = hooks.get(name, [])
        row["sets"][name] = {"ratio": r["mean_chunk_s"] / base["mean_chunk_s"],
                             "median_ratio": r["median_chunk_s"] / base["median_chunk_s"],
                             "hook_ms": float(np.median(spent[1:])) * 1e3 if spent else 0.0,
                             # the mean counts the steps that write a block of rows too
                             "hook_mean_ms": float(np.mean(spent[1:])) * 1e3 if spent else 0.0}
    if "loss" in res and "loss_host" in res:
        row["over_loss"] = res["loss_host"]["mean_chunk_s"] / res["loss"]["mean_chunk_s"]
    if "budget" in res:
        row["budget_every"] = made["budget"].large_every
    if "host" in res:
        row["host_threads"] = made["host"].stats_threads
    if "graph" in res:
        row["graph_source"] = made["graph"].stats_source
    return row


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    model_name, steps, out = argv[0], int(argv[1]), argv[2]
    before = None
    if "--rev" in argv:
        from benchmarks.ab import load_revision
        before = load_revision(argv[argv.index("--rev") + 1], tempfile.mkdtemp(prefix="rev-"))
    only = argv[argv.index("--sets") + 1].split(",") if "--sets" in argv else None
    print(json.dumps(measure(model_name, steps, out, before, only)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
