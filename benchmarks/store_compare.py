"""compare() of N runs through the run store after each kind of change, whole processes.

    python benchmarks/store_compare.py N OUT [--before PYTHON] [--template RUN]  ->  one JSON line

Builds N runs under OUT/runs/linear/ as ``catalogrun.py`` does (one real
run copied: run.json and config.json per copy, logs hard-linked), then, for
this interpreter's mindexp (``after``) and, with ``--before``, another one
(main's, say), each figure ``compare(ROOT)`` in a process of its own, import
excluded (``*_s`` wall, ``*_cpu_s`` CPU seconds, the figure a busy machine
disturbs least):

- ``cold``: no compare() snapshot yet, the index made (``mindexp runs``);
- ``snapshot``: the next call, nothing changed;
- ``added``: after a run folder was copied in by hand;
- ``changed``: after ``mindexp note RUN`` rewrote a run's run.json;
- ``removed``: after a run folder was removed by hand;
- ``again``: once more, nothing changed (the changes piled up since the
  snapshot was written are applied again when they were too few to write it).

``*_load`` is the machine's one-minute load average before each figure (on a
two-core machine, above 2 the wall clock says more about the neighbours).

The index and snapshots are removed before each interpreter's turn; the runs
are put back as they were after it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.catalogrun import COMPARE, build, timed_process, train_template  # noqa: E402


def _compare(python, root):
    out = subprocess.run([python, "-c", COMPARE, root], capture_output=True, text=True,
                         check=True, timeout=3600, env=dict(os.environ, GLOG_v="3"))
    seconds, cpu, rows = out.stdout.split()[:3]
    return float(seconds), float(cpu), int(rows)


def measure(python, root, label):
    """Each figure for one interpreter's mindexp (see the module's docstring)."""
    catalog = os.path.join(root, ".mindexp-catalog")
    shutil.rmtree(catalog, ignore_errors=True)
    timed_process([python, "-m", "mindexp", "runs", root, "--limit", "1"])   # the index
    folder = os.path.join(root, "linear")
    runs = sorted(os.listdir(folder))
    copy, noted, removed = os.path.join(folder, "zz-copied"), runs[len(runs) // 2], runs[1]
    kept = os.path.join(os.path.dirname(root), "removed-run")
    res = {}

    def step(name):
        res[f"{name}_load"] = round(os.getloadavg()[0], 2)
        res[f"{name}_s"], res[f"{name}_cpu_s"], res[f"{name}_rows"] = _compare(python, root)

    step("cold")
    step("snapshot")
    shutil.copytree(os.path.join(folder, runs[0]), copy)
    step("added")
    subprocess.run([python, "-m", "mindexp", "note", os.path.join(folder, noted),
                    f"checked {time.time()}"], check=True, capture_output=True)
    step("changed")
    shutil.move(os.path.join(folder, removed), kept)
    step("removed")
    step("again")
    shutil.rmtree(copy)
    shutil.move(kept, os.path.join(folder, removed))
    return {f"{label}_{k}": v for k, v in res.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int)
    p.add_argument("out")
    p.add_argument("--before", help="an interpreter with the mindexp to compare against")
    p.add_argument("--template", help="a run folder to copy (default: train one)")
    args = p.parse_args(argv)
    root = os.path.join(args.out, "runs")
    res = {"runs": args.n}
    done = os.path.join(args.out, "built")
    if not os.path.exists(done):   # a build cut short goes on where it stopped
        trained = os.path.join(args.out, "template")
        template = args.template or (os.path.join(trained, "linear", os.listdir(
            os.path.join(trained, "linear"))[0]) if os.path.isdir(trained)
            else train_template(trained, sys.executable))
        start = time.perf_counter()
        build(template, root, args.n)
        res["build_s"] = time.perf_counter() - start
        open(done, "w").close()
    if args.before:
        res.update(measure(args.before, root, "before"))
    res.update(measure(sys.executable, root, "after"))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
