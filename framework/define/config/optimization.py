"""The optimizer, the loss and the learning-rate schedule (consumed by
``define/builders.py`` and the session's train step)."""
from dataclasses import dataclass
from typing import Optional

from ._fields import owns

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad")
LOSSES = ("mse", "mae", "l1", "huber", "cross_entropy", "bce")
LR_SCHEDULES = ("constant", "step", "cosine", "exponential")


@owns(rules={
    "lr": (lambda v: v > 0, "a number > 0"),
    "momentum": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "weight_decay": (lambda v: v >= 0, "a number >= 0"),
}, choices={"optimizer": OPTIMIZERS, "loss": LOSSES})
@dataclass
class OptimizerFields:
    """The optimizer and the loss it minimises."""

    optimizer: str = "sgd"
    """mindspore.nn optimizer"""
    lr: float = 0.01
    """learning rate (the peak of a schedule)"""
    momentum: float = 0.9
    """momentum of the momentum optimizer"""
    weight_decay: float = 0.0
    """L2 penalty passed to the optimizer"""
    loss: str = "mse"
    """loss function (cross_entropy: sparse labels)"""


@owns(rules={
    "warmup_steps": (lambda v: v >= 0, "an integer >= 0"),
    "lr_decay_rate": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "lr_decay_epochs": (lambda v: v >= 1, "an integer >= 1"),
    "clip_grad_norm": (lambda v: v is None or v > 0, "a number > 0, or none"),
    "grad_accumulation": (lambda v: v >= 1, "an integer >= 1"),
}, choices={"lr_schedule": LR_SCHEDULES})
@dataclass
class ScheduleFields:
    """The learning rate over the steps, and what one update adds up and clips."""

    lr_schedule: str = "constant"
    """learning-rate schedule over the run's steps"""
    warmup_steps: int = 0
    """steps of linear warmup at the start"""
    lr_decay_rate: float = 0.1
    """factor of the step/exponential schedules"""
    lr_decay_epochs: int = 1
    """epochs per decay of the step/exponential schedules"""
    clip_grad_norm: Optional[float] = None
    """clip the global gradient norm to this value (none: off)"""
    grad_accumulation: int = 1
    """batches whose gradients add up to one update"""
