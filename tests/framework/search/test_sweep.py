"""mindexp sweep: grids validated up front, runs in parallel child processes,
failures and signals handled, sweep.json written."""
import csv
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import forkserver
from conftest import cli_env
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)
from mindexp.cli.main import main
from mindexp.search.sweeps import grid_points

FRAGILE = '''
from dataclasses import dataclass
from mindexp.experiments.linear import Linear, MinimalNet


class Fragile(Linear):
    """Linear, but its network refuses to build when explode=true."""
    name = "fragile"

    @dataclass
    class Config(Linear.Config):
        explode: bool = False

    def network(self):
        if self.config.explode:
            raise RuntimeError("exploded on purpose")
        return MinimalNet()
'''
TINY = ("--set", "epochs=1", "--set", "samples=20", "--set", "batch_size=10")


def _sweep_json(out):
    found = glob.glob(os.path.join(str(out), "sweeps", "*", "sweep.json"))
    assert len(found) == 1, found
    with open(found[0]) as f:
        return json.load(f)


@pytest.mark.slow
def test_four_runs_with_two_workers_complete_with_one_table(cli, tmp_path):
    done = cli("sweep", "linear", "--grid", "optimizer=sgd,adam", "--grid", "lr=0.05,0.1",
               *TINY, "--workers", "2", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    sweep = _sweep_json(tmp_path / "out")
    assert sweep["status"] == "completed" and sweep["workers"] == 2
    assert sweep["grid"] == {"optimizer": ["sgd", "adam"], "lr": ["0.05", "0.1"]}
    assert sweep["set"] == {"epochs": "1", "samples": "20", "batch_size": "10"}
    assert [r["values"] for r in sweep["runs"]] == grid_points(sweep["grid"])
    assert [r["status"] for r in sweep["runs"]] == ["completed"] * 4
    for record in sweep["runs"]:
        with open(os.path.join(record["run_dir"], "run.json")) as f:
            meta = json.load(f)
        assert meta["run_id"] == record["run_id"] and meta["status"] == "completed"
        with open(os.path.join(record["run_dir"], "config.json")) as f:
            config = json.load(f)
        assert (config["optimizer"], str(config["lr"]), config["epochs"]) == \
            (record["values"]["optimizer"], record["values"]["lr"], 1)
    lines = done.stdout.splitlines()
    header = [i for i, line in enumerate(lines) if line.split()[:4] == ["run_id", "status",
                                                                     "optimizer", "lr"]]
    assert len(header) == 1  # one table
    assert sum(" completed " in line for line in lines[header[0] + 1:]) == 4
    assert sorted(os.listdir(os.path.dirname(sweep["runs"][0]["log"]))) == \
        [f"sweep-{i}.log" for i in range(1, 5)]
    assert sorted(os.listdir(tmp_path / "out" / "sweeps" / sweep["sweep_id"] / "workers")) == \
        ["worker-1.log", "worker-2.log"]
    # MINDEXP_PLOTS=0 (the suite's): no overlay plots, as runs draw none
    assert "plots:" not in done.stdout
    assert not list((tmp_path / "out" / "sweeps" / sweep["sweep_id"]).glob("*.png"))


@pytest.mark.slow
def test_a_failing_config_does_not_stop_the_others(cli, tmp_path):
    (tmp_path / "fragile.py").write_text(FRAGILE)
    done = cli("sweep", "fragile.py:Fragile", "--grid", "explode=false,true", *TINY,
               "--workers", "2", "--out", "out", "--name", "frag", MINDEXP_PLOTS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    sweep = _sweep_json(tmp_path / "out")
    by_value = {r["values"]["explode"]: r for r in sweep["runs"]}
    assert by_value["false"]["status"] == "completed"
    assert by_value["true"]["status"] == "failed"
    assert "exploded on purpose" in by_value["true"]["error"]
    assert sweep["status"] == "failed" and sweep["sweep_id"].split("-")[2] == "frag"
    assert "1 of 2 runs did not complete" in done.stderr
    assert "explode=true: failed: RuntimeError: exploded on purpose" in done.stderr
    assert by_value["true"]["run_dir"] in done.stderr
    assert "Traceback" not in done.stderr
    assert " completed " in done.stdout and " failed " in done.stdout  # the table has both
    overlay = tmp_path / "out" / "sweeps" / sweep["sweep_id"] / "loss_overlay.png"
    assert f"plots: {overlay}" in done.stdout and overlay.stat().st_size > 0, done.stderr


@pytest.mark.slow
def test_sigterm_stops_the_runs_and_marks_them_interrupted(tmp_path):
    cmd = [sys.executable, "-m", "mindexp", "sweep", "linear", "--grid",
           "optimizer=sgd,adam,momentum", "--set", "epochs=100000", "--workers", "2",
           "--out", "out"]
    proc = forkserver.popen(cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_loss_rows(tmp_path / "out" / "linear", runs=2, timeout=120)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout + stderr  # 128 + SIGTERM
    sweep = _sweep_json(tmp_path / "out")
    assert sweep["status"] == "interrupted"
    assert sorted(r["status"] for r in sweep["runs"]) == ["interrupted", "interrupted",
                                                          "not started"]
    for record in sweep["runs"][:2]:
        with open(os.path.join(record["run_dir"], "run.json")) as f:
            meta = json.load(f)
        assert meta["status"] == "interrupted" and meta["signal"] == "SIGTERM", meta
    assert "sweep interrupted; 3 of 3 runs did not complete" in stderr


def _wait_for_loss_rows(folder, runs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = glob.glob(os.path.join(str(folder), "*", "loss.csv"))
        if len(files) >= runs and all(os.path.getsize(f) > 40 for f in files):
            return
        time.sleep(0.1)
    raise AssertionError(f"{runs} runs did not start logging within {timeout} s")


# -- bad input: caught before anything starts ------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--grid", "lrr=0.1,0.2"], "--grid key 'lrr' is not a config field of linear. Did you mean lr"),
    (["--grid", "lr="], "--grid lr has an empty value"),
    (["--grid", "lr=0.1,,0.2"], "--grid lr has an empty value"),
    (["--grid", "lr"], "--grid expects FIELD=VALUE1,VALUE2"),
    (["--grid", "=0.1"], "--grid expects FIELD=VALUE1,VALUE2"),
    (["--grid", "lr=0.1", "--grid", "lr=0.2"], "--grid lr is given twice"),
    (["--grid", "lr=0.1,-1"], "config field 'lr' must be a number > 0. Received: lr=-1"),
    (["--grid", "optimizer=sgd,lbfgs"], "config field 'optimizer' must be one of"),
    (["--grid", "lr=0.1", "--set", "lr=0.2"], "'lr' is given by both --grid and --set"),
    (["--grid", "lr=0.1", "--workers", "0"], "argument --workers: must be an integer >= 1. "
                                             "Received: '0'"),
    (["--grid", "lr=0.1", "--workers", "two"], "argument --workers: must be an integer >= 1"),
    (["--grid", "lr=0.1", "--name", "../up"], "--name must be 1-64 characters"),
    ([], "sweep needs --grid FIELD=V1,V2 (repeatable) or --seeds N, or both. Received: neither"),
])
def test_bad_grids_are_one_line_and_start_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    code = main(["sweep", "linear", *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.startswith("mindexp: error: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_grid_points_are_the_cartesian_product_first_key_slowest():
    points = grid_points({"optimizer": ["sgd", "adam"], "lr": ["0.1", "0.2", "0.3"]})
    assert len(points) == 6
    assert points[:2] == [{"optimizer": "sgd", "lr": "0.1"}, {"optimizer": "sgd", "lr": "0.2"}]


def test_the_python_api_checks_workers_too():
    from mindexp import ConfigError
    from mindexp.search.sweeps import Sweep
    with pytest.raises(ConfigError, match=r"--workers must be an integer >= 1 .*"
                                          r"Received: --workers 0"):
        Sweep("linear", {"lr": ["0.1"]}, workers=0)
    assert Sweep("linear", {"lr": ["0.1", "0.2"]}, workers=8).workers == 2  # no idle slots


@pytest.mark.slow
def test_runs_share_a_worker_and_log_what_a_fresh_process_logs(cli, tmp_path):
    """One worker imports MindSpore once for both runs; the second run, which
    follows another in the same process, logs exactly what `mindexp run` does."""
    small = ("--set", "epochs=3", "--set", "samples=40", "--set", "batch_size=10")
    done = cli("sweep", "linear", "--grid", "lr=0.05,0.1", *small, "--workers", "1",
               "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    records = _sweep_json(tmp_path / "out")["runs"]
    metas = []
    for record in records:
        with open(os.path.join(record["run_dir"], "run.json")) as f:
            metas.append(json.load(f))
    assert metas[0]["pid"] == metas[1]["pid"]
    alone = cli("run", "linear", "--set", "lr=0.1", *small, "--out", "alone", "--quiet")
    assert alone.returncode == 0, alone.stderr
    (fresh,) = glob.glob(str(tmp_path / "alone" / "linear" / "*"))
    for name, columns in (("loss.csv", slice(0, 4)), ("params.csv", slice(None)),
                          ("grad_norm.csv", slice(None))):
        ours = _csv_rows(os.path.join(records[1]["run_dir"], name), columns)
        assert ours == _csv_rows(os.path.join(fresh, name), columns) and len(ours) > 12


def _csv_rows(path, columns):
    with open(path, newline="") as f:
        return [row[columns] for row in csv.reader(f)]


DYING = FRAGILE + '''

class Dying(Fragile):
    """Kills its own process (as a crash in native code would) when explode=true."""
    name = "dying"

    def network(self):
        if self.config.explode:
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)
        return MinimalNet()
'''


@pytest.mark.slow
def test_a_dying_worker_takes_only_its_run_and_is_replaced(cli, tmp_path):
    (tmp_path / "dying.py").write_text(DYING)
    done = cli("sweep", "dying.py:Dying", "--grid", "explode=false,true,false", "--set",
               "lr=0.1", *TINY, "--workers", "1", "--out", "out")
    assert done.returncode == 1, done.stdout + done.stderr
    runs = _sweep_json(tmp_path / "out")["runs"]
    assert [r["status"] for r in runs] == ["completed", "failed", "completed"]
    assert runs[1]["error"] == "killed by signal 9" and runs[1]["returncode"] == -9
    pids = []
    for record in (runs[0], runs[2]):
        with open(os.path.join(record["run_dir"], "run.json")) as f:
            pids.append(json.load(f)["pid"])
    assert pids[0] != pids[1]      # the third run had a new worker


@pytest.mark.slow
def test_a_worker_gone_before_its_run_fails_that_run_and_is_not_restarted_forever(
        tmp_path, monkeypatch):
    from mindexp.search import driver
    monkeypatch.setattr(driver, "WORKER_COMMAND", "no-such-command")  # each worker exits 2
    from mindexp.search.sweeps import Sweep
    sweep = Sweep("linear", {"lr": ["0.1", "0.2", "0.3"]}, out=str(tmp_path), workers=2)
    sweep.start("linear")
    assert sweep.run() == "failed"
    assert [r.status for r in sweep.runs] == ["failed"] * 3
    assert all("worker exited before the run started (status 2)" in r.error for r in sweep.runs)
    assert sweep._started == 2            # the first workers, then none again
