"""A run's network with one checkpoint loaded, and what its input looks like."""
import os

import numpy as np

from .._mindspore import device_selected
from ..errors import MindexpError, RunDirError


class LoadedModel:
    """The experiment of a run and its network with checkpoint ``path`` loaded."""

    def __init__(self, run, exp, net, path):
        self.run, self.exp, self.net, self.path = run, exp, net, path
        from ..rundir.checkpoints import checkpoint_position
        self.step, self.epoch = checkpoint_position(path)

    @property
    def checkpoint_file(self):
        """The checkpoint's path relative to the run directory (as in checkpoints.csv)."""
        return os.path.relpath(self.path, self.run.dir)


def open_run(run_dir):
    """The :class:`Run` at ``run_dir`` (RunDirError, one line, when it is not one)."""
    from ..rundir.run import Run
    run = Run(run_dir)
    run.meta  # noqa: B018  (a damaged run.json is named here, before any other file)
    return run


def load_model(run, checkpoint="last"):
    """Rebuild the run's network in its mode and device, with ``checkpoint`` loaded."""
    import mindspore as ms
    from ..rundir.checkpoints import choose_checkpoint
    chosen = choose_checkpoint(run, checkpoint)
    path = chosen.path
    exp = run.experiment()
    _set_context(exp.config)
    net = exp.network()
    missing, _ = ms.load_param_into_net(net, chosen.params, strict_load=False)
    if missing:
        raise RunDirError(f"checkpoint {path} does not match the network of {run.dir}: it lacks "
                          f"{', '.join(missing[:5])}")
    net.set_train(False)
    return LoadedModel(run, exp, net, path)


def sample_spec(exp):
    """``(column name, shape of one sample, dtype)`` of the experiment's first column."""
    source = exp.source("train")
    column = exp.columns[0]
    if isinstance(source, (tuple, list)):
        first = np.asarray(source[0])
        shape, dtype = first.shape[1:], first.dtype
    elif hasattr(source, "__getitem__") and hasattr(source, "__len__") and len(source):
        first = np.asarray(source[0][0])
        shape, dtype = first.shape, first.dtype
    else:
        raise MindexpError(f"cannot tell the input shape of {exp.experiment_name()}: its "
                           "source('train') is neither arrays nor a random-access source")
    # the framework trains float64 as float32 and int64 as int32 (see data.as_arrays)
    dtype = {np.dtype(np.float64): np.dtype(np.float32),
             np.dtype(np.int64): np.dtype(np.int32)}.get(np.dtype(dtype), np.dtype(dtype))
    return column, tuple(shape), dtype


def resolve_batch_size(batch_size, exp):
    """``--batch-size`` or the run's config batch_size."""
    if batch_size is None:
        return int(exp.config.batch_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise MindexpError(f"--batch-size must be an integer >= 1. Received: {batch_size!r}")
    return batch_size


def check_writable(path, what=None, option="--output"):
    """Refuse, before any work, an output path that cannot be written; the
    path made absolute. ``what`` names the file in the message (``"the
    report"``), ``option`` the command-line option it came from (None: none)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        why = "it is a folder" if os.path.isdir(path) else f"{folder} is not a writable folder"
        target = f"{what} to {path}" if what else path
        received = f"{option} {path!r}" if option else repr(path)
        raise MindexpError(f"cannot write {target}: {why}. Received: {received}")
    return os.path.abspath(path)


def _set_context(cfg):
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE)
    if not device_selected(cfg.device):   # a second set_device is refused
        try:
            ms.set_device(cfg.device)
        except (RuntimeError, ValueError) as exc:
            raise MindexpError(f"the run trained on {cfg.device}, which MindSpore cannot use "
                               f"here ({str(exc).splitlines()[0]})") from None
