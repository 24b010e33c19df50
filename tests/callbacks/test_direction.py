"""One direction rule: whether a watched value is minimised or maximised,
said by ``mindexp.callbacks.direction`` for every reader, the callbacks
first."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from mindexp.callbacks import Checkpoint, EarlyStopping, list_checkpoints
from mindexp.callbacks.direction import UnknownDirectionError, direction_of_name, metric_direction


@pytest.mark.parametrize("name, expected", [
    ("loss", "min"), ("eval_loss", "min"), ("mse", "min"), ("eval_mae", "min"), ("rmse", "min"),
    ("error", "min"), ("perplexity", "min"), ("final_loss", "min"), ("eval_top5_error", "min"),
    ("accuracy", "max"), ("eval_accuracy", "max"), ("acc", "max"), ("f1", "max"),
    ("precision", "max"), ("recall", "max"), ("eval_auc", "max"), ("r2", "max"),
    ("best_eval_accuracy", "max"),
])
def test_the_name_says_the_direction(name, expected):
    assert direction_of_name(name) == expected
    assert metric_direction(name) == expected == metric_direction(name, "auto")


@pytest.mark.parametrize("name", ["loss", "eval_accuracy", "custom"])
def test_an_explicit_mode_always_wins(name):
    assert metric_direction(name, "min") == "min"
    assert metric_direction(name, "max") == "max"


@pytest.mark.parametrize("name", ["custom", "eval_custom", "steps_per_s", "eval_"])
def test_a_name_that_does_not_say_is_refused_in_one_line(name):
    assert direction_of_name(name) is None
    with pytest.raises(UnknownDirectionError) as info:
        metric_direction(name)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and repr(name) in message
    assert "accepted: mode='min' or 'max'" in message
    assert message.endswith(f"Received: monitor={name!r}, mode=None")


def test_a_bad_mode_is_named():
    with pytest.raises(ValueError, match=r"Received: mode='up'$"):
        metric_direction("loss", "up")


def test_early_stopping_on_eval_loss_needs_no_mode(run_context):
    cb = EarlyStopping(monitor="eval_loss", patience=1)
    assert cb.mode == "min"
    for epoch, loss in enumerate([0.5, 0.4, 0.45], start=1):
        ctx = run_context(cur_epoch_num=epoch, eval_results={"loss": loss})
        cb.on_train_epoch_end(ctx)
    assert cb.best == 0.4 and cb.stopped_epoch == 3
    assert EarlyStopping(monitor="eval_accuracy").mode == "max"
    assert EarlyStopping(monitor="eval_loss", mode="max").mode == "max"


class OneWeight(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((1, 1), np.float32)), name="w")

    def construct(self, x):
        return x


def _fit_with_eval(cb, ctx, accuracies):
    """Drive ``cb`` one step an epoch, with each epoch's eval accuracy."""
    p = ctx.original_args()
    p.batch_num, p.cur_step_num = 1, 0
    cb.on_train_begin(ctx)
    for epoch, accuracy in enumerate(accuracies, start=1):
        p.cur_epoch_num, p.cur_step_num = epoch, epoch
        p.net_outputs = (Tensor(np.float32(1.0)),)
        p.eval_results = {"accuracy": accuracy}
        cb.on_train_step_end(ctx)
        cb.on_train_epoch_end(ctx)
    cb.on_train_end(ctx)


def test_checkpoint_on_eval_accuracy_needs_no_mode_and_keeps_the_earlier_of_a_tie(
        tmp_path, run_context):
    cb = Checkpoint(tmp_path, every_epochs=None, monitor="eval_accuracy", keep_best=2)
    assert cb.mode == "max"
    _fit_with_eval(cb, run_context(train_network=OneWeight()), [0.5, 0.9, 0.7, 0.9, 0.9])
    # epoch 4 (0.9) beats the worst kept (0.7 of epoch 3); epoch 5 only equals the
    # kept ones: not saved (a later epoch must be strictly better)
    kept = [epoch for _, epoch, _ in list_checkpoints(tmp_path, "best")]
    assert kept == [2, 4]
    assert [step for _, step, _ in cb.best] == [2, 4]   # ranked: the earlier tie first
