"""The global gradient norm and clipping for a hand-written train step.

``global_norm(grads)`` is the number ``TrainStep`` returns as its second
output (the same arithmetic, in the same fixed order: one sum over the concatenated gradients
for networks up to ``CONCAT_NORM_MAX_ELEMENTS`` elements, a sum of
per-gradient square sums above), so a functional loop
(``mindspore.value_and_grad`` and a ``train_step`` under ``@mindspore.jit``)
logs the same ``grad_norm.csv`` a ``Model`` run does. Both functions take the
gradients as a tuple of Tensors (what ``value_and_grad`` returns for
``optimizer.parameters``) and work inside ``@jit`` and on host tensors.
"""
from __future__ import annotations

from typing import Any

from mindspore import Tensor, ops
from mindspore import dtype as mstype

from .train_step import CONCAT_NORM_MAX_ELEMENTS, _square_sum, fixed_order_sum

__all__ = ["global_norm", "clip_by_global_norm"]


def global_norm(grads: Any) -> Tensor:
    """The global L2 norm of ``grads`` (a tuple of Tensors) as a float32 scalar Tensor."""
    total = 0
    for grad in grads:
        total = total + grad.size
    if total <= CONCAT_NORM_MAX_ELEMENTS:
        flat: tuple[Any, ...] = ()
        for grad in grads:
            flat = flat + (grad.reshape(-1).astype(mstype.float32),)
        every = ops.cat(flat)
        return ops.sqrt(fixed_order_sum(every * every))
    squares: tuple[Any, ...] = ()
    for grad in grads:
        squares = squares + (_square_sum(grad),)  # TrainStep's own, so the bits match
    return ops.sqrt(ops.addn(squares))


def clip_by_global_norm(grads: Any, max_norm: float) -> tuple[Any, Tensor]:
    """``(clipped grads, norm before clipping)``: ``grads`` scaled so their global
    norm is at most ``max_norm`` (as ``TrainStep(clip_grad_norm=max_norm)`` does)."""
    norm = global_norm(grads)
    scale = max_norm / ops.maximum(norm, max_norm)
    clipped: tuple[Any, ...] = ()
    for grad in grads:
        clipped = clipped + (grad * ops.cast(scale, grad.dtype),)
    return clipped, norm
