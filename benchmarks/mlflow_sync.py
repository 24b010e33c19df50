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

``--twelve --ab COMMIT``: the same 12 runs (``--params summary``, scale 1) synced
by the code of git commit COMMIT (A) and by the working tree (B) into one
server, in the order A B B A per round (``--rounds``), each variant in a
process of its own whose ``mindexp`` is a copy of that tree (framework/,
callbacks/, experiments/), into an MLflow experiment of its own; for each:
the first sync's wall time, our CPU (the syncing process's) and the server's
CPU, then the no-op sync as the command a user types (a new interpreter,
timed whole, with what it imported of mlflow, pandas and numpy). Prints
medians and the ratios B / A.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import tarfile
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


# -- --ab: a commit against the working tree, in one run -------------------------------
AB_TREES = (("framework", ""), ("callbacks", "callbacks"), ("experiments", "experiments"))
AB_MODULES = ("mlflow", "pandas", "numpy")


def ab_tree(rev, dest):
    """A folder whose ``mindexp`` package is the code of ``rev`` (None: the working
    tree), laid out as setup.cfg installs it; returns the folder (for PYTHONPATH)."""
    pkg = os.path.join(dest, "mindexp")
    if rev is None:
        for src, sub in AB_TREES:
            shutil.copytree(os.path.join(ROOT, src), os.path.join(pkg, sub), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        return dest
    os.makedirs(dest)
    archive = os.path.join(dest, "tree.tar")
    subprocess.run(["git", "archive", "-o", archive, rev, *[src for src, _ in AB_TREES]],
                   cwd=ROOT, check=True)
    unpacked = os.path.join(dest, "src")
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    for src, sub in AB_TREES:
        shutil.copytree(os.path.join(unpacked, src), os.path.join(pkg, sub), dirs_exist_ok=True)
    return dest


CHILD = """
import json, sys, time
from mindexp import to_mlflow
dirs, uri, experiment = sys.argv[1:-2], sys.argv[-2], sys.argv[-1]
wall, cpu = time.perf_counter(), time.process_time()
done = to_mlflow(dirs, uri, experiment=experiment)
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu,
                  sum(d["points"] for d in done)]))
"""

NOOP = """
import json, runpy, sys
try:
    runpy.run_module("mindexp", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr)
""" % (AB_MODULES,)


def _ab_env(tree):
    """The environment of a variant's process: its tree first on the path."""
    return dict(os.environ, PYTHONPATH=tree, MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")


def _ab_once(tree, dirs, uri, experiment, server):
    """One variant's first sync of ``dirs`` and its no-op command: a dict of figures."""
    served = _cpu_s(server)
    done = subprocess.run([sys.executable, "-c", CHILD, *dirs, uri, experiment],
                          env=_ab_env(tree), capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    wall, cpu, points = json.loads(done.stdout.strip().splitlines()[-1])
    served = _cpu_s(server) - served
    noop_wall = time.perf_counter()
    again = subprocess.run([sys.executable, "-c", NOOP, "mlflow", *dirs, "--tracking-uri", uri,
                            "--experiment", experiment], env=_ab_env(tree), capture_output=True,
                           text=True, check=False)
    noop_wall = time.perf_counter() - noop_wall
    if again.returncode or again.stdout.count("(0 new metric points)") != len(dirs):
        raise RuntimeError(again.stdout[-1000:] + again.stderr[-2000:])
    imported = json.loads(again.stderr.strip().splitlines()[-1])
    return {"wall": wall, "cpu": cpu, "server_cpu": served, "points": points,
            "noop": noop_wall, "imported": imported}


def measure_ab(rev, rounds=2):
    """``{"A": [figures per try], "B": [...], "rev": rev, "load_before", "load_after"}``."""
    import psutil
    from mindexp import to_mlflow
    result = {"rev": rev, "A": [], "B": [], "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as home:
        trees = {"A": ab_tree(rev, os.path.join(home, "tree-a")),
                 "B": ab_tree(None, os.path.join(home, "tree-b"))}
        server, uri = start_server(home)
        try:
            to_mlflow(make_run(home, "warm", 10), uri)  # the server's first answers are slow
            ps = psutil.Process(server.pid)
            for r in range(rounds):
                for k, variant in enumerate("ABBA"):
                    root = os.path.join(home, f"ab-{r}-{k}")
                    steps = [1700] * 11 + [2800]
                    dirs = [make_ordinary_run(root, f"r{j}", n) for j, n in enumerate(steps)]
                    figures = _ab_once(trees[variant], dirs, uri, f"ab-{r}-{k}-{variant}", ps)
                    result[variant].append(figures)
                    print(f"round {r + 1} {variant}: first sync {figures['wall']:.1f} s, "
                          f"no-op {figures['noop']:.2f} s", file=sys.stderr, flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["load_after"] = os.getloadavg()
    return result


def render_ab(result):
    """The ``--ab`` result as lines of text: medians of A and B and B / A."""
    def med(variant, key):
        return statistics.median(f[key] for f in result[variant])
    lines = [f"12 runs (11 x 1,700 steps + 2,800; --params summary), A = {result['rev']}, "
             f"B = working tree; {len(result['A'])} tries each (A B B A per round); load "
             f"{' '.join(f'{v:.1f}' for v in result['load_before'])} -> "
             f"{' '.join(f'{v:.1f}' for v in result['load_after'])} ({os.cpu_count()} cores)",
             f"{'':<34}{'A':>9}{'B':>9}{'B / A':>8}"]
    for key, what in (("wall", "first sync, wall s"), ("cpu", "first sync, our CPU s"),
                      ("server_cpu", "first sync, the server's CPU s"),
                      ("noop", "no-op sync as a command, wall s")):
        a, b = med("A", key), med("B", key)
        lines.append(f"{what:<34}{a:9.2f}{b:9.2f}{b / a:7.2f}x")
    for variant in "AB":
        points = {f["points"] for f in result[variant]}
        imported = sorted({m for f in result[variant] for m in f["imported"]})
        lines.append(f"{variant}: points sent {', '.join(f'{p:,}' for p in sorted(points))}; "
                     f"the no-op imported: {', '.join(imported) or 'none of ' + '/'.join(AB_MODULES)}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000", help="steps per run, comma-separated")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--twelve", action="store_true", help="12 ordinary runs (see above)")
    p.add_argument("--scales", default="0.25,1", help="--twelve: scales of the runs' steps")
    p.add_argument("--params", default="summary,none", help="--twelve: the choices measured")
    p.add_argument("--ab", metavar="COMMIT", help="--twelve: COMMIT's code against the working "
                   "tree's, interleaved in one run (see above)")
    p.add_argument("--rounds", type=int, default=2, help="--ab: rounds of A B B A")
    args = p.parse_args(argv)
    if args.twelve and args.ab:
        result = measure_ab(args.ab, args.rounds)
        print(json.dumps(result) if args.json else render_ab(result))
        return
    if args.twelve:
        result = measure_twelve(tuple(float(s) for s in args.scales.split(",")),
                                tuple(args.params.split(",")))
        print(json.dumps(result) if args.json else render_twelve(result))
        return
    result = measure(tuple(int(s) for s in args.sizes.split(",")))
    print(json.dumps(result) if args.json else render(result))


if __name__ == "__main__":
    main()
