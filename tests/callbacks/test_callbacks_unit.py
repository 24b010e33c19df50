"""Callbacks driven by a real mindspore RunContext over hand-built params
(no network, no training): step numbering, NaN stop, naming, retention."""
import csv
import os

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from mindexp.callbacks import (Checkpoint, EvalMonitor, GradNormMonitor, LossMonitor,
                               ParameterTracker, list_checkpoints)


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def drive(callback, ctx, epochs, steps, outputs=lambda step: (Tensor(np.float32(1.0 / step)),),
          initial_epoch=0):
    """Run a callback's hooks the way Model.train does (cur_step_num restarts
    at 1 when initial_epoch > 0, cur_epoch_num is absolute)."""
    p = ctx.original_args()
    p.batch_num = steps
    p.cur_step_num = 0
    callback.on_train_begin(ctx)
    for epoch in range(initial_epoch, epochs):
        p.cur_epoch_num = epoch + 1
        callback.on_train_epoch_begin(ctx)
        for _ in range(steps):
            p.cur_step_num += 1
            p.net_outputs = outputs(p.cur_step_num)
            callback.on_train_step_end(ctx)
            if ctx.get_stop_requested():
                break
        callback.on_train_epoch_end(ctx)
        if ctx.get_stop_requested():
            break
    callback.on_train_end(ctx)


class TwoParams(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((1, 1), np.float32)), name="w")
        self.v = Parameter(Tensor(np.arange(4, dtype=np.float32)), name="v")
        self.big = Parameter(Tensor(np.arange(1000, dtype=np.float32)), name="big")

    def construct(self, x):
        return x


@pytest.fixture
def network():
    return TwoParams()


def test_loss_monitor_writes_every_nth_and_each_epochs_last_step(tmp_path, run_context):
    cb = LossMonitor(tmp_path, every=3)
    drive(cb, run_context(train_network=None), epochs=2, steps=4)
    steps = [int(r["step"]) for r in rows_of(tmp_path / "loss.csv")]
    assert steps == [3, 4, 6, 8]  # 4 and 8 end an epoch


