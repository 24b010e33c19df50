"""Compiled statistics of a large parameter, one pass and one call (numba: the optional ``fast`` extra).

numpy makes four passes over each chunk of a parameter (sum, sum of
squares, min, max); the first reads it from memory, the other three from
the core's cache. Fused in one compiled loop they cost one read: on the
two 1024 x 1024 float32 weights of benchmarks/scaling.py's 2.1 M-parameter MLP, 0.32-0.35
ms against numpy's 1.55 ms, as long as one ``max()`` over them
(benchmarks/README.md, section 1e).

The loop vectorises only if each of the four is a reduction the compiler
knows. The sums are, given ``fastmath``'s reordering. A float min or max,
as numba writes it, is not (a scalar loop: 1.2 ms on those weights), and
kept in per-lane arrays it is stored to memory at every element (0.55 ms).
So min and max are taken over the floats' bits read as integers, each
mapped to a key in the floats' order: a non-negative float's bits are
already in order as a signed integer, and a negative one's are in reverse
order, so its 31 (63) lower bits are flipped. Integer min and max
vectorise. The key maps back to the float exactly.

Each chunk's sums become a row of a table (``ROW``), which
:func:`combine_rows` turns into the five statistics. ``whole`` does both
for a whole parameter in one call: after a train step every Python or
numpy call costs ~10 us (their code is out of the cache), and the calls
around a call per chunk cost half as much as the kernel (section 1e).
``combine_rows`` and ``clean`` are plain Python, compiled for the
kernels: numpy's path (``_stats``) runs the same arithmetic.

numba is imported, and the kernels compiled (or loaded from numba's cache),
on the first call of :func:`kernels`: only a run with a parameter of
more than one chunk pays for it (about 0.4 s: 0.2 s the import, 0.2 s
loading the cached kernels; 3 s the first time, compiling them). If numba
fails to compile or load them, a warning says so and numpy does the work.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

# The sums are taken in the array's dtype within each BLOCK of elements,
# then added to float64 ones: a float32 sum adds at most BLOCK values (a
# few hundred per vector lane) before it is.
BLOCK = 4096
# fastmath lets _fold's sums be reordered into vector lanes; not "nnan" or
# "ninf": a diverged step's NaN and infinities stay values (either makes a
# sum not finite, and such a chunk's row is made again with numpy, see
# clean and _stats._fix_rows). The rest is compiled in IEEE arithmetic, as
# Python does it.
FLAGS = {"nsz", "reassoc", "contract", "arcp"}

# What each chunk's row of a table holds (statistics combines them).
ROW = ("sum", "squares", "spread", "min", "max")   # spread: the sum of squares around the chunk's mean

_KERNELS: list[Kernels | None] = []   # [] until looked for; [None] without numba
_LOCK = threading.Lock()
_CALLABLE: set[str] = set()   # the plain functions numba already knows how to call


class Kernels(NamedTuple):
    """The compiled kernels (see :func:`kernels`); ``x`` a writeable
    contiguous 1-D float32 or float64 array of at least one element (any
    other would compile another version), ``chunk`` the elements per row,
    ``table`` float64 with a row per chunk and columns ``ROW``."""

    rows: Callable[[np.ndarray, int, int, int, np.ndarray], bool]
    """``rows(x, chunk, first, last, table)``: the rows ``first`` to
    ``last - 1`` of ``table``; False when one of them is not :func:`clean`."""
    whole: Callable[[np.ndarray, int, np.ndarray], "tuple[float, float, float, float, float, bool]"]
    """``whole(x, chunk, table)``: every row, then :func:`combine_rows` of
    them, and whether every row was clean (if not, fix those rows and
    combine again)."""
    combine: Callable[[np.ndarray, int, int], "tuple[float, float, float, float, float]"]
    """:func:`combine_rows`, compiled."""


def kernels() -> Kernels | None:
    """The compiled kernels, or None when numba is not installed or cannot
    build them. The first call imports numba and compiles them (or loads
    them from numba's cache)."""
    if not _KERNELS:
        with _LOCK:   # the pool's helper threads may ask at once
            if not _KERNELS:
                _KERNELS.append(_compile_kernels())
    return _KERNELS[0]


def _compile_kernels() -> Kernels | None:
    try:
        import numba
    except ImportError:   # the fast extra is not installed
        return None
    try:
        _make_callable(numba)
        jit = numba.njit(nogil=True, cache=True)
        made = Kernels(jit(_rows), jit(_whole), jit(combine_rows))
        for dtype in (np.float32, np.float64):   # compiled here, not inside a timed step
            table = np.empty((3, len(ROW)))
            made.whole(np.zeros(2 * BLOCK + 1, dtype), BLOCK, table)
            made.rows(np.zeros(BLOCK, dtype), BLOCK, 0, 1, table)   # as helper threads call it
        made.combine(table, 2 * BLOCK + 1, BLOCK)   # as statistics() calls it after fixing rows
    except Exception as exc:  # noqa: BLE001  (an optional speed-up: a damaged cache must not stop training)
        logger.warning("numba could not compile the parameter statistics kernel (%s: %s); "
                       "numpy computes them", type(exc).__name__, exc)
        return None
    return made


def _make_callable(numba: Any) -> None:
    """Lets compiled code call the plain functions the kernels are made of,
    each registered once. Module-level functions, not closures over
    compiled ones: numba's cache key of a closure holds its cells, which
    differ in every process, so it would compile them again each run."""
    if "_int_view" not in _CALLABLE:
        numba.extending.overload(_int_view)(_int_view_for)
        _CALLABLE.add("_int_view")
    if "_fold" not in _CALLABLE:
        numba.extending.register_jitable(fastmath=FLAGS)(_fold)
        _CALLABLE.add("_fold")
    for function in (_rows, clean, spread_of, std_of, combine_rows):
        if function.__name__ not in _CALLABLE:
            numba.extending.register_jitable(function)
            _CALLABLE.add(function.__name__)


def spread_of(total: float, squares: float, size: int) -> float:
    """A chunk's sum of squares around its mean, from its two sums (E[x^2] -
    mean^2, times the size; see :func:`clean` for when it cannot be trusted)."""
    return squares - total * total / size


def clean(total: float, squares: float, spread: float) -> bool:
    """Whether a chunk's row can be combined as it is: its sums are finite
    (with a NaN or an infinity numpy's min and max are taken: the kernel's
    keys put a NaN at either end), and its spread cannot have cancelled
    (E[x^2] - mean^2 loses digits when |mean| > std: it is taken again
    around the chunk's mean); an all-zero chunk is exact as it is."""
    exact = spread > 0.5 * squares or (squares == 0.0 and spread == 0.0)
    return exact and math.isfinite(total + squares)


def combine_rows(table: np.ndarray, n: int, chunk: int) -> tuple[float, float, float, float, float]:
    """L2 norm, mean, std, min and max of ``n`` values from their chunks'
    rows (columns ``ROW``): the spreads add with each chunk's offset from
    the mean (Chan et al.), so chunks far from each other lose nothing; a
    NaN or an infinity stays as numpy gives it. Plain Python, compiled by
    numba when it is installed (the same arithmetic either way)."""
    count = table.shape[0]
    total = 0.0
    for c in range(count):
        total += table[c, 0]
    mean = total / n
    squares, spread, low, high = 0.0, 0.0, math.inf, -math.inf
    for c in range(count):
        size = min(chunk, n - c * chunk)
        offset = table[c, 0] / size - mean
        spread += table[c, 2] + size * (offset * offset)
        squares += table[c, 1]
        lo, hi = table[c, 3], table[c, 4]
        low = lo if lo < low or lo != lo else low   # a NaN stays, as numpy's min keeps it
        high = hi if hi > high or hi != hi else high
    return math.sqrt(squares), mean, std_of(spread / n), low, high


def std_of(var: float) -> float:
    """The square root of a variance; a rounding leftover below 0 is 0, NaN stays NaN."""
    return var if math.isnan(var) else math.sqrt(max(var, 0.0))


def _rows(x, chunk, first, last, table):  # type: ignore[no-untyped-def]  # compiled by numba
    n = x.size
    ok = True
    for c in range(first, last):
        part = x[c * chunk:min(n, (c + 1) * chunk)]
        total, squares, low, high = _fold(part)
        spread = spread_of(total, squares, part.size)
        table[c, 0] = total
        table[c, 1] = squares
        table[c, 2] = spread
        table[c, 3] = low
        table[c, 4] = high
        ok = clean(total, squares, spread) and ok
    return ok


def _whole(x, chunk, table):  # type: ignore[no-untyped-def]  # compiled by numba
    ok = _rows(x, chunk, 0, table.shape[0], table)
    norm, mean, std, low, high = combine_rows(table, x.size, chunk)
    return norm, mean, std, low, high, ok


def _int_view(x: np.ndarray) -> tuple[np.ndarray, Any, Any]:
    """``(bits, shift, low_bits)``: ``x`` read as signed integers of its
    width, the shift that gives a negative one's sign in every bit, and
    the mask of its lower bits. Compiled code only: numba picks the
    integer width from ``x``'s dtype when it compiles the kernel."""
    raise NotImplementedError("only inside the compiled kernel")


def _int_view_for(x):  # type: ignore[no-untyped-def]  # numba compares its signature with the lambdas'
    """numba's implementation of :func:`_int_view` for the array type ``x``."""
    if x.dtype.bitwidth == 32:
        return lambda x: (x.view(np.int32), np.int32(31), np.int32(0x7FFFFFFF))
    return lambda x: (x.view(np.int64), np.int64(63), np.int64(0x7FFFFFFFFFFFFFFF))


def _fold(x):  # type: ignore[no-untyped-def]  # compiled by numba: no annotations
    bits, shift, lower = _int_view(x)
    n = x.size
    total = 0.0
    squares = 0.0
    low = lower      # keys: the largest, then the smallest integer of the width
    high = ~lower
    end = n - n % BLOCK
    zero = x.dtype.type(0)
    for start in range(0, end, BLOCK):
        s = zero
        q = zero
        for i in range(start, start + BLOCK):
            v = x[i]
            s += v
            q += v * v
            b = bits[i]
            key = b ^ ((b >> shift) & lower)   # a negative float's lower bits flipped
            low = min(low, key)
            high = max(high, key)
        total += s
        squares += q
    for i in range(end, n):
        v = x[i]
        total += v
        squares += v * v
        b = bits[i]
        key = b ^ ((b >> shift) & lower)
        low = min(low, key)
        high = max(high, key)
    ends = np.empty(2, bits.dtype)
    ends[0] = low ^ ((low >> shift) & lower)   # the same flip maps a key back
    ends[1] = high ^ ((high >> shift) & lower)
    floats = ends.view(x.dtype)
    return total, squares, floats[0], floats[1]
