"""The driver loop of one ``Sweep.run``: workers started from a :class:`.driver.Crew`
while points are open, their events applied to the sweep's points, the
storage read for what workers elsewhere did, until every point is done."""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from ..rundir.groups import under_root
from .study import LOGS, read_text
from .sweep_record import SweepRun

WORKERS_DIR = "workers"      # each worker's own stderr
POLL_S = 0.2
STORAGE_POLL_S = 1.0         # how often the storage is read for what other workers did


class SweepLoop:
    """Drives the workers of ``sweep`` (a :class:`.sweeps.Sweep`) through ``crew``;
    ``on_finish(run)`` as each run of this machine ends. ``started``: workers
    started; ``worker_failure``: why a worker could not start a run (then none
    is started again)."""

    def __init__(self, sweep: Any, crew: Any,
                 on_finish: Callable[[SweepRun], None] | None = None):
        self.sweep, self.crew, self.on_finish = sweep, crew, on_finish
        self.held: dict = {}                   # worker -> (point, trial id)
        self.started = 0
        self.worker_failure: str | None = None

    def drive(self) -> None:
        """Start workers while points are open; return once none runs and
        nothing is left to wait for (stopped, disk full, or every point done)."""
        crew, sweep = self.crew, self.sweep
        states = sweep.refresh()
        polled = time.monotonic()
        while True:
            stopping = crew.forwarding.signum is not None or sweep.disk_error
            open_points = sum(s == "open" for s in states.values())
            if not stopping and self.worker_failure is None:
                while crew.running() < min(sweep.workers, open_points):
                    self._spawn()
            if not crew.running() and (stopping or self.worker_failure is not None
                                       or "running" not in states.values() and not open_points):
                return
            found = crew.next_event(POLL_S if crew.running() else STORAGE_POLL_S)
            if found is not None:
                self._on_event(*found)
            if found is not None or time.monotonic() - polled > STORAGE_POLL_S:
                states, polled = sweep.refresh(dead=not crew.running()), time.monotonic()

    def _spawn(self):
        self.started += 1
        log = os.path.join(self.sweep.dir, WORKERS_DIR, f"worker-{self.started}.log")
        proc = self.crew.spawn(self.sweep.worker_spec(), self.started, log)
        proc.claimed = False

    def _on_event(self, proc, event):
        if event is None:
            self._worker_ended(proc)
        elif event.get("event") == "start":
            proc.claimed = True
            self.held[proc] = (event["point"], event["trial_id"])
            self._run_started(self.sweep.runs[event["point"]], event)
        elif event.get("event") == "end":
            index, trial_id = self.held.pop(proc)
            self._ended(self.sweep.runs[index], trial_id, event)

    def _run_started(self, run, event):
        sweep = self.sweep
        run.status, run.pid, run.returncode, run.error = "running", event["pid"], None, None
        run.run_dir = under_root(sweep.out, event.get("resume"))
        run.log_path = os.path.join(sweep.dir, LOGS, f"{run.label}.log")
        sweep.forget_answer(event["trial_id"])
        sweep.save()

    def _worker_ended(self, proc):
        """A worker's output ended: it is done, or it died (then its point fails)."""
        code = proc.wait()
        if proc in self.held:
            index, trial_id = self.held.pop(proc)
            run = self.sweep.runs[index]
            run.run_dir = run.run_dir or self.sweep.named_run_dir(trial_id)
            answer = {"run_dir": run.run_dir, "status": "failed", "returncode": code,
                      "error": _last_error(read_text(run.log_path) or "", code)}
            self._ended(run, trial_id, answer, tell_storage=True)
        elif not proc.claimed and code != 0:
            # It could not even start: another would not either, so none is started again.
            self.worker_failure = (f"the sweep's worker exited before the run started (status "
                                   f"{code}); see {proc.log_path}")

    def _ended(self, run, trial_id, answer, tell_storage=False):
        self.sweep.point_ended(run, trial_id, answer, tell_storage=tell_storage)
        if self.on_finish:
            self.on_finish(run)



def _last_error(output, returncode):
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("mindexp:")]
    if errors:
        return errors[-1]
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return lines[-1] if lines else f"exited with status {returncode}"
