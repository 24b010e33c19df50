"""Resume under faults: a diverged run, two resumes at once, a CSV damaged in
the middle, a full disk. Each leaves the records whole."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import forkserver
from conftest import DISK_ARGS, cli_env, skip_unless_ci
from mindexp.experiments.linear import Linear


def _meta(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def _files(run_dir):
    return {os.path.relpath(os.path.join(d, f), run_dir): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(run_dir) for f in names}


# -- a diverged run ---------------------------------------------------------------------------

SPIKY = '''
from dataclasses import dataclass
from mindexp.experiments.linear import Linear


class Spiky(Linear):
    """Linear whose learning rate jumps to 200 from epoch ``spike_epoch`` on
    (0: never), which makes SGD on y = 2x blow up within one epoch."""

    @dataclass
    class Config(Linear.Config):
        spike_epoch: int = 4

    def learning_rate(self, steps_per_epoch):
        cfg = self.config
        return [200.0 if cfg.spike_epoch and step >= (cfg.spike_epoch - 1) * steps_per_epoch
                else cfg.lr for step in range(cfg.epochs * steps_per_epoch)]
'''


@pytest.fixture
def diverged(cli, tmp_path):
    """A run that diverges in epoch 4 (after a sane checkpoint at step 30) and,
    as runs made before Checkpoint refused non-finite weights do, saved one more of
    the inf weights."""
    (tmp_path / "spiky.py").write_text(SPIKY)
    done = cli("run", "spiky.py:Spiky", "--out", "out", "--set", "epochs=6",
               "--set", "checkpoint_interval_s=0", "--quiet")
    assert done.returncode == 1, done.stderr
    (run_dir,) = [str(p) for p in (tmp_path / "out" / "linear").iterdir()]
    assert _meta(run_dir)["status"] == "diverged"
    return run_dir


@pytest.mark.slow
def test_resume_of_a_diverged_run_is_refused_with_the_same_config(cli, diverged):
    before = _files(diverged)
    done = cli("resume", diverged, "--set", "spike_epoch=4")  # a --set that changes nothing
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"cannot resume {diverged}: it diverged (loss is " in done.stderr
    assert "the same config diverges again; change what caused it" in done.stderr
    assert _files(diverged) == before


@pytest.mark.slow
def test_resume_of_a_diverged_run_with_a_changed_config_restarts_from_the_last_finite_checkpoint(
        cli, diverged):
    index = pd.read_csv(os.path.join(diverged, "checkpoints.csv"))
    finite = index[np.isfinite(index["loss"])]["step"].max()
    assert finite == 30
    done = cli("resume", diverged, "--set", "spike_epoch=0", "--quiet")
    assert done.returncode == 0, done.stderr
    meta = _meta(diverged)
    assert meta["status"] == "completed"
    assert meta["resumes"][-1]["step"] == 30 and meta["resumes"][-1]["previous_status"] == "diverged"
    loss = pd.read_csv(os.path.join(diverged, "loss.csv"))
    assert loss["step"].tolist() == list(range(1, 61))  # each step once, 31-60 new
    assert np.isfinite(loss["loss"]).all()
    # Steps 1-30 are the same with and without the spike: the resumed run is the
    # run that never had one, bitwise.
    cli("run", "spiky.py:Spiky", "--out", "never", "--set", "epochs=6", "--set", "spike_epoch=0",
        "--set", "checkpoint_interval_s=0", "--quiet")
    never = os.path.join(os.path.dirname(diverged), "..", "..", "never", "linear")
    (other,) = os.listdir(never)
    assert meta["params"] == _meta(os.path.join(never, other))["params"]
    assert loss["loss"].tolist() == pd.read_csv(os.path.join(never, other, "loss.csv"))[
        "loss"].tolist()


# -- two resumes at once -------------------------------------------------------------------

KILLED_AT_30 = '''
import os, signal
from mindspore.train import Callback
from mindexp.experiments.linear import Linear


class Dies(Linear):
    def callbacks(self):
        class Kill(Callback):
            def on_train_step_end(self, run_context):
                if os.environ.get("DIE") and run_context.original_args().cur_step_num == 30:
                    os.kill(os.getpid(), signal.SIGKILL)
        return [Kill()]
'''


@pytest.mark.slow
def test_two_resumes_at_once_one_is_refused_and_no_row_is_written_twice(cli, tmp_path):
    (tmp_path / "dies.py").write_text(KILLED_AT_30)
    cli("run", "dies.py:Dies", "--out", "out", "--set", "epochs=300", "--set",
        "checkpoint_interval_s=0", "--quiet", DIE="1")
    (run_dir,) = [str(p) for p in (tmp_path / "out" / "linear").iterdir()]
    cmd = [sys.executable, "-m", "mindexp", "resume", run_dir, "--quiet"]
    procs = [forkserver.popen(cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = sorted((p.wait(timeout=300), p.communicate()[1]) for p in procs)
    (ok, _), (refused, message) = results
    assert (ok, refused) == (0, 2), results
    assert message.count("\n") == 1 and "(resume) holds it (lock file .lock)" in message
    assert f"cannot resume {run_dir}: pid " in message
    for name in ("loss.csv", "grad_norm.csv"):  # one row per step: a row written twice shows
        steps = pd.read_csv(os.path.join(run_dir, name))["step"]
        assert steps.tolist() == list(range(1, 3001)), name
    params = pd.read_csv(os.path.join(run_dir, "params.csv"))  # one row per parameter and step
    assert not params.duplicated(["step", "param"]).any()
    assert sorted(params["step"].unique()) == list(range(1, 3001))
    assert not os.path.exists(os.path.join(run_dir, ".lock"))  # released on exit


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    from mindexp.rundir.run_lock import run_locked
    (tmp_path / ".lock").write_text("pid 999999 on elsewhere\n")  # no process holds it
    with run_locked(tmp_path) as path:
        assert open(path).read() == f"pid {os.getpid()} on {os.uname().nodename} (resume)\n"
    assert not os.path.exists(path)


def test_a_held_lock_refuses_a_second_holder_with_one_line(tmp_path, holder):
    from mindexp.rundir.run_lock import RunLockedError, run_locked
    proc = holder(tmp_path)
    with pytest.raises(RunLockedError, match=rf"pid {proc.pid} on .* \(resume\) holds it"):
        with run_locked(tmp_path):
            pass
    proc.kill()
    proc.wait()
    with run_locked(tmp_path):  # the kernel released the dead holder's lock
        pass


# -- a CSV damaged in the middle -----------------------------------------------------------

@pytest.fixture(scope="module")
def finished_linear(tmp_path_factory):
    """One finished 2-epoch run, trained once: each case damages a copy of it."""
    out = tmp_path_factory.mktemp("finished") / "out"
    return Linear(epochs=2, checkpoint_interval_s=0).run(out=str(out)).dir


@pytest.mark.parametrize("name, line, damage, why", [
    ("loss.csv", 5, "5,1,0.3x,0.1,0.2", "loss='0.3x' is not a number"),
    ("loss.csv", 8, "8,1", "expected 5 fields, got 2"),
    ("grad_norm.csv", 3, "\x00\x00\x00", "expected 3 fields, got 1"),
])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_resume_refuses_a_csv_damaged_in_the_middle_naming_file_and_line(
        main_cli, tmp_path, finished_linear, name, line, damage, why):
    run_dir = str(tmp_path / "out" / "linear" / os.path.basename(finished_linear))
    shutil.copytree(finished_linear, run_dir)
    path = os.path.join(run_dir, name)
    with open(path) as f:
        lines = f.read().split("\n")
    lines[line - 1] = damage
    with open(path, "w") as f:
        f.write("\n".join(lines))
    before = _files(run_dir)
    done = main_cli("resume", run_dir, "--set", "epochs=4")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{name} line {line} is damaged ({why})" in done.stderr
    assert _files(run_dir) == before


# -- a full disk --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_full_disk_fails_the_run_with_whole_records_and_resume_finishes_it(cli, tmp_path,
                                                                            small_disk):
    # The run needs ~1.5 MB of logs for 4000 steps: it fills the 512 KiB disk midway.
    done = cli("run", "linear", "--out", small_disk, *DISK_ARGS)
    assert done.returncode == 1, done.stdout + done.stderr
    (name,) = os.listdir(small_disk / "linear")
    small_run = str(small_disk / "linear" / name)
    meta = _meta(small_run)
    assert meta["status"] == "failed" and "No space left on device" in meta["error"], meta
    assert "No space left on device" in done.stderr and "Traceback" not in done.stderr
    for csv_name in ("loss.csv", "params.csv", "grad_norm.csv", "checkpoints.csv"):
        table = pd.read_csv(os.path.join(small_run, csv_name))  # every CSV parseable
        assert table["step"].is_monotonic_increasing and not table.isna().all(axis=1).any()
    from mindexp.callbacks import latest_checkpoint
    import mindspore as ms
    ms.load_checkpoint(latest_checkpoint(small_run)[2])  # the newest complete one loads

    big_run = str(tmp_path / "big" / name)  # space freed: the run moves to a bigger disk
    shutil.copytree(small_run, big_run)
    resumed = cli("resume", big_run, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    reference = cli("run", "linear", "--out", tmp_path / "ref", *DISK_ARGS)
    assert reference.returncode == 0
    (ref_name,) = os.listdir(tmp_path / "ref" / "linear")
    ref_run = str(tmp_path / "ref" / "linear" / ref_name)
    mine = ms.load_checkpoint(latest_checkpoint(big_run)[2])
    theirs = ms.load_checkpoint(latest_checkpoint(ref_run)[2])
    for key in ("dense.weight", "dense.bias", "moment1.dense.weight", "moment2.dense.weight"):
        assert np.array_equal(mine[key].asnumpy(), theirs[key].asnumpy()), key  # bitwise
    assert pd.read_csv(os.path.join(big_run, "loss.csv"))["step"].tolist() == \
        list(range(1, 4001))


def test_a_disk_without_room_for_the_final_record_fails_the_run_before_its_first_step(
        main_cli, small_disk):
    # Less free space than the run sets aside for its last record: it fails at once,
    # recorded, instead of training until a write fails with no room left to say why
    # (a sweep's second run saw that under load: its run.json said running for good).
    from mindexp.train.failures import RESERVE_BYTES
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    (small_disk / "filler").write_bytes(b"\0" * (free - RESERVE_BYTES // 2))
    done = main_cli("run", "linear", "--set", "epochs=1", "--out", small_disk, "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No space left on device" in done.stderr.splitlines()[0]   # the run's one line,
    assert "Traceback" not in done.stderr                              # then where it is
    (name,) = os.listdir(small_disk / "linear")
    run_dir = small_disk / "linear" / name
    meta = _meta(run_dir)
    assert meta["status"] == "failed" and meta["steps"] == 0, meta
    assert "No space left on device" in meta["error"] and "KB free" in meta["error"], meta
    assert not (run_dir / "loss.csv").exists()   # not one step trained
