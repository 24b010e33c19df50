"""Export a run's network with ``mindspore.export`` (MINDIR, or ONNX)."""
import logging
import os
import warnings

import numpy as np

from ..callbacks import schema
from ..errors import MindexpError
from ._model import check_writable, load_model, open_run, resolve_batch_size, sample_spec

FORMATS = {"MINDIR": ".mindir", "ONNX": ".onnx"}
BATCH_AXIS = "batch"  # the name of an ONNX file's dynamic first dimension

logger = logging.getLogger(__name__)


def export(run_dir, format=None, checkpoint="last", output=None, batch_size=None, *,  # noqa: A002
           file_format=None):
    """Write the network of checkpoint ``checkpoint`` as ``format`` (``"MINDIR"``,
    the default, or ``"ONNX"``: the CLI's ``--format``); returns the path.

    The input is zeros of the experiment's sample shape (its first column)
    with ``batch_size`` rows (default: the run's batch_size). A MINDIR file
    keeps that batch. An ONNX file's batch dimension is dynamic (named
    ``batch``; its input is named after the column) unless ``batch_size`` is
    given; a network that computes with its batch size (``x.reshape(x.shape[0],
    -1)``) has it baked into the graph by MindSpore's exporter: where
    onnxruntime is installed the file is run with another batch, and such a
    network is exported again with the batch fixed (a warning says so). ``output``
    defaults to ``<run>/exported/<checkpoint name><ext>``; the file is
    written under a temporary name and renamed. Load a MINDIR back with
    ``nn.GraphCell(mindspore.load(path))``. AIR needs Ascend: refused here.
    ``file_format=`` is the old name of ``format`` (deprecated).
    """
    fmt = _check_format(_format_arg(format, file_format))
    run = open_run(run_dir)
    exp = run.experiment()
    dynamic = fmt == "ONNX" and batch_size is None
    batch_size = resolve_batch_size(batch_size, exp)
    if output is not None:
        output = _with_ext(check_writable(output), fmt)
    model = load_model(run, checkpoint)
    if output is None:
        stem = os.path.splitext(os.path.basename(model.path))[0]
        output = os.path.join(run.dir, "exported", stem + FORMATS[fmt])
    column, sample, dtype = sample_spec(exp)
    folder = os.path.dirname(output)
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    zeros = np.zeros((batch_size,) + sample, dtype)
    try:
        net = _with_transform(run.dir, model.net)  # raw inputs in, as predict takes them
        if dynamic:
            _export_onnx_dynamic(net, zeros, output, column,
                                 fresh=lambda: _with_transform(run.dir,
                                                               load_model(run, checkpoint).net))
        else:
            _export_atomically(net, zeros, output, fmt, column=column)
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


def _export_onnx_dynamic(net, sample, output, column, fresh):
    """ONNX with a dynamic batch dimension; fixed (one warning) when onnxruntime
    shows that this network's graph does not take another batch size. ``fresh()``
    builds the network anew for that second export: MindSpore 2.10 fails to export
    such a network's instance a second time ("i: 3 out of range")."""
    _export_atomically(net, sample, output, "ONNX", column=column, dynamic=True)
    if _runs_with_other_batches(output, sample) is False:
        logger.warning("this network's ONNX graph fixes the batch at %d rows (MindSpore's "
                       "exporter bakes a batch size the network computes with into it): "
                       "exported with a fixed batch; choose it with --batch-size",
                       len(sample))
        _export_atomically(fresh(), sample, output, "ONNX", column=column)


def _runs_with_other_batches(path, sample):
    """True/False: the file runs on 1 and len(sample)+1 rows; None: no onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a refused batch is the answer here, not an error to print
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    try:
        for rows in (1, len(sample) + 1):
            batch = np.zeros((rows,) + sample.shape[1:], sample.dtype)
            if any(out.shape[:1] != (rows,) for out in session.run(None, {name: batch})):
                return False
    except Exception:  # onnxruntime's own error types: the graph refused the batch
        return False
    return True


def _export_atomically(net, sample, output, fmt, column=None, dynamic=False):
    import mindspore as ms
    tmp = schema.temp_name(output, prefix=True)
    try:
        if fmt == "ONNX":
            _export_onnx(net, sample, tmp, column, dynamic)
        else:
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


def _export_onnx(net, sample, path, column, dynamic):
    """``mindspore.onnx.export`` (``mindspore.export``'s ONNX is deprecated), the
    input named after the column; with ``dynamic`` its first axis is dynamic.
    MindSpore leaves the outputs' first axis at the traced batch, so (where the
    onnx package is installed) they are marked dynamic too."""
    import mindspore as ms
    from mindspore.onnx import export as onnx_export
    onnx_export(net, ms.Tensor(sample), file_name=path, input_names=[column or "input"],
                dynamic_axes={column or "input": {0: BATCH_AXIS}} if dynamic else None)
    if not dynamic:
        return
    try:
        import onnx
    except ImportError:
        return
    model = onnx.load(path)
    for output in model.graph.output:
        dims = output.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == len(sample):
            dims[0].dim_param = BATCH_AXIS  # replaces the fixed value (a oneof)
    onnx.save(model, path)
