"""The loop API of a tracked run: a hand-written training loop drives the
callbacks a ``Model`` run uses.

```python
with mindexp.track("outputs", "mlp", config, seed=0) as run:
    for epoch in run.epochs(10):
        for x, y in run.batches((features, labels), batch_size=32):
            loss, grad_norm = train_step(x, y)
            run.step(loss, net=net, grad_norm=grad_norm, optimizer=optimizer)
        run.log_eval(accuracy=evaluate(net))
        run.save(net, optimizer)
```

:class:`Loop` is what :class:`~mindexp.train.tracked.TrackedRun` delegates
those calls to. ``run.step`` makes the step's
:class:`~mindexp.callbacks.StepRecord` and hands it to one
:class:`~mindexp.callbacks.CallbackList` (``on_train_step_record``), whose
parts are the ones a ``Model`` run has: Timer, LossMonitor,
ParameterTracker, GradNormMonitor, SystemMonitor, EvalMonitor,
EarlyStopping, Checkpoint and the run's signal stop. No part knows it is
driven by a loop: each reads the step from one ``cb_params`` dict
(:class:`LoopParams`, what MindSpore hands ``Model.train``'s callbacks) and
the trained cells from :class:`LoopCell`. Each log keeps its one writer.

Epochs end (their eval row, early stopping, the best checkpoint) when the
loop moves past them: at :meth:`Loop.log_eval` or :meth:`Loop.save` after
the epoch's last batch, at the next epoch, or at the end of the block.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import types
from typing import Any, Iterator, Mapping

import numpy as np

from ..callbacks import schema
from ..callbacks._mindspore import STEPS_BEFORE
from ..errors import ConfigError
from . import loop_data

__all__ = ["Loop", "LoopParams", "LoopSettings", "loop_cell"]

logger = logging.getLogger(__name__)

# ``batch_num`` while an epoch's length is unknown (a loop without run.batches):
# no step is taken for its epoch's last before the epoch ends
_UNKNOWN = 1 << 62


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What ``track(...)`` sets for a loop: the seed, the logs' schedule, the
    checkpoints kept, the value early stopping and keep-best watch."""

    seed: int = 0
    every: int = 1
    track_params: bool = True
    keep_checkpoints: int | None = 3
    checkpoint_monitor: str | None = None
    keep_best: int = 1
    early_stop: str | None = None
    patience: int = 5
    min_delta: float = 0.0
    system_every_s: float = 5.0

    def check(self) -> LoopSettings:
        """Self; ConfigError (one line) for a watched name of unknown direction
        or a bad count, before the run folder exists."""
        from ..callbacks.direction import metric_direction
        for field in ("checkpoint_monitor", "early_stop"):
            name = getattr(self, field)
            if name is None:
                continue
            try:
                metric_direction(name, None)
            except ValueError as exc:
                raise ConfigError(f"track()'s {field}: {exc}", field=field) from None
        for field in ("patience", "keep_best", "every"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"track()'s {field} must be an integer >= 1. "
                                  f"Received: {field}={value!r}", field=field)
        return self

    def config(self) -> dict[str, Any]:
        """The settings config.json records (the readers of the best checkpoint
        find checkpoint_monitor there)."""
        out: dict[str, Any] = {"seed": self.seed}
        if self.checkpoint_monitor:
            out.update(checkpoint_monitor=self.checkpoint_monitor, keep_best=self.keep_best)
        if self.early_stop:
            out.update(early_stop=self.early_stop, patience=self.patience,
                       min_delta=self.min_delta)
        return out


