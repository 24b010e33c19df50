"""A run killed while it starts: SIGKILL between the
``mkdir`` of its folder and its run.json leaves a folder holding its lock
file and config.json. It is not a run (no listing shows it); ``gc`` removes
it once no process holds its lock, and keeps everything else. A start that
``gc`` takes away before the start's own lock picks another folder."""
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from rundirs import make_run

# The start's own code path, killed where the fault injection once caught it:
# after config.json, before run.json.
_KILLED_START = textwrap.dedent("""
    import os, signal, sys
    from mindexp.rundir.record import RunRecord
    from mindexp.rundir.run_lock import create_locked
    run_dir, lock = create_locked(sys.argv[1], "linear")
    RunRecord(run_dir, {"status": "running"}).write_config({"seed": 3})
    print(run_dir, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")

# A start that holds its lock and waits (a live start, not yet at run.json).
_LIVE_START = textwrap.dedent("""
    import sys
    from mindexp.rundir.run_lock import create_locked
    run_dir, lock = create_locked(sys.argv[1], "linear")
    print(run_dir, flush=True)
    sys.stdin.read()
""")


def _killed_start(root):
    done = subprocess.run([sys.executable, "-c", _KILLED_START, str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    run_dir = done.stdout.strip()
    assert sorted(os.listdir(run_dir)) == [".lock", "config.json"]
    return run_dir


@pytest.fixture
def live_start(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _LIVE_START, str(tmp_path / "out")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_gc_removes_a_start_killed_before_its_run_json_and_nothing_else(cli, tmp_path,
                                                                         live_start):
    root = tmp_path / "out"
    killed = _killed_start(root)
    done = make_run(root, "20260101-000000-aaaaaa", experiment="linear")
    damaged = os.path.join(root, "linear", "20260101-000000-bbbbbb")  # logs but no run.json
    os.makedirs(damaged)
    for name in (".lock", "loss.csv"):
        open(os.path.join(damaged, name), "w").close()
    by_hand = os.path.join(root, "linear", "mine")  # not named like a run id
    os.makedirs(by_hand)
    open(os.path.join(by_hand, ".lock"), "w").close()

    listed = cli("runs", "--json", root)
    assert listed.returncode == 0, listed.stderr
    assert [row["run_id"] for row in json.loads(listed.stdout)] == [os.path.basename(done)]

    dry = cli("gc", "--dry-run", "--status", "failed", root)
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {killed}: a run killed while it started" in dry.stdout
    assert live_start not in dry.stdout and os.path.isdir(killed)

    gone = cli("gc", "--yes", "--status", "failed", root)
    assert gone.returncode == 0, gone.stderr
    assert f"removed {killed}: a run killed while it started" in gone.stdout
    assert gone.stdout.count("a run killed while it started") == 1
    assert not os.path.exists(killed)
    assert sorted(os.listdir(os.path.join(root, "linear"))) == sorted(
        os.path.basename(p) for p in (done, damaged, by_hand, live_start))


def test_a_start_whose_folder_gc_removes_before_its_lock_takes_another(tmp_path, monkeypatch):
    """gc runs in the one window a start has (its lock file opened, not yet
    locked): the folder goes, and the start goes on in a new one."""
    from mindexp.manage.cleanup import remove_unstarted_runs
    from mindexp.rundir import run_lock
    root = tmp_path / "out"
    taken = []
    real = run_lock.create_run_dir

    def create_then_gc(*args):
        run_dir = real(*args)
        if not taken:  # the first folder: its lock file exists, gc comes before the flock
            open(os.path.join(run_dir, ".lock"), "w").close()
            taken.extend(remove_unstarted_runs([root]))
        return run_dir

    monkeypatch.setattr(run_lock, "create_run_dir", create_then_gc)
    run_dir, lock = run_lock.create_locked(root, "linear")
    try:
        assert len(taken) == 1 and not os.path.exists(taken[0])
        assert run_dir != taken[0] and os.path.isdir(run_dir)
        assert run_lock.holder(run_dir)  # ours, so no gc can take this one
        assert remove_unstarted_runs([root]) == []
    finally:
        lock.release()


def test_a_start_whose_lock_gc_holds_takes_another_folder(tmp_path, monkeypatch):
    from mindexp.rundir import run_lock
    root = tmp_path / "out"
    held = []
    real = run_lock.create_run_dir

    def create_held_by_gc(*args):
        run_dir = real(*args)
        if not held:  # a gc holds this folder's lock while it checks it
            fd = os.open(os.path.join(run_dir, ".lock"), os.O_RDWR | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.append((run_dir, fd))
        return run_dir

    monkeypatch.setattr(run_lock, "create_run_dir", create_held_by_gc)
    try:
        run_dir, lock = run_lock.create_locked(root, "linear")
        lock.release()
        assert run_dir != held[0][0]
    finally:
        os.close(held[0][1])
