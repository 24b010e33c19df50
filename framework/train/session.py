"""One training session: the MindSpore context, TrainStep, Model, the
callbacks, and ``Model.train``/``Model.fit``. How the run ended is not decided
here: the run's lifecycle (``train.lifecycle.RunLifecycle``) asks
:meth:`Session.stopped` what the callbacks said and :meth:`Session.summarize`
for the totals."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator
import contextlib
import gc
import logging

from .._mindspore import device_selected, mixed_precision, reset_graph_kernel
from ..callbacks import schema
from ..errors import ConfigError
from ..rundir.io import now_iso
from . import compile_dumps
from .lifecycle import Stopped

if TYPE_CHECKING:
    from mindspore.nn import Cell
    from mindspore.train import Callback, Metric, Model

    from ..callbacks.early_stopping import EarlyStopping
    from ..callbacks.loss_monitor import LossMonitor
    from ..callbacks.parameter_tracker import ParameterTracker
    from ..callbacks.timer import Timer
    from ..callbacks.train_step import TrainStep
    from ..define.config import Config
    from ..define.experiment import BaseExperiment
    from .preflight import Plan
    from .request import RunRequest
    from .resume_point import Resume
    from .signals import SignalStop
    from .steps import RunSteps

logger = logging.getLogger(__name__)


def _eval_epochs(cfg: Config) -> list[int]:
    """Epochs that end with an evaluation: every ``eval_every``-th and the last."""
    return [e for e in range(1, cfg.epochs + 1) if e % cfg.eval_every == 0 or e == cfg.epochs]


class Session:
    """One training session: builds the MindSpore objects and runs them.

    ``request``: the :class:`~mindexp.train.request.RunRequest` (experiment,
    config, the framework's extra callbacks); ``shard``: ``(number of ranks,
    this rank)`` under data parallelism.
    """

    def __init__(self, request: RunRequest, plan: Plan, run_dir: str,
                 shard: tuple[int, int] = (1, 0), stopper: SignalStop | None = None,
                 on_built: Callable[[], None] | None = None) -> None:
        self.exp: BaseExperiment = request.experiment
        self.plan, self.run_dir = plan, run_dir
        self.quiet = request.quiet
        self.added = request.callbacks  # after the experiment's own (a trial's pruning)
        self.on_built = on_built  # called once network, data, loss and optimizer are built
        self.num_shards, self.shard_id = shard
        self.cfg = request.config
        from .signals import SignalStop
        self.stopper = stopper or SignalStop()  # the runner's, held until run.json is final
        # what the features built (see _callbacks): the step count heading them, the
        # ones the run's totals and status read, and all of them in their order
        self.steps: RunSteps | None = None
        self.timer: Timer | None = None
        self.loss_cb: LossMonitor | None = None
        self.param_cb: ParameterTracker | None = None
        self.early_stop_cb: EarlyStopping | None = None
        self.cbs: list[Callback] = []
        self.net: Cell | None = None
        self.lr: Any = None  # the learning rate handed to the optimizer, logged by LossMonitor

    def execute(self, resume: Resume | None = None) -> None:
        """Train (from ``resume`` when given). Whatever ends the training, an
        exception or a signal, is the run lifecycle's to judge: it propagates."""
        with compile_dumps.kept_in(self.run_dir):
            self._train(resume)

    def _train(self, resume: Any) -> None:
        _set_context(self.cfg, self.run_dir)
        self.net = _amp(self.exp.network(), self.cfg.amp_level, self.run_dir)
        cell, lr = train_cell(self.exp, self.net, self.plan.steps_per_epoch)
        self.lr = _lr_to_log(self.exp, lr)
        if self.on_built is not None:  # what they imported is now loaded (provenance)
            self.on_built()
        initial_epoch, first_batch = 0, 0
        if resume:
            resume.load(cell)
            initial_epoch, first_batch = resume.position(self.plan.steps_per_epoch)
        model, metrics = self._model(cell)
        cbs = self._callbacks(metrics, resume)
        trained = False
        if first_batch:  # finish the interrupted epoch first, in the original order
            # (the callbacks count its steps from steps_per_epoch, given to them)
            self._fit(model, metrics, initial_epoch + 1, initial_epoch, cbs, first_batch)
            initial_epoch, trained = initial_epoch + 1, True
        # A signal before the first step still trains one, so the run stops with a
        # checkpoint to resume from (SignalStop asks for the stop at its end).
        if initial_epoch < self.cfg.epochs and not (trained and self._stopped()):
            self._fit(model, metrics, self.cfg.epochs, initial_epoch, cbs)

    def _fit(self, model: Model, metrics: dict[str, Metric], epochs: int, initial_epoch: int,
             cbs: list[Callback], first_batch: int = 0) -> None:
        assert self.steps is not None, "the callbacks are built before a fit"
        self.steps.steps_before = initial_epoch * self.plan.steps_per_epoch + first_batch
        train_ds = self._dataset("train", initial_epoch, first_batch)
        eval_ds = self._dataset("eval") if self.plan.eval is not None and metrics else None
        with startup_objects_frozen():
            if eval_ds is not None:
                model.fit(epochs, train_ds, eval_ds, valid_frequency=_eval_epochs(self.cfg),
                          callbacks=cbs, dataset_sink_mode=self.cfg.sink,
                          initial_epoch=initial_epoch,
                          valid_dataset_sink_mode=self.cfg.sink)  # fit's default is sink mode
            else:
                model.train(epochs, train_ds, callbacks=cbs, dataset_sink_mode=self.cfg.sink,
                            initial_epoch=initial_epoch)

    def _dataset(self, split: str, start_epoch: int = 0, first_batch: int = 0) -> Any:
        """The dataset of a split from where this fit starts (sharded when training)."""
        from ..define.sources import Finished
        data = self.plan.train if split == "train" else self.plan.eval
        if isinstance(data, Finished):
            return data.dataset(start_epoch, first_batch, self.num_shards) if split == "train" \
                else data.dataset()
        if split != "train":
            return self.exp.dataset(split, data)
        return self.exp.dataset(split, data, start_epoch=start_epoch, num_shards=self.num_shards,
                                shard_id=self.shard_id, first_batch=first_batch)

    def _stopped(self) -> bool:
        return self.stopper.signum is not None or bool(self.loss_cb and self.loss_cb.stop_reason) \
            or self._early_stop_reason() is not None

    def _early_stop_reason(self) -> str | None:
        cb = self.early_stop_cb
        if cb is None or cb.stop_reason is None:
            return None
        return f"early stop at epoch {cb.stopped_epoch}: {cb.stop_reason}"

    def _model(self, cell: TrainStep) -> tuple[Model, dict[str, Metric]]:
        from mindspore import nn
        from mindspore.train import Model
        from ..define.metrics import build_metrics, eval_network, with_eval_loss
        spec = with_eval_loss(self.exp.metrics(), (self.cfg.early_stop, self.cfg.checkpoint_monitor))
        metrics = build_metrics(spec) if self.plan.eval is not None else {}
        if not metrics:
            return Model(cell), {}
        eval_net = eval_network(self.net, self.exp.loss_fn())
        return Model(cell, eval_network=eval_net, metrics=metrics, eval_indexes=[0, 1, 2]), metrics

    def _callbacks(self, metrics: dict[str, Metric], resume: Resume | None) -> list[Callback]:
        """Every feature's callbacks (train/features.py), in one CallbackList:
        one MindSpore dispatch per hook, one record per step for all."""
        from ..callbacks import CallbackList
        from .features import Build, build_callbacks
        from .logs import loss_log, params_log
        from .monitors import early_stop_callback
        from .steps import run_steps, timer
        run = Build(exp=self.exp, cfg=self.cfg, run_dir=self.run_dir,
                    steps_per_epoch=self.plan.steps_per_epoch, resume=resume, metrics=metrics,
                    quiet=self.quiet, shard_id=self.shard_id, stopper=self.stopper, net=self.net,
                    added=self.added)
        built = build_callbacks(run)
        self.steps, self.timer, self.loss_cb = built.the(run_steps), built.the(timer), \
            built.the(loss_log)
        self.param_cb = built.one(params_log)
        self.early_stop_cb = built.one(early_stop_callback)
        self.cbs = built.all
        return [CallbackList(self.cbs, steps_per_epoch=self.plan.steps_per_epoch, lr=self.lr)]

    def stopped(self) -> Stopped:
        """What the callbacks said when training ended: the loss monitor's
        divergence, a callback's own status (tuning: ``pruned``) and its reason,
        or the early stop's reason."""
        if self.loss_cb is not None and self.loss_cb.stop_reason:
            return Stopped(diverged=self.loss_cb.stop_reason)
        for cb in self.cbs:  # a callback that stopped the run and names its status
            if getattr(cb, "stop_status", None):
                return Stopped(status=cb.stop_status, reason=getattr(cb, "stop_reason", None))
        return Stopped(reason=self._early_stop_reason())

    def summarize(self, meta: dict[str, Any], elapsed: float, resume: Resume | None = None) -> None:
        """The run's totals into ``meta``: steps and final loss (loss.csv's),
        epochs, training time and rate, the scalar parameters."""
        timer = self.timer
        steps, final_loss = self._last_logged()
        if not steps and resume is not None:  # resumed with nothing left to train
            steps, final_loss = resume.step, resume.loss
        train_time = timer.train_time_s if timer and timer.train_time_s else elapsed
        rate = timer.steps_per_s if timer else None
        meta.update(ended_at=now_iso(), steps=steps,
                    epochs=-(-steps // self.plan.steps_per_epoch) if steps else 0,
                    final_loss=final_loss,
                    train_time_s=round((meta.get("train_time_s") or 0) + train_time, 4),
                    steps_per_s=round(rate, 2) if rate else None,
                    params=_scalar_params(self.net))
        if self.param_cb is not None:
            # how often the large parameters reached params.csv (the budget's choice)
            meta["param_log_every_large"] = self.param_cb.large_every * self.cfg.log_every
            meta["param_stats"] = self.param_cb.stats_source   # host or graph


    def _last_logged(self) -> tuple[int, float | None]:
        """``(step, loss)`` of the last row of loss.csv: the loss monitor's, unless
        rows it took never reached the file (the disk filled): then the file's,
        which run.json's steps must match."""
        loss_cb = self.loss_cb
        if loss_cb is None:
            return 0, None
        if not loss_cb.unwritten_rows():
            return loss_cb.last_step, loss_cb.last_loss
        loss = schema.read_log(self.run_dir, "loss")
        if not len(loss):
            return 0, None
        return int(loss[schema.Col.STEP].iloc[-1]), float(loss[schema.Col.LOSS].iloc[-1])


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist before training out of the garbage collector's
    full collections while it runs (``gc.freeze``), and give them back after.

    MindSpore's modules and the network are ~170k objects; a full collection
    walks them all (~150 ms here), and the per-step allocations of training
    trigger one every few hundred steps, a quarter of a 1,000-step run's time.
    Frozen objects are only skipped, never lost: ``gc.unfreeze`` at the end
    returns them to the oldest generation. Left alone when the caller has
    frozen objects already.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def train_cell(exp: Any, net: Any, steps_per_epoch: int) -> tuple[Any, Any]:
    """The train step ``exp``'s config builds around ``net`` (a TrainStep: its
    loss, optimizer, schedule, clipping, accumulation) and the learning rate
    handed to the optimizer."""
    from ..callbacks import TrainStep
    cfg = exp.config
    lr = exp.learning_rate(steps_per_epoch)
    opt = exp.make_optimizer(net.trainable_params(), lr)
    cell = TrainStep(exp.loss_network(net), opt, clip_grad_norm=cfg.clip_grad_norm,
                     sens=cfg.loss_scale, accumulation_steps=cfg.grad_accumulation,
                     components=tuple(exp.loss_components), param_stats=_graph_param_stats(cfg))
    return cell, lr


def _lr_to_log(exp: Any, lr: Any) -> Any:
    """The learning rate LossMonitor logs as is: the one the framework computed,
    when the experiment's optimizer is the framework's (which uses it) and it
    is a number or a per-step list; else None (LossMonitor reads the optimizer)."""
    from ..define.experiment import BaseExperiment
    if getattr(type(exp), "optimizer", None) is not BaseExperiment.optimizer:
        return None
    if isinstance(lr, bool) or not isinstance(lr, (int, float, list, tuple)):
        return None
    return lr


def _graph_param_stats(cfg: Any) -> Any:
    """TrainStep's ``param_stats``: the tracked parameters' statistics in the
    train step's graph when asked for, or by default off the CPU (no
    parameter copied to the host); on the CPU numpy on the host measured
    faster (docs/scaling.md)."""
    import mindspore as ms
    if not cfg.track_params or cfg.param_stats == "host" or (
            cfg.param_stats == "auto" and ms.get_context("device_target") == "CPU"):
        return False
    return list(cfg.track_names) or True


def _set_context(cfg: Config, run_dir: str) -> None:
    import mindspore as ms
    mode = ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE
    ms.set_context(mode=mode)
    set_device(cfg.device)
    if cfg.graph_kernel:
        _enable_graph_kernel(cfg)
    else:   # an earlier run of a sweep worker may have left it on
        reset_graph_kernel()
    _set_memory_level(cfg.memory_optimize_level)
    ms.set_seed(cfg.seed)
    import numpy as np
    np.random.seed(cfg.seed)


def _set_memory_level(level: str) -> None:
    """MindSpore's memory_optimize_level (O1: SOMAS memory reuse, less peak memory).

    Set through ``set_context`` (deprecated there in favour of
    ``mindspore.runtime.set_memory``, which refuses a second call, and a
    sweep worker trains many runs in one process), and only when it
    changes, so the default O0 never touches the context.
    """
    import mindspore as ms
    if ms.get_context("memory_optimize_level") != int(level[1:]):  # the context holds 0 or 1
        ms.set_context(memory_optimize_level=level)


def set_device(device: str) -> None:
    """Select the backend, with a clear error when it is not installed."""
    import mindspore as ms
    if device_selected(device):
        return  # MindSpore refuses a second set once it has run
    try:
        ms.set_device(device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"config field 'device': MindSpore cannot use {device} here "
                          f"({str(exc).splitlines()[0]}); accepted: CPU, or GPU/Ascend with the "
                          f"matching mindspore package. Received: device={device!r}",
                          field="device") from None


def _enable_graph_kernel(cfg: Config) -> None:
    import mindspore as ms
    if cfg.device == "CPU":
        # MindSpore accepts the switch on CPU but then fails compiling fused kernels (no AKG).
        logger.warning("graph_kernel: MindSpore's graph-kernel fusion is not supported on CPU; "
                       "training without it")
        return
    if cfg.mode == "pynative":
        logger.warning("graph_kernel: kernel fusion applies to graph mode only; "
                       "ignored with mode=pynative")
        return
    ms.set_context(enable_graph_kernel=True)


def _amp(net: Cell, level: str, run_dir: str) -> Cell:
    if level == "O0":
        return net
    # O1's rewritten network source goes into the run directory, not the cwd.
    return mixed_precision(net, level, run_dir)


def _scalar_params(net: Cell | None) -> dict[str, float]:
    if net is None:
        return {}
    out = {}
    for p in net.trainable_params():
        if p.size == 1:
            out[p.name] = float(p.asnumpy().reshape(-1)[0])
    return out
