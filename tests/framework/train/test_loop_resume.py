"""A MindSpore 2.x functional loop (value_and_grad + @jit, Adam, the digits data,
eval every epoch, keep-best, early stopping), tracked: SIGKILLed at random moments
and resumed, it writes what an uninterrupted run writes; its best checkpoint loads
into a network the caller built."""
import csv
import glob
import os
import random
import runpy
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import forkserver
from conftest import cli_env

SCRIPT = textwrap.dedent('''
    import sys

    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from sklearn.datasets import load_digits

    import mindexp
    from mindexp.callbacks import global_norm

    out = sys.argv[1]
    resume = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    digits = load_digits()
    x = (digits.data / 16).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, y_train, x_test, y_test = x[:1200], y[:1200], ms.Tensor(x[1200:]), y[1200:]

    with mindexp.track(out, "digits", {"lr": 0.01, "hidden": 32}, resume=resume,
                       early_stop="eval_accuracy", patience=2,
                       checkpoint_monitor="eval_accuracy", keep_best=2) as run:
        net = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
        loss_fn = nn.CrossEntropyLoss()
        optimizer = nn.Adam(net.trainable_params(), learning_rate=0.01)

        def forward_fn(data, label):
            logits = net(data)
            return loss_fn(logits, label), logits

        grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

        @ms.jit
        def train_step(data, label):
            (loss, _), grads = grad_fn(data, label)
            norm = global_norm(grads)
            optimizer(grads)
            return loss, norm

        run.load(net, optimizer)
        for epoch in run.epochs(epochs):
            for i, (data, label) in enumerate(run.batches((x_train, y_train), batch_size=32)):
                loss, norm = train_step(data, label)
                run.step(loss, net=net, grad_norm=norm, optimizer=optimizer)
                if i % 16 == 15:  # mid-epoch checkpoints too: a resume continues mid-epoch
                    run.save(net, optimizer)
            accuracy = float((net(x_test).argmax(1).asnumpy() == y_test).mean())
            run.log_eval(accuracy=accuracy)
            run.save(net, optimizer)
''')
LOGS = ("loss.csv", "grad_norm.csv", "params.csv", "eval.csv")
KILLS = 10


def _rows(path, drop=("time_s",)):
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def _run_dir(out):
    found = glob.glob(os.path.join(out, "digits", "*"))
    return found[0] if found else None


def _lines(run_dir):
    try:
        with open(os.path.join(run_dir, "loss.csv"), encoding="utf-8") as f:
            return sum(1 for _ in f)
    except (OSError, TypeError):
        return 0


def _start(script, out, run_dir=None):
    return forkserver.popen([sys.executable, str(script), str(out), run_dir or "-"],
                            env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def _killed_and_resumed(script, out, rng, steps):
    """Kill the script ``KILLS`` times at random points of its training and resume
    it each time from its run (a run killed before its first checkpoint starts
    again); returns the run folder and the kills. The points are chosen in steps
    (loss.csv's rows, written at least at every checkpoint), each a little past
    the last, and the kill follows within a few milliseconds: the number of kills
    does not depend on how fast the machine trains, and every kill leaves rows
    written after the last checkpoint behind it."""
    targets = sorted(rng.sample(range(2, int(steps * 0.6)), KILLS))
    kills = 0
    while True:
        run_dir = _run_dir(out)
        resumable = bool(run_dir and glob.glob(os.path.join(run_dir, "checkpoints", "*.ckpt")))
        if run_dir and not resumable:
            import shutil
            shutil.rmtree(run_dir)  # nothing to resume from: a new run
        start = _lines(run_dir) if resumable else 0
        proc = _start(script, out, run_dir if resumable else None)
        if kills < KILLS:
            wanted = max(targets[kills], start + 2)  # rows past the header and the resume point
            while proc.poll() is None and _lines(_run_dir(out)) < wanted:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.02))
            assert proc.poll() is None, f"the run ended before kill {kills + 1} (at step {wanted})"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            continue
        err = proc.communicate(timeout=300)[1]
        assert proc.returncode == 0, err[-2000:]
        return _run_dir(out), kills


@pytest.mark.slow  # about a dozen short trainings
@pytest.mark.timeout(1200)  # ~1 min on an idle 2-core machine: started among the first
def test_a_functional_loop_killed_at_random_moments_resumes_to_the_same_logs(tmp_path):
    script = tmp_path / "digits.py"
    script.write_text(SCRIPT)
    reference = _start(script, tmp_path / "ref")
    assert reference.wait(timeout=300) == 0, reference.stderr.read()[-2000:]
    ref_dir = _run_dir(tmp_path / "ref")
    rng = random.Random(int(os.environ.get("MINDEXP_FAULT_SEED", "0")))
    steps = _lines(ref_dir) - 1
    run_dir, kills = _killed_and_resumed(script, tmp_path / "killed", rng, steps)
    assert kills == KILLS
    for name in LOGS:
        assert _rows(os.path.join(run_dir, name)) == _rows(os.path.join(ref_dir, name)), name
    import mindexp
    meta, ref = mindexp.load_run(run_dir).meta, mindexp.load_run(ref_dir).meta
    assert meta["status"] == ref["status"] == "completed" and len(meta["resumes"]) >= 3
    assert meta["stop_reason"] == ref["stop_reason"] and "eval_accuracy" in ref["stop_reason"]
    assert meta["steps"] == ref["steps"] < 8 * 37  # early stopping ended both


@pytest.mark.slow  # trains three epochs in this process
def test_the_best_checkpoint_of_a_loop_run_loads_into_the_callers_network(
        tmp_path, monkeypatch):
    import mindspore as ms
    from mindspore import nn
    import mindexp
    script = tmp_path / "digits.py"
    script.write_text(SCRIPT)
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path / "out"), "-", "3"])
    run = runpy.run_path(str(script), run_name="__main__")["run"]
    best = [r for r in _rows(os.path.join(run.dir, "checkpoints.csv")) if r["kind"] == "best"]
    chosen = max(best, key=lambda r: float(r["score"]))  # accuracy: the highest
    by_hand = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
    ms.load_param_into_net(by_hand, ms.load_checkpoint(os.path.join(run.dir, chosen["file"])))
    net = mindexp.load_run(run.dir).network(
        "best", net=nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10)))
    x = ms.Tensor(np.random.default_rng(0).random((5, 64), dtype=np.float32))
    np.testing.assert_array_equal(net(x).asnumpy(), by_hand(x).asnumpy())
    fresh = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
    assert not np.array_equal(fresh(x).asnumpy(), net(x).asnumpy())  # it did load
