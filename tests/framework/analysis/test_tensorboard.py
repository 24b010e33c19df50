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


def _events(run_dir):
    """Where `mindexp tensorboard` writes a run's events: <run>/tensorboard/<run_id>."""
    return os.path.join(run_dir, "tensorboard", os.path.basename(run_dir))


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
    acc = _read(_events(run_dir))
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
    assert len(glob.glob(os.path.join(run_dir, "tensorboard", "**", "events.out.tfevents.*"),
                         recursive=True)) == 1
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


LINEAR = "mindexp.experiments.linear:Linear"


def _linear_run(root, run_id, **changed):
    """A hand-made run of the shipped linear experiment with its whole config
    (the ~44 fields), ``changed`` away from the defaults."""
    from mindexp.manage.show import experiment_defaults
    config = {**experiment_defaults(LINEAR), **changed}
    return make_run(root, run_id, config=config, experiment="linear",
                    meta={"entry": LINEAR})


def _hparam_names(acc):
    from tensorboard.plugins.hparams import plugin_data_pb2
    content = acc.PluginTagToContent("hparams")["_hparams_/experiment"]
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    # TensorBoard lists differing fields first (then by name) and shows the first few
    assert all(info.differs for info in experiment.hparam_infos)
    return [info.name for info in experiment.hparam_infos]


def test_hparams_hold_the_fields_that_differ_and_the_ones_asked_for(tmp_path, capsys):
    """A sweep over lr and optimizer: TensorBoard's table shows lr and optimizer,
    not the first of ~44 fields alphabetically; --hparams adds a field in front."""
    runs = [_linear_run(tmp_path / "out", f"r{i}", lr=lr, optimizer=opt)
            for i, (lr, opt) in enumerate([(0.1, "sgd"), (0.01, "sgd"), (0.1, "adam")])]
    assert main(["tensorboard", str(tmp_path / "out" / "linear")]) == 0
    for run_dir in runs:
        acc = _read(_events(run_dir))
        assert _hparam_names(acc) == ["optimizer", "lr"]  # config order
    assert _session_hparams(_read(_events(runs[2]))) == {
        "optimizer": "adam", "lr": 0.1}
    assert main(["tensorboard", *runs, "--hparams", "seed,lr"]) == 0
    assert _hparam_names(_read(_events(runs[0]))) == ["seed", "lr", "optimizer"]
    capsys.readouterr()
    assert main(["tensorboard", runs[0], "--hparams", "nope"]) == 2
    assert "--hparams names no config field 'nope'" in capsys.readouterr().err


def test_hparams_of_one_run_are_the_fields_set_away_from_the_defaults(tmp_path):
    run_dir = _linear_run(tmp_path, "r1", lr=0.05, epochs=7)
    assert main(["tensorboard", run_dir]) == 0
    acc = _read(_events(run_dir))
    assert _hparam_names(acc) == ["epochs", "lr"]
    assert _session_hparams(acc) == {"epochs": 7.0, "lr": 0.05}


def _png(width, height, shade):
    """A real PNG of one colour (RGB), written by hand."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    rows = b"".join(b"\0" + bytes([shade, 0, 0]) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_figures_become_images_at_their_epochs_and_system_metrics_scalars(tmp_path):
    run_dir = make_run(tmp_path, "r1", losses=(1.0, 0.5, 0.25, 0.2), steps_per_epoch=2,
                       eval_rows=[{"epoch": 1, "step": 2, "mae": 0.4},
                                  {"epoch": 2, "step": 4, "mae": 0.2}])
    pictures = {1: _png(3, 2, 10), 2: _png(3, 2, 200)}
    os.makedirs(os.path.join(run_dir, "figures", "fit"))
    for epoch, png in pictures.items():
        with open(os.path.join(run_dir, "figures", "fit", f"epoch-{epoch}.png"), "wb") as f:
            f.write(png)
    header = "time_s,step,process_cpu_percent,machine_cpu_percent,rss_mb,threads,read_bytes,write_bytes\n"
    with open(os.path.join(run_dir, "system.csv"), "w") as f:
        f.write(header + "0.0,0,,,100.5,4,0,0\n1.5,3,90.0,95.0,120.25,5,10,20\n")
    with open(os.path.join(run_dir, "system.rank1.csv"), "w") as f:
        f.write(header + "0.0,0,,,80.0,3,0,0\n")
    assert main(["tensorboard", run_dir]) == 0
    acc = event_accumulator.EventAccumulator(_events(run_dir), size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
    acc.Reload()
    images = acc.Images("figures/fit")
    assert [(e.step, e.width, e.height) for e in images] == [(2, 3, 2), (4, 3, 2)]
    assert [e.encoded_image_string for e in images] == [pictures[1], pictures[2]]
    assert _scalars(acc, "system/rss_mb") == [(0, 100.5), (3, 120.25)]
    assert _scalars(acc, "system/machine_cpu_percent")[-1] == (3, 95.0)
    assert _scalars(acc, "system/rank1/rss_mb") == [(0, 80.0)]
    assert "system/time_s" not in acc.Tags()["scalars"]


def _tensorboard_runs(command):
    """The run names TensorBoard 2.x gives the printed command's folders: its own
    flag parsing (a rejected command raises) and its own loading of a logdir_spec."""
    import shlex
    from tensorboard import default, program
    from tensorboard.backend.event_processing import data_ingester, plugin_event_multiplexer
    argv = shlex.split(command)
    assert argv[0] == "tensorboard"
    board = program.TensorBoard(plugins=default.get_plugins())
    board.configure(argv=argv)
    flags = board.flags
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    if flags.logdir_spec:
        for path, name in data_ingester._parse_event_files_spec(flags.logdir_spec).items():
            multiplexer.AddRunsFromDirectory(path, name)
    else:
        multiplexer.AddRunsFromDirectory(flags.logdir)
    return sorted(multiplexer.Runs())


@pytest.mark.filterwarnings("ignore:html5lib:DeprecationWarning")  # tensorboard's own import
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_printed_command_opens_each_run_under_its_run_id(tmp_path, capsys):
    roots = [make_run(tmp_path / "out", run_id) for run_id in ("a1", "b2")]
    assert main(["tensorboard", str(tmp_path / "out")]) == 0
    command = capsys.readouterr().out.splitlines()[-1].split("view with: ", 1)[1]
    assert "--logdir_spec" in command
    assert _tensorboard_runs(command) == ["a1", "b2"]
    assert main(["tensorboard", roots[0]]) == 0  # one run: its own logdir
    command = capsys.readouterr().out.splitlines()[-1].split("view with: ", 1)[1]
    assert _tensorboard_runs(command) == ["a1"]
    assert main(["tensorboard", *roots, "--out", str(tmp_path / "tb")]) == 0
    command = capsys.readouterr().out.splitlines()[-1].split("view with: ", 1)[1]
    assert _tensorboard_runs(command) == ["toy/a1", "toy/b2"]
    make_run(tmp_path / "other", "a1", experiment="other")  # a run id twice: named by experiment
    assert main(["tensorboard", roots[0], str(tmp_path / "other")]) == 0
    command = capsys.readouterr().out.splitlines()[-1].split("view with: ", 1)[1]
    assert _tensorboard_runs(command) == ["other/a1", "toy/a1"]
