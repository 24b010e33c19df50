"""mindexp sweep against a dead parent, racing commands and hostile records:
workers die with the sweep, sweep.json names each run as it starts, the same
command continues an unfinished sweep, a completed point stays completed,
and ``rm`` of a sweep never leaves the output root."""
import contextlib
import glob
import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

import forkserver
from conftest import DISK_ARGS, cli_env
from mindexp.callbacks import schema
from mindexp.cli.main import main
from mindexp.rundir.run_lock import holder
from searches import HELD
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)

SMALL = ("--set", "epochs=20", "--set", "samples=40", "--set", "batch_size=4",
         "--set", "checkpoint_interval_s=0")   # 200 steps; 40 s while held
WAIT_S = 240


def _read(path):
    with open(path) as f:
        return json.load(f)


def _sweep_json(out):
    (path,) = glob.glob(os.path.join(str(out), "sweeps", "*", "sweep.json"))
    return _read(path)


def _wait(condition, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def _status(run_dir):
    try:
        return _read(os.path.join(run_dir, "run.json")).get("status")
    except (OSError, ValueError):
        return None


def _logging(run_dir):
    path = os.path.join(run_dir, "loss.csv")
    return os.path.exists(path) and os.path.getsize(path) > 40   # header and rows


def _checkpointed(run_dir):
    folder = os.path.join(run_dir, schema.CHECKPOINT_DIR)
    return os.path.isdir(folder) and any(f.endswith(".ckpt") for f in os.listdir(folder))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start(tmp_path, *args):
    cmd = [sys.executable, "-m", "mindexp", "sweep", *args]
    return forkserver.popen(cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_kill_9_of_a_sweep_takes_its_workers_and_the_same_command_continues_it(cli, tmp_path):
    (tmp_path / "held.py").write_text(HELD)
    (tmp_path / "hold").touch()
    args = ("held.py:Held", "--grid", "lr=0.05,0.1", *SMALL, "--set", "hold=hold",
            "--workers", "2", "--out", "out")
    proc = _start(tmp_path, *args)
    try:
        def named_and_logging():   # sweep.json names both runs while they train
            try:
                dirs = [r["run_dir"] for r in _sweep_json(tmp_path / "out")["runs"]]
            except (AssertionError, OSError, ValueError, KeyError):
                return None
            # with a checkpoint to resume from (a run stopped before its first one
            # is trained anew, as resume cannot continue it)
            return dirs if all(d and _logging(d) and _checkpointed(d) for d in dirs) else None
        run_dirs = _wait(named_and_logging, "both runs named in sweep.json and checkpointed")
        proc.kill()                                        # SIGKILL: no handler sees it
        proc.communicate(timeout=60)
        # The workers got SIGTERM from the kernel: each run ends interrupted.
        _wait(lambda: all(_status(d) == "interrupted" for d in run_dirs),
              "both runs interrupted after the sweep was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
    for run_dir in run_dirs:
        meta = _read(os.path.join(run_dir, "run.json"))
        assert meta["signal"] == "SIGTERM", meta
        _wait(lambda: not _alive(meta["pid"]), f"worker {meta['pid']} exited", timeout=60)
    record = _sweep_json(tmp_path / "out")
    assert record["status"] == "running"
    assert [r["status"] for r in record["runs"]] == ["running", "running"]

    os.remove(tmp_path / "hold")
    done = cli("sweep", *args)                            # the same command again
    assert done.returncode == 0, done.stdout + done.stderr
    assert "continuing it, 2 of 2 runs to train (0 done)" in done.stdout
    assert len(os.listdir(tmp_path / "out" / "sweeps")) == 1
    record = _sweep_json(tmp_path / "out")
    assert record["status"] == "completed"
    assert [r["run_dir"] for r in record["runs"]] == run_dirs   # resumed in place
    for run_dir in run_dirs:
        meta = _read(os.path.join(run_dir, "run.json"))
        assert meta["status"] == "completed" and len(meta["resumes"]) == 1, meta
        steps = pd.read_csv(os.path.join(run_dir, "loss.csv"))["step"].tolist()
        assert steps == list(range(1, 201))              # each step once
    assert len(glob.glob(str(tmp_path / "out" / "held" / "*"))) == 2

    removed = cli("rm", tmp_path / "out" / "sweeps" / record["sweep_id"], "--yes")
    assert removed.returncode == 0, removed.stderr
    assert "removed 2 run(s)" in removed.stdout
    assert not any(os.path.exists(d) for d in run_dirs)
    assert os.listdir(tmp_path / "out" / "sweeps") == []


@pytest.mark.slow
def test_the_same_command_retrains_a_failed_point_only_and_rm_takes_every_attempt(cli, tmp_path):
    (tmp_path / "held.py").write_text(HELD)
    (tmp_path / "boom").touch()
    args = ("held.py:Held", "--grid", "boom=none,boom", "--set", "epochs=1", "--set",
            "samples=20", "--set", "batch_size=10", "--workers", "1", "--out", "out")
    first = cli("sweep", *args)
    assert first.returncode == 1, first.stdout + first.stderr
    kept, failed = _sweep_json(tmp_path / "out")["runs"]
    assert (kept["status"], failed["status"]) == ("completed", "failed")
    kept_json = (tmp_path / "out" / "held" / kept["run_id"] / "run.json").read_text()

    os.remove(tmp_path / "boom")
    again = cli("sweep", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "continuing it, 1 of 2 runs to train (1 done)" in again.stdout
    record = _sweep_json(tmp_path / "out")
    assert [r["status"] for r in record["runs"]] == ["completed", "completed"]
    assert record["runs"][0]["run_dir"] == kept["run_dir"]
    assert (tmp_path / "out" / "held" / kept["run_id"] / "run.json").read_text() == kept_json
    assert record["runs"][1]["previous_runs"] == [failed["run_dir"]]
    assert record["runs"][1]["run_dir"] != failed["run_dir"]

    removed = cli("rm", tmp_path / "out" / "sweeps" / record["sweep_id"], "--yes")
    assert removed.returncode == 0, removed.stderr
    assert "removed 3 run(s)" in removed.stdout           # the failed attempt too
    assert os.listdir(tmp_path / "out" / "held") == []


@contextlib.contextmanager
def _journal_held(sweep_dir):
    """Hold the lock of the sweep's journal (Optuna's JournalFileOpenLock: a file
    made with O_EXCL) for the block: no worker can tell the study anything."""
    lock = os.path.join(sweep_dir, "journal.log.lock")
    _wait(lambda: _made_exclusively(lock), "the journal's lock taken")
    try:
        yield
    finally:
        os.remove(lock)


def _made_exclusively(path):
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.mark.slow
def test_gc_of_a_completed_run_during_a_sweep_leaves_it_completed(cli, tmp_path):
    """gc removes the first point's run after its record said completed and
    before the sweep heard of it: the worker, done with the run (its lock
    free), waits for the sweep's journal, which the test holds."""
    (tmp_path / "held.py").write_text(HELD)
    for name in ("hold1", "hold2"):
        (tmp_path / name).touch()
    proc = _start(tmp_path, "held.py:Held", "--grid", "hold=hold1,hold2", *SMALL,
                  "--workers", "2", "--out", "out")
    try:
        def logging(label):
            found = glob.glob(str(tmp_path / "out" / "held" / f"*-{label}-*"))
            return found[0] if found and _logging(found[0]) else None
        first = _wait(lambda: logging("sweep-1"), "the first run logging")
        _wait(lambda: logging("sweep-2"), "the second run logging")
        sweep_dir = os.path.dirname(glob.glob(str(tmp_path / "out" / "sweeps" / "*" /
                                                   "sweep.json"))[0])
        with _journal_held(sweep_dir):
            os.remove(tmp_path / "hold1")
            _wait(lambda: _status(first) == "completed" and holder(first) is None,
                  "the first run completed and its lock released")
            assert _sweep_json(tmp_path / "out")["runs"][0]["status"] == "running"  # not told
            gone = cli("gc", "out", "--status", "completed", "--yes")
            assert gone.returncode == 0 and not os.path.exists(first), gone.stdout + gone.stderr
        _wait(lambda: _sweep_json(tmp_path / "out")["runs"][0]["status"] != "running",
              "the first point's answer recorded")
        os.remove(tmp_path / "hold2")
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    record = _sweep_json(tmp_path / "out")
    assert [r["status"] for r in record["runs"]] == ["completed", "completed"]
    assert record["runs"][0]["run_dir"] == first and record["runs"][0]["final_loss"] > 0
    assert "did not complete" not in stderr and "Traceback" not in stderr


def test_resume_without_an_unfinished_sweep_is_one_line_and_starts_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["sweep", "linear", "--grid", "lr=0.1,0.2", "--resume", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("mindexp: error: --resume: no unfinished sweep of this command")
    assert not (out / "sweeps").exists()


# -- rm of a sweep stays inside the output root -----------------------------------------

def _fake_run(path):
    os.makedirs(path)
    with open(os.path.join(path, "run.json"), "w") as f:
        json.dump({"run_id": os.path.basename(path), "status": "completed",
                   "experiment": "linear"}, f)
    return str(path)


@pytest.mark.parametrize("where", ["beside", "sibling", "symlink"])
def test_rm_of_a_sweep_refuses_a_run_outside_the_output_root(cli, tmp_path, where):
    root = tmp_path / "runs"
    inner = _fake_run(root / "linear" / "20260101-000000-aaaaaa")
    if where == "beside":       # ROOT/../victim
        victim, named = _fake_run(tmp_path / "victim"), "../victim"
    elif where == "sibling":    # ROOT-private beside ROOT: a prefix check would let it in
        victim, named = _fake_run(tmp_path / "runs-private"), "../runs-private"
    else:                       # ROOT/elsewhere is a link out of the root
        victim = _fake_run(tmp_path / "outside" / "victim")
        os.symlink(tmp_path / "outside", root / "elsewhere")
        named = str(root / "elsewhere" / "victim")
    sweep = root / "sweeps" / "evil"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps(
        {"runs": [{"run_dir": inner}, {"run_dir": named}]}))
    done = cli("rm", sweep, "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "names a run outside the output root" in done.stderr and repr(named) in done.stderr
    assert os.path.isfile(os.path.join(victim, "run.json"))     # nothing deleted
    assert os.path.isfile(os.path.join(inner, "run.json")) and sweep.is_dir()


# -- a full disk ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_full_disk_stops_the_sweep_in_one_line_with_every_record_whole(cli, small_disk):
    done = cli("sweep", "linear", "--grid", "seed=0,1,2", "--workers", "2",
               "--out", small_disk, *[a for a in DISK_ARGS if a != "--quiet"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    assert "free space and run the same command again to continue" in done.stderr
    record = _sweep_json(small_disk)                       # whole, and final
    assert record["status"] == "failed"
    statuses = [r["status"] for r in record["runs"]]
    assert "failed" in statuses and set(statuses) <= {"failed", "not started", "completed"}
    named = sorted(r["run_dir"] for r in record["runs"] if r["run_dir"])
    folders = sorted(glob.glob(str(small_disk / "linear" / "*")))
    assert folders == named                               # no folder the record misses
    for run_dir in folders:
        meta = _read(os.path.join(run_dir, "run.json"))   # every folder has its record
        assert meta["status"] in ("failed", "completed"), meta
        # a full disk may stop a run before its first row, even before the header:
        # read as users' tools do (an empty log is zero rows)
        loss = schema.read_log(run_dir, "loss")
        assert meta["steps"] == (int(loss["step"].iloc[-1]) if len(loss) else 0), meta
    assert not glob.glob(str(small_disk / "sweeps" / "*" / ".space-reserve"))


def test_a_sweep_record_naming_a_run_outside_the_root_is_never_continued(tmp_path, capsys):
    out, victim = tmp_path / "out", _fake_run(tmp_path / "victim")
    (out / "sweeps" / "evil").mkdir(parents=True)
    (out / "sweeps" / "evil" / "sweep.json").write_text(json.dumps({
        "experiment": "linear", "spec": "linear", "grid": {"lr": ["0.1", "0.2"]}, "set": {},
        "config_file": None, "name": None, "status": "interrupted",
        "runs": [{"values": {"lr": "0.1"}, "status": "interrupted", "run_dir": "../victim"},
                 {"values": {"lr": "0.2"}, "status": "pending", "run_dir": None}]}))
    code = main(["sweep", "linear", "--grid", "lr=0.1,0.2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "names a run outside the output root" in err and "'../victim'" in err
    assert os.listdir(victim) == ["run.json"] and os.listdir(out / "sweeps") == ["evil"]
    assert not (out / "sweeps" / "evil" / ".lock").exists()     # released


@pytest.mark.parametrize("fails", [False, True], ids=["completed", "failed"])
def test_a_run_removed_the_moment_its_lock_is_released_still_says_how_it_ended(
        tmp_path, monkeypatch, fails):
    """What a sweep's worker answers with (run_request's Run, or the Run of its
    TrainingError) is read while the run's lock is held: `gc`, which takes a run
    once its lock is free, removing it at that very moment leaves the answer
    whole (it was read after the release: the worker answered `failed`)."""
    import shutil
    from mindexp.api import run_request
    from mindexp.errors import TrainingError
    from mindexp.experiments.linear import Linear
    from mindexp.rundir import run_lock
    from mindexp.train.request import RunRequest
    real, removed = run_lock.RunLock.release, []

    def release_then_gc(lock):       # gc's rmtree right after the release, before any read
        real(lock)
        run_dir = os.path.dirname(lock.path)
        if os.path.isfile(os.path.join(run_dir, "run.json")) and run_dir not in removed:
            shutil.rmtree(run_dir)
            removed.append(run_dir)
    monkeypatch.setattr(run_lock.RunLock, "release", release_then_gc)
    config = {"epochs": 1, "samples": 8, "batch_size": 4}
    if fails:     # a TrainingError that carries the run
        with pytest.raises(TrainingError) as caught:
            run_request(RunRequest(_breaking(config), out=str(tmp_path)))
        run = caught.value.run
    else:
        run = run_request(RunRequest(Linear(config), out=str(tmp_path)))
    assert removed == [run.dir] and not os.path.exists(run.dir)
    assert run.meta["status"] == ("failed" if fails else "completed"), run.meta
    assert run.meta["steps"] == (1 if fails else 2)


def _breaking(config):
    """Linear whose training fails at its first step (a TrainingError with the run)."""
    from mindspore.train import Callback
    from mindexp.experiments.linear import Linear

    class Breaks(Callback):
        def on_train_step_end(self, run_context):
            raise RuntimeError("broken on purpose")

    class Breaking(Linear):
        name = "breaking"

        def callbacks(self):
            return [Breaks()]
    return Breaking(config)


@pytest.mark.slow
def test_the_same_sweep_started_twice_at_once_trains_each_point_once(tmp_path):
    """Both commands look for an unfinished sweep of theirs at the same moment:
    one makes it, the other joins it (before: two sweeps, every point twice)."""
    import fcntl
    args = ("linear", "--grid", "lr=0.05,0.1", "--set", "epochs=2", "--set", "samples=8",
            "--set", "batch_size=4", "--workers", "1", "--out", "out")
    sweeps = tmp_path / "out" / "sweeps"
    sweeps.mkdir(parents=True)
    held = os.open(sweeps, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)   # both commands reach the lock before either looks
    procs = [_start(tmp_path, *args) for _ in range(2)]
    try:
        pids = {str(p.pid) for p in procs}
        _wait(lambda: _waiting_for(sweeps, pids) == pids or any(p.poll() is not None
                                                                 for p in procs),
              "both commands waiting for the sweeps folder")
        assert _waiting_for(sweeps, pids) == pids and os.listdir(sweeps) == []
        os.close(held)                  # now they race
        outputs = [p.communicate(timeout=WAIT_S) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("continuing it" in out for out, _ in outputs) == 1, outputs   # one joined
    assert len(os.listdir(tmp_path / "out" / "sweeps")) == 1
    runs = sorted(glob.glob(str(tmp_path / "out" / "linear" / "*")))
    assert len(runs) == 2, runs                                   # each point once
    record = _sweep_json(tmp_path / "out")
    assert sorted(r["run_dir"] for r in record["runs"]) == runs
    assert [r["status"] for r in record["runs"]] == ["completed", "completed"]


def _waiting_for(folder, pids):
    """The pids among ``pids`` blocked on an flock of ``folder`` (/proc/locks: a
    waiter's line has ``->``, then the lock's kind, mode, pid and device:inode)."""
    inode = f":{os.stat(folder).st_ino} "
    with open("/proc/locks") as f:
        lines = [line.split() for line in f if "->" in line and inode in line]
    return {fields[5] for fields in lines if len(fields) > 5} & pids
