"""Sweeps: the cartesian product of a config grid, run by worker processes.

Up to ``workers`` child processes (``python -m mindexp.cli.sweep_worker``,
see :mod:`mindexp.cli.sweep_worker`) each run grid points one after another
through the Python API (experiment entry and config dict in, run directory
and status out): MindSpore is imported once per
worker, not once per run, which is most of a small run's time. Each run
sets its own context and seeds, so its logs equal a fresh process's. A
failed or diverged run does not stop the others; a worker that dies takes
only its current run with it and is replaced. A grid over ``device`` gets
a fresh worker per run (MindSpore selects the device once per process).
``<out>/sweeps/<sweep_id>/`` holds ``sweep.json`` (the grid, the fixed
values, each run's folder, id and status; rewritten atomically as runs
start and finish), each run's output in ``logs/`` and the overlay plots.

Workers die with the sweep (a parent-death signal, so even ``kill -9``).
The same command again continues the newest unfinished sweep of it
(:meth:`Sweep.start`): completed points stay, interrupted runs resume in
their folders, the other points are trained again. On a full disk no
further run starts and sweep.json stays whole (space set aside for it).
"""
import contextlib
import dataclasses
import errno
import glob
import itertools
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading

from ..callbacks import schema
from ..define.config import did_you_mean, load_toml
from ..errors import ConfigError, MindexpError, RunDirError
from ..search.children import die_with_parent
from ..rundir.meta import read_meta
from ..rundir.io import (check_label, create_run_dir, inside, is_run_dir, now_iso, read_json,
                         write_json)
from ..rundir.record import locked
from ..rundir.run_lock import RunLockedError, run_locked

logger = logging.getLogger(__name__)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLL_S = 0.2
SWEEP_JSON = "sweep.json"
# Outcomes a continued sweep keeps; every other point is trained again.
FINAL = ("completed", "diverged", "pruned")
FULL_DISK = os.strerror(errno.ENOSPC)   # in a run's error: no further run can succeed
# Run statuses a continued sweep resumes in the run's own folder (from its checkpoint).
RESUMABLE = ("interrupted", "running")
# What makes two sweeps the same command (a rerun continues the unfinished one).
IDENTITY = ("experiment", "spec", "grid", "set", "config_file", "name")


def parse_grid(items, exp_cls):
    """``["optimizer=sgd,adam", "lr=0.1,0.2"]`` -> ``{"optimizer": ["sgd", "adam"], ...}``.

    Raises ConfigError for a malformed item, a key that is not a config
    field of ``exp_cls`` (naming the closest ones), an empty value or a key
    given twice.
    """
    known = [f.name for f in dataclasses.fields(exp_cls.Config)]
    grid = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--grid expects FIELD=VALUE1,VALUE2,... Received: {item!r}")
        _check_grid_key(key, known, exp_cls, grid)
        values = [v.strip() for v in raw.split(",")]
        if "" in values:
            raise ConfigError(f"--grid {key} has an empty value; give FIELD=VALUE1,VALUE2 with "
                              f"no empty item. Received: {item!r}", field=key)
        grid[key] = values
    return grid


def _check_grid_key(key, known, exp_cls, grid):
    if key in grid:
        raise ConfigError(f"--grid {key} is given twice; list all its values in one "
                          f"--grid {key}=VALUE1,VALUE2. Received: {key}", field=key)
    if key not in known:
        raise ConfigError(f"--grid key {key!r} is not a config field of "
                          f"{exp_cls.experiment_name()}.{did_you_mean(key, known)} "
                          f"Valid fields: {', '.join(known)}. "
                          f"Received: {key}", field=key)


def check_points(exp_cls, grid, sets, file_values=None):
    """Build every grid point's config now, so a bad value stops the sweep
    before any run starts (ConfigError naming the field)."""
    both = [key for key in grid if key in (sets or {})]
    if both:
        raise ConfigError(f"config field {both[0]!r} is given by both --grid and --set; keep "
                          f"one. Received: --grid {both[0]}=..., --set {both[0]}=...",
                          field=both[0])
    for point in grid_points(grid):
        exp_cls({**(file_values or {}), **(sets or {}), **point})


