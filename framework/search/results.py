"""A study's results: the trials as a DataFrame, the best trial, Optuna's plots."""
from __future__ import annotations

import io
import logging
import os
import warnings
from typing import TYPE_CHECKING

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError
from .liveness import DEAD_WORKER
from .study import counted, import_optuna

if TYPE_CHECKING:
    import optuna
    import pandas as pd

logger = logging.getLogger(__name__)

PLOTS = ("optimization_history.png", "param_importances.png", "parallel_coordinate.png")


def frame(study):
    """One row per trial: trial, state, value, the sampled parameters, the run's
    status, steps, run directory and error (surplus trials of a shared RDB left
    out). A trial without a run (RUNNING, failed before training, its worker
    killed) has None there."""
    import pandas as pd
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("surplus"):
            continue
        state = "INTERRUPTED" if t.user_attrs.get("interrupted") else t.state.name
        # A pruned trial's stored value is its last intermediate report, not the objective.
        value = t.value if t.state.name == "COMPLETE" else None
        run_dir = _text(t.user_attrs.get("run_dir"))
        error = _text(t.user_attrs.get("error"))
        if t.state.name == "FAIL" and not counted(t) and error is None:
            error = DEAD_WORKER  # failed by its heartbeat: nobody could record why
        rows.append({"trial": t.number, "state": state, "value": value, **t.params,
                     "status": t.user_attrs.get("status"), "steps": _steps(run_dir),
                     "run_dir": run_dir, "error": error})
    return pd.DataFrame(rows)


def _text(value):
    """A string attribute, or None (a missing one, or one a storage mangled)."""
    return value if isinstance(value, str) and value else None


def _steps(run_dir):
    from ..rundir.io import read_json
    try:
        return read_json(os.path.join(run_dir, layout.RUN_JSON)).get("steps")
    except Exception:  # no run folder (yet), one on another machine or half-copied: no steps
        return None


def best(study):
    """The best complete trial, or None."""
    try:
        return study.best_trial
    except ValueError:
        return None


def save_plots(study, folder):
    """Write Optuna's matplotlib plots into ``folder`` (each atomically); returns the paths.

    ``param_importances.png`` needs at least two complete trials; a plot that
    cannot be drawn is skipped with a warning (they are a convenience). None
    with ``MINDEXP_PLOTS=0``, as for runs (a headless batch, a test suite).
    """
    from ..train.figures import drawing_wanted
    if not drawing_wanted():
        return []
    import_optuna()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    draw = {"optimization_history.png": ovm.plot_optimization_history,
            "parallel_coordinate.png": ovm.plot_parallel_coordinate}
    if len(complete) >= 2 and complete[0].params:
        draw["param_importances.png"] = ovm.plot_param_importances
    written = []
    for name, plot in draw.items():
        path = os.path.join(folder, name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks these plots experimental
                ax = plot(study)
            figure = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
            figure.set_size_inches(9, 5)
            buf = io.BytesIO()
            figure.savefig(buf, format="png", dpi=100, bbox_inches="tight")
            schema.atomic_write(path, buf.getvalue())
            written.append(path)
        except Exception as exc:  # noqa: BLE001
            logger.warning("could not draw %s: %s: %s", name, type(exc).__name__, exc)
        finally:
            plt.close("all")
    return written


def study_frame(study: str | optuna.Study | None = None, out: str | os.PathLike[str] = "outputs",
                storage: str | None = None) -> pd.DataFrame:
    """The trials of a study as a DataFrame (see ``frame``).

    ``study`` is a study name (its storage found under ``out`` unless
    ``storage`` is given) or an ``optuna.Study``.
    """
    if study is not None and not isinstance(study, str):
        return frame(study)
    return frame(open_existing(study, out, storage))


def open_existing(name, out="outputs", storage=None):
    """Load the study ``name`` (ConfigError naming what exists when it does not)."""
    optuna = import_optuna()
    from .study import open_storage, storage_path, study_dir
    if not name:
        raise ConfigError("--show needs --study NAME. Received: no --study", field="study")
    folder = study_dir(out, name)
    where = storage_path(storage, folder)
    if "://" not in where and not os.path.isfile(where):
        raise ConfigError(f"no study {name!r}: {where} does not exist. Received: --study {name}",
                          field="study")
    try:
        return optuna.load_study(study_name=name, storage=open_storage(where))
    except KeyError:
        raise ConfigError(f"no study {name!r} in {where}. Received: --study {name}",
                          field="study") from None
