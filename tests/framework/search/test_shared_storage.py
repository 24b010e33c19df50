"""Search on storage shared by processes as by machines: a real PostgreSQL
server (started by the tests on 127.0.0.1) and a journal file; a storage that
cannot be had, for tune and sweep alike."""
import subprocess
import sys

import pytest

import forkserver
from conftest import cli_env, require
from postgres import postgres  # noqa: F401  (the fixture: a private server per module)
from searches import lost_trial
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)

optuna = require("optuna")

# learning rates none of the optimizers diverges with on linear: a diverged trial reports no
# intermediate value (the pruning check below counts on one per trial)
SPACE = ["--param", "lr=loguniform:1e-3:0.1", "--param", "optimizer=choice:sgd,momentum,adam"]


def _trials(storage, study):
    from mindexp.search.study import open_storage
    return optuna.load_study(study_name=study, storage=open_storage(storage)).get_trials()


def _tune(tmp_path, storage, out, *extra):
    """A ``mindexp tune`` process as one machine would start it (its own output root)."""
    cmd = [sys.executable, "-m", "mindexp", "tune", "linear", *SPACE, "--set", "epochs=2",
           "--trials", "4", "--study", "shared", "--storage", str(storage),
           "--out", str(tmp_path / out), *map(str, extra)]
    return forkserver.popen(cmd, env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_storage_whose_tables_another_process_is_creating_opens_on_a_second_try(monkeypatch):
    """Two machines starting on an empty database race on Optuna's CREATE TABLE
    (seen with two `mindexp tune` on a fresh PostgreSQL): the loser opens again."""
    from mindexp.search import study as study_module
    real, attempts = optuna.storages.RDBStorage, []

    def racing(url, **kwargs):
        attempts.append(url)
        if len(attempts) == 1:
            raise RuntimeError('(psycopg.errors.DuplicateTable) relation "studies" already exists')
        return real(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = study_module.open_storage("sqlite:///:memory:")
    assert len(attempts) == 2 and storage.get_all_studies() == []


def test_a_storage_error_of_another_kind_is_not_retried(monkeypatch):
    from mindexp.errors import MindexpError
    from mindexp.search import study as study_module
    attempts = []

    def refusing(url, **kwargs):
        attempts.append(url)
        raise RuntimeError("password authentication failed")

    monkeypatch.setattr(optuna.storages, "RDBStorage", refusing)
    with pytest.raises(MindexpError, match="password authentication failed"):
        study_module.open_storage("postgresql+psycopg://u:p@127.0.0.1:1/x")
    assert len(attempts) == 1


@pytest.mark.slow
def test_two_tune_processes_share_one_postgres_study(postgres, tmp_path):
    url = postgres.create_database("two_tunes")
    procs = [_tune(tmp_path, url, out) for out in ("machine-a", "machine-b")]
    outputs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    trials = _trials(url, "shared")
    # both asking for the last trial at once: the later ask is told FAIL as surplus, never run
    surplus = [t for t in trials if t.user_attrs.get("surplus")]
    trials = [t for t in trials if not t.user_attrs.get("surplus")]
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]  # exactly the budget
    assert len(surplus) <= 1 and all(t.number == 4 for t in surplus)  # two processes: one
    assert all(t.state.name == "FAIL" and "run_dir" not in t.user_attrs for t in surplus)
    # finished, or stopped by the median pruner (which the second machine's trials may meet)
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}, [t.state for t in trials]
    assert len({t.user_attrs["run_dir"] for t in trials}) == 4  # no trial ran twice
    assert all(t.intermediate_values for t in trials)  # what the median pruner judges by
    by_machine = {out: len(list((tmp_path / out / "studies/shared/linear").glob("*")))
                  for out in ("machine-a", "machine-b")}
    assert sum(by_machine.values()) == 4


