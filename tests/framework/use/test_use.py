"""Stop early, keep the best, and use the trained model: evaluate, predict, export."""
import json
import logging
import os

import numpy as np
import pandas as pd
import pytest

from conftest import require
from mindexp import ConfigError

# A small spirals run: evaluation and a checkpoint at every epoch, all kept,
# and the two best by eval accuracy kept besides them.
SPIRALS = dict(samples=256, eval_samples=128, hidden=16, layers=1, epochs=4, batch_size=32,
               lr=0.05, checkpoint_every=1, checkpoint_interval_s=0, keep_checkpoints=10,
               checkpoint_monitor="eval_accuracy", keep_best=2)


@pytest.fixture(scope="module")
def spirals_run(tmp_path_factory):
    from mindexp.experiments.spirals import Spirals
    root = tmp_path_factory.mktemp("use")
    return Spirals(**SPIRALS).run(out=str(root))


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    from mindexp.experiments.linear import Linear
    root = tmp_path_factory.mktemp("linear")
    return Linear(epochs=3, checkpoint_interval_s=0).run(out=str(root))


def one_line_error(done):
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mindexp: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def checkpoints_index(run):
    return pd.read_csv(os.path.join(run.dir, "checkpoints.csv"))


# -- config -------------------------------------------------------------------
@pytest.mark.parametrize("values, field", [
    ({"early_stop": "accuracy"}, "early_stop"),
    ({"early_stop": "eval_"}, "early_stop"),
    ({"patience": 0}, "patience"),
    ({"min_delta": -1}, "min_delta"),
    ({"early_stop_mode": "up"}, "early_stop_mode"),
    ({"checkpoint_monitor": "acc"}, "checkpoint_monitor"),
    ({"keep_best": 2}, "keep_best"),                      # without checkpoint_monitor
    ({"checkpoint_monitor": "loss", "keep_best": 0}, "keep_best"),
])
def test_bad_early_stop_and_keep_best_fields_are_named(values, field):
    from mindexp.experiments.linear import Linear
    with pytest.raises(ConfigError) as info:
        Linear(**values)
    assert info.value.field == field
    assert len(str(info.value).splitlines()) == 1 and "Received:" in str(info.value)


def test_monitor_direction_follows_the_name():
    from mindexp.define.config import monitor_mode
    assert monitor_mode("loss") == "min"
    assert monitor_mode("eval_loss") == "min"
    assert monitor_mode("eval_accuracy") == "max"
    assert monitor_mode("eval_accuracy", "min") == "min"
    assert monitor_mode("eval_acc", metrics={"acc": "accuracy"}) == "max"
    assert monitor_mode("eval_custom") is None


def test_watching_an_eval_value_without_eval_split_is_rejected_before_any_run_dir(main_cli, tmp_path):
    done = main_cli("run", "linear", "--set", "early_stop=eval_accuracy", "--out", "out")
    line = one_line_error(done)
    assert "'early_stop'" in line and "accepted: loss" in line
    assert not (tmp_path / "out").exists()


def test_early_stop_on_the_loss_is_refused_with_several_workers(main_cli, tmp_path):
    line = one_line_error(main_cli("run", "linear", "--set", "early_stop=loss", "--workers", "2",
                              "--out", "out"))
    assert "config field 'early_stop'" in line and "eval_<metric>" in line
    assert not (tmp_path / "out").exists()


def test_unknown_eval_metric_lists_the_accepted_ones():
    from mindexp.experiments.spirals import Spirals
    with pytest.raises(ConfigError) as info:
        Spirals(**{**SPIRALS, "checkpoint_monitor": "eval_top5"}).run(out="unused-never-created")
    assert info.value.field == "checkpoint_monitor"
    assert "eval_accuracy" in str(info.value) and "eval_loss" in str(info.value)
    assert not os.path.exists("unused-never-created")


