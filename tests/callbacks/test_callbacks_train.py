"""The callbacks on real MindSpore training, without the framework."""
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, cli_env

import mindspore as ms
import mindspore.dataset as ds
from mindspore import Tensor, nn
from mindspore.train import Model

from mindexp.callbacks import (Checkpoint, GradNormMonitor, LossMonitor, ParameterTracker, TrainStep,
                       latest_checkpoint, read_csv)

ms.set_context(mode=ms.GRAPH_MODE)

X = np.random.default_rng(0).random((40, 1), dtype=np.float32)
Y = 2 * X + 0.5


def dataset(batch=10):
    return ds.GeneratorDataset(list(zip(X, Y)), ["x", "y"], shuffle=False).batch(batch)


def fresh_net(seed=0):
    ms.set_seed(seed)
    return nn.Dense(1, 1, weight_init="normal", bias_init="zeros")


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_plain_script_uses_the_callbacks_without_framework(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(open(os.path.join(ROOT, "examples", "callbacks_only.py")).read() +
                      "\nimport sys; assert not [m for m in sys.modules if m.startswith('mindexp.')\n"
                      "    and not m.startswith('mindexp.callbacks')], sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    weight = float(done.stdout.split("weight")[1].split()[0])
    assert abs(weight - 2) < 0.05
    loss = pd.read_csv(tmp_path / "logs" / "loss.csv")
    assert loss["step"].tolist() == list(range(1, 301))
    assert len(pd.read_csv(tmp_path / "logs" / "grad_norm.csv")) == 300
    assert set(pd.read_csv(tmp_path / "logs" / "params.csv")["param"]) == {"weight", "bias"}
    assert latest_checkpoint(tmp_path / "logs")[0] == 300


def test_the_callbacks_page_shows_the_plain_script_verbatim():
    readme = open(os.path.join(ROOT, "docs", "callbacks.md"), encoding="utf-8").read()
    body = open(os.path.join(ROOT, "examples", "callbacks_only.py")).read()
    assert body.split('"""\n', 2)[-1].strip() in readme


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_grad_norm_matches_mindspore_grad_on_the_same_batch(tmp_path):
    net = fresh_net()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    x, y = Tensor(X[:10]), Tensor(Y[:10])
    grads = ms.grad(loss_net, grad_position=None, weights=net.trainable_params())(x, y)
    by_hand = float(np.sqrt(sum(float((g.asnumpy() ** 2).sum()) for g in grads)))
    model = Model(TrainStep(loss_net, nn.SGD(net.trainable_params(), 0.1)))
    model.train(1, dataset(), callbacks=[GradNormMonitor(tmp_path)])
    first = read_csv(tmp_path, "grad_norm.csv")["grad_norm"].iloc[0]
    assert first == pytest.approx(by_hand, abs=1e-5)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_clipping_bounds_the_update_and_logs_the_norm_before_clipping(tmp_path):
    net = fresh_net()
    before = np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()])
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1),
                     clip_grad_norm=0.01)
    Model(cell).train(1, dataset(batch=40), callbacks=[GradNormMonitor(tmp_path)])
    after = np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()])
    logged = read_csv(tmp_path, "grad_norm.csv")["grad_norm"].iloc[0]
    assert logged > 0.5  # the raw norm, far above the threshold
    assert np.linalg.norm(after - before) == pytest.approx(0.1 * 0.01, rel=1e-4)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_per_param_norms_add_up_to_the_global_norm(tmp_path):
    net = fresh_net()
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1),
                     per_param_norms=True)
    Model(cell).train(1, dataset(), callbacks=[GradNormMonitor(tmp_path, per_param=True)])
    total = read_csv(tmp_path, "grad_norm.csv").set_index("step")["grad_norm"]
    parts = read_csv(tmp_path, "grad_norm_params.csv")
    assert set(parts["param"]) == {"weight", "bias"}
    by_step = parts.groupby("step")["grad_norm"].apply(lambda s: float(np.sqrt((s ** 2).sum())))
    assert np.allclose(by_step.values, total.loc[by_step.index].values, rtol=1e-5)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_loss_and_params_work_with_a_plain_model(tmp_path):
    net = fresh_net()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    model.train(2, dataset(), callbacks=[LossMonitor(tmp_path), ParameterTracker(tmp_path)])
    loss = read_csv(tmp_path, "loss.csv")
    assert loss["step"].tolist() == list(range(1, 9)) and loss["lr"].iloc[0] == pytest.approx(0.05)
    final = read_csv(tmp_path, "params.csv").query("step == 8").set_index("param")["value"]
    assert final["weight"] == pytest.approx(net.weight.asnumpy().item())


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_checkpoint_reloads_into_a_fresh_network_with_equal_weights(tmp_path):
    net = fresh_net()
    opt = nn.Adam(net.trainable_params(), 0.05)
    Model(TrainStep(nn.WithLossCell(net, nn.MSELoss()), opt)).train(
        3, dataset(), callbacks=[Checkpoint(tmp_path, every_epochs=1)])
    step, epoch, path = latest_checkpoint(tmp_path)
    assert (step, epoch) == (12, 3)
    other = fresh_net(seed=99)
    assert not np.allclose(other.weight.asnumpy(), net.weight.asnumpy())
    saved = ms.load_checkpoint(path)
    ms.load_param_into_net(other, saved, strict_load=False)
    assert np.array_equal(other.weight.asnumpy(), net.weight.asnumpy())
    assert np.array_equal(other.bias.asnumpy(), net.bias.asnumpy())
    assert "moment1.weight" in saved and saved["global_step"].asnumpy().item() == 12  # optimizer state


@pytest.mark.slow  # trains: seconds
def test_a_bare_monitor_refuses_a_log_with_rows_unless_asked_to_append(tmp_path):
    model = Model(fresh_net(), nn.MSELoss(), nn.SGD(fresh_net().trainable_params(), 0.1))
    model.train(1, dataset(), callbacks=[LossMonitor(tmp_path)])          # steps 1..4
    before = (tmp_path / "loss.csv").read_bytes()
    with pytest.raises(ValueError) as refused:
        model.train(1, dataset(), callbacks=[LossMonitor(tmp_path)])
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path / "loss.csv") in message
    assert "append=True" in message and message.endswith("Received: append=False")
    assert (tmp_path / "loss.csv").read_bytes() == before                 # nothing written
    model.train(2, dataset(), callbacks=[LossMonitor(tmp_path, append=True)], initial_epoch=1)
    assert read_csv(tmp_path, "loss.csv")["step"].tolist() == list(range(1, 9))