def grid_points(grid):
    """The cartesian product as a list of ``{field: value}``, first key varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*grid.values())]


class SweepRun:
    """One grid point: its values, its child process and what became of it.

    ``previous``: run directories of earlier attempts at this point (a
    failed run a continued sweep trained again), which ``mindexp rm`` of
    the sweep removes too. ``resume_dir``: the interrupted run a continued
    sweep resumes in place.
    """

    def __init__(self, index, values, label):
        self.index, self.values, self.label = index, values, label
        self.status, self.run_id, self.run_dir = "pending", None, None
        self.returncode, self.error, self.final_loss = None, None, None
        self.pid, self.log_path = None, None
        self.previous, self.resume_dir = [], None

    def as_dict(self):
        return {"index": self.index, "values": self.values, "label": self.label,
                "status": self.status, "run_id": self.run_id, "run_dir": self.run_dir,
                "final_loss": self.final_loss, "returncode": self.returncode,
                "error": self.error, "log": self.log_path, "pid": self.pid,
                "previous_runs": list(self.previous)}

    def restore(self, entry):
        """Take back what sweep.json's ``entry`` recorded of this point."""
        self.status = entry.get("status") or "pending"
        for key in ("run_id", "run_dir", "final_loss", "returncode", "error", "pid"):
            setattr(self, key, entry.get(key))
        self.log_path = entry.get("log")
        self.previous = [p for p in entry.get("previous_runs") or [] if isinstance(p, str)]

    def retry(self):
        """Make the point pending again: an interrupted run is resumed in its
        folder, any other earlier run is kept aside and a new one trained."""
        if self.run_dir and self.status in RESUMABLE:
            self.resume_dir = self.run_dir
        elif self.run_dir:
            self.previous.append(self.run_dir)
            self.run_dir = self.run_id = None
        self.status, self.error, self.returncode, self.final_loss = "pending", None, None, None


