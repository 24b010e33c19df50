"""The transformer experiment: accuracy, AMP O2, msrun, exact resume, tracked attention."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from mindexp.experiments.transformer import CLOSE, OPEN, PAD, is_balanced, make_brackets

SMALL = ["--set", "samples=512", "--set", "eval_samples=128", "--set", "warmup_steps=0",
         "--set", "checkpoint_interval_s=0", "--set", "log_every=1", "--quiet"]

KILLABLE = '''
import os, signal
from mindexp.experiments.transformer import Transformer


class Killable(Transformer):
    """Transformer that kills itself (SIGKILL) at step $KILL_AT."""

    def callbacks(self):
        from mindspore.train import Callback
        at = int(os.environ.get("KILL_AT", "0"))

        class Kill(Callback):
            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                step = (p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1
                if at and step == at:
                    os.kill(os.getpid(), signal.SIGKILL)
        return [Kill()]
'''


def only_run(root, name):
    (run_id,) = os.listdir(os.path.join(root, name))
    return os.path.join(root, name, run_id)


def test_bracket_data_is_int32_padded_and_half_balanced():
    tokens, labels = make_brackets(400, 16, np.random.default_rng(0))
    assert tokens.dtype == np.int32 and tokens.shape == (400, 16) and labels.dtype == np.int32
    assert set(np.unique(tokens)) == {PAD, OPEN, CLOSE}
    assert (tokens[:, 0] != PAD).all() and (tokens == PAD).any()
    assert labels.tolist() == [int(is_balanced(t)) for t in tokens]
    assert labels.mean() == 0.5
    unbalanced = tokens[labels == 0]
    same_counts = [(t == OPEN).sum() == (t == CLOSE).sum() for t in unbalanced]
    assert 0.3 < np.mean(same_counts) < 0.7  # half need the order, not just the counts


@pytest.mark.slow
def test_defaults_reach_eval_accuracy_095(tmp_path):
    from mindspore.train import Callback

    from mindexp.experiments.transformer import Transformer

    class StopAt095(Callback):
        """Ends the run at the first evaluation at 0.95 (epoch 6 of 12 here): the
        epochs before it are the defaults' own, and the rest cost half the test."""

        def on_train_epoch_end(self, run_context):
            if (run_context.original_args().get("eval_results") or {}).get("accuracy", 0) >= 0.95:
                run_context.request_stop()

    class Defaults(Transformer):
        def callbacks(self):
            return [StopAt095()]

    run = Defaults().run(out=str(tmp_path))
    assert run.status == "completed"
    assert run.eval["accuracy"].iloc[-1] >= 0.95
    assert len(run.eval) < Transformer.Config().epochs   # stopped by StopAt095, not by the end
    params = set(run.params["param"])
    assert "layers.0.attention.query.weight:norm" in params  # large: statistics, not elements
    assert {p.split("[")[0] for p in params if "[" in p} == {"head.bias"}  # 2 elements only


@pytest.mark.slow
def test_amp_o2_trains_and_attention_of_one_layer_is_trackable(cli, tmp_path):
    done = cli("run", "transformer", *SMALL, "--set", "epochs=2", "--set", "amp_level=O2",
               "--set", "track_names=layers.0.attention.*", "--out", "out")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = only_run(tmp_path / "out", "transformer")
    loss = pd.read_csv(os.path.join(run_dir, "loss.csv"))
    assert loss["step"].tolist()[-1] == 16 and np.isfinite(loss["loss"]).all()
    tracked = set(pd.read_csv(os.path.join(run_dir, "params.csv"))["param"])
    names = {p.split(":")[0] for p in tracked}
    assert names == {f"layers.0.attention.{w}.{k}" for w in ("query", "key", "value", "out")
                     for k in ("weight", "bias")}
    assert {p.split(":")[1] for p in tracked} == {"norm", "mean", "std", "min", "max"}


@pytest.mark.slow
def test_two_workers_under_msrun(cli, tmp_path):
    done = cli("run", "transformer", *SMALL, "--set", "epochs=1", "--workers", "2",
               "--out", "out", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = only_run(tmp_path / "out", "transformer")
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["workers"] == 2
    assert meta["steps"] == 4  # 512 / 64 batches, sharded over 2 ranks
    assert pd.read_csv(os.path.join(run_dir, "loss.csv"))["step"].tolist() == [1, 2, 3, 4]


@pytest.mark.slow
def test_resumes_exactly_after_kill_9(cli, tmp_path):
    (tmp_path / "killable.py").write_text(KILLABLE)
    common = ["run", "killable.py:Killable", *SMALL, "--set", "epochs=3",
              "--set", "checkpoint_every=1"]
    ref = cli(*common, "--out", "ref")
    assert ref.returncode == 0, ref.stderr[-2000:]
    cli(*common, "--out", "out", KILL_AT="13")
    run_dir = only_run(tmp_path / "out", "transformer")
    assert json.load(open(os.path.join(run_dir, "run.json")))["status"] == "running"
    resumed = cli("resume", run_dir, "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["resumes"][0]["step"] == 8
    ours = pd.read_csv(os.path.join(run_dir, "loss.csv"))
    theirs = pd.read_csv(os.path.join(only_run(tmp_path / "ref", "transformer"), "loss.csv"))
    assert ours["step"].tolist() == list(range(1, 25))
    assert np.array_equal(ours["loss"].values, theirs["loss"].values)
