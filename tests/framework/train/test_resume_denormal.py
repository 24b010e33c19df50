"""Resume past the step where Adam's beta1_power turns denormal (0.9 ** 830 <
1.18e-38): the logs and every tensor of the final checkpoint are bitwise the
uninterrupted run's, except beta1_power, which MindSpore 2.10 flushes to 0 at
the resumed run's first step (docs/training.md; the contract test
test_a_denormal_loaded_before_a_graphs_first_run_becomes_zero_and_after_it_stays):
that one is compared with a tolerance below float32's smallest normal."""
import os

import numpy as np
import pytest

from mindexp.experiments.linear import Linear

# 10 steps an epoch; the checkpoint at step 840 (epoch 84) already holds a denormal
CONFIG = {"optimizer": "adam", "lr": 0.01, "samples": 20, "batch_size": 2,
          "track_params": False, "checkpoint_every": 1, "checkpoint_interval_s": 0,
          "keep_checkpoints": 1, "system_every_s": 0}
TINY = np.finfo(np.float32).tiny
LOGS = ("grad_norm.csv", "loss.csv")


def _final(run):
    import mindspore as ms
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(run.checkpoint()).items()
            if hasattr(v, "asnumpy")}


def _rows(run, name):
    with open(os.path.join(run.dir, name)) as f:
        lines = f.read().splitlines()
    at = lines[0].split(",").index("time_s") if "time_s" in lines[0] else None
    return [",".join(c for i, c in enumerate(ln.split(",")) if i != at) for ln in lines]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_resume_past_the_denormal_differs_only_in_beta1_power(tmp_path):
    from mindexp.api import resume_run
    whole = Linear({**CONFIG, "epochs": 86}).run(out=tmp_path / "whole", quiet=True)
    part = Linear({**CONFIG, "epochs": 84}).run(out=tmp_path / "part", quiet=True)
    assert 0 < _final(part)["beta1_power"] < TINY          # saved as a denormal
    resumed = resume_run(str(part.dir), {"epochs": 86})
    for name in LOGS:
        assert _rows(resumed, name) == _rows(whole, name)   # every logged value, bitwise
    got, want = _final(resumed), _final(whole)
    assert sorted(got) == sorted(want)
    differ = [k for k in want if not np.array_equal(got[k], want[k])]
    assert differ in ([], ["beta1_power"])
    assert abs(float(got["beta1_power"]) - float(want["beta1_power"])) < TINY
