"""Any training loop is a run: run.step/epochs/batches/log_eval/save drive the
callbacks of a Model run (mindexp.track's loop API)."""
import csv
import difflib
import os
import runpy
import textwrap

import numpy as np
import pytest

# The seed tutorial's own loop, as it is (shared/seed: Dense(1, 1), WithLossCell,
# TrainOneStepCell, SGD, 100 full-batch steps).
SEED_LOOP = textwrap.dedent("""
    import numpy as np
    import mindspore as ms
    import mindspore.nn as nn
    from mindspore import Tensor

    class MinimalNet(nn.Cell):
        def __init__(self):
            super(MinimalNet, self).__init__()
            self.dense = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")

        def construct(self, x):
            return self.dense(x)

    ms.set_seed(0)
    net = MinimalNet()
    loss_fn = nn.MSELoss()
    loss_net = nn.WithLossCell(net, loss_fn)
    optimizer = nn.SGD(params=net.trainable_params(), learning_rate=0.01)
    train_net = nn.TrainOneStepCell(loss_net, optimizer)
    x = np.random.rand(100, 1).astype(np.float32)
    y = 2 * x + np.random.normal(0, 0.01, size=(100, 1)).astype(np.float32)
    train_x = Tensor(x)
    train_y = Tensor(y)
    for epoch in range(100):
        loss = train_net(train_x, train_y)
""")

# The same loop tracked: the lines a user adds (and the loop indented once).
TRACKED = SEED_LOOP.replace("import numpy as np\n", "import numpy as np\nimport mindexp\n", 1) \
    .replace("""for epoch in range(100):
    loss = train_net(train_x, train_y)
""", """with mindexp.track("outputs", "seed", config={"lr": 0.01}) as run:
    for epoch in range(100):
        loss = train_net(train_x, train_y)
        run.step(loss, net=train_net)
""")


def _rows(path, drop=("time_s",)):
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def _added_lines(before, after):
    """Lines of ``after`` that are not in ``before`` (indentation aside)."""
    diff = difflib.ndiff([l.strip() for l in before.splitlines()],
                         [l.strip() for l in after.splitlines()])
    return [l for l in diff if l.startswith("+ ")]


@pytest.mark.slow  # trains 100 steps in a script: seconds
def test_the_seed_tutorials_loop_with_three_added_lines_is_a_run(tmp_path, monkeypatch, capsys):
    from mindexp.cli.main import main
    assert len(_added_lines(SEED_LOOP, TRACKED)) == 3  # the bound: at most 5
    script = tmp_path / "seed.py"
    script.write_text(TRACKED)
    monkeypatch.chdir(tmp_path)
    run = runpy.run_path(str(script), run_name="__main__")["run"]
    loss, params = _rows(os.path.join(run.dir, "loss.csv")), _rows(os.path.join(run.dir, "params.csv"))
    assert [int(r["step"]) for r in loss] == list(range(1, 101))
    assert {r["epoch"] for r in loss} == {"1"} and float(loss[0]["lr"]) == pytest.approx(0.01)
    for name in ("dense.weight", "dense.bias"):  # weight and bias every step
        assert [int(r["step"]) for r in params if r["param"] == name] == list(range(1, 101))
    last = {r["param"]: float(r["value"]) for r in params if r["step"] == "100"}
    assert last["dense.weight"] == pytest.approx(float(run_net_weight(run)), rel=1e-6)
    capsys.readouterr()
    for args in (["runs", "outputs"], ["show", run.dir], ["compare", "outputs/seed"],
                 ["plot", run.dir]):
        assert main(args) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "completed" in text and "dense.weight" in text
    assert {"loss.png", "params.png"} <= set(os.listdir(os.path.join(run.dir, "plots")))
    import mindexp
    meta = mindexp.load_run(run.dir).meta
    assert meta["status"] == "completed" and meta["steps"] == 100 and meta["steps_per_s"] > 0


def run_net_weight(run):
    """dense.weight of the run's final checkpoint (the block's end saves one)."""
    import mindspore as ms
    (ckpt,) = [r["file"] for r in _rows(os.path.join(run.dir, "checkpoints.csv"))]
    return ms.load_checkpoint(os.path.join(run.dir, ckpt))["dense.weight"].asnumpy().item()


def _mlp_parts(ms):
    from mindspore import nn
    from mindexp.callbacks import TrainStep
    net = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 1)])
    optimizer = nn.Adam(net.trainable_params(), learning_rate=0.01)
    return net, optimizer, TrainStep(nn.WithLossCell(net, nn.MSELoss()), optimizer)


def _data():
    x = np.random.default_rng(1).random((40, 4), dtype=np.float32)
    return x, x.sum(axis=1, keepdims=True)


