"""The eval loss is the eval set's sample-weighted mean, computed by mindexp
(not MindSpore's last-batch eval_loss), and what the end of a run prints.

One CLI run of a tiny experiment whose eval set (50 samples, batch 32) ends
with a partial batch that disagrees with the rest: its last batch alone (what
MindSpore's eval_loss is) keeps improving while the eval set's loss turns
back up, so early stopping and best-checkpoint ranking tell the two apart.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import forkserver
from conftest import cli_env

EVAL_SAMPLES, BATCH, PATIENCE = 50, 32, 2

DRIFT = '''
from dataclasses import dataclass

import numpy as np

from mindexp.experiments.linear import Linear


class Drift(Linear):
    """Train on y = 2x; evaluate on 50 points: the first 32 on y = 0.5x, the last 18 on y = 2.5x."""

    name = "drift"

    @dataclass
    class Config(Linear.Config):
        samples: int = 96
        noise: float = 0.0
        batch_size: int = 32
        epochs: int = 30
        lr: float = 0.1

    def source(self, split):
        if split == "train":
            return super().source(split)
        rng = np.random.default_rng(1)
        x = (0.5 + 0.5 * rng.random((50, 1))).astype(np.float32)
        slope = np.where(np.arange(50)[:, None] < 32, 0.5, 2.5)
        return x, (slope * x).astype(np.float32)

    def targets(self):
        return {}
'''


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    """``mindexp run drift.py:Drift`` stopping and ranking checkpoints on eval_loss."""
    from mindexp import load_run
    folder = tmp_path_factory.mktemp("drift")
    (folder / "drift.py").write_text(DRIFT)
    done = forkserver.run(
        [sys.executable, "-m", "mindexp", "run", "drift.py:Drift", "--set", "early_stop=eval_loss",
         "--set", f"patience={PATIENCE}", "--set", "checkpoint_monitor=eval_loss",
         "--set", "keep_best=2", "--set", "keep_checkpoints=100",
         "--set", "checkpoint_interval_s=0", "--out", "out", "--quiet"],
        cwd=folder, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = done.stdout.splitlines()[0].split(": ", 1)[1]
    return load_run(run_dir), done.stdout


def _eval_arrays(run):
    return run.experiment().source("eval")


def _batch_losses(run, step):
    """The MSE of each eval batch (float32, as the network computes it) with
    the weights of the checkpoint of ``step``."""
    net = run.network(checkpoint=step)
    w, b = net.dense.weight.asnumpy(), net.dense.bias.asnumpy()
    x, y = _eval_arrays(run)
    err = (x @ w.T + b - y).astype(np.float32)
    return [float(np.mean(err[i:i + BATCH] ** 2, dtype=np.float32))
            for i in range(0, len(x), BATCH)]


@pytest.mark.slow
def test_eval_csv_loss_is_the_eval_sets_sample_weighted_mean(drift):
    run, _ = drift
    assert len(_eval_arrays(run)[0]) == EVAL_SAMPLES   # batches of 32 and 18
    for row in run.eval.itertuples():
        batches = _batch_losses(run, row.step)
        by_hand = (BATCH * batches[0] + (EVAL_SAMPLES - BATCH) * batches[1]) / EVAL_SAMPLES
        assert row.loss == pytest.approx(by_hand, rel=1e-6), row
        # the data tells them apart: neither the last batch nor the unweighted batch mean
        assert abs(row.loss - batches[-1]) > 1e-3 and abs(row.loss - np.mean(batches)) > 1e-3


@pytest.mark.slow
def test_early_stopping_on_eval_loss_stops_where_eval_csv_says(drift):
    run, _ = drift
    losses, epochs = run.eval.loss.tolist(), run.eval.epoch.tolist()
    best, wait, stop = None, 0, None
    for epoch, value in zip(epochs, losses):
        if best is None or value < best:
            best, wait = value, 0
        else:
            wait += 1
        if wait >= PATIENCE:
            stop = epoch
            break
    assert stop is not None and stop < run.config["epochs"]
    assert epochs[-1] == stop
    assert run.meta["stop_reason"] == (f"early stop at epoch {stop}: eval_loss did not improve "
                                       f"on {best:.6g} for {PATIENCE} epochs")


@pytest.mark.slow
def test_best_checkpoints_are_the_epochs_eval_csv_ranks_best(drift):
    from mindexp.callbacks import list_checkpoints
    run, _ = drift
    ranked = run.eval.sort_values("loss").epoch.tolist()
    kept = sorted(epoch for _, epoch, _ in list_checkpoints(run.dir, "best"))
    assert kept == sorted(ranked[:2])
    assert os.path.basename(run.checkpoint_path("best")).startswith(f"best-epoch{ranked[0]:04d}")


@pytest.mark.slow
def test_compare_history_and_evaluate_give_eval_csvs_loss(drift):
    from mindexp import compare, history
    from mindexp.use import evaluate
    run, _ = drift
    row = compare(run.dir).iloc[0]
    assert row["eval_loss"] == run.eval.loss.iloc[-1]
    assert row["best_eval_loss"] == run.eval.loss.min()
    assert history(run.dir, "eval_loss")["eval_loss"].tolist() == run.eval.loss.tolist()
    first = run.eval.iloc[0]
    again = evaluate(run.dir, checkpoint=int(first.step), record=False)
    assert again["loss"] == pytest.approx(first.loss, rel=1e-6)


@pytest.mark.slow
def test_the_end_of_a_run_prints_why_it_stopped_and_each_eval_metric(drift):
    run, stdout = drift
    lines = stdout.splitlines()
    assert lines[1].startswith("status: completed")
    assert lines[2] == f"  {run.meta['stop_reason']}"
    table = run.eval
    best = table.loss.idxmin()
    assert lines[3].split() == [
        "eval_loss", "last", f"{table.loss.iloc[-1]:.6g}", f"(epoch", f"{table.epoch.iloc[-1]})",
        "best", f"{table.loss[best]:.6g}", "(epoch", f"{table.epoch[best]})"]
    # Drift declares no targets: no parameter values (the bias alone said nothing)
    assert "dense.weight" not in stdout and "dense.bias" not in stdout


# -- the callbacks in a plain script ----------------------------------------------
def _plain_data():
    rng = np.random.default_rng(0)
    x = rng.random((64, 1), dtype=np.float32)
    ex = (0.5 + 0.5 * rng.random((EVAL_SAMPLES, 1))).astype(np.float32)
    slope = np.where(np.arange(EVAL_SAMPLES)[:, None] < BATCH, 0.5, 2.5)
    return (x, 2 * x), (ex, (slope * ex).astype(np.float32))


def _fit(tmp_path, metrics, names, plain_model=False):
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import Model
    from mindexp.callbacks import EvalMonitor, TrainStep
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    (x, y), (ex, ey) = _plain_data()
    net = nn.Dense(1, 1)
    build = Model if plain_model else TrainStep.model   # Model's own eval net: nn.WithEvalCell
    model = build(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.2), metrics=metrics)
    model.fit(2, ds.GeneratorDataset(list(zip(x, y)), ["x", "y"], shuffle=False).batch(BATCH),
              ds.GeneratorDataset(list(zip(ex, ey)), ["x", "y"], shuffle=False).batch(BATCH),
              callbacks=[EvalMonitor(tmp_path, names)])
    return net


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_plain_script_eval_monitor_writes_the_eval_sets_loss(tmp_path):
    from mindspore.train import MAE
    from mindexp.callbacks import EvalLoss, read_csv
    net = _fit(tmp_path, {"mae": MAE(), "loss": EvalLoss()}, ["mae", "eval_loss"])
    (_, _), (ex, ey) = _plain_data()
    err = (ex @ net.weight.asnumpy().T + net.bias.asnumpy() - ey).astype(np.float32) ** 2
    by_hand = (BATCH * float(err[:BATCH].mean()) + (EVAL_SAMPLES - BATCH) * float(err[BATCH:].mean())) \
        / EVAL_SAMPLES
    written = read_csv(tmp_path, "eval.csv").eval_loss.iloc[-1]
    assert written == pytest.approx(by_hand, rel=1e-6)
    assert abs(written - float(err[BATCH:].mean())) > 1e-3   # not the last batch's


@pytest.mark.parametrize("metrics, says", [
    ("none", "eval_loss is the eval set's loss only with mindexp's EvalLoss metric (MindSpore's "
             "own eval_loss is the last batch's); add mindexp's metric to the Model: "
             "metrics={..., 'loss': EvalLoss()} with eval_network=EvalCell(net, loss_fn)"),
    ("mindspore", "the Model's 'loss' metric is MindSpore's Loss, the unweighted mean of batch "
                  "losses (a small last batch counts as much as a full one); add mindexp's "
                  "metric to the Model: metrics={..., 'loss': EvalLoss()}"),
    ("withevalcell", "the Model's eval network is MindSpore's nn.WithEvalCell (one loss a batch); "
                     "build the Model with eval_network=EvalCell(net, loss_fn)"),
], ids=["no-loss-metric", "mindspore-loss", "evalloss-without-evalcell"])
def test_plain_script_eval_loss_without_mindexps_metric_is_refused_at_train_begin(
        tmp_path, metrics, says):
    from mindspore.train import MAE, Loss
    from mindexp.callbacks import EvalLoss
    chosen = {"none": {"mae": MAE()}, "mindspore": {"mae": MAE(), "loss": Loss()},
              "withevalcell": {"mae": MAE(), "loss": EvalLoss()}}[metrics]
    with pytest.raises(ValueError) as err:
        _fit(tmp_path / "logs", chosen, ["mae", "eval_loss"], plain_model=metrics == "withevalcell")
    message = str(err.value)
    assert "\n" not in message and message.startswith("EvalMonitor: ") and says in message
    assert not (tmp_path / "logs").exists()


# -- an experiment whose metrics have no loss, and whose loss has components --------
@pytest.mark.slow
def test_watching_eval_loss_adds_the_eval_sets_loss_to_a_multitask_run(tmp_path):
    """multitask's metrics lack `loss`; checkpoint_monitor=eval_loss adds the
    column, the total of its loss (regression + classification) over the eval
    set, each batch weighted by its samples."""
    from mindexp.experiments.multitask import Multitask
    run = Multitask(samples=64, eval_samples=EVAL_SAMPLES, batch_size=BATCH, epochs=2, hidden=8,
                    checkpoint_monitor="eval_loss", checkpoint_interval_s=0).run(out=str(tmp_path))
    assert list(run.eval.columns) == ["epoch", "step", "regression_mse", "classification_accuracy",
                                      "loss"]
    x, y = run.experiment().source("eval")
    for row in run.eval.itertuples():
        import mindspore as ms
        out = run.network(checkpoint=int(row.step))(ms.Tensor(x)).asnumpy().astype(np.float64)
        logits = out[:, 1:] - out[:, 1:].max(axis=1, keepdims=True)
        nll = np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y[:, 1].astype(int)]
        total = (out[:, 0] - y[:, 0]) ** 2 + nll   # per sample; each weight is 1.0
        batches = [total[i:i + BATCH].mean() for i in range(0, len(y), BATCH)]
        by_hand = (BATCH * batches[0] + (EVAL_SAMPLES - BATCH) * batches[1]) / EVAL_SAMPLES
        assert row.loss == pytest.approx(by_hand, rel=1e-5), row


# -- the metric on its own, and what is refused ---------------------------------------
def test_eval_loss_weights_each_batch_by_its_samples_and_refuses_one_loss_a_batch():
    from mindexp.callbacks import EvalLoss
    metric = EvalLoss()
    metric.update(np.full(32, 1.0, np.float32))
    metric.update(np.full(18, 4.0, np.float32))
    assert metric.eval() == pytest.approx((32 * 1.0 + 18 * 4.0) / 50)
    metric.clear()
    with pytest.raises(RuntimeError, match="no batch was evaluated"):
        metric.eval()
    with pytest.raises(ValueError, match=r"once per sample.*eval_network=EvalCell\(net, loss_fn\)"):
        metric.update(np.array(1.0, np.float32))     # nn.WithEvalCell's one loss for the batch


def test_mindspores_loss_metric_in_an_experiment_is_refused_before_the_run_dir(tmp_path):
    from mindspore.train import Loss
    from mindexp import ConfigError
    from mindexp.experiments.spirals import Spirals

    class OwnLoss(Spirals):
        def metrics(self):
            return {"accuracy": "accuracy", "loss": Loss()}

    with pytest.raises(ConfigError) as err:
        OwnLoss(epochs=1).run(out=str(tmp_path))
    assert err.value.field == "metrics" and "MindSpore's Loss()" in str(err.value)
    assert not os.listdir(tmp_path)
