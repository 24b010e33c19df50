"""TrainStep: a TrainOneStepCell that also returns the global gradient norm."""
from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype

from ._stats import RAW_MAX

if TYPE_CHECKING:
    from mindspore.train import Metric, Model

__all__ = ["TrainStep"]

# Up to this many parameter elements the global norm is taken over one
# concatenation of all gradients (16 MiB of float32 copied per step at most);
# above, per-gradient sums (no copy, and kernel launches no longer matter).
CONCAT_NORM_MAX_ELEMENTS = 1 << 22


class TrainStep(nn.TrainOneStepCell):
    """One optimizer update that returns ``(loss, grad_norm)``.

    ``grad_norm`` is the global L2 norm of all gradients after the
    distributed reduction and the loss-scale division, before clipping. A
    ``sens`` other than 1 is a fixed loss scale: the loss gradient starts at
    ``sens`` (so float16 backward passes do not underflow) and the gradients
    are divided by it again before the norm, the clipping and the update;
    the returned loss is always float32. With ``clip_grad_norm`` the
    gradients are scaled so their global norm is at most that value. With
    ``accumulation_steps=K`` every input batch is split into K equal
    micro-batches whose gradients are averaged before ONE update, so a step
    is always one optimizer update. With ``per_param_norms=True`` a third
    output holds the norm of each parameter's gradient (in the order of
    ``param_names``).

    Loss components: when the loss network returns ``(total, c1, ..., ck)``
    (scalars) and names them, in ``components=("c1", ..., "ck")`` or in its
    own attribute ``loss_components``, only ``total`` is differentiated
    and optimised; the components are returned as one float32 tensor of
    shape ``(k,)`` after the other outputs (index ``components_index``,
    names ``component_names``), which ``LossMonitor`` logs as
    extra ``loss.csv`` columns. With accumulation they are averaged like
    the loss.

    Args:
        network: a cell returning the loss, e.g. ``nn.WithLossCell(net, loss_fn)``.
        optimizer: a ``mindspore.nn.Optimizer``.
        clip_grad_norm: max global norm, or None for no clipping.
        sens: a fixed loss scale (gradients are unscaled before the update).
        accumulation_steps: micro-batches per update (the batch size must be
            divisible by it).
        per_param_norms: also return per-parameter gradient norms.
        components: names of the loss components the network returns after
            the total (default: ``network.loss_components``, else none).
        param_stats: False; True for every parameter of more than 1,024
            elements; or parameter names / glob patterns (of those, the ones
            of more than 1,024 elements).
    """

    returns_grad_norm = True

    @classmethod
    def model(cls, network: nn.Cell, loss_fn: nn.Cell, optimizer: nn.Optimizer,
              metrics: Mapping[str, Metric] | None = None, **kwargs: Any) -> Model:
        """A ``mindspore.train.Model`` training ``network`` with a TrainStep.

        With ``metrics`` (for ``Model.fit``/``Model.eval``) the Model also
        gets ``eval_network=EvalCell(network, loss_fn)`` (``nn.WithEvalCell``
        with the loss once per sample, for ``mindexp.callbacks.EvalLoss``)
        and ``eval_indexes=[0, 1, 2]`` (its loss, prediction and label
        outputs), which ``Model`` needs when given a train cell instead of a
        loss and optimizer. ``kwargs`` go to ``TrainStep`` (``clip_grad_norm``, ...).
        """
        from mindspore.train import Model
        from .eval_loss import EvalCell
        train_cell = cls(nn.WithLossCell(network, loss_fn), optimizer, **kwargs)
        if not metrics:
            return Model(train_cell)
        return Model(train_cell, eval_network=EvalCell(network, loss_fn),
                     eval_indexes=[0, 1, 2], metrics=metrics)

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer,
                 clip_grad_norm: float | None = None, sens: float = 1.0,
                 accumulation_steps: int = 1, per_param_norms: bool = False,
                 components: Sequence[str] | None = None,
                 param_stats: bool | Sequence[str] = False) -> None:
        super().__init__(network, optimizer, sens)
        self.component_names = _check_components(
            getattr(network, "loss_components", ()) if components is None else components)
        self.n_components = len(self.component_names)
        self.components_index = (3 if per_param_norms else 2) if self.n_components else None
        if clip_grad_norm is not None and not (isinstance(clip_grad_norm, (int, float))
                                               and clip_grad_norm > 0):
            raise ValueError("`clip_grad_norm` must be a positive number or None. "
                             f"Received: clip_grad_norm={clip_grad_norm!r}")
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) \
                or accumulation_steps < 1:
            raise ValueError("`accumulation_steps` must be an integer >= 1. "
                             f"Received: accumulation_steps={accumulation_steps!r}")
        self.clip = None if clip_grad_norm is None else float(clip_grad_norm)
        self.accumulation_steps = accumulation_steps
        self.per_param_norms = bool(per_param_norms)
        self.returns_param_grad_norms = self.per_param_norms
        self.param_names = [p.name for p in self.weights]
        # the concatenated norm copies every gradient once: only for small networks
        self.concat_norm = sum(int(p.size) for p in self.weights) <= CONCAT_NORM_MAX_ELEMENTS
        self.hyper_map = ops.HyperMap()
        # positions in self.weights: a constant tuple the graph unrolls
        self.stats_positions = _stats_positions(self.weights, param_stats)
        self.stats_names = tuple(self.param_names[i] for i in self.stats_positions)
        self.stats_index = ((2 + self.per_param_norms + bool(self.n_components))
                            if self.stats_positions else None)
        # A Python constant: graph mode folds the unscaling away when it is 1.
        self.inv_sens = 1.0 / float(sens)

    def construct(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        if self.accumulation_steps == 1:
            loss, parts, grads = self._loss_and_grads(*inputs)
        else:
            loss, parts, grads = self._accumulated(*inputs)
        grads = self.grad_reducer(grads)
        if self.inv_sens != 1.0:
            grads = self.hyper_map(ops.partial(_scale, self.inv_sens), grads)
        if self.per_param_norms or not self.concat_norm:
            norms = self.hyper_map(_square_sum, grads)
            grad_norm = ops.sqrt(ops.addn(norms))
        else:
            # one reduction over all gradients: 3 CPU kernels instead of ~3 per
            # parameter (each launch costs more than the arithmetic here)
            flat = ()
            for grad in grads:
                flat = flat + (grad.reshape(-1).astype(mstype.float32),)  # type: ignore[assignment]
            every = ops.cat(flat)
            grad_norm = ops.sqrt(fixed_order_sum(every * every))
        if self.clip is not None:
            scale = self.clip / ops.maximum(grad_norm, self.clip)
            grads = self.hyper_map(ops.partial(_scale, scale), grads)
        loss = ops.depend(ops.cast(loss, mstype.float32), self.optimizer(grads))
        out = (loss, grad_norm)
        if self.per_param_norms:
            out = out + (self.hyper_map(ops.sqrt, norms),)  # type: ignore[assignment]
        if self.n_components:
            out = out + (parts,)  # type: ignore[assignment]
        if self.stats_positions:
            out = out + (self._param_sums(loss),)  # type: ignore[assignment]
        return out

    def _param_sums(self, updated: Tensor) -> Tensor:
        """The ``(k, 5)`` statistics tensor (see the class doc), read after
        ``updated`` (the loss, which depends on the optimizer's update)."""
        rows = ()
        for i in self.stats_positions:
            flat = ops.depend(self.weights[i], updated).reshape(-1).astype(mstype.float32)
            shift = flat[0]
            d = flat - shift
            row = ops.stack([fixed_order_sum(d), fixed_order_sum(d * d), shift, flat.min(),
                             flat.max()])
            rows = rows + (row,)  # type: ignore[assignment]
        return ops.stack(rows)

    def _loss_and_grads(self, *inputs: Tensor) -> tuple[Tensor, Any, Any]:
        if not self.n_components:
            loss = self.network(*inputs)
            sens = ops.fill(loss.dtype, loss.shape, self.sens)
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            return loss, 0.0, grads
        out = self.network(*inputs)
        loss = out[0]
        # A zero sensitivity for each component: only the total is differentiated.
        sens = (ops.fill(loss.dtype, loss.shape, self.sens),)
        parts = ()
        for k in range(1, self.n_components + 1):
            sens = sens + (ops.zeros_like(out[k]),)
            parts = parts + (ops.cast(out[k], mstype.float32).reshape(()),)  # type: ignore[assignment]
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return loss, ops.stack(parts), grads

    def _accumulated(self, *inputs: Tensor) -> tuple[Tensor, Any, Any]:
        size = inputs[0].shape[0] // self.accumulation_steps
        loss, parts, grads = self._loss_and_grads(*[x[0:size] for x in inputs])
        for k in range(1, self.accumulation_steps):
            micro = [x[k * size:(k + 1) * size] for x in inputs]
            micro_loss, micro_parts, micro_grads = self._loss_and_grads(*micro)
            loss = loss + micro_loss
            parts = parts + micro_parts
            grads = self.hyper_map(ops.add, grads, micro_grads)
        inv = 1.0 / self.accumulation_steps
        return loss * inv, parts * inv, self.hyper_map(ops.partial(_scale, inv), grads)


def _check_components(names: Any) -> tuple[str, ...]:
    """The component names as a tuple of distinct identifiers (ValueError otherwise)."""
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or not all(
            isinstance(n, str) and n.isidentifier() for n in names) or len(set(names)) < len(names):
        raise ValueError("`components` must be a tuple of distinct identifier names, one per "
                         f"value the loss network returns after the total. Received: "
                         f"components={names!r}")
    return tuple(names)


def _stats_positions(weights: Any, chosen: Any) -> tuple[int, ...]:
    """Positions of the parameters whose statistics the step returns."""
    if chosen is False or chosen is None:
        return ()
    if isinstance(chosen, str):
        chosen = (chosen,)
    if chosen is not True and not (isinstance(chosen, (tuple, list)) and chosen
                                   and all(isinstance(c, str) and c for c in chosen)):
        raise ValueError("`param_stats` must be True, False or parameter names / glob patterns. "
                         f"Received: param_stats={chosen!r}")
    return tuple(i for i, p in enumerate(weights) if int(p.size) > RAW_MAX and (
        chosen is True or any(fnmatch.fnmatchcase(p.name, pat) for pat in chosen)))


# Width of the rows fixed_order_sum sums one by one.
SUM_ROW = 256


def fixed_order_sum(v: Tensor) -> Tensor:
    """The sum of a 1-D tensor in an order fixed by its length alone (the
    gradient norm's and ``param_stats``' sums: the same values give the same
    bits at any load, so clipping and the logs do not depend on it).

    MindSpore 2.10's CPU ReduceSum of a whole tensor splits it between
    threads by timing its first launches (the split it finds fastest), so the
    same values summed twice, or beside a busy process, can differ in the
    last bits. Sums along rows of ``SUM_ROW`` (zero-padded) are each taken
    whole, in order (checked on 2.10, also under load and on one CPU): the
    tensor is summed row by row, then the row sums likewise, until one row
    is left. Shapes are static: the levels are fixed when the graph compiles."""
    while v.shape[0] > SUM_ROW:
        pad = (-v.shape[0]) % SUM_ROW
        if pad:
            v = ops.concat((v, ops.zeros(pad, v.dtype)))
        v = v.reshape(-1, SUM_ROW).sum(axis=1)
    return v.sum()


def _square_sum(grad: Tensor) -> Tensor:
    return fixed_order_sum(ops.square(grad.astype("float32")).reshape(-1))


def _scale(factor: Any, grad: Tensor) -> Tensor:
    return grad * ops.cast(factor, grad.dtype)
