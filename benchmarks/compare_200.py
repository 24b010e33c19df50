"""How long ``compare()`` takes over 200 runs of 10,000 steps each.

Writes 200 synthetic run directories (run.json, config.json, loss.csv with
10,000 rows, params.csv with 2 parameters x 10,000 steps) into a temporary
folder, then times ``mindexp.compare`` on the folder: finding the runs,
reading and checking every file, and building the table.

    python benchmarks/compare_200.py [--runs 200] [--steps 10000] [--repeat 3]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mindexp import compare, load_runs  # noqa: E402  (after the path set-up)

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


def write_run(root, index, steps, rng):
    """One synthetic run: a decaying noisy loss and two parameters approaching targets."""
    run_id = f"20260101-000000-bench-{index:04d}"
    run_dir = os.path.join(root, "bench", run_id)
    os.makedirs(run_dir)
    lr = float(10 ** rng.uniform(-3, -1))
    config = {"seed": index, "epochs": steps // 100, "batch_size": 10,
              "optimizer": OPTIMIZERS[index % len(OPTIMIZERS)], "lr": lr, "samples": 1000}
    step = np.arange(1, steps + 1)
    epoch = (step - 1) // 100 + 1
    loss = np.exp(-step * lr / 10) + rng.normal(0, 1e-3, steps) ** 2
    _write_csv(os.path.join(run_dir, "loss.csv"), "step,epoch,loss,lr,time_s",
               np.column_stack([step, epoch, loss, np.full(steps, lr), step * 1e-3]),
               "%d,%d,%.8g,%.8g,%.6f")
    weight, bias = 2 - np.exp(-step * lr / 20), np.exp(-step * lr / 20)
    _write_params(os.path.join(run_dir, "params.csv"), step, epoch, weight, bias)
    _write_json(os.path.join(run_dir, "config.json"), config)
    _write_json(os.path.join(run_dir, "run.json"), {
        "experiment": "bench", "run_id": run_id, "status": "completed",
        "started_at": "2026-01-01T00:00:00+00:00", "ended_at": "2026-01-01T00:01:00+00:00",
        "steps": steps, "epochs": int(epoch[-1]), "final_loss": float(loss[-1]),
        "train_time_s": steps * 1e-3, "steps_per_s": 1000.0,
        "targets": {"dense.weight": 2.0, "dense.bias": 0.0},
        "params": {"dense.weight": float(weight[-1]), "dense.bias": float(bias[-1])},
        "error": None})


def _write_csv(path, header, rows, fmt):
    np.savetxt(path, rows, fmt=fmt, delimiter=",", header=header, comments="")


def _write_params(path, step, epoch, weight, bias):
    with open(path, "w") as f:
        f.write("step,epoch,param,value\n")
        f.writelines(f"{s},{e},dense.weight,{w:.8g}\n{s},{e},dense.bias,{b:.8g}\n"
                     for s, e, w, b in zip(step, epoch, weight, bias))


def _write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        for index in range(args.runs):
            write_run(root, index, args.steps, rng)
        print(f"wrote {args.runs} runs x {args.steps} steps in "
              f"{time.perf_counter() - start:.1f} s")
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            table = compare(root)
            timings.append(time.perf_counter() - start)
        start = time.perf_counter()
        runs = load_runs(root)
        loading = time.perf_counter() - start
        start = time.perf_counter()
        compare(runs)
        tabling = time.perf_counter() - start
    print(f"compare() over {len(table)} runs x {args.steps} steps: best {min(timings):.2f} s, "
          f"median {sorted(timings)[len(timings) // 2]:.2f} s of {args.repeat} "
          f"({min(timings) / len(table) * 1000:.1f} ms per run)")
    print(f"  of which load_runs (read + check files) {loading:.2f} s, "
          f"table from loaded runs {tabling:.2f} s")


if __name__ == "__main__":
    main()
