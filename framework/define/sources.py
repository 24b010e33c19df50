"""Data beyond memory: what ``source(split)`` may return besides arrays.

- a **MindSpore dataset of samples** (unbatched; ``ImageFolderDataset``,
  ``MindDataset``, ``NumpySlicesDataset``, ``GeneratorDataset`` over a
  random-access source, with ``map`` operations): mindexp puts its own
  sampler on the dataset's leaf (the order of epoch ``e`` drawn from
  ``(seed, e)``, this rank's batches only, a resumed epoch from its first
  untrained batch) and batches it. ``SampleSource``.
- a **lazy random-access source** (``lazy = True``, or ``Lazy``
  around it): read one batch at a time by the in-memory fast path
  (``mindexp.define.data.BatchSource``), never stacked. ``LazyRows``.
- memory-mapped ``.npy`` arrays (``np.load(path, mmap_mode="r")``) stay
  memory-mapped: ``mindexp.define.data.as_arrays`` keeps them, batches are
  converted as they are read.

And ``Finished``: an experiment whose ``dataset(split)`` takes only
the split returns a finished (batched) dataset; a resume skips the
batches already trained.

The sample order of a dataset of samples or a lazy source is the same as
that of the same samples given as arrays (same seed, same permutation,
same sharding), so the kinds are interchangeable.
"""
import inspect
import logging
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .data import as_arrays, convert_column, shard_batches
from ..errors import DataError

if TYPE_CHECKING:
    from mindspore.dataset import Dataset

logger = logging.getLogger(__name__)

ACCEPTED = ("a tuple of arrays, a random-access source (__getitem__/__len__; lazy = True to "
            "read it from disk batch by batch), or an unbatched mindspore.dataset Dataset")


class Lazy:
    """Mark a random-access source as lazy: read batch by batch, never stacked.

    ``Lazy(source)`` is the same as setting ``lazy = True`` on the source's class.
    """

    lazy = True

    def __init__(self, source: Any) -> None:
        if not (hasattr(source, "__getitem__") and hasattr(source, "__len__")):
            raise TypeError(f"Lazy needs an object with __getitem__ and __len__. "
                            f"Received: source={type(source).__name__}")
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.source[index]


def is_lazy(source: Any) -> bool:
    """True for a random-access source marked ``lazy``."""
    return bool(getattr(source, "lazy", False)) and hasattr(source, "__getitem__") \
        and hasattr(source, "__len__")


def is_ms_dataset(source: Any) -> bool:
    """True for a ``mindspore.dataset`` Dataset (without importing mindspore otherwise)."""
    return any(c.__module__.startswith("mindspore.dataset") and c.__name__ == "Dataset"
               for c in type(source).__mro__)


class LazyRows:
    """The columns of a lazy random-access source, read a batch of rows at a time.

    Item ``i`` of the source is a tuple (one value per column). ``take_rows(rows)``
    reads those items and stacks them per column (float64 -> float32,
    int64 -> int32, as for arrays).
    """

    def __init__(self, source: Any, columns: Any, split: str) -> None:
        self.source, self.columns, self.split = source, tuple(columns), split
        self.n = len(source)
        if not self.n:
            raise DataError(f"source({split!r}) is empty")
        first = source[0]
        if not isinstance(first, (tuple, list)) or len(first) != len(self.columns):
            raise DataError(f"source({split!r})[0] must be a tuple of {len(self.columns)} values "
                            f"(one per column {self.columns}). Received: {type(first).__name__}")

    def __len__(self) -> int:
        return self.n

    def take_rows(self, rows: Any) -> Any:
        """The columns of items ``rows`` (a slice or index array) as arrays."""
        indices = range(self.n)[rows] if isinstance(rows, slice) else rows
        items = [self.source[int(i)] for i in indices]
        try:
            return tuple(convert_column(np.stack([np.asarray(it[k]) for it in items]), name,
                                        self.split)
                         for k, name in enumerate(self.columns))
        except ValueError as exc:
            raise DataError(f"source({self.split!r}) items differ in shape: {exc}") from None


def load_split(exp: Any, split: str, raw: Any) -> "Split | None":
    """What preflight keeps of ``source(split)``: arrays, ``LazyRows`` or a
    ``SampleSource`` (None for None)."""
    if raw is None:
        return None
    if is_ms_dataset(raw):
        return SampleSource(lambda: exp.source(split), exp.columns, split, first=raw)
    if is_lazy(raw):
        return LazyRows(raw, exp.columns, split)
    return as_arrays(raw, exp.columns, split)


def first_rows(data: Any, k: int) -> Any:
    """The first ``k`` rows of a split's columns as arrays (None for a pipeline)."""
    if isinstance(data, tuple):
        return tuple(np.asarray(a[:k]) for a in data)
    if isinstance(data, LazyRows):
        return data.take_rows(slice(0, min(k, len(data))))
    return None


