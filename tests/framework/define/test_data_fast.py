"""framework.data's pipeline-free tuple iterator yields what MindSpore's pipeline yields."""
import numpy as np
import pytest

from mindexp.define.data import BatchSource, make_dataset


def _arrays(n=25):
    return (np.arange(2 * n, dtype=np.float32).reshape(n, 2), np.arange(n, dtype=np.int32))


def _pipeline(arrays, **kw):
    import mindspore.dataset as ds
    return ds.GeneratorDataset(BatchSource(arrays, **kw), ["x", "y"], shuffle=False,
                               num_parallel_workers=1, python_multiprocessing=False)


def _epochs(iterator, epochs):
    return [[[np.asarray(getattr(t, "asnumpy", lambda t=t: t)()) for t in item]
             for item in iterator] for _ in range(epochs)]


@pytest.mark.parametrize("kw", [
    dict(batch_size=4, shuffle=True, seed=3),
    dict(batch_size=4, shuffle=False, seed=0),                      # slices of the arrays
    dict(batch_size=5, shuffle=True, seed=1, start_epoch=2, first_batch=2),
    dict(batch_size=3, shuffle=True, seed=7, num_shards=2, shard_id=1),
])
def test_same_batches_same_order_every_epoch(kw):
    fast = make_dataset(_arrays(), ("x", "y"), **kw)
    ref = _pipeline(_arrays(), **kw)
    got = _epochs(fast.create_tuple_iterator(num_epochs=3), 3)
    want = _epochs(ref.create_tuple_iterator(num_epochs=3, output_numpy=True), 3)
    assert len(got) == len(want) == 3 and all(len(g) == fast.get_dataset_size() for g in got)
    for g_epoch, w_epoch in zip(got, want):
        for g_item, w_item in zip(g_epoch, w_epoch):
            for g, w in zip(g_item, w_item):
                assert g.dtype == w.dtype and np.array_equal(g, w)


def test_tensors_own_their_memory():
    arrays = _arrays()
    it = make_dataset(arrays, ("x", "y"), 4, shuffle=False, seed=0).create_tuple_iterator()
    x, _ = next(it)
    arrays[0][:] = -1                     # a slice must not alias the source arrays
    assert (x.asnumpy() >= 0).all()


def test_other_uses_take_mindspore_pipeline():
    fast = make_dataset(_arrays(), ("x", "y"), 5, shuffle=False, seed=0)
    cols = [item for item in fast.create_tuple_iterator(columns=["y"], output_numpy=True)]
    assert len(cols) == 5 and len(cols[0]) == 1 and cols[0][0].tolist() == [0, 1, 2, 3, 4]
    dicts = list(make_dataset(_arrays(), ("x", "y"), 5, shuffle=False, seed=0)
                 .create_dict_iterator(output_numpy=True))
    assert [d["y"][0] for d in dicts] == [0, 5, 10, 15, 20]


@pytest.mark.slow
def test_model_train_is_bitwise_the_same_as_through_the_pipeline(ms_graph):
    from mindspore import nn
    from mindspore.train import Model

    def train(dataset):
        ms_graph.set_seed(0)
        net = nn.Dense(2, 1)
        model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 1e-3))
        model.train(3, dataset, dataset_sink_mode=False)
        return [p.asnumpy().copy() for p in net.trainable_params()]

    x = np.random.default_rng(0).random((40, 2), dtype=np.float32)
    arrays = (x, x.sum(axis=1, keepdims=True))
    kw = dict(batch_size=8, shuffle=True, seed=5)
    fast = train(make_dataset(arrays, ("x", "y"), **kw))
    ref = train(_pipeline(arrays, **kw))
    assert all(np.array_equal(a, b) for a, b in zip(fast, ref))
