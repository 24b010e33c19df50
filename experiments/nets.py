"""The shipped experiments' networks, public for your own experiments:
``from mindexp.experiments.nets import MLP``. They live in a file, as graph
mode needs (it compiles a network from its source)."""
from ._nets import MLP, MinimalNet, SmallCNN, TwoHeadNet

__all__ = ["MLP", "MinimalNet", "SmallCNN", "TwoHeadNet"]