@pytest.mark.slow
def test_a_trial_whose_worker_died_on_another_host_is_failed_by_heartbeat_and_redone(
        postgres, cli, tmp_path):
    import psycopg
    from mindexp.search.liveness import GRACE_S
    url = postgres.create_database("dead_worker")
    lost_trial(url)
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as db:
        db.execute("UPDATE trial_heartbeats SET heartbeat = heartbeat - %s * interval '1 second'",
                   (GRACE_S + 60,))
    result = cli("tune", "linear", "--param", "lr=loguniform:1e-3:1", "--storage", url,
                 "--set", "epochs=2", "--trials", 1, "--out", "out")
    assert result.returncode == 0, result.stderr
    assert "1 of 1 trials to run" in result.stdout  # the dead one is not counted
    assert [t.state.name for t in _trials(url, "linear")] == ["FAIL", "COMPLETE"]


@pytest.mark.parametrize("command", [
    ["tune", "linear", "--param", "lr=loguniform:1e-3:1", "--trials", "1"],
    ["sweep", "linear", "--grid", "lr=0.1,0.2"],
], ids=["tune", "sweep"])
@pytest.mark.parametrize("storage", [
    "postgresql+psycopg://someone:secret@127.0.0.1:{port}/nothing",  # no server there
    "nosuchdialect://host/db",
    "postgresql+nosuchdriver://someone@127.0.0.1/db",
])
def test_a_storage_that_cannot_be_had_is_one_line_and_creates_nothing(capsys, tmp_path,
                                                                      monkeypatch, command,
                                                                      storage):
    from mindexp.cli.main import main
    from postgres import free_port
    monkeypatch.chdir(tmp_path)
    storage = storage.format(port=free_port())
    code = main([*command, "--storage", storage, "--out", "out"])  # in this process
    lines = capsys.readouterr().err.strip().splitlines()
    warned = [line for line in lines if "--storage holds a password" in line]
    assert len(warned) == (1 if ":secret@" in storage else 0), lines  # the typed password
    lines = [line for line in lines if line not in warned]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("mindexp: error: cannot open the storage ")
    assert storage.split("://")[0] in lines[0] and "secret" not in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_grid_point_whose_trial_was_interrupted_is_drawn_again():
    from mindexp.search.study import TuneSpec, make_sampler
    points = ["sgd", "momentum", "adam"]
    spec = TuneSpec(entry="mindexp.experiments.linear:Linear", experiment="linear", study="g",
                    study_dir="unused", storage="unused", space={"optimizer": points},
                    objective="final_loss", sampler="grid", trials=3, seed=0)
    study = optuna.create_study(sampler=make_sampler(spec))
    stopped = study.ask()
    stopped.suggest_categorical("optimizer", points)
    stopped.set_user_attr("interrupted", True)  # as a worker stopped by Ctrl-C tells it
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    done = []
    for _ in points:  # the budget: three counted trials
        trial = study.ask()
        done.append(trial.suggest_categorical("optimizer", points))
        study.tell(trial, 1.0)
    assert sorted(done) == sorted(points)


def test_a_journal_trial_whose_worker_on_another_host_went_silent_is_failed(tmp_path):
    import time
    from mindexp.search.liveness import BEAT_ATTR, GRACE_S, fail_dead_trials, heartbeat
    from mindexp.search.study import counted, open_storage
    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j.log")))
    beating, silent = study.ask(), study.ask()
    for trial in (beating, silent):
        trial.set_user_attr("host", "another-machine")  # its worker's lock is out of reach
    with heartbeat(study, beating._trial_id):  # a live worker beats at once, then every 10 s
        pass
    study._storage.set_trial_system_attr(silent._trial_id, BEAT_ATTR,
                                         time.time() - GRACE_S - 60)
    assert fail_dead_trials(study) == [silent.number]
    states = {t.number: t for t in study.get_trials()}
    assert states[beating.number].state.name == "RUNNING"
    assert states[silent.number].state.name == "FAIL" and not counted(states[silent.number])


def test_a_trial_of_this_host_fails_once_its_worker_lock_is_free(tmp_path, holder):
    """One probe of a lock (rundir.run_lock.lock_held) serves runs and search workers."""
    import platform
    from mindexp import layout
    from mindexp.rundir.run_lock import lock_held
    from mindexp.search.liveness import fail_dead_trials
    from mindexp.search.study import open_storage
    lock = str(tmp_path / layout.RESUME_LOCK)
    worker = holder(tmp_path)  # another process holding the lock, as a live worker does
    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j.log")))
    trial = study.ask()
    trial.set_user_attr("host", platform.node())
    trial.set_user_attr("lock", lock)
    assert lock_held(lock) and fail_dead_trials(study) == []
    worker.kill()
    worker.wait()
    assert not lock_held(lock) and not lock_held(str(tmp_path / "none.lock"))
    assert fail_dead_trials(study) == [trial.number]


