"""Networks of the shipped experiments.

Kept free of relative imports: mindspore.amp.auto_mixed_precision at O1
rewrites a network from its module's source as a standalone file.
"""
from mindspore import nn


class MinimalNet(nn.Cell):
    """The seed's network: a single fully connected layer, 1 in, 1 out."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")

    def construct(self, x):
        return self.dense(x)


class MLP(nn.Cell):
    """Fully connected layers with an activation between them.

    ``hidden=0`` (or ``layers=0``) gives one ``Dense(n_in, n_out)``: a linear model.

    Args:
        n_in, n_out: input and output features.
        hidden: units of each hidden layer.
        layers: number of hidden layers.
        activation: name of a ``mindspore.nn`` activation ("tanh", "relu", ...).
    """

    def __init__(self, n_in, n_out, hidden=32, layers=2, activation="tanh"):
        super().__init__()
        sizes = [n_in] + ([hidden] * layers if hidden and layers else []) + [n_out]
        cells = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            cells.append(nn.Dense(a, b, weight_init="xavier_uniform"))
            if i < len(sizes) - 2:
                cells.append(nn.get_activation(activation))
        self.body = nn.SequentialCell(cells)

    def construct(self, x):
        return self.body(x)