class Sweep:
    """A grid of runs of one experiment, run in child processes.

    Args:
        spec: what ``mindexp run`` accepts (a shipped name or ``file.py:Class``).
        entry: the experiment's entry (``module:Class``); default: from ``spec``.
        grid: ``{field: [values as text]}`` from :func:`parse_grid`.
        sets: fixed ``{field: value as text}`` for every run.
        config_file: a TOML file every run reads (``--set`` and the grid win).
        out: output root; runs go to ``<out>/<experiment>/``.
        workers: runs at the same time.
        name: label for the sweep id and its runs' ids.
    """

    def __init__(self, spec, grid, sets=None, config_file=None, out="outputs", workers=None,
                 name=None, entry=None):
        self.spec, self.grid, self.sets = spec, dict(grid), dict(sets or {})
        self.entry = entry
        self.config_file = os.path.abspath(config_file) if config_file else None
        self.out = os.path.abspath(out)
        self.name = check_label(name)
        self.runs = [SweepRun(i, values, f"{name or 'sweep'}-{i + 1}")
                     for i, values in enumerate(grid_points(self.grid))]
        self.workers = _check_workers(workers, len(self.runs))
        # MindSpore selects the device once per process: a grid over it needs fresh workers.
        self.reuse_workers = "device" not in self.grid
        self._workers, self._started = [], 0
        for run in self.runs:
            check_label(run.label)
        self.dir = self.sweep_id = self.experiment = None
        self.tags, self.note = [], None  # every run's tags and note (mindexp tag / note)
        self.status, self.started_at, self.ended_at = "pending", None, None
        self._signals = 0
        self.signum = None  # the first signal that stopped the sweep
        self.disk_error = None  # why a write failed (a full disk): no further run starts
        self.record_error = None  # why sweep.json could not be written (it is not current)
        self.continued = False  # True when start() took up an unfinished sweep
        self._lock = contextlib.ExitStack()  # held from start() to the end of run()

    # -- running -------------------------------------------------------------
    def start(self, experiment, resume="auto"):
        """Create ``<out>/sweeps/<sweep_id>/`` and its sweep.json, or take up
        the newest unfinished sweep of the same command; returns the folder.

        ``experiment`` is the experiment's name (its run folder under ``out``).
        ``resume``: ``"auto"`` continues an unfinished sweep with the same
        experiment, grid, ``--set`` values, config file and name when there
        is one (its completed points stay, the others are trained again);
        True requires one (ConfigError otherwise); False always starts anew.
        The sweep folder's lock is held until :meth:`run` ends, so a sweep
        running elsewhere is never taken up twice.
        """
        self.experiment = experiment
        found = self._take_up_unfinished() if resume else None
        if found is None and resume is True:
            raise ConfigError(f"--resume: no unfinished sweep of this command in "
                              f"{os.path.join(self.out, 'sweeps')} (same experiment, --grid, "
                              f"--set, --config and --name); run it without --resume to start one",
                              field="resume")
        if found is None:
            self._create()
        self.status = "running"
        self.save()
        return self.dir

    def _create(self):
        self.dir = create_run_dir(self.out, "sweeps", self.name)
        self.sweep_id = os.path.basename(self.dir)
        try:
            self._lock.enter_context(run_locked(self.dir, action="continue the sweep"))
            os.makedirs(os.path.join(self.dir, "logs"))
            os.makedirs(os.path.join(self.dir, "workers"))   # each worker's own stderr
            _reserve_space(self.dir, len(self.runs))
        except OSError as exc:
            raise MindexpError(f"cannot start the sweep in {self.dir}: {exc.strerror}") from None
        self.started_at = now_iso()

    def _take_up_unfinished(self):
        """The newest unfinished sweep of this command not held by a live
        sweep: its folder, locked, with this sweep's points restored; else None."""
        for path in sorted(glob.glob(os.path.join(self.out, "sweeps", "*", SWEEP_JSON)),
                           reverse=True):     # sweep ids start with the time
            if not self._takes_up(_read_record(path)):
                continue
            folder = os.path.dirname(path)
            try:
                self._lock.enter_context(run_locked(folder, action="continue the sweep"))
            except RunLockedError:
                continue              # a sweep running now: leave it alone
            record = _read_record(path)   # again: as its last sweep left it
            if not self._takes_up(record):
                self._lock.close()
                continue
            try:
                for entry in record["runs"]:
                    self._relocate(entry, path)
            except RunDirError:
                self._lock.close()
                raise
            self._adopt(folder, record)
            _reserve_space(folder, len(self.runs))
            return folder
        return None

    def _relocate(self, entry, path):
        """Point ``entry``'s run folders at their place under this output root
        (an output folder moved or copied keeps working); RunDirError when
        one resolves outside it, as a continued sweep writes into them."""
        if entry.get("run_dir") is not None:
            entry["run_dir"] = _under_root(self.out, entry["run_dir"], path)
        previous = entry.get("previous_runs")
        entry["previous_runs"] = [_under_root(self.out, p, path) for p in previous] \
            if isinstance(previous, list) else []

    def _takes_up(self, record):
        """``record`` is an unfinished sweep of this same command."""
        mine = {"experiment": self.experiment, "spec": self.spec, "grid": self.grid,
                "set": self.sets, "config_file": self.config_file, "name": self.name}
        return record is not None and record.get("status") != "completed" and \
            {k: record.get(k) for k in IDENTITY} == mine and self._matches_points(record)

    def _matches_points(self, record):
        entries = record.get("runs")
        return isinstance(entries, list) and len(entries) == len(self.runs) and all(
            isinstance(e, dict) and e.get("values") == r.values
            for e, r in zip(entries, self.runs)) and \
            list(record.get("grid") or {}) == list(self.grid)   # same order of points

    def _adopt(self, folder, record):
        self.dir, self.sweep_id, self.continued = folder, os.path.basename(folder), True
        self.started_at = record.get("started_at")
        for run, entry in zip(self.runs, record["runs"]):
            run.restore(entry)
            self._settle(run)
        for sub in ("logs", "workers"):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)

    def _settle(self, run):
        """A point the stopped sweep did not see finish: its run may have
        finished meanwhile (take its outcome), else it is trained again."""
        if run.status in FINAL:
            return
        if run.run_dir is None and run.status == "running" and run.pid:
            run.run_dir = self._find_run_dir(run)   # it started before sweep.json named it
        meta = _read_meta(run.run_dir) or {}
        if meta.get("status") in FINAL:
            run.status, run.run_id = meta["status"], meta.get("run_id")
            run.final_loss, run.error = meta.get("final_loss"), meta.get("error")
            return
        run.status = meta["status"] if meta.get("status") in RESUMABLE else "failed"
        run.retry()

    def todo(self):
        """The points still to train."""
        return [r for r in self.runs if r.status not in FINAL]

    def run(self, on_finish=None):
        """Run every grid point not done yet (after :meth:`start`); returns the
        sweep status.

        ``on_finish(run)`` is called as each run ends. SIGINT and SIGTERM
        stop the sweep: running children get the same signal (their runs end
        ``interrupted``), pending ones never start. Workers are started from
        the calling thread and die with it (even when the sweep is killed
        with SIGKILL): call it from the main thread.
        """
        try:
            with self._signals_forwarded():
                self._schedule(on_finish)
            self.status = self._final_status()
            self.ended_at = now_iso()
            self.save()
        finally:
            _release_space(self.dir)
            try:
                self._lock.close()
            except FileNotFoundError:   # the sweep folder was removed meanwhile
                pass
        return self.status

    def _schedule(self, on_finish):
        pending, self._workers = self.todo(), []
        selector = selectors.DefaultSelector()
        try:
            while pending or any(w.run for w in self._workers):
                if self._stopping() and pending:
                    why = self.disk_error or "the sweep was stopped"
                    for run in pending:
                        run.status, run.error = "not started", why
                    pending = []
                self._hand_out(pending, selector)
                for key, _ in selector.select(timeout=POLL_S):
                    self._answered(key.data, selector, on_finish)
                self._name_started_runs()
        finally:
            for worker in self._workers:
                worker.close()

    def _name_started_runs(self):
        """Record each running point's run directory as soon as its run.json
        exists, so a sweep killed meanwhile still names (and removes) it."""
        found = False
        for worker in self._workers:
            run = worker.run
            if run is not None and run.run_dir is None:
                run.run_dir = self._find_run_dir(run)
                found = found or run.run_dir is not None
        if found:
            self.save()

    def _hand_out(self, pending, selector):
        """Give each idle worker a run; start workers up to ``workers``."""
        for worker in [w for w in self._workers if w.run is None]:
            if pending and not self._stopping():
                self._give(worker, pending.pop(0), selector)
            else:
                self._retire(worker, selector)
        while pending and not self._stopping() and len(self._workers) < self.workers:
            self._started += 1
            worker = _Worker(os.path.join(self.dir, "workers"), self._started,
                             runs=None if self.reuse_workers else 1)
            self._workers.append(worker)
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
            self._give(worker, pending.pop(0), selector)

    def _stopping(self):
        """A signal arrived, or the disk is full (each further run would fail)."""
        return bool(self._signals or self.disk_error)

    def _give(self, worker, run, selector):
        """Send ``run`` to ``worker``; a worker already gone fails the run (never
        a retry: a worker that cannot start would otherwise be restarted forever)."""
        if worker.give(self._launch(run), self._task(run)):
            return
        self._retire(worker, selector)
        run.returncode, run.status = worker.proc.returncode, "failed"
        run.error = (f"the sweep's worker exited before the run started (status "
                     f"{run.returncode}); see {worker.log_path}")
        self.save()

    def _answered(self, worker, selector, on_finish):
        run, answer = worker.run, worker.answer()
        if run is not None:
            if answer is not None:    # else answer() kept how the worker died
                run.returncode = answer["returncode"]
            self._collect(run, answer or {})
            if run.error and FULL_DISK in run.error:
                self.disk_error = self.disk_error or \
                    f"the disk is full: run {run.run_id or run.label} failed with {FULL_DISK}"
            self.save()
            if on_finish:
                on_finish(run)
        if answer is None or not worker.reusable():   # it died, or it has done its share
            self._retire(worker, selector)

    def _retire(self, worker, selector):
        try:
            selector.unregister(worker.proc.stdout)
        except (KeyError, ValueError):
            pass
        worker.close()
        self._workers.remove(worker)

    def _launch(self, run):
        run.log_path = os.path.join(self.dir, "logs", f"{run.label}.log")
        open(run.log_path, "a", encoding="utf-8").close()   # a resumed run's log goes on
        run.status, run.run_dir = "running", run.resume_dir
        return run

    def _task(self, run):
        """What a worker needs for one run: the experiment's entry, its config
        (file values, then ``--set``, then the grid point), where and under
        which label to write, and the log for its output."""
        if self.entry is None:
            from ..define.catalog import resolve_spec
            self.entry = resolve_spec(self.spec)[1]
        file_values = load_toml(self.config_file) if self.config_file else {}
        return {"entry": self.entry, "config": {**file_values, **self.sets, **run.values},
                "out": self.out, "label": run.label, "log": run.log_path,
                "tags": list(self.tags), "note": self.note, "resume": run.resume_dir}

    # -- results -------------------------------------------------------------
    def _collect(self, run, answer):
        """What became of ``run``: the worker's answer (never re-read from the
        run folder, which ``gc`` may have removed meanwhile), else (the worker
        died) its run.json, and its log's last error."""
        run_dir = answer.get("run_dir") or run.run_dir or self._find_run_dir(run)
        if run.resume_dir and run_dir != run.resume_dir:   # restarted: no checkpoint to resume
            run.previous.append(run.resume_dir)
        run.run_dir, run.resume_dir = run_dir, None
        if answer.get("status") and "run_id" in answer:
            meta = answer
        else:
            meta = _read_meta(run.run_dir) or {}
        run.run_id = meta.get("run_id") or (os.path.basename(run_dir) if run_dir else None)
        run.final_loss = meta.get("final_loss")
        run.status = self._status_of(run, meta)
        if run.status == "completed":
            run.error = None
        else:
            run.error = meta.get("error") or answer.get("error") or \
                _last_error(_read_text(run.log_path), run.returncode)

    def _find_run_dir(self, run):
        """The point's run directory before its worker answered: its label and
        its worker's pid match (an earlier attempt's folder never does)."""
        pattern = os.path.join(self.out, self.experiment, f"*-{run.label}-*")
        for path in sorted(glob.glob(pattern)):
            if path not in run.previous and (_read_meta(path) or {}).get("pid") == run.pid:
                return path
        return None

    def _status_of(self, run, meta):
        status = (meta or {}).get("status")
        if status and status != "running":
            return status
        # No final run.json: the child died before or during training.
        return "interrupted" if self._signals else "failed"

    def _final_status(self):
        if self._signals:
            return "interrupted"
        return "completed" if all(r.status == "completed" for r in self.runs) else "failed"

    def failures(self):
        """The runs that did not complete."""
        return [r for r in self.runs if r.status != "completed"]

    def run_dirs(self):
        """The points' run directories that exist (``gc`` may have removed some)."""
        return [r.run_dir for r in self.runs if r.run_dir and is_run_dir(r.run_dir)]

    def save(self):
        """Write ``sweep.json`` atomically, under the lock ``mindexp rm`` takes
        to drop a removed run from it.

        When the write fails (a full disk), the space the sweep set aside is
        given back and the write tried once more; a failure after that is
        kept in ``disk_error`` (no further run starts; the command says it in
        one line) and sweep.json keeps its last whole version.
        """
        try:
            self._write_record()
        except OSError as exc:
            if not _release_space(self.dir):
                self._write_failed(exc)
                return
            try:
                self._write_record()
            except OSError as again:
                self._write_failed(again)
                return
        self.record_error = None

    def _write_failed(self, exc):
        self.record_error = f"cannot write {os.path.join(self.dir, SWEEP_JSON)}: {exc.strerror}"
        self.disk_error = self.disk_error or self.record_error

    def _write_record(self):
        with locked(self.dir):
            write_json(os.path.join(self.dir, SWEEP_JSON), {
                "sweep_id": self.sweep_id, "experiment": self.experiment, "spec": self.spec,
                "name": self.name, "grid": self.grid, "set": self.sets,
                "config_file": self.config_file, "workers": self.workers, "out": self.out,
                "status": self.status, "started_at": self.started_at,
                "ended_at": self.ended_at, "runs": [r.as_dict() for r in self.runs]})

    # -- signals ---------------------------------------------------------------
    def _signals_forwarded(self):
        return _SignalForwarding(self)

    def _forward(self, signum, frame):
        from ..train.failures import signal_name
        self._signals += 1
        self.signum = self.signum or signum
        logger.warning("%s: stopping the sweep (%s)", signal_name(signum),
                       "forwarding it to the runs" if self._signals < 3 else "killing the runs")
        for worker in list(getattr(self, "_workers", ())):
            # Once: the run stops after its step. Twice: at once. Thrice: killed.
            worker.signal(signum if self._signals < 3 else signal.SIGKILL)


