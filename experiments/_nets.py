"""Networks of the shipped experiments.

Kept free of relative imports: mindspore.amp.auto_mixed_precision at O1
rewrites a network from its module's source as a standalone file.
"""
from mindspore import nn, ops


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


class SmallCNN(nn.Cell):
    """One convolution, one pooling, then fully connected layers.

    Input ``(batch, 1, side, side)``. Only the first layer is convolutional:
    on CPU, MindSpore's Conv2d slows down sharply beyond one input channel.

    Args:
        side: image height and width (even).
        classes: outputs (logits).
        channels: filters of the convolution.
        hidden: units of the hidden dense layer.
    """

    def __init__(self, side=8, classes=10, channels=16, hidden=64):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, pad_mode="same", has_bias=True,
                              weight_init="he_uniform")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        flat = channels * (side // 2) * (side // 2)
        self.head = nn.SequentialCell([nn.Dense(flat, hidden, weight_init="he_uniform"), nn.ReLU(),
                                       nn.Dense(hidden, classes, weight_init="xavier_uniform")])

    def construct(self, x):
        return self.head(self.flatten(self.pool(self.relu(self.conv(x)))))


class TwoHeadNet(nn.Cell):
    """A shared MLP body with a regression head (1 output) and a
    classification head (``classes`` logits), returned side by side as one
    ``(batch, 1 + classes)`` tensor: column 0 is the regression output.

    Args:
        n_in: input features.
        classes: logits of the classification head.
        hidden: units of each shared hidden layer.
        layers: shared hidden layers.
    """

    def __init__(self, n_in, classes, hidden=64, layers=2):
        super().__init__()
        cells, width = [], n_in
        for _ in range(layers):
            cells += [nn.Dense(width, hidden, weight_init="xavier_uniform"), nn.Tanh()]
            width = hidden
        self.body = nn.SequentialCell(cells)
        self.regression = nn.Dense(width, 1, weight_init="xavier_uniform")
        self.classification = nn.Dense(width, classes, weight_init="xavier_uniform")
        self.concat = ops.Concat(axis=1)

    def construct(self, x):
        h = self.body(x)
        return self.concat((self.regression(h), self.classification(h)))
