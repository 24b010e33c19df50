"""Use a trained run's model: evaluate a checkpoint, predict, export.

``evaluate(run, checkpoint="best", split="eval")``, ``predict(run, x)`` and
``export(run, "MINDIR")`` back the ``mindexp evaluate / predict / export``
commands; each rebuilds the experiment's network from the run directory and
loads one checkpoint into it (``"last"``, ``"best"`` or a step number).
"""
from .evaluate import evaluate
from .export import export
from .predict import predict, read_inputs

__all__ = ["evaluate", "export", "predict", "read_inputs"]
