"""A tracked run's two drivers (``run.callbacks(model)`` for ``Model.train``,
``run.step`` for a loop) build one CallbackList: the same parts in the same
order, so a log added to every tracked run cannot reach only one of them."""
import numpy as np
import pytest


@pytest.fixture
def built_lists(monkeypatch):
    """The classes of each CallbackList made while the test runs, in order."""
    import mindexp.callbacks as cbs
    made = []

    class Recorded(cbs.CallbackList):
        def __init__(self, callbacks, *args, **kwargs):
            super().__init__(callbacks, *args, **kwargs)
            made.append([type(cb).__name__ for cb in self.callbacks])

    monkeypatch.setattr(cbs, "CallbackList", Recorded)
    return made


def _parts(grad_norm):
    import mindspore as ms
    from mindspore import nn
    from mindexp.callbacks import TrainStep
    ms.set_seed(0)
    net = nn.Dense(2, 1)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    step = TrainStep(loss_net, optimizer) if grad_norm else nn.TrainOneStepCell(loss_net, optimizer)
    return net, optimizer, step


def _model_path(out, grad_norm, early_stop):
    from mindspore.train import Model
    import mindexp
    from mindexp.callbacks import EarlyStopping
    extra = [EarlyStopping(early_stop)] if early_stop else []
    with mindexp.track(out, "model") as run:
        _, _, step = _parts(grad_norm)
        run.callbacks(Model(step), *extra)


def _loop_path(out, grad_norm, early_stop):
    import mindexp
    from mindspore import Tensor
    x = Tensor(np.ones((4, 2), np.float32))
    with mindexp.track(out, "loop", early_stop=early_stop) as run:
        net, optimizer, step = _parts(grad_norm)
        out_ = step(x, x[:, :1])
        loss, norm = out_ if grad_norm else (out_, None)
        run.step(loss, net=net, grad_norm=norm, optimizer=optimizer)


@pytest.mark.parametrize("grad_norm, early_stop", [(True, "loss"), (False, None)])
def test_the_loop_and_the_model_path_build_the_same_callbacks_in_order(
        tmp_path, built_lists, grad_norm, early_stop):
    _model_path(str(tmp_path), grad_norm, early_stop)
    _loop_path(str(tmp_path), grad_norm, early_stop)
    model_list, loop_list = built_lists
    assert loop_list == model_list
    # the order that matters: the stop's head first, the Checkpoint after every
    # log, the stop last
    assert model_list[0] == "TakeBack" and model_list[-2] == "Checkpoint"
    assert ("GradNormMonitor" in model_list) is grad_norm
    assert ("EarlyStopping" in model_list) is bool(early_stop)
