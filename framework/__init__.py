"""mindexp: declare an Experiment, run it, compare runs.

Names are imported on first use, so ``import mindexp.callbacks`` in a plain
MindSpore script loads nothing of the experiment runtime, and importing
``mindexp`` does not import mindspore (training does) nor pandas/matplotlib
(reports and plots import them when called).
"""
import importlib

# The one place the version is written (setup.cfg reads it; `mindexp --version` prints it).
# Bump it whenever a contract of DESIGN.md changes, with a CHANGELOG.md entry.
__version__ = "0.3.0"

_EXPORTS = {
    "Config": "define.config", "Lazy": "define.sources", "Standardize": "define.transforms", "ConfigError": "errors", "DataError": "errors",
    "MindexpError": "errors", "RunDirError": "errors", "Experiment": "api",
    "compare": "analysis.notebook", "history": "analysis.reports",
    "load_run": "analysis.notebook", "load_runs": "analysis.notebook", "Run": "analysis.notebook",
    "Runs": "analysis.notebook", "plot": "analysis.notebook",
    "TrainingError": "errors", "diff": "manage.diff",
    "tune": "search", "study_frame": "search", "sweep": "search", "to_mlflow": "analysis.mlflow_export",
    "track": "train.tracked", "TrackedRun": "train.tracked",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
