"""Physics-informed network for u'' = -pi^2 sin(pi x), u(0) = u(1) = 0 (seed ch. 10)."""
import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype

from .. import Experiment


class InputGradient(nn.Cell):
    """d/dx of ``fn(x)``, element by element.

    ``GradOperation`` differentiates the sum of the outputs; the network
    maps each sample on its own, so that is each sample's own derivative.
    Nesting two of them gives the second derivative.
    """

    def __init__(self, fn):
        super().__init__(auto_prefix=False)  # keep fn's parameter names (checkpoints)
        self.fn = fn
        self.grad = ops.GradOperation()

    def construct(self, x):
        return self.grad(self.fn)(x)


class PinnLoss(nn.Cell):
    """The physics-informed loss of u'' = -pi^2 sin(pi x) on [0, 1], u(0) = u(1) = 0.

    ``mean((u''(x) + pi^2 sin(pi x))^2)`` over the batch's collocation
    points plus ``boundary_weight * mean(u(0)^2, u(1)^2)``. The ``u``
    column is ignored in training (no solution values are used: only the
    equation); it is there because eval compares u(x) to the exact solution.

    Returns ``(total, residual, boundary)``: the two terms (the boundary one
    weighted) add up to the total, which is what the train step optimises.
    """

    loss_components = ("residual", "boundary")

    def __init__(self, net, boundary_weight=1.0):
        # No prefix: the parameters keep the network's own names ("body.0.weight"), as
        # with nn.WithLossCell, so checkpoints load back into network().
        super().__init__(auto_prefix=False)
        self.net = net
        self.second = InputGradient(InputGradient(net))
        self.boundary = Tensor(np.array([[0.0], [1.0]], np.float32))
        self.pi = Tensor(math.pi, mstype.float32)
        self.weight = Tensor(boundary_weight, mstype.float32)

    def construct(self, x, u):
        residual = self.second(x) + self.pi * self.pi * ops.sin(self.pi * x)
        edge = self.net(self.boundary)
        residual_term = ops.mean(ops.square(residual))
        boundary_term = self.weight * ops.mean(ops.square(edge))
        return residual_term + boundary_term, residual_term, boundary_term


class PinnOde(Experiment):
    """PINN: solve u'' = -pi^2 sin(pi x), u(0)=u(1)=0; eval error to sin(pi x).

    The loss (``loss_network()`` override, :class:`PinnLoss`) uses the
    network's second derivative with respect to its input, taken with
    nested ``GradOperation``s; the train step then differentiates that with
    respect to the weights. Graph mode handles these higher-order gradients
    on CPU (MindSpore 2.10) and is the default; ``mode=pynative`` works
    too but is about 30x slower per step.

    Columns are ``("x", "u")``: train rows are collocation points in [0, 1]
    with a dummy ``u = 0``; eval rows are a grid with the exact solution
    ``u = sin(pi x)``, so eval.csv's ``max_error`` is the largest absolute
    error of the learned solution and ``mse`` its mean squared error.

    loss.csv has the loss components ``residual`` (the equation's mean
    squared residual) and ``boundary`` (the weighted boundary term); they
    add up to ``loss``.
    """

    name = "pinn_ode"
    columns = ("x", "u")
    loss_components = PinnLoss.loss_components

    @dataclass
    class Config(Experiment.Config):
        samples: int = 256
        """collocation points in (0, 1)"""
        eval_samples: int = 128
        """evaluation points on [0, 1]"""
        hidden: int = 32
        """units per hidden layer"""
        layers: int = 2
        """hidden layers"""
        boundary_weight: float = 1.0
        """weight of the boundary term mean(u(0)^2, u(1)^2) in the loss"""
        epochs: int = 100
        batch_size: int = 64
        optimizer: str = "adam"
        lr: float = 0.01
        lr_schedule: str = "cosine"
        eval_every: int = 5
        metrics: Tuple[str, ...] = ("max_error", "mse")

    def source(self, split):
        cfg = self.config
        if split == "eval":
            x = np.linspace(0.0, 1.0, cfg.eval_samples)[:, None]
            return x, np.sin(np.pi * x)
        # Stratified collocation points: one uniform draw in each of `samples` cells.
        rng = np.random.default_rng(cfg.seed)
        x = (np.arange(cfg.samples) + rng.random(cfg.samples))[:, None] / cfg.samples
        return x, np.zeros_like(x)

    def network(self):
        from ._nets import MLP
        return MLP(1, 1, hidden=self.config.hidden, layers=self.config.layers)

    def figures(self, network, split):
        """u(x) against the exact sin(pi x), and the equation's residual along x
        (u'' by central differences of the network's output: no new graph to compile)."""
        from ._figures import figure, predict
        h = 1e-2
        x = np.linspace(0.0, 1.0, 101, dtype=np.float32)
        u = predict(network, np.concatenate([x - h, x, x + h])[:, None].astype(np.float32))
        left, mid, right = u[:, 0].reshape(3, -1)
        residual = (left - 2 * mid + right) / h ** 2 + np.pi ** 2 * np.sin(np.pi * x)
        fig = figure()
        ax = fig.add_subplot()
        ax.plot(x, np.sin(np.pi * x), color="C0", label="exact sin(pi x)")
        ax.plot(x, mid, color="C1", linestyle="--", label="network u(x)")
        ax.set(xlabel="x", ylabel="u", title="solution")
        ax.legend(fontsize=7)
        res = figure()
        rax = res.add_subplot()
        rax.plot(x, residual, color="C3")
        rax.axhline(0, color="gray", linewidth=0.5)
        rax.set(xlabel="x", ylabel="u'' + pi^2 sin(pi x)", title="residual")
        return {"solution": fig, "residual": res}

    def loss_network(self, net):
        return PinnLoss(net, self.config.boundary_weight)
