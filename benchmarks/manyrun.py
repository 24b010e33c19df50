"""Listing, comparing and polling many runs (issue 26), one process.

    python benchmarks/manyrun.py N OUT [--full-data]   ->  one JSON line

Writes N finished runs of 300 steps (run.json with its summary, config.json,
loss.csv) under OUT/many/, then times: the runs table (``mindexp runs``) with
no index and with a current one, ``compare()``, a dashboard poll of
``/api/changes`` when nothing changed (seconds and bytes) and, with
``--full-data``, the dashboard's full ``/api/data`` answer.
"""
import json
import os
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STEPS = 300


def write_runs(out, n):
    """N runs of STEPS steps, as the runner leaves them (summary in run.json)."""
    from mindexp.callbacks import schema
    from mindexp.rundir.summary import SUMMARY_VERSION
    rows = "".join(f"{s},{(s - 1) // 30 + 1},{0.9 ** (s / 30):.6f}\n" for s in range(1, STEPS + 1))
    for i in range(n):
        run_dir = os.path.join(out, "many", f"20260101-{i:06d}-sgd-{i:06x}")
        os.makedirs(run_dir)
        loss = 0.9 ** (STEPS / 30) * (1 + i / n)
        meta = {"experiment": "many", "run_id": os.path.basename(run_dir), "status": "completed",
                "started_at": f"2026-01-01T00:00:{i % 60:02d}+00:00", "steps": STEPS, "epochs": 10,
                "final_loss": loss, "train_time_s": 3.0, "steps_per_s": 100.0, "params": {},
                "summary": {"version": SUMMARY_VERSION, "params": {}, "eval": {},
                            "loss": {"rows": STEPS, "final": loss, "min": loss, "best_step": STEPS,
                                     "last_step": STEPS, "last_epoch": 10, "components": {}}}}
        for name, data in ((schema.RUN_JSON, json.dumps(meta)),
                           (schema.CONFIG_JSON, json.dumps({"lr": 0.001 * (1 + i % 97),
                                                            "optimizer": "sgd", "epochs": 10})),
                           (schema.LOSS.filename, "step,epoch,loss\n" + rows)):
            with open(os.path.join(run_dir, name), "w") as f:
                f.write(data)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure(n, out, full_data):
    from mindexp import compare
    from mindexp.analysis.dashboard import make_server
    from mindexp.manage.runs import runs_table
    import pandas  # noqa: F401  (imported before the clocks start, as in a warm session)
    write_runs(out, n)
    folder = os.path.join(out, "many")
    res = {"runs": n}
    res["runs_cold_s"], table = timed(lambda: runs_table([folder]))
    assert len(table) == n
    res["runs_warm_s"], _ = timed(lambda: runs_table([folder]))
    res["compare_s"], table = timed(lambda: compare(folder))
    assert len(table) == n
    server = make_server([folder], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://%s:%d" % server.server_address[:2]

    def get(path):
        with urllib.request.urlopen(base + path, timeout=600) as r:
            return r.read()
    res["first_poll_s"], body = timed(lambda: get("/api/changes"))
    cursor = json.loads(body)["cursor"]
    res["poll_s"], body = timed(lambda: get(f"/api/changes?cursor={cursor}"))
    res["poll_bytes"] = len(body)
    if full_data:
        res["data_s"], body = timed(lambda: get("/api/data"))
        res["data_bytes"] = len(body)
    server.shutdown()
    try:
        import resource
        res["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:
        pass
    return res


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    print(json.dumps(measure(int(argv[0]), argv[1], "--full-data" in argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
