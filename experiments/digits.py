"""Handwritten digits: a small CNN on scikit-learn's bundled 8x8 images."""
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .. import ConfigError, Experiment, MindexpError

EXTRA_HINT = "pip install 'mindexp[digits]' (or: pip install scikit-learn)"


def load_digits_split(eval_fraction, seed):
    """scikit-learn's ``load_digits`` (1,797 8x8 images, 10 classes, read from
    files scikit-learn ships: no download) as a stratified, seeded split.

    Returns ``{"train": (images, labels), "eval": (images, labels)}``:
    images float32 ``(n, 1, 8, 8)`` scaled to [0, 1], labels int32.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise MindexpError(f"the digits experiment needs scikit-learn: {EXTRA_HINT}") from None
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = data.target.astype(np.int32)
    x_train, x_eval, y_train, y_eval = train_test_split(
        images, labels, test_size=eval_fraction, stratify=labels, random_state=seed)
    return {"train": (x_train, y_train), "eval": (x_eval, y_eval)}


class Digits(Experiment):
    """8x8 handwritten digits (scikit-learn's load_digits): a one-conv CNN, eval accuracy.

    A stratified, seeded train/eval split (``eval_fraction``), sparse
    softmax cross-entropy, metrics ``accuracy`` and ``loss`` on the eval
    split. Needs the ``digits`` extra (scikit-learn).
    """

    name = "digits"
    columns = ("image", "label")

    @dataclass
    class Config(Experiment.Config):
        eval_fraction: float = 0.2
        channels: int = 16
        hidden: int = 64
        epochs: int = 20
        batch_size: int = 32
        optimizer: str = "adam"
        lr: float = 0.005
        lr_schedule: str = "cosine"   # settles the last epochs (constant lr: 0.96-0.98)
        loss: str = "cross_entropy"
        metrics: Tuple[str, ...] = ("accuracy", "loss")
        checkpoint_interval_s: float = 0.0

    def source(self, split):
        cfg = self.config
        return load_digits_split(cfg.eval_fraction, cfg.seed)[split]

    def network(self):
        from ._nets import SmallCNN
        return SmallCNN(8, 10, channels=self.config.channels, hidden=self.config.hidden)

    def figures(self, network, split):
        """The confusion matrix and the misclassified digits of ``split``."""
        from ._figures import classifier_figures
        images, labels = self.source(split)
        return classifier_figures(network, images, labels, 10)

    def validate(self):
        cfg = self.config
        if not 0 < cfg.eval_fraction < 1:
            raise ConfigError("config field 'eval_fraction' must be a number in (0, 1). "
                              f"Received: eval_fraction={cfg.eval_fraction!r}", field="eval_fraction")
        for name in ("channels", "hidden"):
            if getattr(cfg, name) < 1:
                raise ConfigError(f"config field {name!r} must be an integer >= 1. "
                                  f"Received: {name}={getattr(cfg, name)!r}", field=name)
        if cfg.loss != "cross_entropy":
            raise ConfigError("config field 'loss' must be cross_entropy for digits (the labels "
                              f"are class indices). Received: loss={cfg.loss!r}", field="loss")
