"""ParameterTracker's cost as the model grows (issue 26), one size per process.

    python benchmarks/scaling.py H STEPS OUT [--rev REV]   ->  one JSON line

Trains an MLP 1-H-H-H-1 (batch 64, Adam, graph mode) once, with the steps in
chunks handed in turn (every ordering, see interleave.py) to: no callbacks
(``off``), the ParameterTracker of git revision REV (``before``, when given),
the working tree's logging every step (``on``) and the working tree's with
the default budget of 0.05 (``budget``). Prints each set's chunk-time ratio
against ``off`` and its tracker's hook time per step.
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


def _timed(tracker, spent):
    """Wrap ``tracker.on_train_step_end`` to add its seconds to ``spent``."""
    hook = tracker.on_train_step_end

    def timed(run_context):
        start = time.perf_counter()
        hook(run_context)
        spent.append(time.perf_counter() - start)
    tracker.on_train_step_end = timed
    return tracker


def _network(hidden):
    from mindspore import nn
    return nn.SequentialCell(nn.Dense(1, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU(),
                             nn.Dense(hidden, hidden), nn.ReLU(), nn.Dense(hidden, 1))


def measure(hidden, steps, out, before=None):
    """Chunk-time ratios against ``off`` and hook seconds per step, per set."""
    import mindspore as ms
    from mindspore import dataset as ds, nn
    from mindspore.train import Model

    from benchmarks.interleave import Dispatcher
    from mindexp import callbacks
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = _network(hidden)
    cell = callbacks.TrainStep(nn.WithLossCell(net, nn.MSELoss()),
                               nn.Adam(net.trainable_params(), 1e-4))
    x = np.random.default_rng(0).normal(size=(steps * 64, 1)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": np.sin(x)}, shuffle=False).batch(64)
    hooks = {}
    makers = {"before": (lambda d: before.ParameterTracker(d)) if before else None,
              "on": lambda d: callbacks.ParameterTracker(d),
              "budget": lambda d: callbacks.ParameterTracker(d, budget=0.05)}
    sets = {"off": []}
    for name, make in makers.items():
        if make is not None:
            hooks[name] = []
            sets[name] = [_timed(make(os.path.join(out, name)), hooks[name])]
    disp = Dispatcher(sets, by_epoch=False, chunk=CHUNK)
    from mindexp.train.session import startup_objects_frozen
    with startup_objects_frozen():
        Model(cell).train(1, data, callbacks=[disp], dataset_sink_mode=False)
    res = disp.result()
    base = res["off"]
    params = sum(int(p.size) for p in net.trainable_params())
    row = {"hidden": hidden, "params": params, "steps": steps,
           "step_ms": base["median_chunk_s"] / CHUNK * 1e3, "sets": {}}
    for name, r in res.items():
        spent = hooks.get(name, [])
        row["sets"][name] = {"ratio": r["mean_chunk_s"] / base["mean_chunk_s"],
                             "median_ratio": r["median_chunk_s"] / base["median_chunk_s"],
                             "hook_ms": float(np.median(spent[1:])) * 1e3 if spent else 0.0}
    budget = sets.get("budget")
    if budget:
        row["budget_every"] = budget[0].large_every
    return row


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    hidden, steps, out = int(argv[0]), int(argv[1]), argv[2]
    before = None
    if "--rev" in argv:
        from benchmarks.ab import load_revision
        before = load_revision(argv[argv.index("--rev") + 1], tempfile.mkdtemp(prefix="rev-"))
    print(json.dumps(measure(hidden, steps, out, before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
