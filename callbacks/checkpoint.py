"""Checkpoint: atomic, resumable MindSpore checkpoints with retention."""
from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any, Iterable, Mapping

import mindspore as ms
from mindspore.train import RunContext
import numpy as np

from ._common import (check_directory, check_steps_per_epoch, first_output, is_finite,
                      log_path, monitored_value, to_float, trained_parameters)
from .direction import MODES, metric_direction, rank_key
from .eval_loss import EVAL_LOSS, check_loss_metric
from ._quiet_callback import QuietCallback
from . import schema
from .csv_log import CsvLog, read_rows

__all__ = ["Checkpoint", "list_checkpoints", "latest_checkpoint"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<kind>best-)?epoch(?P<epoch>\d+)-step(?P<step>\d+)\.ckpt$")


class Checkpoint(QuietCallback):
    """Save the whole train network (weights and optimizer state).

    Files go to ``<directory>/checkpoints/epochEEEE-stepSSSSSSS.ckpt``
    (``best-`` prefixed for the best ones), written under a temporary
    ``.tmp-`` name and renamed, so a crash never leaves a truncated
    checkpoint. The global ``step`` and ``epoch`` are appended to each file
    so a run can resume exactly. Every save is indexed in
    ``<directory>/checkpoints.csv`` (``step,epoch,loss,file,kind,score``).
    Training always ends with a save, unless it diverged: once the loss or
    a weight is NaN/Inf nothing more is saved (``skipped_reason`` says
    why), so the newest checkpoint is the last finite one. Before saving,
    the callbacks given as ``flush`` are flushed, so their logs on disk are
    never behind the newest checkpoint. Nothing is created on disk before
    the first save.

    Retention keeps the newest ``keep_last`` regular files and the
    ``keep_best`` best by ``monitor``; it only ever deletes files named by
    this callback, found again on disk after a restart. Ties: a score equal
    to a kept one ranks after it (the earlier epoch stays the best), and once
    ``keep_best`` files are kept a new score must be strictly better than
    the worst of them to be saved.

    Args:
        directory: run folder; checkpoints go into its ``checkpoints/``.
        every_epochs: save at the end of every N-th epoch (None: never).
        every_steps: also save every N-th global step (None: never).
        keep_last: regular checkpoints kept (None: all).
        monitor: ``"loss"`` or an eval metric name to keep the best by
            (``"accuracy"`` or ``"eval_accuracy"``; ``"eval_loss"`` is the
            Model's ``"loss"`` metric, mindexp's ``EvalLoss``).
        mode: ``"min"`` or ``"max"``; None: from the name of ``monitor``
            (``eval_loss``: min, ``eval_accuracy``: max; a name that does
            not say is refused, see :mod:`mindexp.callbacks.direction`).
        keep_best: best checkpoints kept.
        min_interval_s: skip a periodic save when the last one is younger
            (the final save is never skipped).
        all_ranks: ranks other than 0 save too (under ``checkpoints/rankN``).
        flush: callbacks (or any objects with a ``flush()`` method, such as
            LossMonitor) flushed before each save.
        steps_per_epoch: the steps of a whole epoch, when a ``Model.train``
            call's dataset holds only the rest of an interrupted epoch (a
            resume mid-epoch); None: the dataset's size.
        append: continue an existing ``checkpoints.csv`` that holds rows already;
            without it such a file is refused, unless a mindexp run holds it.
        stateful: callbacks whose state beyond their files goes into each
            checkpoint: each has ``state_dict()`` (JSON-serialisable) and
            ``load_state_dict(state)``; :func:`load_callback_state` gives
            the state back after a resume (a mindexp run does it).
    """

    def __init__(self, directory: str | os.PathLike[str], every_epochs: int | None = 1,
                 every_steps: int | None = None, keep_last: int | None = 3,
                 monitor: str | None = None, mode: str | None = None, keep_best: int = 1,
                 min_interval_s: float = 0.0, all_ranks: bool = False,
                 flush: Iterable[Any] = (), steps_per_epoch: int | None = None,
                 append: bool = False, stateful: Iterable[Any] = ()) -> None:
        super().__init__()
        self.append = bool(append)
        self.flush_callbacks = _check_flush(flush)
        self.stateful = _check_stateful(stateful)
        self.steps_per_epoch = check_steps_per_epoch(steps_per_epoch)
        self.directory = check_directory(directory)
        self.every_epochs = _check_optional_count("every_epochs", every_epochs)
        self.every_steps = _check_optional_count("every_steps", every_steps)
        self.keep_last = _check_optional_count("keep_last", keep_last)
        self.keep_best = _check_optional_count("keep_best", keep_best) or 1
        self.monitor, self.mode = _check_monitor(monitor, mode)
        if min_interval_s is None or min_interval_s < 0:
            raise ValueError(f"`min_interval_s` must be >= 0. Received: min_interval_s={min_interval_s!r}")
        self.min_interval_s = float(min_interval_s)
        self.all_ranks = bool(all_ranks)
        self.ckpt_dir: str | None = None
        self.last_saved_step: int | None = None
        self.best: list[tuple[float, int, str]] = []   # [(score, step, path)] best first
        self._last: list[str] = []  # regular checkpoints, oldest first
        self._index: CsvLog | None = None
        self._last_save_time = time.monotonic()
        self.skipped_reason: str | None = None  # why saving stopped (divergence), or None

    # -- hooks ---------------------------------------------------------------
    def on_train_begin(self, run_context: RunContext) -> None:
        if self.monitor == EVAL_LOSS:
            check_loss_metric(f"Checkpoint(monitor={EVAL_LOSS!r})")
        index_path = log_path(self.directory, schema.CHECKPOINTS.filename, self.all_ranks)
        if index_path is None:
            return  # another rank: save nothing
        stem = os.path.splitext(schema.CHECKPOINTS.filename)[0]
        rank_suffix = os.path.splitext(os.path.basename(index_path))[0][len(stem):]
        self.ckpt_dir = os.path.join(self.directory,
                                     schema.CHECKPOINT_DIR + rank_suffix.replace(".", "/"))
        # Nothing is created before the first save: a callback that rejects the
        # run at train begin leaves no empty folders or files behind.
        self._index = self._checked_log(index_path, schema.CHECKPOINTS.columns, flush_rows=1)
        self._last, self.best = self._scan(index_path)
        self._last_save_time = time.monotonic()
        self.skipped_reason = None

    def on_train_step_end(self, run_context: RunContext) -> None:
        if not self.every_steps:   # the run's default: saves at epoch ends only
            return
        cb_params = run_context.original_args()
        if self._step(cb_params) % self.every_steps == 0:
            self._save_if_due(cb_params, run_context)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        if self.every_epochs and int(cb_params.cur_epoch_num) % self.every_epochs == 0:
            self._save_if_due(cb_params, run_context)
        if self.monitor is not None:
            self._save_if_best(cb_params, run_context)

    def on_train_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        if self.ckpt_dir and "net_outputs" in cb_params and \
                self.last_saved_step != self._step(cb_params):
            self._save(cb_params, run_context, kind="last")
        self.close()

    def _end_context(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the index (checkpoints.csv); safe to call twice."""
        if self._index is not None:
            self._index.close()

    # -- saving --------------------------------------------------------------
    def save_now(self, run_context: RunContext) -> None:
        """Save the current step now as a periodic save does (the flushes, the
        index, the retention): a hand-written loop's ``run.save``. Nothing when
        this step is saved already, or on a rank that saves nothing."""
        cb_params = run_context.original_args()
        if self.ckpt_dir is not None and self.last_saved_step != self._step(cb_params):
            self._save(cb_params, run_context, kind="last")

    def _save_if_due(self, cb_params: Any, run_context: RunContext) -> None:
        if self.ckpt_dir is None or self.last_saved_step == self._step(cb_params):
            return
        if time.monotonic() - self._last_save_time < self.min_interval_s:
            return
        self._save(cb_params, run_context, kind="last")

    def _save_if_best(self, cb_params: Any, run_context: RunContext) -> None:
        if self.ckpt_dir is None:
            return
        score = self._score(cb_params)
        if score is None or not is_finite(score):
            return
        worst_kept = self.best[-1][0] if len(self.best) >= self.keep_best else None
        if worst_kept is None or self._better(score, worst_kept):
            self._save(cb_params, run_context, kind="best", score=score)

    def _save(self, cb_params: Any, run_context: RunContext, kind: str,
              score: float | None = None) -> None:
        step, epoch, _ = self._step_info(cb_params)
        if not self._finite(cb_params, step):
            return
        assert self.ckpt_dir is not None and self._index is not None  # set at train begin
        for cb in self.flush_callbacks:
            cb.flush()
        os.makedirs(self.ckpt_dir, exist_ok=True)
        name = f"{'best-' if kind == 'best' else ''}epoch{epoch:04d}-step{step:07d}.ckpt"
        path = os.path.join(self.ckpt_dir, name)
        tmp = schema.temp_name(path, prefix=True)
        extra: dict[str, Any] = {"step": step, "epoch": epoch}
        if self.stateful:  # saved with the weights: one file, one step
            extra[CALLBACK_STATE_KEY] = _states_json(self.stateful)
        ms.save_checkpoint(cb_params.train_network, tmp, append_dict=extra)
        schema.atomic_replace(tmp, path)
        loss = to_float(first_output(cb_params.net_outputs))
        self._index.write((step, epoch, loss, os.path.relpath(path, self.directory), kind,
                           "" if score is None else score))
        self._retain(kind, path, step, score)
        if kind == "last":
            self.last_saved_step = step
            self._last_save_time = time.monotonic()

    def _finite(self, cb_params: Any, step: int) -> bool:
        """False (and no save) once the loss or a weight is NaN/Inf: a diverged
        run keeps its last finite checkpoint as the newest one."""
        if self.skipped_reason is not None:
            return False
        loss = to_float(first_output(cb_params.get("net_outputs")))
        if loss is not None and not is_finite(loss):
            self.skipped_reason = f"the loss is {loss} at step {step}"
        else:
            bad = next((p.name for p in trained_parameters(cb_params)
                        if not np.isfinite(p.asnumpy()).all()), None)
            if bad is not None:
                self.skipped_reason = f"parameter {bad} is not finite at step {step}"
        if self.skipped_reason is None:
            return True
        logger.warning("Checkpoint: no more checkpoints: %s", self.skipped_reason)
        return False

    def _retain(self, kind: str, path: str, step: int, score: float | None) -> None:
        if kind == "last":
            self._last = [p for p in self._last if p != path] + [path]
            while self.keep_last and len(self._last) > self.keep_last:
                _remove(self._last.pop(0))
            return
        self.best.append((float("nan") if score is None else score, step, path))
        self._rank(self.best)
        while len(self.best) > self.keep_best:
            _remove(self.best.pop()[2])

    def _step(self, cb_params: Any) -> int:
        return self._step_info(cb_params)[0]

    def _score(self, cb_params: Any) -> float | None:
        assert self.monitor is not None
        return monitored_value(cb_params, self.monitor)

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b

    def _scan(self, index_path: str) -> tuple[list[str], list[tuple[float, int, str]]]:
        """Rebuild retention state from the files on disk (after a restart)."""
        scores = best_scores(index_path)
        last: list[tuple[int, str]] = []
        best: list[tuple[float, int, str]] = []
        if self.ckpt_dir is None or not os.path.isdir(self.ckpt_dir):
            return [], best
        for name in os.listdir(self.ckpt_dir):
            match = _NAME.match(name)
            if not match:
                continue  # temp leftovers and files we did not write
            path = os.path.join(self.ckpt_dir, name)
            if match["kind"]:
                best.append((scores.get(name, float("nan")), int(match["step"]), path))
            else:
                last.append((int(match["step"]), path))
        self._rank(best)
        return [p for _, p in sorted(last)], best

    def _rank(self, best: list[tuple[float, int, str]]) -> None:
        """Best first; equal scores: the earlier step first (see the class's tie rule)."""
        mode = self.mode or "min"  # no monitor: no scores (NaN), the files rank by step
        best.sort(key=lambda b: rank_key(b[0], b[1], mode))


def list_checkpoints(directory: str | os.PathLike[str],
                     kind: str = "last") -> list[tuple[int, int, str]]:
    """Checkpoints this callback wrote under ``directory``, oldest first,
    as ``(step, epoch, path)``; ``kind`` is ``"last"``, ``"best"`` or ``"all"``."""
    ckpt_dir = os.path.join(os.fspath(directory), schema.CHECKPOINT_DIR)
    if not os.path.isdir(ckpt_dir):
        return []
    found = []
    for name in os.listdir(ckpt_dir):
        match = _NAME.match(name)
        if match and (kind == "all" or (kind == "best") == bool(match["kind"])):
            found.append((int(match["step"]), int(match["epoch"]), os.path.join(ckpt_dir, name)))
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike[str]) -> tuple[int, int, str] | None:
    """The ``(step, epoch, path)`` of the newest regular checkpoint, or None."""
    found = list_checkpoints(directory, "last")
    return found[-1] if found else None


CALLBACK_STATE_KEY = "callback_state"  # in a checkpoint: the stateful callbacks' state, JSON


def load_callback_state(checkpoint: str | os.PathLike[str] | Mapping[str, Any],
                        callbacks: Iterable[Any]) -> list[str]:
    """Give each callback with ``load_state_dict`` the state a
    :class:`Checkpoint` saved for it (``stateful``) in ``checkpoint`` (a
    ``.ckpt`` path, or what ``mindspore.load_checkpoint`` returned); callbacks
    are matched by their ``state_key`` attribute, else their class name (a
    second one of a class: ``Name#2``). Returns the keys restored; a
    checkpoint saved without state restores nothing."""
    params = ms.load_checkpoint(os.fspath(checkpoint)) if isinstance(
        checkpoint, (str, os.PathLike)) else checkpoint
    saved = params.get(CALLBACK_STATE_KEY)
    if not isinstance(saved, str):
        return []
    states = json.loads(saved)
    restored = []
    for key, cb in _keyed([cb for cb in callbacks if callable(getattr(cb, "load_state_dict",
                                                                       None))]):
        if key in states:
            cb.load_state_dict(states[key])
            restored.append(key)
    return restored


def _keyed(callbacks: list[Any]) -> list[tuple[str, Any]]:
    """``(key, callback)``: ``state_key`` or the class name, numbered from the second."""
    seen: dict[str, int] = {}
    keyed = []
    for cb in callbacks:
        base = str(getattr(cb, "state_key", None) or type(cb).__qualname__)
        seen[base] = seen.get(base, 0) + 1
        keyed.append((base if seen[base] == 1 else f"{base}#{seen[base]}", cb))
    return keyed


def _states_json(stateful: list[Any]) -> str:
    try:
        return json.dumps({key: cb.state_dict() for key, cb in _keyed(stateful)},
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a callback's state_dict() must be JSON-serialisable: {exc}") from None


def _check_stateful(stateful: Iterable[Any]) -> list[Any]:
    stateful = list(stateful or ())
    bad = [cb for cb in stateful if not (callable(getattr(cb, "state_dict", None))
                                         and callable(getattr(cb, "load_state_dict", None)))]
    if bad:
        raise ValueError("`stateful` must list callbacks with state_dict() and "
                         f"load_state_dict(state). Received: stateful={bad!r}")
    return stateful


def _check_flush(flush: Iterable[Any]) -> list[Any]:
    flush = list(flush or ())
    bad = [cb for cb in flush if not callable(getattr(cb, "flush", None))]
    if bad:
        raise ValueError("`flush` must list objects with a flush() method (the log callbacks "
                         f"to flush before each save). Received: flush={bad!r}")
    return flush


def best_scores(index_path: str) -> dict[str, float]:
    """``{file name: score}`` of the best checkpoints an index (checkpoints.csv)
    lists; a row without a readable score is left out."""
    scores: dict[str, float] = {}
    for row in read_rows(index_path):
        if row.get(schema.Col.KIND) != "best":
            continue
        try:
            scores[os.path.basename(row[schema.Col.FILE])] = float(row[schema.Col.SCORE])
        except (KeyError, TypeError, ValueError):  # no score, or a torn row
            continue
    return scores


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _check_optional_count(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be None or an integer >= 0. Received: {name}={value!r}")
    return value or None


def _check_monitor(monitor: str | None, mode: str | None) -> tuple[str | None, str | None]:
    if monitor is None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"`mode` must be one of {MODES}. Received: mode={mode!r}")
        return None, mode
    return monitor, metric_direction(monitor, mode)
