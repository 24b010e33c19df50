"""Every training-technique switch on real (tiny) training of the seed experiment."""
import logging
import math
import os

import numpy as np
import pandas as pd
import pytest

from mindexp.experiments.linear import Linear
from mindexp import ConfigError

# Learning rates at which each optimizer solves the seed problem in its default 30 epochs.
OPTIMIZER_LR = {"sgd": 0.2, "momentum": 0.05, "adam": 0.05, "adamw": 0.05, "rmsprop": 0.01,
                "adagrad": 0.5}


def _weights(run):
    """params.csv as one row per step: columns dense.weight, dense.bias."""
    return run.params.pivot(index="step", columns="param", values="value")


def _update_norms(run):
    """||theta_t - theta_{t-1}|| for t >= 2 (params.csv holds values after each step)."""
    w = _weights(run)
    return np.sqrt((w.diff() ** 2).sum(axis=1)).iloc[1:]


def _assert_reaches_targets(run, tol):
    params = run.meta["params"]
    assert params["dense.weight"] == pytest.approx(2.0, abs=tol)
    assert params["dense.bias"] == pytest.approx(0.0, abs=tol)


# -- optimizer ---------------------------------------------------------------
@pytest.fixture(scope="module")
def optimizer_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimizers")
    return {name: Linear(optimizer=name, lr=lr).run(out=str(out))
            for name, lr in OPTIMIZER_LR.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZER_LR))
def test_each_optimizer_reaches_the_targets(optimizer_runs, name):
    run = optimizer_runs[name]
    assert run.status == "completed"
    _assert_reaches_targets(run, tol=0.02)


@pytest.mark.slow  # its module fixture trains several runs
def test_optimizers_follow_different_trajectories(optimizer_runs):
    # Same data, same initial weights: the first losses agree, the second ones differ
    # because each optimizer made a different first update.
    first = {n: r.loss.loss.iloc[0] for n, r in optimizer_runs.items()}
    second = {n: round(float(r.loss.loss.iloc[1]), 6) for n, r in optimizer_runs.items()}
    assert len(set(np.round(list(first.values()), 6))) == 1
    assert len(set(second.values())) == len(OPTIMIZER_LR)


def test_unknown_optimizer_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        Linear(optimizer="lion")
    assert err.value.field == "optimizer"
    assert all(name in str(err.value) for name in OPTIMIZER_LR)
    assert str(err.value).endswith("Received: optimizer='lion'")


# -- lr_schedule + warmup_steps -----------------------------------------------
SPE, EPOCHS, LR, RATE = 4, 6, 0.1, 0.5   # 40 samples / batch 10 = 4 steps per epoch


def _expected_lr(schedule, warmup, decay_epochs=2):
    total = SPE * EPOCHS
    out = []
    for i in range(total):
        epoch = i // SPE
        lr = {"constant": LR,
              "step": LR * RATE ** (epoch // decay_epochs),
              "exponential": LR * RATE ** (epoch / decay_epochs),
              "cosine": LR / 1000 + 0.5 * (LR - LR / 1000) * (1 + math.cos(math.pi * i / total)),
              }[schedule]
        out.append(lr * min(1.0, (i + 1) / warmup) if warmup else lr)
    return np.array(out)


@pytest.fixture(scope="module")
def schedule_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("schedules"))
    cases = [("constant", 5), ("step", 0), ("exponential", 0), ("cosine", 3)]
    return {case: Linear(samples=40, batch_size=10, epochs=EPOCHS, lr=LR, lr_schedule=case[0],
                         warmup_steps=case[1], lr_decay_rate=RATE, lr_decay_epochs=2).run(out=out)
            for case in cases}


@pytest.mark.slow
@pytest.mark.parametrize("case", [("constant", 5), ("step", 0), ("exponential", 0), ("cosine", 3)])
def test_lr_column_is_the_schedule(schedule_runs, case):
    run = schedule_runs[case]
    assert list(run.loss.step) == list(range(1, SPE * EPOCHS + 1))
    np.testing.assert_allclose(run.loss.lr.to_numpy(), _expected_lr(*case), rtol=1e-6)