def _model_run(out, ms):
    from mindspore.train import Model
    import mindexp
    from mindexp.define.data import make_dataset
    with mindexp.track(out, "model", {"lr": 0.01}, seed=3) as run:
        net, optimizer, step = _mlp_parts(ms)
        model = Model(step)
        data = make_dataset(_data(), ("x", "y"), batch_size=8, shuffle=True, seed=3)
        model.train(3, data, callbacks=run.callbacks(model), dataset_sink_mode=False)
    return run.dir


def _loop_run(out, ms):
    import mindexp
    with mindexp.track(out, "loop", {"lr": 0.01}, seed=3) as run:
        net, optimizer, step = _mlp_parts(ms)
        for epoch in run.epochs(3):
            for x, y in run.batches(_data(), batch_size=8):
                loss, grad_norm = step(x, y)
                run.step(loss, net=net, grad_norm=grad_norm, optimizer=optimizer)
    return run.dir


@pytest.mark.slow  # two short trainings: seconds
def test_the_loop_and_model_paths_write_the_same_logs_through_the_same_writers(
        tmp_path, ms_graph, monkeypatch):
    import inspect
    from mindexp.callbacks import csv_log
    writers = {}
    made = csv_log.CsvLog.__init__

    def noted(self, path, *args, **kwargs):  # who makes the log of each file
        caller = next(f.frame.f_locals["self"] for f in inspect.stack()[1:]
                      if not isinstance(f.frame.f_locals.get("self", self), csv_log.CsvLog))
        writers.setdefault(os.path.basename(path), set()).add(type(caller).__name__)
        made(self, path, *args, **kwargs)

    monkeypatch.setattr(csv_log.CsvLog, "__init__", noted)
    model_dir = _model_run(tmp_path, ms_graph)
    loop_dir = _loop_run(tmp_path, ms_graph)
    for name in ("loss.csv", "params.csv", "grad_norm.csv"):
        model_rows = _rows(os.path.join(model_dir, name))
        assert len(model_rows) > 12  # 5 steps an epoch, 3 epochs
        assert _rows(os.path.join(loop_dir, name)) == model_rows, name
    assert writers["loss.csv"] == {"LossMonitor"}
    assert writers["params.csv"] == {"ParameterTracker"}
    assert writers["grad_norm.csv"] == {"GradNormMonitor"}


def test_run_save_flushes_the_users_own_log_before_the_checkpoint(tmp_path):
    from mindspore import nn
    import mindexp
    from mindexp.callbacks import CsvLog
    with mindexp.track(tmp_path, "own_log") as run:
        net = nn.Dense(1, 1)
        mine = CsvLog(os.path.join(run.dir, "mine.csv"), ["step", "value"], flush_rows=1000,
                      flush_seconds=3600)
        for step in range(1, 4):
            run.step(0.5 / step, net=net)
            mine.write((step, step * 2))
        assert not os.path.exists(mine.path) or _rows(mine.path) == []  # still buffered
        run.save(net)
        assert [r["step"] for r in _rows(mine.path)] == ["1", "2", "3"]  # flushed first
        mine.close()
    saved = _rows(os.path.join(run.dir, "checkpoints.csv"))
    assert [(r["step"], r["kind"]) for r in saved] == [("3", "last")]


def _frozen(obj):
    """Frozen objects are in none of the generations gc.get_objects() walks (not the
    freeze count: it drops whenever another thread frees a frozen object)."""
    import gc
    return not any(o is obj for o in gc.get_objects())


@pytest.mark.parametrize("path", ["loop", "model"])
def test_a_tracked_run_keeps_the_objects_of_its_start_out_of_full_collections(tmp_path, path):
    # as Experiment.run does around Model.train: a full collection walks
    # MindSpore's ~170k objects (~150 ms) every few hundred steps otherwise
    from mindspore import nn
    import mindexp
    mine = [object()]  # the script's objects before training
    with mindexp.track(tmp_path, "frozen") as run:
        net = nn.Dense(1, 1)
        assert not _frozen(mine)  # nothing frozen before training begins
        if path == "loop":
            run.step(0.5, net=net)
            run.step(0.25, net=net)  # frozen once, kept so
        else:
            run.callbacks(nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                              nn.SGD(net.trainable_params(), 0.1)))
        assert _frozen(mine)
    assert not _frozen(mine)  # given back at the block's end


