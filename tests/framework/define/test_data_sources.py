"""Sources beyond memory, in process: lazy sources read batch by batch,
memory-mapped arrays stay mapped, MindSpore datasets of samples get the
arrays' seeded order and sharding, bad sources are one line."""
import numpy as np
import pytest

import mindspore.dataset as ds

from mindexp.define.data import BatchSource, as_arrays, make_dataset
from mindexp.errors import DataError
from mindexp.define.sources import Lazy, LazyRows, SampleSource, check_samples


def _arrays(n=23):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return x, np.arange(n, dtype=np.int32)


class Counting:
    """A random-access source that counts the items read."""

    def __init__(self, n=23):
        self.x, self.y = _arrays(n)
        self.reads = 0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.reads += 1
        return self.x[i], self.y[i]


def _epochs(dataset, epochs):
    it = dataset.create_tuple_iterator(num_epochs=epochs, output_numpy=True)
    return [[tuple(np.asarray(c).copy() for c in batch) for batch in it] for _ in range(epochs)]


def _same(a, b):
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        assert len(ea) == len(eb)
        for ba, bb in zip(ea, eb):
            assert all(np.array_equal(u, v) for u, v in zip(ba, bb))


KW = dict(batch_size=4, shuffle=True, seed=3, start_epoch=1)


@pytest.mark.parametrize("shard", [(1, 0), (2, 0), (2, 1)])
def test_a_lazy_source_gives_the_arrays_batches_reading_only_them(shard):
    source = Counting()
    rows = LazyRows(Lazy(source), ("x", "y"), "train")
    source.reads = 0
    lazy = make_dataset((rows,), ("x", "y"), num_shards=shard[0], shard_id=shard[1], **KW)
    eager = make_dataset(_arrays(), ("x", "y"), num_shards=shard[0], shard_id=shard[1], **KW)
    it = lazy.create_tuple_iterator(num_epochs=1, output_numpy=True)
    next(it)
    assert source.reads == 4  # one batch read, nothing stacked ahead
    _same(_epochs(make_dataset((rows,), ("x", "y"), num_shards=shard[0], shard_id=shard[1], **KW),
                  3), _epochs(eager, 3))


def test_memory_mapped_npy_stays_mapped_and_batches_are_float32(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(40, dtype=np.float64).reshape(20, 2))
    np.save(tmp_path / "y.npy", np.arange(20, dtype=np.int64))
    x, y = (np.load(tmp_path / f"{c}.npy", mmap_mode="r") for c in "xy")
    arrays = as_arrays((x, y), ("x", "y"), "train")
    assert all(isinstance(a, np.memmap) for a in arrays)  # no copy of the whole array
    batch = BatchSource(arrays, 4, seed=1)[0]
    assert batch[0].dtype == np.float32 and batch[1].dtype == np.int32
    expected = BatchSource(as_arrays((np.asarray(x), np.asarray(y)), ("x", "y"), "t"), 4, seed=1)[0]
    assert all(np.array_equal(a, b) for a, b in zip(batch, expected))


def _slices(n=23):
    return ds.NumpySlicesDataset({"x": _arrays(n)[0], "y": _arrays(n)[1]}, shuffle=False)


def test_a_dataset_of_samples_gets_the_arrays_order_per_epoch_and_shard():
    source = SampleSource(_slices, ("x", "y"), "train")
    for shards in ((1, 0), (2, 0), (2, 1)):
        kw = dict(KW, num_shards=shards[0], shard_id=shards[1])
        ours = _epochs(source.dataset(**kw), 3)
        _same(ours, _epochs(make_dataset(_arrays(), ("x", "y"), **kw), 3))
    ranks = [_epochs(source.dataset(**dict(KW, num_shards=2, shard_id=r)), 1)[0] for r in (0, 1)]
    seen = [set(int(v) for b in rank for v in b[1]) for rank in ranks]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 16  # 2 of the 5 batches of 4 per rank
    assert len(ranks[0]) == len(ranks[1])


def test_a_resumed_epoch_of_samples_starts_at_its_first_untrained_batch():
    source = SampleSource(_slices, ("x", "y"), "train")
    whole = _epochs(source.dataset(**KW), 1)[0]
    rest = _epochs(source.dataset(first_batch=2, **KW), 1)[0]
    _same([rest], [whole[2:]])


@pytest.mark.parametrize("make, message", [
    (lambda: _slices().batch(4), "already batched (batch size 4)"),
    (lambda: _slices().rename(["x"], ["image"]), "columns ['image', 'y'] but the experiment "
                                                 "declares columns ('x', 'y')"),
    (lambda: ds.GeneratorDataset(iter([(1, 2)]), ["x", "y"]), "cannot be sampled by index"),
])
def test_bad_datasets_are_one_line(make, message):
    with pytest.raises(DataError, match=None) as err:
        check_samples(make(), ("x", "y"), "train")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_empty_image_folder_is_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError) as err:
        check_samples(ds.ImageFolderDataset(str(tmp_path)), ("image", "label"), "train")
    assert "source('train')" in str(err.value) and "\n" not in str(err.value)


def test_random_augmentations_repeat_from_the_same_seed_in_a_fresh_run():
    """What README "Data on disk" promises: same seed, same draws (not per sample
    across a resume)."""
    import mindspore.dataset.vision as vision
    images = np.random.default_rng(0).integers(0, 255, size=(24, 6, 6, 1)).astype(np.uint8)

    def make():
        data = ds.NumpySlicesDataset({"x": images, "y": np.arange(24, dtype=np.int32)},
                                     shuffle=False)
        return data.map(vision.RandomCrop(6, padding=2), input_columns="x",
                        num_parallel_workers=1)

    source = SampleSource(make, ("x", "y"), "train")
    runs = []
    for _ in range(2):
        ds.config.set_seed(7)  # what ms.set_seed(config.seed) does at the start of a run
        runs.append(_epochs(source.dataset(**KW), 2))
    _same(runs[0], runs[1])
    assert any(not np.array_equal(b[0], images[b[1]]) for b in runs[0][0])  # it did crop