class _Worker:
    """One ``python -m mindexp.cli.sweep_worker`` child and the run it is doing.

    ``runs``: how many runs it may do (None: any number).
    """

    def __init__(self, log_dir, number, runs=None):
        self.log_path = os.path.join(log_dir, f"worker-{number}.log")
        with open(self.log_path, "a", encoding="utf-8") as log:
            # Own session: a terminal's Ctrl-C reaches the sweep only, which
            # forwards that one signal, so each run stops cleanly.
            # die_with_parent: a sweep killed even with SIGKILL takes its workers
            # with it (they get SIGTERM: their runs end interrupted, resumable).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mindexp.cli.sweep_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, env=_child_env(), text=True,
                encoding="utf-8", start_new_session=True, preexec_fn=die_with_parent())
        self.run, self.left = None, runs

    def give(self, run, task):
        """Send ``run`` (its ``task``, see :meth:`Sweep._task`); False when the worker is gone."""
        try:
            self.proc.stdin.write(json.dumps(task) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        self.run, run.pid = run, self.proc.pid
        if self.left is not None:
            self.left -= 1
        return True

    def answer(self):
        """The finished run's answer ``{run_dir, status, error, returncode}``, or
        None when the worker died (then its exit status, a signal as a negative
        number, goes to the run)."""
        line = self.proc.stdout.readline()
        try:
            answer = json.loads(line)
            answer["returncode"] = int(answer["returncode"])
            return answer
        except (ValueError, KeyError, TypeError):
            # end of output (it died) or a garbled answer: either way it is done
            if self.proc.poll() is None:
                self.proc.kill()
            code = self.proc.wait()
            if self.run is not None:
                self.run.returncode = code
            return None

    def reusable(self):
        self.run = None
        return self.proc.poll() is None and (self.left is None or self.left > 0)

    def signal(self, signum):
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def close(self):
        """End of input: the worker exits after its run (and at once when idle)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.run is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _SignalForwarding:
    """Install the sweep's SIGINT/SIGTERM handler (main thread only), restore it after."""

    def __init__(self, sweep):
        self.sweep, self.saved = sweep, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self.sweep._forward)
        return self

    def __exit__(self, *exc):
        for sig, old in self.saved.items():
            signal.signal(sig, old)
        return False


