"""Export a run's network with ``mindspore.export`` (MINDIR, or ONNX)."""
import os
import warnings

import numpy as np

from ..callbacks import schema
from ..errors import MindexpError
from ._model import check_writable, load_model, open_run, resolve_batch_size, sample_spec

FORMATS = {"MINDIR": ".mindir", "ONNX": ".onnx"}


def export(run_dir, format=None, checkpoint="last", output=None, batch_size=None, *,  # noqa: A002
           file_format=None):
    """Write the network of checkpoint ``checkpoint`` as ``format`` (``"MINDIR"``,
    the default, or ``"ONNX"``: the CLI's ``--format``); returns the path.

    The input is zeros of the experiment's sample shape (its first column)
    with ``batch_size`` rows (default: the run's batch_size). ``output``
    defaults to ``<run>/exported/<checkpoint name><ext>``; the file is
    written under a temporary name and renamed. Load a MINDIR back with
    ``nn.GraphCell(mindspore.load(path))``. AIR needs Ascend: refused here.
    ``file_format=`` is the old name of ``format`` (deprecated).
    """
    fmt = _check_format(_format_arg(format, file_format))
    run = open_run(run_dir)
    exp = run.experiment()
    batch_size = resolve_batch_size(batch_size, exp)
    if output is not None:
        output = _with_ext(check_writable(output), fmt)
    model = load_model(run, checkpoint)
    if output is None:
        stem = os.path.splitext(os.path.basename(model.path))[0]
        output = os.path.join(run.dir, "exported", stem + FORMATS[fmt])
    _, sample, dtype = sample_spec(exp)
    folder = os.path.dirname(output)
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    try:
        _export_atomically(_with_transform(run.dir, model.net), np.zeros((batch_size,) + sample, dtype),
                           output, fmt)
    except BaseException:
        if created and not os.listdir(folder):
            os.rmdir(folder)  # nothing written: leave no empty exported/ behind
        raise
    return output


def _with_transform(run_dir, net):
    """``net`` behind the run's fitted input transform, so the exported file takes
    raw inputs as predict does."""
    from mindspore import nn
    from ..define.transforms import load_state
    loaded = load_state(run_dir)
    if loaded is None:
        return net
    transform, state = loaded
    return nn.SequentialCell([transform.cell(state), net])


def _format_arg(format, file_format):  # noqa: A002
    """``format``, or the deprecated ``file_format`` keyword (one of them)."""
    if file_format is None:
        return "MINDIR" if format is None else format
    warnings.warn("export(file_format=...) is deprecated: use format=... (the CLI's --format)",
                  DeprecationWarning, stacklevel=3)
    if format is not None and str(format).upper() != str(file_format).upper():
        raise MindexpError(f"export got format={format!r} and file_format={file_format!r}: "
                           "give only format=")
    return file_format


def _check_format(file_format):
    fmt = str(file_format).upper()
    if fmt == "AIR":
        raise MindexpError("--format AIR needs MindSpore's Ascend backend; accepted here: "
                           f"{', '.join(FORMATS)}. Received: --format {file_format}")
    if fmt not in FORMATS:
        raise MindexpError(f"--format must be one of {', '.join(FORMATS)}. "
                           f"Received: --format {file_format}")
    return fmt


def _with_ext(path, fmt):
    """MindSpore appends the format's extension to a name without it: say so in the path."""
    ext = FORMATS[fmt]
    return path if path.lower().endswith(ext) else path + ext


def _export_atomically(net, sample, output, fmt):
    import mindspore as ms
    tmp = schema.temp_name(output, prefix=True)
    try:
        ms.export(net, ms.Tensor(sample), file_name=tmp, file_format=fmt)
        schema.atomic_replace(tmp, output)
    except (RuntimeError, ValueError, TypeError) as exc:
        # MindSpore has no converter for some operator of this network in this format
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise MindexpError(f"MindSpore cannot export this network as {fmt} here: {first}") \
            from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
