"""params.csv is a function of the parameters alone: the same values give the
same bytes whatever the threads of the statistics (the CPUs this process may
use), whenever the kept steps are written (a busy machine's slower steps fill
fewer rows a block), and whatever CPUs the process was started on."""
import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from mindexp.callbacks import ParameterTracker, parameter_tracker
from mindexp.callbacks import _stats

from conftest import cli_env
from test_callbacks_unit import drive

# one parameter on each path: element by element, the block of steps
# (<= 1,024), one chunk at the step (<= 262,144), chunks shared with threads
SIZES = (4, 1000, 20_000, 4 * 262_144 + 1)


class Sized(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(11)
        for size in SIZES:
            values = (rng.standard_normal(size) * 0.03 - 1.3e-5).astype(np.float32)
            setattr(self, f"p{size}", Parameter(Tensor(values), name=f"p{size}"))

    def construct(self, x):
        return x


def _params_csv(folder, run_context, monkeypatch, workers, flush_each_step):
    """params.csv's bytes after 6 steps in which every parameter changes in place."""
    net = Sized()
    monkeypatch.setattr(parameter_tracker, "default_workers", lambda: workers)
    ticks = itertools.count(0, 1000 if flush_each_step else 0)  # a block a step, or one block
    monkeypatch.setattr(parameter_tracker.time, "monotonic", lambda: float(next(ticks)))
    rng = np.random.default_rng(5)

    def outputs(step):  # each step moves every parameter, in its own memory
        for p in net.trainable_params():
            view = p.asnumpy()
            view += (rng.standard_normal(view.shape) * 1e-3).astype(np.float32)
        return (Tensor(np.float32(1.0 / step)),)
    tracker = ParameterTracker(folder)
    drive(tracker, run_context(train_network=net, optimizer=nn.SGD(net.trainable_params())),
          1, 6, outputs=outputs)
    assert tracker.stats_threads == workers
    with open(os.path.join(folder, "params.csv"), "rb") as f:
        return f.read()


def test_params_csv_is_the_same_whatever_the_threads_and_the_blocks(
        tmp_path, run_context, monkeypatch):
    seen = {_params_csv(tmp_path / f"{w}-{flush}", run_context, monkeypatch, w, flush)
            for w in (1, 4) for flush in (False, True)}
    assert len(seen) == 1


AFFINITY_RUN = textwrap.dedent("""
    import os, sys
    if sys.argv[2] == "one":  # before numpy and its BLAS start their threads
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import numpy as np
    from mindspore import nn
    from mindspore.train import Model
    import mindspore.dataset as ds
    from mindexp.callbacks import ParameterTracker, TrainStep
    import mindspore as ms
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 600), nn.ReLU(), nn.Dense(600, 500), nn.ReLU(),
                            nn.Dense(500, 1))
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    data = ds.NumpySlicesDataset((x, x[:, :1] * 2), ["x", "y"], shuffle=False).batch(16)
    opt = nn.Adam(net.trainable_params(), 1e-3)
    stats = sys.argv[3] == "graph"
    Model(TrainStep(nn.WithLossCell(net, nn.MSELoss()), opt, param_stats=stats)).train(
        2, data, callbacks=[ParameterTracker(sys.argv[1], stats=sys.argv[3])],
        dataset_sink_mode=False)
""")


@pytest.mark.slow  # four processes that train
@pytest.mark.parametrize("stats", ["host", "graph"])
def test_params_csv_is_the_same_on_one_cpu_and_on_all(tmp_path, stats):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to compare")
    (tmp_path / "run.py").write_text(AFFINITY_RUN)
    found = []
    for cpus in ("one", "all"):
        folder = tmp_path / cpus
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(folder), cpus, stats],
                              env=cli_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        found.append((folder / "params.csv").read_bytes())
    assert found[0] == found[1] and found[0].count(b"\n") > 8


def test_train_step_sums_of_the_same_values_are_the_same_at_every_step(ms_graph):
    """MindSpore's CPU ReduceSum picks its thread split by timing its first
    launches: summed whole, the same weights (and gradients) gave other last
    bits a few steps in. Weights an SGD of rate 0 leaves as they are, on the
    same batch, must give one row of sums and one gradient norm."""
    from mindexp.callbacks import TrainStep
    net = nn.Dense(1024, 1024)
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.0),
                     param_stats=True)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 1024)).astype(np.float32))
    y = Tensor(rng.standard_normal((8, 1024)).astype(np.float32))
    outs = [cell(x, y) for _ in range(40)]
    assert len({out[-1].asnumpy().tobytes() for out in outs}) == 1  # the parameters' sums
    assert len({out[1].asnumpy().tobytes() for out in outs}) == 1  # the gradient norm
