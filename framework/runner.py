"""Train an Experiment with mindspore.train.Model into a run directory."""
import contextlib
import gc
import logging
import os
import platform
import sys
import time

from . import config as _config
from . import compile_dumps, failures
from .data import as_arrays
from .errors import ConfigError, DataError, MindexpError
from .labels import check_data
from .metrics import check_metric_names
from .rundir import create_run_dir, now_iso, write_json

logger = logging.getLogger(__name__)


class TrainingError(Exception):
    """Training itself failed; ``run`` is the :class:`Run` (status failed)."""

    def __init__(self, message, run=None):
        super().__init__(message)
        self.run = run


class Plan:
    """Everything checked before a run directory exists."""

    def __init__(self, train, eval_, steps_per_epoch):
        self.train, self.eval = train, eval_
        self.steps_per_epoch = steps_per_epoch


def prepare(exp, workers=1, check_network=True):
    """Load and check the data, the data-dependent config limits, the eval
    metrics and the device."""
    cfg = exp.config
    check_device(cfg.device)
    train = as_arrays(_source(exp, "train"), exp.columns, "train")
    raw_eval = _source(exp, "eval")
    eval_ = as_arrays(raw_eval, exp.columns, "eval") if raw_eval is not None else None
    n, per_step = len(train[0]), cfg.batch_size * cfg.grad_accumulation
    if per_step * workers > n:
        what = f"batch_size x grad_accumulation ({cfg.batch_size} x {cfg.grad_accumulation})" \
            if cfg.grad_accumulation > 1 else f"batch_size ({cfg.batch_size})"
        raise ConfigError(f"config field 'batch_size': {what} x workers ({workers}) must be at "
                          f"most the training set size {n}. Received: batch_size={cfg.batch_size}",
                          field="batch_size")
    steps_per_epoch = n // per_step // workers
    total = steps_per_epoch * cfg.epochs
    if cfg.warmup_steps > total:
        raise ConfigError(f"config field 'warmup_steps' must be at most the run's {total} steps. "
                          f"Received: warmup_steps={cfg.warmup_steps}", field="warmup_steps")
    out_shape = check_output_shape(exp, train) if check_network else None
    check_data(exp, {"train": train, "eval": eval_}, out_shape)  # NaN/Inf, class ids
    _check_eval(exp, eval_)
    return Plan(train, eval_, steps_per_epoch)


# Losses that compare output and label element by element (and would
# silently broadcast (b, 1) against (b,) into a (b, b) loss).
_ELEMENTWISE = ("mse", "mae", "l1", "huber", "bce")


def check_output_shape(exp, train):
    """Run the network on one batch (PyNative, before anything is created) and
    reject an output that cannot match the labels, naming both shapes.
    Returns the output shape (None when not probed)."""
    from .experiment import Experiment
    if type(exp).loss_network is not Experiment.loss_network or len(train) != 2:
        return None  # a custom loss cell decides what matches
    out_shape, labels = _forward_shape(exp, train[0][:exp.config.batch_size]), train[1]
    if out_shape is None:
        return None  # the network fails on its own: training reports it as a failed run
    label_shape = (min(len(labels), exp.config.batch_size),) + labels.shape[1:]
    if exp.config.loss in _ELEMENTWISE:
        ok = tuple(out_shape) == label_shape
    else:  # sparse cross-entropy: (b, classes) logits for (b,) labels
        ok = len(out_shape) == 2 and out_shape[0] == label_shape[0] and len(label_shape) == 1
    if not ok:
        raise DataError(f"the network's output shape {tuple(out_shape)} does not match the labels' "
                        f"shape {label_shape} (column {exp.columns[1]!r}, loss {exp.config.loss!r}); "
                        "make the network return one value per label")
    return out_shape


def _forward_shape(exp, batch):
    import mindspore as ms
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return exp.network()(ms.Tensor(batch)).shape
    except Exception:  # the user's network: a failure here is the run's to report
        return None
    finally:
        ms.set_context(mode=mode)


