"""In-graph parameter statistics (TrainStep(param_stats=...)) equal the host's."""
import csv

import numpy as np
import pytest
from mindspore import Model, Tensor, nn
from mindspore import dataset as ds
from mindspore.common.initializer import Normal

from mindexp.callbacks import ParameterTracker, TrainStep


class _Net(nn.Cell):
    """Parameters of 48 (kept raw), 3,072, 4,096 and 1,100 elements (d.bias, e.weight); the 1,100
    bias sits at 100 with a spread of 1e-2 (a mean far above its spread)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Dense(1, 48)
        self.b = nn.Dense(48, 64)
        self.c = nn.Dense(64, 64)
        self.d = nn.Dense(64, 1100, weight_init=Normal(0.01))
        self.d.bias.set_data(Tensor((100 + np.random.default_rng(1).normal(0, 1e-2, 1100))
                                    .astype(np.float32)))
        self.e = nn.Dense(1100, 1, weight_init=Normal(1e-4))
        self.relu = nn.ReLU()

    def construct(self, x):
        h = self.relu(self.b(self.relu(self.a(x))))
        return self.e(self.d(self.relu(self.c(h))))


def _rows(path):
    with open(path, newline="") as f:
        return [(int(r["step"]), r["param"], float(r["value"])) for r in csv.DictReader(f)]


def _data(steps=6):
    x = np.random.default_rng(0).normal(size=(steps * 8, 1)).astype(np.float32)
    return ds.NumpySlicesDataset({"x": x, "y": np.sin(x)}, shuffle=False).batch(8)


@pytest.fixture(scope="module")
def both(ms_graph, tmp_path_factory):
    """One Model.train, a graph-statistics and a host-statistics tracker side by side."""
    out = tmp_path_factory.mktemp("graph-stats")
    net = _Net()
    cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 1e-2),
                     param_stats=True)
    graph = ParameterTracker(out / "graph", stats="graph")
    host = ParameterTracker(out / "host", stats="host")
    Model(cell).train(1, _data(), callbacks=[graph, host], dataset_sink_mode=False)
    return cell, graph, host, _rows(out / "graph" / "params.csv"), _rows(out / "host" / "params.csv")


@pytest.mark.slow
def test_in_graph_statistics_equal_the_hosts_through_a_real_model_train(both):
    cell, graph, host, graph_rows, host_rows = both
    assert cell.stats_names == ("b.weight", "c.weight", "d.weight", "d.bias", "e.weight")
    assert (graph.stats_source, host.stats_source) == ("graph", "host")
    # the same rows in the same order: steps, parameters and statistics
    assert [r[:2] for r in graph_rows] == [r[:2] for r in host_rows]
    assert {r[0] for r in graph_rows} == set(range(1, 7))
    values = {(s, p): v for s, p, v in host_rows}
    sizes = {name: p.size for name, p in cell.network._backbone.parameters_and_names()}
    for step, param, value in graph_rows:
        want = values[step, param]
        name, _, stat = param.partition(":")
        if stat == "mean":
            # a float32 sum of values of both signs errs by a fraction of their scale (the
            # root mean square), not of the mean: b.weight's mean of 4e-5 from values of
            # +-0.1 differed by 3e-5 relative in one run (1.2e-9, 1e-8 of the scale)
            scale = values[step, f"{name}:norm"] / np.sqrt(sizes[name])
            assert abs(value - want) <= 2e-6 * scale + 2e-5 * abs(want), (step, param)
            continue
        tol = 1e-6 if param.endswith((":min", ":max")) or "[" in param else 2e-5
        assert value == pytest.approx(want, rel=tol, abs=1e-9), (step, param)
    std = [v for s, p, v in graph_rows if p == "d.bias:std"]
    assert all(5e-3 < v < 2e-2 for v in std)   # the spread survives a mean 10^4 times larger


@pytest.mark.slow
def test_the_statistics_are_the_parameters_after_the_update(both):
    cell, _, _, graph_rows, _ = both
    last = max(s for s, _, _ in graph_rows)
    logged = {p: v for s, p, v in graph_rows if s == last}
    weight = cell.network._backbone.d.weight.asnumpy().astype(np.float64)
    assert logged["d.weight:max"] == pytest.approx(weight.max(), rel=1e-6)
    assert logged["d.weight:norm"] == pytest.approx(np.sqrt((weight ** 2).sum()), rel=1e-5)


def test_graph_statistics_need_a_train_step_that_returns_them(ms_graph, tmp_path):
    net = nn.Dense(48, 48)
    data = ds.NumpySlicesDataset({"x": np.ones((8, 48), np.float32),
                                  "y": np.ones((8, 48), np.float32)}).batch(8)
    tracker = ParameterTracker(tmp_path, stats="graph")
    with pytest.raises(ValueError, match=r"stats='graph'.*\['weight'\].*param_stats=True"):
        Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1)).train(
            1, data, callbacks=[tracker], dataset_sink_mode=False)


def test_auto_reads_the_host_without_them_and_bad_choices_are_refused(tmp_path):
    assert ParameterTracker(tmp_path).stats == "auto"
    with pytest.raises(ValueError, match=r"`stats` must be one of auto, host, graph"):
        ParameterTracker(tmp_path, stats="gpu")
    net = nn.Dense(1, 1)
    with pytest.raises(ValueError, match=r"`param_stats` must be True, False or"):
        TrainStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1),
                  param_stats=3)


@pytest.mark.slow
def test_a_runs_param_stats_config_puts_them_in_the_graph_and_run_json_says_so(tmp_path):
    """param_stats=graph on the CPU: run.json says so, and the last step's
    statistics are those of the parameter saved at the end."""
    import json
    import mindspore as ms
    from mindexp.experiments.mlp_sine import MlpSine
    run = MlpSine(hidden=48, layers=2, epochs=1, samples=64 * 3, batch_size=64,
                  param_stats="graph", eval_samples=16).run(out=str(tmp_path))
    folder = tmp_path / "mlp_sine" / run.run_id
    assert json.loads((folder / "run.json").read_text())["param_stats"] == "graph"
    logged = {p: v for s, p, v in _rows(folder / "params.csv") if s == 3}
    saved = ms.load_checkpoint(str(sorted((folder / "checkpoints").glob("*.ckpt"))[-1]))
    weight = saved["body.2.weight"].asnumpy().astype(np.float64)   # 48 x 48: in the graph
    assert logged["body.2.weight:std"] == pytest.approx(weight.std(), rel=2e-5)
    assert logged["body.2.weight:min"] == pytest.approx(weight.min(), rel=1e-6)


def test_param_stats_out_of_its_choices_is_a_config_error():
    from mindexp import ConfigError
    from mindexp.experiments.mlp_sine import MlpSine
    with pytest.raises(ConfigError, match=r"param_stats.*auto.*host.*graph"):
        MlpSine(param_stats="gpu")
