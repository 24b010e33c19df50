"""Build MindSpore pieces from config names (mindspore imported lazily)."""
from typing import TYPE_CHECKING, Sequence
from .._mindspore import quiet_sparse_deprecation
from ..errors import ConfigError

if TYPE_CHECKING:
    from mindspore import Parameter, nn

    from .config import Config


def build_loss(name: str) -> "nn.Cell":
    """A ``mindspore.nn`` loss cell for a config ``loss`` name."""
    from mindspore import nn
    table = {
        "mse": lambda: nn.MSELoss(),
        "mae": lambda: nn.L1Loss(),
        "l1": lambda: nn.L1Loss(),
        "huber": lambda: nn.HuberLoss(),
        "cross_entropy": lambda: nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        "bce": lambda: nn.BCEWithLogitsLoss(),
    }
    if name not in table:
        raise ConfigError(f"config field 'loss' must be one of {', '.join(table)}. "
                          f"Received: loss={name!r}", field="loss")
    return table[name]()


def build_optimizer(config: "Config", params: "Sequence[Parameter]",
                    learning_rate: float | Sequence[float]) -> "nn.Optimizer":
    """A ``mindspore.nn`` optimizer for ``config.optimizer``."""
    from mindspore import nn
    wd, mom = config.weight_decay, config.momentum
    table = {
        "sgd": lambda: nn.SGD(params, learning_rate=learning_rate, weight_decay=wd),
        "momentum": lambda: nn.Momentum(params, learning_rate, mom, weight_decay=wd),
        "adam": lambda: nn.Adam(params, learning_rate=learning_rate, weight_decay=wd),
        "adamw": lambda: nn.AdamWeightDecay(params, learning_rate=learning_rate, weight_decay=wd),
        "rmsprop": lambda: nn.RMSProp(params, learning_rate=learning_rate, weight_decay=wd),
        "adagrad": lambda: nn.Adagrad(params, learning_rate=learning_rate, weight_decay=wd),
    }
    if config.optimizer not in table:
        raise ConfigError(f"config field 'optimizer' must be one of {', '.join(table)}. "
                          f"Received: optimizer={config.optimizer!r}", field="optimizer")
    with quiet_sparse_deprecation():  # nn.Adam builds an op MindSpore deprecates; unused here
        return table[config.optimizer]()


def build_learning_rate(config: "Config", steps_per_epoch: int) -> float | list[float]:
    """A float (constant) or a per-step list from MindSpore's dynamic-LR helpers.

    The list covers every optimizer update of the run, so the ``lr`` column
    of loss.csv shows the value used at each step. ``step``: ``lr`` times
    ``lr_decay_rate`` every ``lr_decay_epochs`` epochs; ``exponential``: the
    same decay spread over the epochs (``rate ** (epoch / lr_decay_epochs)``,
    constant within an epoch); ``cosine``: per step from ``lr`` towards
    ``lr / 1000``. Linear warmup multiplies step i < ``warmup_steps`` (from 0)
    by ``(i + 1) / warmup_steps``.
    """
    from mindspore import nn
    total = steps_per_epoch * config.epochs
    if config.lr_schedule == "constant" and not config.warmup_steps:
        return config.lr
    epochs_per_decay = config.lr_decay_epochs
    if config.lr_schedule == "constant":
        lrs = [config.lr] * total
    elif config.lr_schedule == "cosine":  # per step, from lr down towards lr / 1000
        lrs = nn.cosine_decay_lr(config.lr * 1e-3, config.lr, total, 1, total)
    elif config.lr_schedule == "exponential":
        lrs = nn.exponential_decay_lr(config.lr, config.lr_decay_rate, total, steps_per_epoch,
                                      epochs_per_decay)
    else:  # step: multiply by lr_decay_rate every lr_decay_epochs epochs
        lrs = nn.exponential_decay_lr(config.lr, config.lr_decay_rate, total, steps_per_epoch,
                                      epochs_per_decay, is_stair=True)
    lrs = [float(v) for v in lrs]
    for i in range(min(config.warmup_steps, total)):
        lrs[i] *= (i + 1) / config.warmup_steps
    return lrs
