"""Time ``mindexp.compare()`` and ``history()`` over many long runs, in its own process (goal 5).

    python benchmarks/comparerun.py RUNS STEPS ROOT [HISTORY_RUNS]

Makes one real (tiny) run of the seed experiment as a template, copies it
RUNS times with loss.csv, params.csv and grad_norm.csv of STEPS steps each
(the files as the callbacks write them; hard links of one copy, so 2,000
runs take no disk), run.json as the runner leaves a finished run (with the
log summary), then times ``compare(ROOT/linear)`` and
``history(<HISTORY_RUNS of them>, "loss")``. Prints one JSON line. Exit 3
when this branch has no ``mindexp.compare``.
"""
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")


def _csv(header, rows):
    return header + "\n" + "\n".join(rows) + "\n"


def make_runs(n_runs, steps, root):
    import numpy as np

    from mindexp.experiments.linear import Linear
    template = Linear(epochs=1).run(out=root, quiet=True).dir
    parent = os.path.dirname(template)
    spe = 10
    step = np.arange(1, steps + 1)
    epoch = (step - 1) // spe + 1
    loss = np.exp(-step / 500.0) + 1e-4
    t = step * 1e-3
    loss_csv = _csv("step,epoch,loss,lr,time_s",
                    (f"{s},{e},{v:.9g},0.2,{ts:.6f}" for s, e, v, ts in zip(step, epoch, loss, t)))
    params_csv = _csv("step,epoch,param,value",
                      (f"{s},{e},{name},{v:.9g}" for s, e, v in zip(step, epoch, 2 - loss)
                       for name in ("dense.weight", "dense.bias")))
    grad_csv = _csv("step,epoch,grad_norm",
                    (f"{s},{e},{v:.9g}" for s, e, v in zip(step, epoch, loss * 3)))
    with open(os.path.join(template, "run.json")) as f:
        meta = json.load(f)
    logs = os.path.join(root, "logs")
    os.makedirs(logs)
    for name, text in (("loss.csv", loss_csv), ("params.csv", params_csv),
                       ("grad_norm.csv", grad_csv)):
        with open(os.path.join(logs, name), "w") as f:
            f.write(text)
    summary = None
    for i in range(n_runs):
        run_id = f"bench-{i:04d}"
        d = os.path.join(parent, run_id)
        shutil.copytree(template, d, ignore=shutil.ignore_patterns("checkpoints", "*.csv"))
        for name in os.listdir(logs):
            _link(os.path.join(logs, name), os.path.join(d, name))
        meta.update(run_id=run_id, steps=int(steps), epochs=int(epoch[-1]))
        if summary is None:
            summary = _summary(d)
        if summary is not None:
            meta["summary"] = summary
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(meta, f)
    shutil.rmtree(template)
    return parent


def _link(src, dst):
    try:
        os.link(src, dst)
    except OSError:   # another file system: a copy
        shutil.copyfile(src, dst)


def _summary(run_dir):
    """The summary the runner keeps in run.json at a run's end (None on a branch without it)."""
    try:
        from mindexp.rundir.summary import log_summary
    except ImportError:
        return None
    from mindexp import Run
    return log_summary(Run(run_dir))


def main():
    n_runs, steps, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    history_runs = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    try:
        from mindexp import compare
    except ImportError:
        print(json.dumps({"skip": "framework.compare does not exist on this branch yet"}))
        sys.exit(3)
    parent = make_runs(n_runs, steps, root)
    import pandas  # noqa: F401  (imported before the clock: a report session has it)
    t0, c0 = time.perf_counter(), time.process_time()
    table = compare(parent)
    secs = time.perf_counter() - t0
    # CPU seconds too: on a shared machine the wall clock also counts the waits for a core
    res = {"runs": len(table), "steps": steps, "seconds": secs,
           "cpu_seconds": time.process_time() - c0}
    if history_runs:
        from mindexp import history
        dirs = sorted(os.path.join(parent, d) for d in os.listdir(parent))[:history_runs]
        t0, c0 = time.perf_counter(), time.process_time()
        frame = history(dirs, "loss")
        res.update(history_runs=len(dirs), history_rows=len(frame),
                   history_seconds=time.perf_counter() - t0,
                   history_cpu_seconds=time.process_time() - c0)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
