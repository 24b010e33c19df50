"""Loss components: named parts of the loss logged next to the optimised total."""
import os

import numpy as np
import pandas as pd
import pytest

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn, ops
from mindspore.train import Model

import mindexp
from mindexp.callbacks import GradNormMonitor, LossMonitor, TrainStep

X = np.random.default_rng(0).random((40, 1), dtype=np.float32)
Y = 2 * X + 0.5


class FitAndPenalty(nn.Cell):
    """MSE plus an L2 penalty on the weight: ``(total, fit, penalty)``."""

    loss_components = ("fit", "penalty")

    def __init__(self, net, weight=1e-3):
        super().__init__(auto_prefix=False)
        self.net, self.weight = net, weight

    def construct(self, x, y):
        fit = ops.mean(ops.square(self.net(x) - y))
        penalty = self.weight * ops.reduce_sum(ops.square(self.net.weight))
        return fit + penalty, fit, penalty


def only_run(root, name):
    (run_id,) = os.listdir(os.path.join(root, name))
    return os.path.join(root, name, run_id)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_plain_model_train_logs_components_that_add_up_and_the_total_is_optimised(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")
    cell = TrainStep(FitAndPenalty(net, weight=0.05), nn.Adam(net.trainable_params(), 0.05))
    data = ds.GeneratorDataset(list(zip(X, Y)), ["x", "y"], shuffle=False).batch(10)
    Model(cell).train(60, data, callbacks=[LossMonitor(tmp_path), GradNormMonitor(tmp_path)],
                      dataset_sink_mode=False)
    loss = pd.read_csv(tmp_path / "loss.csv")
    assert list(loss.columns) == ["step", "epoch", "loss", "lr", "time_s", "fit", "penalty"]
    assert loss["step"].tolist() == list(range(1, 241))
    np.testing.assert_allclose(loss["fit"] + loss["penalty"], loss["loss"], rtol=1e-5)
    assert loss["fit"].iloc[-1] < loss["fit"].iloc[0] / 10
    # the minimum of the total (ridge regression), not of the fit alone (w = 2)
    ridge = np.cov(X[:, 0], Y[:, 0], bias=True)[0, 1] / (X.var() + 0.05)
    assert ridge < 1.7 and abs(float(net.weight.asnumpy().item()) - ridge) < 0.02
    assert len(pd.read_csv(tmp_path / "grad_norm.csv")) == 240  # still (loss, grad_norm, ...)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_components_with_accumulation_are_averaged_like_the_loss(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = nn.Dense(1, 1, weight_init="ones", bias_init="zeros")
    cell = TrainStep(FitAndPenalty(net), nn.SGD(net.trainable_params(), 0.0),
                     accumulation_steps=2)
    loss, _, parts = cell(ms.Tensor(X[:10]), ms.Tensor(Y[:10]))
    fit = float(np.mean((X[:10] * 1 - Y[:10]) ** 2))
    np.testing.assert_allclose(parts.asnumpy(), [fit, 1e-3], rtol=1e-5)
    assert abs(float(loss.asnumpy()) - fit - 1e-3) < 1e-5


@pytest.mark.slow
def test_pinn_logs_residual_and_boundary_in_every_view(tmp_path):
    from mindexp.experiments.pinn_ode import PinnOde
    run = PinnOde(epochs=2, checkpoint_interval_s=0).run(out=str(tmp_path))
    loss = run.loss
    assert {"residual", "boundary"} <= set(loss.columns)
    assert loss["step"].tolist() == list(range(1, 9))
    np.testing.assert_allclose(loss["residual"] + loss["boundary"], loss["loss"], rtol=1e-5)
    table = mindexp.compare([run])
    assert table["final_residual"].iloc[0] == pytest.approx(loss["residual"].iloc[-1])
    assert table["final_boundary"].iloc[0] == pytest.approx(loss["boundary"].iloc[-1])
    assert mindexp.history([run], "boundary")["boundary"].tolist() == loss["boundary"].tolist()
    labels = [line.get_label() for line in run.plot().axes[0].get_lines()]
    assert {"residual", "boundary"} <= set(labels)
    from mindexp.analysis.payload import figures
    titles = [f["title"] for f in figures([run])]
    assert "loss component residual" in titles and "loss component boundary" in titles


@pytest.mark.slow
def test_multitask_defaults_reach_both_targets(tmp_path):
    from mindexp.experiments.multitask import Multitask
    run = Multitask().run(out=str(tmp_path))
    assert run.status == "completed"
    loss = run.loss
    np.testing.assert_allclose(loss["regression"] + loss["classification"], loss["loss"],
                               rtol=1e-5, atol=1e-7)
    final = run.eval.iloc[-1]
    assert final["regression_mse"] < 0.02 and final["classification_accuracy"] > 0.95
    table = mindexp.compare([run])
    assert {"final_regression", "final_classification", "eval_regression_mse",
            "eval_classification_accuracy"} <= set(table.columns)


@pytest.mark.slow
def test_multitask_weights_come_from_the_config(tmp_path):
    from mindexp.experiments.multitask import Multitask
    run = Multitask(epochs=1, samples=256, eval_samples=64, regression_weight=0.0,
                    checkpoint_interval_s=0).run(out=str(tmp_path))
    assert (run.loss["regression"] == 0).all() and (run.loss["classification"] > 0).all()


BAD = '''
import numpy as np
from mindspore import nn, ops
from mindexp import Experiment


class Parts(nn.Cell):
    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, y):
        err = ops.square(self.net(x) - y)
        return ops.mean(err), {second}


class Bad(Experiment):
    name = "bad"
    loss_components = {names}

    def source(self, split):
        x = np.linspace(0, 1, 64, dtype=np.float32)[:, None]
        return x, 2 * x

    def network(self):
        return nn.Dense(1, 1)

    def loss_network(self, net):
        return Parts(net)
'''


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("names, second, message", [
    ('("lr",)', "ops.mean(err)", "Bad.loss_components must be a tuple of distinct identifiers "
     "other than loss.csv's columns (step, epoch, loss, lr, time_s). Received: "
     "loss_components=('lr',)"),
    ('("err",)', "err", "loss component 'err' must be a scalar (one value per step). "
     "Received: err of shape (64, 1)"),
])
def test_bad_component_declarations_exit_2_with_one_line(cli, tmp_path, names, second, message):
    (tmp_path / "bad.py").write_text(BAD.format(names=names, second=second))
    done = cli("run", "bad.py:Bad", "--set", "batch_size=64", "--out", "out", "--quiet")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"mindexp: error: {message}"]
    assert not (tmp_path / "out").exists()
