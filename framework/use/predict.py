"""The network's outputs for an input file, batched, shape-checked first."""
import io
import os

import numpy as np

from ..callbacks import schema
from ..define.transforms import apply_saved
from ..errors import MindexpError
from ._model import load_model, open_run, resolve_batch_size, sample_spec

INPUT_FORMATS = (".npy", ".csv")


def predict(run_dir, inputs, checkpoint="last", batch_size=None):
    """Outputs of the run's network (checkpoint ``checkpoint``) for ``inputs``.

    ``inputs`` is an array or a path to ``.npy``/``.csv``, shaped
    ``(N, *sample)`` where ``sample`` is the shape of one value of the
    experiment's first column (MindexpError naming both shapes otherwise).
    Runs ``batch_size`` samples at a time (default: the run's batch_size);
    returns a numpy array of N rows.
    """
    run = open_run(run_dir)
    exp = run.experiment()
    x = read_inputs(inputs) if isinstance(inputs, (str, os.PathLike)) else np.asarray(inputs)
    x = apply_saved(run.dir, check_inputs(x, exp, inputs))  # as the network was trained
    batch_size = resolve_batch_size(batch_size, exp)
    model = load_model(run, checkpoint)
    return _forward(model.net, x, batch_size)


def read_inputs(path):
    """An array from ``.npy`` or a numeric ``.csv`` (a header row is skipped)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in INPUT_FORMATS:
        raise MindexpError(f"--input must be a .npy or .csv file. Received: {path!r}")
    if not os.path.isfile(path):
        raise MindexpError(f"--input {path} does not exist")
    try:
        if ext == ".npy":
            return np.load(path, allow_pickle=False)
        return _read_csv(path)
    except (ValueError, OSError) as exc:
        raise MindexpError(f"cannot read --input {path}: {str(exc).splitlines()[0]}") from None


def _read_csv(path):
    try:
        return np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64)
    except ValueError:
        # a header line (column names): numbers start on the second line
        return np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64, skiprows=1)


def check_inputs(x, exp, shown):
    """``x`` as the first column's dtype, after checking it is ``(N, *sample)``."""
    column, sample, dtype = sample_spec(exp)
    if x.dtype.kind not in "fiub":
        raise MindexpError(f"input {shown} holds {x.dtype} values; accepted: numbers")
    if x.ndim == 2 and len(sample) > 1 and x.shape[1] == int(np.prod(sample)):
        x = x.reshape((len(x),) + sample)  # CSV rows of flattened samples
    if x.ndim == 0 or tuple(x.shape[1:]) != sample or len(x) == 0:
        expected = "(N, " + ", ".join(map(str, sample)) + ")" if sample else "(N,)"
        raise MindexpError(f"input {shown} has shape {tuple(x.shape)}; {exp.experiment_name()} "
                           f"takes samples of column {column!r} shaped {sample}, so an input "
                           f"shaped {expected} with N >= 1. Received: shape={tuple(x.shape)}")
    return x.astype(dtype, copy=False)


def _forward(net, x, batch_size):
    import mindspore as ms
    outputs = []
    for start in range(0, len(x), batch_size):
        out = net(ms.Tensor(x[start:start + batch_size]))
        while isinstance(out, (tuple, list)):  # the first output is the prediction
            out = out[0]
        outputs.append(out.asnumpy())
    return np.concatenate(outputs)


def save_outputs(path, y):
    """Write ``y`` to ``path`` (.npy) atomically (:func:`schema.atomic_write`)."""
    buf = io.BytesIO()
    np.save(buf, y)
    schema.atomic_write(path, buf.getvalue())