# -- early stopping -------------------------------------------------------------
@pytest.mark.slow
def test_early_stop_completes_and_resumes_only_when_asked(cli, main_cli, tmp_path):
    # min_delta far above any change: epoch 1 sets the best, epoch 2 is no better -> stop.
    sets = ["--set", "epochs=10", "--set", "early_stop=loss", "--set", "patience=1",
            "--set", "min_delta=100", "--set", "checkpoint_interval_s=0", "--quiet"]
    done = cli("run", "linear", *sets, "--out", "out")
    assert done.returncode == 0, done.stderr
    (run_id,) = os.listdir(tmp_path / "out" / "linear")
    run_dir = tmp_path / "out" / "linear" / run_id
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "completed"
    assert meta["stop_reason"].startswith("early stop at epoch 2: loss did not improve")
    assert meta["steps"] == 20 and meta["epochs"] == 2  # 100 samples / batch 10
    assert pd.read_csv(run_dir / "loss.csv")["step"].max() == 20

    refused = one_line_error(main_cli("resume", run_dir))
    assert "stopped early" in refused and "--set patience=N" in refused

    done = cli("resume", run_dir, "--set", "patience=3", "--quiet")
    assert done.returncode == 0, done.stderr
    meta = json.loads((run_dir / "run.json").read_text())
    # the counter starts afresh at the resume: epoch 3 sets the best, 4-6 are no better
    assert meta["status"] == "completed" and meta["stop_reason"].startswith("early stop at epoch 6")
    steps = pd.read_csv(run_dir / "loss.csv")["step"]
    assert steps.tolist() == list(range(1, 61))  # each step once
    assert meta["resumes"][0]["previous_status"] == "completed"


@pytest.mark.slow
def test_early_stop_on_an_eval_metric(tmp_path):
    from mindexp.experiments.spirals import Spirals
    run = Spirals(**{**SPIRALS, "epochs": 8, "early_stop": "eval_loss", "patience": 1,
                     "min_delta": 100}).run(out=str(tmp_path))
    assert run.status == "completed"
    first, second = run.eval["loss"].tolist()
    # the eval loss fell (by less than min_delta) or rose: the reason says which
    what = (f"improved by less than min_delta=100 on {first:.6g}" if second < first
            else f"did not improve on {first:.6g}")
    assert run.meta["stop_reason"] == f"early stop at epoch 2: eval_loss {what} for 1 epoch"
    assert run.eval["epoch"].tolist() == [1, 2]


def test_a_run_that_was_not_stopped_has_no_stop_reason(linear_run):
    assert linear_run.status == "completed" and linear_run.meta["stop_reason"] is None


# -- keep the best --------------------------------------------------------------
@pytest.mark.slow
def test_keep_best_keeps_the_k_best_by_the_monitor(spirals_run):
    index = checkpoints_index(spirals_run)
    best_rows = index[index["kind"] == "best"]
    on_disk = sorted(f for f in os.listdir(os.path.join(spirals_run.dir, "checkpoints"))
                     if f.startswith("best-"))
    assert len(on_disk) == 2
    # scores are eval accuracies of the epochs they were saved at
    acc = spirals_run.eval.set_index("epoch")["accuracy"]
    for _, row in best_rows.iterrows():
        assert row["score"] == pytest.approx(acc[row["epoch"]])
    kept = best_rows[best_rows["file"].map(os.path.basename).isin(on_disk)]
    assert sorted(kept["score"], reverse=True) == sorted(acc, reverse=True)[:2]
    # regular checkpoints of every epoch are still there
    assert len([f for f in os.listdir(os.path.join(spirals_run.dir, "checkpoints"))
                if f.startswith("epoch")]) == 4


@pytest.mark.slow
def test_run_network_loads_best_last_or_a_step(spirals_run):
    import mindspore as ms
    from mindexp import load_run
    run = load_run(spirals_run.dir)
    index = checkpoints_index(run)
    best = index[index["kind"] == "best"]
    best = best[best["file"].map(lambda f: os.path.exists(os.path.join(run.dir, f)))]
    best_file = best.sort_values(["score", "step"], ascending=[False, True]).iloc[0]["file"]  # ties: the earlier
    assert run.checkpoint_path("best") == os.path.join(run.dir, best_file)
    for which, path in (("best", best_file), ("last", index[index["kind"] == "last"].iloc[-1]["file"]),
                        (16, "checkpoints/epoch0002-step0000016.ckpt")):
        net = run.network(checkpoint=which)
        saved = ms.load_checkpoint(os.path.join(run.dir, path))
        for p in net.trainable_params():
            np.testing.assert_array_equal(p.asnumpy(), saved[p.name].asnumpy())
    with pytest.raises(Exception, match="no step 999 checkpoint; accepted: last, best or a step"):
        run.network(checkpoint=999)


