"""What streaming a run to MLflow (``--mlflow``) costs the training: the seed's
Linear trained in this process with and without ``mlflow=URI`` (a real
``mlflow server`` started here), alternated, at two sizes (epochs); the
ratio of the median wall times (the sender is a process of its own; its
end-of-run sync happens after the run and is not counted).

    .venv/bin/python benchmarks/mlflow_live.py [--epochs 3,30] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.mlflow_sync import start_server  # noqa: E402


def _timed_run(out, epochs, uri):
    from mindexp.experiments.linear import Linear
    wall = time.perf_counter()
    Linear(epochs=epochs, seed=0).run(out=out, quiet=True, mlflow=uri)
    return time.perf_counter() - wall


def measure(sizes=(3, 30), repeats=3):
    """``{"epochs_<n>": (median s without, median s with, ratio)}``."""
    result = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as home:
        server, uri = start_server(home)
        try:
            _timed_run(os.path.join(home, "warm"), 1, None)  # MindSpore's first graph
            for epochs in sizes:
                plain, live = [], []
                for k in range(repeats):
                    plain.append(_timed_run(os.path.join(home, f"p{epochs}"), epochs, None))
                    live.append(_timed_run(os.path.join(home, f"l{epochs}"), epochs, uri))
                a, b = statistics.median(plain), statistics.median(live)
                result[f"epochs_{epochs}"] = (a, b, b / a)
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["load_after"] = os.getloadavg()
    return result


def render(result):
    lines = [f"load average before: {' '.join(f'{v:.2f}' for v in result['load_before'])}, "
             f"after: {' '.join(f'{v:.2f}' for v in result['load_after'])} ({os.cpu_count()} cores)"]
    for key in [k for k in result if k.startswith("epochs_")]:
        a, b, ratio = result[key]
        lines.append(f"Linear {key[7:]:>3} epochs: {a:6.2f} s without, {b:6.2f} s with --mlflow "
                     f"(x{ratio:.3f})")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", default="3,30", help="sizes, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = measure(tuple(int(s) for s in args.epochs.split(",")), args.repeats)
    print(json.dumps(result) if args.json else render(result))


if __name__ == "__main__":
    main()
