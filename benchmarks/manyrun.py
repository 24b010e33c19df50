"""Listing, comparing, polling and drawing many runs, one process.

    python benchmarks/manyrun.py N OUT [--full-data] [--report] [--steps S]  ->  one JSON line

Writes N finished runs of S steps (default 300: run.json with its summary,
config.json, loss.csv) under OUT/many/, then times: the runs table
(``mindexp runs``) with no index and with a current one, ``compare()``,
``history()`` of the loss, and a dashboard started as ``mindexp serve`` in
its own process: a poll of ``/api/changes`` when nothing changed (seconds
and bytes), the first page of ``/api/runs``, the page in headless Chromium
(until the runs table is painted, until the first curve is drawn: needs
playwright and chromium) and the server's resident memory after it (``MANYRUN_SCREENSHOT=PATH``: a
screenshot of the page, 1280 px wide). With
``--full-data`` the dashboard's default ``/api/data`` answer; with
``--report`` ``mindexp report`` (seconds and bytes).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STEPS = 300
HISTORY_MAX_RUNS = 1000   # history() measured up to here (69 s at 10,000 x 300 under load)


def write_runs(out, n, steps=STEPS):
    """N runs of ``steps`` steps, as the runner leaves them (summary in run.json)."""
    from mindexp.callbacks import schema
    from mindexp import layout
    from mindexp.rundir.summary import SUMMARY_VERSION
    rows = "".join(f"{s},{(s - 1) // 30 + 1},{0.9 ** (s / 30):.6f}\n" for s in range(1, steps + 1))
    for i in range(n):
        run_dir = os.path.join(out, "many", f"20260101-{i:06d}-sgd-{i:06x}")
        os.makedirs(run_dir)
        loss = 0.9 ** (steps / 30) * (1 + i / n)
        meta = {"experiment": "many", "run_id": os.path.basename(run_dir), "status": "completed",
                "started_at": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
                "steps": steps, "epochs": -(-steps // 30),
                "final_loss": loss, "train_time_s": 3.0, "steps_per_s": 100.0, "params": {},
                "summary": {"version": SUMMARY_VERSION, "params": {}, "eval": {},
                            "loss": {"rows": steps, "final": loss, "min": loss, "best_step": steps,
                                     "last_step": steps, "last_epoch": -(-steps // 30), "components": {}}}}
        for name, data in ((layout.RUN_JSON, json.dumps(meta)),
                           (layout.CONFIG_JSON, json.dumps({"lr": 0.001 * (1 + i % 97),
                                                            "optimizer": "sgd", "epochs": 10})),
                           (schema.LOSS.filename, "step,epoch,loss\n" + rows)):
            with open(os.path.join(run_dir, name), "w") as f:
                f.write(data)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure(n, out, full_data, report=False, steps=STEPS):
    from mindexp import compare
    from mindexp.manage.runs import runs_table
    import pandas  # noqa: F401  (imported before the clocks start, as in a warm session)
    folder = os.path.join(out, "many")
    if not os.path.isdir(folder):   # a folder of an earlier call is measured again as it is
        write_runs(out, n, steps)
    res = {"runs": n, "steps": steps}
    res["runs_cold_s"], table = timed(lambda: runs_table([folder]))
    assert len(table) == n
    res["runs_warm_s"], _ = timed(lambda: runs_table([folder]))
    res["compare_s"], table = timed(lambda: compare(folder))
    assert len(table) == n
    if n <= HISTORY_MAX_RUNS:   # history() compares curves: 10,000 of them is a table's job
        res.update(measure_history(folder))
    res.update(measure_dashboard(folder, full_data))
    if report:
        target = os.path.join(out, "report.html")
        res["report_s"], done = timed(lambda: subprocess.run(
            [sys.executable, "-m", "mindexp", "report", folder, "--out", target],
            capture_output=True, text=True, timeout=3600))
        assert done.returncode == 0, done.stderr
        res["report_bytes"] = os.path.getsize(target)
    return res


def measure_history(folder):
    """history() of the loss over every run: seconds, CPU seconds, and the
    process's peak resident memory after it (tracemalloc would miss pyarrow's
    allocator; what ran before, the listing and compare(), peaks far lower)."""
    import resource
    from mindexp import history
    cpu = time.process_time()
    seconds, table = timed(lambda: history(folder, "loss"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KB on Linux
    return {"history_s": seconds, "history_cpu_s": time.process_time() - cpu,
            "history_rows": len(table), "history_peak_mb": peak}


def measure_dashboard(folder, full_data):
    """``mindexp serve`` in its own process: polls, the table's first page, the page
    in headless Chromium, the server's RSS."""
    import psutil
    server = subprocess.Popen([sys.executable, "-m", "mindexp", "serve", folder, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = re.search(r"http://\S+/", server.stdout.readline()).group(0).rstrip("/")

        def get(path):
            with urllib.request.urlopen(base + path, timeout=600) as r:
                return r.read()
        res = {}
        res["first_poll_s"], body = timed(lambda: get("/api/changes"))
        cursor = json.loads(body)["cursor"]
        res["poll_s"], body = timed(lambda: get(f"/api/changes?cursor={cursor}"))
        res["poll_bytes"] = len(body)
        res["table_first_s"], body = timed(lambda: get("/api/runs?limit=100"))
        res["table_s"], body = timed(lambda: get("/api/runs?limit=100&sort=final_loss&q=sgd"))
        res["table_bytes"] = len(body)
        res.update(measure_page(base, os.environ.get("MANYRUN_SCREENSHOT")))
        res["poll_after_page_s"], body = timed(lambda: get(f"/api/changes?cursor={cursor}"))
        if full_data:
            res["data_s"], body = timed(lambda: get("/api/data"))
            res["data_bytes"] = len(body)
        res["server_rss_mb"] = psutil.Process(server.pid).memory_info().rss / 2 ** 20
        return res
    finally:
        server.terminate()
        server.wait(timeout=60)


def measure_page(base, screenshot=None):
    """Seconds from opening the page until the runs table is painted and until the
    first curve is drawn (headless Chromium), the page's requests in its first
    10 s; {} without playwright or chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {}
    if chromium is None:
        return {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(300_000)
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        start = time.perf_counter()
        page.goto(base + "/")
        page.wait_for_selector("#runs tbody tr")
        table_s = time.perf_counter() - start
        page.wait_for_selector(".card .main-svg")
        curves_s = time.perf_counter() - start
        page.wait_for_timeout(5000)
        if screenshot:
            page.screenshot(path=screenshot)
        browser.close()
    return {"paint_table_s": table_s, "paint_curves_s": curves_s,
            "page_data_requests": sum("/api/data" in u for u in requests),
            "page_polls": sum("/api/changes" in u for u in requests)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else STEPS
    print(json.dumps(measure(int(argv[0]), argv[1], "--full-data" in argv, "--report" in argv,
                             steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
