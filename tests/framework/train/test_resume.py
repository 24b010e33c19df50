"""Exact resume: killed runs continue with each step once and the same weights."""
import json
import os

import numpy as np
import pandas as pd
import pytest

import forkserver

import mindspore as ms

KILLABLE = '''
import os, signal
from mindexp.experiments.linear import Linear


class Killable(Linear):
    """Linear that kills itself at step $KILL_AT with signal $KILL_SIG."""

    def callbacks(self):
        from mindspore.train import Callback
        at, sig = int(os.environ.get("KILL_AT", "0")), os.environ.get("KILL_SIG", "SIGKILL")

        class Kill(Callback):
            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                step = (p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1
                if at and step == at:
                    os.kill(os.getpid(), getattr(signal, sig))
        return [Kill()]
'''

COMMON = ["--set", "epochs=12", "--set", "optimizer=adam", "--set", "lr=0.05",
          "--set", "checkpoint_interval_s=0", "--set", "checkpoint_every=2", "--quiet"]


def final_weights(run_dir):
    from mindexp.callbacks import latest_checkpoint
    params = ms.load_checkpoint(latest_checkpoint(run_dir)[2])
    return {k: params[k].asnumpy() for k in ("dense.weight", "dense.bias", "moment1.dense.weight")}


def logs(run_dir):
    return {name: pd.read_csv(os.path.join(run_dir, name))
            for name in ("loss.csv", "params.csv", "grad_norm.csv")}


