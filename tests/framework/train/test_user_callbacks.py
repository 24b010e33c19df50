"""A user's own callback inside a run: it reads the run's step and epoch after a
resume (MindSpore restarts its step count there), and the log it writes into
the run folder with CsvLog is cut back like ours, so each step is there once."""
import json
import os
import subprocess
import sys

import pytest

import forkserver
from conftest import cli_env

USER = '''
import os, signal
from mindspore.train import Callback
from mindexp.callbacks import CsvLog
from mindexp.experiments.linear import Linear


class Steps(Callback):
    """A plain MindSpore callback: cur_step_num and cur_epoch_num, one row a step."""

    def __init__(self, folder):
        self.log = CsvLog(os.path.join(folder, "user_steps.csv"), ["step", "epoch"])

    def on_train_step_end(self, run_context):
        p = run_context.original_args()
        self.log.write([p.cur_step_num, p.cur_epoch_num])
        if p.cur_step_num == int(os.environ.get("KILL_AT", "0")):
            self.log.flush()   # rows up to here on disk: the resume must cut 21..25
            os.kill(os.getpid(), getattr(signal, os.environ["KILL_SIG"]))

    def flush(self):            # the framework flushes it before each checkpoint
        self.log.flush()

    def on_train_end(self, run_context):
        self.log.close()


class WithSteps(Linear):
    def callbacks(self):
        return [Steps(self.run_dir)]
'''

RUN = ["run", "user.py:WithSteps", "--out", "out", "--set", "epochs=4", "--set",
       "checkpoint_every=1", "--set", "checkpoint_interval_s=0", "--quiet"]


def _mindexp(root, *args, **env):
    return forkserver.run([sys.executable, "-m", "mindexp", *args], cwd=root,
                          env=cli_env(**env), capture_output=True, text=True, timeout=300)


def _only_run(root):
    (run_id,) = os.listdir(os.path.join(root, "out", "linear"))
    return os.path.join(root, "out", "linear", run_id)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    (root / "user.py").write_text(USER)
    done = _mindexp(root, *RUN)
    assert done.returncode == 0, done.stderr
    return _only_run(root)


@pytest.mark.slow  # subprocesses that train: seconds
@pytest.mark.parametrize("signal_name, resumed_at", [("SIGKILL", 20), ("SIGTERM", 25)])
def test_a_user_callback_logs_each_run_step_once_across_a_kill_and_resume(
        tmp_path, uninterrupted, signal_name, resumed_at):
    (tmp_path / "user.py").write_text(USER)
    killed = _mindexp(tmp_path, *RUN, KILL_AT="25", KILL_SIG=signal_name)
    assert killed.returncode != 0
    run_dir = _only_run(tmp_path)
    resumed = _mindexp(tmp_path, "resume", run_dir, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    with open(os.path.join(run_dir, "run.json")) as f:  # SIGTERM: a mid-epoch checkpoint
        assert json.load(f)["resumes"][0]["step"] == resumed_at
    with open(os.path.join(uninterrupted, "user_steps.csv"), "rb") as f:
        expected = f.read()
    with open(os.path.join(run_dir, "user_steps.csv"), "rb") as f:
        assert f.read() == expected      # steps 1..40 once each, epochs 1..4: byte for byte
    assert expected.splitlines()[1:3] == [b"1,1", b"2,1"] and expected.splitlines()[-1] == b"40,4"
