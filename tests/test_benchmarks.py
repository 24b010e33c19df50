"""The benchmark suite runs and prints its table (timings are never asserted)."""
import json
import os
import re
import subprocess
import sys
import types

import pytest

import forkserver
from conftest import ROOT, cli_env  # noqa: E402  (the repository)
sys.path.insert(0, ROOT)

# The scripts run as processes of their own forked from the worker's fork server
# (tests/forkserver.py: ``python SCRIPT.py``, MindSpore imported once for the suite):
# what they print and their exit status are the same; their timings are never asserted.

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
    env = cli_env(GLOG_v="3", MINDEXP_LIGHTNING_PYTHON="none")
    out = tmp_path / "bench.json"
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "run.py"), "--quick",
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


def test_interleaving_puts_every_set_in_every_position_equally_often():
    """A set that always runs last, or always between the same two, was
    measured ~4% slower than an identical set elsewhere: the order must not
    favour any set."""
    from collections import Counter

    from benchmarks.interleave import Dispatcher
    names = ["off", "before", "after"]
    disp = Dispatcher({n: [] for n in names}, by_epoch=True)
    order = [disp._order(k) for k in range(6 * len(names) * 2)]
    blocks = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert all(sorted(b) == sorted(names) for b in blocks)          # each block runs every set once
    positions = Counter((name, b.index(name)) for b in blocks for name in names)
    assert set(positions.values()) == {len(blocks) // 3}             # every set first, middle, last alike


@pytest.mark.slow
def test_profile_hooks_profiles_only_the_callbacks(tmp_path):
    env = cli_env(GLOG_v="3")
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "profile_hooks.py"), "W1b",
                           "--quick"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"on W1b \(\d+ steps\): [0-9.]+ s in the four callbacks' hooks", proc.stdout)
    listed = proc.stdout[proc.stdout.find("ncalls"):]
    assert "parameter_tracker.py" in listed or "loss_monitor.py" in listed
    assert "model.py" not in listed   # MindSpore's training loop is not in the profile


@pytest.mark.slow
def test_conv_cpu_times_each_formulation():
    env = cli_env(GLOG_v="3")
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "conv_cpu.py"), "--quick",
                           "conv1", "im2col"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"first step +[0-9.]+ ms, then +[0-9.]+ ms/step", proc.stdout)
    assert len(rows) == 2, proc.stdout
    bad = subprocess.run([sys.executable, os.path.join("benchmarks", "conv_cpu.py"), "nope"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "unknown variant(s) nope; choose from conv" in bad.stderr


@pytest.mark.slow
def test_loop_parts_times_each_part_of_both_paths(tmp_path):
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "loop_parts.py"),
                           "--quick", "--rounds", "1", "--workload", "FB"], cwd=ROOT,
                          env=cli_env(GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("step")[0].strip(): line for line in proc.stdout.splitlines()[1:]}
    assert "run.step" in rows["loop on"] and "LossMonitor" in rows["loop on"], proc.stdout
    assert "read" in rows["loop on"] and "gc n" in rows["loop on"], proc.stdout
    assert "all hooks" in rows["model on"] and "record" in rows["model on"], proc.stdout


@pytest.mark.slow
def test_loop_chunks_prints_both_paths_ratios_within_one_training(tmp_path):
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "loop_chunks.py"),
                           "--quick", "--rounds", "1", "--workload", "FB"], cwd=ROOT,
                          env=cli_env(GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # chunk, the two ratios, their difference, the microseconds each path adds
    assert re.search(r"^FB +[0-9]+ +[0-9.]+ +[0-9.]+(?: +[+-][0-9.]+){3}  load ", proc.stdout,
                     re.M), proc.stdout


@pytest.mark.slow
def test_loop_cost_prints_both_paths_ratios(tmp_path):
    proc = forkserver.run([sys.executable, os.path.join("benchmarks", "loop_cost.py"), "--quick",
                           "--rounds", "1", "--workload", "FB"], cwd=ROOT,
                          env=cli_env(GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for label in ("FB", "  median step", "  CPU"):  # ratios, their difference, us added
        assert re.search(rf"^{label} +(?:[0-9.]+m +){{4}}[0-9.]+ +[0-9.]+(?: +[+-][0-9.]+){{3}}$",
                         proc.stdout, re.M), proc.stdout
