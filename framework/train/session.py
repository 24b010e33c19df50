"""One training session: the MindSpore context, TrainStep, Model, the
callbacks, and ``Model.train``/``Model.fit``; what happened goes into the
run record (run.json) it is given."""
import contextlib
import gc
import logging
import time

from .._mindspore import device_selected, mixed_precision, reset_graph_kernel
from ..callbacks import schema
from ..errors import ConfigError
from ..rundir.io import now_iso
from . import compile_dumps, failures
from .tracked import note_signal, stateful_callbacks

logger = logging.getLogger(__name__)


def _eval_epochs(cfg):
    """Epochs that end with an evaluation: every ``eval_every``-th and the last."""
    return [e for e in range(1, cfg.epochs + 1) if e % cfg.eval_every == 0 or e == cfg.epochs]


class Session:
    """One training session: builds the MindSpore objects and runs them.

    ``request``: the :class:`~mindexp.train.request.RunRequest` (experiment,
    config, the framework's extra callbacks); ``shard``: ``(number of ranks,
    this rank)`` under data parallelism.
    """

    def __init__(self, request, plan, run_dir, shard=(1, 0), stopper=None, on_built=None):
        self.exp, self.plan, self.run_dir = request.experiment, plan, run_dir
        self.quiet = request.quiet
        self.added = request.callbacks  # after the experiment's own (a trial's pruning)
        self.on_built = on_built  # called once network, data, loss and optimizer are built
        self.num_shards, self.shard_id = shard
        self.cfg = request.config
        from .signals import SignalStop
        self.stopper = stopper or SignalStop()  # the runner's, held until run.json is final
        self.steps = None  # the RunSteps heading the callbacks (see _callbacks)
        self.loss_cb = None
        self.param_cb = None
        self.early_stop_cb = None
        self.cbs = []
        self.net = None
        self.lr = None  # the learning rate handed to the optimizer, logged by LossMonitor

    def execute(self, record, resume=None):
        """Train (from ``resume`` when given) and put the outcome into ``record``
        (a :class:`~mindexp.rundir.record.RunRecord`; the caller writes it)."""
        meta = record.meta
        start = time.monotonic()
        try:
            with self.stopper, self.stopper.training(), compile_dumps.kept_in(self.run_dir):
                self._train(resume)
        except KeyboardInterrupt:
            meta.update(status="interrupted", error="interrupted (second signal)")
            note_signal(meta, self.stopper.signum)
        except Exception as exc:  # the run failed: keep why, the caller raises
            record.failed(failures.one_line(exc))
            if self.shard_id == 0:  # the full traceback: error.txt in the run directory
                failures.save_traceback(self.run_dir, exc)
            logger.debug("training failed", exc_info=True)
        else:
            meta["status"] = self._status(meta)
        self._summarize(meta, time.monotonic() - start, resume)  # the log summary: finish_record

    def _train(self, resume):
        from ..callbacks import TrainStep

        _set_context(self.cfg, self.run_dir)
        self.net = _amp(self.exp.network(), self.cfg.amp_level, self.run_dir)
        loss_net = self.exp.loss_network(self.net)
        lr = self.exp.learning_rate(self.plan.steps_per_epoch)
        self.lr = _lr_to_log(self.exp, lr)
        opt = self.exp.make_optimizer(self.net.trainable_params(), lr)
        cell = TrainStep(loss_net, opt, clip_grad_norm=self.cfg.clip_grad_norm,
                         sens=self.cfg.loss_scale, accumulation_steps=self.cfg.grad_accumulation,
                         components=tuple(self.exp.loss_components),
                         param_stats=_graph_param_stats(self.cfg))
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

    def _fit(self, model, metrics, epochs, initial_epoch, cbs, first_batch=0):
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

    def _dataset(self, split, start_epoch=0, first_batch=0):
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

    def _stopped(self):
        return self.stopper.signum is not None or bool(self.loss_cb and self.loss_cb.stop_reason) \
            or self._early_stop_reason() is not None

    def _early_stop_reason(self):
        cb = self.early_stop_cb
        if cb is None or cb.stop_reason is None:
            return None
        return f"early stop at epoch {cb.stopped_epoch}: {cb.stop_reason}"

    def _model(self, cell):
        from mindspore import nn
        from mindspore.train import Model
        from ..define.metrics import build_metrics, eval_network, with_eval_loss
        spec = with_eval_loss(self.exp.metrics(), (self.cfg.early_stop, self.cfg.checkpoint_monitor))
        metrics = build_metrics(spec) if self.plan.eval is not None else {}
        if not metrics:
            return Model(cell), {}
        eval_net = eval_network(self.net, self.exp.loss_fn())
        return Model(cell, eval_network=eval_net, metrics=metrics, eval_indexes=[0, 1, 2]), metrics

    def _callbacks(self, metrics, resume):
        from ..callbacks import Checkpoint, GradNormMonitor, LossMonitor, ParameterTracker
        from ..callbacks.eval_monitor import EvalMonitor
        cfg, d = self.cfg, self.run_dir
        ranks, spe = cfg.log_all_ranks, self.plan.steps_per_epoch
        self.loss_cb = LossMonitor(d, every=cfg.log_every, all_ranks=ranks,
                                   time_offset=resume.time_offset if resume else 0.0,
                                   on_nan="stop",  # the run records "diverged" instead
                                   steps_per_epoch=spe, lr=self.lr)
        from ..callbacks import Timer
        self.timer = Timer()
        from .steps import RunSteps
        self.steps = RunSteps()  # first: every callback after it reads the run's step
        cbs = [self.steps, self.stopper.head(), self.timer, self.loss_cb]
        if cfg.track_params:
            self.param_cb = ParameterTracker(d, names=list(cfg.track_names) or None,
                                             all_ranks=ranks, every=cfg.log_every,
                                             max_values=cfg.max_param_values, steps_per_epoch=spe,
                                             budget=cfg.param_log_budget,
                                             batch_size=cfg.batch_size * cfg.grad_accumulation,
                                             stats=cfg.param_stats)
            cbs.append(self.param_cb)
        cbs.append(GradNormMonitor(d, every=cfg.log_every, all_ranks=ranks, steps_per_epoch=spe))
        if metrics:
            cbs.append(EvalMonitor(d, list(metrics), steps_per_epoch=spe))
        cbs.extend(self._extras(bool(metrics), resume))
        from .progress import Progress, wanted
        if wanted(self.quiet):
            cbs.append(Progress(cfg.epochs, self.plan.steps_per_epoch))
        cbs.extend(list(self.exp.callbacks() or []) + list(self.added))
        from .monitors import best_checkpoint_args, early_stopping
        self.early_stop_cb = early_stopping(self.exp, d, resume, self.plan.steps_per_epoch)
        if self.early_stop_cb is not None:
            cbs.append(self.early_stop_cb)
        # Logs are flushed before each checkpoint (never behind it): ours and the
        # experiment's callbacks that buffer (anything with a flush()).
        flush = [cb for cb in cbs if callable(getattr(cb, "flush", None))]
        stateful = stateful_callbacks(cbs, resume)  # their state goes with each checkpoint
        cbs.append(Checkpoint(d, every_epochs=cfg.checkpoint_every or None,
                              keep_last=cfg.keep_checkpoints,
                              min_interval_s=cfg.checkpoint_interval_s, flush=flush,
                              steps_per_epoch=spe, stateful=stateful,
                              **best_checkpoint_args(self.exp)))
        # Last, so a signal that arrives during any callback of step s stops at s.
        cbs.append(self.stopper)
        self.cbs = cbs
        return cbs

    def _extras(self, evaluates, resume):
        """The sampler of system.csv and the experiment's figures, when wanted."""
        from .figures import Figures, has_figures
        from .system import system_monitor
        cfg, extras = self.cfg, []
        monitor = system_monitor(cfg, self.run_dir, resume)
        if monitor is not None:
            extras.append(monitor)
        if self.shard_id == 0 and has_figures(self.exp):
            extras.append(Figures(self.exp, self.net, self.run_dir, evaluates,
                                  steps_per_epoch=self.plan.steps_per_epoch))
        return extras

    def _status(self, meta):
        if self.stopper.signum is not None:
            note_signal(meta, self.stopper.signum)
            return "interrupted"
        if self.loss_cb is not None and self.loss_cb.stop_reason:
            meta["error"] = f"diverged: {self.loss_cb.stop_reason}"
            return "diverged"
        meta["stop_reason"] = self._early_stop_reason()
        # A callback that stopped the run and names its status (tuning: "pruned").
        for cb in self.cbs:
            if getattr(cb, "stop_status", None):
                meta["stop_reason"] = getattr(cb, "stop_reason", None)
                return cb.stop_status
        return "completed"

    def _summarize(self, meta, elapsed, resume=None):
        timer = getattr(self, "timer", None)
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


    def _last_logged(self):
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
def startup_objects_frozen():
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