@pytest.mark.slow  # its module fixture trains several runs
@pytest.mark.parametrize("case", [("constant", 5), ("cosine", 3)])
def test_sgd_really_uses_the_logged_lr(schedule_runs, case):
    # Plain SGD: ||theta_t - theta_{t-1}|| == lr_t * ||g_t||, step by step.
    run = schedule_runs[case]
    lr = run.loss.set_index("step").lr.iloc[1:]
    grad = run.grad_norm.set_index("step").grad_norm.iloc[1:]
    np.testing.assert_allclose(_update_norms(run), lr * grad, rtol=1e-3)


def test_warmup_longer_than_the_run_is_rejected_before_the_run_dir(tmp_path):
    exp = Linear(samples=40, batch_size=10, epochs=2, warmup_steps=9)
    with pytest.raises(ConfigError) as err:
        exp.run(out=str(tmp_path))
    assert err.value.field == "warmup_steps" and "8 steps" in str(err.value)
    assert not os.listdir(tmp_path)


# -- clip_grad_norm ------------------------------------------------------------
@pytest.fixture(scope="module")
def clip_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("clip"))
    return {clip: Linear(epochs=3, clip_grad_norm=clip).run(out=out) for clip in (None, 0.2)}


@pytest.mark.slow  # its module fixture trains several runs
def test_clipping_bounds_the_update_and_logs_the_norm_before_clipping(clip_runs):
    plain, clipped = clip_runs[None], clip_runs[0.2]
    g = clipped.grad_norm.set_index("step").grad_norm
    # Step 1 sees the same weights and batch in both runs: the same (pre-clip) norm.
    assert g.iloc[0] == pytest.approx(plain.grad_norm.grad_norm.iloc[0], rel=1e-6)
    assert (g > 0.2).mean() > 0.5            # the logged norms are not the clipped ones
    lr = 0.2
    np.testing.assert_allclose(_update_norms(clipped), lr * np.minimum(g.iloc[1:], 0.2),
                               rtol=1e-3)
    np.testing.assert_allclose(_update_norms(plain), lr * plain.grad_norm.grad_norm.iloc[1:],
                               rtol=1e-3)
    assert _update_norms(clipped).max() <= lr * 0.2 * (1 + 1e-4)
    assert _update_norms(plain).max() > lr * 0.2 * 2


# -- grad_accumulation --------------------------------------------------------------
@pytest.fixture(scope="module")
def accumulation_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("accumulation"))
    common = dict(samples=128, epochs=5, lr=0.1)
    return (Linear(batch_size=32, grad_accumulation=1, **common).run(out=out),
            Linear(batch_size=8, grad_accumulation=4, **common).run(out=out))


