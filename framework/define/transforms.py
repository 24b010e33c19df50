"""Fitted input transforms: preprocessing whose state comes from the train split.

An experiment declares one as a class attribute::

    class Wine(Experiment):
        input_transform = Standardize()   # (x - mean) / std of the train split

Training fits it on the train split's first column once the data is loaded
and applies it to every split; the run keeps its state in
``input_transform.npz`` (numbers only, read with ``allow_pickle=False``: a
shared run folder never runs code) and run.json's ``input_transform``, and
``predict``, ``evaluate``, ``Run.predictor()`` and ``export`` apply it, so a
prediction from a run folder needs nothing from outside it.
"""
from __future__ import annotations

import io
import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError, RunDirError

if TYPE_CHECKING:
    from mindspore import nn

    from .experiment import BaseExperiment
    from .sources import Split

META_KEY = "input_transform"   # run.json: {"kind", "column", "file"}


class InputTransform:
    """A transform of the first column fitted on the train split. Subclasses set
    ``kind`` and implement ``fit``, ``apply`` and ``cell`` (for export)."""

    kind = ""

    def fit(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The state (named arrays of numbers) computed from the train split's ``x``."""
        raise NotImplementedError

    def apply(self, x: np.ndarray, state: dict[str, np.ndarray]) -> np.ndarray:
        """``x`` transformed with ``state``, in ``x``'s dtype."""
        raise NotImplementedError

    def cell(self, state: dict[str, np.ndarray]) -> nn.Cell:
        """The transform as a ``mindspore.nn.Cell`` (export folds it in)."""
        raise NotImplementedError


class Standardize(InputTransform):
    """``(x - mean) / std`` per feature (over the samples, axis 0) of the train
    split; a feature that does not vary keeps std 1."""

    kind = "standardize"

    def fit(self, x: np.ndarray) -> dict[str, np.ndarray]:
        x = np.asarray(x, dtype=np.float64)
        mean, std = x.mean(axis=0), x.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        dtype = np.float32 if np.asarray(x).dtype != np.float64 else np.float64
        return {"mean": mean.astype(dtype), "std": std.astype(dtype)}

    def apply(self, x: np.ndarray, state: dict[str, np.ndarray]) -> np.ndarray:
        x = np.asarray(x)
        kind = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
        return ((x.astype(kind, copy=False) - state["mean"].astype(kind))
                / state["std"].astype(kind)).astype(kind, copy=False)

    def cell(self, state: dict[str, np.ndarray]) -> nn.Cell:
        from mindspore import Tensor, nn

        class _Standardize(nn.Cell):
            def __init__(self) -> None:
                super().__init__()
                self.mean = Tensor(state["mean"].astype(np.float32))
                self.std = Tensor(state["std"].astype(np.float32))

            def construct(self, x: Any) -> Any:
                return (x - self.mean) / self.std
        return _Standardize()


KINDS: dict[str, type[InputTransform]] = {Standardize.kind: Standardize}


def declared(exp: BaseExperiment) -> InputTransform | None:
    """The experiment's ``input_transform`` (None: none); ConfigError for another value."""
    transform = getattr(exp, "input_transform", None)
    if transform is None or isinstance(transform, InputTransform) and transform.kind in KINDS:
        return transform
    raise ConfigError(f"{type(exp).__name__}.input_transform must be None or one of "
                      f"{', '.join(c.__name__ + '()' for c in KINDS.values())}. "
                      f"Received: {transform!r}", field="input_transform")


def fit_splits(exp: BaseExperiment, train: Split, eval_: Split | None
               ) -> tuple[Split, Split | None, dict[str, np.ndarray] | None]:
    """``(train, eval, state)``: the splits with the declared transform fitted on
    train's first column and applied to both (unchanged, state None, without one)."""
    transform = declared(exp)
    if transform is None:
        return train, eval_, None
    if not isinstance(train, tuple) or not (eval_ is None or isinstance(eval_, tuple)):
        raise ConfigError(f"{type(exp).__name__}.input_transform needs source() to return "
                          "arrays (a tuple of numpy arrays); a lazy source or a MindSpore "
                          "dataset transforms its own samples. Received: "
                          f"{type(train).__name__}", field="input_transform")
    state = transform.fit(train[0])

    def apply(split: tuple[Any, ...]) -> tuple[Any, ...]:
        return (transform.apply(split[0], state),) + tuple(split[1:])
    return apply(train), None if eval_ is None else apply(eval_), state


def save_state(run_dir: str, exp: BaseExperiment,
               state: dict[str, np.ndarray]) -> dict[str, Any]:
    """Write ``state`` to ``input_transform.npz`` in ``run_dir``; returns run.json's entry."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in state.items()})
    schema.atomic_write(os.path.join(run_dir, layout.INPUT_TRANSFORM_FILE), buf.getvalue())
    transform = declared(exp)
    assert transform is not None  # state comes from a declared transform
    return {"kind": transform.kind, "column": exp.columns[0],
            "file": layout.INPUT_TRANSFORM_FILE}


def load_state(run_dir: str) -> tuple[InputTransform, dict[str, np.ndarray]] | None:
    """The transform and state a run saved, or None when it has none; RunDirError
    (one line) for an unknown kind or a damaged file. Never unpickles."""
    entry = _entry(run_dir)
    if entry is None:
        return None
    kind = entry.get("kind")
    if kind not in KINDS:
        raise RunDirError(f"{run_dir}: {layout.RUN_JSON}'s input_transform kind {kind!r} is "
                          f"unknown; known: {', '.join(KINDS)}")
    path = os.path.join(run_dir, layout.INPUT_TRANSFORM_FILE)
    try:
        with schema.open_file(path, "rb") as f:
            with np.load(io.BytesIO(f.read()), allow_pickle=False) as saved:
                state = {k: saved[k] for k in saved.files}
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{run_dir}: cannot read {layout.INPUT_TRANSFORM_FILE} "
                          f"({str(exc).splitlines()[0]})") from None
    return KINDS[kind](), state


def _entry(run_dir: str) -> dict[str, Any] | None:
    try:
        with schema.open_file(os.path.join(run_dir, layout.RUN_JSON), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        return None
    entry = meta.get(META_KEY) if isinstance(meta, dict) else None
    return entry if isinstance(entry, dict) else None


def apply_saved(run_dir: str, x: np.ndarray) -> np.ndarray:
    """``x`` with the run's saved input transform applied (unchanged without one)."""
    loaded = load_state(run_dir)
    return x if loaded is None else loaded[0].apply(x, loaded[1])
