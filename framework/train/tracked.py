"""track(): any MindSpore script is a run, in two lines.

```python
with mindexp.track("outputs", "my_script", config={"lr": 0.01}) as run:
    model.train(10, dataset, callbacks=run.callbacks(model))
```

The context owns what a run owns: the locked run folder (``rundir.run_lock``),
run.json from ``running`` to its final status (``rundir.record``), the
signal handlers (``train.signals``), provenance, config.json, and the final
record with the steps and the last loss of loss.csv. :class:`TrackedRun` is a
:class:`~mindexp.train.lifecycle.RunLifecycle`, the object ``Experiment.run``
enters too: how a run ends (its status, error.txt, the final record) is
decided in one place for both.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import types
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..callbacks import schema
from ..callbacks._registry import register_log, run_declared
from ..define.entry import is_script_entry, script_entry
from ..errors import ConfigError, MindexpError
from ..rundir.io import MAX_JSON_DEPTH, check_label, too_deep
from ..rundir.meta import read_meta
from ..rundir.record import RunRecord
from ..rundir.run_lock import acquire
from . import failures, mlflow_stream
from .lifecycle import RunLifecycle, Stopped, hold_new_run, hold_signals, open_record
from .loop import Loop, LoopSettings
from .signals import SignalStop

__all__ = ["track", "TrackedRun"]

logger = logging.getLogger(__name__)


def track(out: str | os.PathLike[str], name: str, config: Mapping[str, Any] | None = None, *,
          tags: Iterable[str] = (), note: str | None = None,
          resume: str | os.PathLike[str] | None = None, mlflow: str | None = None,
          seed: int | None = None, early_stop: str | None = None, patience: int = 5,
          min_delta: float = 0.0, checkpoint_monitor: str | None = None, keep_best: int = 1,
          keep_checkpoints: int | None = 3) -> TrackedRun:
    """A tracked run of a plain MindSpore script, as a context manager.

    ``with mindexp.track(out, name, config) as run:`` creates
    ``<out>/<name>/<run_id>/`` (a fresh ``run_id`` each time: running the
    script twice makes two runs) and keeps its run.json true to the end:
    ``completed`` when the block ends normally; ``failed`` with error.txt
    when it raises (the exception propagates); ``interrupted`` on SIGTERM or
    SIGINT, then ``SystemExit(143)``/``SystemExit(130)`` (in a notebook a
    SIGINT stays a KeyboardInterrupt). ``run.callbacks(model)`` gives the
    standard monitors and checkpoint, writing into ``run.dir``.

    Args:
        out: output root (runs go to ``<out>/<name>/``).
        name: the script's name: 1-64 letters, digits, ``.``, ``_``, ``-``,
            ``+``, ``=`` (like ``mindexp run --name``).
        config: the script's settings, JSON-serialisable (config.json,
            and the columns of ``mindexp compare``).
        tags: the run's tags (``mindexp tag`` changes them later).
        note: the run's note (``mindexp note`` changes it later).
        resume: a script run's folder to continue in place (from its latest
            good checkpoint: ``run.load(...)``, ``run.position(steps)``); the
            folder changes only once ``run.load`` succeeded (or the first
            ``run.callbacks``/``run.step``): a checkpoint that fails changes nothing.
        mlflow: an MLflow tracking URI the run streams to (a sender process; never waited for).
        seed: seeds MindSpore, NumPy and the order of ``run.batches``
            (default: the config's ``seed``, else 0; config.json records it).
        early_stop: a hand-written loop stops early (``run.should_stop``) when
            this value (``loss``, or ``eval_<metric>`` of ``run.log_eval``)
            has not improved for ``patience`` epochs by more than ``min_delta``.
        checkpoint_monitor: ``loss`` or ``eval_<metric>`` (of ``run.log_eval``)
            by which ``keep_best`` checkpoints are kept, its direction from its
            name (:func:`mindexp.callbacks.metric_direction`).
        keep_checkpoints: regular checkpoints ``run.save`` keeps (None: all).

    Raises:
        ConfigError: a bad name or config (not JSON, not finite), before anything is created.
    """
    script = _caller_file(sys._getframe(1))
    given = {} if not isinstance(config, Mapping) else config
    settings = LoopSettings(seed=_seed_of(seed, given), early_stop=early_stop, patience=patience,
                            min_delta=min_delta, checkpoint_monitor=checkpoint_monitor,
                            keep_best=keep_best, keep_checkpoints=keep_checkpoints).check()
    return TrackedRun(out, name, config, tags=tags, note=note, resume=resume, script=script,
                      mlflow=mlflow, loop=settings)


class TrackedRun(RunLifecycle):
    """A run made by :func:`track`; use it as a context manager.

    Inside the block: ``dir`` (the run folder), ``run_id``, ``config``,
    ``resumed`` (the resume point or None) and :meth:`callbacks`.
    """

    def __init__(self, out: str | os.PathLike[str], name: str,
                 config: Mapping[str, Any] | None = None, *, tags: Iterable[str] = (),
                 note: str | None = None, resume: str | os.PathLike[str] | None = None,
                 script: str | None = None, mlflow: str | None = None,
                 loop: LoopSettings | None = None) -> None:
        super().__init__()
        self.config = _checked_config(config)
        self.settings = loop or LoopSettings(seed=_seed_of(None, self.config))
        self.config.update(self.settings.config())  # config.json: the resolved settings too
        self.mlflow = None if mlflow is None else _mlflow_uri(mlflow)
        self.name = check_label(name, "track()'s name")
        self.out, self.tags, self.note, self.script = out, list(tags or ()), note, script
        self.resume_from = resume
        self.dir = ""
        self.run_id = ""
        self.resumed: Any = None  # train.resume.Resume of a resumed run
        self.writer = True  # False on a rank other than 0 under msrun: it records nothing
        self._loss_cb: Any = None
        self._timer: Any = None
        self._loop: Loop | None = None
        self._frozen = False

    # -- the block (RunLifecycle's __enter__/__exit__) ----------------------------
    def __enter__(self) -> TrackedRun:
        super().__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> bool:
        if self._loop is not None:
            try:
                self._loop.end(exc)  # the loop's last epoch end and final checkpoint
            except BaseException as error:  # the run fails with it (its record says why)
                if exc is None:
                    exc_type, exc, tb = type(error), error, error.__traceback__
                else:  # the block's own exception says why the run ended
                    logger.warning("ending the loop after %s failed too: %s",
                                   type(exc).__name__, failures.one_line(error))
        return super().__exit__(exc_type, exc, tb)

    def _open(self) -> None:
        """Signals, the run folder and its record, before the block runs."""
        self._stopper = hold_signals(self._held, _BlockStop())
        self.dir = self._hold_folder()
        self.run_id = os.path.basename(self.dir)
        if self.writer and threading.current_thread() is not threading.main_thread():
            self._held.callback(_watched_from_outside(self.dir))  # before the lock is released
        if self.writer and self.resumed is None:  # a resumed one waits for its load
            self.record = self._start_record()
        if os.path.isdir(self.dir):
            # every log opened inside the run folder registers with it (resume cuts
            # each back), a rank's own files too
            self._held.enter_context(run_declared(self.dir))
        self._loop = Loop(self, self.settings, self._stopper)

    def register_log(self, path: str | os.PathLike[str],
                     step_column: str | None = "step") -> None:
        """Register a file this run writes (a log of the user's own writer) so a
        resume cuts it back to the checkpoint's step by ``step_column`` (None:
        never cut); a ``CsvLog`` inside :attr:`dir` registers itself."""
        register_log(path, step_column, run_dir=self.dir)

    # -- callbacks -------------------------------------------------------------
    def callbacks(self, model: Any = None, *extra: Any, every: int = 1, track_params: bool = True,
                  checkpoint_every: int | None = 1, keep_checkpoints: int = 3,
                  system_every_s: float = 5.0, steps_per_epoch: int | None = None) -> list[Any]:
        """The run's callbacks for ``Model.train``, writing into :attr:`dir`.

        LossMonitor, ParameterTracker (``track_params``), GradNormMonitor
        (only when ``model``, a ``Model`` or its train cell, is a
        ``mindexp.callbacks.TrainStep``), SystemMonitor (with psutil),
        then ``extra`` (the user's own callbacks, in order), then
        Checkpoint, and the run's signal stop around them all, in one
        :class:`~mindexp.callbacks.CallbackList` (the list returned holds
        it alone): MindSpore calls it once per hook and it reads each step
        once for all of them, as in an experiment's run and ``run.step``.
        ``steps_per_epoch``: a whole epoch's steps when the dataset holds
        only the rest of an interrupted epoch (see :meth:`position`).
        """
        from ..callbacks import TrainStep
        from .run_callbacks import RunCallbackSettings, build_run_callbacks
        assert self._stopper is not None, "run.callbacks() is for inside the with block"
        self.begin_resumed()
        self.freeze_startup_objects()
        settings = RunCallbackSettings(
            every=every, track_params=track_params,
            grad_norm=isinstance(_train_cell(model), TrainStep), steps_per_epoch=steps_per_epoch,
            system_every_s=system_every_s, checkpoint_every=checkpoint_every,
            keep_checkpoints=keep_checkpoints)
        built = build_run_callbacks(self.dir, self._stopper, settings, self.resumed, extra=extra)
        self._loss_cb, self._timer = built.loss, built.timer
        return [built.callbacks]

    # -- a hand-written loop (train.loop) ---------------------------------------
    def epochs(self, n: int) -> Iterator[int]:
        """``for epoch in run.epochs(n):`` the run's epochs as ``range(n)`` gives
        them (0-based; the logs count from 1), from the checkpoint's after a
        resume; ends early when :attr:`should_stop`."""
        return self._the_loop().epochs(n)

    def batches(self, data: Any, batch_size: int = 1, shuffle: bool = True,
                drop_last: bool = True) -> Iterator[tuple[Any, ...]]:
        """``for x, y in run.batches(data, batch_size=B):`` this epoch's batches
        as tuples of Tensors in column order (like ``create_tuple_iterator()``).
        ``data``: a tuple of equal-length arrays, a random-access source or an
        unbatched MindSpore dataset; the order of epoch ``e`` comes from the
        seed and ``e`` (the order a ``Model`` run of the same data has), each
        rank takes its share under msrun, and a resumed run continues at the
        checkpoint's batch. Without :meth:`epochs` each call is one epoch."""
        return self._the_loop().batches(data, batch_size, shuffle, drop_last)

    def step(self, loss: Any, *, net: Any = None, grad_norm: Any = None, optimizer: Any = None,
             epoch: int | None = None, **components: Any) -> None:
        """After each training step: loss.csv, params.csv (on the run's
        schedule), grad_norm.csv (with ``grad_norm``, e.g.
        :func:`mindexp.callbacks.global_norm`), system.csv, from the callbacks
        that write them in a ``Model`` run. ``net``: the network or train cell
        (its parameters, and its checkpoints); ``optimizer``: the lr column
        (a train cell's own optimizer is found); ``components``: further
        loss terms by name (more columns of loss.csv). Steps count from 1
        in epoch 1, ``epoch=`` moves to another epoch (counted from 1)."""
        self._the_loop().step(loss, net, grad_norm, optimizer, epoch, components)

    def log_eval(self, **metrics: Any) -> None:
        """After an evaluation: eval.csv (``epoch,step,<metric>...``, a row per
        completed epoch, as a ``Model.fit`` run's; ``eval_`` is left off the
        column names) and what ``early_stop`` and ``checkpoint_monitor`` watch.
        Call it after the epoch's steps and before :meth:`save`."""
        self._the_loop().log_eval(metrics)

    def save(self, net: Any = None, optimizer: Any = None) -> None:
        """A checkpoint of the run's own: every log of the run flushed (a
        ``CsvLog`` of the user's too), then ``checkpoints/`` and
        checkpoints.csv as a ``Model`` run writes them (its naming, keep-last
        and keep-best), with the loop's data position and NumPy's RNG state,
        so ``track(resume=RUN)`` continues exactly there."""
        self._the_loop().save(net, optimizer)

    @property
    def should_stop(self) -> bool:
        """True once early stopping, a non-finite loss or a signal (SIGINT,
        SIGTERM: the run ends ``interrupted``) asks the loop to end;
        :meth:`epochs` and :meth:`batches` end by themselves then."""
        return self._loop is not None and self._loop.should_stop

    def _the_loop(self) -> Loop:
        assert self._loop is not None, "the loop API is for inside the with block"
        return self._loop

    # -- resuming --------------------------------------------------------------
    def load(self, network: Any, optimizer: Any = None) -> None:
        """Load the resume point's weights (and optimizer state) into ``network``
        (the train cell or ``Model.train_network``; or a loop's network and
        its ``optimizer``); nothing for a new run. The run's folder changes
        only once the checkpoint has loaded."""
        if self.resumed is None:
            return
        if optimizer is not None:
            self._the_loop().load(network, optimizer)  # raises before anything is changed
        else:
            self.resumed.load(_train_cell(network))
        self.begin_resumed()

    def position(self, steps_per_epoch: int) -> tuple[int, int]:
        """``(initial_epoch, first_batch)``: where ``Model.train`` starts after a
        resume (the 0-based epoch, and the batches of it already done: skip
        them and pass ``steps_per_epoch`` to :meth:`callbacks`); ``(0, 0)`` new."""
        if self.resumed is None:
            return 0, 0
        position: tuple[int, int] = self.resumed.position(steps_per_epoch)
        return position

    # -- inside ----------------------------------------------------------------
    def _hold_folder(self) -> str:
        """The run folder: a new locked one, the resumed one, or under msrun
        rank 0's (rank 0 creates and locks it, the other ranks join it and
        write only their own rank files)."""
        if self.resume_from is not None:
            return self._hold_resumed(os.fspath(self.resume_from))
        rank = _msrun_rank()
        if rank is None:
            return hold_new_run(self._held, self.out, self.name)
        from . import distributed
        if rank == 0:
            return distributed.create_shared_run_dir(self._held, self.out, self.name)
        self.writer = False
        run_dir = distributed.joined_run_dir(self.out, self.name)
        if distributed.visible(run_dir):
            return run_dir
        logger.warning("rank %d writes nothing: the run folder %s is not visible on this node "
                       "(share the output root)", rank, run_dir)
        return distributed.unseen_rank_dir(self.out, self.name, rank)

    def _hold_resumed(self, run_dir: str) -> str:
        """Take a script run's lock and find its latest good checkpoint (nothing
        is changed yet: see :meth:`begin_resumed`)."""
        from .resume import check_run_dir, resume_point, run_logs
        from .resume_checks import check_logs_readable
        run_dir = check_run_dir(run_dir)
        self._held.callback(acquire(run_dir, "resume").release)
        meta = read_meta(run_dir, require=("entry",))
        if not is_script_entry(meta["entry"]) or meta.get("experiment") != self.name:
            raise MindexpError(f"cannot resume {run_dir} as script run {self.name!r}: accepted: "
                               "a run made by mindexp.track with the same name (an experiment's "
                               "run resumes with `mindexp resume`). Received: experiment="
                               f"{meta.get('experiment')!r}, entry={meta['entry']!r}")
        check_logs_readable(run_dir, run_logs(run_dir))  # before anything is cut
        self.resumed = resume_point(run_dir, meta)
        return run_dir

    def begin_resumed(self) -> None:
        """A resumed run changes its folder from here on (once): its logs cut
        back to the checkpoint, run.json ``running`` with this resume. Until
        then a failure in the block (a checkpoint that does not fit the
        script's network or optimizer) leaves the run as it was, resumable."""
        if self.resumed is None or self.record is not None or not self.writer:
            return
        from .resume import truncate_logs
        truncate_logs(self.dir, self.resumed.step)  # each step once in every log
        self.record = self._start_record()

    def freeze_startup_objects(self) -> None:
        """Keep the objects that exist when training begins (MindSpore's modules,
        the network) out of the garbage collector's full collections until the
        block ends, as ``Experiment.run`` does around ``Model.train``
        (:func:`~mindexp.train.session.startup_objects_frozen`); once per run,
        at ``run.callbacks`` or a loop's first ``run.step``."""
        if self._frozen:
            return
        from .session import startup_objects_frozen
        self._frozen = True
        self._held.enter_context(startup_objects_frozen())

    def conclude(self, exc: BaseException | None, elapsed: float) -> str | None:
        """The run's end (see RunLifecycle); a resumed block that ended normally
        without loading its checkpoint is recorded as resumed all the same."""
        if exc is None and self._stopper is not None and self._stopper.signum is None:
            self.begin_resumed()
        return super().conclude(exc, elapsed)

    def _start_record(self) -> RunRecord:
        """run.json ``running``, config.json and provenance, before the block runs."""
        record = RunRecord.new(self.dir, self.name, script_entry(self.script or "<unknown>"),
                               _context_of_mindspore(), {}, tags=self.tags, note=self.note)
        point = self.resumed
        if point is not None:
            record.resumed_from(point.meta, point.step, point.path)
        _capture(record, self.script, self.config, point)
        open_record(record, self.config, self.mlflow)
        return record

    def _stopped(self) -> Stopped:
        loop = self._loop
        if self._loss_cb is None and loop is not None:
            return Stopped(diverged=loop.diverged(), reason=loop.stop_reason())
        return Stopped(diverged=self._loss_cb.stop_reason if self._loss_cb is not None else None)

    def _totals(self, meta: dict[str, Any], elapsed: float) -> None:
        """Steps, epochs and final loss from loss.csv, the rate and training time."""
        assert self.record is not None
        timer = self._timer if self._timer is not None else getattr(self._loop, "timer", None)
        rate = timer.steps_per_s if timer is not None else None
        totals = _totals(self.dir, meta, elapsed, self.resumed)
        if not rate and elapsed > 0:  # no Timer (a script's own logs): the block's mean rate
            rate = (totals["steps"] - (self.resumed.step if self.resumed else 0)) / elapsed
        self.record.ended(meta["status"], steps_per_s=round(rate, 2) if rate else None,
                          **totals)

    def _outcome(self, status: str | None, exc: BaseException | None) -> bool:
        """What leaves the block: the block's own exception, or the signal's exit."""
        assert self._stopper is not None
        signum = self._stopper.signum
        if status != "interrupted" or signum is None:
            return False  # its exception (if any) propagates
        from .progress import in_notebook
        if signum == signal.SIGINT and in_notebook():
            if isinstance(exc, KeyboardInterrupt):
                return False
            raise KeyboardInterrupt
        raise SystemExit(failures.exit_status(signum))


class _BlockStop(SignalStop):
    """The signal stop of a tracked block: inside ``Model.train`` with the run's
    callbacks a first signal stops at the end of the step (the checkpoint then
    matches the logs); anywhere else in the block nothing would ask it to
    stop, so it stops at once (KeyboardInterrupt, which the run turns into
    its exit)."""

    def handler(self, signum: int, frame: types.FrameType | None) -> None:
        idle = self._training and self._context_depth <= 1  # only our own `with`: no Model.train
        super().handler(signum, frame)
        if idle:
            raise KeyboardInterrupt


# -- helpers -------------------------------------------------------------------

def _seed_of(seed: int | None, config: Mapping[str, Any]) -> int:
    """The run's seed: ``seed``, else the config's ``seed``, else 0."""
    value = seed if seed is not None else config.get("seed", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError("track()'s seed (or the config's 'seed') must be an integer >= 0. "
                          f"Received: seed={value!r}", field="seed")
    return value

def _checked_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``config``; ConfigError naming the first key JSON cannot hold."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigError("track()'s config must be a dict of JSON values; received "
                          f"{type(config).__name__}: {_shown(config)}", field="config")
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigError("track()'s config keys must be strings. "
                              f"Received: key {key!r}", field="config")
        _check_value(key, value)
    return dict(config)


def _check_value(key: str, value: Any) -> None:
    """ConfigError (one line) when JSON cannot hold ``value`` as a finite value: a
    NaN or Infinity cannot be compared, grouped or searched."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise _not_json(key, value, exc) from None
        raise ConfigError(f"track()'s config key {key!r} holds a number that is not finite "
                          "(NaN or Infinity cannot be compared, grouped or searched); "
                          f"accepted: finite numbers. Received: {key}={_shown(value)}",
                          field=key) from None
    except TypeError as exc:
        raise _not_json(key, value, exc) from None
    except RecursionError:
        pass     # deeper than Python's recursion limit: said below
    if too_deep(value, MAX_JSON_DEPTH - 1):     # config.json adds its own level
        raise ConfigError(f"track()'s config key {key!r} nests lists or dicts too deeply; "
                          f"accepted: up to {MAX_JSON_DEPTH - 1} levels. Received: {key}="
                          f"<a value nested deeper>", field=key)


def _not_json(key: str, value: Any, exc: Exception) -> ConfigError:
    return ConfigError(f"track()'s config key {key!r} is not JSON-serialisable ({exc}); "
                       "accepted: numbers, strings, booleans, None, lists and dicts of "
                       f"them. Received: {key}={_shown(value)}", field=key)


def _mlflow_uri(uri: str) -> str:
    try:
        return mlflow_stream.tracking_uri(uri)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--mlflow", "track()'s mlflow"),
                          field="mlflow") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _caller_file(frame: types.FrameType) -> str | None:
    """The absolute path of the script that called track(); None in a REPL or notebook."""
    name = frame.f_code.co_filename
    return os.path.abspath(name) if name and not name.startswith("<") else None


def _train_cell(model: Any) -> Any:
    """The train cell of a ``Model`` (``train_network``), or ``model`` itself."""
    from mindspore.train import Model
    return model.train_network if isinstance(model, Model) else model


def _context_of_mindspore() -> types.SimpleNamespace:
    """The device, mode and workers run.json records, read from MindSpore's context
    (a script sets them itself; there is no mindexp Config)."""
    import mindspore as ms
    mode = "graph" if ms.get_context("mode") == ms.GRAPH_MODE else "pynative"
    return types.SimpleNamespace(device=ms.get_context("device_target"), mode=mode, workers=1)


def _capture(record: RunRecord, script: str | None, config: dict[str, Any], point: Any) -> None:
    """Provenance of the script; a resume keeps the first block and adds its own."""
    from ..provenance import capture
    from ..provenance import files as F
    meta = record.meta
    if point is None:
        meta.update(capture.capture_script(script, record.run_dir, config))
        return
    meta.update({k: point.meta.get(k) for k in (F.META_KEY, F.RERUN_KEY)})
    meta["resumes"][-1][F.META_KEY] = capture.capture_script(
        script, record.run_dir, config, number=len(meta["resumes"]))


def _watched_from_outside(run_dir: str) -> Callable[[], None]:
    """A block outside the main thread cannot hear signals (Python installs
    handlers only there): one warning, and a watcher process that records the
    run interrupted when a signal ends the process (train.watcher)."""
    from .watcher import start_watcher
    logger.warning("mindexp.track() outside the main thread: Python installs signal handlers "
                   "only in the main thread, so SIGINT/SIGTERM cannot stop this run at a step "
                   "end; if a signal ends the process, a watcher records the run interrupted "
                   "(resumable from its last checkpoint)")
    return start_watcher(run_dir)


def _msrun_rank() -> int | None:
    """This process's rank in the user's own msrun (None outside msrun); the
    script must have joined the cluster (``mindspore.communication.init()``)."""
    from .._mindspore import msrun_scheduler, under_msrun
    if msrun_scheduler():  # msrun runs the script as its scheduler too: it only serves
        logger.debug("msrun's scheduler: the cluster has ended, no run here")
        raise SystemExit(0)
    if not under_msrun():
        return None
    from mindspore.communication import get_rank
    try:
        return int(get_rank())
    except RuntimeError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MindexpError("under msrun, call mindspore.communication.init() before "
                           f"mindexp.track(): every rank joins the run rank 0 creates ({why})") \
            from None



def _totals(run_dir: str, meta: dict[str, Any], elapsed: float, point: Any) -> dict[str, Any]:
    """steps, epochs and final loss from loss.csv's last row (the file is what
    run.json must agree with), and the training time so far."""
    steps, epochs, loss = 0, 0, None
    rows = schema.read_rows(schema.path_of(run_dir, schema.LOSS.name))
    if rows:
        last = rows[-1]
        steps, epochs = int(last[schema.Col.STEP]), int(last[schema.Col.EPOCH])
        loss = float(last[schema.Col.LOSS]) if last.get(schema.Col.LOSS) else None
    elif point is not None:  # resumed with nothing trained since
        steps, epochs, loss = point.step, point.epoch, point.loss
    return {"steps": steps, "epochs": epochs, "final_loss": loss,
            "train_time_s": round((meta.get("train_time_s") or 0) + elapsed, 4)}
