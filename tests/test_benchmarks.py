"""The benchmark suite runs and prints its table (timings are never asserted)."""
import json
import os
import re
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import run as bench  # noqa: E402


def _args(quick=True):
    return types.SimpleNamespace(quick=quick, rounds=1)


def _tp(rates):
    """Fake throughput results: {workload: {variant: steps/s}}."""
    return {"results": {k: {v: [{"steps_per_s": r}] for v, r in per.items()}
                        for k, per in rates.items()},
            "variants": list(next(iter(rates.values()))), "lightning_skip": None,
            "lightning_versions": None,
            "workloads": {k: {"title": k, "samples": 100, "batch": 10, "epochs": 1}
                          for k in rates}}


def test_goals_pass_miss_and_skip_without_measuring():
    rates = {k: {"hand": 1000.0, "mindexp_off": 800.0, "mindexp_on": 750.0,
                 "lightning": 400.0} for k in ("W1b", "W2", "FB")}
    rates["W2"]["lightning"] = 600.0        # 750/600 = 1.25x < 1.5x
    data = {"throughput": _tp(rates),
            "startup": {"seconds": {"import_mindspore": 4.0, "help": 0.4, "list": 2.0}}}
    goals = {(g.number, g.text): g for g in bench.goals(data, _args(quick=False))}
    by_text = {text: g.result for (_, text), g in goals.items()}
    assert by_text["steps/s, mindexp (4 callbacks, every step) / Lightning, W1b"] == "PASS"
    assert by_text["steps/s, mindexp (4 callbacks, every step) / Lightning, W2"] == "MISS"
    assert by_text["steps/s, mindexp (4 callbacks) / hand loop, W1b"] == "PASS"      # 0.75 >= 0.7
    assert by_text["time, mindexp --help / python -c 'import mindspore'"] == "PASS"
    assert by_text["time, mindexp list / python -c 'import mindspore'"] == "MISS"
    skipped = [g for g in goals.values() if g.result == "SKIP"]
    assert {g.number for g in skipped} == {"1", "3", "4", "5", "6"}  # not measured: say so
    assert by_text["steps/s, mindexp (4 callbacks) / hand loop, W3"] == "SKIP"     # no W3 here
    text, _ = bench.render(data, _args(quick=False))
    assert "PASS" in text and "MISS" in text and "SKIP" in text


@pytest.mark.slow
def test_quick_run_prints_the_goal_table(tmp_path):
    env = dict(os.environ, GLOG_v="3", MINDEXP_LIGHTNING_PYTHON="none",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join("benchmarks", "run.py"), "--quick",
                           "--skip", "sweep,memory,compare", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("goal"))
    rows = [ln for ln in lines[header + 1:] if ln[:1].isdigit()]
    assert {r.split()[0] for r in rows} == {"1", "2", "3", "4", "5", "6"}
    assert all(re.search(r"\s(PASS|MISS|SKIP|info)(\s|$)", r) for r in rows), rows
    assert "Lightning" in proc.stdout and "SKIP" in proc.stdout   # skipped with a reason
    data = json.loads(out.read_text())
    for workload in ("W1b", "W2", "FB", "W3"):
        for variant in bench.MS_VARIANTS:
            (res,) = data["throughput"]["results"][workload][variant]
            assert res["steps_per_s"] > 0 and res["median_step_ms"] > 0
        (inter,) = data["throughput"]["interleaved"][workload]
        assert inter["on"]["chunks"] > 0 and inter["on"]["time_ratio"] > 0