def _check_workers(workers, n_runs):
    if workers is None:
        return max(1, min(os.cpu_count() or 1, n_runs))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be an integer >= 1 (runs at the same time). "
                          f"Received: --workers {workers!r}", field="workers")
    return min(workers, max(1, n_runs))


def _child_env():
    env = dict(os.environ)
    # The children import this very framework, wherever the sweep was started.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("GLOG_v", "3")
    return env


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _under_root(out, run_dir, record_path):
    """``<out>/<experiment>/<run_id>`` for a run folder a sweep.json names;
    RunDirError when that resolves outside ``out`` (``..``, a symlink)."""
    key = os.path.normpath(run_dir) if isinstance(run_dir, str) and run_dir else ""
    here = os.path.join(out, os.path.basename(os.path.dirname(key)), os.path.basename(key))
    if not key or not inside(out, here):
        raise RunDirError(f"{record_path} names a run outside the output root {out}; "
                          f"refusing to continue that sweep. Received: {run_dir!r}")
    return here


def _reserve_space(folder, points):
    """Set space aside in the sweep folder, given back when the disk fills so
    that sweep.json can still be written (about 1 KiB per point)."""
    try:
        with open(os.path.join(folder, schema.SPACE_RESERVE), "wb") as f:
            f.write(b"\0" * (16384 + 1024 * points))
    except OSError:
        pass  # best effort: the disk may be full already


def _release_space(folder):
    """Give the reserved space back; False when there was none."""
    try:
        os.remove(os.path.join(folder, schema.SPACE_RESERVE))
    except OSError:
        return False
    return True


def _read_record(path):
    """A sweep.json as a dict, or None when it cannot be read."""
    try:
        record = read_json(path)
    except Exception:  # noqa: BLE001  (a damaged record is simply not taken up)
        return None
    return record if isinstance(record, dict) else None


def _read_meta(run_dir):
    if not run_dir:
        return None
    try:
        return read_meta(run_dir)
    except Exception:  # a child killed mid-start may leave no readable (or valid) run.json
        return None


def _last_error(output, returncode):
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("mindexp:")]
    if errors:
        return errors[-1]
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return lines[-1] if lines else f"exited with status {returncode}"