class LoopParams(dict):
    """The ``cb_params`` of a loop: a dict whose items are also attributes, as
    ``RunContext.original_args()`` is in ``Model.train``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def loop_cell(network: Any, optimizer: Any = None, grad_norm: bool = False,
              components: tuple[str, ...] = ()) -> Any:
    """A :class:`LoopCell` over ``network`` and ``optimizer`` (defined on first
    use: importing this module does not import mindspore)."""
    return _loop_cell_class()(network, optimizer, grad_norm, components)


_CELL: Any = None


def _loop_cell_class() -> Any:
    global _CELL
    if _CELL is None:
        from mindspore import nn

        class LoopCell(nn.Cell):
            """What a loop trains, as one cell: the network (or train cell) and
            the optimizer. Its parameters keep their names (no prefix), so its
            checkpoint holds what a ``Model`` run's does: the weights under the
            network's names and the optimizer's state; the callbacks read
            ``optimizer``, ``returns_grad_norm`` and ``component_names`` from it."""

            def __init__(self, network: Any, optimizer: Any, grad_norm: bool,
                         components: tuple[str, ...]) -> None:
                super().__init__(auto_prefix=False)
                self.network = network
                self.optimizer = optimizer if optimizer is not None else \
                    getattr(network, "optimizer", None)
                self.returns_grad_norm = bool(grad_norm)
                self.component_names = tuple(components)

            def construct(self, *inputs: Any) -> Any:
                return self.network(*inputs)

        _CELL = LoopCell
    return _CELL


# a record's components or statistics when there are none (shared, read-only)
_NO_VALUES: Mapping[str, Any] = types.MappingProxyType({})


class _FloatReader:
    """``to_float`` with its reader chosen once per type of value: a loop hands
    ``run.step`` values of one kind step after step, and a one-element
    Tensor is then read by ``item()`` without the checks (as a ``Model``
    run's record reads its outputs). A value the chosen reader cannot read
    (e.g. a Tensor of another dtype) chooses again."""

    __slots__ = ("kind", "read")

    def __init__(self) -> None:
        self.kind: type | None = None
        self.read: Any = None

    def __call__(self, value: Any) -> float | None:
        if type(value) is self.kind:
            try:
                return self.read(value)
            except (TypeError, ValueError, RuntimeError):
                pass
        from ..callbacks._common import float_reader
        self.kind, self.read = type(value), float_reader(value)
        return self.read(value)


@dataclasses.dataclass
class _Parts:
    """The parts of the loop's CallbackList it talks to."""

    timer: Any = None
    loss: Any = None
    early_stop: Any = None
    eval: Any = None
    checkpoint: Any = None


class _Position:
    """The loop's place in its data and the host RNG, saved in each checkpoint
    (a Checkpoint's ``stateful`` part) and given back on a resume."""

    state_key = "loop"

    def __init__(self, loop: Loop) -> None:
        self.loop = loop

    def state_dict(self) -> dict[str, Any]:
        loop = self.loop
        import mindspore as ms
        state: Any = np.random.get_state()
        name, keys, pos, has_gauss, cached = state
        return {"epoch_start": loop.epoch_start, "epoch_end": loop.epoch_ended,
                "epoch_steps": loop.epoch_steps,
                "numpy_rng": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
                "mindspore_rng": ms.get_rng_state().asnumpy().tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        loop = self.loop
        loop.epoch_start = int(state.get("epoch_start", loop.epoch_start))
        loop.epoch_ended = bool(state.get("epoch_end", False))
        loop.epoch_steps = state.get("epoch_steps")
        rng = state.get("numpy_rng")
        if rng:
            np.random.set_state((rng[0], np.asarray(rng[1], dtype=np.uint32), *rng[2:]))
        if state.get("mindspore_rng"):
            import mindspore as ms
            ms.set_rng_state(ms.Tensor(np.asarray(state["mindspore_rng"], dtype=np.uint8)))


class Loop:
    """A tracked run's hand-written loop (see the module's docstring).

    Args:
        run: the :class:`~mindexp.train.tracked.TrackedRun` (its folder,
            resume point and signal stop).
        settings: what ``track(...)`` set.
        stopper: the run's signal stop (a SignalStop), the list's first and last part.
    """

    def __init__(self, run: Any, settings: LoopSettings, stopper: Any) -> None:
        self.run, self.settings, self.stopper = run, settings, stopper
        self.step_count = 0       # the run's steps so far (absolute)
        self.epoch = 1            # the current epoch, from 1
        self.epoch_start = 0      # the steps before the current epoch
        self.epoch_steps: int | None = None  # its length, when run.batches knows it
        self.epoch_ended = False  # the last step was its epoch's last
        self.epoch_closed = False  # its end hooks ran
        self.drivers = 0          # run.epochs / run.batches iterating now
        self.params = LoopParams()
        self.cell: Any = None
        self._net: Any = None     # the cell's network and optimizer (see _train)
        self._opt: Any = None
        self._lr_at: Any = None   # the lr at a step, from the optimizer
        self._make_record: Any = None
        self._read_loss, self._read_norm, self._read_component = \
            _FloatReader(), _FloatReader(), _FloatReader()
        self.callbacks: Any = None  # the CallbackList, from the first step
        self.context: Any = None
        self.parts = _Parts()
        self._held = contextlib.ExitStack()
        self._position = _Position(self)
        self._stop_requested = False
        self._ending = False  # the block's end: a stop request ends nothing more
        _seed(settings.seed)
        point = run.resumed
        if point is not None:
            from ..callbacks.checkpoint import load_callback_state
            self.step_count, self.epoch = point.step, point.epoch
            self.epoch_start = point.step  # an older checkpoint without a position
            self.epoch_ended = True
            load_callback_state(point.params, [self._position])
            self.epoch_closed = self.epoch_ended
        self.parts.early_stop = self._early_stopping()

    def _early_stopping(self) -> Any:
        """The run's EarlyStopping (None when ``early_stop`` is off); after a
        resume its state is replayed from the logs, and a loop whose patience
        had run out by the checkpoint ends at once, as it would have."""
        from ..callbacks import EarlyStopping
        from .monitors import replay_early_stop
        s, point = self.settings, self.run.resumed
        if not s.early_stop:
            return None
        early = EarlyStopping(s.early_stop, patience=s.patience, min_delta=s.min_delta)
        if point is None or point.early_stopped or not self.epoch_steps:
            return early
        if replay_early_stop(early, self.run.dir, point.step, self.epoch_steps) \
                and early.wait >= early.patience:
            early.stop_reason = early._reason()
            self._stop_requested = True
        return early

    # -- the drivers -------------------------------------------------------------
    def epochs(self, n: int) -> Iterator[int]:
        """The 0-based epochs of the run up to ``n`` (like ``range(n)``): after
        a resume from the checkpoint's; each one's end hooks run when the loop
        comes back for the next; stops early when :attr:`should_stop`."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"run.epochs(n): n must be an integer >= 0. Received: n={n!r}")
        first = self.epoch if self.epoch_ended or self.epoch_closed else self.epoch - 1
        self.drivers += 1
        try:
            for e in range(first, n):
                if self.should_stop:
                    return
                self._open_epoch(e + 1)
                yield e
                self._close_epoch()
        finally:
            self.drivers -= 1

    def batches(self, data: Any, batch_size: int = 1, shuffle: bool = True,
                drop_last: bool = True) -> Iterator[tuple[Any, ...]]:
        """The current epoch's batches of ``data`` as tuples of Tensors (see
        :func:`mindexp.train.loop_data.epoch_batches`), from the batch a resume
        continues at; without :meth:`epochs`, each call is the next epoch."""
        if self.epoch_ended or self.epoch_closed:
            self._open_epoch(self.epoch + 1)
        done = self.step_count - self.epoch_start
        source = loop_data.epoch_batches(data, batch_size, shuffle, drop_last,
                                         seed=self.settings.seed, epoch=self.epoch - 1,
                                         first_batch=done)
        self.epoch_steps = done + len(source)
        self.params["batch_num"] = self.epoch_steps
        self.drivers += 1
        try:
            for batch in source:
                if self.should_stop:
                    return
                yield batch
        finally:
            self.drivers -= 1

    def _open_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (1-based); the current one's end hooks first."""
        if epoch == self.epoch and not (self.epoch_ended or self.epoch_closed):
            return  # continuing it (a fresh run's first epoch, a resume mid-epoch)
        if self.step_count > self.epoch_start or self.epoch_ended:
            self._close_epoch()
        self.epoch, self.epoch_start = epoch, self.step_count
        self.epoch_steps, self.epoch_ended, self.epoch_closed = None, False, False
        self.params.update(cur_epoch_num=epoch, batch_num=_UNKNOWN)
        self.params[STEPS_BEFORE] = self.step_count

    def _close_epoch(self) -> None:
        """The epoch-end hooks of the current epoch, once: the eval row, early
        stopping, the best checkpoint (a Model run's ``on_train_epoch_end``)."""
        if self.epoch_closed or self.callbacks is None:
            return
        self.epoch_closed = True
        # its length as done: an epoch ended by the loop itself counts as complete
        self.params["batch_num"] = max(self.step_count - self.epoch_start, 1)
        self.callbacks.on_train_epoch_end(self.context)
        self.params.pop("eval_results", None)
        self._note_stop()

    # -- one step ----------------------------------------------------------------
    def step(self, loss: Any, net: Any = None, grad_norm: Any = None, optimizer: Any = None,
             epoch: int | None = None, components: Mapping[str, Any] | None = None) -> None:
        """Record one training step (see ``TrackedRun.step``)."""
        # every step: no import, no Cell attribute, each value read by a reader
        # chosen once (a tracked step of a small network is a few microseconds)
        if self.callbacks is None:
            self._begin(net, optimizer, grad_norm is not None, tuple(components or ()))
        elif (net is not None and net is not self._net) or \
                (optimizer is not None and optimizer is not self._opt):
            self._use(net, optimizer)
        if epoch is not None and epoch != self.epoch:
            self._open_epoch(_check_epoch(epoch))
        self.step_count = step = self.step_count + 1
        last = self.epoch_steps is not None and step - self.epoch_start >= self.epoch_steps
        self.epoch_ended = last
        self.params.update(cur_step_num=step, cur_epoch_num=self.epoch, net_outputs=loss)
        read = self._read_component
        parts = {k: read(v) for k, v in components.items()} if components else _NO_VALUES
        record = self._make_record(step, self.epoch, last, self._read_loss(loss),
                                  None if grad_norm is None else self._read_norm(grad_norm),
                                  parts, self._lr_at(step), _NO_VALUES,
                                  loss if grad_norm is None else (loss, grad_norm))
        self.callbacks.on_train_step_record(record, self.context)
        self._note_stop()

    def _begin(self, net: Any, optimizer: Any, grad_norm: bool,
               components: tuple[str, ...]) -> None:
        """The callbacks of the loop, begun at its first step (what it trains,
        and whether it has a gradient norm and components, is known then)."""
        from mindspore.train import RunContext
        from ..callbacks._recorder import make_record
        self.run.begin_resumed()  # a resumed run's logs are cut back before the first row
        self.run.freeze_startup_objects()
        self._make_record = make_record
        self._train(loop_cell(net, optimizer, grad_norm, components))
        self.params.update(cur_step_num=self.step_count, cur_epoch_num=self.epoch,
                           epoch_num=self.epoch)
        self.params.setdefault("batch_num", self.epoch_steps or _UNKNOWN)
        self.params[STEPS_BEFORE] = self.epoch_start
        self.context = RunContext(self.params)
        self.callbacks = self._held.enter_context(
            _callbacks(self, grad_norm, components))
        self.callbacks.on_train_begin(self.context)

    def _train(self, cell: Any) -> None:
        """Make ``cell`` (a :class:`LoopCell`) what the loop trains: the callbacks'
        ``cb_params``, the lr read from its optimizer, and the network and
        optimizer a step compares its arguments with (as plain attributes: a
        Cell's own look-up of a sub-cell is a Python call)."""
        from ..callbacks._recorder import LearningRate
        self.cell = cell
        self._net, self._opt = cell.network, cell.optimizer
        self.params.update(train_network=cell, network=self._net, optimizer=self._opt)
        self._lr_at = LearningRate(self._opt).at

    def _optimizer(self) -> Any:
        return self._opt

    def _use(self, net: Any, optimizer: Any) -> None:
        """Take ``net``/``optimizer`` as what the loop trains (a later save may
        name them first)."""
        cell = self.cell
        net = net if net is not None else self._net
        if net is None or (self._net is net and optimizer in (None, self._opt)):
            return
        self._train(loop_cell(net, optimizer if optimizer is not None else self._opt,
                              cell.returns_grad_norm, cell.component_names))

    @property
    def should_stop(self) -> bool:
        """True once early stopping, a non-finite loss or a signal asked the loop
        to end (a signal between two steps: before the next one starts)."""
        return self._stop_requested or self.stopper.signum is not None

    def _note_stop(self) -> None:
        """Take a stop request of the callbacks; a signal's, outside run.epochs
        and run.batches (nothing there ends the loop), ends the block now: its
        logs hold the step, the run is interrupted."""
        if self.context is None or not self.context.get_stop_requested():
            return
        self._stop_requested = True
        if self.drivers == 0 and self.stopper.signum is not None and not self._ending:
            raise KeyboardInterrupt

    # -- evaluation and checkpoints ------------------------------------------------
    def log_eval(self, metrics: Mapping[str, Any]) -> None:
        """Record an evaluation (see ``TrackedRun.log_eval``)."""
        from ..callbacks._common import to_float
        if not metrics:
            raise ValueError("run.log_eval() needs at least one metric, e.g. "
                             "run.log_eval(accuracy=0.93). Received: nothing")
        values = {_metric_name(k): to_float(v) for k, v in metrics.items()}
        if self.callbacks is None:
            raise RuntimeError("run.log_eval() comes after the epoch's steps: call run.step() "
                               f"after each training step first. Received: {sorted(values)}")
        monitor = self.parts.eval
        if monitor is None:
            self._add_eval_log(list(values))
        elif list(values) != monitor.metrics:
            raise ValueError(f"run.log_eval() takes the same metrics each time "
                             f"({', '.join(monitor.metrics)}, the columns of "
                             f"{schema.EVAL.filename}). "
                             f"Received: {', '.join(values)}")
        self.params["eval_results"] = values
        if self.epoch_ended:  # the epoch's batches are done: its end comes now
            self._close_epoch()

    def _add_eval_log(self, names: list[str]) -> None:
        from ..callbacks import EvalMonitor
        monitor = EvalMonitor(self.run.dir, names)
        index = next(i for i, cb in enumerate(self.callbacks.callbacks)
                     if cb is self.parts.checkpoint)
        self.callbacks.insert(index, monitor, self.context)
        self.parts.eval = monitor

    def save(self, net: Any = None, optimizer: Any = None) -> None:
        """A checkpoint of the run's own now (see ``TrackedRun.save``)."""
        from ..callbacks._runs import flush_logs
        if self.callbacks is None:
            raise RuntimeError("run.save() saves a trained step: call run.step() after each "
                               "training step first. Received: no step yet")
        self._use(net, optimizer)
        if self.cell.network is None:
            raise ValueError("run.save() needs the network: run.save(net, optimizer) (or "
                             "run.step(..., net=net)). Received: no network")
        if self.epoch_ended:
            self._close_epoch()
        flush_logs(self.run.dir)  # the user's own logs too: none behind the checkpoint
        self.parts.checkpoint.save_now(self.context)

    def load(self, net: Any, optimizer: Any = None) -> None:
        """Put the resume point's weights and optimizer state into ``net`` and
        ``optimizer``; nothing for a new run."""
        if self.run.resumed is not None:
            self.run.resumed.load(loop_cell(net, optimizer))

    # -- the end -------------------------------------------------------------------
    def end(self, exc: BaseException | None) -> None:
        """At the block's end: the last epoch's end hooks and the train end (the
        final checkpoint) when the block ended normally or on a stop request,
        then the callbacks' contexts (every log closed)."""
        self._ending = True
        with self._held:
            if self.callbacks is None:
                return
            stopped = exc is None or (isinstance(exc, KeyboardInterrupt)
                                      and self.stopper.signum is not None)
            if stopped:
                if self.step_count > self.epoch_start and not self.epoch_closed:
                    self._close_epoch()
                if self.cell.network is None:
                    self.params.pop("net_outputs", None)  # nothing to save
                self.callbacks.on_train_end(self.context)

    def stop_reason(self) -> str | None:
        """Why early stopping ended the run, or None."""
        early = self.parts.early_stop
        return getattr(early, "stop_reason", None)

    def diverged(self) -> str | None:
        loss = self.parts.loss
        return getattr(loss, "stop_reason", None)

    @property
    def timer(self) -> Any:
        return self.parts.timer


def _callbacks(loop: Loop, grad_norm: bool, components: tuple[str, ...]) -> Any:
    """The loop's CallbackList: the parts a ``Model`` run of ``track`` has, with
    the run's early stopping and checkpoints only when asked (``run.save``, the
    end) and the loop's data position saved in each."""
    from .run_callbacks import RunCallbackSettings, build_run_callbacks
    s, parts = loop.settings, loop.parts
    settings = RunCallbackSettings(
        every=s.every, track_params=s.track_params and loop.cell.network is not None,
        grad_norm=grad_norm, system_every_s=s.system_every_s, checkpoint_every=None,
        keep_checkpoints=s.keep_checkpoints, checkpoint_monitor=s.checkpoint_monitor,
        keep_best=s.keep_best)
    built = build_run_callbacks(loop.run.dir, loop.stopper, settings, loop.run.resumed,
                                early_stop=parts.early_stop, stateful=[loop._position])
    parts.timer, parts.loss, parts.checkpoint = built.timer, built.loss, built.checkpoint
    return built.callbacks


def _seed(seed: int) -> None:
    """MindSpore's and NumPy's global seeds (the data order has its own, from the
    seed and the epoch)."""
    import mindspore as ms
    ms.set_seed(seed)
    np.random.seed(seed)


def _metric_name(name: str) -> str:
    """eval.csv's column of a metric: its name without ``eval_`` (as a
    ``Model.fit`` run's; reports call it ``eval_<name>``)."""
    return name[len("eval_"):] if name.startswith("eval_") and len(name) > 5 else name


def _check_epoch(epoch: Any) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError(f"run.step(..., epoch=E): E is the epoch counted from 1. "
                         f"Received: epoch={epoch!r}")
    return epoch
