"""Every reliance of the framework on MindSpore behaviour that is internal or
undocumented, in one place (the callbacks keep theirs in
``mindexp.callbacks._mindspore``, as they must not import the framework).

Each function names what it relies on and the MindSpore version it was
checked on; tests/test_mindspore_contract.py has one test per reliance that
fails loudly when an upgrade changes it. It sits on the lower floor (beside
data.py and metrics) because those rely on MindSpore too; it imports only
MindSpore (lazily, so that importing it does not import MindSpore), the
standard library and the run directory's names (callbacks.schema).
"""
import contextlib
import logging
import os
import re


CHECKED_ON = "2.10"  # the MindSpore version every reliance below was checked on

# -- msrun (checked on 2.10: mindspore/parallel/cluster/process_entity/_api.py) ---
MSRUN_ROLE = "MS_ROLE"              # "MS_WORKER" in a worker, "MS_SCHED" in the scheduler
MSRUN_WORKER_ROLE = "MS_WORKER"
MSRUN_SCHEDULER_ROLE = "MS_SCHED"  # msrun runs the user's command as its scheduler too
MSRUN_SCHEDULER_ADDRESS = ("MS_SCHED_HOST", "MS_SCHED_PORT")  # where the scheduler listens
MSRUN_WORKER_NUM = "MS_WORKER_NUM"  # set in every process msrun starts
MSRUN_RANK = ("RANK_ID", "MS_NODE_ID")  # the worker's rank, in this order of preference
MSRUN_LOGS = ("msrun.log", "scheduler.log")  # msrun's own logs (we name msrun.log)
MSRUN_WORKER_LOGS = "worker_*.log"  # one per worker in --log_dir


def under_msrun(environ=os.environ):
    """True in a process that msrun started as a worker."""
    return environ.get(MSRUN_ROLE) == MSRUN_WORKER_ROLE and MSRUN_WORKER_NUM in environ


def msrun_scheduler(environ=os.environ):
    """True in the scheduler process msrun started on its master node.

    msrun runs the very command of its workers as the scheduler (with
    ``MS_ROLE=MS_SCHED``); that process must only serve the cluster (inside
    ``mindspore.communication.init()``), never train on its own.
    """
    return environ.get(MSRUN_ROLE) == MSRUN_SCHEDULER_ROLE and MSRUN_WORKER_NUM in environ


def env_rank(environ=os.environ):
    """This worker's rank from msrun's environment (0 outside msrun)."""
    if not under_msrun(environ):
        return 0
    return int(environ.get(MSRUN_RANK[0], environ.get(MSRUN_RANK[1], "0")) or 0)


def all_reduce_sum(values):
    """The element-wise sum of ``values`` (a float32 vector) over every rank of
    msrun's world, as a numpy array; every rank must call it, or the others wait.

    Checked on 2.10, CPU under msrun: ``ops.AllReduce`` run eagerly (PyNative)
    works; ``mindspore.communication.comm_func.all_reduce`` fails there
    ("Create kernelmod for op InnerCommAllReduce failed"), and
    ``broadcast_object_list`` is Ascend-only.
    """
    import mindspore as ms
    import numpy as np
    from mindspore import ops
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return ops.AllReduce()(ms.Tensor(np.asarray(values, dtype=np.float32))).asnumpy()
    finally:
        ms.set_context(mode=mode)


def log_error_message(line):
    """The message of one ``[ERROR]`` line of MindSpore's glog output.

    Checked on 2.10: ``[ERROR] ME(pid,tid,name):time [file:line] message``;
    a line in another shape is returned whole.
    """
    line = line.strip()
    return line.split("] ", 2)[-1] if line.count("] ") >= 2 else line


# -- metrics ---------------------------------------------------------------------
def metric_input(metric, value):
    """A metric's input (Tensor, list or array) as a numpy array, the way
    MindSpore's own metrics convert it: the private ``Metric._convert_data``
    (checked on 2.10)."""
    return metric._convert_data(value)