def split_size(data: "Split") -> int:
    """Samples in a split (a ``Finished`` split: its batches)."""
    return len(data[0]) if isinstance(data, tuple) else len(data)


# -- MindSpore datasets of samples ---------------------------------------------

class SampleSource:
    """An unbatched MindSpore dataset as the source of a split.

    ``make`` returns a fresh dataset each call (``exp.source(split)``):
    MindSpore binds a dataset to one Model.
    """

    def __init__(self, make: Any, columns: Any, split: str, first: Any = None) -> None:
        self.make, self.columns, self.split = make, tuple(columns), split
        self.n = check_samples(first if first is not None else make(), self.columns, split)

    def __len__(self) -> int:
        return self.n

    def dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, start_epoch: int = 0,
                num_shards: int = 1, shard_id: int = 0, drop_last: bool = True,
                first_batch: int = 0) -> "Dataset":
        """The batched dataset of this split: seeded order per epoch, this rank's batches."""
        data = self.make()
        leaf = _leaf(data)
        leaf.sampler = _epoch_sampler_class()(self.n, batch_size, shuffle, seed, start_epoch,
                                              num_shards, shard_id, drop_last, first_batch)
        leaf.dataset_size = None
        return data.batch(batch_size, drop_remainder=drop_last)


def check_samples(data: Any, columns: Any, split: str) -> int:
    """The number of samples of an unbatched dataset; DataError (one line) when it
    is batched, not random-access, has other columns or no sample."""
    batched = _batched(data)
    if batched:
        raise DataError(f"source({split!r}) returned a dataset that is already batched "
                        f"(batch size {batched}); return it unbatched: mindexp batches it with "
                        f"config batch_size (drop_last for training)")
    leaf = _leaf(data, split)
    n = _ask(data.get_dataset_size, split)  # an empty folder fails here
    if not n:
        folder = getattr(leaf, "dataset_dir", None)
        raise DataError(f"source({split!r}) returned a dataset with no sample"
                        + (f" (folder {folder} has no image in a class folder)" if folder else ""))
    names = _ask(data.get_col_names, split)
    if list(names) != list(columns):
        raise DataError(f"source({split!r}) returned a dataset with columns {list(names)} but "
                        f"the experiment declares columns {tuple(columns)}; rename them "
                        f"(project or map(output_columns=...)) or set columns")
    return int(n)


def _ask(method: Any, split: str) -> Any:
    """A dataset query whose MindSpore error becomes one line (an empty folder,
    a missing file)."""
    try:
        return method()
    except (RuntimeError, ValueError) as exc:
        raise DataError(f"source({split!r}): {_first_line(exc)}") from None


def describe_pipeline_error(text: str) -> str | None:
    """The line of a MindSpore pipeline error that says what failed (the map
    operation and data file, or the user's Python exception); None for
    another error."""
    if "Dataset Pipeline Error Message" not in text:
        return None
    lines = [ln.strip() for ln in text.splitlines()]
    body = lines[next(i for i, ln in enumerate(lines) if "Dataset Pipeline Error Message" in ln):]
    useful = [ln.removeprefix("[ERROR]").strip() for ln in body
              if ln and not set(ln) <= set("-=") and "Error Message" not in ln]
    if useful and "user Python code failed" in useful[0]:
        raised = [ln for ln in lines if ln.split(":")[0].endswith(("Error", "Exception"))]
        if raised:
            return raised[-1]
    return useful[0] if useful else None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()
             and not set(ln.strip()) <= set("-=")]
    useful = [ln for ln in lines if not ln.startswith(("Exception thrown", "Dataset Pipeline",
                                                        "Refer to", "C++ Call Stack"))]
    return (useful or lines or [type(exc).__name__])[0][:500]


def _batched(data: Any) -> int:
    """The batch size of a dataset that has a batch operation, else 0."""
    stack = [data]
    while stack:
        node = stack.pop()
        if type(node).__name__ in ("BatchDataset", "PaddedBatchDataset", "BucketBatchByLength"):
            return getattr(node, "batch_size", None) or data.get_batch_size()
        stack.extend(getattr(node, "children", []) or [])
    return 0


def _leaf(data: Any, split: str = "train") -> Any:
    """The one mappable leaf of a pipeline (where mindexp's sampler goes)."""
    node = data
    while getattr(node, "children", None):
        if len(node.children) != 1:
            raise DataError(f"source({split!r}) returned a dataset of {len(node.children)} "
                            "joined pipelines (zip/concat); accepted: one dataset of samples "
                            "with map operations; or override dataset(split)")
        node = node.children[0]
    mappable = any(c.__name__ == "MappableDataset" for c in type(node).__mro__)
    if not mappable or (type(node).__name__ == "GeneratorDataset"
                        and not hasattr(getattr(node, "source", None), "__getitem__")):
        raise DataError(f"source({split!r}) returned a dataset that cannot be sampled by index "
                        f"({type(node).__name__}); accepted: ImageFolderDataset, MindDataset, "
                        "NumpySlicesDataset, GeneratorDataset over a random-access source; "
                        "or override dataset(split)")
    return node


