"""TensorBoard: the export of run directories and the TensorBoardLogger callback,
read back with TensorBoard's own reader."""
import glob
import os
import sys

import numpy as np
import pytest

from conftest import require
from mindexp.cli.main import main
from rundirs import make_run

event_accumulator = require(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="the tensorboard extra is not installed (pip install 'mindexp[tensorboard]')")


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def _scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _session_hparams(acc):
    from tensorboard.plugins.hparams import plugin_data_pb2
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
            for k, v in start.hparams.items()}


def test_export_writes_every_logged_value_and_the_config_as_hparams(tmp_path, capsys):
    run_dir = make_run(tmp_path / "runs", "r1", config={"lr": 0.5, "optimizer": "adam"},
                       losses=(1.0, 0.5, 0.25), params={"w": [1.0, 1.5, 1.9]},
                       eval_rows=[{"epoch": 1, "step": 2, "mae": 0.4},
                                  {"epoch": 2, "step": 3, "mae": 0.2}])
    with open(os.path.join(run_dir, "grad_norm.csv"), "w") as f:
        f.write("step,epoch,grad_norm\n1,1,3.0\n2,1,2.0\n3,2,1.0\n")
    assert main(["tensorboard", str(tmp_path / "runs")]) == 0
    assert "tensorboard --logdir" in capsys.readouterr().out
    acc = _read(os.path.join(run_dir, "tensorboard"))
    assert _scalars(acc, "loss") == [(1, 1.0), (2, 0.5), (3, 0.25)]
    assert _scalars(acc, "grad_norm") == [(1, 3.0), (2, 2.0), (3, 1.0)]
    assert [v for _, v in _scalars(acc, "eval_mae")] == pytest.approx([0.4, 0.2])
    assert [v for _, v in _scalars(acc, "params/w")] == pytest.approx([1.0, 1.5, 1.9])
    assert [v for _, v in _scalars(acc, "lr")] == pytest.approx([0.1, 0.1, 0.1])
    assert _scalars(acc, "final/loss") == [(3, 0.25)]
    hparams = _session_hparams(acc)
    assert hparams["optimizer"] == "adam" and hparams["lr"] == 0.5


def test_export_again_replaces_the_events_and_out_puts_them_elsewhere(tmp_path):
    run_dir = make_run(tmp_path / "runs", "r1")
    assert main(["tensorboard", run_dir]) == 0
    assert main(["tensorboard", run_dir]) == 0
    assert len(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*"))) == 1
    assert main(["tensorboard", run_dir, "--out", str(tmp_path / "tb")]) == 0
    acc = _read(tmp_path / "tb" / "toy" / "r1")
    assert [s for s, _ in _scalars(acc, "loss")] == [1, 2, 3]


def test_without_the_extra_the_export_names_it_in_one_line(tmp_path, capsys, monkeypatch):
    run_dir = make_run(tmp_path, "r1")
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    assert main(["tensorboard", run_dir]) == 2
    assert capsys.readouterr().err.strip() == ("mindexp: error: TensorBoard event files need "
                                               "the tensorboard package: pip install "
                                               "'mindexp[tensorboard]'")
    assert not os.path.exists(os.path.join(run_dir, "tensorboard"))


@pytest.mark.slow
def test_logger_in_plain_model_train(tmp_path, ms_graph):
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import NumpySlicesDataset
    from mindspore.train import Model
    from mindexp.callbacks import TensorBoardLogger, TrainStep
    ms.set_seed(0)
    x = np.random.default_rng(0).random((40, 1), dtype=np.float32)
    data = NumpySlicesDataset({"x": x, "y": 2 * x}, shuffle=False).batch(10)
    net = nn.Dense(1, 1)
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    logger = TensorBoardLogger(tmp_path / "tb", hparams={"lr": 0.1, "optimizer": "sgd"})
    Model(cell).train(3, data, callbacks=[logger], dataset_sink_mode=False)
    acc = _read(tmp_path / "tb")
    assert [s for s, _ in _scalars(acc, "loss")] == list(range(1, 13))
    assert len(_scalars(acc, "grad_norm")) == 12
    assert [v for _, v in _scalars(acc, "lr")] == pytest.approx([0.1] * 12)
    weights = [v for _, v in _scalars(acc, "params/weight")] or \
        [v for t in acc.Tags()["scalars"] if t.endswith("weight") for _, v in _scalars(acc, t)]
    assert len(weights) == 12 and abs(weights[-1] - 2.0) < abs(weights[0] - 2.0)
    assert _session_hparams(acc) == {"lr": 0.1, "optimizer": "sgd"}


def test_logger_checks_its_arguments(tmp_path):
    from mindexp.callbacks import TensorBoardLogger
    with pytest.raises(ValueError, match=r"`every` must be an integer >= 1. Received: every=0"):
        TensorBoardLogger(tmp_path, every=0)
    with pytest.raises(ValueError, match=r"`hparams` must be a dict"):
        TensorBoardLogger(tmp_path, hparams=[("lr", 1)])
