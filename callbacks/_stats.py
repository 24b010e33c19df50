"""Statistics of large tracked parameters (numpy only)."""
from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

# five float64 arrays (or floats): L2 norm, mean, std, min, max
Array = npt.NDArray[np.float64]

STATS = ("norm", "mean", "std", "min", "max")
# Parameters with more elements than this have their statistics computed at
# the step (on the host from the parameter's memory, or in the train step's
# graph); smaller ones are copied and summarised per block of steps.
RAW_MAX = 1024
# What TrainStep(param_stats=...) returns per parameter, in this order:
# sums of d = x - shift, the shift (x's first element), min and max.
GRAPH_SUMS = ("sum_d", "sum_d2", "shift", "min", "max")
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


CHUNK = 1 << 18   # elements per pass of statistics(): 1 MB of float32, about the L2 cache (fastest here of 64k-1M)


def statistics(flat: np.ndarray, workers: int | None = None) -> tuple[float, float, float, float, float]:
    """L2 norm, mean, standard deviation, min and max of one flat array, as
    five Python floats: for a parameter large enough that its statistics
    are computed at the step, from the parameter's own memory.

    Linear in the size and without a temporary the size of the array: the
    array is read in chunks of ``CHUNK`` elements that stay in the CPU's
    cache while four reductions (sum, sum of squares, min, max) run over
    them, so memory is read about once. Each chunk's sums are exact enough
    in its own dtype (a chunk is short) and are combined in float64; the
    variance combines each chunk's centred sum of squares (Chan et al.), so
    a large mean against a small spread loses nothing across chunks, and a
    chunk whose own E[x^2] - mean^2 could cancel is recomputed around its
    mean (two passes over that cached chunk only).

    The chunks of a large array are shared with up to ``workers - 1``
    helper threads (default: the CPUs this process may use, at most
    ``MAX_WORKERS``): the hook runs between two train steps, while
    MindSpore's threads wait, and numpy's reductions release the GIL. The
    calling thread takes chunks too, so a helper that a busy machine does
    not schedule in time costs at most the chunk it took; each chunk's
    sums land in its own slot, so the results are the same bit for bit
    whatever the threads.
    """
    n = flat.size
    if n == 0:
        return (0.0,) + (float("nan"),) * 4
    with np.errstate(all="ignore"):   # a diverged step's inf and NaN are values to log
        if n <= CHUNK and flat.dtype in (np.float32, np.float64):
            return _one_chunk(flat)
        helpers = (default_workers() if workers is None else workers) - 1
        return _combine(n, *_chunk_sums(flat, helpers))


# most threads one parameter's statistics use (memory bandwidth, not cores,
# limits them beyond a few)
MAX_WORKERS = 4
_POOL: ThreadPoolExecutor | None = None


def default_workers() -> int:
    """Threads for one parameter's statistics: the CPUs this process may use, at most ``MAX_WORKERS``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(MAX_WORKERS - 1, thread_name_prefix="mindexp-stats")
    return _POOL


def _forget_pool() -> None:
    """In a forked child the parent's threads do not exist: start a new pool there."""
    global _POOL
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _one_chunk(flat: np.ndarray) -> tuple[float, float, float, float, float]:
    """:func:`statistics` of an array of one chunk, without the per-chunk tables
    (their small numpy calls cost as much as the sums here)."""
    n = flat.size
    total, squares = float(flat.sum()), float(np.dot(flat, flat))
    m2 = squares - total * total / n
    if not m2 > 0.5 * squares:   # |mean| > std: could cancel (or NaN)
        total, m2 = _centred_squares(flat, total / n, _workspace(flat.dtype)[1][:n])
        squares = m2 + total * total / n
    var = m2 / n
    std = math.sqrt(var) if var >= 0 else (0.0 if var > -1e-300 else var)
    return math.sqrt(squares), total / n, std, float(flat.min()), float(flat.max())


