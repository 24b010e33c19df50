"""What an experiment declares: data, network, loss, optimizer, config.

``mindexp.Experiment`` (in ``mindexp.api``) adds ``run()`` to it;
everything that trains or reads runs uses only this declaration.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from . import config as _config
from .builders import build_learning_rate, build_loss, build_optimizer
from ..callbacks import schema
from .config import Config as _CommonConfig
from ..errors import DataError

if TYPE_CHECKING:
    from mindspore import Parameter, nn
    from mindspore.dataset import Dataset
    from mindspore.train import Callback, Metric

# The run folder each experiment object is training in (``BaseExperiment.run_dir``),
# by id(): kept beside the object, never set on it; read from any thread (a
# data pipeline's or a figure's), so not a context variable.
_RUN_DIRS: dict[int, str] = {}


@contextlib.contextmanager
def training_in(exp: BaseExperiment, run_dir: str) -> Iterator[None]:
    """``exp.run_dir`` reads ``run_dir`` inside this block (the framework's
    runner holds it while the experiment's hooks are asked for their parts)."""
    before = _RUN_DIRS.get(id(exp))
    _RUN_DIRS[id(exp)] = run_dir
    try:
        yield
    finally:
        if before is None:
            _RUN_DIRS.pop(id(exp), None)
        else:
            _RUN_DIRS[id(exp)] = before


# loss.csv's own columns: a loss component cannot take one of these names.


class BaseExperiment:
    """An experiment: data (``source``), a ``network`` and a config.

    Subclass it, set ``name`` and ``columns``, implement ``source(split)``
    and ``network()``, and optionally extend the nested ``Config`` dataclass
    (subclass ``Experiment.Config``). Everything else has a default driven
    by the config: ``dataset``, ``loss_fn``, ``loss_network``,
    ``optimizer``, ``metrics``, ``callbacks``, ``targets``, ``validate``.

    ``MyExperiment(lr=0.1).run(out="outputs")`` trains and returns a
    ``mindexp.Run``. Unknown or ill-typed config values raise
    ``mindexp.ConfigError`` naming the field, before anything runs.
    """

    name: str | None = None
    columns: tuple[str, ...] = ("x", "y")
    Config: type[Any] = _CommonConfig
    input_transform: Any = None
    """A fitted transform of the first column (``mindexp.Standardize()``): fitted on
    the train split, applied to every split, saved with the run and applied by
    predict, evaluate, ``Run.predictor()`` and export (see docs/data.md)."""
    loss_components: tuple[str, ...] = ()
    """Names of the loss components: with names here, ``loss_network()``
    returns ``(total, c1, ..., ck)`` (scalars, in this order); ``total`` is
    optimised and logged as ``loss``, each component is a loss.csv column."""

    figures: Callable[..., Any] | None = None
    """Optional hook ``figures(self, network, split)``: matplotlib figures of what
    the model does (one figure, a list, or a dict name -> figure), drawn after
    each evaluation (``split="eval"``), or once at the end of a run without an
    eval split (``split="train"``), and saved as ``figures/<name>/epoch-<k>.png``
    and ``figures/<name>.png``. A hook that raises fails nothing (a warning; the
    traceback goes to figures.log)."""

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        base = _config.to_dict(config) if dataclasses.is_dataclass(config) else dict(config or {})
        # Any: an instance of the experiment's own Config subclass (the user's fields)
        self.config: Any = _config.resolve(type(self).Config, base, overrides)
        # the fields the caller gave; the others came from the defaults (provenance:
        # `rerun --current-code` takes today's defaults for those)
        given = {**base, **overrides}
        self.config_set = [f.name for f in dataclasses.fields(self.config) if f.name in given]
        check_loss_components(type(self))
        self.validate()

    @property
    def run_dir(self) -> str | None:
        """The run folder this experiment is training in (inside its hooks:
        ``callbacks()``, ``figures()``...); None outside a run."""
        return _RUN_DIRS.get(id(self))

    @classmethod
    def experiment_name(cls) -> str:
        """The experiment's name: ``name``, or the class name in lower case."""
        return cls.name or cls.__name__.lower()

    # -- data --------------------------------------------------------------
    def source(self, split: str) -> Any:
        """Data of ``split`` ("train" or "eval"); None when there is no such split.

        A tuple of equal-length arrays (memory-mapped ``.npy`` arrays stay
        memory-mapped), a random-access source (items are tuples, one value
        per column; stacked in memory unless it has ``lazy = True`` or is
        wrapped in ``mindexp.define.sources.Lazy``), or an unbatched MindSpore
        dataset of samples (``ImageFolderDataset`` ... with ``map``
        operations), which mindexp shuffles per epoch from the seed,
        shards and batches. See the manual's "Data on disk" (docs/data.md).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement source(split)")

    def dataset(self, split: str, arrays: Any, start_epoch: int = 0, num_shards: int = 1,
                shard_id: int = 0, first_batch: int = 0) -> Dataset:
        """The ``GeneratorDataset`` of a split, batched by the framework.

        ``arrays`` are the split's columns; ``start_epoch`` (0-based) and
        ``first_batch`` place a resumed run in the data order; ``num_shards``
        and ``shard_id`` shard it for data parallelism. Override to return
        your own ``GeneratorDataset`` (new on every call: MindSpore binds a
        dataset to one Model); honour these arguments to keep resume exact.
        Or override ``dataset(self, split)`` alone to return a finished
        (batched) dataset: a resume then reads and drops the batches
        already trained (slower), and the order under data parallel is yours.
        """
        from .data import make_dataset
        from .sources import LazyRows, SampleSource
        cfg = self.config
        train = split == "train"
        batch = cfg.batch_size * (cfg.grad_accumulation if train else 1)
        if isinstance(arrays, SampleSource):
            if train and self.curriculum():
                raise DataError(f"{type(self).__name__}.source takes an epoch (a curriculum), "
                                "which needs in-memory arrays; received a dataset of samples")
            return arrays.dataset(batch, shuffle=train, seed=cfg.seed, start_epoch=start_epoch,
                                  num_shards=num_shards, shard_id=shard_id, drop_last=train,
                                  first_batch=first_batch)
        if isinstance(arrays, LazyRows):
            arrays = (arrays,)
        return make_dataset(arrays, self.columns, batch, shuffle=train, seed=cfg.seed,
                            start_epoch=start_epoch, num_shards=num_shards, shard_id=shard_id,
                            drop_last=train, first_batch=first_batch,
                            epoch_data=self._epoch_data if train and self.curriculum() else None)

    def curriculum(self) -> bool:
        """True when the training data changes with the epoch: ``source`` takes
        an ``epoch`` argument (``def source(self, split, epoch=1)``). The
        framework then asks ``source("train", epoch=e)`` as epoch ``e`` (from 1)
        starts, in a resumed run too; every epoch has as many samples as the
        first (in-memory arrays; other splits are asked without ``epoch``)."""
        import inspect
        return "epoch" in inspect.signature(self.source).parameters

    def _epoch_data(self, epoch: int) -> tuple[Any, ...]:
        """The training columns of 0-based ``epoch`` (a curriculum's)."""
        from .data import as_arrays
        return as_arrays(self.source("train", epoch=epoch + 1), self.columns,  # type: ignore[call-arg]
                         "train")

    # -- model -------------------------------------------------------------
    def network(self) -> nn.Cell:
        """The ``mindspore.nn.Cell`` to train."""
        raise NotImplementedError(f"{type(self).__name__} must implement network()")

    def loss_fn(self) -> nn.Cell:
        """The loss cell, from ``config.loss`` by default."""
        return build_loss(self.config.loss)

    def loss_network(self, net: nn.Cell) -> nn.Cell:
        """The cell returning the loss from one batch's columns.

        Default: ``nn.WithLossCell(net, self.loss_fn())`` for (data, label)
        columns. Override for a custom loss (e.g. physics-informed); build
        its cells with ``super().__init__(auto_prefix=False)`` like
        ``WithLossCell``, so the parameters keep the network's names and
        checkpoints load back into ``network()``.
        """
        from mindspore import nn
        return nn.WithLossCell(net, self.loss_fn())

    def optimizer(self, params: Sequence[Parameter],
                  learning_rate: float | Sequence[float] | None = None) -> nn.Optimizer:
        """The optimizer, from ``config.optimizer``/``lr``/``momentum``/``weight_decay``.

        Override as ``optimizer(self, params)`` (use ``self.config.lr``), or
        as ``optimizer(self, params, learning_rate)`` to receive the learning
        rate the config's ``lr_schedule`` gives (a float or a per-step list).
        """
        lr = self.config.lr if learning_rate is None else learning_rate
        return build_optimizer(self.config, params, lr)

    def make_optimizer(self, params: Sequence[Parameter],
                       learning_rate: float | Sequence[float]) -> nn.Optimizer:
        """What the runner calls: ``optimizer(params)`` as documented, or
        ``optimizer(params, learning_rate)`` when an override (or the default)
        takes the config's schedule as a second argument."""
        import inspect
        try:
            takes = inspect.signature(self.optimizer).bind(params, learning_rate)
        except TypeError:
            return self.optimizer(params)
        return self.optimizer(*takes.args, **takes.kwargs)

    def learning_rate(self, steps_per_epoch: int) -> float | list[float]:
        """A float or a per-step list, from ``config.lr_schedule``."""
        return build_learning_rate(self.config, steps_per_epoch)

    def metrics(self) -> Sequence[str] | Mapping[str, str | Metric]:
        """Eval metrics: names (``["mae"]``) or a dict of column -> name or ``nn.Metric``.

        Only asked when ``source("eval")`` gives data. Default: the
        ``metrics`` config field, or ``["loss"]`` (the eval loss of
        ``loss_fn()``) when it is empty; return ``[]`` to skip evaluation.
        """
        return list(self.config.metrics) or ["loss"]

    def callbacks(self) -> list[Callback]:
        """Extra callbacks for this experiment (``self.run_dir`` reads the run's folder)."""
        return []

    def targets(self) -> dict[str, float]:
        """Known true parameter values, e.g. ``{"dense.weight": 2.0}``."""
        return {}

    def validate(self) -> None:
        """Check the config beyond types; raise ``ConfigError`` naming the field.

        Called on construction. The framework itself checks the data-dependent
        limits (batch size vs. training set, warmup vs. run length) at run time,
        before the run directory is created.
        """

    def has_own_loss_network(self) -> bool:
        """True when this experiment overrides ``loss_network`` (a custom
        loss cell decides what output shape matches the labels)."""
        return type(self).loss_network is not BaseExperiment.loss_network


def check_loss_components(cls: type[BaseExperiment]) -> None:
    """``cls.loss_components``: distinct identifiers, none a loss.csv column (DataError)."""
    names, taken = cls.loss_components, schema.LOSS.columns
    what = (f"{cls.__name__}.loss_components must be a tuple of distinct identifiers other than "
            f"{schema.LOSS.filename}'s columns ({', '.join(taken)}). "
            f"Received: loss_components={names!r}")
    if isinstance(names, str) or not isinstance(names, (tuple, list)):
        raise DataError(what)
    if not all(isinstance(n, str) and n.isidentifier() and n not in taken for n in names) \
            or len(set(names)) < len(names):
        raise DataError(what)
