"""Eval through Model.fit: metrics by name, eval.csv, config-time rejections."""
import os
from dataclasses import dataclass

import numpy as np
import pytest

from mindexp.experiments.linear import Linear
from mindexp import ConfigError


class LinearEval(Linear):
    """The seed with an eval split: the noise-free line on a grid."""

    name = "linear_eval"

    @dataclass
    class Config(Linear.Config):
        eval_samples: int = 50

    def source(self, split):
        if split == "eval":
            x = np.linspace(0, 1, self.config.eval_samples, dtype=np.float32)[:, None]
            return x, self.config.slope * x
        return super().source(split)


def _expected(weight, bias, slope=2.0, n=50):
    x = np.linspace(0, 1, n, dtype=np.float32)[:, None].astype(np.float64)
    err = (weight * x + bias) - slope * x
    return {"mse": np.mean(err ** 2), "mae": np.mean(np.abs(err)),
            "rmse": np.sqrt(np.mean(err ** 2)), "max_error": np.abs(err).max(),
            "loss": np.mean(err ** 2)}


@pytest.fixture(scope="module")
def every_two(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("eval"))
    return LinearEval(epochs=5, eval_every=2,
                      metrics=("mse", "mae", "rmse", "max_error", "loss")).run(out=out)


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_eval_csv_has_every_nth_and_the_last_epoch(every_two):
    table = every_two.eval
    assert list(table.columns) == ["epoch", "step", "mse", "mae", "rmse", "max_error", "loss"]
    assert list(table.epoch) == [2, 4, 5]
    assert list(table.step) == [20, 40, 50]          # 100 samples / batch 10 per epoch


def test_eval_metrics_match_the_weights_at_that_step(every_two):
    weights = every_two.params.pivot(index="step", columns="param", values="value")
    for row in every_two.eval.itertuples():
        w, b = weights.loc[row.step, "dense.weight"], weights.loc[row.step, "dense.bias"]
        for name, value in _expected(w, b).items():
            assert getattr(row, name) == pytest.approx(value, rel=1e-4, abs=1e-7), (row, name)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_default_metric_is_the_eval_loss(tmp_path):
    run = LinearEval(epochs=2).run(out=str(tmp_path))
    assert list(run.eval.columns) == ["epoch", "step", "loss"]
    p = run.meta["params"]
    assert run.eval.loss.iloc[-1] == pytest.approx(
        _expected(p["dense.weight"], p["dense.bias"])["mse"], rel=1e-4)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_metric_objects_under_own_names(tmp_path):
    from mindspore.train import MAE

    class Custom(LinearEval):
        def metrics(self):
            return {"abs_err": MAE(), "mse": "mse"}

    run = Custom(epochs=1).run(out=str(tmp_path))
    assert list(run.eval.columns) == ["epoch", "step", "abs_err", "mse"]
    p = run.meta["params"]
    assert run.eval.abs_err.iloc[0] == pytest.approx(
        _expected(p["dense.weight"], p["dense.bias"])["mae"], rel=1e-4)


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_accuracy_with_sparse_int_labels(tmp_path):
    import mindspore as ms
    from mindexp.experiments.spirals import Spirals
    exp = Spirals(epochs=2)
    run = exp.run(out=str(tmp_path))
    xy, labels = exp.source("eval")
    assert labels.dtype == np.int32 and labels.ndim == 1
    logits = run.network()(ms.Tensor(xy)).asnumpy()
    assert run.eval.accuracy.iloc[-1] == pytest.approx(np.mean(logits.argmax(1) == labels))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_eval_every_beyond_the_run_still_evaluates_the_last_epoch(tmp_path):
    run = LinearEval(epochs=2, eval_every=5).run(out=str(tmp_path))
    assert list(run.eval.epoch) == [2]


# -- rejected before anything runs ----------------------------------------------------
def test_unknown_metric_in_the_config_is_rejected():
    with pytest.raises(ConfigError) as err:
        LinearEval(metrics="mse,f1")
    assert err.value.field == "metrics"
    assert "max_error" in str(err.value) and "Received: metrics=('mse', 'f1')" in str(err.value)


def test_unknown_metric_from_metrics_is_rejected_before_the_run_dir(tmp_path):
    class Typo(LinearEval):
        def metrics(self):
            return ["mse", "acuracy"]

    with pytest.raises(ConfigError) as err:
        Typo().run(out=str(tmp_path))
    assert err.value.field == "metrics" and "'acuracy'" in str(err.value)
    assert not os.listdir(tmp_path)


def test_metrics_without_an_eval_split_are_rejected_before_the_run_dir(tmp_path):
    with pytest.raises(ConfigError) as err:
        Linear(metrics="mae").run(out=str(tmp_path))
    assert err.value.field == "metrics" and "eval split" in str(err.value)
    assert not os.listdir(tmp_path)


def test_cli_rejects_metrics_without_eval_with_exit_2(main_cli, tmp_path):
    result = main_cli("run", "linear", "--set", "metrics=mae")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'metrics'" in lines[0] and "eval split" in lines[0]
    assert not (tmp_path / "outputs").exists()


# -- the extra metrics ----------------------------------------------------------------
def test_max_error_and_rmse_over_batches():
    from mindexp.define.extra_metrics import RMSE, MaxError
    pred = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.5]])]
    true = [np.array([0.5, 1.0]), np.array([2.0, 3.0])]
    metric, rmse = MaxError(), RMSE()
    for p, t in zip(pred, true):
        metric.update(p, t)
        rmse.update(p, t)
    assert metric.eval() == pytest.approx(0.5)
    assert rmse.eval() == pytest.approx(np.sqrt((0.25 + 0.25) / 4))
    metric.clear()
    with pytest.raises(RuntimeError):
        metric.eval()


@pytest.mark.slow
def test_resume_after_a_kill_between_an_eval_row_and_its_checkpoint_keeps_each_epoch_once(
        tmp_path):
    """Killed after epoch 4's eval row reached eval.csv but before its checkpoint:
    resume goes back to epoch 2's checkpoint and cuts every log back to it, eval.csv
    (whose first column is ``epoch``) as well as loss.csv."""
    import json
    import pandas as pd
    from mindexp.api import resume_run
    run = LinearEval(epochs=4, checkpoint_every=2, checkpoint_interval_s=0).run(out=str(tmp_path))
    ckpts = pd.read_csv(os.path.join(run.dir, "checkpoints.csv"))
    epoch2 = int(ckpts[ckpts.epoch == 2].step.iloc[-1])
    for row in ckpts[ckpts.epoch > 2].itertuples():   # the kill came before these
        os.remove(os.path.join(run.dir, row.file))
    ckpts[ckpts.epoch <= 2].to_csv(os.path.join(run.dir, "checkpoints.csv"), index=False)
    meta_path = os.path.join(run.dir, "run.json")
    meta = json.load(open(meta_path))
    meta.update(status="running", ended_at=None)      # what a SIGKILL leaves
    json.dump(meta, open(meta_path, "w"))

    resumed = resume_run(run.dir)
    assert resumed.meta["status"] == "completed"
    assert resumed.meta["resumes"][0]["step"] == epoch2
    assert list(resumed.eval["epoch"]) == [1, 2, 3, 4]
    assert list(resumed.loss["step"]) == list(run.loss["step"])
