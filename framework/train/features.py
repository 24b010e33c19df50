"""Which callbacks a run installs: each feature registers what it adds.

A feature module (logging, checkpoints, early stopping, system metrics,
figures, progress, signals, ...) registers a builder with :func:`feature`;
:class:`~mindexp.train.session.Session` asks :func:`build_callbacks` for
every feature's callbacks, in the registered order, and runs them in one
``CallbackList``. Wiring a new callback into every run is its module plus
one registration::

    @feature("my_log", order=65)
    def _my_log(run: Build, before: Sequence[Callback]) -> Callback | None:
        return MyLog(run.run_dir) if run.cfg.my_log else None

The order decides where its hooks run among the others' (the step's
position first, the signal stop last, the checkpoint after every log it
flushes). A feature's config fields are declared by their group in
``define/config/`` (``my_log: bool`` in ``logs.py``'s ``LoggingFields``):
they stay flat in ``Config`` (a contract). A feature in a new module of
this package also adds the module to :data:`FEATURE_MODULES`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, Union

if TYPE_CHECKING:
    from mindspore.train import Callback

# The modules whose import registers their features (in this package).
FEATURE_MODULES = ("steps", "signals", "logs", "monitors", "system", "figures", "progress")


@dataclass(frozen=True)
class Build:
    """What a feature may read to build its callbacks for one training session."""

    exp: Any                   # the experiment (its config is ``cfg``)
    cfg: Any                   # the resolved config
    run_dir: str
    steps_per_epoch: int
    resume: Any                # the resume point, or None
    metrics: dict[str, Any]    # the eval metrics by name ({}: no evaluation)
    quiet: bool
    shard_id: int              # this rank (0 writes the run's own files)
    stopper: Any               # the run's SignalStop
    net: Any                   # the network being trained
    added: tuple[Any, ...] = ()  # the request's callbacks, after the experiment's (a trial's pruning)


Built = Union["Callback", Iterable["Callback"], None]
Builder = Callable[[Build, Sequence["Callback"]], Built]


@dataclass(frozen=True)
class Feature:
    """A registered feature: its name, place and builder (``before``: the
    callbacks of the features placed before it)."""

    name: str
    order: float
    build: Builder


_FEATURES: dict[str, Feature] = {}


def feature(name: str, order: float) -> Callable[[Builder], Builder]:
    """Register the decorated builder as feature ``name`` at ``order``."""
    def register(build: Builder) -> Builder:
        known = _FEATURES.get(name)
        if known is not None and _where(known.build) != _where(build):  # (a reload replaces)
            raise ValueError(f"feature {name!r} is registered twice "
                             f"({known.build.__module__} and {build.__module__})")
        _FEATURES[name] = Feature(name, order, build)
        return build
    return register


def features() -> list[Feature]:
    """Every registered feature, in order (importing the feature modules first)."""
    for module in FEATURE_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    return sorted(_FEATURES.values(), key=lambda f: f.order)


def build_callbacks(run: Build) -> dict[str, list[Callback]]:
    """Each feature's callbacks for ``run``, by feature name, in order."""
    built: dict[str, list[Callback]] = {}
    before: list[Callback] = []
    for feat in features():
        made = feat.build(run, tuple(before))
        made = [] if made is None else [made] if _is_callback(made) else list(made)  # type: ignore[arg-type]
        built[feat.name] = made
        before.extend(made)
    return built


def _where(build: Builder) -> tuple[str, str]:
    return build.__module__, build.__qualname__


@feature("experiment", order=100)
def _experiments_own(run: Build, before: Sequence[Callback]) -> Built:
    """The experiment's ``callbacks()`` then the request's, after the logs and
    before early stopping and the checkpoint (which flushes those that buffer)."""
    return list(run.exp.callbacks() or []) + list(run.added)


def _is_callback(value: object) -> bool:
    from mindspore.train import Callback
    return isinstance(value, Callback)
