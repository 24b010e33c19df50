"""The interactive report at scale: 50 runs x 10,000 steps (the budget:
under 20 MB, drawn by Chromium in under 5 s).

Writes the runs by hand (loss with lr and time, two tracked parameters, eval
every 100 steps), times `mindexp report`, then opens the file in headless
Chromium (Debian's, through Playwright) and times until every figure is
drawn. Prints each number and its ratio to the budget.

    .venv/bin/python benchmarks/report_size.py [--runs 50] [--steps 10000]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from rundirs import make_run  # noqa: E402

SIZE_BUDGET_MB, OPEN_BUDGET_S = 20.0, 5.0


def write_runs(root, runs, steps):
    rng = np.random.default_rng(0)
    for i in range(runs):
        losses = np.exp(-np.arange(steps) / (steps / 3)) * (1 + 0.2 * rng.random(steps))
        make_run(root, f"20260101-000000-r{i:02d}-{i:06x}", config={"lr": 0.001 * (i + 1)},
                 losses=losses.tolist(), params={"w": (2 - losses).tolist(),
                                                 "b": (losses / 10).tolist()},
                 targets={"w": 2.0, "b": 0.0}, steps_per_epoch=100,
                 eval_rows=[{"epoch": e, "step": 100 * e, "mae": float(losses[100 * e - 1])}
                            for e in range(1, steps // 100 + 1)])


def open_time(path):
    from playwright.sync_api import sync_playwright
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        start = time.perf_counter()
        page.goto(f"file://{path}")
        page.wait_for_function("document.querySelectorAll('.card').length > 0 && "
                               "Array.from(document.querySelectorAll('.card .plot'))"
                               ".every(p => p.querySelector('.main-svg'))", timeout=120000)
        elapsed = time.perf_counter() - start
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        figures = page.evaluate("document.querySelectorAll('.card').length")
        browser.close()
    # TaskDuration: the renderer's main thread busy time, what a free machine's wait
    # would be; the wall time also counts waiting for a core on a busy machine.
    return elapsed, metrics.get("TaskDuration", float("nan")), figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=10000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="mindexp-report-bench-")
    try:
        write_runs(root, args.runs, args.steps)
        from mindexp.cli.main import main as cli
        out = os.path.join(root, "report.html")
        start = time.perf_counter()
        assert cli(["report", root, "--out", out]) == 0
        write_s = time.perf_counter() - start
        size_mb = os.path.getsize(out) / 2**20
        print(f"{args.runs} runs x {args.steps} steps: report written in {write_s:.1f} s")
        print(f"size        {size_mb:6.2f} MB   {size_mb / SIZE_BUDGET_MB:.2f} of the "
              f"{SIZE_BUDGET_MB:g} MB budget")
        seconds, busy, figures = open_time(out)
        print(f"open+draw   {seconds:6.2f} s    {seconds / OPEN_BUDGET_S:.2f} of the "
              f"{OPEN_BUDGET_S:g} s budget, wall time ({figures} figures, Chromium headless)")
        print(f"main thread {busy:6.2f} s    {busy / OPEN_BUDGET_S:.2f} of the budget "
              f"(busy time; os.getloadavg()[0] = {os.getloadavg()[0]:.1f})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
