"""A small Transformer encoder classifying bracket sequences as balanced or not."""
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .. import ConfigError, Experiment

PAD, OPEN, CLOSE = 0, 1, 2
VOCAB = 3


def _balanced(length, rng):
    """A random balanced sequence of ``length`` (even) brackets."""
    out, depth = [], 0
    for i in range(length):
        left = length - i
        opens = depth == 0 or (depth < left and rng.random() < 0.5)
        depth += 1 if opens else -1
        out.append(OPEN if opens else CLOSE)
    return out


def is_balanced(seq):
    """True when the brackets of ``seq`` (ignoring padding) are balanced."""
    depth = 0
    for token in seq:
        if token == PAD:
            continue
        depth += 1 if token == OPEN else -1
        if depth < 0:
            return False
    return depth == 0


def make_brackets(n, max_len, rng):
    """``n`` bracket sequences, half balanced, padded with 0 to ``max_len``.

    Unbalanced ones are hard on purpose: half are a balanced sequence with
    one bracket flipped (the counts differ), half a shuffle of a balanced
    sequence that goes below depth 0 (the counts agree, the order is
    wrong). Lengths are even, from 2 to ``max_len``. Returns ``(tokens
    int32 (n, max_len), labels int32 (n,))``; label 1 = balanced.
    """
    tokens = np.zeros((n, max_len), np.int32)
    labels = np.zeros(n, np.int32)
    for i in range(n):
        length = 2 * int(rng.integers(1, max_len // 2 + 1))
        seq = _balanced(length, rng)
        kind = i % 4
        if kind == 2:  # one bracket flipped
            j = int(rng.integers(length))
            seq[j] = OPEN + CLOSE - seq[j]
        elif kind == 3:  # same counts, wrong order
            for _ in range(100):
                rng.shuffle(seq)
                if not is_balanced(seq):
                    break
        tokens[i, :length] = seq
        labels[i] = is_balanced(seq)
    order = rng.permutation(n)
    return tokens[order], labels[order]


class Transformer(Experiment):
    """Balanced brackets: a 2-layer Transformer encoder on int32 tokens, eval accuracy.

    Tokens ``0`` (padding), ``1`` ``(``, ``2`` ``)``; an embedding plus a
    sinusoidal positional encoding, pre-norm encoder layers with multi-head
    self-attention that ignores padding keys (an additive mask), mean
    pooling over the real tokens and a 2-class head. The attention is built
    from MindSpore ops (``_transformer.py``) rather than
    ``nn.TransformerEncoder``: the query/key/value/out weights of each layer
    are separate named parameters (``layers.0.attention.query.weight``) to
    list in ``track_names``, and the mask bias stays finite in float16
    (``amp_level=O2``). Large parameters are tracked as statistics
    (``max_param_values``).
    """

    name = "transformer"
    columns = ("tokens", "label")

    @dataclass
    class Config(Experiment.Config):
        samples: int = 4096
        """training sequences (half balanced)"""
        eval_samples: int = 1024
        """evaluation sequences (a separate draw)"""
        max_len: int = 16
        """longest sequence (padded to this length)"""
        width: int = 32
        """embedding and model width"""
        heads: int = 4
        """attention heads (divide width)"""
        layers: int = 2
        """encoder layers"""
        ff: int = 64
        """units of each feed-forward block"""
        epochs: int = 12
        batch_size: int = 64
        optimizer: str = "adam"
        lr: float = 0.003
        lr_schedule: str = "cosine"
        warmup_steps: int = 50
        loss: str = "cross_entropy"
        metrics: Tuple[str, ...] = ("accuracy", "loss")
        log_every: int = 5
        checkpoint_interval_s: float = 0.0

    def source(self, split):
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, 0 if split == "train" else 1])
        return make_brackets(cfg.samples if split == "train" else cfg.eval_samples,
                             cfg.max_len, rng)

    def network(self):
        from ._transformer import TransformerClassifier
        cfg = self.config
        return TransformerClassifier(VOCAB, cfg.max_len, 2, width=cfg.width, heads=cfg.heads,
                                     layers=cfg.layers, ff=cfg.ff)

    def figures(self, network, split):
        """Accuracy by sequence length (the real tokens before the padding)."""
        from ._figures import figure, predict
        tokens, labels = self.source(split)
        predicted = np.concatenate([predict(network, tokens[i:i + 256]).argmax(1)
                                    for i in range(0, len(tokens), 256)])
        lengths = (np.asarray(tokens) != PAD).sum(1)
        found = np.unique(lengths)
        accuracy = [float((predicted[lengths == n] == labels[lengths == n]).mean()) for n in found]
        fig = figure()
        ax = fig.add_subplot()
        ax.bar(found, accuracy, color="C0")
        ax.set(xlabel="sequence length", ylabel="accuracy", ylim=(0, 1.05),
               title=f"accuracy by length ({split})")
        return {"accuracy_by_length": fig}

    def validate(self):
        cfg = self.config
        for name in ("samples", "eval_samples", "width", "heads", "layers", "ff"):
            if getattr(cfg, name) < 1:
                raise ConfigError(f"config field {name!r} must be an integer >= 1. "
                                  f"Received: {name}={getattr(cfg, name)!r}", field=name)
        if cfg.max_len < 2 or cfg.max_len % 2:
            raise ConfigError("config field 'max_len' must be an even integer >= 2. "
                              f"Received: max_len={cfg.max_len!r}", field="max_len")
        if cfg.width % cfg.heads or cfg.width % 2:
            raise ConfigError("config field 'heads' must divide 'width' (an even number). "
                              f"Received: width={cfg.width}, heads={cfg.heads}", field="heads")
        if cfg.loss != "cross_entropy":
            raise ConfigError("config field 'loss' must be cross_entropy for transformer (the "
                              f"labels are class indices). Received: loss={cfg.loss!r}",
                              field="loss")
