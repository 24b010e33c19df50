"""A small Transformer encoder built from MindSpore ops (the ``transformer`` experiment).

Kept free of relative imports: mindspore.amp.auto_mixed_precision at O1
rewrites a network from its module's source as a standalone file.
"""
import math

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype

# Added to the attention scores of padding keys: far below any real score,
# and still finite in float16 (amp_level O2/O3), unlike -1e9 or -inf.
MASK_BIAS = -1e4


def sinusoidal_positions(length, width):
    """The fixed sine/cosine positional encoding, float32 ``(length, width)``."""
    pos = np.arange(length)[:, None]
    rate = np.exp(-math.log(10000.0) * (np.arange(0, width, 2) / width))
    table = np.zeros((length, width), np.float32)
    table[:, 0::2] = np.sin(pos * rate)
    table[:, 1::2] = np.cos(pos * rate)[:, : width // 2]
    return table


class SelfAttention(nn.Cell):
    """Multi-head self-attention with a key padding mask.

    Separate ``query``, ``key``, ``value`` and ``out`` projections, so each
    weight has its own name (``layers.0.attention.query.weight``) to track.
    ``construct(x, bias)``: ``x`` ``(batch, length, width)``, ``bias``
    ``(batch, 1, 1, length)`` added to the scores (``MASK_BIAS`` at padding).
    """

    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.size = heads, width // heads
        self.query = nn.Dense(width, width, weight_init="xavier_uniform")
        self.key = nn.Dense(width, width, weight_init="xavier_uniform")
        self.value = nn.Dense(width, width, weight_init="xavier_uniform")
        self.out = nn.Dense(width, width, weight_init="xavier_uniform")
        self.scale = 1.0 / math.sqrt(self.size)
        self.softmax = nn.Softmax(axis=-1)

    def _split(self, x):
        b, n, _ = x.shape
        return x.reshape(b, n, self.heads, self.size).transpose(0, 2, 1, 3)

    def construct(self, x, bias):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = ops.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale + ops.cast(bias, q.dtype)
        mixed = ops.matmul(self.softmax(scores), v)
        b, _, n, _ = mixed.shape
        return self.out(mixed.transpose(0, 2, 1, 3).reshape(b, n, self.heads * self.size))


class EncoderLayer(nn.Cell):
    """Pre-norm encoder layer: x + attention(norm(x)), then x + feed-forward(norm(x))."""

    def __init__(self, width, heads, ff):
        super().__init__()
        self.norm1 = nn.LayerNorm((width,))
        self.attention = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm((width,))
        self.ff = nn.SequentialCell([nn.Dense(width, ff, weight_init="xavier_uniform"), nn.GELU(),
                                     nn.Dense(ff, width, weight_init="xavier_uniform")])

    def construct(self, x, bias):
        x = x + self.attention(self.norm1(x), bias)
        return x + self.ff(self.norm2(x))


class TransformerClassifier(nn.Cell):
    """Token ids (int32, 0 = padding) -> class logits.

    Embedding plus sinusoidal positions, ``layers`` encoder layers whose
    attention ignores padding keys, a final norm, the mean over the
    non-padding positions, and a dense head.
    """

    def __init__(self, vocab, length, classes=2, width=32, heads=4, layers=2, ff=64):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.positions = Tensor(sinusoidal_positions(length, width))
        self.layers = nn.CellList([EncoderLayer(width, heads, ff) for _ in range(layers)])
        self.norm = nn.LayerNorm((width,))
        self.head = nn.Dense(width, classes, weight_init="xavier_uniform")
        self.width_scale = math.sqrt(width)

    def construct(self, tokens):
        keep = ops.cast(tokens != 0, mstype.float32)               # (b, n): 1 at real tokens
        bias = ((1.0 - keep) * MASK_BIAS).reshape(keep.shape[0], 1, 1, keep.shape[1])
        x = self.embedding(tokens) * self.width_scale
        x = x + ops.cast(self.positions, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        x = self.norm(x)
        weights = ops.cast(keep, x.dtype).expand_dims(-1)
        pooled = (x * weights).sum(axis=1) / weights.sum(axis=1)
        return self.head(pooled)
