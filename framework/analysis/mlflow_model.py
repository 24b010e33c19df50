"""A run's best checkpoint as an MLflow model (``mlflow.pyfunc``) whose
``predict`` is ``mindexp predict``'s.

The model's one artifact is a small run folder: run.json (passwords
masked), config.json, the captured experiment code (``source/``) and the
checkpoint the one chooser picks (``choose_checkpoint``: best, else last).
The python model (:class:`RunModel`) holds no user object: loaded, it points
the copied run.json's entry at the captured code and predicts with
:func:`mindexp.use.predict.predict` on that folder and checkpoint, so
``mlflow.pyfunc.load_model(uri).predict(x)`` equals ``mindexp predict`` on
the same input. Not yet: a run's fitted input transform (being added
elsewhere) is not copied into the folder; add its file to :func:`_stage`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from typing import Any

import mlflow.pyfunc

from ..callbacks import schema
from .. import layout
from ..provenance import files as F
from ..secrets import masked
from .mlflow_api import drop_type_hint_note

MODEL_NAME = "model"        # the logged model's name in its MLflow run
ARTIFACT = "run"            # the model's artifact: the small run folder


with warnings.catch_warnings():   # (puts showwarning back)
    warnings.showwarning = drop_type_hint_note(warnings.showwarning)

    class RunModel(mlflow.pyfunc.PythonModel):  # type: ignore[name-defined,misc]
        """``predict(x)``: the run's network on ``x`` as ``mindexp predict`` computes it."""

        def load_context(self, context: Any) -> None:
            self.run_dir = context.artifacts[ARTIFACT]
            with open(os.path.join(self.run_dir, "model.json"), encoding="utf-8") as f:
                self.checkpoint = os.path.join(self.run_dir, json.load(f)["checkpoint"])
            _point_entry_at_captured_code(self.run_dir)

        # untyped on purpose: MLflow reads a predict's type hints as an input schema
        def predict(self, context, model_input, params=None):
            """The network's outputs for ``model_input`` (an array or a DataFrame of samples)."""
            import numpy as np
            from ..use.predict import predict
            values = model_input.to_numpy() if hasattr(model_input, "to_numpy") else model_input
            return predict(self.run_dir, np.asarray(values), checkpoint=self.checkpoint)


def log_run_model(run: Any, checkpoint: str, register: str | None = None) -> str:
    """Log ``run`` with ``checkpoint`` as the MLflow model of the active MLflow run
    (registered as ``register`` when given); returns the model's URI."""
    import mindspore
    with tempfile.TemporaryDirectory() as staging, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = _stage(run, checkpoint, os.path.join(staging, ARTIFACT))
        info = mlflow.pyfunc.log_model(
            name=MODEL_NAME, python_model=RunModel(), artifacts={ARTIFACT: folder},
            registered_model_name=register,
            pip_requirements=["mindexp", f"mindspore=={mindspore.__version__}", "numpy"])
    return info.model_uri


def _stage(run, checkpoint, folder):
    """The model's run folder: run.json (masked), config.json, source/, the fitted
    input transform (so the model predicts from raw inputs, as predict does), the
    checkpoint."""
    os.makedirs(os.path.join(folder, schema.CHECKPOINT_DIR))
    with schema.open_file(os.path.join(run.dir, layout.RUN_JSON), "r", encoding="utf-8") as f:
        text = masked(f.read())
    schema.atomic_write(os.path.join(folder, layout.RUN_JSON), text)
    shutil.copyfile(os.path.join(run.dir, layout.CONFIG_JSON),
                    os.path.join(folder, layout.CONFIG_JSON))
    source = os.path.join(run.dir, layout.SOURCE_DIR)
    if os.path.isdir(source):
        shutil.copytree(source, os.path.join(folder, layout.SOURCE_DIR), symlinks=True)
    transform = os.path.join(run.dir, layout.INPUT_TRANSFORM_FILE)
    if os.path.isfile(transform) and not os.path.islink(transform):
        shutil.copyfile(transform, os.path.join(folder, layout.INPUT_TRANSFORM_FILE))
    name = os.path.join(schema.CHECKPOINT_DIR, os.path.basename(checkpoint))
    shutil.copyfile(checkpoint, os.path.join(folder, name))
    schema.atomic_write(os.path.join(folder, "model.json"), json.dumps({"checkpoint": name}))
    return folder


def _point_entry_at_captured_code(run_dir):
    """The copied run.json's entry names the captured file (a shipped experiment's
    module entry stays: mindexp ships it)."""
    path = os.path.join(run_dir, layout.RUN_JSON)
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    block = F.provenance_of(meta)
    source = block.get("source") if isinstance(block.get("source"), dict) else None
    entry = str(meta.get("entry") or "")
    if source and source.get("class") and ".py:" in entry:
        meta["entry"] = f"{F.entry_path(run_dir, block)}:{source['class']}"
        schema.atomic_write(path, json.dumps(meta))