def only_run(root):
    (run_id,) = os.listdir(os.path.join(root, "linear"))
    return os.path.join(root, "linear", run_id)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run with the same config."""
    from conftest import cli_env
    import subprocess, sys
    root = tmp_path_factory.mktemp("ref")
    (root / "killable.py").write_text(KILLABLE)
    done = forkserver.run([sys.executable, "-m", "mindexp", "run", "killable.py:Killable",
                           "--out", "out", *COMMON], cwd=root, env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return only_run(root / "out")


@pytest.mark.slow
@pytest.mark.parametrize("signal_name, at", [("SIGKILL", 77), ("SIGTERM", 45)])
def test_killed_run_resumes_to_the_uninterrupted_result(cli, tmp_path, reference, signal_name, at):
    (tmp_path / "killable.py").write_text(KILLABLE)
    killed = cli("run", "killable.py:Killable", "--out", "out", *COMMON,
                 KILL_AT=str(at), KILL_SIG=signal_name)
    run_dir = only_run(tmp_path / "out")
    status = json.load(open(os.path.join(run_dir, "run.json")))["status"]
    assert status == ("running" if signal_name == "SIGKILL" else "interrupted"), killed.stderr

    resumed = cli("resume", run_dir, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["steps"] == 120
    assert meta["resumes"][0]["step"] == (60 if signal_name == "SIGKILL" else 45)

    ours, ref = logs(run_dir), logs(reference)
    for name in ours:
        steps = ours[name]["step"]
        per_step = len(ours[name]) // 120
        assert steps.tolist() == sorted(steps.tolist()) and steps.nunique() == 120, name
        assert len(ours[name]) == 120 * per_step and steps.iloc[0] == 1, name
        value = ours[name].columns[-1 if name != "loss.csv" else 2]
        assert np.array_equal(ours[name][value].values, ref[name][value].values), name
    for key, value in final_weights(reference).items():
        assert np.array_equal(final_weights(run_dir)[key], value), key  # bitwise


@pytest.mark.slow
def test_resume_of_a_completed_run_is_refused_unless_training_longer(main_cli, reference):
    done = main_cli("resume", reference)  # (bad input: no process needed to import MindSpore)
    assert done.returncode == 2 and "is completed (12 of 12 epochs)" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("setup, message", [
    ("none", "not a run directory"),
    ("no_ckpt", "it has no checkpoint"),
    ("corrupt_only", "it has no usable checkpoint (1 corrupt or not finite)"),
])
def test_resume_bad_run_dirs_exit_2_and_change_nothing(main_cli, tmp_path, setup, message):
    run_dir = tmp_path / "linear" / "r1"
    run_dir.mkdir(parents=True)
    if setup != "none":
        (run_dir / "run.json").write_text(json.dumps(
            {"status": "failed", "entry": "experiments.linear:Linear", "run_id": "r1"}))
        (run_dir / "config.json").write_text(json.dumps({"epochs": 3}))
        (run_dir / "loss.csv").write_text("step,epoch,loss,lr,time_s\n1,1,0.5,0.1,0.1\n")
    if setup == "corrupt_only":
        (run_dir / "checkpoints").mkdir()
        (run_dir / "checkpoints" / "epoch0001-step0000010.ckpt").write_bytes(b"\x00garbage" * 10)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    done = main_cli("resume", run_dir)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(cli, tmp_path):
    (tmp_path / "killable.py").write_text(KILLABLE)
    cli("run", "killable.py:Killable", "--out", "out", *COMMON, KILL_AT="77", KILL_SIG="SIGKILL")
    run_dir = only_run(tmp_path / "out")
    ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    with open(os.path.join(run_dir, "checkpoints", ckpts[-1]), "wb") as f:
        f.write(b"truncated")
    done = cli("resume", run_dir, "--quiet")
    assert done.returncode == 0, done.stderr
    assert "skipping corrupt checkpoint" in done.stderr
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["resumes"][0]["step"] == 40 and meta["status"] == "completed"
    assert pd.read_csv(os.path.join(run_dir, "loss.csv"))["step"].tolist() == list(range(1, 121))


def test_the_resume_point_is_one_declared_frozen_shape(tmp_path):
    import dataclasses
    from mindexp.train.resume import Resume, resume_point
    (tmp_path / "run.json").write_text(json.dumps(
        {"status": "completed", "entry": "m.py:E", "stop_reason": "early stop"}))
    (tmp_path / "loss.csv").write_text("step,epoch,loss,lr,time_s\n10,1,0.5,0.1,2.5\n"
                                       "20,2,0.4,0.1,5.0\n")
    (tmp_path / "checkpoints").mkdir()
    ckpt = str(tmp_path / "checkpoints" / "epoch0001-step0000010.ckpt")
    ms.save_checkpoint([{"name": "w", "data": ms.Tensor(np.ones(2, np.float32))}], ckpt)
    point = resume_point(str(tmp_path))
    assert [f.name for f in dataclasses.fields(Resume)] == [
        "path", "params", "step", "epoch", "time_offset", "loss", "early_stopped", "run_dir",
        "meta", "entry"]
    assert (point.path, point.step, point.epoch, point.time_offset, point.loss,
            point.early_stopped, point.entry) == (ckpt, 10, 1, 2.5, 0.5, True, "m.py:E")
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.step = 0
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        point.anything = 1  # nothing is added after construction
    assert not hasattr(point, "__dict__")


@pytest.mark.slow
def test_a_resume_whose_new_config_cannot_load_the_checkpoint_is_refused_before_any_change(
        cli, main_cli, tmp_path):
    """`resume --set hidden=64` on a run of hidden=8: refused in one line, config.json
    and the run's status as they were (it used to rewrite config.json and end `failed`,
    after which a plain resume failed forever and gc deleted the run)."""
    done = cli("run", "mlp_sine", "--set", "epochs=1", "--set", "hidden=8", "--set",
               "samples=64", "--set", "eval_samples=32", "--out", "out", "--quiet")
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "out" / "mlp_sine").iterdir()
    before = {p: p.read_bytes() for p in sorted((tmp_path / "out").rglob("*")) if p.is_file()}
    refused = main_cli("resume", run_dir, "--set", "hidden=64", "--set", "epochs=2")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "does not fit the network of the new config" in refused.stderr
    assert "(8, 1)" in refused.stderr and "(64, 1)" in refused.stderr
    after = {p: p.read_bytes() for p in sorted((tmp_path / "out").rglob("*")) if p.is_file()}
    assert after == before
