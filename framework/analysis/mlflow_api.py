"""The calls the MLflow bridge makes: MLflow's REST API straight for an http(s)
tracking server (:class:`Rest`: no mlflow import, which costs seconds of CPU),
``MlflowClient`` for any other store (:class:`Client`); :func:`connect` and
the URI checks of ``mindexp mlflow``. Used by the sync
(:mod:`.mlflow_export`), the live sender (:mod:`.mlflow_live`) and the
parents of sweeps and studies (:mod:`.mlflow_groups`), none of which it imports.
"""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..errors import MindexpError
from ..secrets import masked
from . import mlflow_points as P

TIMEOUT_S = 10.0         # of one request
BATCH = 1000             # MLflow's limit of metrics per log-batch
RUN_ID_TAG = "mindexp.run_id"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting: a sweep's or study's runs
_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")


class _Calls:
    """What :class:`Rest` and :class:`Client` share, in terms of their own calls."""

    def run_tagged(self, experiment: str, key: str, value: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> tuple[str, bool]:
        raise NotImplementedError

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        raise NotImplementedError

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


class Rest(_Calls):
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


class Client(_Calls):
    """The same calls through ``MlflowClient`` (a URI that is not http(s))."""

    def __init__(self, uri: str) -> None:
        self.client = connect(uri)

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


def check_uri(tracking_uri: str) -> str:
    """``tracking_uri`` when it looks like an MLflow tracking URI, else MindexpError."""
    scheme = str(tracking_uri).partition(":")[0].partition("+")[0].lower()
    if ":" not in str(tracking_uri) or scheme not in _SCHEMES:
        raise MindexpError(f"--tracking-uri must be an MLflow tracking URI such as "
                           f"http://127.0.0.1:5000 or sqlite:///mlflow.db. "
                           f"Received: {masked(str(tracking_uri))!r}")
    return str(tracking_uri)


def connect(tracking_uri):
    """An ``MlflowClient`` on a reachable ``tracking_uri``, else MindexpError."""
    scheme = check_uri(tracking_uri).partition(":")[0].partition("+")[0].lower()
    if scheme in ("http", "https"):  # before importing mlflow (seconds): fail fast
        _check_reachable(tracking_uri)
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise MindexpError("mindexp mlflow needs mlflow: pip install 'mindexp[mlflow]'") from None
    # MLflow prints a "View run" link when a run ends; the caller prints its own line
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    return MlflowClient(tracking_uri=tracking_uri)


def _check_reachable(uri):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=30) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        raise MindexpError(f"no MLflow tracking server answers at {masked(uri)} "
                           f"({type(exc).__name__}). Received: --tracking-uri {masked(uri)}"
                           ) from None
    if status != 200:
        raise MindexpError(f"{masked(uri)} is not an MLflow tracking server (/health answered "
                           f"{status}). Received: --tracking-uri {masked(uri)}")
