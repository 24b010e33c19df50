"""Pre-flight checks of the data's values, before any run directory exists.

MindSpore trains on NaN inputs without a word, and a sparse cross-entropy
given float labels or class ids out of range fails deep inside a kernel (or
trains on garbage). Each check here rejects one such case with one line
naming the split, the column, the first bad row and what is accepted.
"""
from typing import TYPE_CHECKING, Any
import numpy as np

from ..errors import DataError

if TYPE_CHECKING:
    from ..define.experiment import BaseExperiment

SPARSE_LOSSES = ("cross_entropy",)


def check_data(exp: "BaseExperiment", splits: dict[str, Any], out_shape: Any = None) -> None:
    """Check every split's columns; ``splits`` is ``{"train": arrays, "eval":
    arrays or None}``, ``out_shape`` the network's output shape on one batch
    (None when unknown: the class-range check is then skipped)."""
    for split, arrays in splits.items():
        if arrays is None:
            continue
        for name, array in zip(exp.columns, arrays):
            _check_finite(array, name, split)
        if _sparse_labels(exp, arrays):
            _check_class_ids(exp, arrays[1], split, out_shape)


def check_label_types(exp: "BaseExperiment", splits: dict[str, Any]) -> None:
    """Reject float labels given to a sparse cross-entropy. Runs before the
    network's output shape is probed: float regression targets with
    ``loss=cross_entropy`` are a wrong loss, not a wrong network."""
    for split, arrays in splits.items():
        if arrays is not None and _sparse_labels(exp, arrays):
            _check_label_dtype(exp, arrays[1], split)


def _sparse_labels(exp: "BaseExperiment", arrays: Any) -> bool:
    """True when the default loss network feeds the second column to a sparse
    cross-entropy (a custom loss cell or loss_fn decides for itself)."""
    return (len(arrays) == 2 and exp.config.loss in SPARSE_LOSSES
            and not exp.has_own_loss_network() and not _overridden(exp, "loss_fn"))


def _overridden(exp: "BaseExperiment", method: str) -> bool:
    """True when a subclass redefines ``method`` of the base class."""
    return sum(method in vars(c) for c in type(exp).__mro__) > 1


def _check_finite(array: Any, name: str, split: str) -> None:
    if array.dtype.kind != "f":
        return
    bad = ~np.isfinite(array)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise DataError(f"column {name!r} of source({split!r}) has {int(bad.sum())} NaN or "
                        f"infinite values (first in row {row}); accepted: finite numbers only. "
                        f"Received: {name}[{row}] holds {array[row].reshape(-1)[:4].tolist()}")


def _check_label_dtype(exp: "BaseExperiment", labels: Any, split: str) -> None:
    name, loss = exp.columns[1], exp.config.loss
    if labels.dtype.kind not in "iub":
        raise DataError(f"column {name!r} of source({split!r}) holds {labels.dtype} values, but "
                        f"loss {loss!r} is a sparse cross-entropy that needs integer class ids "
                        f"(labels.astype(np.int32); for one-hot labels take argmax; for "
                        f"regression targets use loss=mse or mae). Received: dtype={labels.dtype}")


def _check_class_ids(exp: "BaseExperiment", labels: Any, split: str, out_shape: Any) -> None:
    _check_label_dtype(exp, labels, split)
    name = exp.columns[1]
    if out_shape is None or len(out_shape) != 2:
        return
    classes = int(out_shape[1])
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        row = int(np.argwhere(bad.reshape(len(labels), -1))[0][0])
        raise DataError(f"column {name!r} of source({split!r}) has class ids outside [0, "
                        f"{classes}) (the network has {classes} outputs); first in row {row}. "
                        f"Received: {name}[{row}]={labels[row].reshape(-1)[0]}, "
                        f"min={labels.min()}, max={labels.max()}")
