"""Which callbacks a run installs: each feature registers what it adds.

A feature module (logging, checkpoints, early stopping, system metrics,
figures, progress, signals, ...) registers a builder with :func:`feature`;
:class:`~mindexp.train.session.Session` asks :func:`build_callbacks` for
every feature's callbacks, in the registered order, and runs them in one
``CallbackList``. Wiring a new callback into every run is its module plus
one registration::

    @feature("my_log", order=65)
    def my_log(run: Build, before: Sequence[Callback]) -> MyLog | None:
        return MyLog(run.run_dir) if run.cfg.my_log else None

The order decides where its hooks run among the others' (the step's
position first, the signal stop last, the checkpoint after every log it
flushes). A feature's config fields are declared by their group in
``define/config/`` (``my_log: bool`` in ``logs.py``'s ``LoggingFields``):
they stay flat in ``Config`` (a contract). A feature in a new module of
this package also adds the module to :data:`FEATURE_MODULES`.

The builder is also the key to what it built: ``callbacks.one(my_log)``
is the session's ``MyLog`` (or None), typed by the builder's own return
type, so no caller picks a callback out by a name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence, TypeVar, Union

if TYPE_CHECKING:
    from mindspore.nn import Cell
    from mindspore.train import Callback, Metric

    from ..define.config import Config
    from ..define.experiment import BaseExperiment
    from .resume_point import Resume

# The modules whose import registers their features (in this package).
FEATURE_MODULES = ("steps", "signals", "logs", "monitors", "system", "figures", "progress")

T = TypeVar("T")


class Stopper(Protocol):
    """The run's stop on SIGINT/SIGTERM (:class:`~mindexp.train.signals.SignalStop`,
    whose module registers features, so it is not imported here): a callback
    placed last, and the head it puts first."""

    signum: int | None

    def head(self) -> Callback:
        """The callback to put first."""


@dataclass(frozen=True)
class Build:
    """What a feature may read to build its callbacks for one training session."""

    exp: BaseExperiment        # the experiment (its config is ``cfg``)
    cfg: Config                # the resolved config
    run_dir: str
    steps_per_epoch: int
    resume: Resume | None      # the resume point, or None
    metrics: dict[str, Metric]  # the eval metrics by name ({}: no evaluation)
    quiet: bool
    shard_id: int              # this rank (0 writes the run's own files)
    stopper: Stopper           # the run's SignalStop
    net: Cell                  # the network being trained
    # the request's callbacks, after the experiment's (a trial's pruning)
    added: tuple[Callback, ...] = ()


Built = Union["Callback", Iterable["Callback"], None]
Builder = Callable[[Build, Sequence["Callback"]], Built]


B = TypeVar("B", bound=Builder)


@dataclass(frozen=True)
class Feature:
    """A registered feature: its name, place and builder (``before``: the
    callbacks of the features placed before it)."""

    name: str
    order: float
    build: Builder


_FEATURES: dict[str, Feature] = {}


def feature(name: str, order: float) -> Callable[[B], B]:
    """Register the decorated builder as feature ``name`` at ``order``; the
    builder is returned as it is (the key to its callbacks: :class:`Callbacks`)."""
    def register(build: B) -> B:
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


class Callbacks:
    """Every feature's callbacks for one session, in order (:attr:`all`), and
    what each builder made (:meth:`of`, :meth:`one`, :meth:`the`), typed as
    the builder returns it."""

    def __init__(self) -> None:
        self.all: list[Callback] = []
        self._made: dict[tuple[str, str], list[Any]] = {}

    def add(self, feat: Feature, made: list[Callback]) -> None:
        """What ``feat`` built, after the callbacks added before it."""
        self._made[_where(feat.build)] = made
        self.all.extend(made)

    def of(self, build: Callable[..., T | Iterable[T] | None]) -> list[T]:
        """The callbacks ``build`` (a registered builder) made, in order."""
        return list(self._made[_where(build)])

    def one(self, build: Callable[..., T | None]) -> T | None:
        """The callback ``build`` made, or None when it made none."""
        made = self._made[_where(build)]
        return made[0] if made else None

    def the(self, build: Callable[..., T]) -> T:
        """The callback ``build`` always makes."""
        made = self.one(build)
        assert made is not None, f"{_where(build)[1]} made no callback"
        return made


def build_callbacks(run: Build) -> Callbacks:
    """Each feature's callbacks for ``run``, in order."""
    built = Callbacks()
    for feat in features():
        made = feat.build(run, tuple(built.all))
        built.add(feat, [] if made is None else [made] if _is_callback(made)
                  else list(made))
    return built


def _where(build: Callable[..., Any]) -> tuple[str, str]:
    return build.__module__, build.__qualname__


@feature("experiment", order=100)
def _experiments_own(run: Build, before: Sequence[Callback]) -> list[Callback]:
    """The experiment's ``callbacks()`` then the request's, after the logs and
    before early stopping and the checkpoint (which flushes those that buffer)."""
    return list(run.exp.callbacks() or []) + list(run.added)


def _is_callback(value: object) -> bool:
    from mindspore.train import Callback
    return isinstance(value, Callback)