def _check_eval(exp, eval_):
    """Metric names are known, and asked for only when there is an eval split."""
    if eval_ is not None:
        check_metric_names(exp.metrics())
    elif exp.config.metrics:
        raise ConfigError(f"config field 'metrics' needs an eval split, and "
                          f"{exp.experiment_name()}.source('eval') gives none. "
                          f"Received: metrics={','.join(exp.config.metrics)}", field="metrics")


def _eval_epochs(cfg):
    """Epochs that end with an evaluation: every ``eval_every``-th and the last."""
    return [e for e in range(1, cfg.epochs + 1) if e % cfg.eval_every == 0 or e == cfg.epochs]


def _source(exp, split):
    try:
        return exp.source(split)
    except MindexpError:
        raise
    except NotImplementedError:
        raise
    except Exception as exc:  # the user's code: say where it failed
        raise failures.user_code_error(f"{type(exp).__name__}.source({split!r}) raised", exc) \
            from None


def train(exp, out="outputs", label=None, quiet=True, entry=None):
    """Train ``exp`` in a new run directory under ``out`` and return its Run.

    Raises ConfigError/DataError before anything is created, TrainingError
    (after run.json says failed) when training itself fails.
    """
    from . import distributed
    if distributed.under_msrun():  # started by the user's own msrun command
        return _train_as_worker_of_own_msrun(exp, out, label, entry)
    workers = exp.config.workers
    plan = prepare(exp, workers=workers)
    run_dir = create_run_dir(out, exp.experiment_name(), label)
    if workers > 1:
        return launch_workers(exp, run_dir, entry)
    return _train_in(exp, plan, run_dir, quiet, entry)


def launch_workers(exp, run_dir, entry, resume=False, previous=None):
    """Train with ``config.workers`` msrun workers; the launcher keeps run.json true
    when a worker dies (status failed with that worker's last log lines)."""
    from . import distributed
    from .run import Run
    from .rundir import read_json
    meta = previous or _initial_meta(exp, run_dir, entry)
    if not resume:
        write_json(os.path.join(run_dir, "config.json"), _config.to_dict(exp.config))
    meta.update(status="running", workers=exp.config.workers)
    write_json(os.path.join(run_dir, "run.json"), meta)
    code = distributed.launch(run_dir, exp.config.workers, resume=resume)
    meta = read_json(os.path.join(run_dir, "run.json"))
    _save_plots(run_dir)
    if code != 0 and meta.get("status") in ("running", "completed"):
        log, tail = distributed.worker_failure(run_dir)
        meta.update(status="failed", ended_at=now_iso(),
                    error=f"msrun exited with status {code}; last lines of msrun/{log}:\n{tail}")
        write_json(os.path.join(run_dir, "run.json"), meta)
    if meta["status"] == "failed":
        raise TrainingError(meta["error"].splitlines()[0], run=Run(run_dir))
    return Run(run_dir)


def run_worker(run_dir, resume=False):
    """One msrun worker of a launched run: join the cluster and train; rank 0 writes."""
    from . import distributed
    from .catalog import load_experiment
    from .rundir import read_json
    rank, size = distributed.init_data_parallel()
    meta = read_json(os.path.join(run_dir, "run.json"))
    exp = load_experiment(meta["entry"])(read_json(os.path.join(run_dir, "config.json")))
    plan = prepare(exp, workers=size, check_network=False)  # the launcher checked it
    point = None
    if resume:
        from .resume import load_resume_point
        point = load_resume_point(run_dir)
    return _train_in(exp, plan, run_dir, True, meta["entry"], resume=point,
                     previous=meta if resume else None, shard=(size, rank))


def _train_as_worker_of_own_msrun(exp, out, label, entry):
    from . import distributed
    rank, size = distributed.init_data_parallel()
    plan = prepare(exp, workers=size)
    if rank == 0:
        run_dir = create_run_dir(out, exp.experiment_name(), label)
    else:  # other ranks write nothing; this path is never created
        run_dir = os.path.join(os.fspath(out), exp.experiment_name(), f".rank{rank}")
    return _train_in(exp, plan, run_dir, True, entry, shard=(size, rank))