# -- datasets --------------------------------------------------------------------
def tuple_iterator_dataset(make_iterator):
    """A ``GeneratorDataset`` subclass whose default ``create_tuple_iterator()``
    returns ``make_iterator(source, num_epochs, output_numpy)`` instead of
    MindSpore's pipeline iterator.

    Relies on (checked on 2.10): ``Model.train``/``fit`` in non-sink mode
    iterating the dataset through ``create_tuple_iterator`` with its default
    ``columns`` and keyword arguments ``num_epochs``/``output_numpy``/
    ``do_copy``, taking ``len(dataset)`` batches per epoch from it.
    """
    import mindspore.dataset as ds

    class BatchDataset(ds.GeneratorDataset):
        """GeneratorDataset whose plain tuple iterator skips the C++ pipeline
        (see :func:`tuple_iterator_dataset`); anything else takes the
        standard path."""

        def __init__(self, source, *args, **kwargs):
            super().__init__(source, *args, **kwargs)
            self.batch_source = source

        def create_tuple_iterator(self, columns=None, num_epochs=-1, output_numpy=False,
                                  do_copy=False):
            if columns is not None:
                return super().create_tuple_iterator(columns, num_epochs, output_numpy,
                                                     do_copy)
            return make_iterator(self.batch_source, num_epochs, output_numpy)

    return BatchDataset


# -- the global context ------------------------------------------------------------
def fresh_pipeline(dataset):
    """A copy of a MindSpore dataset pipeline that takes a consumer of its own.

    Checked on 2.10: a pipeline node takes one consumer (a second ``batch()``
    of the same dataset fails when iterated: "The data pipeline is not a
    tree"); ``copy.deepcopy`` of the dataset is an independent pipeline over
    the same source (a loop's ``run.batches`` batches one copy per epoch).
    """
    import copy
    return copy.deepcopy(dataset)


def reset_graph_kernel():
    """Turn graph-kernel fusion off when an earlier run of this process left it on.

    ``set_context`` is process-wide and survives a run (checked on 2.10): a
    sweep worker that trains several runs must undo the previous run's switch.
    """
    import mindspore as ms
    if ms.get_context("enable_graph_kernel"):
        ms.set_context(enable_graph_kernel=False)


def device_selected(device):
    """True when ``device`` is already MindSpore's backend: a second
    ``set_device`` is refused once the backend has run (checked on 2.10)."""
    import mindspore as ms
    return ms.get_context("device_target") == device


# -- automatic mixed precision -----------------------------------------------------


def mixed_precision(net, level, folder):
    """``amp.auto_mixed_precision(net, level)`` with ``folder`` as working directory.

    Checked on 2.10: O1 rewrites the network's module source into
    ``./rewritten_network/`` (MindSpore uses the working directory, and graph
    mode reads the file back when compiling), so the file goes into
    ``folder`` (the run directory) rather than wherever the user started.
    The rewrite re-executes the network's module as a standalone file, which
    is why shipped networks (experiments/_nets.py) use no relative imports.
    """
    from mindspore import amp
    with contextlib.chdir(folder):
        return amp.auto_mixed_precision(net, level)


# -- optimizer construction (checked on 2.10: mindspore/nn/optim/adam.py builds
# P.FusedSparseAdam / FusedSparseLazyAdam, whose @deprecated (common/_decorator.py)
# logs "'FusedSparseAdam' is deprecated ..." once per process on MindSpore's
# logger (mindspore.log._get_logger), though mindexp never uses the sparse path)
SPARSE_DEPRECATION = re.compile(r"'FusedSparse\w*' is deprecated")


class _DropSparseDeprecation(logging.Filter):
    def filter(self, record):
        return not SPARSE_DEPRECATION.search(record.getMessage())


@contextlib.contextmanager
def quiet_sparse_deprecation():
    """Drop only MindSpore's FusedSparse* deprecation message, only while an
    optimizer is built; every other message of MindSpore's logger shows."""
    from mindspore import log
    logger, drop = log._get_logger(), _DropSparseDeprecation()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