# -- evaluate -------------------------------------------------------------------
# (bad input through the CLI's main() in this process: a process would import MindSpore
# only to print one line; tests/framework/cli/test_cli.py checks the process's exit 2)
@pytest.mark.slow
def test_evaluate_a_checkpoint_equals_eval_csv_of_its_epoch(cli, main_cli, spirals_run):
    eval_csv = spirals_run.eval.set_index("epoch")
    for epoch, mindexp in ((2, cli), (4, main_cli)):  # (a second process: the same imports)
        step = int(eval_csv.loc[epoch, "step"])
        done = mindexp("evaluate", spirals_run.dir, "--checkpoint", step)
        assert done.returncode == 0, done.stderr
        assert f"(step {step}, epoch {epoch}) on eval" in done.stdout
    table = pd.read_csv(os.path.join(spirals_run.dir, "evaluations.csv"))
    assert list(table.columns) == ["evaluated_at", "checkpoint", "step", "epoch", "split",
                                   "accuracy", "loss"]
    for _, row in table.tail(2).iterrows():
        expected = eval_csv.loc[row["epoch"]]
        assert row["accuracy"] == pytest.approx(expected["accuracy"], rel=1e-6)
        assert row["loss"] == pytest.approx(expected["loss"], rel=1e-5)


def _by_hand(run, checkpoint, split):
    """Accuracy and mean cross-entropy of the saved network on every sample of ``split``."""
    import mindspore as ms
    from mindexp.define.data import as_arrays
    exp = run.experiment()
    x, labels = as_arrays(exp.source(split), exp.columns, split)
    logits = run.network(checkpoint)(ms.Tensor(x)).asnumpy().astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return (float(np.mean(logits.argmax(axis=1) == labels)),
            float(-np.mean(log_p[np.arange(len(labels)), labels])))


@pytest.mark.slow
def test_evaluate_the_best_on_the_train_split_appends_a_row(spirals_run):
    from mindexp.use import evaluate
    path = os.path.join(spirals_run.dir, "evaluations.csv")
    before = len(pd.read_csv(path)) if os.path.exists(path) else 0
    row = evaluate(spirals_run.dir, "best", split="train")
    assert row["split"] == "train" and os.path.basename(row["checkpoint"]).startswith("best-")
    accuracy, loss = _by_hand(spirals_run, "best", "train")
    assert row["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert row["loss"] == pytest.approx(loss, rel=1e-4)
    table = pd.read_csv(path)
    assert len(table) == before + 1 and table.iloc[-1]["accuracy"] == pytest.approx(row["accuracy"])


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--checkpoint", "999"], "has no step 999 checkpoint; accepted: last, best or a step of"),
    (["--checkpoint", "newest"], "--checkpoint must be best, last, a step number >= 1 or a .ckpt"),
    (["--split", "test"], "invalid choice: 'test'"),
])
def test_evaluate_bad_arguments_write_nothing(main_cli, spirals_run, args, message):
    path = os.path.join(spirals_run.dir, "evaluations.csv")
    before = open(path).read() if os.path.exists(path) else None
    assert message in one_line_error(main_cli("evaluate", spirals_run.dir, *args))
    assert (open(path).read() if os.path.exists(path) else None) == before


@pytest.mark.slow
def test_evaluate_a_split_the_experiment_lacks(cli, main_cli, linear_run):
    line = one_line_error(main_cli("evaluate", linear_run.dir))
    assert "linear has no eval split" in line and "accepted: --split train" in line
    assert not os.path.exists(os.path.join(linear_run.dir, "evaluations.csv"))
    done = cli("evaluate", linear_run.dir, "--split", "train")
    assert done.returncode == 0 and "loss = " in done.stdout