def _train_in(exp, plan, run_dir, quiet, entry, resume=None, previous=None, shard=(1, 0)):
    from .run import Run
    exp.run_dir = run_dir
    writer = shard[1] == 0  # rank 0 alone writes the run directory
    meta = _initial_meta(exp, run_dir, entry)
    meta["workers"] = shard[0]
    if previous is not None:
        meta.update(started_at=previous.get("started_at", meta["started_at"]),
                    train_time_s=previous.get("train_time_s"),
                    resumes=previous.get("resumes", []) + [
                        {"at": now_iso(), "step": resume.step, "checkpoint":
                         os.path.relpath(resume.path, run_dir),
                         "previous_status": previous.get("status")}])
    if writer:
        write_json(os.path.join(run_dir, "config.json"), _config.to_dict(exp.config))
        write_json(os.path.join(run_dir, "run.json"), meta)
        failures.reserve_space(run_dir)  # so run.json can still say why on a full disk
    session = _Session(exp, plan, run_dir, quiet, shard)
    session.execute(meta, resume)
    if not writer:
        if meta["status"] == "failed":
            raise TrainingError(meta.get("error") or "training failed")
        return None
    failures.release_space(run_dir)
    write_json(os.path.join(run_dir, "run.json"), meta)
    if shard[0] == 1:
        # Under msrun, ranks must leave the cluster together: a rank 0 still
        # plotting after the others exit is declared timed out. The launcher
        # plots instead.
        _save_plots(run_dir)
    run = Run(run_dir)
    if meta["status"] == "failed":
        raise TrainingError(meta.get("error") or "training failed", run=run)
    return run


def _save_plots(run_dir):
    """Draw plots/ of the run; plots are a convenience, so a failure only warns."""
    try:
        from .plots import save_run_plots
        save_run_plots(run_dir)
    except Exception as exc:
        logger.warning("could not draw the plots of %s: %s: %s", run_dir, type(exc).__name__, exc)


def _initial_meta(exp, run_dir, entry):
    import numpy
    cfg = exp.config
    return {
        "experiment": exp.experiment_name(),
        "run_id": os.path.basename(run_dir),
        "entry": entry or f"{type(exp).__module__}:{type(exp).__qualname__}",
        "status": "running",
        "started_at": now_iso(),
        "ended_at": None,
        "steps": 0,
        "epochs": 0,
        "final_loss": None,
        "train_time_s": None,
        "steps_per_s": None,
        "device": cfg.device,
        "mode": cfg.mode,
        "workers": cfg.workers,
        "pid": os.getpid(),
        "host": platform.node(),
        "versions": {"mindspore": _mindspore_version(), "numpy": numpy.__version__,
                     "python": platform.python_version()},
        "targets": dict(exp.targets() or {}),
        "params": {},
        "error": None,
    }


def _mindspore_version():
    from importlib import metadata
    try:
        return metadata.version("mindspore")
    except metadata.PackageNotFoundError:
        return None