def _chunk_sums(flat: np.ndarray, helpers: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                             np.ndarray, np.ndarray]:
    """Per-chunk sum, sum of squares, centred sum of squares, min and max
    (float64 arrays), the chunks shared with ``helpers`` pool threads.

    The sum uses numpy's pairwise summation (about 1e-7 relative in float32
    on a chunk); the sum of squares BLAS's dot (the fastest of the four
    passes), whose float32 accumulation is as good where the values vary
    but lost 1e-5 on a chunk of nearly equal values: exactly the chunks
    whose E[x^2] - mean^2 cancels, so those get both sums again around
    their mean, exactly.
    """
    n = flat.size
    count = -(-n // CHUNK)
    out = np.empty((5, count), np.float64)
    sums, squares, m2, lows, highs = out
    kind = flat.dtype if flat.dtype in (np.float32, np.float64) else np.float32
    jobs = iter(range(count))   # shared: next() on it is atomic under the GIL

    def work() -> None:
        buffer = _workspace(kind)[0]
        with np.errstate(all="ignore"):   # per thread
            for j in jobs:
                chunk = _as_kind(flat[j * CHUNK:(j + 1) * CHUNK], buffer)
                sums[j] = chunk.sum()
                squares[j] = np.dot(chunk, chunk)
                lows[j] = chunk.min()
                highs[j] = chunk.max()
    helping = [_pool().submit(work) for _ in range(min(helpers, count - 1, MAX_WORKERS - 1))]
    work()
    for done in helping:
        done.result()
    buffer, squared = _workspace(kind)
    sizes = _chunk_sizes(n, count)
    m2[:] = squares - sums * sums / sizes
    for j in np.flatnonzero(~(m2 > 0.5 * squares)):   # |mean| > std: could cancel (or NaN)
        chunk = _as_kind(flat[j * CHUNK:(j + 1) * CHUNK], buffer)
        sums[j], m2[j] = _centred_squares(chunk, sums[j] / sizes[j], squared[:chunk.size])
        squares[j] = m2[j] + sums[j] * sums[j] / sizes[j]
    return sums, squares, m2, lows, highs


_WORKSPACE = threading.local()


def _workspace(kind: npt.DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    """Two chunk-sized buffers of dtype ``kind``, kept per thread: a fresh
    1 MB array per call is a fresh mapping, whose page faults cost more
    than the sums."""
    spaces = _WORKSPACE.__dict__.setdefault("spaces", {})
    key = np.dtype(kind).str
    if key not in spaces:
        spaces[key] = (np.empty(CHUNK, kind), np.empty(CHUNK, kind))
    return spaces[key]


def _as_kind(chunk: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """``chunk`` itself when it has the buffer's dtype, else a converted copy in ``buffer``."""
    if chunk.dtype == buffer.dtype:
        return chunk
    part = buffer[:chunk.size]
    np.copyto(part, chunk)
    return part


def _chunk_sizes(n: int, count: int) -> np.ndarray:
    sizes = np.full(count, float(CHUNK))
    sizes[-1] = n - CHUNK * (count - 1)
    return sizes


def _centred_squares(chunk: np.ndarray, mean: float, work: np.ndarray) -> tuple[float, float]:
    """``(sum, sum((x - sum / n)^2))`` of one chunk, both refined around an
    approximate ``mean`` (in ``work``, a chunk-sized buffer): the differences
    from a close mean are exact, so neither sum cancels."""
    shift = chunk.dtype.type(mean)
    d = np.subtract(chunk, shift, out=work)
    offset = float(d.sum())
    centred = float(np.multiply(d, d, out=work).sum()) - offset * offset / chunk.size
    return float(shift) * chunk.size + offset, centred


def _combine(n: int, sums: np.ndarray, squares: np.ndarray, m2: np.ndarray,
             lows: np.ndarray, highs: np.ndarray) -> tuple[float, float, float, float, float]:
    """The five statistics of the whole array from its chunks' (float64)."""
    mean = float(sums.sum()) / n
    sizes = _chunk_sizes(n, sums.size)
    spread = float(m2.sum() + np.dot(sizes, (sums / sizes - mean) ** 2))
    var = spread / n
    std = math.sqrt(var) if var >= 0 else (0.0 if var > -1e-300 else var)
    return (math.sqrt(float(squares.sum())), mean, std, float(lows.min()), float(highs.max()))


def from_graph_sums(sums: np.ndarray, n: int) -> tuple[float, float, float, float, float]:
    """:func:`statistics` of an ``n``-element parameter from the float32 sums
    a train step computed in its graph (one row of ``TrainStep``'s
    ``param_stats`` output, see ``GRAPH_SUMS``).

    The sums are of the differences from the parameter's first element, so
    a mean far larger than the spread does not cancel the variance;
    norm^2 = n (var + mean^2) adds two non-negative terms. Float32
    accumulation in the graph: about 1e-6 relative, against float64 on the
    host.
    """
    sum_d, sum_d2, shift, low, high = (float(v) for v in sums)
    mean_d = sum_d / n
    var = max(sum_d2 / n - mean_d * mean_d, 0.0)   # NaN stays NaN (a diverged step)
    mean = shift + mean_d
    return math.sqrt(n * (var + mean * mean)), mean, math.sqrt(var), low, high
