"""What grouping runs costs: ``compare(group_by=..., against=...)`` and
``history(group_by=...)`` on synthetic run folders, at two sizes each.

    python benchmarks/groups.py [--quick]   ->  one JSON line per measurement

compare: G groups x S seeds (``optimizer`` = the group, ``seed`` 0..S-1), each
run a finished one (its summary in run.json, as the runner leaves it), at
10 x 100 and 100 x 100 runs: ``compare(folder)`` once (it keeps a columnar
snapshot), then timed: the per-run table again (from the snapshot),
``compare(folder, group_by="optimizer")`` and the same ``against`` the first
group (paired tests: every group holds the same seeds), and the grouping
step alone (:func:`mindexp.analysis.groups.group_table` on the per-run table).

history: R runs (10 groups) of N steps each, at 100 x 1,000 and 100 x 10,000
steps: ``history(folder, "loss")`` and ``history(folder, "loss",
group_by="optimizer")``, each the best of three.

``--quick``: the smaller size of each only. Times are seconds (wall);
the targets: under 1 s for 10,000 runs grouped, under 2 s for the grouped
history of 100 runs x 10,000 steps.
"""
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def write_runs(folder, groups, seeds, steps):
    """``groups`` x ``seeds`` finished runs of ``steps`` loss rows each."""
    import numpy as np
    from mindexp import layout
    from mindexp.callbacks import schema
    from mindexp.rundir.summary import SUMMARY_VERSION
    rng = np.random.default_rng(0)
    step = np.arange(1, steps + 1)
    for g in range(groups):
        for seed in range(seeds):
            run_id = f"20260101-000000-g{g:03d}-s{seed:03d}"
            run_dir = os.path.join(folder, run_id)
            os.makedirs(run_dir)
            loss = np.exp(-step / (steps / 5)) * (1 + g / groups) + 0.01 * rng.random(steps)
            final, low = float(loss[-1]), float(loss.min())
            meta = {"experiment": "groups", "run_id": run_id, "status": "completed",
                    "started_at": "2026-01-01T00:00:00+00:00", "steps": steps, "epochs": 1,
                    "final_loss": final, "train_time_s": 3.0, "steps_per_s": steps / 3.0,
                    "params": {"w": 2.0 + rng.standard_normal() * 0.01},
                    "summary": {"version": SUMMARY_VERSION, "params": {}, "eval": {
                                    "eval_accuracy": 0.5 + g / (2 * groups) + 0.01 * rng.random()},
                                "loss": {"rows": steps, "final": final, "min": low,
                                         "best_step": int(loss.argmin()) + 1, "last_step": steps,
                                         "last_epoch": 1, "components": {}}}}
            config = {"optimizer": f"opt{g:03d}", "seed": seed, "lr": 0.1, "epochs": 1}
            rows = "\n".join(f"{s},1,{v:.6g}" for s, v in zip(step, loss))
            for name, text in ((layout.RUN_JSON, json.dumps(meta)),
                               (layout.CONFIG_JSON, json.dumps(config)),
                               (schema.LOSS.filename, f"step,epoch,loss\n{rows}\n")):
                with open(os.path.join(run_dir, name), "w") as f:
                    f.write(text)


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 4)


def measure_compare(tmp, groups, seeds):
    from mindexp import compare
    from mindexp.analysis.groups import group_table
    folder = os.path.join(tmp, f"compare-{groups}x{seeds}")
    write_runs(folder, groups, seeds, steps=20)
    start = time.perf_counter()
    table = compare(folder)
    first = time.perf_counter() - start
    assert len(table) == groups * seeds
    grouped = compare(folder, group_by="optimizer")
    assert len(grouped) == groups and (grouped["n"] == seeds).all()
    return {"what": "compare", "runs": groups * seeds, "groups": groups,
            "first_compare_s": round(first, 3),
            "per_run_table_s": best_of(lambda: compare(folder)),
            "group_by_s": best_of(lambda: compare(folder, group_by="optimizer")),
            "against_s": best_of(lambda: compare(folder, group_by="optimizer",
                                                 against="opt000")),
            "grouping_step_s": best_of(lambda: group_table(table, ["optimizer"]))}


def measure_history(tmp, runs, steps):
    from mindexp import history
    folder = os.path.join(tmp, f"history-{runs}x{steps}")
    write_runs(folder, 10, runs // 10, steps)
    grouped = history(folder, "loss", group_by="optimizer")
    assert len(grouped) == 10 * steps and (grouped["n"] == runs // 10).all()
    return {"what": "history", "runs": runs, "steps": steps,
            "history_s": best_of(lambda: history(folder, "loss")),
            "grouped_s": best_of(lambda: history(folder, "loss", group_by="optimizer"))}


def main(argv):
    import pandas  # noqa: F401  (imported before the clocks start, as in a warm session)
    import scipy.stats  # noqa: F401
    quick = "--quick" in argv
    tmp = tempfile.mkdtemp(prefix="mindexp-groups-")
    try:
        for groups in (10,) if quick else (10, 100):
            print(json.dumps(measure_compare(tmp, groups, 100)), flush=True)
        for steps in (1000,) if quick else (1000, 10000):
            print(json.dumps(measure_history(tmp, 100, steps)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
