"""Statistics of large tracked parameters (numpy only)."""
from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# five float64 arrays (or floats): L2 norm, mean, std, min, max
Array = npt.NDArray[np.float64]

STATS = ("norm", "mean", "std", "min", "max")
# largest float32 parameter whose statistics are summed in float32 (see block_statistics)
FLOAT32_SUM_MAX = 1 << 20


def block_statistics(block: np.ndarray) -> tuple[Array, Array, Array, Array, Array]:
    """L2 norm, mean, standard deviation, min and max of each row of a 2-D
    array (one row per logged step), as five float64 arrays.

    One call covers every step of a block: numpy's per-call overhead, not
    the arithmetic, was most of the cost for small parameters. Each row
    gives the same values whatever the block around it (the reductions run
    row by row), so a resumed run writes what an uninterrupted one does.
    Rows of up to ``FLOAT32_SUM_MAX`` float32 elements are summed in
    float32 (numpy's pairwise sum and einsum: ~1e-7 relative, no float64
    copy); larger or other rows in float64. The variance E[x^2] - mean^2
    takes two sums instead of np.std's three passes; where the spread is
    large against the mean (std > 3 |mean|) it could lose digits, and
    np.var recomputes that row in float64.
    """
    if block.dtype != np.float32 or block.shape[1] > FLOAT32_SUM_MAX:
        block = block.astype(np.float64)
    with np.errstate(all="ignore"):   # a diverged step's inf and NaN are values to log
        return _statistics_of(block)


def _statistics_of(block: np.ndarray) -> tuple[Array, Array, Array, Array, Array]:
    n = block.shape[1]
    sq = np.einsum("ij,ij->i", block, block).astype(np.float64)
    mean = block.sum(axis=1).astype(np.float64) / n
    var = sq / n - mean * mean
    for i in np.flatnonzero(~(var > 10.0 * mean * mean)):   # could lose digits (or NaN)
        var[i] = block[i].var(dtype=np.float64)
    std = np.sqrt(var)   # var < 0 never comes out of np.var: only NaN stays NaN
    return (np.sqrt(sq), mean, std, block.min(axis=1).astype(np.float64),
            block.max(axis=1).astype(np.float64))


def statistics(flat: np.ndarray) -> tuple[float, float, float, float, float]:
    """:func:`block_statistics` of one flat array, as five Python floats, in
    as few numpy calls as possible: for a parameter large enough that its
    statistics are computed at the step, from the parameter's own memory."""
    if flat.dtype != np.float32 or flat.size > FLOAT32_SUM_MAX:
        flat = flat.astype(np.float64)
    n = flat.size
    sq = float(np.einsum("i,i->", flat, flat))
    mean = float(flat.sum()) / n
    var = sq / n - mean * mean
    if not var > 10.0 * mean * mean:   # could lose digits (or NaN): the two-pass way
        var = float(flat.var(dtype=np.float64))
    std = math.sqrt(var) if var >= 0 else var   # var < 0 never comes out of np.var: only NaN
    return math.sqrt(sq), mean, std, float(flat.min()), float(flat.max())
