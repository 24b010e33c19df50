"""The run lifecycle: a run is live while a process holds its lock (never by a
pid in run.json); rm/gc/resume/rerun refuse a live run, tag/note wait for the
short write lock; a signal never leaves a record ``running``; temporary files
of dead writers go at the next resume or gc; resume cuts rows beyond its
checkpoint and refuses fewer epochs than trained."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

import forkserver
from conftest import cli_env
from mindexp.cli.main import main
from rundirs import make_run


def mindexp(capsys, *args):
    """The CLI in this process; returns (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def meta_of(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def set_meta(run_dir, **fields):
    meta = meta_of(run_dir)
    meta.update(fields)
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(meta, f)


def dead_pid():
    """The pid of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- the one rule: live = a process holds the lock ---------------------------------------------

def test_a_live_pid_in_run_json_without_the_lock_is_a_run_that_stopped(capsys, tmp_path):
    run_dir = make_run(tmp_path, "ghost", status="running", meta={"pid": os.getpid()})
    code, out, _ = mindexp(capsys, "runs", tmp_path, "--csv")
    assert code == 0 and "running (process gone)" in out
    code, out, _ = mindexp(capsys, "show", run_dir)
    assert "running (process gone" in out
    code, out, err = mindexp(capsys, "rm", run_dir, "--yes")
    assert code == 0 and not os.path.exists(run_dir), err


def test_a_held_lock_makes_the_run_live_whatever_its_pid(capsys, tmp_path, holder):
    run_dir = make_run(tmp_path, "live", status="running", meta={"pid": dead_pid()})
    other = make_run(tmp_path, "done", status="failed")
    proc = holder(run_dir, "run")
    who = f"pid {proc.pid} on"
    code, out, _ = mindexp(capsys, "runs", tmp_path, "--csv")
    assert code == 0 and "process gone" not in out and ",running," in out
    code, out, _ = mindexp(capsys, "show", run_dir)
    assert f"running ({who}" in out
    for command in (("rm", run_dir, "--yes"), ("resume", run_dir), ("rerun", run_dir)):
        code, out, err = mindexp(capsys, *command)
        line = one_line(err)
        assert code == 2 and who in line and "(run) holds it" in line, (command, err)
    code, out, err = mindexp(capsys, "gc", tmp_path, "--status", "running,failed", "--yes")
    assert code == 0 and f"kept {run_dir}: it is live ({who}" in err
    assert os.path.isdir(run_dir) and not os.path.exists(other)
    proc.kill()
    proc.wait()  # the kernel drops a dead holder's lock
    code, out, err = mindexp(capsys, "rm", run_dir, "--yes")
    assert code == 0 and not os.path.exists(run_dir), err


def test_tag_waits_briefly_for_the_write_lock_then_says_so(capsys, tmp_path, monkeypatch):
    from mindexp.rundir import record
    run_dir = make_run(tmp_path, "r1", status="running")
    script = ("import sys, time; from mindexp.rundir.record import locked\n"
              "with locked(sys.argv[1]):\n"
              "    print('held', flush=True); time.sleep(float(sys.argv[2]))\n")
    slow = subprocess.Popen([sys.executable, "-c", script, run_dir, "1"], env=cli_env(),
                            stdout=subprocess.PIPE, text=True)
    assert slow.stdout.readline() == "held\n"
    code, out, err = mindexp(capsys, "tag", run_dir, "+waited")  # waits for the holder
    assert code == 0 and meta_of(run_dir)["tags"] == ["waited"], err
    slow.wait()
    monkeypatch.setattr(record, "WRITE_LOCK_WAIT_S", 0.3)
    stuck = subprocess.Popen([sys.executable, "-c", script, run_dir, "120"], env=cli_env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert stuck.stdout.readline() == "held\n"
        code, out, err = mindexp(capsys, "note", run_dir, "hello")
        assert code == 2 and "write lock" in one_line(err)
    finally:
        stuck.kill()
        stuck.wait()
    assert meta_of(run_dir).get("note") is None


# -- signals while a run starts and finishes ---------------------------------------------------

def test_signals_outside_training_are_noted_and_the_callers_handler_hears_them_after():
    from mindexp.train.signals import SignalStop
    heard = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        with SignalStop() as stopper:
            os.kill(os.getpid(), signal.SIGTERM)  # while the run finishes: noted, twice
            os.kill(os.getpid(), signal.SIGTERM)
            assert stopper.signum == signal.SIGTERM and heard == []
            with pytest.raises(KeyboardInterrupt), stopper.training():
                os.kill(os.getpid(), signal.SIGTERM)  # a second one while training: at once
        assert heard == [signal.SIGTERM]  # once run.json is final, the caller's own handler
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- leftovers of dead writers ---------------------------------------------------------------

def test_gc_removes_temporary_files_of_dead_writers_only(capsys, tmp_path, holder):
    done = make_run(tmp_path, "done")
    live = make_run(tmp_path, "live", status="running")
    dead, alive = dead_pid(), os.getpid()
    os.makedirs(os.path.join(done, "checkpoints"))
    os.makedirs(os.path.join(live, "checkpoints"))
    gone = [os.path.join(done, "checkpoints", f".tmp-{dead}-epoch0001-step0000002.ckpt"),
            os.path.join(done, f"run.json.tmp-{dead}"),
            os.path.join(tmp_path, f"report.html.tmp-{dead}")]
    kept = [os.path.join(done, f"loss.csv.tmp-{alive}"),  # a writer still at work
            os.path.join(live, "checkpoints", f".tmp-{dead}-epoch0001-step0000002.ckpt")]
    for path in gone + kept:
        with open(path, "w") as f:
            f.write("half")
    holder(live)
    code, out, err = mindexp(capsys, "gc", tmp_path, "--status", "pruned", "--dry-run")
    assert code == 0 and "would remove 3 temporary file(s)" in out
    assert all(os.path.exists(p) for p in gone + kept)
    code, out, err = mindexp(capsys, "gc", tmp_path, "--status", "pruned", "--yes")
    assert code == 0 and "removed 3 temporary file(s)" in out, err
    assert not any(os.path.exists(p) for p in gone)
    assert all(os.path.exists(p) for p in kept)


# -- resume: rows beyond the checkpoint, fewer epochs, leftovers ---------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny real run (2 epochs of 10 steps, a checkpoint each epoch), made once."""
    from mindexp.experiments.linear import Linear
    root = tmp_path_factory.mktemp("trained")
    return Linear(epochs=2, mode="pynative", checkpoint_interval_s=0).run(out=str(root)).dir


@pytest.fixture
def killed(trained, tmp_path):
    """A copy of it as a SIGKILL in epoch 3 of a longer run leaves it: run.json
    ``running``, rows of steps 21-23 past the last checkpoint (step 20), a
    half-written checkpoint of its dead writer."""
    run_dir = str(tmp_path / "linear" / os.path.basename(trained))
    shutil.copytree(trained, run_dir)
    set_meta(run_dir, status="running", ended_at=None)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({**config, "epochs": 3}, f)
    for name in ("loss.csv", "grad_norm.csv", "params.csv"):
        table = pd.read_csv(os.path.join(run_dir, name))
        extra = pd.concat([table[table["step"] == 20]] * 3, ignore_index=True)
        per_step = int((table["step"] == 20).sum())
        extra["step"] = [21 + i // per_step for i in range(len(extra))]
        extra["epoch"] = 3
        extra.to_csv(os.path.join(run_dir, name), mode="a", header=False, index=False)
    leftover = os.path.join(run_dir, "checkpoints", f".tmp-{dead_pid()}-epoch0003-step0000030.ckpt")
    with open(leftover, "wb") as f:
        f.write(b"half")
    return run_dir


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_resume_writes_each_step_once_past_rows_left_beyond_the_checkpoint(capsys, killed):
    for name in ("loss.csv", "grad_norm.csv", "params.csv"):
        assert pd.read_csv(os.path.join(killed, name))["step"].max() == 23, name
    code, out, err = mindexp(capsys, "resume", killed, "--set", "epochs=2", "--quiet")
    assert code == 0, err
    meta = meta_of(killed)
    assert meta["status"] == "completed" and meta["steps"] == 20
    loss = pd.read_csv(os.path.join(killed, "loss.csv"))
    assert meta["final_loss"] == pytest.approx(loss["loss"].iloc[-1])
    for name in ("loss.csv", "grad_norm.csv"):
        assert pd.read_csv(os.path.join(killed, name))["step"].tolist() == list(range(1, 21))
    params = pd.read_csv(os.path.join(killed, "params.csv"))
    assert sorted(params["step"].unique()) == list(range(1, 21))
    assert not params.duplicated(["step", "param"]).any()
    assert not [f for f in os.listdir(os.path.join(killed, "checkpoints")) if ".tmp-" in f]


def test_resume_with_fewer_epochs_than_trained_is_refused(capsys, killed):
    code, out, err = mindexp(capsys, "resume", killed, "--set", "epochs=1")
    line = one_line(err)
    assert code == 2 and "trained 2 epochs" in line and "epochs=1" in line
    assert meta_of(killed)["status"] == "running"  # untouched


# -- rm and gc racing a resume -------------------------------------------------------------------

def wait_for(condition, timeout=300, what="a condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


GATED = '''
import os, time
from mindexp.experiments.linear import Linear


class Gated(Linear):
    """Linear that, when $GATES names a folder, stops at each moment of $MOMENTS
    ("begin", a step, "end"): it writes at-<moment> there and waits for go-<moment>."""

    def callbacks(self):
        from mindspore.train import Callback
        gates, moments = os.environ.get("GATES"), os.environ.get("MOMENTS", "").split(",")
        if not gates:
            return []

        def gate(moment):
            if moment in moments:
                open(os.path.join(gates, "at-" + moment), "w").close()
                while not os.path.exists(os.path.join(gates, "go-" + moment)):
                    time.sleep(0.005)

        class Gate(Callback):
            def on_train_begin(self, run_context):
                gate("begin")

            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                gate(str((p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1))

            def on_train_end(self, run_context):
                gate("end")
        return [Gate()]
'''

# the resume's own phases: before its first step, inside epochs, at epoch ends (where
# it checkpoints), the last step, after training (before its final record)
MOMENTS = ["begin", "21", "22", "25", "29", "30", "31", "35", "40", "41", "50", "51", "59",
           "60", "61", "70", "71", "79", "80", "end"]


@pytest.mark.slow
def test_rm_and_gc_at_20_moments_of_a_resume_are_refused_and_it_completes(capsys, tmp_path):
    from mindexp.rundir.run_lock import holder
    (tmp_path / "gated.py").write_text(GATED)
    gates = tmp_path / "gates"
    gates.mkdir()
    code, out, err = mindexp(capsys, "run", tmp_path / "gated.py:Gated", "--set", "epochs=2",
                             "--set", "mode=pynative", "--set", "checkpoint_interval_s=0",
                             "--out", tmp_path / "out", "--quiet")
    assert code == 0, err
    (run_dir,) = [os.path.join(tmp_path, "out", "linear", d)
                  for d in os.listdir(tmp_path / "out" / "linear")]
    resume = forkserver.popen([sys.executable, "-m", "mindexp", "resume", run_dir, "--set",
                               "epochs=8", "--quiet"], cwd=tmp_path,
                              env=cli_env(GATES=str(gates), MOMENTS=",".join(MOMENTS)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    refused = 0
    try:
        for moment in MOMENTS:
            wait_for(lambda: (gates / f"at-{moment}").exists() or resume.poll() is not None,
                     what=f"the resume at moment {moment}")
            assert resume.poll() is None, resume.communicate()[1]
            assert "(resume)" in (holder(run_dir) or ""), moment
            code, out, err = mindexp(capsys, "rm", run_dir, "--yes")
            assert code == 2 and "(resume) holds it" in one_line(err), (moment, out, err)
            code, out, err = mindexp(capsys, "gc", tmp_path / "out", "--status",
                                     "completed,running", "--yes")
            assert code == 0 and f"kept {run_dir}: it is live" in err, (moment, out, err)
            assert os.path.isdir(run_dir)
            refused += 2
            (gates / f"go-{moment}").touch()
        stdout, stderr = resume.communicate(timeout=600)
    finally:
        resume.kill()
        resume.wait()
    assert resume.returncode == 0 and refused == 40, stderr
    meta = meta_of(run_dir)
    assert meta["status"] == "completed" and meta["steps"] == 80
    assert pd.read_csv(os.path.join(run_dir, "loss.csv"))["step"].tolist() == list(range(1, 81))
    assert holder(run_dir) is None and not os.path.exists(os.path.join(run_dir, ".lock"))


# -- SIGTERM at any moment of a run ---------------------------------------------------------------

RUN = ["run", "linear", "--set", "epochs=1", "--set", "mode=pynative", "--set",
       "checkpoint_interval_s=0", "--out", "out", "--quiet"]
STEPS = 10  # linear: 100 samples in batches of 10
PHASES = ("start", "folder", "record", "last_step", "plots", "exit")


def _start_run(root):
    os.makedirs(root, exist_ok=True)
    # plots on: drawing them is one of the phases a signal may land in
    return forkserver.popen([sys.executable, "-m", "mindexp", *RUN], cwd=root,
                            env=cli_env(MINDEXP_PLOTS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _phase(root):
    """How far a run under ``root`` got: its folder exists, its record, its last
    step (in loss.csv), its plots (drawn after training, before the final record)."""
    found = [os.path.join(root, "out", "linear", d) for d in
             (os.listdir(os.path.join(root, "out", "linear"))
              if os.path.isdir(os.path.join(root, "out", "linear")) else ())]
    if not found:
        return "start"
    if os.path.isdir(os.path.join(found[0], "plots")):
        return "plots"
    try:
        with open(os.path.join(found[0], "loss.csv")) as f:
            if any(line.startswith(f"{STEPS},") for line in f):
                return "last_step"
    except OSError:
        pass
    return "record" if os.path.exists(os.path.join(found[0], "run.json")) else "folder"


def _timeline(root):
    """Run once uninterrupted: when (s after the start) each phase began."""
    proc, start, seen = _start_run(root), time.monotonic(), {"start": 0.0}
    while proc.poll() is None:
        seen.setdefault(_phase(root), time.monotonic() - start)
        time.sleep(0.02)
    seen["exit"] = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr.read()
    for phase, after in reversed(list(zip(PHASES, PHASES[1:]))):   # one too short to be seen
        seen.setdefault(phase, seen[after])
    return seen


def _moments(seen):
    """15 (phase, delay) pairs: 5 from the start to the record, 5 from the record
    to the last step, 3 from the last step to the plots, 2 from the plots to the
    exit, each stretch cut evenly by its length in the uninterrupted run. The
    last two follow the run's own plots, not the reference's clock: on a loaded
    machine a run's last row can be flushed well before its training ends, and a
    signal there rightly interrupts it (all five of a last-step stretch did once)."""
    stretches = [("start", "record", 5), ("record", "last_step", 5), ("last_step", "plots", 3),
                 ("plots", "exit", 2)]
    return [(a, (seen[b] - seen.get(a, seen["start"])) * i / per)
            for a, b, per in stretches for i in range(per)]


def _terminate_at(root, phase, delay):
    """A run SIGTERMed ``delay`` s after it reached ``phase``; returns its exit status."""
    proc = _start_run(root)
    try:
        order = PHASES.index(phase)
        deadline = time.monotonic() + 600
        while proc.poll() is None and PHASES.index(_phase(root)) < order:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        at = time.monotonic() + delay
        while proc.poll() is None and time.monotonic() < at:
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=600)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode


def _final_files(run_dir):
    """What a finished run holds: its logs and plots (checkpoints and provenance vary)."""
    return sorted(os.path.relpath(os.path.join(d, f), run_dir) for d, _, names in os.walk(run_dir)
                  for f in names if os.path.relpath(d, run_dir).split(os.sep)[0]
                  not in ("checkpoints", "source") and not f.startswith("."))


def _check_finished(run_dir, reference):
    meta = meta_of(run_dir)
    assert meta["status"] == "completed" and meta["steps"] == STEPS, meta
    assert meta.get("summary") and meta["final_loss"] is not None, meta
    assert pd.read_csv(os.path.join(run_dir, "loss.csv"))["step"].tolist() == \
        list(range(1, STEPS + 1))
    assert _final_files(run_dir) == reference


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~10 runs' time (1.5 min on an idle 2-core machine, 6 on a busy one)
def test_sigterm_at_15_moments_leaves_a_completed_or_resumable_run(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    seen = _timeline(tmp_path / "reference")
    (ref_dir,) = (tmp_path / "reference" / "out" / "linear").iterdir()
    reference = _final_files(str(ref_dir))
    moments = _moments(seen)
    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(lambda i: _terminate_at(tmp_path / f"case{i}", *moments[i]),
                              range(len(moments))))
    outcomes, to_resume = {}, []
    for i, code in enumerate(codes):
        linear = tmp_path / f"case{i}" / "out" / "linear"
        run_dirs = [str(p) for p in linear.iterdir()] if linear.is_dir() else []
        if not run_dirs:  # stopped before its folder existed: nothing made, nothing lost
            assert code == -signal.SIGTERM, (i, moments[i], code)
            outcomes["nothing made"] = outcomes.get("nothing made", 0) + 1
            continue
        (run_dir,) = run_dirs
        status = meta_of(run_dir)["status"]
        assert status in ("completed", "interrupted"), (i, moments[i], code, status)
        # completed: 0, or -SIGTERM when the signal came once the record was final
        # (the handlers are gone then; nothing is left to record)
        wanted = (0, -signal.SIGTERM) if status == "completed" else (128 + signal.SIGTERM,)
        assert code in wanted, (i, code)
        outcomes[status] = outcomes.get(status, 0) + 1
        (_check_finished(run_dir, reference) if status == "completed" else
         to_resume.append(run_dir))

    def resume(run_dir):
        return forkserver.run([sys.executable, "-m", "mindexp", "resume", run_dir, "--quiet"],
                              env=cli_env(), capture_output=True, text=True, timeout=600)
    with ThreadPoolExecutor(max_workers=2) as pool:
        for run_dir, done in zip(to_resume, pool.map(resume, to_resume)):
            assert done.returncode == 0, done.stderr
            _check_finished(run_dir, reference)
    print(f"SIGTERM at {len(moments)} moments: {outcomes}; phases {seen}")
    assert outcomes.get("interrupted") and outcomes.get("completed"), outcomes


# -- a SIGTERM while another process holds the write lock ------------------------------------------

WRITE_LOCK_HOLDER = ("import fcntl, os, signal, sys\n"
                     "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                     "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                     "print('held', flush=True); signal.pause()  # until the test kills it\n")


def catches_sigterm(pid):
    """Whether process ``pid`` has a handler for SIGTERM (/proc's SigCgt mask)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow  # spawns mindexp: seconds
def test_sigterm_ends_a_resume_waiting_for_a_write_lock_another_process_holds(killed):
    from mindexp.rundir.run_lock import lock_held
    holder = subprocess.Popen([sys.executable, "-c", WRITE_LOCK_HOLDER,
                               os.path.join(killed, ".run.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        resume = subprocess.Popen([sys.executable, "-m", "mindexp", "resume", killed, "--quiet"],
                                  env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        wait_for(lambda: (lock_held(os.path.join(killed, ".lock")) and catches_sigterm(resume.pid))
                 or resume.poll() is not None, what="the resume to take the run and its signals")
        resume.send_signal(signal.SIGTERM)
        try:  # before: it noted each SIGTERM and waited for the write lock for good
            out, err = resume.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            resume.kill()
            resume.communicate()
            pytest.fail("the resume ignored SIGTERM while another process held .run.lock")
    finally:
        holder.kill()
        holder.wait()
    assert resume.returncode == 143, err
    assert "Traceback" not in err and "holds" in err and ".run.lock" in err, err
    assert meta_of(killed)["status"] == "running"  # as it was: resumable
