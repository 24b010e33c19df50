"""The runner on real training: convergence, run directory, run.json lifecycle."""
import json
import os
import signal

import numpy as np
import pytest

from mindexp.experiments.linear import Linear
from mindexp import ConfigError, DataError, TrainingError
from rundirs import exploding_experiment


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return Linear().run(out=str(tmp_path_factory.mktemp("out")))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_linear_defaults_learn_y_equals_2x(default_run):
    params = default_run.meta["params"]
    assert abs(params["dense.weight"] - 2) < 0.02
    assert abs(params["dense.bias"]) < 0.02


def test_run_directory_holds_config_run_json_and_logs(default_run):
    d = default_run.dir
    assert os.path.basename(os.path.dirname(d)) == "linear"
    config = json.load(open(os.path.join(d, "config.json")))
    assert config["lr"] == Linear.Config.lr and config["samples"] == 100 and "seed" in config
    meta = default_run.meta
    assert meta["status"] == "completed" and meta["steps"] == 300 and meta["epochs"] == 30
    assert set(meta["versions"]) == {"mindspore", "numpy", "python"}
    assert meta["device"] == "CPU" and meta["mode"] == "graph" and meta["ended_at"]
    assert meta["final_loss"] == pytest.approx(default_run.loss["loss"].iloc[-1])
    assert meta["targets"] == {"dense.weight": 2.0, "dense.bias": 0.0}
    loss = default_run.loss
    assert list(loss.columns) == ["step", "epoch", "loss", "lr", "time_s"]
    assert loss["step"].tolist() == list(range(1, 301))
    assert loss["epoch"].tolist() == [s // 10 + 1 for s in range(300)]
    assert set(default_run.params["param"]) == {"dense.weight", "dense.bias"}
    assert len(default_run.grad_norm) == 300
    assert default_run.checkpoint() and default_run.checkpoint().endswith("step0000300.ckpt")


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_rebuilt_network_predicts_2x(default_run):
    from mindspore import Tensor
    net = default_run.network()
    out = net(Tensor(np.array([[1.0], [3.0]], np.float32))).asnumpy().ravel()
    assert out == pytest.approx([2.0, 6.0], abs=0.05)


Exploding = exploding_experiment()


def test_a_network_that_raises_marks_the_run_failed_with_its_message(tmp_path):
    with pytest.raises(TrainingError, match="boom from the network") as info:
        Exploding(epochs=1, batch_size=5).run(out=str(tmp_path))
    meta = info.value.run.meta
    assert meta["status"] == "failed" and "boom from the network" in meta["error"]
    assert meta["ended_at"]


def test_a_nan_loss_marks_the_run_diverged(tmp_path):
    run = Linear(lr=50.0, epochs=20).run(out=str(tmp_path))
    assert run.status == "diverged"
    assert "diverged: loss is" in run.meta["error"]
    assert run.meta["steps"] < 200  # stopped early
    assert not np.isfinite(run.loss["loss"].iloc[-1])


class StopsItself(Linear):
    """Sends itself SIGTERM at step 25, like `kill` from a shell."""

    def callbacks(self):
        from mindspore.train import Callback

        class Kill(Callback):
            def on_train_step_end(self, run_context):
                if run_context.original_args().cur_step_num == 25:
                    os.kill(os.getpid(), signal.SIGTERM)
        return [Kill()]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_sigterm_stops_cleanly_as_interrupted_with_a_final_checkpoint(tmp_path):
    run = StopsItself(epochs=10).run(out=str(tmp_path))
    assert run.status == "interrupted"
    assert run.meta["steps"] == 25 and run.loss["step"].tolist() == list(range(1, 26))
    assert run.checkpoint().endswith("epoch0003-step0000025.ckpt")


def test_data_checks_happen_before_any_run_directory(tmp_path):
    with pytest.raises(ConfigError, match=r"batch_size.*at most the training set size 100") as info:
        Linear(batch_size=101).run(out=str(tmp_path))
    assert info.value.field == "batch_size"

    class Ragged(Linear):
        def source(self, split):
            return (np.ones((10, 1)), np.ones((9, 1))) if split == "train" else None
    with pytest.raises(DataError, match="different lengths: x has 10, y has 9"):
        Ragged().run(out=str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_float64_data_is_converted_for_a_float32_network(tmp_path):
    class Doubles(Linear):
        def source(self, split):
            x = np.random.default_rng(0).random((50, 1))
            return (x, 2 * x) if split == "train" else None
    run = Doubles(epochs=2, batch_size=10).run(out=str(tmp_path))
    assert run.status == "completed"


MAKE_DIRS = """
import sys
from mindexp.rundir.io import create_run_dir
print("ready", flush=True)
sys.stdin.readline()  # the test's go, once all 8 are ready
for _ in range(5):
    print(create_run_dir(sys.argv[1], "linear"))
"""


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_run_ids_stay_unique_across_8_processes_starting_together(tmp_path):
    import subprocess
    import sys
    from conftest import cli_env
    # (real processes: they import no MindSpore, 0.1 CPU-s each)
    procs = [subprocess.Popen([sys.executable, "-c", MAKE_DIRS, str(tmp_path)], env=cli_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    assert [p.stdout.readline() for p in procs] == ["ready\n"] * 8
    for p in procs:  # all 8 have imported: they start creating together
        p.stdin.write("go\n")
        p.stdin.flush()
    paths = [line for p in procs for line in p.communicate()[0].split()]
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 40 == len(set(paths)) == len(os.listdir(tmp_path / "linear"))


class SeesTheCollector(Linear):
    """Records, during training, whether the objects made before it are frozen."""

    def callbacks(self):
        import gc

        from mindspore.train import Callback
        seen = self.seen = []

        class Look(Callback):
            def on_train_step_end(self, run_context):
                seen.append(gc.get_freeze_count())
        return [Look()]


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_training_keeps_startup_objects_out_of_full_collections_and_gives_them_back(tmp_path):
    import gc
    before = gc.get_freeze_count()
    exp = SeesTheCollector(epochs=2)
    run = exp.run(out=str(tmp_path))
    assert run.status == "completed"
    assert min(exp.seen) > 10_000          # MindSpore's modules, the network, ...
    assert gc.get_freeze_count() == before  # unfrozen after training


def test_a_caller_s_own_gc_freeze_is_left_alone():
    import gc

    from mindexp.train.session import startup_objects_frozen

    def frozen(obj):
        """Frozen objects are in none of the generations gc.get_objects() walks. (Not
        the freeze count: it drops whenever another thread frees a frozen object.)"""
        return not any(o is obj for o in gc.get_objects())
    mine = [object()]
    gc.freeze()
    try:
        assert frozen(mine)
        with startup_objects_frozen():
            assert frozen(mine)
        assert frozen(mine)  # the caller's freeze outlives the context
    finally:
        gc.unfreeze()
    assert not frozen(mine)
