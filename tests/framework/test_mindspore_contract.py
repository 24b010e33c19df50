"""One test per reliance on internal or undocumented MindSpore behaviour
(callbacks/_mindspore.py and framework/_mindspore.py, checked on 2.10).

When an upgrade breaks one of these, the adapter function named in the
test's docstring is the one place to change.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import mindspore as ms
import mindspore.dataset as ds
from mindspore import Tensor, nn
from mindspore.train import MAE, Callback, Model

from mindexp import _mindspore as fw
from mindexp.callbacks import _mindspore as cbms
from mindexp.callbacks._common import step_info

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(-1, 1)


def dataset():
    return ds.GeneratorDataset(list(zip(X, 2 * X)), ["x", "y"], shuffle=False).batch(4)


class Recorder(Callback):
    """What the adapter reads, at each hook of a real Model.fit."""

    def __init__(self):
        super().__init__()
        self.begin_names, self.steps, self.epoch_results, self.cb_type = None, [], [], None
        self.eval_network = None
        self.optimizer = None

    def on_train_begin(self, run_context):
        cb_params = run_context.original_args()
        self.cb_type = type(cb_params)
        metric_fns = cbms.calling_model_metrics()
        self.begin_names = None if metric_fns is None else list(metric_fns)
        self.eval_network = cbms.calling_model_eval_network()
        self.optimizer = cbms.optimizer_of(cb_params)

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        self.steps.append((cbms.step_counters(cb_params), step_info(cb_params)[0]))

    def on_train_epoch_end(self, run_context):
        self.epoch_results.append(cbms.eval_results(run_context.original_args()))


@pytest.fixture(scope="module")
def fitted(ms_graph):
    """Model.fit over epochs 2-3 (initial_epoch=1) of a 2-batch dataset, with a metric."""
    net = nn.Dense(1, 1)
    opt = nn.SGD(net.trainable_params(), 0.01)
    model = Model(net, nn.MSELoss(), opt, metrics={"mae": MAE()})
    rec = Recorder()
    model.fit(3, dataset(), dataset(), callbacks=[rec], initial_epoch=1)
    return rec, opt


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_cb_params_is_a_dict_with_the_step_counters(fitted):
    """callbacks/_mindspore.step_counters reads cb_params as a dict's items."""
    rec, _ = fitted
    assert issubclass(rec.cb_type, dict)
    assert all(isinstance(c, tuple) and len(c) == 3 for c, _ in rec.steps)


def test_cur_step_num_restarts_and_cur_epoch_num_is_absolute_after_initial_epoch(fitted):
    """callbacks/_common.step_info (through step_counters): the global step is
    rebuilt from batch_num because cur_step_num restarts at initial_epoch."""
    rec, _ = fitted
    assert [(int(b), int(s), int(e)) for (b, s, e), _ in rec.steps] == [
        (2, 1, 2), (2, 2, 2), (2, 3, 3), (2, 4, 3)]
    assert [g for _, g in rec.steps] == [3, 4, 5, 6]


def test_model_fit_leaves_eval_results_in_cb_params(fitted):
    """callbacks/_mindspore.eval_results (without MindSpore's own eval_loss)."""
    rec, _ = fitted
    assert [sorted(r) for r in rec.epoch_results] == [["mae"]] * 2


def test_the_calling_models_metrics_are_found_up_the_stack(fitted):
    """callbacks/_mindspore.calling_model_metrics (Model._metric_fns)."""
    rec, _ = fitted
    assert rec.begin_names == ["mae"]


def test_the_calling_models_eval_network_is_found_up_the_stack(fitted):
    """callbacks/_mindspore.calling_model_eval_network (Model._eval_network):
    Model(net, loss_fn, opt, metrics=...) evaluates with nn.WithEvalCell."""
    rec, _ = fitted
    assert type(rec.eval_network) is nn.WithEvalCell