def test_loss_monitor_numbers_steps_globally_after_initial_epoch(tmp_path, run_context):
    drive(LossMonitor(tmp_path), run_context(train_network=None), epochs=2, steps=5)
    drive(LossMonitor(tmp_path, append=True), run_context(train_network=None), epochs=4,
          steps=5, initial_epoch=2)  # a plain script's restart continues its log when asked
    rows = rows_of(tmp_path / "loss.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, 21))
    assert [int(r["epoch"]) for r in rows[::5]] == [1, 2, 3, 4]


def test_loss_monitor_takes_the_first_item_of_tuple_outputs(tmp_path, run_context):
    out = lambda step: (Tensor(np.float32(0.5)), Tensor(np.float32(9.0)))
    drive(LossMonitor(tmp_path), run_context(train_network=None), 1, 2, outputs=out)
    assert [float(r["loss"]) for r in rows_of(tmp_path / "loss.csv")] == [0.5, 0.5]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_loss_monitor_on_nan_stop_stops_on_non_finite_loss_and_says_why(tmp_path, run_context,
                                                                        bad):
    out = lambda step: (Tensor(np.float32(bad if step == 3 else 1.0)), Tensor(np.float32(1)))
    cb, ctx = LossMonitor(tmp_path, on_nan="stop"), run_context(train_network=None)
    drive(cb, ctx, epochs=5, steps=4, outputs=out)
    assert ctx.get_stop_requested()
    assert cb.stop_reason == f"loss is {float(bad)} at step 3"
    assert [r["step"] for r in rows_of(tmp_path / "loss.csv")] == ["1", "2", "3"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_loss_monitor_raises_by_default_after_the_stop_naming_the_step(tmp_path, run_context, bad):
    out = lambda step: (Tensor(np.float32(bad if step == 6 else 1.0)),)
    cb, ctx = LossMonitor(tmp_path), run_context(train_network=None)
    with pytest.raises(FloatingPointError, match=r"step 6\b.*on_nan='stop'.*Received: loss="):
        drive(cb, ctx, epochs=5, steps=4, outputs=out)
    assert ctx.get_stop_requested()
    # the step is logged and the file is closed and whole before the error
    assert [r["step"] for r in rows_of(tmp_path / "loss.csv")] == ["1", "2", "3", "4", "5", "6"]
    assert cb._log._file is None


def test_loss_monitor_rejects_an_unknown_on_nan_listing_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"'raise', 'stop'.*Received: on_nan='ignore'"):
        LossMonitor(tmp_path, on_nan="ignore")


def test_loss_monitor_reads_the_optimizers_learning_rate(tmp_path, run_context, network):
    opt = nn.SGD([network.w], learning_rate=[0.1, 0.2, 0.3])
    drive(LossMonitor(tmp_path), run_context(train_network=None, optimizer=opt), 1, 3)
    lrs = [float(r["lr"]) for r in rows_of(tmp_path / "loss.csv")]
    assert lrs == pytest.approx([0.1, 0.2, 0.3])


def test_parameter_tracker_names_1_4_and_1000_element_parameters(tmp_path, run_context, network):
    opt = nn.SGD(network.trainable_params(), 0.1)
    drive(ParameterTracker(tmp_path), run_context(train_network=network, optimizer=opt), 1, 1)
    values = {r["param"]: float(r["value"]) for r in rows_of(tmp_path / "params.csv")}
    big = np.arange(1000, dtype=np.float64)
    assert values == pytest.approx({
        "w": 1.0, "v[0]": 0.0, "v[1]": 1.0, "v[2]": 2.0, "v[3]": 3.0,
        "big:norm": np.linalg.norm(big), "big:mean": big.mean(), "big:std": big.std(),
        "big:min": 0.0, "big:max": 999.0})


def test_parameter_tracker_selects_by_glob_and_rejects_unmatched(tmp_path, run_context, network):
    opt = nn.SGD(network.trainable_params(), 0.1)
    ctx = run_context(train_network=network, optimizer=opt)
    drive(ParameterTracker(tmp_path, names=["v*"]), ctx, 1, 1)
    assert {r["param"] for r in rows_of(tmp_path / "params.csv")} == {f"v[{i}]" for i in range(4)}
    with pytest.raises(ValueError, match=r"no parameter matches \['nope\*'\]"):
        ParameterTracker(tmp_path / "other", names=["nope*"]).on_train_begin(ctx)


def test_parameter_tracker_ignores_optimizer_state(tmp_path, run_context, network):
    opt = nn.Adam([network.w], 0.1)  # moments are Parameters too
    drive(ParameterTracker(tmp_path), run_context(train_network=network, optimizer=opt), 1, 1)
    assert {r["param"] for r in rows_of(tmp_path / "params.csv")} == {"w"}


def test_grad_norm_monitor_without_trainstep_says_how_to_fix(tmp_path, run_context, network):
    with pytest.raises(TypeError, match=r"TrainStep.model\(net, loss_fn, optimizer, metrics=.*"
                                        r"eval_network=EvalCell\(net, loss_fn\), "
                                        r"eval_indexes=\[0, 1, 2\]"):
        GradNormMonitor(tmp_path).on_train_begin(run_context(train_network=network))


def test_no_callback_creates_a_file_before_its_first_write(tmp_path, run_context, network):
    """A callback later in the list may still reject the run at train begin
    (GradNormMonitor without TrainStep): the ones before it left nothing."""
    ctx = run_context(train_network=network, optimizer=nn.SGD(network.trainable_params(), 0.1))
    callbacks = [LossMonitor(tmp_path / "logs"), ParameterTracker(tmp_path / "logs"),
                 EvalMonitor(tmp_path / "logs", ["accuracy"]),
                 Checkpoint(tmp_path / "logs"), GradNormMonitor(tmp_path / "logs")]
    with pytest.raises(TypeError, match="GradNormMonitor needs"):
        for cb in callbacks:
            cb.on_train_begin(ctx)
    for cb in callbacks:
        cb.__exit__(None, None, None)
    assert not (tmp_path / "logs").exists()


def test_checkpoint_monitor_without_mode_is_an_error_when_the_name_does_not_say(tmp_path):
    with pytest.raises(ValueError, match=r"needs `mode`.*Received: monitor='custom', mode=None"):
        Checkpoint(tmp_path, monitor="custom")


@pytest.mark.parametrize("kwargs", [{"every_epochs": -1}, {"keep_last": 1.5}, {"mode": "up"}])
def test_checkpoint_bad_arguments_are_named(tmp_path, kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"Received: {name}="):
        Checkpoint(tmp_path, **kwargs)


def test_checkpoint_retention_keeps_last_n_and_ignores_temp_files(tmp_path, run_context, network):
    ckpt_dir = tmp_path / "checkpoints"
    ckpt_dir.mkdir()
    (ckpt_dir / ".tmp-123-epoch0001-step0000001.ckpt").write_bytes(b"half")  # a crash leftover
    (ckpt_dir / "mine.ckpt").write_bytes(b"user file")  # not ours: never deleted
    cb = Checkpoint(tmp_path, every_epochs=1, keep_last=2)
    drive(cb, run_context(train_network=network), epochs=5, steps=2)
    assert [s for s, _, _ in list_checkpoints(tmp_path)] == [8, 10]
    assert (ckpt_dir / "mine.ckpt").exists() and (ckpt_dir / ".tmp-123-epoch0001-step0000001.ckpt").exists()
    assert not [f for f in os.listdir(ckpt_dir) if f.startswith(".tmp-") and "123" not in f]
    index = rows_of(tmp_path / "checkpoints.csv")
    assert [int(r["step"]) for r in index] == [2, 4, 6, 8, 10]
    assert {r["kind"] for r in index} == {"last"}


def test_checkpoint_retention_is_rebuilt_from_disk_after_a_restart(tmp_path, run_context, network):
    drive(Checkpoint(tmp_path, keep_last=2), run_context(train_network=network), epochs=3, steps=2)
    drive(Checkpoint(tmp_path, keep_last=2, append=True), run_context(train_network=network),
          epochs=6, steps=2,
          initial_epoch=3)
    assert [s for s, _, _ in list_checkpoints(tmp_path)] == [10, 12]


def test_checkpoint_keeps_the_best_by_monitor(tmp_path, run_context, network):
    losses = {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.3}  # per epoch (one step each)
    out = lambda step: (Tensor(np.float32(losses[step])),)
    cb = Checkpoint(tmp_path, every_epochs=None, monitor="loss", mode="min", keep_best=1)
    drive(cb, run_context(train_network=network), epochs=4, steps=1, outputs=out)
    best = list_checkpoints(tmp_path, "best")
    assert [s for s, _, _ in best] == [2]
    assert [s for s, _, _ in list_checkpoints(tmp_path, "last")] == [4]  # the final save


def test_checkpoint_keep_best_after_a_restart_keeps_a_better_score(tmp_path, run_context,
                                                                   network):
    """A restarted Checkpoint ranks the best files it finds on disk the same way
    as while running: with scores 0.1 and 0.5 kept (keep_best=2, mode min), a new
    0.3 displaces 0.5."""
    first = {1: 0.1, 2: 0.5}
    drive(Checkpoint(tmp_path, every_epochs=None, monitor="loss", mode="min", keep_best=2),
          run_context(train_network=network), epochs=2, steps=1,
          outputs=lambda step: (Tensor(np.float32(first[step])),))
    assert [s for s, _, _ in list_checkpoints(tmp_path, "best")] == [1, 2]
    restarted = Checkpoint(tmp_path, every_epochs=None, monitor="loss", mode="min", keep_best=2,
                           steps_per_epoch=1, append=True)
    drive(restarted, run_context(train_network=network), epochs=3, steps=1, initial_epoch=2,
          outputs=lambda step: (Tensor(np.float32(0.3)),))
    assert [s for s, _, _ in list_checkpoints(tmp_path, "best")] == [1, 3]
    assert [score for score, _, _ in restarted.best] == pytest.approx([0.1, 0.3])


def test_checkpoint_files_carry_step_and_epoch(tmp_path, run_context, network):
    import mindspore as ms
    drive(Checkpoint(tmp_path), run_context(train_network=network), epochs=2, steps=3)
    step, epoch, path = list_checkpoints(tmp_path)[-1]
    saved = ms.load_checkpoint(path)
    assert (step, epoch) == (6, 2)
    assert int(saved["step"]) == 6 and int(saved["epoch"]) == 2
    assert os.path.basename(path) == "epoch0002-step0000006.ckpt"


def test_timer_leaves_the_first_step_out_of_steps_per_s(run_context, monkeypatch):
    from mindexp.callbacks import Timer
    import mindexp.callbacks.timer as timer_module
    clock = iter([0.0, 5.0, 5.5, 6.0, 6.5, 7.0])  # begin, 4 step ends (first = compile), end
    monkeypatch.setattr(timer_module.time, "monotonic", lambda: next(clock))
    timer, ctx = Timer(), run_context()
    timer.on_train_begin(ctx)
    for _ in range(4):
        timer.on_train_step_end(ctx)
    timer.on_train_end(ctx)
    assert timer.steps == 4 and timer.steps_per_s == pytest.approx(3 / 1.5)
    assert timer.train_time_s == pytest.approx(7.0)


def test_early_stopping_stops_after_patience_epochs_without_improvement(run_context):
    from mindexp.callbacks import EarlyStopping
    losses = {1: 1.0, 2: 0.5, 3: 0.6, 4: 0.55, 5: 0.7, 6: 0.1}  # per epoch (one step each)
    cb, ctx = EarlyStopping(patience=3), run_context(train_network=None)
    drive(cb, ctx, epochs=6, steps=1, outputs=lambda step: (Tensor(np.float32(losses[step])),))
    assert ctx.get_stop_requested() and cb.stopped_epoch == 5 and cb.best == 0.5
    assert "did not improve on 0.5 for 3 epochs" in cb.stop_reason


def test_early_stopping_on_a_metric_whose_name_does_not_say_needs_a_mode():
    from mindexp.callbacks import EarlyStopping
    with pytest.raises(ValueError, match=r"needs `mode`.*Received: monitor='eval_custom', mode=None"):
        EarlyStopping(monitor="eval_custom")


@pytest.mark.parametrize("data", [
    np.random.default_rng(0).normal(0.0, 0.05, 65_536),        # weights: float32 sums
    1000.0 + np.random.default_rng(1).normal(0.0, 0.01, 4096),  # spread << mean: two-pass
    np.random.default_rng(2).normal(3.0, 1.0, (1 << 20) + 1),   # above FLOAT32_SUM_MAX
], ids=["weights", "spread-small-against-mean", "over-float32-limit"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_parameter_statistics_match_float64_numpy(data, dtype, tmp_path, run_context):
    raw = data.astype(dtype)
    exact = raw.astype(np.float64)
    param = Parameter(Tensor(raw), name="p")
    drive(ParameterTracker(tmp_path), run_context(train_network=None, optimizer=nn.SGD([param], 0.1)),
          1, 1)
    got = {r["param"]: float(r["value"]) for r in rows_of(tmp_path / "params.csv")}
    assert got == pytest.approx({"p:norm": np.linalg.norm(exact), "p:mean": exact.mean(),
                                 "p:std": exact.std(), "p:min": exact.min(),
                                 "p:max": exact.max()}, rel=1e-6)


def test_epoch_end_does_not_flush_before_flush_seconds_but_checkpoint_does(tmp_path, run_context,
                                                                           network):
    """One step per epoch must not mean one disk write per step; the logs
    still reach the disk before any checkpoint, so resume never loses rows."""
    monitor = LossMonitor(tmp_path)
    ctx = run_context(train_network=network, optimizer=nn.SGD(network.trainable_params(), 0.1))
    p = ctx.original_args()
    p.batch_num, p.cur_step_num, p.cur_epoch_num = 1, 0, 0
    other = LossMonitor(tmp_path / "other")   # not given to the Checkpoint: left alone
    p.list_callback = [monitor, other]
    monitor.on_train_begin(ctx)
    other.on_train_begin(ctx)
    for epoch in (1, 2, 3):
        p.cur_epoch_num = p.cur_step_num = epoch
        p.net_outputs = (Tensor(np.float32(1.0)),)
        for cb in (monitor, other):
            cb.on_train_step_end(ctx)
            cb.on_train_epoch_end(ctx)
    assert not (tmp_path / "loss.csv").exists()           # buffered: < flush_seconds old
    ckpt = Checkpoint(tmp_path, every_epochs=1, min_interval_s=0, flush=[monitor])
    ckpt.on_train_begin(ctx)
    ckpt.on_train_epoch_end(ctx)
    assert [r["step"] for r in rows_of(tmp_path / "loss.csv")] == ["1", "2", "3"]
    assert not (tmp_path / "other" / "loss.csv").exists()  # flushed only what it was given
    other.close()
    p.cur_epoch_num = p.cur_step_num = 4
    monitor.on_train_step_end(ctx)
    assert len(rows_of(tmp_path / "loss.csv")) == 3
    monitor._log.flush_seconds = 0.0                       # now due: the epoch end writes it
    monitor.on_train_epoch_end(ctx)
    assert len(rows_of(tmp_path / "loss.csv")) == 4
    monitor.on_train_end(ctx)
    ckpt.on_train_end(ctx)


def test_checkpoint_flush_must_list_objects_that_flush(tmp_path):
    with pytest.raises(ValueError, match=r"`flush` must list objects with a flush\(\) method.*"
                                         r"Received: flush=\[42\]"):
        Checkpoint(tmp_path, flush=[LossMonitor(tmp_path), 42])


def test_steps_per_epoch_continues_the_count_over_the_rest_of_an_interrupted_epoch(
        tmp_path, run_context, network):
    """A resume at step 6 of 4-step epochs trains the rest of epoch 2 (2 batches,
    initial_epoch=1) then epoch 3 as a second Model.train: the steps continue."""
    opt = nn.SGD(network.trainable_params(), 0.1)
    monitor = LossMonitor(tmp_path, steps_per_epoch=4)
    ckpt = Checkpoint(tmp_path, every_steps=1, steps_per_epoch=4, flush=[monitor])
    for epochs, steps, initial_epoch in ((2, 2, 1), (3, 4, 2)):   # the rest of epoch 2, epoch 3
        ctx = run_context(train_network=network, optimizer=opt)
        for cb in (monitor, ckpt):
            drive(cb, ctx, epochs=epochs, steps=steps, initial_epoch=initial_epoch)
    rows = rows_of(tmp_path / "loss.csv")
    assert [(r["step"], r["epoch"]) for r in rows] == [
        ("7", "2"), ("8", "2"), ("9", "3"), ("10", "3"), ("11", "3"), ("12", "3")]
    assert [s for s, _, _ in list_checkpoints(tmp_path)][-1] == 12


def test_loss_monitor_logs_the_learning_rate_it_is_given_not_the_optimizers(
        tmp_path, run_context, network):
    opt = nn.SGD([network.w], learning_rate=0.5)
    drive(LossMonitor(tmp_path, lr=[0.1, 0.2]), run_context(train_network=None, optimizer=opt), 1, 3)
    lrs = [float(r["lr"]) for r in rows_of(tmp_path / "loss.csv")]
    assert lrs == [0.1, 0.2, 0.2]   # the last value holds after the list's end


@pytest.mark.parametrize("lr", ["fast", [], [0.1, "x"], True])
def test_loss_monitor_rejects_a_learning_rate_that_is_not_numbers(tmp_path, lr):
    with pytest.raises(ValueError, match=r"`lr` must be None, a number or a non-empty sequence"):
        LossMonitor(tmp_path, lr=lr)


class SizedParams(nn.Cell):
    """One parameter of each kind the tracker writes differently: a scalar,
    element by element, statistics kept raw until written, statistics at the step."""

    def __init__(self):
        super().__init__()
        self.s = Parameter(Tensor(np.float32(0.0)), name="s")
        self.e = Parameter(Tensor(np.zeros(3, np.float32)), name="e")
        self.m = Parameter(Tensor(np.zeros(500, np.float32)), name="m")
        self.l = Parameter(Tensor(np.zeros(5000, np.float32)), name="l")

    def construct(self, x):
        return x


def _values_at(step, size):
    return (np.arange(size, dtype=np.float32) * 0.5 + step * 10.0).astype(np.float32)


def test_parameter_tracker_writes_each_steps_own_values_whatever_the_block(tmp_path, run_context):
    """Steps are kept and written in blocks: every row must still carry the
    value its parameter had at that step (in place or by set_data), and a
    flush (Checkpoint's, before a save) must write the steps kept so far."""
    net = SizedParams()
    params = net.trainable_params()
    tracker = ParameterTracker(tmp_path)
    ctx = run_context(train_network=net, optimizer=nn.SGD(params, 0.1), batch_num=6)
    p = ctx.original_args()
    tracker.on_train_begin(ctx)
    for step in range(1, 7):
        for param in params:
            values = _values_at(step, int(param.size)).reshape(param.shape)
            if step % 2:
                param.asnumpy()[...] = values        # in place, as a train step writes
            else:
                param.set_data(Tensor(values))       # new memory
        p.cur_step_num = step
        p.net_outputs = (Tensor(np.float32(1.0)),)
        tracker.on_train_step_end(ctx)
        if step == 3:
            tracker.flush()
            assert {int(r["step"]) for r in rows_of(tmp_path / "params.csv")} == {1, 2, 3}
    tracker.on_train_end(ctx)

    rows = rows_of(tmp_path / "params.csv")
    assert len(rows) == 6 * (1 + 3 + 5 + 5)           # each step's rows once
    got = {(int(r["step"]), r["param"]): float(r["value"]) for r in rows}
    for step in range(1, 7):
        assert got[(step, "s")] == 10.0 * step
        assert [got[(step, f"e[{i}]")] for i in range(3)] == list(_values_at(step, 3))
        for name, size in (("m", 500), ("l", 5000)):
            x = _values_at(step, size).astype(np.float64)
            assert [got[(step, f"{name}:{stat}")] for stat in ("norm", "mean", "std", "min", "max")] \
                == pytest.approx([np.linalg.norm(x), x.mean(), x.std(), x.min(), x.max()], rel=1e-6)


def test_parameter_tracker_rows_do_not_depend_on_where_a_block_starts(tmp_path, run_context):
    """A resumed run starts a new block mid-way: its rows must equal those of
    a run that kept the steps together (bitwise: a resume is compared so)."""
    texts = []
    for blocks in ((8,), (3, 5)):
        net = SizedParams()
        params = net.trainable_params()
        out = tmp_path / f"run{len(blocks)}"
        step = 0
        for n in blocks:
            tracker = ParameterTracker(out, append=True)  # the second block continues
            ctx = run_context(train_network=net, optimizer=nn.SGD(params, 0.1), batch_num=8)
            p = ctx.original_args()
            tracker.on_train_begin(ctx)
            for _ in range(n):
                step += 1
                rng = np.random.default_rng(step)
                for param in params:
                    param.set_data(Tensor(rng.normal(0.3, 0.05, param.shape).astype(np.float32)))
                p.cur_step_num = step
                p.net_outputs = (Tensor(np.float32(1.0)),)
                tracker.on_train_step_end(ctx)
            tracker.on_train_end(ctx)
        texts.append((out / "params.csv").read_text())
    assert texts[0] == texts[1]


def test_host_views_copy_once_per_call_where_asnumpy_copies():
    """On a device where asnumpy() hands back a copy, no view can be kept:
    each call reads every parameter once (it used to read each twice, to
    check for a view, on every step) and returns its current values."""
    from mindexp.callbacks._mindspore import HostViews

    class Copying:   # a Parameter whose asnumpy() copies, as off the CPU
        def __init__(self, value):
            self.value, self.reads = np.float32(value), 0

        def asnumpy(self):
            self.reads += 1
            return np.array([self.value])

        def data_ptr(self):
            return 1

    params = [Copying(1.0), Copying(2.0)]
    views = HostViews(params)
    assert [a.tolist() for a in views.arrays()] == [[1.0], [2.0]]
    reads = [p.reads for p in params]
    params[0].value = np.float32(5.0)
    assert [a.tolist() for a in views.arrays()] == [[5.0], [2.0]]
    assert [p.reads for p in params] == [n + 1 for n in reads]


def test_early_stopping_counts_evaluations_when_epochs_go_without_one(run_context):
    """eval_every=3: epochs 3, 6, 9 are evaluated; patience 2 runs out at epoch 9,
    after two evaluations (six epochs), not 'for 2 epochs'."""
    from mindexp.callbacks import EarlyStopping
    cb = EarlyStopping("eval_loss", patience=2)
    values = {3: 0.5, 6: 0.6, 9: 0.7}
    for epoch in range(1, 10):
        results = {"loss": values[epoch]} if epoch in values else None
        ctx = run_context(cur_epoch_num=epoch, **({"eval_results": results} if results else {}))
        cb.on_train_epoch_end(ctx)
    assert cb.stopped_epoch == 9
    assert cb.stop_reason == "eval_loss did not improve on 0.5 (epoch 3) in 2 evaluations (epochs 6, 9)"


def test_early_stopping_says_when_the_value_improved_by_less_than_min_delta(run_context):
    from mindexp.callbacks import EarlyStopping
    losses = {1: 1.0, 2: 0.95, 3: 0.92}  # better each epoch, never by 0.1
    cb, ctx = EarlyStopping(patience=2, min_delta=0.1), run_context(train_network=None)
    drive(cb, ctx, epochs=3, steps=1, outputs=lambda step: (Tensor(np.float32(losses[step])),))
    assert cb.stopped_epoch == 3
    assert cb.stop_reason == "loss improved by less than min_delta=0.1 on 1 for 2 epochs"


class Spread(nn.Cell):
    """Parameters of 17, 300 and 1,024 elements around 0 (std far above |mean|),
    as trained weights are: their statistics come from the block path (at most
    1,024 elements, summarised per block of steps), not its float64 fallback."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(7)
        for size in (17, 300, 1024):
            values = (rng.standard_normal(size) * 0.05).astype(np.float32)
            setattr(self, f"p{size}", Parameter(Tensor(values), name=f"p{size}"))

    def construct(self, x):
        return x


def test_parameter_tracker_std_of_17_to_1024_elements_is_the_population_std(
        tmp_path, run_context):
    """params.csv's ``name:std`` is numpy's std with ddof=0 (n, not n - 1: 3 % apart at 17)."""
    net = Spread()
    drive(ParameterTracker(tmp_path), run_context(train_network=net,
                                                   optimizer=nn.SGD(net.trainable_params())), 1, 2)
    values = {(r["step"], r["param"]): float(r["value"]) for r in rows_of(tmp_path / "params.csv")}
    for p in net.trainable_params():
        x = p.asnumpy().astype(np.float64)
        for step in ("1", "2"):
            assert values[(step, f"{p.name}:std")] == pytest.approx(x.std(ddof=0), rel=1e-6)
            assert values[(step, f"{p.name}:mean")] == pytest.approx(x.mean(), rel=1e-5, abs=1e-9)
            assert values[(step, f"{p.name}:norm")] == pytest.approx(np.linalg.norm(x), rel=1e-6)
