"""global_norm / clip_by_global_norm: TrainStep's norm, inside @jit and on the host."""
import numpy as np
import pytest


def _net_and_data(ms):
    from mindspore import Tensor, nn
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(3, 16), nn.ReLU(), nn.Dense(16, 1)])
    x = np.random.default_rng(0).random((8, 3), dtype=np.float32)
    return net, Tensor(x), Tensor(x.sum(axis=1, keepdims=True))


def test_global_norm_equals_train_steps_inside_jit_and_on_the_host(ms_graph):
    import mindspore as ms
    from mindspore import nn
    from mindexp.callbacks import TrainStep, clip_by_global_norm, global_norm

    net, x, y = _net_and_data(ms)
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    grad_fn = ms.value_and_grad(loss_net, None, net.trainable_params())
    _, grads = grad_fn(x, y)  # at the weights TrainStep starts from

    @ms.jit
    def jitted(x, y):
        loss, grads = grad_fn(x, y)
        clipped, norm = clip_by_global_norm(grads, 0.05)
        return global_norm(grads), norm, global_norm(clipped)

    in_jit, before_clip, after_clip = (float(t.asnumpy()) for t in jitted(x, y))
    on_host = float(global_norm(grads).asnumpy())
    _, step_norm = TrainStep(loss_net, nn.SGD(net.trainable_params(), 0.1))(x, y)
    assert on_host == in_jit == before_clip == float(step_norm.asnumpy())
    expected = np.sqrt(sum(float((g.asnumpy().astype(np.float64) ** 2).sum()) for g in grads))
    assert on_host == pytest.approx(expected, rel=1e-6)
    assert on_host > 0.05 and after_clip == pytest.approx(0.05, rel=1e-5)