def test_a_script_run_without_the_runs_callbacks_records_its_steps_per_s(tmp_path):
    import mindexp
    from mindexp.callbacks import CsvLog
    with mindexp.track(tmp_path, "own_loss") as run:
        with CsvLog(os.path.join(run.dir, "loss.csv"), ["step", "epoch", "loss"]) as log:
            for step in range(1, 6):
                log.write((step, 1, 1.0 / step))
    meta = mindexp.load_run(run.dir).meta
    assert meta["steps"] == 5 and meta["steps_per_s"] > 0


# A loop that sends itself SIGTERM after its STOP-th step (0: never); DRIVEN=0: a
# plain `for` loop of 12 full-batch steps, else 3 epochs of 4 batches.
SIGNALLED = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import mindspore as ms
    from mindspore import nn
    import mindexp
    from mindexp.callbacks import TrainStep

    out, stop, driven = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    resume = sys.argv[4] if len(sys.argv) > 4 else None
    x = np.random.default_rng(0).random((40, 1), dtype=np.float32)
    with mindexp.track(out, "sig", resume=resume) as run:
        net = nn.Dense(1, 1)
        optimizer = nn.SGD(net.trainable_params(), 0.1)
        step = TrainStep(nn.WithLossCell(net, nn.MSELoss()), optimizer)
        run.load(net, optimizer)
        done = 0
        batches = ((xb, yb) for epoch in run.epochs(3)
                   for xb, yb in run.batches((x, 2 * x), batch_size=10)) if driven else \
            ((ms.Tensor(x), ms.Tensor(2 * x)) for _ in range(12))
        for xb, yb in batches:
            loss, norm = step(xb, yb)
            run.step(loss, net=net, grad_norm=norm, optimizer=optimizer)
            done += 1
            if done == stop:
                os.kill(os.getpid(), signal.SIGTERM)
""")


@pytest.mark.slow  # three short scripts
@pytest.mark.parametrize("driven", [True, False])
def test_sigterm_ends_a_loop_at_the_steps_end_interrupted_and_it_resumes(tmp_path, driven):
    import forkserver
    from conftest import cli_env
    import mindexp
    script = tmp_path / "sig.py"
    script.write_text(SIGNALLED)
    args = [sys_executable(), str(script), str(tmp_path / "out"), "5", "1" if driven else "0"]
    done = forkserver.run(args, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "out" / "sig").iterdir()
    meta = mindexp.load_run(run_dir).meta
    steps = [int(r["step"]) for r in _rows(os.path.join(run_dir, "loss.csv"))]
    assert meta["status"] == "interrupted" and meta["signal"] == "SIGTERM"
    # run.batches starts no step after the signal; a plain loop ends at the next step's end
    stopped = 5 if driven else 6
    assert steps == list(range(1, stopped + 1)) and meta["steps"] == stopped
    saved = _rows(os.path.join(run_dir, "checkpoints.csv"))
    assert saved[-1]["step"] == str(meta["steps"])  # the stop's step saved: a resume goes on
    args[3], args[-1:] = "0", [args[-1], str(run_dir)]
    done = forkserver.run(args, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [int(r["step"]) for r in _rows(os.path.join(run_dir, "loss.csv"))]
    # run.epochs/batches continue at the checkpoint's batch; a plain loop's 12 steps go on
    # from the checkpoint's step
    assert steps == list(range(1, 13 if driven else 19))
    assert mindexp.load_run(run_dir).meta["status"] == "completed"


def sys_executable():
    import sys
    return sys.executable


class _Samples:
    """A random-access source: item i is (x[i], y[i])."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def test_run_batches_orders_arrays_sources_and_datasets_alike_by_seed_and_epoch(tmp_path):
    import mindspore.dataset as ds
    import mindexp
    x = np.arange(50, dtype=np.float32).reshape(25, 2)
    y = np.arange(25, dtype=np.int64)
    kinds = {"arrays": (x, y), "source": _Samples(x, y),
             "dataset": ds.NumpySlicesDataset((x, y), column_names=["x", "y"], shuffle=False)}
    seen = {}
    for kind, data in kinds.items():
        with mindexp.track(tmp_path, kind, seed=7) as run:
            batches = [tuple(t.asnumpy().tolist() for t in batch)
                       for _ in run.epochs(2) for batch in run.batches(data, batch_size=4)]
        seen[kind] = batches
    assert len(seen["arrays"]) == 12  # 6 whole batches an epoch (drop_last)
    assert seen["arrays"] == seen["source"] == seen["dataset"]
    epoch1, epoch2 = seen["arrays"][:6], seen["arrays"][6:]
    assert epoch1 != epoch2  # each epoch its own order
    rows = [r for b in epoch1 for r in b[1]]
    order = np.random.default_rng([7, 0]).permutation(25)[:24]  # the Model path's (docs/data.md)
    assert rows == order.tolist()
