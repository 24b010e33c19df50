"""Statistics of large tracked parameters (numpy; numba's one pass with the ``fast`` extra)."""
from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from ._fused import ROW, Kernels, clean, combine_rows, kernels, spread_of, std_of

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


def statistics(flat: np.ndarray, workers: int | None = None,
               fused: bool = True) -> tuple[float, float, float, float, float]:
    """L2 norm, mean, standard deviation, min and max of one flat array, as
    five Python floats: for a parameter large enough that its statistics
    are computed at the step, from the parameter's own memory.

    Linear in the size and without a temporary the size of the array: the
    array is read in chunks of ``CHUNK`` elements that stay in the CPU's
    cache while four reductions (sum, sum of squares, min, max) run over
    them, so memory is read about once. With numba (the ``fast`` extra) and
    ``fused``, one compiled pass computes all four (``_fused``); without,
    four numpy passes. Each chunk's sums are exact enough in its own dtype
    (a chunk is short) and are combined in float64 (``_fused.combine_rows``):
    the variance combines each chunk's centred sum of squares (Chan et
    al.), so a large mean against a small spread loses nothing across
    chunks, and a chunk whose own E[x^2] - mean^2 could cancel is
    recomputed around its mean (two passes over that cached chunk only).

    The chunks of a large array are shared with up to ``workers - 1``
    helper threads (default: the CPUs this process may use, at most
    ``MAX_WORKERS``): the hook runs between two train steps, while
    MindSpore's threads wait, and the kernels and numpy's reductions
    release the GIL. The calling thread takes chunks too, so a helper that
    a busy machine does not schedule in time costs at most the chunk it
    took; each chunk's sums land in their own row, so the results are the
    same bit for bit whatever the threads.
    """
    n = flat.size
    if n == 0:
        return (0.0,) + (float("nan"),) * 4
    if n <= CHUNK and _kind_of(flat.dtype) == flat.dtype:
        with np.errstate(all="ignore"):   # a diverged step's inf and NaN are values to log
            return _one_chunk(flat)
    helpers = (default_workers() if workers is None else workers) - 1
    fast = kernels() if fused else None
    table = np.empty((-(-n // CHUNK), len(ROW)))
    if fast is not None and helpers == 0 and _direct(flat):
        # one call for the whole array: after a train step each Python or numpy
        # call around the kernel costs ~10 us (their code is out of cache)
        norm, mean, std, low, high, ok = fast.whole(flat, CHUNK, table)
        if ok:
            return norm, mean, std, low, high
    else:
        _fill_rows(flat, table, helpers, fast)
    with np.errstate(all="ignore"):   # a diverged step's inf and NaN are values to log
        _fix_rows(flat, table)
        return (fast.combine if fast is not None else combine_rows)(table, n, CHUNK)


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
    """:func:`statistics` of an array of one chunk, numpy's passes without a
    table (its calls would cost as much as the sums here; numba is not
    imported for a run without larger parameters)."""
    n = flat.size
    total, squares = _sum_chunk(flat), float(np.dot(flat, flat))
    m2 = spread_of(total, squares, n)
    if math.isfinite(total + squares) and not clean(total, squares, m2):   # could have cancelled
        total, squares, m2 = _centred_squares(flat, _workspace(flat.dtype)[1][:n])
    return math.sqrt(squares), total / n, std_of(m2 / n), float(flat.min()), float(flat.max())


Sums = tuple[float, float, float, float]   # a chunk's sum, sum of squares, min and max


def _fill_rows(flat: np.ndarray, table: np.ndarray, helpers: int = 0,
               fast: Kernels | None = None) -> None:
    """Each chunk's row of ``table`` (``_fused.ROW``: sum, sum of squares,
    spread around its mean, min, max), the chunks shared with ``helpers``
    pool threads: with numba's kernels (``fast``, the ``fast`` extra) one
    compiled pass per chunk; without, four numpy passes (the sum
    ``einsum``'s, see ``_sum_chunk``; the sum of squares BLAS's dot)."""
    count = table.shape[0]
    kind = _kind_of(flat.dtype)
    jobs = iter(range(count))   # shared: next() on it is atomic under the GIL
    # the kernels are compiled for writeable contiguous arrays: any other is copied chunk by chunk
    # (a read-only or strided array would compile another version inside a step)
    direct = _direct(flat)

    def work() -> None:
        if fast is not None and direct:   # the common case, kept short
            for j in jobs:
                fast.rows(flat, CHUNK, j, j + 1, table)
            return
        buffer = _workspace(kind)[0]
        with np.errstate(all="ignore"):   # per thread
            for j in jobs:
                chunk = flat[j * CHUNK:(j + 1) * CHUNK]
                if fast is None:
                    table[j] = _row_of(*_reduce_chunk(_as_kind(chunk, buffer)), chunk.size)
                else:
                    fast.rows(_copy_into(chunk, buffer), CHUNK, 0, 1, table[j:j + 1])
    helping = [_pool().submit(work) for _ in range(min(helpers, count - 1, MAX_WORKERS - 1))]
    work()
    for done in helping:
        done.result()


def _fix_rows(flat: np.ndarray, table: np.ndarray) -> None:
    """Each row that is not ``_fused.clean`` made again: with numpy's passes
    when its sums are not finite (their min and max are exact with a NaN),
    around the chunk's mean when its spread could have cancelled."""
    kind = _kind_of(flat.dtype)
    for j in range(table.shape[0]):
        if not clean(*table[j, :3].tolist()):
            table[j] = _row_again(flat[j * CHUNK:(j + 1) * CHUNK], kind, table[j].tolist())


def _row_of(total: float, squares: float, low: float, high: float, size: int) -> list[float]:
    """A chunk's row (``_fused.ROW``) from its four sums."""
    return [total, squares, spread_of(total, squares, size), low, high]


def _row_again(chunk: np.ndarray, kind: np.dtype, row: list[float]) -> list[float]:
    """``row``, of a chunk that was not ``clean``, made again: numpy's four
    passes for one with a NaN or an infinity; for one whose spread could
    have cancelled, its sums around its mean (its min and max stand)."""
    buffer, work = _workspace(kind)
    chunk = _as_kind(chunk, buffer)
    if not math.isfinite(row[0] + row[1]):
        return _row_of(*_reduce_chunk(chunk), chunk.size)
    return [*_centred_squares(chunk, work[:chunk.size]), row[3], row[4]]


def _direct(flat: np.ndarray) -> bool:
    """Whether the kernels can read ``flat`` itself (else it is copied chunk by chunk)."""
    return flat.dtype == _kind_of(flat.dtype) and flat.flags.c_contiguous and flat.flags.writeable


def _reduce_chunk(chunk: np.ndarray) -> Sums:
    """Sum, sum of squares, min and max of a chunk, in four numpy passes
    (the first, one thread's min, streams the chunk into its core's cache)."""
    low, high = float(chunk.min()), float(chunk.max())
    return _sum_chunk(chunk), float(np.dot(chunk, chunk)), low, high


def _sum_chunk(chunk: np.ndarray) -> float:
    """The sum of a float32 or float64 chunk in its dtype: ``einsum``'s
    vectorised loop, in a third of the time of numpy's pairwise ``sum`` here
    (17 us against 53 on 256k float32, 5 against 15 on 64k), which made the
    sum the slowest of the four passes; without BLAS (whose threads a
    matrix-vector product with ones would wake). Less exact than the
    pairwise sum on nearly equal values (4e-6 relative on a constant chunk,
    against 3e-7): exactly the chunks whose variance is taken again around
    a float64 mean (see ``_centred_squares``)."""
    return float(np.einsum("i->", chunk))


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


def _kind_of(dtype: np.dtype) -> np.dtype:
    """The dtype the sums of an array of ``dtype`` are taken in: its own for
    float32 and float64, float32 for any other (converted chunk by chunk)."""
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)


def _copy_into(chunk: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """``chunk`` converted into the start of ``buffer`` (writeable, contiguous)."""
    part = buffer[:chunk.size]
    np.copyto(part, chunk)
    return part


def _as_kind(chunk: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """``chunk`` itself when it has the buffer's dtype, else a converted copy in ``buffer``."""
    return chunk if chunk.dtype == buffer.dtype else _copy_into(chunk, buffer)


def _centred_squares(chunk: np.ndarray, work: np.ndarray) -> tuple[float, float, float]:
    """``(sum, sum of squares, sum((x - sum / n)^2))`` of one chunk, the first
    and the last refined around its mean (in ``work``, a chunk-sized buffer),
    the sum of squares from them (two non-negative terms): the differences
    from the mean rounded to the chunk's dtype are exact, so neither sum
    cancels. The mean
    is summed in float64 for this: a float32 sum of nearly equal values can
    be tens of units in the last place off, and then the refined sum of
    squares cancels again (a std 1e-3 relative off, or below 0)."""
    mean = float(np.add.reduce(chunk, dtype=np.float64)) / chunk.size
    shift = chunk.dtype.type(mean)
    d = np.subtract(chunk, shift, out=work)
    offset = float(d.sum())
    centred = float(np.multiply(d, d, out=work).sum()) - offset * offset / chunk.size
    total = float(shift) * chunk.size + offset
    return total, centred + total * total / chunk.size, centred


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
