"""A fitted input transform: fitted on the train split, saved with the run (npz, no
pickle), applied by predict, evaluate, Run.predictor() and export."""
import json
import os

import numpy as np
import pytest

SCALED = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment, Standardize


def features(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal([50.0, -3.0, 1000.0], [10.0, 0.1, 300.0], size=(n, 3)).astype(np.float32)
    return x


class Scaled(Experiment):
    """A linear model on features of very different scales, standardized."""
    name = "scaled"
    input_transform = Standardize()

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 2
        batch_size: int = 16
        lr: float = 0.05

    def source(self, split):
        x = features(128 if split == "train" else 32, 0 if split == "train" else 1)
        z = (x - [50.0, -3.0, 1000.0]) / [10.0, 0.1, 300.0]
        y = (z @ np.array([[1.0], [-2.0], [0.5]])).astype(np.float32)
        return x, y

    def network(self):
        return nn.Dense(3, 1)

    def metrics(self):
        return ["mse"]
'''


def run_dir_of(done):
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0].split(": ", 1)[1]


@pytest.mark.slow
def test_predict_evaluate_predictor_and_export_apply_the_fitted_standardization(cli, tmp_path):
    (tmp_path / "scaled.py").write_text(SCALED)
    run_dir = run_dir_of(cli("run", "scaled.py:Scaled", "--quiet"))
    from mindexp import Run
    import importlib.util
    spec = importlib.util.spec_from_file_location("scaled_copy", tmp_path / "scaled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    train_x = module.features(128, 0).astype(np.float64)
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)  # the train split's, independently
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        assert json.load(f)["input_transform"] == {"kind": "standardize", "column": "x",
                                                   "file": "input_transform.npz"}
    with np.load(os.path.join(run_dir, "input_transform.npz"), allow_pickle=False) as saved:
        np.testing.assert_allclose(saved["mean"], mean, rtol=1e-6)
        np.testing.assert_allclose(saved["std"], std, rtol=1e-6)
    raw = module.features(10, 7)
    np.save(tmp_path / "raw.npy", raw)
    params = {p.name: p.asnumpy() for p in Run(run_dir).network().trainable_params()}
    z = (raw.astype(np.float64) - mean) / std
    expected = z @ params["weight"].T.astype(np.float64) + params["bias"]
    done = cli("predict", run_dir, "--input", "raw.npy", "--output", "out.npy")
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(Run(run_dir).predictor()(raw), expected, rtol=1e-4, atol=1e-5)
    # evaluate reproduces the last epoch's eval row: it standardizes the eval split too
    from mindexp.use.evaluate import evaluate
    row = evaluate(run_dir, record=False)
    assert row["mse"] == pytest.approx(float(Run(run_dir).eval["mse"].iloc[-1]), rel=1e-5)
    from mindexp.use.export import export
    import mindspore as ms
    path = export(run_dir, batch_size=10)
    graph = ms.nn.GraphCell(ms.load(path))
    np.testing.assert_allclose(graph(ms.Tensor(raw)).asnumpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_transform_needs_arrays_and_a_known_kind():
    from mindexp import ConfigError
    from mindexp.define.transforms import fit_splits

    class Exp:
        input_transform = "standardize"
    with pytest.raises(ConfigError, match=r"input_transform must be None or one of Standardize"):
        fit_splits(Exp(), (np.zeros((4, 1)),), None)
    from mindexp import Standardize
    Exp.input_transform = Standardize()
    with pytest.raises(ConfigError, match=r"needs source\(\) to return arrays"):
        fit_splits(Exp(), [np.zeros((4, 1))], None)
    x = np.array([[1.0, 5.0], [3.0, 5.0]], np.float32)
    train, _, state = fit_splits(Exp(), (x, x[:, :1]), None)
    np.testing.assert_array_equal(train[0], [[-1.0, 0.0], [1.0, 0.0]])  # std 0 kept as 1
    np.testing.assert_array_equal(state["std"], [1.0, 1.0])
