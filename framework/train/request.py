"""A run, declared: everything that decides a run besides the experiment's own
code, built by every entry (``Experiment.run``, ``mindexp run``/``resume``/
``rerun``, sweep and tune workers, msrun workers) and passed down explicitly.

Nothing about a run is set on the user's experiment object, and its config is
never rewritten: what the framework changes (a rank's ``log_all_ranks``) is a
new request with another ``config``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from mindspore.train import Callback

    from ..define.config import Config
    from ..define.experiment import BaseExperiment
    from .resume_point import Resume


@dataclasses.dataclass(frozen=True, eq=False)
class RunRequest:
    """One run to train.

    ``experiment``: the user's experiment (its methods build network, data,
    loss and optimizer; never modified). ``config``: the config the run trains
    with and records (the experiment's own unless a rank needs another).
    ``out``: the output root; ``label``: what goes into the run id.
    ``tags``, ``note``: recorded in run.json at creation. ``fields``: more
    run.json fields (a tuning trial's ``study``, ``trial``, ``tuned``).
    ``entry``: how to load the experiment again (``path/file.py:Class`` or
    ``module:Class``; its class's module when None). ``rerun_of``: the run
    this one reruns (run.json's ``rerun_of``). ``config_set``: the config
    fields the user set (the experiment's own record when None).
    ``callbacks``: callbacks the framework adds after the experiment's own
    (a tuning trial's pruning). ``resume``: where a resumed run starts
    (None: a new run). ``quiet``: no progress bar. ``created(run_dir)``: told
    the new run's folder as soon as it exists (a sweep's worker answers with it
    even when training then fails or is interrupted). ``mlflow``: a tracking
    URI the run streams to while it trains (``--mlflow``; never a config
    field, so config.json and every view stay free of it); ``mlflow_parent``:
    the MLflow run id of the sweep or study it is part of (its parent run).
    """

    experiment: BaseExperiment
    config: Config = None  # type: ignore[assignment]  # None: the experiment's (__post_init__)
    out: str = "outputs"
    label: str | None = None
    tags: tuple[str, ...] = ()
    note: str | None = None
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    entry: str | None = None
    rerun_of: Mapping[str, Any] | None = None
    config_set: tuple[str, ...] | None = None
    callbacks: tuple[Callback, ...] = ()
    resume: Resume | None = None
    quiet: bool = True
    created: Callable[[str], None] | None = None
    mlflow: str | None = None
    mlflow_parent: str | None = None

    def __post_init__(self) -> None:
        # A frozen dataclass: the defaults derived from the experiment are set once here.
        if self.config is None:
            object.__setattr__(self, "config", self.experiment.config)
        object.__setattr__(self, "tags", tuple(self.tags or ()))
        object.__setattr__(self, "callbacks", tuple(self.callbacks or ()))
        if self.entry is None:
            object.__setattr__(self, "entry", self._default_entry())

    def _default_entry(self) -> str:
        if self.resume is not None and self.resume.entry:
            return self.resume.entry
        cls = type(self.experiment)
        return f"{cls.__module__}:{cls.__qualname__}"

    @property
    def experiment_name(self) -> str:
        """The experiment's name (the folder under ``out``)."""
        return self.experiment.experiment_name()

    def user_set(self) -> list[str] | None:
        """The config fields the user set (run.json's provenance ``config_set``);
        None when unknown (an experiment object made without its ``__init__``)."""
        names = self.config_set
        if names is None:
            names = getattr(self.experiment, "config_set", None)
        return None if names is None else list(names)

    def with_config(self, config: Config) -> RunRequest:
        """The same request training with ``config``."""
        return dataclasses.replace(self, config=config)
