"""The batches of one epoch of a hand-written loop (``run.batches``).

The order is the one a ``Model`` run of the same data trains on (see
docs/data.md): epoch ``e``'s sample permutation is drawn from
``(seed, e)`` (:class:`~mindexp.define.data.BatchSource` for arrays and
random-access sources, its sampler on the leaf of an unbatched MindSpore
dataset), and under msrun each rank takes every N-th batch. A resumed loop
asks for the epoch from the batch its checkpoint reached.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np

from ..define.data import BatchSource, as_arrays
from ..define.sources import SampleSource, is_ms_dataset

__all__ = ["epoch_batches"]


class _Batches:
    """The remaining batches of one epoch: ``len()`` and an iterator of tuples of Tensors."""

    def __init__(self, count: int, make: Any) -> None:
        self.count, self.make = count, make

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self.make()


def epoch_batches(data: Any, batch_size: int, shuffle: bool = True, drop_last: bool = True, *,
                  seed: int = 0, epoch: int = 0, first_batch: int = 0) -> _Batches:
    """The batches of 0-based ``epoch`` of ``data`` from ``first_batch`` on, each
    a tuple of Tensors in column order (what ``create_tuple_iterator()`` yields).

    ``data``: a tuple/list of equal-length arrays (numpy or Tensors), a
    random-access source (``__getitem__``/``__len__``, items are tuples of
    one value per column) or an unbatched MindSpore dataset of samples.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError("run.batches(..., batch_size=B): B must be an integer >= 1. "
                         f"Received: batch_size={batch_size!r}")
    shards, shard = _shards()
    if is_ms_dataset(data):
        return _dataset_batches(data, batch_size, shuffle, drop_last, seed, epoch,
                                first_batch, shards, shard)
    source = BatchSource(_arrays(data), batch_size, shuffle, seed, epoch, shards, shard,
                         drop_last, first_batch)
    return _Batches(len(source), lambda: _tensors(source))


def _arrays(data: Any) -> tuple[Any, ...]:
    """The columns of ``data`` as numpy arrays (float64 to float32, int64 to int32)."""
    if isinstance(data, (tuple, list)):
        data = [a.asnumpy() if hasattr(a, "asnumpy") else a for a in data]
        width = len(data)
    elif hasattr(data, "__getitem__") and hasattr(data, "__len__") and len(data):
        first = data[0]
        width = len(first) if isinstance(first, (tuple, list)) else 1
    else:
        raise ValueError("run.batches(data): data must be a tuple of equal-length arrays, a "
                         "random-access source (__getitem__/__len__, items are tuples) or an "
                         f"unbatched mindspore dataset. Received: {type(data).__name__}")
    return as_arrays(data, [f"column {i}" for i in range(width)], "run.batches")


def _tensors(source: BatchSource) -> Iterator[tuple[Any, ...]]:
    from mindspore import Tensor
    for i in range(len(source)):
        yield tuple(Tensor(np.ascontiguousarray(a)) for a in source[i])


def _dataset_batches(data: Any, batch_size: int, shuffle: bool, drop_last: bool, seed: int,
                     epoch: int, first_batch: int, shards: int, shard: int) -> _Batches:
    """mindexp's sampler on the dataset's leaf (the order of ``epoch``), batched."""
    from .._mindspore import fresh_pipeline
    # a copy each epoch: a pipeline node takes one consumer (one batch op) only
    source = SampleSource(lambda: fresh_pipeline(data), data.get_col_names(), "train",
                          first=data)
    batched = source.dataset(batch_size, shuffle, seed, epoch, shards, shard, drop_last,
                             first_batch)
    count = int(batched.get_dataset_size())
    return _Batches(count, lambda: batched.create_tuple_iterator(num_epochs=1))


def _shards() -> tuple[int, int]:
    """``(ranks, this rank)`` under msrun, else ``(1, 0)``."""
    from .._mindspore import MSRUN_WORKER_NUM, env_rank, under_msrun
    if not under_msrun():
        return 1, 0
    return int(os.environ.get(MSRUN_WORKER_NUM, "1") or 1), env_rank()
