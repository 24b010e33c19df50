"""Errors the framework raises for bad input (the CLI maps them to exit 2)."""
from __future__ import annotations

import os
from typing import Any


class MindexpError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


class ConfigError(MindexpError, ValueError):
    """A config value is unknown, ill-typed or out of range.

    ``field`` names the offending config field (None when not one field).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class DataError(MindexpError, ValueError):
    """An experiment's data cannot be trained on as declared."""


class RunDirError(MindexpError, ValueError):
    """A path is not a run directory, or holds no runs, or is malformed."""


class TrainingError(Exception):
    """Training itself failed (exit status 1, not bad input).

    ``run_dir`` is the run's directory (run.json says failed), None when none
    was made; ``run`` is its `mindexp.Run`, set by the public layer
    (``Experiment.run``, the command line).
    """

    def __init__(self, message: str, run_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.run_dir = run_dir
        # a mindexp.Run; not imported: errors sit below every room that reads runs
        self.run: Any = None
