"""Data that changes with the epoch (a curriculum): each epoch's batches come
from that epoch's data, asked through the batch source (which counts epochs
itself: MindSpore reads ahead), and a run stopped mid-schedule resumes to the
uninterrupted run's files byte for byte."""
import os
import sys

import numpy as np
import pytest

import forkserver
from conftest import cli_env
from mindexp.errors import DataError


def _epoch_columns(epoch):
    """8 samples whose x and y both hold the 0-based epoch."""
    x = np.full((8, 1), epoch, dtype=np.float32)
    return x, x.copy()


def _epochs_seen(dataset, epochs, numpy=True):
    it = dataset.create_tuple_iterator(num_epochs=epochs, output_numpy=numpy)
    seen = []
    for _ in range(epochs):
        seen.append(sorted({float(x[0][0]) for x, _ in it}))
    return seen


def test_each_epoch_reads_its_own_data_from_the_batch_source():
    from mindexp.define.data import make_dataset
    data = make_dataset(_epoch_columns(0), ("x", "y"), 4, shuffle=True, seed=0,
                        epoch_data=_epoch_columns)
    assert _epochs_seen(data, 3) == [[0.0], [1.0], [2.0]]


def test_through_mindsporess_pipeline_too():
    from mindexp.define.data import make_dataset
    data = make_dataset(_epoch_columns(0), ("x", "y"), 4, shuffle=False, seed=0,
                        epoch_data=_epoch_columns).map(lambda x: x, input_columns=["x"])
    assert _epochs_seen(data, 3) == [[0.0], [1.0], [2.0]]


def test_a_resumed_epoch_starts_with_its_own_data():
    from mindexp.define.data import make_dataset
    rest = make_dataset(_epoch_columns(0), ("x", "y"), 4, shuffle=False, seed=0,
                        start_epoch=2, first_batch=1, epoch_data=_epoch_columns)
    assert _epochs_seen(rest, 1) == [[2.0]]


def test_an_epoch_of_another_size_is_refused():
    from mindexp.define.data import make_dataset

    def shrinking(epoch):
        x = np.zeros((8 - 4 * epoch, 1), dtype=np.float32)
        return x, x
    data = make_dataset(shrinking(0), ("x", "y"), 4, shuffle=False, seed=0,
                        epoch_data=shrinking)
    with pytest.raises(DataError, match=r"epoch=2\) has 4 samples; every epoch .* must have 8"):
        _epochs_seen(data, 2)


def test_the_shipped_curriculum_grows_the_spirals_and_evaluates_on_the_full_ones():
    from mindexp.experiments.spirals_curriculum import SpiralsCurriculum
    from mindexp.experiments.spirals import Spirals
    exp = SpiralsCurriculum(turns_start=0.5, turns=2.0, ramp_epochs=3, samples=64, noise=0.0)
    assert exp.curriculum()
    assert [exp.turns_at(e) for e in (1, 2, 4, 9)] == [0.5, 1.0, 2.0, 2.0]
    for epoch in (1, 2, 4):  # a noiseless arm of class 0 at radius r has angle r * turns * 2 pi
        xy, label = exp.source("train", epoch=epoch)
        r, angle = np.hypot(*xy[label == 0].T), np.arctan2(xy[label == 0, 1], xy[label == 0, 0])
        expected = r * exp.turns_at(epoch) * 2 * np.pi
        np.testing.assert_allclose(np.cos(angle), np.cos(expected), atol=1e-4)
    for got, full in zip(exp.source("eval"), Spirals(turns=2.0, noise=0.0).source("eval")):
        np.testing.assert_array_equal(got, full)
    flat = SpiralsCurriculum(curriculum=False)
    assert flat.turns_at(1) == flat.config.turns


KILLER = '''
import os, signal
from mindspore.train import Callback
from mindexp.experiments.spirals_curriculum import SpiralsCurriculum


class Kill(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == int(os.environ.get("KILL_AT", "0")):
            os.kill(os.getpid(), getattr(signal, os.environ["KILL_SIG"]))


class Stopped(SpiralsCurriculum):
    name = "spirals_curriculum"

    def callbacks(self):
        return [Kill()]
'''
RUN = ["run", "killer.py:Stopped", "--out", "out", "--quiet", "--set", "samples=64",
       "--set", "eval_samples=32", "--set", "batch_size=16", "--set", "epochs=4",
       "--set", "ramp_epochs=3", "--set", "checkpoint_every=1", "--set",
       "checkpoint_interval_s=0", "--set", "hidden=16"]
LOGS = ("loss.csv", "grad_norm.csv", "params.csv", "eval.csv")


def _mindexp(root, *args, **env):
    """``python -m mindexp ARGS``: a process of its own (forked from the server that
    imported MindSpore once, tests/forkserver.py), to be killed by a signal."""
    return forkserver.run([sys.executable, "-m", "mindexp", *args], cwd=root,
                          env=cli_env(**env), capture_output=True, text=True, timeout=300)


def _run_dir(root):
    (run_id,) = os.listdir(os.path.join(root, "out", "spirals_curriculum"))
    return os.path.join(root, "out", "spirals_curriculum", run_id)


def _logs(run_dir):
    """Each log's bytes; loss.csv without its time_s column (a clock)."""
    out = {}
    for name in LOGS:
        with open(os.path.join(run_dir, name), "rb") as f:
            lines = f.read().splitlines()
        if name == "loss.csv":
            at = lines[0].split(b",").index(b"time_s")
            lines = [b",".join(c for i, c in enumerate(ln.split(b",")) if i != at)
                     for ln in lines]
        out[name] = lines
    return out


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    (root / "killer.py").write_text(KILLER)
    done = _mindexp(root, *RUN)
    assert done.returncode == 0, done.stderr
    return _logs(_run_dir(root))


@pytest.mark.slow  # two processes that train, and a resume
@pytest.mark.parametrize("sig, resumed_at", [("SIGKILL", 8), ("SIGTERM", 10)])
def test_stopped_mid_schedule_and_resumed_equals_the_uninterrupted_run(cli, tmp_path, whole, sig,
                                                                      resumed_at):
    (tmp_path / "killer.py").write_text(KILLER)
    stopped = _mindexp(tmp_path, *RUN, KILL_AT="10", KILL_SIG=sig)
    assert stopped.returncode != 0
    run_dir = _run_dir(tmp_path)
    resumed = cli("resume", run_dir, "--quiet")  # (no signal: this process will do)
    assert resumed.returncode == 0, resumed.stderr
    import json
    with open(os.path.join(run_dir, "run.json")) as f:
        assert json.load(f)["resumes"][0]["step"] == resumed_at  # SIGTERM: mid-epoch 3
    assert _logs(run_dir) == whole
