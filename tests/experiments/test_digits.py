"""The shipped `digits` experiment end to end: a real eval split, and the
records that once went wrong on it (throughput, eval names, partial epochs
after resume), checked against the files themselves."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import forkserver
from conftest import cli_env, require
from mindexp import compare, load_run
from mindexp.callbacks import read_csv

require("sklearn")
pytestmark = pytest.mark.slow


def loss_csv_rate(run_dir):
    """Steps per second from loss.csv's time_s, first step (compile) left out."""
    loss = read_csv(run_dir, "loss.csv")
    return (loss.step.iloc[-1] - loss.step.iloc[0]) / (loss.time_s.iloc[-1] - loss.time_s.iloc[0])


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    from mindexp.experiments.digits import Digits
    return Digits().run(out=str(tmp_path_factory.mktemp("digits")))


def test_defaults_reach_the_documented_eval_accuracy(digits_run):
    assert digits_run.status == "completed"
    assert digits_run.eval.accuracy.iloc[-1] >= 0.97
    assert digits_run.eval.epoch.tolist() == list(range(1, 21))


def test_steps_per_s_agrees_with_loss_csv(digits_run):
    assert digits_run.meta["steps_per_s"] == pytest.approx(loss_csv_rate(digits_run.dir), rel=0.15)


def test_compare_reports_the_training_loss_and_the_eval_accuracy(digits_run):
    row = compare(digits_run.dir).iloc[0]
    loss, evals = digits_run.loss, digits_run.eval
    assert row["final_loss"] == loss.loss.iloc[-1]
    assert row["min_loss"] == loss.loss.min()
    assert row["eval_loss"] == evals.loss.iloc[-1]          # eval.csv's `loss`, renamed
    assert row["eval_accuracy"] == evals.accuracy.iloc[-1]


def test_eval_accuracy_is_the_accuracy_of_the_saved_network(digits_run):
    import mindspore as ms
    from mindexp.experiments.digits import Digits
    images, labels = Digits(load_run(digits_run.dir).config).source("eval")
    logits = load_run(digits_run.dir).network()(ms.Tensor(images)).asnumpy()
    accuracy = float(np.mean(logits.argmax(axis=1) == labels))
    assert compare(digits_run.dir).iloc[0]["eval_accuracy"] == pytest.approx(accuracy, abs=1e-6)


def test_spirals_steps_per_s_agrees_with_loss_csv(tmp_path):
    from mindexp.experiments.spirals import Spirals
    run = Spirals(epochs=6).run(out=str(tmp_path))
    assert run.meta["steps_per_s"] == pytest.approx(loss_csv_rate(run.dir), rel=0.15)


def test_sweep_of_two_points(cli, tmp_path):
    proc = cli("sweep", "digits", "--grid", "lr=0.003,0.01", "--set", "epochs=2",
               "--out", tmp_path / "out", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = compare(tmp_path / "out" / "digits")
    assert sorted(table.lr) == [0.003, 0.01] and set(table.status) == {"completed"}
    for run_dir in table.run_dir:
        assert read_csv(run_dir, "eval.csv").epoch.tolist() == [1, 2]


def test_sigterm_then_resume_evaluates_each_epoch_once(cli, tmp_path):
    out = tmp_path / "out"
    proc = forkserver.popen([sys.executable, "-m", "mindexp", "run", "digits", "--set", "epochs=6",
                             "--out", str(out), "--quiet"], cwd=tmp_path, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = _wait_for_step(out / "digits", lambda step: step > 2 * 44 + 10, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=300)
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "interrupted"
    done = meta["steps"] // 44  # complete epochs (44 steps each)
    assert read_csv(run_dir, "eval.csv").epoch.tolist() == list(range(1, done + 1))
    resumed = cli("resume", run_dir, "--quiet")  # (no signal: this process will do)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    run = load_run(run_dir)
    assert run.status == "completed"
    assert run.eval.epoch.tolist() == [1, 2, 3, 4, 5, 6]
    assert run.loss.step.tolist() == list(range(1, 6 * 44 + 1))


def _wait_for_step(root, reached, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        runs = [os.path.join(root, d) for d in os.listdir(root)] if os.path.isdir(root) else []
        for run_dir in runs:
            path = os.path.join(run_dir, "loss.csv")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    lines = f.read().splitlines()
                if len(lines) > 1 and reached(int(lines[-1].split(b",")[0])):
                    return run_dir
        time.sleep(0.05)
    raise AssertionError("the run did not get far enough")


def test_without_scikit_learn_run_says_which_extra_to_install(cli, tmp_path, monkeypatch):
    fake = tmp_path / "no_sklearn"
    (fake / "sklearn").mkdir(parents=True)
    (fake / "sklearn" / "__init__.py").write_text("raise ImportError('no sklearn here')\n")
    # in this process, as a process started with PYTHONPATH=fake would import it: the
    # fake sklearn first on the path, and none imported yet
    monkeypatch.syspath_prepend(str(fake))
    for name in [n for n in sys.modules if n == "sklearn" or n.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    proc = cli("run", "digits")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "mindexp[digits]" in lines[0] and "scikit-learn" in lines[0]
    assert not (tmp_path / "outputs").exists()
