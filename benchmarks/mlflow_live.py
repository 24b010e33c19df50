"""What streaming a run to MLflow (``--mlflow``) costs the training, on the seed's
workloads (W1b: Linear, Dense(1,1) on y = 2x, 100 samples, batch 10, 100
epochs = 1,000 steps; FB: the seed's full batch, batch 100, 300 epochs = 300
steps), trained in this process three ways, interleaved round by round:

* ``off``: no ``mlflow=``;
* ``live``: ``mlflow=`` a real ``mlflow server`` started here (SQLite, 127.0.0.1);
* ``dead``: ``mlflow=`` a port where nothing listens (the sender's one warning,
  retries with a growing pause).

The figures: the ratio of the median (and of the fastest) wall time of
``Experiment.run`` with and without; and, what a saturated machine cannot
hide, the CPU seconds the sender took while the run trained (read as the
run returns) over the training's own CPU seconds: on a machine whose
cores are all busy the sender takes at most that share of the training's
time. The sender is a process of its own; after each run this waits for it
to exit (its end-of-run sync imports mlflow and logs the model: seconds of
CPU that must not fall into the next run's time) and reports those CPU
seconds apart.

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
    """``(wall s of the run, its CPU s, the sender's CPU s while it ran, the sender's
    CPU s in all)``; waits for the sender to exit."""
    import psutil
    from mindexp.experiments.linear import Linear
    from mindexp.train import mlflow_stream
    before = _children_cpu_s()
    wall, cpu = time.perf_counter(), time.process_time()
    Linear(seed=0, **config).run(out=out, quiet=True, mlflow=uri)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    during = 0.0
    for sender in list(mlflow_stream._SENDERS):
        try:
            times = psutil.Process(sender.pid).cpu_times()
            during += times.user + times.system
        except psutil.Error:  # already gone
            pass
    for sender in list(mlflow_stream._SENDERS):
        sender.wait(timeout=600)
    mlflow_stream._SENDERS.clear()
    return wall, cpu, during, _children_cpu_s() - before


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
                        wall, cpu, during, sender = _timed_run(
                            os.path.join(home, f"{name}-{mode}"), WORKLOADS[name], uris[mode])
                        times.setdefault(mode, []).append(wall)
                        times.setdefault(f"cpu_{mode}", []).append(cpu)
                        if mode != "off":
                            times.setdefault(f"during_{mode}", []).append(during)
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
        off, fast = statistics.median(times["off"]), min(times["off"])
        for mode in ("live", "dead"):
            med = statistics.median(times[mode])
            per_round = " ".join(f"{b / a:.2f}" for a, b in zip(times["off"], times[mode]))
            share = statistics.median(d / c for d, c in zip(times["during_" + mode],
                                                            times["cpu_" + mode]))
            lines.append(
                f"{name} {mode}: wall median {off:.2f} s off, {med:.2f} s on: x{med / off:.3f}; "
                f"fastest {fast:.2f} / {min(times[mode]):.2f} s: x{min(times[mode]) / fast:.3f} "
                f"(rounds: {per_round}); sender while training "
                f"{statistics.median(times['during_' + mode]):.3f} CPU-s = {100 * share:.1f} % of "
                f"the training's {statistics.median(times['cpu_' + mode]):.2f} CPU-s; after it "
                f"{statistics.median(times['sender_cpu_' + mode]):.2f} CPU-s in all")
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
