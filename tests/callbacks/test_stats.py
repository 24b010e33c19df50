"""The statistics kernel of large tracked parameters against a float64 reference."""
import importlib.util
import logging
import os

import numpy as np
import pytest

from mindexp.callbacks import _fused
from mindexp.callbacks._stats import CHUNK, statistics


def _reference(raw):
    exact = raw.astype(np.float64)
    return [np.linalg.norm(exact), exact.mean(), exact.std(), exact.min(), exact.max()]


numba_missing = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                   reason="numba (the fast extra) is not installed")
# each test of the statistics runs through the numba kernel (the fast extra) and numpy's passes
KERNELS = [pytest.param(True, id="fused", marks=numba_missing), pytest.param(False, id="numpy")]


@pytest.mark.parametrize("fused", KERNELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("data", [
    # a spread a million times smaller than the mean: E[x^2] - mean^2 loses every digit
    1e4 + np.random.default_rng(3).normal(0.0, 1e-2, 3 * CHUNK + 17),
    # chunks with different means: the combination across chunks must not cancel either
    np.repeat([5e3, 5e3 + 1e-1, 5e3 - 2e-1, 5e3], CHUNK // 2)
    + np.random.default_rng(4).normal(0.0, 1e-3, 2 * CHUNK),
], ids=["spread-1e-6-of-mean", "chunks-with-different-means"])
def test_statistics_of_badly_conditioned_arrays_match_float64(data, dtype, fused):
    raw = data.astype(dtype)
    assert statistics(raw, fused=fused) == pytest.approx(_reference(raw), rel=1e-6)


@pytest.mark.parametrize("fused", KERNELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_statistics_of_weights_match_float64_to_a_millionth_of_their_scale(dtype, fused):
    # like a trained layer's weights: a mean near 0, so the mean is judged against the spread
    raw = np.random.default_rng(6).normal(4e-5, 0.05, 4 * CHUNK + 4097).astype(dtype)
    norm, mean, std, low, high = statistics(raw, fused=fused)
    ref = _reference(raw)
    assert [norm, std, low, high] == pytest.approx([ref[0], ref[2], ref[3], ref[4]], rel=1e-6)
    assert abs(mean - ref[1]) < 1e-6 * ref[2]


def _assert_close_to_float64(stats, raw):
    # a mean near 0 is judged against the spread, as a weight's is: its relative error is
    # cancellation, which the summation order (numba's vector width, a machine's) decides
    norm, mean, std, low, high = stats
    ref = _reference(raw)
    assert [norm, std, low, high] == pytest.approx([ref[0], ref[2], ref[3], ref[4]], rel=1e-6)
    assert abs(mean - ref[1]) < 1e-6 * ref[2]


@numba_missing
def test_the_fast_extra_reads_each_chunk_once_in_the_compiled_kernels(monkeypatch):
    from mindexp.callbacks import _stats
    fast, calls = _fused.kernels(), []
    spy = fast._replace(
        whole=lambda x, chunk, table: calls.append(("whole", x.size)) or fast.whole(x, chunk, table),
        rows=lambda x, chunk, first, last, table: calls.append(("rows", first, last))
        or fast.rows(x, chunk, first, last, table))
    monkeypatch.setattr(_stats, "kernels", lambda: spy)
    monkeypatch.setattr(_stats, "_reduce_chunk", lambda chunk: pytest.fail("numpy's passes ran"))
    monkeypatch.setattr(_stats, "_centred_squares", lambda *a: pytest.fail("a chunk was read again"))
    raw = np.random.default_rng(7).normal(0.0, 1.0, 3 * CHUNK + 5).astype(np.float32)
    _assert_close_to_float64(statistics(raw, workers=1), raw)
    assert calls == [("whole", raw.size)]   # one call for the whole parameter
    calls.clear()
    _assert_close_to_float64(statistics(raw, workers=2), raw)
    assert sorted(calls) == [("rows", j, j + 1) for j in range(4)]   # a call per chunk, shared


@numba_missing
def test_a_zero_parameter_is_read_once(monkeypatch):
    # zeros (a LoRA B matrix, a zero-initialised layer): E[x^2] - mean^2 = 0 is exact
    from mindexp.callbacks import _stats
    monkeypatch.setattr(_stats, "_row_again", lambda *a: pytest.fail("a chunk was read again"))
    assert statistics(np.zeros(3 * CHUNK + 1, np.float32), workers=1) == (0.0, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.slow
@numba_missing
def test_the_kernels_load_from_numbas_cache_in_the_next_process(tmp_path):
    # each run of a training is a new process: compiling there again would cost seconds
    import json
    import subprocess
    import sys
    probe = ("import json; from mindexp.callbacks import _fused; fast = _fused.kernels(); "
             "print(json.dumps([[sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values())]"
             " for f in fast]))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def counts():
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              text=True, timeout=300, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    first, second = counts(), counts()
    assert all(hits == 0 and misses > 0 for hits, misses in first), first
    assert all(hits > 0 and misses == 0 for hits, misses in second), second


@numba_missing
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernels_min_and_max_are_numpys_for_every_kind_of_float(dtype):
    # min and max come from the floats' bits read as integers: signs, zeros, subnormals,
    # the largest and smallest, infinities, in every position of a vector lane
    info = np.finfo(dtype)
    edges = np.array([0.0, -0.0, info.tiny, -info.tiny, info.smallest_subnormal,
                      -info.smallest_subnormal, info.max, -info.max, np.inf, -np.inf, 1.0, -1.0], dtype)
    fast, rng = _fused.kernels(), np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(1, 3 * _fused.BLOCK))
        raw = (rng.normal(size=n) * 10.0 ** float(rng.integers(-30, 30))).astype(dtype)
        picked = rng.integers(0, n, int(rng.integers(0, 6)))
        raw[picked] = rng.choice(edges, picked.size)
        table = np.empty((1, len(_fused.ROW)))
        fast.rows(raw, n, 0, 1, table)
        assert (table[0, 3], table[0, 4]) == (raw.min(), raw.max()), (trial, table[0], raw.min(), raw.max())


@pytest.mark.parametrize("fused", KERNELS)
def test_a_diverged_parameter_gets_numpys_nan_and_infinities(fused):
    raw = np.random.default_rng(8).normal(0.0, 1.0, 4 * CHUNK).astype(np.float32)
    raw[CHUNK + 3] = np.inf
    assert statistics(raw, fused=fused)[0] == np.inf
    assert statistics(raw, fused=fused)[3:] == (pytest.approx(raw.min()), np.inf)
    raw[2 * CHUNK + 9] = -np.inf
    assert statistics(raw, fused=fused)[3:] == (-np.inf, np.inf)
    raw[3 * CHUNK + 1] = np.nan   # the kernel's keys put a NaN at either end: numpy's min and max keep it
    norm, mean, std, low, high = statistics(raw, fused=fused)
    assert all(np.isnan([mean, std, low, high])), (norm, mean, std, low, high)


def test_statistics_make_no_temporary_the_size_of_the_parameter():
    import tracemalloc
    raw = np.random.default_rng(5).normal(0.0, 1.0, 17 * CHUNK).astype(np.float32)
    tracemalloc.start()
    statistics(raw)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < raw.nbytes / 4


@pytest.mark.parametrize("fused", KERNELS)
@pytest.mark.parametrize("n", [CHUNK + 1, 3 * CHUNK - 7, 5 * CHUNK])
def test_helper_threads_give_the_same_statistics_bit_for_bit(n, fused):
    data = np.random.default_rng(n).normal(3.0, 0.5, n).astype(np.float32)
    data[n // 2] = np.nan if n > 4 * CHUNK else data[n // 2]   # NaN is a value too
    if n > CHUNK + 1:   # chunks made again: one of nearly equal values, one all zeros
        base = np.float32(470.76)
        data[:CHUNK] = base + np.random.default_rng(1).integers(-1, 2, CHUNK) * np.spacing(base)
        data[CHUNK:2 * CHUNK] = 0.0
    one = statistics(data, workers=1, fused=fused)
    for workers in (2, 4):
        assert np.array_equal(statistics(data, workers=workers, fused=fused), one, equal_nan=True)
    for layout in (data.astype(np.float64), np.repeat(data, 2)[::2]):   # converted, strided
        assert np.array_equal(statistics(layout, workers=4, fused=fused),
                              statistics(layout, workers=1, fused=fused), equal_nan=True)


def test_the_thread_count_comes_from_the_sizes(monkeypatch):
    from mindexp.callbacks import parameter_tracker
    monkeypatch.setattr(parameter_tracker, "default_workers", lambda: 2)
    assert parameter_tracker.stats_threads([4 * CHUNK - 1, 10]) == 1
    assert parameter_tracker.stats_threads([4 * CHUNK, 10]) == 2
    assert parameter_tracker.stats_threads([]) == 1


@pytest.mark.parametrize("fused", KERNELS)
@pytest.mark.parametrize("centre", [0.1, 470.76])
@pytest.mark.parametrize("n", [CHUNK - 100, 3 * CHUNK + 11], ids=["one-chunk", "chunks"])
def test_nearly_equal_values_keep_their_spread(n, centre, fused):
    # values one unit in the last place apart: a float32 sum of them is tens of units
    # off, and a variance taken around that mean cancels (std 1e-4 off, or below 0)
    base = np.float32(centre)
    steps = np.random.default_rng(9).integers(-1, 2, n).astype(np.float32)
    raw = (base + steps * np.spacing(base)).astype(np.float32)
    std = statistics(raw, fused=fused)[2]
    exact = raw.astype(np.float64).std()
    assert std >= 0 and abs(std - exact) < 1e-6 * exact, (std, exact)


@pytest.mark.parametrize("fused", KERNELS)
def test_float16_and_read_only_parameters_match_float64(fused):
    half = np.random.default_rng(10).normal(0.5, 0.25, 2 * CHUNK + 3).astype(np.float16)
    assert statistics(half, fused=fused) == pytest.approx(_reference(half), rel=1e-6)
    frozen = half.astype(np.float32)
    frozen.setflags(write=False)
    assert statistics(frozen, fused=fused) == pytest.approx(_reference(frozen), rel=1e-6)


@numba_missing
def test_the_kernels_are_compiled_once_per_dtype_whatever_the_array():
    fast = _fused.kernels()
    compiled = [len(f.signatures) for f in fast]   # at train begin: float32 and float64
    for dtype in (np.float16, np.float32, np.float64):
        raw = np.linspace(-1.0, 1.0, 6 * CHUNK).astype(dtype)[::2]   # strided, and then read-only
        for workers in (1, 2):
            statistics(raw, workers=workers)
            frozen = np.ascontiguousarray(raw)
            frozen.setflags(write=False)
            statistics(frozen, workers=workers)
    assert [len(f.signatures) for f in fast] == compiled   # nothing compiled inside a step
    assert len(fast.whole.signatures) == 2


@numba_missing
def test_a_kernel_numba_cannot_build_leaves_the_work_to_numpy(monkeypatch, caplog):
    import numba

    def broken(**options):
        raise EOFError("a truncated cache file")
    monkeypatch.setattr(numba, "njit", broken)
    with caplog.at_level(logging.WARNING):
        assert _fused._compile_kernels() is None
    assert "numpy computes them" in caplog.text and "EOFError" in caplog.text