# -- predict --------------------------------------------------------------------
@pytest.mark.slow
def test_predict_batched_equals_the_network(cli, main_cli, spirals_run, tmp_path):
    import mindspore as ms
    x = np.random.default_rng(0).normal(size=(10, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = cli("predict", spirals_run.dir, "--input", "x.npy", "--output", "y.npy",
               "--batch-size", "3", "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    y = np.load(tmp_path / "y.npy")
    expected = spirals_run.network(checkpoint="best")(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    # a CSV with a header line gives the same outputs, printed as CSV
    pd.DataFrame(x, columns=["a", "b"]).to_csv(tmp_path / "x.csv", index=False)
    done = main_cli("predict", spirals_run.dir, "--input", "x.csv", "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    printed = np.loadtxt(done.stdout.splitlines(), delimiter=",")
    np.testing.assert_allclose(printed, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(10, 3), (10,), (0, 2)])
def test_predict_wrong_shape_is_one_line_and_writes_nothing(main_cli, spirals_run, tmp_path, shape):
    np.save(tmp_path / "x.npy", np.zeros(shape, np.float32))
    line = one_line_error(main_cli("predict", spirals_run.dir, "--input", "x.npy", "--output", "y.npy"))
    assert f"has shape {shape}" in line and "column 'xy' shaped (2,)" in line
    assert "(N, 2)" in line
    assert not (tmp_path / "y.npy").exists()


@pytest.mark.slow
def test_predict_bad_input_files(main_cli, tmp_path):
    from rundirs import make_run
    run_dir = make_run(tmp_path, experiment="linear",
                       meta={"entry": "mindexp.experiments.linear:Linear"})
    (tmp_path / "x.txt").write_text("1\n")
    assert "--input must be a .npy or .csv file" in one_line_error(
        main_cli("predict", run_dir, "--input", "x.txt"))
    assert "does not exist" in one_line_error(main_cli("predict", run_dir, "--input", "nope.npy"))


# -- export ---------------------------------------------------------------------
@pytest.mark.slow
def test_export_mindir_loads_back_with_the_same_outputs(cli, spirals_run, tmp_path):
    import mindspore as ms
    from mindspore import nn
    done = cli("export", spirals_run.dir, "--format", "MINDIR", "--batch-size", "4",
               "--output", "net.mindir", "--checkpoint", "last")
    assert done.returncode == 0, done.stderr
    assert os.path.exists(tmp_path / "net.mindir")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    x = ms.Tensor(np.random.default_rng(1).normal(size=(4, 2)).astype(np.float32))
    graph = nn.GraphCell(ms.load(str(tmp_path / "net.mindir")))
    np.testing.assert_allclose(graph(x).asnumpy(), spirals_run.network()(x).asnumpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_export_onnx_and_default_path(cli, spirals_run, tmp_path):
    done = cli("export", spirals_run.dir, "--format", "onnx", "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    path = done.stdout.strip().split("wrote ", 1)[1]
    assert path.startswith(os.path.join(spirals_run.dir, "exported", "best-epoch"))
    assert path.endswith(".onnx")
    onnx, ort = require("onnx"), require("onnxruntime")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    # the batch dimension is dynamic, on the input and the output
    assert [d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim][:1] == ["batch"]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    [given] = session.get_inputs()
    assert given.name == "xy" and given.shape == ["batch", 2]  # spirals' first column
    import mindspore as ms
    net = spirals_run.network("best")
    for rows in (1, 5, 33):  # the training batch is 32
        x = np.random.default_rng(rows).normal(size=(rows, 2)).astype(np.float32)
        [outputs] = session.run(None, {given.name: x})
        np.testing.assert_allclose(outputs, net(ms.Tensor(x)).asnumpy(), rtol=1e-5, atol=1e-6)
    fixed = cli("export", spirals_run.dir, "--format", "onnx", "--batch-size", "4",
                "--output", tmp_path / "fixed.onnx")
    assert fixed.returncode == 0, fixed.stderr
    fixed_input = ort.InferenceSession(str(tmp_path / "fixed.onnx")).get_inputs()[0]
    assert fixed_input.shape == [4, 2]


def test_export_help_names_each_formats_file_and_batch(capsys):
    from mindexp.cli.main import main
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "<checkpoint>.mindir, or .onnx with --format ONNX" in text
    assert "ONNX: dynamic unless given" in text


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_onnx_export_fixes_the_batch_of_a_network_that_computes_with_it(tmp_path, caplog):
    """The dynamic batch is checked with onnxruntime; a graph that fails on another
    batch is exported again with the batch fixed, and a warning says so."""
    require("onnx"), require("onnxruntime")
    import onnxruntime as ort
    from mindspore import nn
    import importlib
    export_module = importlib.import_module("mindexp.use.export")

    class BatchInTheGraph(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(4, 1)

        def construct(self, x):
            return self.dense(x.reshape(x.shape[0], -1))
    path = str(tmp_path / "net.onnx")
    sample = np.zeros((3, 1, 2, 2), np.float32)
    with caplog.at_level(logging.WARNING, logger="mindexp"):
        export_module._export_onnx_dynamic(BatchInTheGraph(), sample, path, "x",
                                           fresh=BatchInTheGraph)
    assert ort.InferenceSession(path).get_inputs()[0].shape == [3, 1, 2, 2]
    assert [r.getMessage() for r in caplog.records if "fixes the batch at 3 rows" in r.getMessage()]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--format", "AIR"], "--format AIR needs MindSpore's Ascend backend"),
    (["--format", "TFLITE"], "--format must be one of MINDIR, ONNX"),
    (["--checkpoint", "7"], "has no step 7 checkpoint"),
    (["--output", "no/such/folder/net.mindir"], "is not a writable folder"),
])
def test_export_bad_arguments(main_cli, linear_run, tmp_path, args, message):
    assert message in one_line_error(main_cli("export", linear_run.dir, *args))
    assert not os.path.exists(os.path.join(linear_run.dir, "exported"))


@pytest.mark.slow
def test_export_python_takes_format_like_the_cli_and_file_format_still_works(linear_run, tmp_path):
    from mindexp.use import export
    path = export(linear_run.dir, format="onnx", output=str(tmp_path / "a"))
    assert path.endswith(".onnx") and os.path.getsize(path) > 0
    with pytest.warns(DeprecationWarning, match="use format="):
        old = export(linear_run.dir, file_format="MINDIR", output=str(tmp_path / "b"))
    assert old.endswith(".mindir") and os.path.getsize(old) > 0


# -- the callbacks read the framework's eval_<metric> names ----------------------
def test_early_stopping_reads_eval_names_and_skips_epochs_without_eval(run_context):
    from mindexp.callbacks import EarlyStopping
    cb = EarlyStopping("eval_accuracy", patience=2, mode="max")
    for epoch, results in enumerate([{"accuracy": 0.5}, None, {"accuracy": 0.4},
                                     {"accuracy": 0.45}], start=1):
        ctx = run_context(cur_epoch_num=epoch, **({"eval_results": results} if results else {}))
        cb.on_train_epoch_end(ctx)
    # epoch 2 had no evaluation: only epochs 3 and 4 count against the best of epoch 1
    assert cb.best == 0.5 and cb.stopped_epoch == 4
    assert ctx.get_stop_requested()


def test_checkpoint_scores_an_eval_name(run_context, tmp_path):
    from mindexp.callbacks import Checkpoint
    def params(**results):
        return run_context(eval_results=results).original_args()
    cb = Checkpoint(str(tmp_path), monitor="eval_loss", mode="min")
    # the Model's `loss` metric (mindexp's EvalLoss), never MindSpore's eval_loss (the last batch's)
    assert cb._score(params(eval_loss=0.25, loss=0.3)) == 0.3
    assert cb._score(params(mae=0.1)) is None
    cb = Checkpoint(str(tmp_path), monitor="eval_mae", mode="min")
    assert cb._score(params(mae=0.1)) == pytest.approx(0.1)


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_not_a_run_or_a_run_without_checkpoints(main_cli, tmp_path):
    from rundirs import make_run
    assert "is not a run directory" in one_line_error(main_cli("evaluate", tmp_path))
    run_dir = make_run(tmp_path, experiment="linear", status="failed",
                       meta={"entry": "mindexp.experiments.linear:Linear"})
    line = one_line_error(main_cli("export", run_dir))
    assert "has no last checkpoint; accepted: none (the run has no checkpoints)" in line
    assert not os.path.exists(os.path.join(run_dir, "exported"))


STOPS_ITSELF = '''
import os, signal
from mindexp.experiments.linear import Linear


class StopsItself(Linear):
    """Linear that sends itself SIGTERM at global step 25 (mid epoch 3)."""

    def callbacks(self):
        from mindspore.train import Callback

        class Term(Callback):
            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                step = (p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1
                if step == 25 and os.environ.get("TERM_AT_25"):
                    os.kill(os.getpid(), signal.SIGTERM)
        return [Term()]
'''


@pytest.mark.slow
def test_an_interrupted_run_stops_early_where_the_uninterrupted_one_does(cli, tmp_path):
    (tmp_path / "stops.py").write_text(STOPS_ITSELF)
    sets = ["--set", "epochs=10", "--set", "early_stop=loss", "--set", "patience=2",
            "--set", "min_delta=100", "--set", "checkpoint_interval_s=0", "--quiet"]
    done = cli("run", "stops.py:StopsItself", *sets, "--out", "out", TERM_AT_25="1")
    assert done.returncode != 0, done.stderr  # status interrupted (checked below)
    (run_id,) = os.listdir(tmp_path / "out" / "linear")
    run_dir = tmp_path / "out" / "linear" / run_id
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    done = cli("resume", run_dir, "--quiet")  # interrupted: no need to ask
    assert done.returncode == 0, done.stderr
    meta = json.loads((run_dir / "run.json").read_text())
    # uninterrupted: epoch 1 sets the best, epochs 2 and 3 wait -> stop at epoch 3
    assert meta["stop_reason"].startswith("early stop at epoch 3"), meta["stop_reason"]
    assert pd.read_csv(run_dir / "loss.csv")["step"].tolist() == list(range(1, 31))


NO_ONNX = '''
from mindspore import nn, ops
from mindexp.experiments.linear import Linear


class CumSumNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(1, 1)

    def construct(self, x):
        return ops.cumsum(self.dense(x), 1)  # MindSpore 2.10 has no ONNX converter for CumSum


class NoOnnx(Linear):
    def network(self):
        return CumSumNet()
'''


@pytest.mark.slow
def test_export_onnx_of_an_operator_mindspore_cannot_convert(cli, tmp_path):
    (tmp_path / "no_onnx.py").write_text(NO_ONNX)
    done = cli("run", "no_onnx.py:NoOnnx", "--set", "epochs=1", "--out", "out", "--quiet")
    assert done.returncode == 0, done.stderr
    (run_id,) = os.listdir(tmp_path / "out" / "linear")
    run_dir = tmp_path / "out" / "linear" / run_id
    line = one_line_error(cli("export", run_dir, "--format", "ONNX"))
    assert "MindSpore cannot export this network as ONNX here: Can not find key CumSum" in line
    assert not (run_dir / "exported").exists()
    assert sorted(os.listdir(tmp_path)) == ["no_onnx.py", "out"]  # no rank_0/ left in the cwd
    assert cli("export", run_dir).returncode == 0  # MINDIR has every operator
    assert os.listdir(run_dir / "exported") == ["epoch0001-step0000010.mindir"]


def test_bad_keep_best_on_the_command_line_creates_nothing(main_cli, tmp_path):
    line = one_line_error(main_cli("run", "linear", "--set", "keep_best=2", "--out", "out"))
    assert "config field 'keep_best' needs checkpoint_monitor" in line
    assert not (tmp_path / "out").exists()
