"""The statistics kernel of large tracked parameters against a float64 reference."""
import numpy as np
import pytest

from mindexp.callbacks._stats import CHUNK, statistics


def _reference(raw):
    exact = raw.astype(np.float64)
    return [np.linalg.norm(exact), exact.mean(), exact.std(), exact.min(), exact.max()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("data", [
    # a spread a million times smaller than the mean: E[x^2] - mean^2 loses every digit
    1e4 + np.random.default_rng(3).normal(0.0, 1e-2, 3 * CHUNK + 17),
    # chunks with different means: the combination across chunks must not cancel either
    np.repeat([5e3, 5e3 + 1e-1, 5e3 - 2e-1, 5e3], CHUNK // 2)
    + np.random.default_rng(4).normal(0.0, 1e-3, 2 * CHUNK),
], ids=["spread-1e-6-of-mean", "chunks-with-different-means"])
def test_statistics_of_badly_conditioned_arrays_match_float64(data, dtype):
    raw = data.astype(dtype)
    assert statistics(raw) == pytest.approx(_reference(raw), rel=1e-6)


def test_statistics_make_no_temporary_the_size_of_the_parameter():
    import tracemalloc
    raw = np.random.default_rng(5).normal(0.0, 1.0, 17 * CHUNK).astype(np.float32)
    tracemalloc.start()
    statistics(raw)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < raw.nbytes / 4


@pytest.mark.parametrize("n", [CHUNK + 1, 3 * CHUNK - 7, 5 * CHUNK])
def test_helper_threads_give_the_same_statistics_bit_for_bit(n):
    data = np.random.default_rng(n).normal(3.0, 0.5, n).astype(np.float32)
    data[n // 2] = np.nan if n > 4 * CHUNK else data[n // 2]   # NaN is a value too
    one = statistics(data, workers=1)
    for workers in (2, 4):
        assert np.array_equal(statistics(data, workers=workers), one, equal_nan=True)


def test_the_thread_count_is_the_faster_of_one_and_many_after_the_trials():
    from mindexp.callbacks.parameter_tracker import _ThreadChoice
    choice = _ThreadChoice(2)
    seconds = {1: 0.004, 2: 0.002}
    while choice.chosen is None:
        workers = choice.next()
        choice.record(workers, seconds[workers])
    assert choice.chosen == 2 and choice.next() == 2
    slow_helpers = _ThreadChoice(2)   # a busy machine: helpers cost more than they save
    while slow_helpers.chosen is None:
        workers = slow_helpers.next()
        slow_helpers.record(workers, {1: 0.004, 2: 0.016}[workers])
    assert slow_helpers.chosen == 1
    assert _ThreadChoice(1).chosen == 1
