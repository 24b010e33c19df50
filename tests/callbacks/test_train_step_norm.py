"""TrainStep's two ways of taking the global gradient norm agree."""
import numpy as np
import pytest


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("clip", [None, 0.05])
def test_concatenated_and_per_gradient_norms_agree(ms_graph, monkeypatch, clip):
    from mindspore import Tensor, nn

    import mindexp.callbacks.train_step as ts

    def one_step(limit):
        monkeypatch.setattr(ts, "CONCAT_NORM_MAX_ELEMENTS", limit)
        ms_graph.set_seed(0)
        net = nn.SequentialCell([nn.Dense(3, 16), nn.ReLU(), nn.Dense(16, 1)])
        step = ts.TrainStep(nn.WithLossCell(net, nn.MSELoss()),
                            nn.SGD(net.trainable_params(), 0.1), clip_grad_norm=clip)
        assert step.concat_norm == (limit > 0)
        x = np.random.default_rng(0).random((8, 3), dtype=np.float32)
        loss, norm = step(Tensor(x), Tensor(x.sum(axis=1, keepdims=True)))
        return float(norm.asnumpy()), [p.asnumpy().copy() for p in net.trainable_params()]

    norm_cat, params_cat = one_step(1 << 22)
    norm_sum, params_sum = one_step(0)
    assert norm_cat == pytest.approx(norm_sum, rel=1e-6)
    for a, b in zip(params_cat, params_sum):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
