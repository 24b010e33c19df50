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
values, each run's id and status; rewritten atomically as runs finish),
each run's output in ``logs/`` and the overlay plots.
"""
import dataclasses
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
from ..config import did_you_mean, load_toml
from ..errors import ConfigError
from ..rundir.io import check_label, create_run_dir, now_iso, read_json, write_json

logger = logging.getLogger(__name__)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLL_S = 0.2


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
    """One grid point: its values, its child process and what became of it."""

    def __init__(self, index, values, label):
        self.index, self.values, self.label = index, values, label
        self.status, self.run_id, self.run_dir = "pending", None, None
        self.returncode, self.error, self.final_loss = None, None, None
        self.pid, self.log_path = None, None

    def as_dict(self):
        return {"index": self.index, "values": self.values, "label": self.label,
                "status": self.status, "run_id": self.run_id, "run_dir": self.run_dir,
                "final_loss": self.final_loss, "returncode": self.returncode,
                "error": self.error, "log": self.log_path}


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

    # -- running -------------------------------------------------------------
    def start(self, experiment):
        """Create ``<out>/sweeps/<sweep_id>/`` and its sweep.json; returns the folder.

        ``experiment`` is the experiment's name (its run folder under ``out``).
        """
        self.experiment = experiment
        self.dir = create_run_dir(self.out, "sweeps", self.name)
        self.sweep_id = os.path.basename(self.dir)
        os.makedirs(os.path.join(self.dir, "logs"))
        os.makedirs(os.path.join(self.dir, "workers"))   # each worker's own stderr
        self.status, self.started_at = "running", now_iso()
        self.save()
        return self.dir

    def run(self, on_finish=None):
        """Run every grid point (after :meth:`start`); returns the sweep status.

        ``on_finish(run)`` is called as each run ends. SIGINT and SIGTERM
        stop the sweep: running children get the same signal (their runs end
        ``interrupted``), pending ones never start.
        """
        with self._signals_forwarded():
            self._schedule(on_finish)
        self.status = self._final_status()
        self.ended_at = now_iso()
        self.save()
        return self.status

    def _schedule(self, on_finish):
        pending, self._workers = list(self.runs), []
        selector = selectors.DefaultSelector()
        try:
            while pending or any(w.run for w in self._workers):
                if self._signals and pending:
                    for run in pending:
                        run.status, run.error = "not started", "the sweep was stopped"
                    pending = []
                self._hand_out(pending, selector)
                for key, _ in selector.select(timeout=POLL_S):
                    self._answered(key.data, selector, on_finish)
        finally:
            for worker in self._workers:
                worker.close()

    def _hand_out(self, pending, selector):
        """Give each idle worker a run; start workers up to ``workers``."""
        for worker in [w for w in self._workers if w.run is None]:
            if pending and not self._signals:
                self._give(worker, pending.pop(0), selector)
            else:
                self._retire(worker, selector)
        while pending and not self._signals and len(self._workers) < self.workers:
            self._started += 1
            worker = _Worker(os.path.join(self.dir, "workers"), self._started,
                             runs=None if self.reuse_workers else 1)
            self._workers.append(worker)
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
            self._give(worker, pending.pop(0), selector)

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
        open(run.log_path, "w", encoding="utf-8").close()
        run.status = "running"
        return run

    def _task(self, run):
        """What a worker needs for one run: the experiment's entry, its config
        (file values, then ``--set``, then the grid point), where and under
        which label to write, and the log for its output."""
        if self.entry is None:
            from ..catalog import resolve_spec
            self.entry = resolve_spec(self.spec)[1]
        file_values = load_toml(self.config_file) if self.config_file else {}
        return {"entry": self.entry, "config": {**file_values, **self.sets, **run.values},
                "out": self.out, "label": run.label, "log": run.log_path,
                "tags": list(self.tags), "note": self.note}

    # -- results -------------------------------------------------------------
    def _collect(self, run, answer):
        """What became of ``run``: the worker's answer, else (the worker died)
        its run directory found by label and pid, and its log's last error."""
        run.run_dir = answer.get("run_dir") or self._find_run_dir(run)
        meta = _read_meta(run.run_dir)
        run.run_id = meta.get("run_id") if meta else None
        run.final_loss = meta.get("final_loss") if meta else None
        run.status = self._status_of(run, meta)
        if run.status == "completed":
            run.error = None
        else:
            run.error = (meta or {}).get("error") or answer.get("error") or \
                _last_error(_read_text(run.log_path), run.returncode)

    def _find_run_dir(self, run):
        """The worker's run dir when it died before answering: its label and pid match."""
        pattern = os.path.join(self.out, self.experiment, f"*-{run.label}-*")
        for path in sorted(glob.glob(pattern)):
            if (_read_meta(path) or {}).get("pid") == run.pid:
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
        return [r.run_dir for r in self.runs if r.run_dir]

    def save(self):
        """Write ``sweep.json`` atomically."""
        write_json(os.path.join(self.dir, "sweep.json"), {
            "sweep_id": self.sweep_id, "experiment": self.experiment, "spec": self.spec,
            "grid": self.grid, "set": self.sets, "config_file": self.config_file,
            "workers": self.workers, "out": self.out, "status": self.status,
            "started_at": self.started_at, "ended_at": self.ended_at,
            "runs": [r.as_dict() for r in self.runs]})

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
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mindexp.cli.sweep_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, env=_child_env(), text=True,
                encoding="utf-8", start_new_session=True)
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


def _read_meta(run_dir):
    if not run_dir:
        return None
    try:
        return read_json(os.path.join(run_dir, schema.RUN_JSON))
    except Exception:  # a child killed mid-start may leave no readable run.json
        return None


def _last_error(output, returncode):
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("mindexp:")]
    if errors:
        return errors[-1]
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return lines[-1] if lines else f"exited with status {returncode}"
