"""mindexp sweep on a shared Optuna storage: two processes as two machines (their
own output roots) share one sweep on a real PostgreSQL server and on one
journal file; retries; a killed worker's point redone; the same command again
trains only what is missing (a storage that cannot be had: test_shared_storage.py)."""
import glob
import json
import os
import subprocess
import sys

import pytest

import forkserver
from conftest import cli_env, require
from postgres import postgres  # noqa: F401  (the fixture: a private server)
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)

optuna = require("optuna")

TINY = ("--set", "epochs=1", "--set", "samples=20", "--set", "batch_size=10")
LRS = "lr=0.05,0.1,0.2"
FLAKY = '''
import os, signal
from dataclasses import dataclass
from mindexp.experiments.linear import Linear, MinimalNet


class Flaky(Linear):
    """Linear; kind=dies_once kills its worker the first time, kind=fails
    fails while the file `broken` exists."""
    name = "flaky"

    @dataclass
    class Config(Linear.Config):
        kind: str = "ok"

    def network(self):
        if self.config.kind == "dies_once" and not os.path.exists("died"):
            open("died", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)   # as a crash in native code would
        if self.config.kind == "fails" and os.path.exists("broken"):
            raise RuntimeError("broken on purpose")
        return MinimalNet()
'''


def _trials(storage, study=None):
    from mindexp.search.study import open_storage
    storage = open_storage(storage)
    study = study or storage.get_all_studies()[0].study_name
    return [t for t in optuna.load_study(study_name=study, storage=storage).get_trials()
            if not t.user_attrs.get("surplus")]


def _sweep_json(out):
    (path,) = glob.glob(os.path.join(str(out), "sweeps", "*", "sweep.json"))
    with open(path) as f:
        return json.load(f)


def _cli_sweep(tmp_path, storage, out):
    """A ``mindexp sweep`` process as one machine starts it (its own output root)."""
    cmd = [sys.executable, "-m", "mindexp", "sweep", "linear", "--grid", LRS, *TINY,
           "--workers", "1", "--storage", str(storage), "--out", str(tmp_path / out)]
    return forkserver.popen(cmd, env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _python_sweep(tmp_path, storage, out):
    """The same sweep through ``mindexp.sweep(..., storage=...)`` in another process."""
    code = ("import sys, mindexp\n"
            "runs = mindexp.sweep('linear', {'lr': ['0.05', '0.1', '0.2']}, config={'epochs': 1, "
            "'samples': 20, 'batch_size': 10}, storage=sys.argv[1], out=sys.argv[2])\n"
            "print('runs here:', len(runs))\n")
    return forkserver.popen([sys.executable, "-c", code, str(storage), str(tmp_path / out)],
                            env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _check_shared(tmp_path, storage, outputs):
    """Each point trained exactly once, by one machine or the other."""
    trials = _trials(storage)
    assert sorted(t.user_attrs["point"] for t in trials) == [0, 1, 2], trials
    assert {t.state.name for t in trials} == {"COMPLETE"}
    folders = [f for out in ("machine-a", "machine-b")
               for f in glob.glob(str(tmp_path / out / "linear" / "*"))]
    assert len(folders) == 3                                  # counts add up
    assert sorted(os.path.basename(f) for f in folders) == \
        sorted(t.user_attrs["run_id"] for t in trials)
    lrs = [_read(os.path.join(f, "config.json"))["lr"] for f in folders]
    assert sorted(lrs) == [0.05, 0.1, 0.2]                    # no point twice
    for out in ("machine-a", "machine-b"):                    # each machine's record is whole
        record = _sweep_json(tmp_path / out)
        assert record["status"] == "completed", (record, outputs)
        assert [r["status"] for r in record["runs"]] == ["completed"] * 3


def _read(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.slow
def test_two_machines_share_one_sweep_on_postgres(postgres, tmp_path):  # noqa: F811
    url = postgres.create_database("two_sweeps")
    procs = [_cli_sweep(tmp_path, url, out) for out in ("machine-a", "machine-b")]
    outputs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "storage: postgresql+psycopg://" in outputs[0][0]
    _check_shared(tmp_path, url, outputs)


@pytest.mark.slow
def test_the_command_line_and_python_share_one_sweep_on_a_journal_file(tmp_path):
    journal = tmp_path / "shared" / "sweep.log"
    procs = [_cli_sweep(tmp_path, journal, "machine-a"),
             _python_sweep(tmp_path, journal, "machine-b")]
    outputs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    _check_shared(tmp_path, str(journal), outputs)
    here_b = len(glob.glob(str(tmp_path / "machine-b" / "linear" / "*")))
    assert f"runs here: {here_b}" in outputs[1][0]


@pytest.mark.slow
def test_retries_a_killed_worker_and_a_failing_point_then_the_same_command_trains_the_rest(
        cli, tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "broken").touch()
    args = ("sweep", "flaky.py:Flaky", "--grid", "kind=ok,dies_once,fails", *TINY,
            "--workers", "1", "--retries", "1", "--out", "out")
    first = cli(*args)
    assert first.returncode == 1, first.stdout + first.stderr    # a point failed for good
    journal = glob.glob(str(tmp_path / "out" / "sweeps" / "*" / "journal.log"))[0]
    by_point = {}
    for trial in _trials(journal):
        by_point.setdefault(trial.user_attrs["point"], []).append(trial)
    assert [t.state.name for t in by_point[0]] == ["COMPLETE"]
    assert [t.state.name for t in by_point[1]] == ["FAIL", "COMPLETE"]   # killed, redone
    assert by_point[1][0].user_attrs["error"] == "killed by signal 9"
    assert [t.state.name for t in by_point[2]] == ["FAIL", "FAIL"]       # tried 1 + 1 times
    record = _sweep_json(tmp_path / "out")
    assert [r["status"] for r in record["runs"]] == ["completed", "completed", "failed"]
    assert "broken on purpose" in record["runs"][2]["error"]
    assert len(record["runs"][2]["previous_runs"]) == 1          # the first attempt's folder
    assert "1 of 3 runs did not complete" in first.stderr and "Traceback" not in first.stderr

    os.remove(tmp_path / "broken")
    again = cli(*args)                                           # the same command again
    assert again.returncode == 0, again.stdout + again.stderr
    assert "continuing it, 1 of 3 runs to train (2 done)" in again.stdout
    trials = _trials(journal)
    assert len(trials) == 6 and trials[-1].user_attrs["point"] == 2
    assert trials[-1].state.name == "COMPLETE"
    assert [r["status"] for r in _sweep_json(tmp_path / "out")["runs"]] == ["completed"] * 3
    # every run folder is one attempt's (the killed one died before it had a folder)
    assert sorted(glob.glob(str(tmp_path / "out" / "flaky" / "*"))) == \
        sorted(t.user_attrs["run_dir"] for t in trials if t.user_attrs.get("run_dir"))


def test_retries_must_be_a_count(capsys, tmp_path):
    from mindexp.cli.main import main
    code = main(["sweep", "linear", "--grid", "lr=0.1", "--retries", "-1",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--retries: must be an integer >= 0" in err
    assert not (tmp_path / "out").exists()
