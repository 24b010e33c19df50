"""The fast data path: whole batches from a random-access source.

MindSpore's per-sample ``GeneratorDataset(...).batch()`` costs ~60 us per
sample; a source whose items are whole batches is 2-8x faster. The
framework therefore shuffles and batches itself, per epoch, from the seed,
and still hands ``Model`` a ``GeneratorDataset``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence
import logging

import numpy as np

from .._mindspore import tuple_iterator_dataset
from ..errors import DataError

if TYPE_CHECKING:
    from mindspore.dataset import GeneratorDataset

logger = logging.getLogger(__name__)


def as_arrays(source: Any, columns: Sequence[str], split: str) -> tuple[Any, ...]:
    """The columns of ``source(split)`` as equal-length numpy arrays.

    Accepts a tuple/list of arrays or a random-access source whose items
    are tuples (one value per column). float64 becomes float32 and int64
    becomes int32 (MindSpore networks are float32; sparse labels int32).
    """
    if isinstance(source, (tuple, list)):
        # a memory-mapped array stays one: its batches are converted when read
        arrays = [a if isinstance(a, np.memmap) else np.asarray(a) for a in source]
    elif hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        arrays = _stack_items(source, len(columns), split)
    else:
        raise DataError(f"source({split!r}) must return a tuple of arrays or an object with "
                        f"__getitem__ and __len__. Received: {type(source).__name__}")
    _check_columns(arrays, columns, split)
    for a, name in zip(arrays, columns):
        if isinstance(a, np.memmap) and a.dtype.kind not in "fiub":
            convert_column(a[:0], name, split)  # the same message as for arrays
    return tuple(a if isinstance(a, np.memmap) else convert_column(a, name, split)
                 for a, name in zip(arrays, columns))


def _stack_items(source: Any, width: int, split: str) -> list[Any]:
    items = [source[i] for i in range(len(source))]
    if not items:
        raise DataError(f"source({split!r}) is empty")
    if any(not isinstance(it, (tuple, list)) or len(it) != width for it in items[:1]):
        raise DataError(f"source({split!r})[0] must be a tuple of {width} values (one per "
                        f"column). Received: {type(items[0]).__name__}")
    try:
        return [np.stack([np.asarray(it[k]) for it in items]) for k in range(width)]
    except ValueError as exc:
        raise DataError(f"source({split!r}) items differ in shape: {exc}") from None


def _check_columns(arrays: Sequence[Any], columns: Sequence[str], split: str) -> None:
    if len(arrays) != len(columns):
        raise DataError(f"source({split!r}) returned {len(arrays)} arrays but the experiment "
                        f"declares {len(columns)} columns {tuple(columns)}")
    lengths = {name: (len(a) if a.ndim else 0) for name, a in zip(columns, arrays)}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} has {v}" for k, v in lengths.items())
        raise DataError(f"source({split!r}) returned arrays of different lengths: {shown}")
    if not next(iter(lengths.values()), 0):
        raise DataError(f"source({split!r}) is empty")


def convert_column(array: Any, name: str, split: str) -> Any:
    """float64 -> float32, int64 -> int32; DataError for a dtype a network cannot take."""
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype == np.int64:
        return array.astype(np.int32)
    if array.dtype.kind not in "fiub":
        raise DataError(f"column {name!r} of source({split!r}) has dtype {array.dtype}; "
                        "accepted: float32/float64/float16, integers, bool")
    return array


class BatchSource:
    """Random-access source whose item ``i`` is the i-th batch of an epoch.

    The sample order of epoch ``e`` is a permutation drawn from
    ``(seed, e)``, so it is the same in a resumed run. MindSpore calls
    ``__getitem__`` once per batch in order (one worker, no shuffle), so the
    call count tells the epoch. With ``num_shards`` > 1 each rank takes every
    ``num_shards``-th batch of the same permutation; all ranks get the same
    number of batches (collectives must not wait on a rank with one less).

    Args:
        arrays: equal-length column arrays.
        batch_size: samples per item.
        shuffle: reshuffle every epoch (train) or keep order (eval).
        seed: shuffle seed.
        start_epoch: 0-based epoch of the first call (resume).
        num_shards, shard_id: data-parallel sharding.
        drop_last: drop the incomplete last batch (keeps shapes static).
        first_batch: start ``start_epoch`` at this batch and stop at its end
            (the rest of an epoch, for a resume from a mid-epoch checkpoint).
        epoch_data: ``epoch_data(e)`` gives the columns of 0-based epoch ``e``
            (a curriculum), asked once as each epoch starts: the epoch comes
            from this source's own count, never a global, since MindSpore's
            pipeline may read ahead into the next epoch. Every epoch has as
            many samples as ``arrays`` (the steps of an epoch are fixed).
    """

    def __init__(self, arrays: Sequence[Any], batch_size: int, shuffle: bool = True, seed: int = 0,
                 start_epoch: int = 0, num_shards: int = 1, shard_id: int = 0,
                 drop_last: bool = True, first_batch: int = 0,
                 epoch_data: Callable[[int], Sequence[Any]] | None = None) -> None:
        self.epoch_data = epoch_data
        if epoch_data is not None:
            arrays = epoch_data(int(start_epoch))
        self.arrays = tuple(arrays)
        self.n = len(self.arrays[0])
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.start_epoch = int(start_epoch)
        self.num_shards, self.shard_id = int(num_shards), int(shard_id)
        self.first_batch = int(first_batch)
        self._local = len(shard_batches(self.n, self.batch_size, self.num_shards, self.shard_id,
                                        drop_last, self.first_batch))
        self._take = getattr(self.arrays[0], "take_rows", None) if len(self.arrays) == 1 \
            else None
        self._calls = 0
        self._epoch: int | None = None
        self._order = None

    def __len__(self) -> int:
        return self._local

    def __getitem__(self, index: int) -> Any:
        epoch = self.start_epoch + self._calls // self._local
        self._calls += 1
        if epoch != self._epoch:
            self._epoch, self._order = epoch, self.order(epoch)
            if self.epoch_data is not None and self._calls > 1:
                self._use_epoch(epoch)
        b = (index + self.first_batch) * self.num_shards + self.shard_id
        rows = slice(b * self.batch_size, (b + 1) * self.batch_size)
        if self._order is not None:
            rows = self._order[rows]
        if self._take is not None:  # a lazy source: read these items only
            return self._take(rows)
        return tuple(_rows_of(a, rows) for a in self.arrays)

    def _use_epoch(self, epoch: int) -> None:
        """Switch to the columns of ``epoch`` (a curriculum), checking their size."""
        assert self.epoch_data is not None  # a curriculum's source
        arrays = tuple(self.epoch_data(epoch))
        if len(arrays[0]) != self.n:
            raise DataError(f"source('train', epoch={epoch + 1}) has {len(arrays[0])} samples; "
                            f"every epoch of a curriculum must have {self.n} (the first one's: "
                            "the steps of an epoch are fixed)")
        self.arrays = arrays
        self._take = getattr(arrays[0], "take_rows", None) if len(arrays) == 1 else None

    def order(self, epoch: int) -> Any:
        """The sample permutation of a 0-based epoch (None: natural order)."""
        if not self.shuffle:
            return None
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)


def shard_batches(n: int, batch_size: int, num_shards: int = 1, shard_id: int = 0,
                  drop_last: bool = True, first_batch: int = 0) -> list[int]:
    """The global batch numbers of one rank in an epoch of ``n`` samples: every
    ``num_shards``-th from ``shard_id``, the same count on every rank (collectives
    must not wait on a rank with one less), from its ``first_batch``-th on."""
    global_batches = n // batch_size if drop_last else -(-n // batch_size)
    local = global_batches // num_shards
    if local < 1:
        raise DataError(f"{n} samples make no batch of {batch_size} "
                        f"for each of {num_shards} worker(s)")
    if not 0 <= first_batch < local:
        raise ValueError(f"first_batch must be in [0, {local}). Received: first_batch={first_batch}")
    return [i * num_shards + shard_id for i in range(first_batch, local)]


def _rows_of(array: Any, rows: Any) -> Any:
    """Rows of a column; those of a memory-mapped one converted as they are read."""
    if isinstance(array, np.memmap):
        return convert_column(np.asarray(array[rows]), "column", "memory-mapped")
    return array[rows]


def make_dataset(arrays: Sequence[Any], columns: Sequence[str], batch_size: int, shuffle: bool,
                 seed: int, start_epoch: int = 0, num_shards: int = 1, shard_id: int = 0,
                 drop_last: bool = True, first_batch: int = 0,
                 epoch_data: Callable[[int], Sequence[Any]] | None = None) -> GeneratorDataset:
    """A ``GeneratorDataset`` over a :class:`BatchSource` (one worker: in-memory
    data with more workers is up to 400x slower).

    Its tuple iterator (what ``Model.train`` reads without sink mode) hands
    the source's batches to MindSpore directly; every other use (sink mode,
    dataset ops chained on it, dict iterators) goes through MindSpore's own
    pipeline, which calls the same source the same way. ``epoch_data``: a
    curriculum's columns by 0-based epoch (see :class:`BatchSource`).
    """
    source = BatchSource(arrays, batch_size, shuffle, seed, start_epoch,
                         num_shards, shard_id, drop_last, first_batch, epoch_data)
    return _batch_dataset_class()(source, column_names=list(columns), shuffle=False,
                                  num_parallel_workers=1, python_multiprocessing=False)


_BATCH_DATASET = None


def _batch_dataset_class() -> Any:
    """``BatchDataset``, a GeneratorDataset subclass whose plain tuple iterator
    skips the C++ pipeline (see ``_mindspore.tuple_iterator_dataset``),
    defined on first use so that importing this module does not import
    mindspore.

    For in-memory batches the pipeline only adds cost: a worker thread that
    competes with training for the GIL, two conversions of every column
    (~35 us each) and a queue. ``create_tuple_iterator()`` with its default
    columns returns a plain iterator over the same source in the same order
    (one pass per epoch, ``StopIteration`` at each epoch end, like
    MindSpore's), yielding ``Tensor``s that own their memory.
    """
    global _BATCH_DATASET
    if _BATCH_DATASET is None:
        _BATCH_DATASET = tuple_iterator_dataset(_BatchIterator)
    return _BATCH_DATASET


class _BatchIterator:
    """Epochs of a :class:`BatchSource` as lists of Tensors (or arrays)."""

    def __init__(self, source: BatchSource, num_epochs: int | None = -1,
                 output_numpy: bool = False) -> None:
        from mindspore import Tensor
        self._from_numpy = Tensor.from_numpy
        self.source, self.output_numpy = source, bool(output_numpy)
        self.num_epochs = num_epochs if num_epochs is not None and num_epochs > 0 else None
        self._len = len(source)
        self._i = 0
        self._epoch = 0

    def __iter__(self) -> _BatchIterator:
        return self

    def __next__(self) -> list[Any]:
        if self._i == self._len:
            self._i = 0          # the next call starts the next epoch
            self._epoch += 1
            raise StopIteration
        if self.num_epochs is not None and self._epoch >= self.num_epochs:
            raise StopIteration
        item = self.source[self._i]
        self._i += 1
        if self.output_numpy:
            return [np.require(a, requirements=["C", "O"]) for a in item]
        # C-contiguous and owning its memory (a slice is copied): the Tensor
        # shares it, as MindSpore's own iterator does with do_copy=False
        return [self._from_numpy(np.require(a, requirements=["C", "O"])) for a in item]