class LastEval(Callback):
    """MindSpore's own eval_loss and the weights it was computed with."""

    def __init__(self, net):
        super().__init__()
        self.net, self.seen = net, []

    def on_train_epoch_end(self, run_context):
        results = run_context.original_args()["eval_results"]
        self.seen.append((float(results[cbms.MINDSPORE_EVAL_LOSS]),
                          self.net.weight.asnumpy().copy(), self.net.bias.asnumpy().copy()))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_model_fits_own_eval_loss_is_the_last_batchs_loss(ms_graph):
    """callbacks/_mindspore.MINDSPORE_EVAL_LOSS: Model.fit's eval_loss is the
    loss of the LAST eval batch (2.10 creates its loss metric inside the batch
    loop), so mindexp never reads it and computes the eval set's loss itself
    (callbacks/eval_loss.EvalLoss). The day this fails, MindSpore fixed it."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(-1, 1)
    y = np.where(np.arange(8)[:, None] < 6, 1.0, -3.0).astype(np.float32) * x
    net = nn.Dense(1, 1)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01), metrics={"mae": MAE()})
    seen = LastEval(net)
    eval_ds = ds.GeneratorDataset(list(zip(x, y)), ["x", "y"], shuffle=False).batch(3)  # 3, 3, 2
    model.fit(1, dataset(), eval_ds, callbacks=[seen])
    (reported, w, b), = seen.seen
    err = (x @ w.T + b - y).astype(np.float64) ** 2
    assert reported == pytest.approx(err[6:].mean(), rel=1e-5)        # the last batch alone
    assert reported != pytest.approx(err.mean(), rel=1e-2)            # not the eval set's


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_cb_params_carries_the_optimizer_or_the_train_cell_does(fitted, ms_graph):
    """callbacks/_mindspore.optimizer_of."""
    rec, opt = fitted
    assert rec.optimizer is opt
    net = nn.Dense(1, 1)
    opt2 = nn.SGD(net.trainable_params(), 0.01)
    cell_rec = Recorder()
    Model(nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt2)).train(
        1, dataset(), callbacks=[cell_rec])
    assert cell_rec.optimizer is opt2


@pytest.mark.parametrize("lr, kind", [
    (0.1, "scalar"), ([0.1, 0.2, 0.3], "schedule"),
    (nn.ExponentialDecayLR(0.1, 0.5, 1), "schedule")], ids=["float", "list", "schedule"])
def test_the_optimizers_learning_rate_attribute(lr, kind):
    """callbacks/_mindspore.learning_rate_of and schedule_at (a per-step list
    is a schedule cell in 2.10, not a Parameter table)."""
    net = nn.Dense(1, 1)
    found, value = cbms.learning_rate_of(nn.SGD(net.trainable_params(), lr))
    assert found == kind
    if kind == "scalar":
        assert value.asnumpy().item() == pytest.approx(0.1)
    elif isinstance(lr, list):
        assert [float(cbms.schedule_at(value, s).asnumpy()) for s in (1, 2, 3)] == \
            pytest.approx([0.1, 0.2, 0.3])
    else:
        assert float(cbms.schedule_at(value, 2).asnumpy()) == pytest.approx(0.05)


def test_group_learning_rates_are_a_parameter_tuple_of_the_first_group_first():
    """callbacks/_mindspore.learning_rate_of (group learning rates)."""
    net = nn.Dense(1, 1)
    groups = [{"params": [net.weight], "lr": 0.3}, {"params": [net.bias], "lr": 0.7}]
    kind, value = cbms.learning_rate_of(nn.SGD(groups, 0.1))
    assert kind == "scalar" and value.asnumpy().item() == pytest.approx(0.3)


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_a_bfloat16_tensor_is_read_through_asnumpy_not_item():
    """callbacks/_mindspore.ITEM_DTYPES leaves bfloat16 out (the code's note: its
    item() crashed the process on 2.10); the asnumpy path reads it. A host
    Tensor's item() works here (checked in a child process, which a crash
    would kill), so the crash needs some other case: the exclusion stays."""
    from mindexp.callbacks._common import to_float
    t = Tensor(np.float32(1.5)).astype(ms.bfloat16)
    assert ms.bfloat16 not in cbms.ITEM_DTYPES and not cbms.item_readable(t)
    assert to_float(t) == 1.5
    code = ("import mindspore as ms, numpy as np\n"
            "print(float(ms.Tensor(np.float32(1.5)).astype(ms.bfloat16).item()))\n")
    import forkserver  # a child forked from a server that imported MindSpore, never ran it
    from conftest import cli_env
    done = forkserver.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=cli_env())
    assert done.returncode == 0 and done.stdout.strip() == "1.5"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_parameters_host_view_is_its_memory_updated_in_place_by_each_step(ms_graph):
    """callbacks/_mindspore.HostViews: on CPU ``asnumpy()`` of a Parameter is a
    view of its memory (the same address each call), which a graph train
    step updates in place; once an output is read the view holds the step's
    values, and ``set_data`` gives the Parameter new memory (a new data_ptr)."""
    net = nn.Dense(1, 1)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                               nn.SGD(net.trainable_params(), 0.1))
    x, y = Tensor(X), Tensor(2 * X)
    views = cbms.HostViews(net.trainable_params())
    first = [a.copy() for a in views.arrays()]
    assert views.views is not None                     # live: kept and reused
    seen = []
    for _ in range(3):
        out = step(x, y)
        seen.append([a.copy() for a in views.arrays(out)])
        assert [a.reshape(-1).tolist() for a in seen[-1]] == \
            [p.asnumpy().reshape(-1).tolist() for p in net.trainable_params()]
    assert seen[0][0] != first[0] and seen[1][0] != seen[0][0]
    ptr = net.weight.data_ptr()
    net.weight.set_data(Tensor(np.full((1, 1), 5.0, np.float32)))
    assert net.weight.data_ptr() != ptr and views.arrays()[0].tolist() == [5.0]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_train_network_a_callback_sees_is_the_train_cell_given_to_model(ms_graph):
    """callbacks/_mindspore.train_network_of: ``cb_params.train_network`` is the
    train cell given to ``Model(train_cell)`` itself (ParameterTracker reads
    TrainStep's ``stats_index`` from it), and a TrainOneStepCell for
    ``Model(net, loss_fn, opt)``."""
    from mindexp.callbacks import TrainStep
    seen = []

    class Seen(Callback):
        def on_train_begin(self, run_context):
            seen.append(cbms.train_network_of(run_context.original_args()))
    net = nn.Dense(1, 1)
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    Model(cell).train(1, dataset(), callbacks=[Seen()], dataset_sink_mode=False)
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
        1, dataset(), callbacks=[Seen()], dataset_sink_mode=False)
    assert seen[0] is cell and isinstance(seen[1], nn.TrainOneStepCell)


def test_get_rank_answers_0_outside_a_communication_group():
    """callbacks/_mindspore.rank_id: in 2.10 get_rank() returns 0 before init()
    instead of raising, so the environment fallback is only for versions that
    raise (an msrun worker calls init() before training)."""
    from mindspore.communication import get_rank
    assert get_rank() == 0 and cbms.rank_id() == 0


def test_callback_forwards_each_train_hook_to_its_deprecated_name():
    """callbacks/_quiet_callback.QuietCallback overrides the four step/epoch hooks
    because Callback forwards them to step_begin/step_end/... (one more call)."""
    seen = []

    class Old(Callback):
        def step_end(self, run_context):
            seen.append("step_end")

        def epoch_end(self, run_context):
            seen.append("epoch_end")
    Old().on_train_step_end(None)
    Old().on_train_epoch_end(None)
    assert seen == ["step_end", "epoch_end"]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_model_fit_enters_the_callbacks_again_for_each_evaluation(ms_graph):
    """callbacks/_quiet_callback.QuietCallback counts its context: Model.fit
    enters and exits every callback once more per evaluation."""
    events = []

    class Ctx(Callback):
        def __enter__(self):
            events.append("enter")
            return self

        def __exit__(self, *exc):
            events.append("exit")

    net = nn.Dense(1, 1)
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01), metrics={"mae": MAE()}).fit(
        2, dataset(), dataset(), callbacks=[Ctx()])
    assert events.count("enter") == 3 and events.count("exit") == 3   # training + 2 evaluations
    assert events[:2] == ["enter", "enter"] and events[-1] == "exit"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_model_fit_evaluations_leave_out_callbacks_named_like_mindsporess_own(ms_graph):
    """callbacks/_mindspore.runs_in_evaluation: Model.fit hands its evaluations
    every callback but those whose class name is in mindspore.train.callback's
    __all__ (mindexp's LossMonitor and EarlyStopping among them): CallbackList
    hands them the same ones."""
    calls = {}

    class Evals(Callback):
        def on_eval_end(self, run_context):
            calls[type(self).__name__] = calls.get(type(self).__name__, 0) + 1

    named = type("LossMonitor", (Evals,), {})
    net = nn.Dense(1, 1)
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01), metrics={"mae": MAE()}).fit(
        2, dataset(), dataset(), callbacks=[Evals(), named()])
    assert calls == {"Evals": 2}
    assert cbms.runs_in_evaluation(Evals()) and not cbms.runs_in_evaluation(named())


def test_metric_convert_data_turns_tensors_into_numpy():
    """framework/_mindspore.metric_input (private Metric._convert_data)."""
    out = fw.metric_input(MAE(), Tensor(np.array([[1.0], [2.0]], np.float32)))
    assert isinstance(out, np.ndarray) and out.tolist() == [[1.0], [2.0]]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_model_train_iterates_through_create_tuple_iterator_with_default_columns(ms_graph):
    """framework/_mindspore.tuple_iterator_dataset: Model.train asks for the
    default columns, so the override serves every batch."""
    calls = []

    def make_iterator(source, num_epochs, output_numpy):
        calls.append((num_epochs, output_numpy))
        return iter_batches(source)

    def iter_batches(source):
        for x, y in source:
            yield [Tensor(x), Tensor(y)]

    class Source:
        def __init__(self):
            self.batches = [(X[:4], 2 * X[:4]), (X[4:], 2 * X[4:])]

        def __getitem__(self, i):
            return self.batches[i]

        def __len__(self):
            return len(self.batches)

        def __iter__(self):
            return iter(self.batches)

    cls = fw.tuple_iterator_dataset(make_iterator)
    data = cls(Source(), column_names=["x", "y"], shuffle=False)
    net = nn.Dense(1, 1)
    seen = []

    class Count(Callback):
        def on_train_step_end(self, run_context):
            seen.append(1)
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
        1, data, callbacks=[Count()], dataset_sink_mode=False)
    assert calls and len(seen) == 2


def test_the_global_context_keeps_graph_kernel_across_runs(ms_graph):
    """framework/_mindspore.reset_graph_kernel: set_context is process-wide."""
    ms.set_context(enable_graph_kernel=True)
    try:
        assert ms.get_context("enable_graph_kernel")
    finally:
        fw.reset_graph_kernel()
    assert not ms.get_context("enable_graph_kernel")


def test_msrun_sets_the_environment_variables_a_worker_is_recognized_by():
    """framework/_mindspore.under_msrun / env_rank (msrun's own source, 2.10)."""
    from mindspore.parallel.cluster.process_entity import _api
    with open(_api.__file__, encoding="utf-8") as f:
        source = f.read()
    for name in (fw.MSRUN_ROLE, fw.MSRUN_WORKER_NUM) + fw.MSRUN_RANK:
        assert f'os.environ["{name}"]' in source, name
    assert f'"{fw.MSRUN_WORKER_ROLE}"' in source
    env = {"MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2", "MS_NODE_ID": "1"}
    assert fw.under_msrun(env) and fw.env_rank(env) == 1 and fw.env_rank({}) == 0


def test_msrun_runs_the_command_as_its_scheduler_with_the_scheduler_role():
    """framework/_mindspore.msrun_scheduler / MSRUN_SCHEDULER_ADDRESS (msrun's source, 2.10)."""
    from mindspore.parallel.cluster.process_entity import _api
    with open(_api.__file__, encoding="utf-8") as f:
        source = f.read()
    assert f'os.environ["{fw.MSRUN_ROLE}"] = "{fw.MSRUN_SCHEDULER_ROLE}"' in source
    for name in fw.MSRUN_SCHEDULER_ADDRESS:
        assert f'os.environ["{name}"]' in source, name
    env = {"MS_ROLE": "MS_SCHED", "MS_WORKER_NUM": "2"}
    assert fw.msrun_scheduler(env) and not fw.under_msrun(env)
    assert not fw.msrun_scheduler({"MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2"})


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_amp_o1_rewrites_the_network_source_into_the_working_directory(tmp_path, ms_graph):
    """framework/_mindspore.mixed_precision runs it inside the run directory."""
    from mindexp.experiments._nets import MLP
    here = os.getcwd()
    fw.mixed_precision(MLP(1, 1, hidden=4), "O1", tmp_path)
    assert os.getcwd() == here
    assert (tmp_path / "rewritten_network").is_dir()  # MindSpore's own name for it


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_nn_adam_logs_a_fused_sparse_deprecation_that_the_builder_drops():
    """nn.Adam builds P.FusedSparseAdam, deprecated in 2.8 and logged once per
    process on MindSpore's logger; quiet_sparse_deprecation drops that one message."""
    code = ("import sys, numpy as np, mindspore as ms\n"
            "from mindspore import nn\n"
            "from mindexp import _mindspore as fw\n"
            "params = [ms.Parameter(ms.Tensor(np.ones(2, np.float32)), name='w')]\n"
            "if sys.argv[1] == 'quiet':\n"
            "    with fw.quiet_sparse_deprecation():\n"
            "        nn.Adam(params)\n"
            "from mindspore import log\n"
            "log.warning('another message still shows')\n"
            "nn.Adam(params)\n")
    outputs = {}
    for mode in ("loud", "quiet"):
        done = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "GLOG_v": "2"})
        assert done.returncode == 0, done.stderr
        outputs[mode] = done.stdout + done.stderr
    assert fw.SPARSE_DEPRECATION.search(outputs["loud"]), outputs["loud"]
    assert not fw.SPARSE_DEPRECATION.search(outputs["quiet"]), outputs["quiet"]
    assert "another message still shows" in outputs["quiet"]


def test_device_memory_is_reported_off_cpu_only_through_runtime_memory_allocated():
    """callbacks._mindspore.device_memory_reader: None on CPU (system.csv has no
    device column there); elsewhere mindspore.runtime.memory_allocated() in bytes."""
    import mindspore as ms
    from mindspore import runtime
    from mindexp.callbacks._mindspore import device_memory_reader
    assert callable(runtime.memory_allocated)
    if ms.get_context("device_target") == "CPU":
        assert device_memory_reader() is None
    else:
        assert device_memory_reader()() >= 0


def test_msrun_exports_each_workers_index_on_its_node_as_device_id():
    """callbacks/_mindspore.local_rank_id reads DEVICE_ID: msrun sets it to the
    local rank of each worker it starts (get_local_rank() is not supported on CPU)."""
    import inspect
    from mindspore.parallel.cluster.process_entity._api import _ProcessManager
    source = inspect.getsource(_ProcessManager._start_single_worker)
    assert 'os.environ["DEVICE_ID"] = str(local_rank)' in source


ALL_REDUCE = '''
import sys
import numpy as np
import mindspore as ms
from mindexp import _mindspore as fw
from mindexp.train.distributed import init_data_parallel
rank, size = init_data_parallel()
ms.set_context(mode=ms.GRAPH_MODE)  # a run's mode: the adapter runs PyNative, then restores it
total = fw.all_reduce_sum(np.array([rank + 1, 0.5], dtype=np.float32))
assert ms.get_context("mode") == ms.GRAPH_MODE
with open(f"{sys.argv[1]}/rank{rank}.txt", "w") as f:
    f.write(" ".join(map(str, total.tolist())))
'''


@pytest.mark.slow
def test_all_reduce_sums_over_msruns_workers_on_cpu(tmp_path):
    """framework/_mindspore.all_reduce_sum: ops.AllReduce run eagerly sums a
    float32 vector over two msrun workers on CPU (comm_func.all_reduce cannot)."""
    import msrun_launcher  # msrun's launcher forked (its workers are new interpreters)
    from conftest import cli_env
    from mindexp.train.distributed import free_port
    (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
    bin_dir = os.path.dirname(sys.executable)
    done = msrun_launcher.run(
        [os.path.join(bin_dir, "msrun"), "--worker_num=2", "--local_worker_num=2",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--join=True",
         f"--log_dir={tmp_path / 'logs'}", str(tmp_path / "all_reduce.py"), str(tmp_path)],
        env=cli_env(PATH=bin_dir + os.pathsep + os.environ["PATH"]), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "3.0 1.0"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_model_counts_steps_on_from_what_train_begin_left_in_cur_step_num(ms_graph):
    """callbacks/_mindspore.count_steps_from (the framework's RunSteps): MindSpore
    adds to cur_step_num from the value it holds after on_train_begin, and an
    evaluation of Model.fit puts it back; step_info then takes it as it is."""
    from mindspore.train import Callback

    class From(Callback):
        def on_train_begin(self, run_context):
            cbms.count_steps_from(run_context.original_args(), 12)

    net = nn.Dense(1, 1)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01), metrics={"mae": MAE()})
    rec = Recorder()
    model.fit(3, dataset(), dataset(), callbacks=[From(), rec], initial_epoch=1)
    assert [int(s) for (_, s, _), _ in rec.steps] == [13, 14, 15, 16]
    assert [g for _, g in rec.steps] == [13, 14, 15, 16]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_denormal_loaded_before_a_graphs_first_run_becomes_zero_and_after_it_stays(ms_graph):
    """MindSpore 2.10 on CPU flushes denormals (|x| < 1.18e-38 in float32) in a
    parameter's value when a graph first runs with it (the first copy to the
    device), not later: so a resumed run, which loads its checkpoint before its
    first step, holds 0 where the uninterrupted run held a denormal. Adam's
    beta1_power is the one that meets it (0.9 ** 830 ~ 6e-39); it changes no
    weight (1 - p is 1.0 in float32 once p < 3e-8). docs/training.md says so."""
    def adam_cell():
        net = nn.Dense(1, 1)
        opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
        return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt), opt
    denormal = np.float32(6e-45)
    assert 0 < denormal < np.finfo(np.float32).tiny
    x = Tensor(X)
    cell, opt = adam_cell()      # loaded before the first run: flushed by it
    opt.beta1_power.set_data(Tensor(denormal))
    cell(x, x)
    assert float(opt.beta1_power.asnumpy()) == 0.0
    cell, opt = adam_cell()      # set after a first run: kept (x 0.9, rounded to 4 steps of 1.4e-45)
    cell(x, x)
    opt.beta1_power.set_data(Tensor(denormal))
    cell(x, x)
    assert float(opt.beta1_power.asnumpy()) == float(denormal)
    assert np.float32(1) - np.float32(2.9e-8) == np.float32(1)   # why no weight changes


def test_a_pipeline_takes_one_consumer_and_a_deep_copy_another():
    """framework._mindspore.fresh_pipeline: run.batches batches one copy per epoch."""
    def samples():
        return ds.NumpySlicesDataset((np.arange(6, dtype=np.float32),), column_names=["x"],
                                     shuffle=False)

    def firsts(batched):
        return [int(b[0].asnumpy()[0]) for b in batched.create_tuple_iterator(num_epochs=1)]

    data = samples()
    data.batch(2)
    with pytest.raises(Exception, match="not a tree"):
        firsts(data.batch(3))
    data = samples()
    assert firsts(fw.fresh_pipeline(data).batch(2)) == [0, 2, 4]
    assert firsts(fw.fresh_pipeline(data).batch(3)) == [0, 3]
