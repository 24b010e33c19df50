"""The shipped experiments converge with their defaults, and are listed."""
import os
import subprocess
import sys

import numpy as np
import pytest

from mindexp import ConfigError

SHIPPED = ("digits", "linear", "mlp_sine", "multitask", "pinn_ode", "spirals", "transformer")
from conftest import ROOT  # noqa: E402  (the repository)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("experiments"))


def _final(run, metric):
    assert run.status == "completed", run.meta["error"]
    return float(run.eval[metric].iloc[-1])


def test_list_shows_every_experiment_without_importing_mindspore(cli):
    result = cli("list")
    assert result.returncode == 0
    heads = [line.split()[0] for line in result.stdout.splitlines()]
    # image_folder: test_data_on_disk.py; spirals_curriculum: test_curriculum.py
    assert heads == sorted(SHIPPED + ("image_folder", "spirals_curriculum"))
    fields = cli("list", "pinn_ode").stdout
    assert "hidden" in fields and "boundary_weight" in fields
    probe = ("import sys; from mindexp.manage.experiments import field_lines; "
             "field_lines('pinn_ode'); print('mindspore' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=ROOT)
    assert loaded.stdout.strip() == "False"


# linear at its defaults: test_techniques.py::test_each_optimizer_reaches_the_targets[sgd].


@pytest.mark.slow
def test_mlp_sine_fits_and_a_linear_model_cannot(out):
    from mindexp.experiments.mlp_sine import MlpSine
    mlp = MlpSine().run(out=out)
    line = MlpSine(hidden=0).run(out=out)
    assert _final(mlp, "mse") < 0.01 and _final(mlp, "mae") < 0.08
    # A straight line leaves most of sin(3x)'s variance (~0.5) unexplained.
    assert _final(line, "mse") > 0.3
    assert line.params.param.nunique() == 2        # really one Dense(1, 1)
    assert mlp.meta["train_time_s"] < 60


@pytest.mark.slow
def test_spirals_reach_95_percent_eval_accuracy(out):
    from mindexp.experiments.spirals import Spirals
    run = Spirals().run(out=out)
    assert _final(run, "accuracy") > 0.95
    assert run.eval.accuracy.iloc[0] < 0.9          # it was learned, not given
    assert run.meta["train_time_s"] < 60


@pytest.mark.slow
def test_pinn_solves_the_ode(out):
    from mindexp.experiments.pinn_ode import PinnOde
    run = PinnOde().run(out=out)
    assert _final(run, "max_error") < 0.02
    assert _final(run, "mse") < 1e-4
    assert run.eval.max_error.iloc[0] > 0.1
    assert run.meta["train_time_s"] < 60
    # The checkpoint loads back into a fresh network (parameter names kept).
    import mindspore as ms
    x = np.linspace(0, 1, 128, dtype=np.float32)[:, None]
    u = run.network()(ms.Tensor(x)).asnumpy()
    assert np.abs(u - np.sin(np.pi * x)).max() == pytest.approx(_final(run, "max_error"), rel=1e-4)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_pinn_loss_vanishes_on_the_exact_solution(ms_graph):
    """The second derivative w.r.t. the input is right: sin(pi x) has zero loss, 2 sin(pi x) not."""
    from mindspore import Tensor, nn, ops
    from mindexp.experiments.pinn_ode import PinnLoss

    class Exact(nn.Cell):
        def __init__(self, amplitude):
            super().__init__()
            self.amplitude = amplitude

        def construct(self, x):
            return self.amplitude * ops.sin(np.pi * x)

    x = Tensor(np.linspace(0, 1, 64, dtype=np.float32)[:, None])
    u = Tensor(np.zeros((64, 1), np.float32))
    assert float(PinnLoss(Exact(1.0))(x, u)[0].asnumpy()) < 1e-6
    # 2 sin(pi x): residual -pi^2 sin(pi x), mean square pi^4 / 2 on [0, 1].
    wrong = float(PinnLoss(Exact(2.0))(x, u)[0].asnumpy())
    assert wrong == pytest.approx(np.pi ** 4 / 2, rel=0.05)


def test_experiment_specific_config_is_checked():
    from mindexp.experiments.mlp_sine import MlpSine
    from mindexp.experiments.spirals import Spirals
    with pytest.raises(ConfigError) as err:
        Spirals(loss="mse")
    assert err.value.field == "loss"
    with pytest.raises(ConfigError) as err:
        MlpSine(hidden=-1)
    assert err.value.field == "hidden"


# The switches are what is tested, not the data: a few steps an epoch (graph mode,
# accumulating 2 batches: 2-3 updates an epoch; pynative: 4-7 steps, each a few hundred
# operators run one by one, which is where pynative's seconds go).
TINY = {"digits": dict(eval_fraction=0.5, batch_size=128, channels=4, hidden=16),
        "linear": dict(samples=40, batch_size=10),
        "mlp_sine": dict(samples=64, eval_samples=32, batch_size=16),
        "spirals": dict(samples=64, eval_samples=32, batch_size=16),
        "pinn_ode": dict(samples=64, eval_samples=32, batch_size=16),
        "multitask": dict(samples=64, eval_samples=32, batch_size=16),
        # one encoder layer: each layer is a hundred more operators for pynative
        "transformer": dict(samples=64, eval_samples=32, batch_size=16, log_every=1,
                            warmup_steps=0, layers=1)}
SWITCHES = {"graph": dict(optimizer="momentum", lr=0.01, lr_schedule="cosine", warmup_steps=2,
                          clip_grad_norm=1.0, grad_accumulation=2, amp_level="O2",
                          loss_scale=8.0),
            "pynative": dict(mode="pynative", optimizer="rmsprop", lr=0.001)}
COMMON = dict(epochs=2, eval_every=1)


@pytest.mark.slow
@pytest.mark.parametrize("switches", list(SWITCHES))
@pytest.mark.parametrize("name", SHIPPED)
def test_switches_work_in_every_experiment(out, name, switches):
    from mindexp.define.catalog import resolve_spec
    cls, _ = resolve_spec(name)
    run = cls(**{**COMMON, **TINY[name], **SWITCHES[switches]}).run(out=out)  # switches win
    assert run.status == "completed", run.meta["error"]
    assert np.isfinite(run.loss.loss).all() and np.isfinite(run.grad_norm.grad_norm).all()
    assert run.meta["steps"] == len(run.loss) == 2 * len(run.loss[run.loss.epoch == 1])
    if name != "linear":
        assert list(run.eval.epoch) == [1, 2]
