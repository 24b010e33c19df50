"""mindexp.track() in a thread that is not the main one: Python installs signal
handlers only in the main thread, so track() says so in one line, and a SIGTERM
that ends the process leaves the run interrupted, not ``running``."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import cli_env

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    from mindspore import nn
    from mindspore.dataset import GeneratorDataset
    from mindspore.train import Callback, Model
    import mindexp

    class Slow(Callback):
        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num == 10:  # after the checkpoint at 8
                print("step 10", flush=True)
            time.sleep(0.02)

    def work():
        net = nn.Dense(1, 1)
        model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
        x = np.random.default_rng(0).random((40, 1), dtype=np.float32)
        data = GeneratorDataset(list(zip(x, 2 * x)), ["x", "y"], shuffle=False).batch(10)
        with mindexp.track(sys.argv[1], "threaded") as run:
            model.train(10000, data, callbacks=run.callbacks(model, Slow()),
                        dataset_sink_mode=False)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
""")


def _status(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow  # a process of its own that trains until signalled
def test_sigterm_to_a_process_tracking_in_a_thread_ends_the_run_interrupted(tmp_path):
    (tmp_path / "threaded.py").write_text(SCRIPT)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "threaded.py"), str(out)],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "step 10\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM  # no handler in the process: it just ends
    warned = [line for line in err.splitlines() if "outside the main thread" in line]
    assert len(warned) == 1 and "a watcher records the run interrupted" in warned[0], err
    (run_dir,) = (out / "threaded").iterdir()
    meta = _status(run_dir)
    for _ in range(300):  # the watcher takes the lock the dead process left
        if meta["status"] != "running":
            break
        time.sleep(0.1)
        meta = _status(run_dir)
    assert meta["status"] == "interrupted", meta
    assert meta["steps"] >= 8 and meta["ended_at"]  # loss.csv's, flushed at each checkpoint
    assert meta["error"] and "track() ran outside the main thread" \
        in meta["error"]


def test_a_block_in_a_thread_that_ends_normally_stays_completed(tmp_path, caplog):
    import threading
    import mindexp
    from mindexp.train import watcher
    runs = []

    def work():
        with mindexp.track(tmp_path / "out", "threaded", config={"lr": 0.1}) as run:
            runs.append(run.dir)
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert len([r for r in caplog.records if "outside the main thread" in r.getMessage()]) == 1
    watcher._started[-1].wait(timeout=60)  # it found the record final, and left it
    assert _status(runs[0])["status"] == "completed"
