"""A callback's state beyond its file (opt-in ``state_dict``/``load_state_dict``)
is saved with each checkpoint and given back on a resume: through a mindexp
run, and with the bare Checkpoint in a plain Model.train."""
import json
import os

import pytest
from mindspore.train import Callback

from mindexp.experiments.linear import Linear

TINY = {"samples": 20, "batch_size": 10, "track_params": False, "checkpoint_every": 1,
        "checkpoint_interval_s": 0}


class Counter(Callback):
    """Counts the steps it has seen over the run's whole life, and the sum of
    their losses; writes both at the end of each training."""

    def __init__(self, folder):
        self.folder, self.steps, self.total = folder, 0, 0.0

    def on_train_step_end(self, run_context):
        from mindexp.callbacks._common import first_output, to_float
        self.steps += 1
        self.total += to_float(first_output(run_context.original_args().net_outputs))

    def on_train_end(self, run_context):
        with open(os.path.join(self.folder, "counter.json"), "w") as f:
            json.dump({"steps": self.steps, "total": self.total}, f)

    def state_dict(self):
        return {"steps": self.steps, "total": self.total}

    def load_state_dict(self, state):
        self.steps, self.total = state["steps"], state["total"]


class Counted(Linear):
    def callbacks(self):
        return [Counter(self.run_dir)]


def _counter(run):
    with open(os.path.join(run.dir, "counter.json")) as f:
        return json.load(f)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_resumed_run_gives_the_callback_its_state_back(tmp_path):
    from mindexp.api import resume_run
    whole = Counted({**TINY, "epochs": 4}).run(out=tmp_path / "whole", quiet=True)
    first = Counted({**TINY, "epochs": 2}).run(out=tmp_path / "parts", quiet=True)
    assert _counter(first)["steps"] == first.meta["steps"] == 4
    resumed = resume_run(str(first.dir), {"epochs": 4})
    assert resumed.meta["steps"] == 8
    # without the state the new object would count 4 (steps 5-8) and a part of the sum
    assert _counter(resumed)["steps"] == 8 == _counter(whole)["steps"]
    assert _counter(resumed)["total"] == pytest.approx(_counter(whole)["total"], rel=1e-6)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_bare_checkpoint_saves_state_and_load_callback_state_restores_it(tmp_path):
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model
    from mindexp.callbacks import Checkpoint, latest_checkpoint, load_callback_state
    import numpy as np
    from mindspore.dataset import NumpySlicesDataset
    x = np.arange(20, dtype=np.float32).reshape(-1, 1) / 20
    data = NumpySlicesDataset({"x": x, "y": 2 * x}, shuffle=False).batch(10)
    net = nn.Dense(1, 1)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))
    counter, other = Counter(str(tmp_path)), Counter(str(tmp_path))
    other.state_key = "second"
    model.train(2, data, callbacks=[
        counter, other, Checkpoint(tmp_path / "logs", stateful=[counter, other])])
    _, _, path = latest_checkpoint(tmp_path / "logs")
    fresh, fresh_other = Counter(str(tmp_path)), Counter(str(tmp_path))
    fresh_other.state_key = "second"
    assert sorted(load_callback_state(path, [fresh, fresh_other])) == ["Counter", "second"]
    assert (fresh.steps, fresh_other.steps) == (4, 4)
    assert ms.load_checkpoint(path)["callback_state"]  # in the .ckpt itself, one file


def test_a_stateful_list_is_checked_up_front(tmp_path):
    from mindexp.callbacks import Checkpoint
    with pytest.raises(ValueError, match=r"state_dict\(\) and load_state_dict.*Received: "):
        Checkpoint(tmp_path, stateful=[object()])