@pytest.mark.slow
def test_accumulation_follows_the_large_batch_trajectory(accumulation_runs):
    big, accumulated = accumulation_runs
    for log in ("loss", "params", "grad_norm"):
        a, b = big.read(log), accumulated.read(log)
        assert list(a.step) == list(b.step)
        value = {"loss": "loss", "params": "value", "grad_norm": "grad_norm"}[log]
        np.testing.assert_allclose(b[value], a[value], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # its module fixture trains several runs
def test_step_counts_optimizer_updates(accumulation_runs):
    big, accumulated = accumulation_runs
    # 128 samples / (8 x 4) = 4 updates per epoch, 5 epochs.
    assert accumulated.meta["steps"] == big.meta["steps"] == 20
    assert list(accumulated.loss.step) == list(range(1, 21))
    assert accumulated.loss.groupby("epoch").step.count().tolist() == [4] * 5


def test_accumulation_sees_the_same_samples_in_the_same_order():
    big = Linear(samples=128, batch_size=32, epochs=2)
    acc = Linear(samples=128, batch_size=8, grad_accumulation=4, epochs=2)
    arrays = big.source("train")
    batches = [[x.copy() for x, _ in exp.dataset("train", arrays).create_tuple_iterator(
        num_epochs=1, output_numpy=True)] for exp in (big, acc)]
    assert len(batches[0]) == len(batches[1]) == 4
    for a, b in zip(*batches):
        np.testing.assert_array_equal(a, b)


def test_accumulation_below_one_is_rejected():
    with pytest.raises(ConfigError) as err:
        Linear(grad_accumulation=0)
    assert err.value.field == "grad_accumulation"


def test_accumulated_batch_larger_than_the_data_is_rejected_before_the_run_dir(tmp_path):
    with pytest.raises(ConfigError) as err:
        Linear(samples=100, batch_size=30, grad_accumulation=4).run(out=str(tmp_path))
    assert err.value.field == "batch_size" and "30 x 4" in str(err.value)
    assert not os.listdir(tmp_path)


# -- amp_level and loss_scale ----------------------------------------------------------
@pytest.fixture(scope="module")
def amp_runs(tmp_path_factory, optimizer_runs):
    out = str(tmp_path_factory.mktemp("amp"))
    runs = {"O0": optimizer_runs["sgd"], "O2": Linear(amp_level="O2").run(out=out)}  # defaults
    runs.update({level: Linear(amp_level=level, epochs=2).run(out=out) for level in ("O1", "O3")})
    runs["scaled"] = Linear(loss_scale=1024.0, epochs=2).run(out=out)
    return runs


@pytest.mark.slow
def test_o2_reaches_the_targets_with_a_looser_tolerance(amp_runs):
    _assert_reaches_targets(amp_runs["O0"], tol=0.01)
    _assert_reaches_targets(amp_runs["O2"], tol=0.02)
    # float16 arithmetic really happened: the losses differ from O0, at float16 precision.
    diff = np.abs(amp_runs["O2"].loss.loss - amp_runs["O0"].loss.loss).max()
    assert 1e-6 < diff < 1e-2


@pytest.mark.slow  # its module fixture trains several runs
@pytest.mark.parametrize("level", ["O1", "O3"])
def test_other_amp_levels_train_in_float16(amp_runs, level):
    run, base = amp_runs[level], amp_runs["O0"].loss.loss.iloc[:20]
    assert run.status == "completed"
    diff = np.abs(run.loss.loss.to_numpy() - base.to_numpy()).max()
    assert 1e-6 < diff < 1e-2


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_o1_rewrite_files_stay_in_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = Linear(amp_level="O1", epochs=1).run(out=str(tmp_path / "out"))
    assert run.status == "completed"
    assert os.listdir(tmp_path) == ["out"]
    assert os.listdir(os.path.join(run.dir, "rewritten_network"))


@pytest.mark.slow
def test_amp_output_loss_and_grad_norm_stay_float32(ms_graph, tmp_path, monkeypatch):
    from mindspore import Tensor, amp, nn
    monkeypatch.chdir(tmp_path)  # O1 writes ./rewritten_network/
    from mindexp.callbacks import TrainStep
    from mindexp.experiments.linear import MinimalNet
    x = Tensor(np.linspace(0, 1, 8, dtype=np.float32)[:, None])
    for level in ("O1", "O2", "O3"):
        net = amp.auto_mixed_precision(MinimalNet(), level)
        assert net(x).dtype == ms_graph.float32            # cast back at the output
        step = TrainStep(nn.WithLossCell(net, nn.MSELoss()),
                         nn.SGD(net.trainable_params(), 0.1), sens=128.0)
        loss, norm = step(x, 2 * x)
        assert loss.dtype == norm.dtype == ms_graph.float32
        assert [p.dtype for p in net.trainable_params()] == [ms_graph.float32] * 2


@pytest.mark.slow  # its module fixture trains several runs
def test_fixed_loss_scale_is_divided_out(amp_runs):
    # A power-of-two scale is exact: the same trajectory as no scaling.
    scaled, base = amp_runs["scaled"], amp_runs["O0"]
    n = len(scaled.loss)
    np.testing.assert_array_equal(scaled.loss.loss, base.loss.loss.iloc[:n])
    np.testing.assert_array_equal(scaled.grad_norm.grad_norm, base.grad_norm.grad_norm.iloc[:n])


def test_unknown_amp_level_is_rejected():
    with pytest.raises(ConfigError) as err:
        Linear(amp_level="O4")
    assert err.value.field == "amp_level" and "O0, O1, O2, O3" in str(err.value)


# -- mode -----------------------------------------------------------------------
@pytest.mark.slow
def test_graph_and_pynative_both_train_to_the_same_weights(tmp_path):
    graph = Linear(epochs=6, lr=0.5, mode="graph").run(out=str(tmp_path))
    pynative = Linear(epochs=6, lr=0.5, mode="pynative").run(out=str(tmp_path))
    assert (graph.meta["mode"], pynative.meta["mode"]) == ("graph", "pynative")
    for run in (graph, pynative):
        assert run.status == "completed"
        _assert_reaches_targets(run, tol=0.05)
    np.testing.assert_allclose(pynative.params.value, graph.params.value, rtol=1e-5, atol=1e-6)


# -- device and graph_kernel -------------------------------------------------------
@pytest.mark.parametrize("device", ["GPU", "Ascend"])
def test_missing_backend_is_a_config_error_before_the_run_dir(tmp_path, device):
    import mindspore as ms
    if ms.hal.is_available(device):
        pytest.skip(f"{device} is available here")
    with pytest.raises(ConfigError) as err:
        Linear(device=device).run(out=str(tmp_path))
    assert err.value.field == "device"
    assert str(err.value).endswith(f"Received: device={device!r}")
    assert not os.listdir(tmp_path)


def test_graph_kernel_on_cpu_warns_and_trains(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="mindexp.train.session"):
        run = Linear(epochs=2, graph_kernel=True).run(out=str(tmp_path))
    assert run.status == "completed"
    assert any("graph_kernel" in r.getMessage() and "CPU" in r.getMessage()
               for r in caplog.records)


# -- seed -----------------------------------------------------------------------------
def _values(run, name):
    table = pd.read_csv(os.path.join(run.dir, f"{name}.csv"), dtype=str)
    return table.drop(columns=["time_s"], errors="ignore")


@pytest.mark.slow
def test_same_seed_gives_identical_logs_in_graph_mode(tmp_path):
    runs = [Linear(seed=7, epochs=3).run(out=str(tmp_path)) for _ in range(2)]
    other = Linear(seed=8, epochs=3).run(out=str(tmp_path))
    for name in ("loss", "params", "grad_norm"):
        # Compared as the CSV's text: byte-identical values, not merely close.
        pd.testing.assert_frame_equal(_values(runs[0], name), _values(runs[1], name))
    assert not _values(runs[0], "loss").equals(_values(other, "loss"))


# -- invalid values and combinations, rejected at config time --------------------------
@pytest.mark.parametrize("field, value", [
    ("grad_accumulation", 0), ("lr_schedule", "linear"), ("mode", "eager"), ("device", "TPU"),
    ("clip_grad_norm", -1.0), ("loss_scale", 0.0), ("warmup_steps", -1), ("lr_decay_rate", 1.5),
    ("amp_level", "O4"), ("batch_size", 0), ("metrics", "mse,f1"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ConfigError) as err:
        Linear(**{field: value})
    assert err.value.field == field
    assert f"Received: {field}=" in str(err.value)


def test_graph_kernel_is_ignored_with_a_warning_in_pynative(caplog, monkeypatch):
    import mindspore as ms
    from mindexp.train import session as runner
    calls = []
    monkeypatch.setattr(ms, "set_context", lambda **kw: calls.append(kw))
    cfg = Linear(mode="pynative", graph_kernel=True, device="GPU").config
    with caplog.at_level(logging.WARNING, logger="mindexp.train.session"):
        runner._enable_graph_kernel(cfg)
    assert not calls
    assert any("pynative" in r.getMessage() for r in caplog.records)
