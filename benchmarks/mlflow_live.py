"""What streaming a run to MLflow (``--mlflow``) costs the training, on the seed's
workloads (W1b: Linear, Dense(1,1) on y = 2x, 100 samples, batch 10, 100
epochs = 1,000 steps; FB: the seed's full batch, batch 100, 300 epochs = 300
steps), trained in this process three ways, interleaved round by round:

* ``off``: no ``mlflow=``;
* ``live``: ``mlflow=`` a real ``mlflow server`` started here (SQLite, 127.0.0.1);
* ``dead``: ``mlflow=`` a port where nothing listens (the sender's one warning,
  retries with a growing pause).

The figure is the ratio of the median wall time of ``Experiment.run`` with
and without. The sender is a process of its own; after each run this waits
for it to exit (its end-of-run sync imports mlflow: seconds of CPU that
must not fall into the next run's time) and reports its CPU seconds apart.

    .venv/bin/python benchmarks/mlflow_live.py [--rounds 5] [--workloads W1b,FB]
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.mlflow_sync import _free_port, start_server  # noqa: E402

WORKLOADS = {"W1b": dict(epochs=100, batch_size=10, optimizer="sgd", lr=0.2),
             "FB": dict(epochs=300, batch_size=100, optimizer="sgd", lr=0.2)}
MODES = ("off", "live", "dead")


def _busy_s():
    """Busy CPU-seconds of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_run(out, config, uri):
    """``(wall s of the run, CPU s of its sender)``; waits for the sender to exit."""
    from mindexp.experiments.linear import Linear
    from mindexp.train import mlflow_stream
    wall = time.perf_counter()
    Linear(seed=0, **config).run(out=out, quiet=True, mlflow=uri)
    wall = time.perf_counter() - wall
    before = _children_cpu_s()
    for sender in list(mlflow_stream._SENDERS):
        sender.wait(timeout=600)
    mlflow_stream._SENDERS.clear()
    return wall, _children_cpu_s() - before


def measure(workloads=("W1b", "FB"), rounds=5):
    """``{"<workload>": {"off": [s...], "live": [...], "dead": [...],
    "sender_cpu_live": [...], "sender_cpu_dead": [...]}, "busy": cores}``."""
    os.environ.setdefault("MINDEXP_PLOTS", "0")  # the same for every mode; not what is measured
    result = {"load_before": os.getloadavg()}
    busy0, wall0 = _busy_s(), time.monotonic()
    with tempfile.TemporaryDirectory() as home:
        server, uri = start_server(home)
        uris = {"off": None, "live": uri, "dead": f"http://127.0.0.1:{_free_port()}"}
        try:
            _timed_run(os.path.join(home, "warm"), dict(epochs=1), None)  # the first graph
            for k in range(rounds):
                for name in workloads:
                    times = result.setdefault(name, {})
                    for mode in MODES[k % 3:] + MODES[:k % 3]:  # each mode first in turn
                        wall, sender = _timed_run(os.path.join(home, f"{name}-{mode}"),
                                                  WORKLOADS[name], uris[mode])
                        times.setdefault(mode, []).append(wall)
                        if mode != "off":
                            times.setdefault(f"sender_cpu_{mode}", []).append(sender)
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["busy_cores"] = (_busy_s() - busy0) / (time.monotonic() - wall0)
    result["load_after"] = os.getloadavg()
    return result


def render(result):
    """The result as lines of text."""
    lines = [f"load average before: {' '.join(f'{v:.2f}' for v in result['load_before'])}, "
             f"after: {' '.join(f'{v:.2f}' for v in result['load_after'])}; machine busy "
             f"{result['busy_cores']:.2f} of {os.cpu_count()} cores while it ran"]
    for name in WORKLOADS:
        times = result.get(name)
        if not times:
            continue
        off = statistics.median(times["off"])
        for mode in ("live", "dead"):
            med = statistics.median(times[mode])
            per_round = " ".join(f"{b / a:.3f}" for a, b in zip(times["off"], times[mode]))
            lines.append(f"{name}: median {off:.2f} s off, {med:.2f} s {mode:4}: x{med / off:.3f} "
                         f"(rounds: {per_round}); sender {statistics.median(times['sender_cpu_' + mode]):.2f} "
                         f"CPU-s a run, apart")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="W1b,FB", help="of W1b, FB, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = measure(tuple(args.workloads.split(",")), args.rounds)
    print(json.dumps(result) if args.json else render(result))


if __name__ == "__main__":
    main()
