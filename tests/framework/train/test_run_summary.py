"""run.json's log summary: equal to the CSVs, and compare() the same both ways."""
import json
import os
import shutil

import pandas as pd
import pytest

import forkserver

from test_resume import KILLABLE

pytestmark = pytest.mark.slow  # every test here trains runs

COMMON = ["--set", "epochs=6", "--set", "checkpoint_interval_s=0", "--set", "checkpoint_every=2",
          "--quiet"]


def _meta(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def _runs(root):
    return sorted(os.path.join(root, e, r) for e in os.listdir(root)
                  for r in os.listdir(os.path.join(root, e)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A completed spirals run (eval metrics), a run interrupted by SIGTERM, one
    killed (SIGKILL: still 'running', no summary) and one killed then resumed."""
    import subprocess
    import sys
    from conftest import cli_env
    root = tmp_path_factory.mktemp("summary")
    (root / "killable.py").write_text(KILLABLE)

    def cli(*args, **env):
        done = forkserver.run([sys.executable, "-m", "mindexp", *args], cwd=root,
                              env=cli_env(**env), capture_output=True, text=True, timeout=300)
        return done

    assert cli("run", "spirals", "--out", "out", "--set", "epochs=3", "--quiet").returncode == 0
    cli("run", "killable.py:Killable", "--out", "out", *COMMON, "--name", "term",
        KILL_AT="25", KILL_SIG="SIGTERM")
    cli("run", "killable.py:Killable", "--out", "out", *COMMON, "--name", "kill",
        KILL_AT="37", KILL_SIG="SIGKILL")
    cli("run", "killable.py:Killable", "--out", "out", *COMMON, "--name", "resumed",
        KILL_AT="43", KILL_SIG="SIGKILL")
    (resumed,) = [d for d in _runs(root / "out") if "resumed" in d]
    done = cli("resume", resumed, "--quiet")
    assert done.returncode == 0, done.stderr
    return root / "out"


def _by_status(runs):
    return {_meta(d)["status"] + ("+resumed" if _meta(d).get("resumes") else ""): d
            for d in _runs(runs)}


def test_finished_runs_keep_the_summary_their_csvs_give(runs):
    from mindexp import Run
    from mindexp.rundir.summary import log_summary
    found = _by_status(runs)
    assert set(found) == {"completed", "interrupted", "running", "completed+resumed"}
    for status, run_dir in found.items():
        meta = _meta(run_dir)
        if status == "running":   # killed: never reached its end
            assert "summary" not in meta
            continue
        assert meta["summary"] == log_summary(Run(run_dir)), status
    resumed = _meta(found["completed+resumed"])["summary"]
    assert resumed["loss"]["rows"] == 60 and resumed["loss"]["last_step"] == 60
    assert set(resumed["params"]) == {"dense.weight", "dense.bias"}
    assert _meta(found["interrupted"])["summary"]["loss"]["last_step"] == 25
    spirals = _meta(found["completed"])["summary"]["eval"]
    assert {"eval_accuracy", "best_eval_accuracy", "eval_loss", "best_eval_loss"} <= set(spirals)


def test_compare_is_the_same_from_run_json_and_from_the_csvs(runs, tmp_path):
    from mindexp import compare
    plain = tmp_path / "plain"
    shutil.copytree(runs, plain)
    for run_dir in _runs(plain):  # the same runs, as runs made before the summary
        meta = _meta(run_dir)
        meta.pop("summary", None)
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            json.dump(meta, f)
    fast, slow = compare(runs), compare(plain)
    assert len(fast) == 4
    pd.testing.assert_frame_equal(fast.drop(columns="run_dir"), slow.drop(columns="run_dir"))


def test_compare_reads_no_csv_of_a_finished_run(runs, tmp_path, monkeypatch):
    from mindexp import compare
    from mindexp.rundir import run as run_module
    read = []
    real = run_module.Run.read
    monkeypatch.setattr(run_module.Run, "read", lambda self, name: read.append(
        (self.status, name)) or real(self, name))
    compare(runs)
    assert read and {status for status, _ in read} == {"running"}


def test_a_runs_end_reads_its_logs_without_pandas(tmp_path):
    """The end of a run (its summary in run.json, the eval lines printed) reads the
    logs as arrays: without plots, ``mindexp run`` never imports pandas (half a
    CPU-second of every run's end)."""
    import sys
    from conftest import cli_env
    code = ("import sys; from mindexp.cli.main import main; "
            "code = main(['run', 'spirals', '--out', 'out', '--set', 'epochs=2']); "
            "print('PANDAS', 'pandas' in sys.modules, code)")
    done = forkserver.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          env=cli_env(MINDEXP_PLOTS="0"), text=True, timeout=300)
    assert "PANDAS False 0" in done.stdout, done.stdout + done.stderr
    assert "eval_accuracy" in done.stdout and "best" in done.stdout  # the eval lines printed
    (run_dir,) = _runs(tmp_path / "out")
    summary = _meta(run_dir)["summary"]
    from mindexp.rundir.summary import eval_name
    evals = pd.read_csv(os.path.join(run_dir, "eval.csv")).rename(columns=eval_name)
    assert summary["eval"]["eval_accuracy"] == pytest.approx(evals["eval_accuracy"].iloc[-1])
    assert summary["eval"]["best_eval_accuracy"] == pytest.approx(evals["eval_accuracy"].max())
    system = pd.read_csv(os.path.join(run_dir, "system.csv"))
    assert summary["system"]["peak_rss_mb"] == round(system["rss_mb"].max(), 2)
    assert summary["system"]["mean_cpu_percent"] == round(system["process_cpu_percent"].mean(), 2)
