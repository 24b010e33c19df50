"""The live MLflow sender: a process of its own, started by a run made with
``--mlflow`` (:mod:`mindexp.train.mlflow_stream`), that streams the run's logs
to MLflow while it trains and syncs the rest when it ends.

    MINDEXP_MLFLOW_RUN_DIR=<run folder> MINDEXP_MLFLOW_URI=<uri> python -m mindexp.analysis.mlflow_live

It is told the run folder and the tracking URI through its environment (a
password never on a command line; MLflow's own MLFLOW_TRACKING_USERNAME,
_PASSWORD and _TOKEN are honoured). Every ``POLL_S`` it reads what the
run's logs gained (:mod:`mindexp.analysis.mlflow_points`, from the offsets of
the local record) and sends it with ``log-batch`` over MLflow's REST API
(an http(s) server: without importing mlflow, which costs seconds of CPU a
training would feel; other URIs go through ``MlflowClient``). Training never
waits for it: it only reads the run's files, at a low priority, at most
``MAX_BYTES`` of a log per pass (its buffer is the log file itself). A slow
or dead server costs one warning on stderr and retries with a growing
pause. Once run.json is final (or no process holds the run's lock) it makes
the end-of-run sync (:func:`mindexp.analysis.mlflow_export.to_mlflow`:
params, tags, artifacts, the model, the status, whatever is missing) into
the same MLflow run, and exits.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any

from .. import layout
from ..rundir.mlflow_names import ENV_PARENT, ENV_POLL_S, ENV_RUN_DIR, ENV_URI
from ..secrets import masked
from . import mlflow_points as P
from . import mlflow_record as R
from .mlflow_api import QUIET_SWITCHES, api_for

POLL_S = 2.0             # between passes over the logs
MAX_WAIT_S = 30.0        # the longest pause between tries when the server does not answer
MAX_BYTES = 4 << 20      # of one log read in one pass


class LiveSender:
    """Streams one run's logs to one tracking URI (see the module's docstring)."""

    def __init__(self, run_dir: str, uri: str, params: str = P.DEFAULT_PARAMS,
                 parent: str | None = None) -> None:
        self.run_dir, self.uri, self.params, self.parent = run_dir, uri, params, parent
        self.api: Any = None
        self.entry: dict[str, Any] | None = None
        self.warned = False
        self.failures = 0

    def pass_over(self, final: bool = False) -> int:
        """Send what the logs gained; returns the points sent (0 when the server
        did not answer: the next pass tries again)."""
        try:
            sent = self._send(final)
        except Exception as exc:  # the server is slow, dead or refuses: training goes on
            self._trouble(exc)
            return 0
        self.failures = 0
        return sent

    def wait_s(self, poll_s: float = POLL_S) -> float:
        """The pause before the next pass: longer while the server does not answer."""
        return min(MAX_WAIT_S, poll_s * (2 ** min(self.failures, 5)))

    def _send(self, final: bool) -> int:
        meta = R.read_meta_quietly(self.run_dir)
        if self.entry is None:
            self.entry = self._open(meta)
        return R.send_logs(self.api, self.run_dir, self.uri, self.entry, meta, final=final,
                           limit=MAX_BYTES)

    def _open(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The record's entry with the MLflow run id: the one it names (a resumed
        run continues its MLflow run), else the run found by its id or created."""
        if self.api is None:
            self.api = api_for(self.uri)
        entry = R.entry_of(self.run_dir, self.uri)
        if entry.get("run_id"):
            self.api.set_status(entry["run_id"], "RUNNING")  # a resumed run
        else:
            experiment = meta.get("experiment") or "mindexp"
            entry = {"run_id": self.api.run_for(self.run_dir, meta, experiment, self.parent),
                     "offsets": {}}
            if self.parent:
                entry["parent"] = self.parent
        entry["params"] = self.params
        R.save_entry(self.run_dir, self.uri, entry)
        from .mlflow_export import _remember
        _remember(self.run_dir, masked(self.uri), entry["run_id"])
        return entry

    def _trouble(self, exc: BaseException) -> None:
        self.failures += 1
        if not self.warned:
            self.warned = True
            why = masked(str(getattr(exc, "reason", None) or exc).splitlines()[0])
            print(f"mindexp: MLflow at {masked(self.uri)} does not answer ({type(exc).__name__}: "
                  f"{why}); training goes on, the run is sent when it answers (or later: "
                  f"mindexp mlflow {self.run_dir} --tracking-uri URI)", file=sys.stderr,
                  flush=True)


def run_over(run_dir: str) -> bool:
    """True once run.json is final or no process holds the run's lock (the one rule)."""
    from ..rundir.run_lock import is_live
    status = R.read_meta_quietly(run_dir).get("status")
    return status not in ("running", None) or not is_live(run_dir)


def stream(run_dir: str, uri: str, params: str = P.DEFAULT_PARAMS,
           poll_s: float = POLL_S, parent: str | None = None) -> None:
    """Stream ``run_dir`` to ``uri`` until the run ends, then sync the rest;
    ``parent``: the MLflow run of the sweep or study the run belongs to."""
    sender, next_pass = LiveSender(run_dir, uri, params, parent), 0.0
    while True:
        over = run_over(run_dir)
        if over or time.monotonic() >= next_pass:  # a server that does not answer: less often
            sender.pass_over(final=over)
            next_pass = time.monotonic() + sender.wait_s(poll_s)
        if over:
            break
        time.sleep(poll_s)  # the pace of the passes (the run's end is seen within one)
    if sender.failures:  # the server never answered at the end: `mindexp mlflow` later
        return
    try:
        from .mlflow_export import to_mlflow
        to_mlflow(run_dir, uri, params=params)
    except Exception as exc:
        sender._trouble(exc)


def main() -> int:
    """The sender process: its run folder and URI from the environment."""
    run_dir, uri = os.environ.pop(ENV_RUN_DIR, ""), os.environ.pop(ENV_URI, "")
    if not run_dir or not uri or not os.path.isfile(os.path.join(run_dir, layout.RUN_JSON)):
        return 2
    with contextlib.suppress(OSError):
        os.nice(10)  # the training comes first
    for name, value in QUIET_SWITCHES.items():
        os.environ.setdefault(name, value)
    logging.getLogger("mlflow").setLevel(logging.ERROR)  # the run's terminal: one warning at most
    stream(run_dir, uri, poll_s=float(os.environ.get(ENV_POLL_S) or POLL_S),
           parent=os.environ.pop(ENV_PARENT, "") or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