MACHINE_A = """
from mindexp.search import tune
tune("held.py:Held", {"lr": "loguniform:1e-3:0.1"}, trials=3, sampler="random", seed=3,
     pruner="none", study="shared", storage=%r, out="out-machine-a",
     config={"hold": "hold", "epochs": 4, "samples": 40, "batch_size": 4})
"""


@pytest.mark.slow
def test_a_machine_killed_mid_trial_is_waited_out_failed_and_replaced(postgres, cli, tmp_path):
    """Two hosts tune one PostgreSQL study; one dies (SIGKILL: its trials ran in
    its own process, driver and worker at once) mid-trial: the other waits out
    the heartbeat grace, fails that trial naming the dead host and run, runs
    its replacement and ends with the whole study (before: it exited 0 one
    trial short, the dead trial RUNNING for good)."""
    import os
    from mindexp.search.liveness import DEAD_ATTR, GRACE_VARIABLE, HOST_VARIABLE
    from searches import HELD, wait_for
    (tmp_path / "held.py").write_text(HELD)
    (tmp_path / "hold").touch()   # every step waits while it exists
    url = postgres.create_database("dead_machine")
    procs = {"machine-a": forkserver.popen(
        [sys.executable, "-c", MACHINE_A % url], cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        env=cli_env(**{HOST_VARIABLE: "machine-a", GRACE_VARIABLE: "3"}))}
    procs["machine-b"] = forkserver.popen(
        [sys.executable, "-m", "mindexp", "tune", "held.py:Held", "--param",
         "lr=loguniform:1e-3:0.1", "--sampler", "random", "--seed", "3", "--pruner", "none",
         "--trials", "3", "--study", "shared", "--storage", url, "--set", "hold=hold",
         "--set", "epochs=4", "--set", "samples=40", "--set", "batch_size=4",
         "--out", "out-machine-b"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=cli_env(**{HOST_VARIABLE: "machine-b", GRACE_VARIABLE: "3"}))
    try:
        def a_trial_training():
            try:
                trials = _trials(url, "shared")
            except KeyError:   # no study yet
                return None
            for t in trials:
                run_dir = t.user_attrs.get("run_dir")
                if t.user_attrs.get("host") == "machine-a" and t.state.name == "RUNNING" \
                        and run_dir and os.path.exists(os.path.join(run_dir, "loss.csv")):
                    return t
            return None
        lost = wait_for(a_trial_training, "a trial of machine-a training")
        procs["machine-a"].kill()
        procs["machine-a"].communicate(timeout=60)
        os.remove(tmp_path / "hold")
        out, err = procs["machine-b"].communicate(timeout=600)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    assert procs["machine-b"].returncode == 0, out + err
    trials = {t.number: t for t in _trials(url, "shared")}
    dead = trials[lost.number]
    assert dead.state.name == "FAIL" and "status" not in dead.user_attrs
    named = dead.user_attrs[DEAD_ATTR]
    assert (named["host"], named["pid"], named["run_dir"], named["failed_by"]) == (
        "machine-a", procs["machine-a"].pid, lost.user_attrs["run_dir"], "machine-b")
    assert "machine-a" in dead.user_attrs["error"] and lost.user_attrs["run_dir"] in \
        dead.user_attrs["error"]
    others = [t for n, t in trials.items() if n != lost.number and not t.user_attrs.get("surplus")]
    assert sorted(t.state.name for t in others) == ["COMPLETE"] * 3   # the study is whole
    assert all(t.user_attrs["host"] == "machine-b" for t in others)
    assert max(t.number for t in others) > lost.number               # the replacement
    shown = cli("tune", "--show", "--study", "shared", "--storage", url, "--out", "out-machine-b")
    assert shown.returncode == 0, shown.stderr
    row = [line.split() for line in shown.stdout.splitlines()
           if line.split()[:1] == [str(lost.number)]]
    assert row and row[0][1] == "FAIL", shown.stdout
