"""Statistics of a large tracked parameter (numpy only)."""
import math

import numpy as np

STATS = ("norm", "mean", "std", "min", "max")
# largest float32 parameter whose statistics are summed in float32 (see statistics)
FLOAT32_SUM_MAX = 1 << 20


def statistics(raw):
    """L2 norm, mean, standard deviation, min and max of a flat array.

    Up to ``FLOAT32_SUM_MAX`` float32 elements are summed in float32
    (numpy's pairwise sum and einsum: ~1e-7 relative, no float64 copy);
    larger or other arrays in float64. The variance E[x^2] - mean^2 takes
    two sums instead of np.std's three passes; unless the spread is large
    against the mean (std > 3 |mean|), where it could lose digits, np.var
    recomputes it in float64.
    """
    flat = raw
    if flat.dtype != np.float32 or flat.size > FLOAT32_SUM_MAX:
        flat = flat.astype(np.float64)
    n = flat.size
    sq = float(np.einsum("i,i->", flat, flat))
    mean = float(flat.sum()) / n
    var = sq / n - mean * mean
    if not var > 10.0 * mean * mean:   # could lose digits (or NaN): the two-pass way
        var = float(flat.var(dtype=np.float64))
    std = math.sqrt(var) if var >= 0 else var   # var < 0: only NaN
    return math.sqrt(sq), mean, std, float(flat.min()), float(flat.max())
