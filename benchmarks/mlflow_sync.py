"""What ``mindexp mlflow`` costs: runs of N steps of three metrics (loss, lr,
grad_norm) copied into a real ``mlflow server`` (SQLite backend) started here
on 127.0.0.1, at two sizes to show how the cost grows; then a second sync of
the larger run (nothing new: what an idempotent re-sync costs).

    .venv/bin/python benchmarks/mlflow_sync.py [--sizes 1000,10000]
    .venv/bin/python benchmarks/mlflow_sync.py --twelve [--scales 0.25,1] [--params summary,none]

``--twelve``: the first sync of 12 ordinary runs as the issue measured them
(11 runs of 1,700 steps and one of 2,800; 32 points a step with every row
of params.csv: loss, lr, grad_norm and 29 parameter rows, a 10-element
weight, a 3-element head, a scalar bias and three large parameters' five
statistics: 688,000 points with ``--params all``), at two scales of their
steps, for each ``--params`` choice (``summary`` is the default); then the
same sync again (nothing new: the local record answers), in this process
and as the command a user types (``python -m mindexp mlflow ...``, a new
interpreter, timed whole, checked not to import mlflow).
    .venv/bin/python benchmarks/run.py --only mlflow      (the same, in the suite's table)
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home):
    """An ``mlflow server`` on a free port with a SQLite backend; returns (process, uri)."""
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
         "--artifacts-destination", f"{home}/artifacts"],
        cwd=home, stdout=subprocess.DEVNULL, stderr=open(os.path.join(home, "server.log"), "wb"))
    end = time.monotonic() + 600
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(uri + "/health", timeout=5) as answer:
                if answer.status == 200:
                    return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not answer /health")


def make_run(root, run_id, steps):
    """A finished run directory with ``steps`` rows of loss, lr and grad_norm."""
    from mindexp.callbacks import schema
    from mindexp import layout
    run_dir = os.path.join(root, "bench", run_id)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, layout.CONFIG_JSON), "w", encoding="utf-8") as f:
        json.dump({"seed": 0, "epochs": 1, "lr": 0.1}, f)
    with open(os.path.join(run_dir, layout.RUN_JSON), "w", encoding="utf-8") as f:
        json.dump({"experiment": "bench", "run_id": run_id, "status": "completed",
                   "started_at": "2026-01-01T00:00:00+00:00",
                   "ended_at": "2026-01-01T00:01:00+00:00", "steps": steps}, f)
    with open(schema.path_of(run_dir, "loss"), "w", encoding="utf-8") as f:
        f.write("step,epoch,loss,lr\n")
        f.writelines(f"{i},1,{1.0 / i:.6f},0.1\n" for i in range(1, steps + 1))
    with open(schema.path_of(run_dir, "grad_norm"), "w", encoding="utf-8") as f:
        f.write("step,epoch,grad_norm\n")
        f.writelines(f"{i},1,{2.0 / i:.6f}\n" for i in range(1, steps + 1))
    return run_dir


PARAM_ROWS = ([f"dense.weight[{i}]" for i in range(10)] + [f"head.weight[{i}]" for i in range(3)]
              + ["dense.bias"] + [f"conv{k}.weight:{s}" for k in range(3)
                                  for s in ("norm", "mean", "std", "min", "max")])


def make_ordinary_run(root, run_id, steps):
    """A finished run of ``steps`` steps with loss, lr, grad_norm and the 29 rows of
    params.csv a step (see ``--twelve``)."""
    run_dir = make_run(root, run_id, steps)
    from mindexp.callbacks import schema
    from mindexp import layout
    with open(schema.path_of(run_dir, "params"), "w", encoding="utf-8") as f:
        f.write("step,epoch,param,value\n")
        for i in range(1, steps + 1):
            f.writelines(f"{i},1,{name},{(j + 1) / (i + 1):.6f}\n"
                         for j, name in enumerate(PARAM_ROWS))
    return run_dir


def measure_twelve(scales=(0.25, 1.0), choices=("summary", "none")):
    """``{"twelve_<params>_<scale>": (wall s, points), "twelve_noop_<params>_<scale>": wall s}``."""
    from mindexp import to_mlflow
    result = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as home:
        server, uri = start_server(home)
        try:
            to_mlflow(make_run(home, "warm", 10), uri)
            for params in choices:
                for scale in scales:
                    root = os.path.join(home, f"{params}-{scale}")
                    steps = [int(1700 * scale)] * 11 + [int(2800 * scale)]
                    dirs = [make_ordinary_run(root, f"r{k}", n) for k, n in enumerate(steps)]
                    wall = time.perf_counter()
                    done = to_mlflow(dirs, uri, params=params)
                    result[f"twelve_{params}_{scale}"] = (time.perf_counter() - wall,
                                                          sum(d["points"] for d in done))
                    wall = time.perf_counter()
                    to_mlflow(dirs, uri, params=params)
                    result[f"twelve_noop_{params}_{scale}"] = time.perf_counter() - wall
                    result[f"command_noop_{params}_{scale}"] = _noop_command(dirs, uri, params)
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["load_after"] = os.getloadavg()
    return result


def _noop_command(dirs, uri, params):
    """``(wall s, mlflow imported)`` of ``python -m mindexp mlflow DIRS`` with nothing new."""
    probe = ("import json, runpy, sys\n"
             "try:\n    runpy.run_module('mindexp', run_name='__main__')\n"
             "except SystemExit as exc:\n    code = exc.code\n"
             "print(json.dumps([code, 'mlflow' in sys.modules]), file=sys.stderr)\n")
    wall = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe, "mlflow", *dirs, "--tracking-uri", uri,
                           "--params", params], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - wall
    code, imported = json.loads(done.stderr.strip().splitlines()[-1])
    assert code in (0, None) and "(0 new metric points)" in done.stdout, done.stderr
    return wall, imported


def render_twelve(result):
    """The ``--twelve`` result as lines of text."""
    lines = [f"load average before: {' '.join(f'{v:.2f}' for v in result['load_before'])}, "
             f"after: {' '.join(f'{v:.2f}' for v in result['load_after'])} ({os.cpu_count()} cores)"]
    for key, value in result.items():
        if key.startswith("command_noop_"):
            lines.append(f"12 runs again, nothing new, as a command ({key[13:]}): {value[0]:.2f} s "
                         f"wall, interpreter start included; mlflow imported: {value[1]}")
        elif key.startswith("twelve_noop_"):
            lines.append(f"12 runs again, nothing new ({key[12:]}): {value:.2f} s")
        elif key.startswith("twelve_"):
            lines.append(f"first sync of 12 runs, --params {key[7:]}: {value[0]:.1f} s "
                         f"({value[1]:,} points)")
    return "\n".join(lines)


def _cpu_s(proc):
    """CPU seconds used so far by ``proc`` and its children (the server's workers)."""
    import psutil
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _sync(uri, run_dir, server):
    """(wall s, (our CPU s, the server's CPU s), points) of one ``to_mlflow``."""
    from mindexp import to_mlflow
    wall, cpu, served = time.perf_counter(), time.process_time(), _cpu_s(server)
    [done] = to_mlflow(run_dir, uri)
    return (time.perf_counter() - wall, (time.process_time() - cpu, _cpu_s(server) - served),
            done["points"])


def measure(sizes=(1000, 10000)):
    """``{"sync_<n>": s, "sync_<n>_cpu": (ours, server), "resync_<n>": s, "load_before":
    (1, 5, 15 min), "load_after": ...}``: each size synced into one fresh server, then
    the largest again (nothing new)."""
    import psutil
    from mindexp import to_mlflow
    result = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as home:
        server, uri = start_server(home)
        try:
            to_mlflow(make_run(home, "warm", 10), uri)  # the server's first answers are slow
            ps = psutil.Process(server.pid)
            for n in sizes:
                run_dir = make_run(home, f"r{n}", n)
                result[f"sync_{n}"], result[f"sync_{n}_cpu"], points = _sync(uri, run_dir, ps)
                assert points == 3 * n, points
            result[f"resync_{n}"], result[f"resync_{n}_cpu"], points = _sync(uri, run_dir, ps)
            assert points == 0, points
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["load_after"] = os.getloadavg()
    return result


def render(result):
    """The result as lines of text."""
    lines = [f"load average (1, 5, 15 min) before: "
             f"{' '.join(f'{v:.2f}' for v in result['load_before'])}, "
             f"after: {' '.join(f'{v:.2f}' for v in result['load_after'])} "
             f"({os.cpu_count()} cores)"]
    sizes = sorted(int(k[5:]) for k in result if k.startswith("sync_") and k[5:].isdigit())
    for n in sizes:
        s, (cpu, served) = result[f"sync_{n}"], result[f"sync_{n}_cpu"]
        lines.append(f"mlflow sync {n:>6} steps x 3 metrics: {s:6.2f} s "
                     f"({3 * n / s:,.0f} points/s; CPU s: ours {cpu:.2f}, server {served:.2f})")
    if len(sizes) > 1:
        a, b = sizes[0], sizes[-1]
        lines.append(f"cost grows x{result[f'sync_{b}'] / result[f'sync_{a}']:.1f} "
                     f"for x{b / a:g} the steps")
    for k in [k for k in result if k.startswith("resync_") and k[7:].isdigit()]:
        lines.append(f"mlflow sync of the {k[7:]}-step run again, nothing new: {result[k]:.2f} s")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000", help="steps per run, comma-separated")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--twelve", action="store_true", help="12 ordinary runs (see above)")
    p.add_argument("--scales", default="0.25,1", help="--twelve: scales of the runs' steps")
    p.add_argument("--params", default="summary,none", help="--twelve: the choices measured")
    args = p.parse_args(argv)
    if args.twelve:
        result = measure_twelve(tuple(float(s) for s in args.scales.split(",")),
                                tuple(args.params.split(",")))
        print(json.dumps(result) if args.json else render_twelve(result))
        return
    result = measure(tuple(int(s) for s in args.sizes.split(",")))
    print(json.dumps(result) if args.json else render(result))


if __name__ == "__main__":
    main()