_SAMPLER = None


def _epoch_sampler_class() -> Any:
    """``EpochSampler`` (defined on first use: importing this module does not
    import mindspore)."""
    global _SAMPLER
    if _SAMPLER is None:
        import mindspore.dataset as ds

        class EpochSampler(ds.Sampler):
            """The sample indices of this rank's batches, epoch after epoch.

            MindSpore calls ``__iter__`` once per epoch, in order, on its own
            copy of the sampler: the call count tells the epoch. The order
            and sharding are those of ``mindexp.define.data.BatchSource``.
            """

            def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int,
                         start_epoch: int, num_shards: int, shard_id: int, drop_last: bool,
                         first_batch: int) -> None:
                self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
                self.start_epoch, self._calls = start_epoch, 0
                self.batches = shard_batches(n, batch_size, num_shards, shard_id, drop_last,
                                             first_batch)
                super().__init__()

            def __len__(self) -> int:
                return sum(len(range(self.n)[b * self.batch_size:(b + 1) * self.batch_size])
                           for b in self.batches)

            def __iter__(self) -> Any:
                epoch = self.start_epoch + self._calls
                self._calls += 1
                order = (np.random.default_rng([self.seed, epoch]).permutation(self.n)
                         if self.shuffle else np.arange(self.n))
                bs = self.batch_size
                return iter(np.concatenate([order[b * bs:(b + 1) * bs]
                                            for b in self.batches]).tolist())

        _SAMPLER = EpochSampler
    return _SAMPLER


# -- finished datasets: dataset(split) overrides -------------------------------

def takes_only_split(exp: Any) -> bool:
    """True when the experiment overrides ``dataset(split)`` without the
    resume/sharding arguments (it returns a finished dataset)."""
    params = [p for p in inspect.signature(exp.dataset).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) == 1


class Finished:
    """A split whose batches come from the experiment's ``dataset(split)``."""

    def __init__(self, exp: Any, split: str, first: Any) -> None:
        self.exp, self.split = exp, split
        if not is_ms_dataset(first):
            raise DataError(f"{type(exp).__name__}.dataset({split!r}) must return a "
                            f"mindspore.dataset Dataset. Received: {type(first).__name__}")
        self.steps = int(_ask(first.get_dataset_size, split))
        if not self.steps:
            raise DataError(f"{type(exp).__name__}.dataset({split!r}) has no batch")

    def __len__(self) -> int:
        return self.steps

    def dataset(self, start_epoch: int = 0, first_batch: int = 0, num_shards: int = 1) -> "Dataset":
        """A fresh dataset that starts after ``start_epoch`` epochs and
        ``first_batch`` batches (read and dropped: slower than a source)."""
        if num_shards > 1:
            _warn_order_once()
        data = self.exp.dataset(self.split)
        if not start_epoch and not first_batch:
            return data
        return _skipping_class()(data, start_epoch, first_batch, self.steps - first_batch)


_WARNED: list[bool] = []


def _warn_order_once() -> None:
    if not _WARNED:
        _WARNED.append(True)
        logger.warning("dataset(split) returns a finished dataset: under data parallel each "
                       "rank must read its own shard, in the same number of batches; mindexp "
                       "cannot check that (the order is yours)")


_SKIPPING = None


def _skipping_class() -> Any:
    global _SKIPPING
    if _SKIPPING is None:
        import mindspore.dataset as ds

        class SkippingDataset(ds.GeneratorDataset):
            """A finished dataset read from where a resumed run starts.

            ``Model.train`` reads ``create_tuple_iterator()``; it gets the
            user's iterator after ``skip_epochs`` epochs and ``skip_batches``
            batches were read and dropped (epoch ends stay where they were).
            """

            def __init__(self, data: Any, skip_epochs: int, skip_batches: int, length: int) -> None:
                super().__init__(_Length(length, len(data.get_col_names())),
                                 column_names=data.get_col_names(), shuffle=False)
                self.inner, self.skip = data, (skip_epochs, skip_batches)

            def create_tuple_iterator(self, columns: Any = None, num_epochs: int = -1,
                                      output_numpy: bool = False, do_copy: bool = False) -> Any:
                it = self.inner.create_tuple_iterator(columns, -1, output_numpy, do_copy)
                for _ in range(self.skip[0]):
                    for _ in it:
                        pass
                for _ in range(self.skip[1]):
                    next(it)
                return it

        _SKIPPING = SkippingDataset
    return _SKIPPING


class _Length:
    """A stand-in source of ``n`` items (Model reads the tuple iterator instead)."""

    def __init__(self, n: int, width: int) -> None:
        self.n, self.width = n, width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        raise IndexError("read through create_tuple_iterator()")


# A split as preflight keeps it (load_split; Finished: the experiment's own
# batched dataset); a split the experiment does not have is None
Split = Union[tuple[Any, ...], LazyRows, SampleSource, Finished]