class _Session:
    """One training session: builds the MindSpore objects and runs them."""

    def __init__(self, exp, plan, run_dir, quiet, shard=(1, 0)):
        self.exp, self.plan, self.run_dir, self.quiet = exp, plan, run_dir, quiet
        self.num_shards, self.shard_id = shard
        self.cfg = exp.config
        from .signals import SignalStop
        self.stopper = SignalStop()
        self.loss_cb = None
        self.net = None

    def execute(self, meta, resume=None):
        start = time.monotonic()
        try:
            with self.stopper.installed(), compile_dumps.kept_in(self.run_dir):
                self._train(resume)
        except KeyboardInterrupt:
            meta.update(status="interrupted", error="interrupted (second signal)")
            _note_signal(meta, self.stopper.signum)
        except Exception as exc:  # the run failed: keep why, the caller raises
            meta.update(status="failed", error=failures.one_line(exc))
            if self.shard_id == 0:
                failures.save_traceback(self.run_dir, exc)
            logger.debug("training failed", exc_info=True)
        else:
            meta["status"] = self._status(meta)
        self._summarize(meta, time.monotonic() - start)

    def _train(self, resume):
        from .callbacks import TrainStep

        _set_context(self.cfg, self.run_dir)
        self.net = _amp(self.exp.network(), self.cfg.amp_level, self.run_dir)
        loss_net = self.exp.loss_network(self.net)
        lr = self.exp.learning_rate(self.plan.steps_per_epoch)
        opt = self.exp.make_optimizer(self.net.trainable_params(), lr)
        cell = TrainStep(loss_net, opt, clip_grad_norm=self.cfg.clip_grad_norm,
                         sens=self.cfg.loss_scale, accumulation_steps=self.cfg.grad_accumulation)
        initial_epoch, first_batch = 0, 0
        if resume:
            resume.load(cell)
            initial_epoch, first_batch = resume.position(self.plan.steps_per_epoch)
        model, metrics = self._model(cell)
        cbs = self._callbacks(metrics, resume)
        if first_batch:  # finish the interrupted epoch first, in the original order
            offset = initial_epoch * self.plan.steps_per_epoch + first_batch - initial_epoch * (
                self.plan.steps_per_epoch - first_batch)
            self._fit(model, metrics, initial_epoch + 1, initial_epoch, [_StepOffset(offset)] + cbs,
                      first_batch)
            initial_epoch += 1
        if initial_epoch < self.cfg.epochs and not self._stopped():
            self._fit(model, metrics, self.cfg.epochs, initial_epoch, cbs)

    def _fit(self, model, metrics, epochs, initial_epoch, cbs, first_batch=0):
        train_ds = self.exp.dataset("train", self.plan.train, start_epoch=initial_epoch,
                                    num_shards=self.num_shards, shard_id=self.shard_id,
                                    first_batch=first_batch)
        eval_ds = (self.exp.dataset("eval", self.plan.eval)
                   if self.plan.eval is not None and metrics else None)
        with startup_objects_frozen():
            if eval_ds is not None:
                model.fit(epochs, train_ds, eval_ds, valid_frequency=_eval_epochs(self.cfg),
                          callbacks=cbs, dataset_sink_mode=self.cfg.sink,
                          initial_epoch=initial_epoch,
                          valid_dataset_sink_mode=self.cfg.sink)  # fit's default is sink mode
            else:
                model.train(epochs, train_ds, callbacks=cbs, dataset_sink_mode=self.cfg.sink,
                            initial_epoch=initial_epoch)

    def _stopped(self):
        return self.stopper.signum is not None or bool(self.loss_cb and self.loss_cb.stop_reason)

    def _model(self, cell):
        from mindspore import nn
        from mindspore.train import Model
        from .metrics import build_metrics
        metrics = build_metrics(self.exp.metrics()) if self.plan.eval is not None else {}
        if not metrics:
            return Model(cell), {}
        eval_net = nn.WithEvalCell(self.net, self.exp.loss_fn())
        return Model(cell, eval_network=eval_net, metrics=metrics, eval_indexes=[0, 1, 2]), metrics

    def _callbacks(self, metrics, resume):
        from .callbacks import Checkpoint, GradNormMonitor, LossMonitor, ParameterTracker
        from .callbacks.eval_monitor import EvalMonitor
        cfg, d = self.cfg, self.run_dir
        ranks = cfg.log_all_ranks
        self.loss_cb = LossMonitor(d, every=cfg.log_every, all_ranks=ranks,
                                   time_offset=resume.time_offset if resume else 0.0)
        from .callbacks import Timer
        self.timer = Timer()
        cbs = [self.timer, self.loss_cb]
        if cfg.track_params:
            cbs.append(ParameterTracker(d, names=list(cfg.track_names) or None, all_ranks=ranks,
                                        every=cfg.log_every, max_values=cfg.max_param_values))
        cbs.append(GradNormMonitor(d, every=cfg.log_every, all_ranks=ranks))
        if metrics:
            cbs.append(EvalMonitor(d, list(metrics)))
        if not self.quiet and sys.stdout.isatty():
            from .progress import Progress
            cbs.append(Progress(cfg.epochs, self.plan.steps_per_epoch))
        cbs.extend(self.exp.callbacks() or [])
        cbs.append(Checkpoint(d, every_epochs=cfg.checkpoint_every or None,
                              keep_last=cfg.keep_checkpoints,
                              min_interval_s=cfg.checkpoint_interval_s))
        # Last, so a signal that arrives during any callback of step s stops at s.
        cbs.append(self.stopper)
        return cbs

    def _status(self, meta):
        if self.stopper.signum is not None:
            _note_signal(meta, self.stopper.signum)
            return "interrupted"
        if self.loss_cb is not None and self.loss_cb.stop_reason:
            meta["error"] = f"diverged: {self.loss_cb.stop_reason}"
            return "diverged"
        return "completed"

    def _summarize(self, meta, elapsed):
        loss_cb, timer = self.loss_cb, getattr(self, "timer", None)
        steps = loss_cb.last_step if loss_cb else 0
        train_time = timer.train_time_s if timer and timer.train_time_s else elapsed
        rate = timer.steps_per_s if timer else None
        meta.update(ended_at=now_iso(), steps=steps,
                    epochs=-(-steps // self.plan.steps_per_epoch) if steps else 0,
                    final_loss=loss_cb.last_loss if loss_cb else None,
                    train_time_s=round((meta.get("train_time_s") or 0) + train_time, 4),
                    steps_per_s=round(rate, 2) if rate else None,
                    params=_scalar_params(self.net))


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


def _StepOffset(offset):
    """A callback that makes the callbacks' global step continue mid-epoch."""
    from mindspore.train import Callback

    class StepOffset(Callback):
        def on_train_begin(self, run_context):
            run_context.original_args().step_offset = offset
    return StepOffset()


def _set_context(cfg, run_dir):
    import mindspore as ms
    mode = ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE
    ms.set_context(mode=mode)
    set_device(cfg.device)
    if cfg.graph_kernel:
        _enable_graph_kernel(cfg)
    elif ms.get_context("enable_graph_kernel"):   # left on by an earlier run of a sweep worker
        ms.set_context(enable_graph_kernel=False)
    ms.set_seed(cfg.seed)
    import numpy as np
    np.random.seed(cfg.seed)


def check_device(device):
    """ConfigError, before any run directory exists, when MindSpore has no
    ``device`` backend here (``ms.set_device`` would only fail later)."""
    if device == "CPU":
        return
    import mindspore as ms
    if not ms.hal.is_available(device):
        raise ConfigError(f"config field 'device': this MindSpore installation cannot use "
                          f"{device} (mindspore.hal.is_available({device!r}) is False); accepted: "
                          f"CPU, or GPU/Ascend with the matching mindspore package and drivers. "
                          f"Received: device={device!r}", field="device")


def set_device(device):
    """Select the backend, with a clear error when it is not installed."""
    import mindspore as ms
    if ms.get_context("device_target") == device:
        return  # already selected; MindSpore refuses a second set once it has run
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
    import contextlib
    from mindspore import amp
    # O1 rewrites the network's Python source into ./rewritten_network/ (MindSpore uses
    # the working directory, and graph mode reads the file back when compiling): keep
    # that file in the run directory rather than wherever the user started mindexp.
    with contextlib.chdir(run_dir):
        return amp.auto_mixed_precision(net, level)


def _scalar_params(net):
    if net is None:
        return {}
    out = {}
    for p in net.trainable_params():
        if p.size == 1:
            out[p.name] = float(p.asnumpy().reshape(-1)[0])
    return out


def _note_signal(meta, signum):
    if signum is not None:
        name = failures.signal_name(signum)
        meta.update(signal=name, error=f"interrupted by {name}")