def _lr_to_log(exp, lr):
    """The learning rate LossMonitor logs as is: the one the framework computed,
    when the experiment's optimizer is the framework's (which uses it) and it
    is a number or a per-step list; else None (LossMonitor reads the optimizer)."""
    from ..define.experiment import BaseExperiment
    if getattr(type(exp), "optimizer", None) is not BaseExperiment.optimizer:
        return None
    if isinstance(lr, bool) or not isinstance(lr, (int, float, list, tuple)):
        return None
    return lr


def _graph_param_stats(cfg):
    """TrainStep's ``param_stats``: the tracked parameters' statistics in the
    train step's graph when asked for, or by default off the CPU (no
    parameter copied to the host); on the CPU numpy on the host measured
    faster (docs/scaling.md)."""
    import mindspore as ms
    if not cfg.track_params or cfg.param_stats == "host" or (
            cfg.param_stats == "auto" and ms.get_context("device_target") == "CPU"):
        return False
    return list(cfg.track_names) or True


def _set_context(cfg, run_dir):
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


def _set_memory_level(level):
    """MindSpore's memory_optimize_level (O1: SOMAS memory reuse, less peak memory).

    Set through ``set_context`` (deprecated there in favour of
    ``mindspore.runtime.set_memory``, which refuses a second call, and a
    sweep worker trains many runs in one process), and only when it
    changes, so the default O0 never touches the context.
    """
    import mindspore as ms
    if ms.get_context("memory_optimize_level") != int(level[1:]):  # the context holds 0 or 1
        ms.set_context(memory_optimize_level=level)


def set_device(device):
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


def _enable_graph_kernel(cfg):
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


def _amp(net, level, run_dir):
    if level == "O0":
        return net
    # O1's rewritten network source goes into the run directory, not the cwd.
    return mixed_precision(net, level, run_dir)


def _scalar_params(net):
    if net is None:
        return {}
    out = {}
    for p in net.trainable_params():
        if p.size == 1:
            out[p.name] = float(p.asnumpy().reshape(-1)[0])
    return out
