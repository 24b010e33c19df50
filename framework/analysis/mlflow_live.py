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

import base64
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..callbacks import schema
from ..rundir.mlflow_names import ENV_PARENT, ENV_POLL_S, ENV_RUN_DIR, ENV_URI
from ..secrets import masked
from . import mlflow_points as P
from . import mlflow_record as R

POLL_S = 2.0             # between passes over the logs
MAX_WAIT_S = 30.0        # the longest pause between tries when the server does not answer
TIMEOUT_S = 10.0         # of one request
MAX_BYTES = 4 << 20      # of one log read in one pass
BATCH = 1000             # MLflow's limit of metrics per log-batch
RUN_ID_TAG = "mindexp.run_id"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting: a sweep's or study's runs

logger = logging.getLogger(__name__)


class Rest:
    """The few calls of MLflow's REST API the sender needs (an http(s) server)."""

    def __init__(self, uri: str) -> None:
        parts = urllib.parse.urlsplit(uri)
        self.base = urllib.parse.urlunsplit(
            (parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""),
             parts.path.rstrip("/"), "", ""))
        self.headers = {"Content-Type": "application/json", **_auth(parts)}

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict:
        """The JSON answer of ``method /api/2.0/mlflow/<path>``; raises on an error."""
        url = f"{self.base}/api/2.0/mlflow/{path}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return json.loads(answer.read() or b"{}")

    def run_for(self, run_dir: str, meta: dict[str, Any], experiment: str,
                parent: str | None = None) -> str:
        """The MLflow run of ``run_dir``: found by its mindexp run id, else created
        (a child of the MLflow run ``parent`` when given: a sweep's or study's)."""
        run_id = meta.get("run_id") or os.path.basename(run_dir)
        tags = {RUN_ID_TAG: run_id, **({PARENT_TAG: parent} if parent else {})}
        found, created = self.run_tagged(experiment, RUN_ID_TAG, run_id, run_id,
                                         P.start_ms(meta), tags)
        if parent and not created:
            self.log_batch(found, tags={PARENT_TAG: parent})
        return found

    def run_tagged(self, experiment: str, key: str, value: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> tuple[str, bool]:
        """``(MLflow run id, created)``: the run of ``experiment`` whose tag ``key``
        is ``value``, else a new one named ``name`` with ``tags``."""
        experiment_id = self._experiment_id(experiment)
        found = self.call("POST", "runs/search", {
            "experiment_ids": [experiment_id], "max_results": 1,
            "filter": f"tags.`{key}` = '{value}'"}).get("runs") or []
        if found:
            return found[0]["info"]["run_id"], False
        made = self.call("POST", "runs/create", {
            "experiment_id": experiment_id, "start_time": start_ms, "run_name": name,
            "tags": [{"key": k, "value": v} for k, v in tags.items()]})
        return made["run"]["info"]["run_id"], True

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        """Params, tags and metrics (at step 0) in one call."""
        self.call("POST", "runs/log-batch", {
            "run_id": run_id,
            "params": [{"key": k, "value": v} for k, v in (params or {}).items()],
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
            "metrics": [{"key": k, "value": v, "timestamp": timestamp, "step": 0}
                        for k, v in (metrics or {}).items()]})

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        """The run's MLflow status (RUNNING, or FINISHED/FAILED/KILLED at ``end_ms``)."""
        body: dict[str, Any] = {"run_id": run_id, "run_uuid": run_id, "status": status}
        if status != "RUNNING" and end_ms:
            body["end_time"] = end_ms
        self.call("POST", "runs/update", body)

    def _experiment_id(self, name: str) -> str:
        try:
            return self.call("GET", "experiments/get-by-name",
                             {"experiment_name": name})["experiment"]["experiment_id"]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        return self.call("POST", "experiments/create", {"name": name})["experiment_id"]

    def running(self, run_id: str) -> None:
        """The MLflow run is RUNNING again (a resumed run)."""
        self.set_status(run_id, "RUNNING")

    def log_points(self, run_id: str, points: list[P.Point]) -> None:
        """Send ``points`` in batches."""
        for i in range(0, len(points), BATCH):
            self.call("POST", "runs/log-batch", {"run_id": run_id, "metrics": [
                {"key": p.key, "value": p.value, "timestamp": p.timestamp, "step": p.step}
                for p in points[i:i + BATCH]]})


class Client:
    """The same calls through ``MlflowClient`` (a URI that is not http(s))."""

    def __init__(self, uri: str) -> None:
        from .mlflow_export import connect
        self.client = connect(uri)

    def run_for(self, run_dir: str, meta: dict[str, Any], experiment: str,
                parent: str | None = None) -> str:
        from .mlflow_export import _experiment_id, _find_or_create
        from ..rundir.run import Run
        run = Run(run_dir)
        found = _find_or_create(self.client, run, _experiment_id(self.client, run, experiment,
                                                                 {})).info.run_id
        if parent:
            self.log_batch(found, tags={PARENT_TAG: parent})
        return found

    def run_tagged(self, experiment: str, key: str, value: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> tuple[str, bool]:
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        runs = self.client.search_runs([experiment_id], filter_string=f"tags.`{key}` = '{value}'",
                                       max_results=1)
        if runs:
            return runs[0].info.run_id, False
        made = self.client.create_run(experiment_id, start_time=start_ms, run_name=name,
                                      tags=tags)
        return made.info.run_id, True

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag
        self.client.log_batch(
            run_id, params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
            metrics=[Metric(k, v, timestamp, 0) for k, v in (metrics or {}).items()])

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        if status == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status, end_time=end_ms)

    def running(self, run_id: str) -> None:
        self.set_status(run_id, "RUNNING")

    def log_points(self, run_id: str, points: list[P.Point]) -> None:
        from mlflow.entities import Metric
        metrics = [Metric(*p) for p in points]
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(run_id, metrics=metrics[i:i + BATCH])


def api_for(uri: str) -> Rest | Client:
    """MLflow's REST API for an http(s) server (no mlflow import), else ``MlflowClient``."""
    return Rest(uri) if uri.lower().startswith(("http:", "https:")) else Client(uri)


def _auth(parts: urllib.parse.SplitResult) -> dict[str, str]:
    """The Authorization header from MLflow's own variables (a token first), else
    from the URI's ``user:password@``."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user = os.environ.get("MLFLOW_TRACKING_USERNAME") or parts.username
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD") or parts.password or ""
    if not user:
        return {}
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


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
        start, sent = P.start_ms(meta), 0
        offsets = self.entry.setdefault("offsets", {})
        for log in P.log_files(self.run_dir, self.params):
            points, end = P.new_points(log, offsets.get(log.filename, 0), start, self.params,
                                       final=final, limit=MAX_BYTES,
                                       every=P.summary_every(meta))
            if points:
                self.api.log_points(self.entry["run_id"], points)
                sent += len(points)
            if end != offsets.get(log.filename, 0):
                offsets[log.filename] = end
                R.save_entry(self.run_dir, self.uri, self.entry)
        return sent

    def _open(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The record's entry with the MLflow run id: the one it names (a resumed
        run continues its MLflow run), else the run found by its id or created."""
        if self.api is None:
            self.api = api_for(self.uri)
        entry = R.entry_of(self.run_dir, self.uri)
        if entry.get("run_id"):
            self.api.running(entry["run_id"])
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
    if not run_dir or not uri or not os.path.isfile(os.path.join(run_dir, schema.RUN_JSON)):
        return 2
    try:
        os.nice(10)  # the training comes first
    except OSError:
        pass
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow").setLevel(logging.ERROR)  # the run's terminal: one warning at most
    stream(run_dir, uri, poll_s=float(os.environ.get(ENV_POLL_S) or POLL_S),
           parent=os.environ.pop(ENV_PARENT, "") or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
