"""One pass for the four sums of a large parameter's statistics (numba: the optional ``fast`` extra).

numpy makes four passes over each chunk of a parameter (sum, sum of
squares, min, max); the first reads it from memory, the other three from
the core's cache. Fused in one compiled loop they cost about one read:
on the two 1024 x 1024 float32 weights of issue 26's 2.1 M-parameter MLP,
0.58 ms against numpy's 1.55 ms when the weights are not in cache (one
``max()`` over them alone: 0.53 ms; benchmarks/README.md).

numba is imported, and the kernel compiled (or loaded from numba's cache),
on the first call of :func:`four_sums`: only a run with a parameter of
more than one chunk pays for it (about 0.7 s: 0.35 s the import, 0.35 s
loading the cached kernel; 2 s the first time, compiling it). If numba
fails to compile or load it, a warning says so and numpy does the work.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

logger = logging.getLogger(__name__)

# Per lane accumulators in the array's dtype: 32 lanes let the compiler
# use full vector registers for each of the four; every BLOCK elements the
# sums move to float64, so float32 adds at most BLOCK / LANES = 128 values.
LANES = 32
BLOCK = 4096
# fastmath lets the sums be reordered into vectors; not "ninf": infinities
# stay values (the min and max start from them). "nnan" is needed to
# vectorise min and max; a NaN still makes the sum NaN, and four_sums'
# caller recomputes such a chunk with numpy (see _stats._chunk_sums).
FLAGS = {"nnan", "nsz", "reassoc", "contract", "arcp"}

Kernel = Callable[[np.ndarray], "tuple[float, float, float, float]"]
_KERNEL: list[Kernel | None] = []   # [] until looked for; [None] without numba
_LOCK = threading.Lock()


def four_sums() -> Kernel | None:
    """The compiled kernel ``f(x) -> (sum, sum of squares, min, max)`` of a
    writeable contiguous 1-D float32 or float64 array (any other would
    compile another version), or None when numba is not installed. The sums
    are float64; min and max are exact, but only where the sum and the sum
    of squares are finite (fastmath: see ``FLAGS``)."""
    if not _KERNEL:
        with _LOCK:   # the pool's helper threads may ask at once
            if not _KERNEL:
                _KERNEL.append(_compile_kernel())
    return _KERNEL[0]


def _compile_kernel() -> Kernel | None:
    try:
        import numba
    except ImportError:   # the fast extra is not installed
        return None
    try:
        kernel = numba.njit(fastmath=FLAGS, nogil=True, cache=True)(_sum_lanes)
        for dtype in (np.float32, np.float64):   # compiled here, not inside a timed step
            kernel(np.zeros(2 * BLOCK + 1, dtype))
    except Exception as exc:  # noqa: BLE001  (an optional speed-up: a damaged cache must not stop training)
        logger.warning("numba could not compile the parameter statistics kernel (%s: %s); "
                       "numpy computes them", type(exc).__name__, exc)
        return None
    return kernel


def _sum_lanes(x):  # type: ignore[no-untyped-def]  # compiled by numba: no annotations
    n = x.size
    low = np.full(LANES, np.inf, x.dtype)
    high = np.full(LANES, -np.inf, x.dtype)
    total = 0.0
    squares = 0.0
    end = n - n % BLOCK
    for start in range(0, end, BLOCK):
        s = np.zeros(LANES, x.dtype)
        q = np.zeros(LANES, x.dtype)
        for i in range(start, start + BLOCK, LANES):
            for k in range(LANES):
                v = x[i + k]
                s[k] += v
                q[k] += v * v
                low[k] = min(low[k], v)
                high[k] = max(high[k], v)
        total += s.sum()
        squares += q.sum()
    lo = low.min()
    hi = high.max()
    for i in range(end, n):
        v = x[i]
        total += v
        squares += v * v
        lo = min(lo, v)
        hi = max(hi, v)
    return total, squares, lo, hi
