"""The calls the MLflow bridge makes: MLflow's REST API straight for an http(s)
tracking server (:class:`Rest`: no mlflow import, which costs seconds of CPU;
artifacts through the server's artifact proxy; retries on 429 and 5xx with a
growing pause), ``MlflowClient`` for any other store (:class:`Client`);
:func:`api_for`, :func:`connect` and the URI checks of ``mindexp mlflow``, and
what keeps MLflow's own output off the terminal (:data:`QUIET_SWITCHES`,
:func:`quiet_mlflow`, :func:`drop_type_hint_note`). Used
by the sync (:mod:`.mlflow_export`), the live sender (:mod:`.mlflow_live`) and
the parents of sweeps and studies (:mod:`.mlflow_groups`), none of which it
imports.

Credentials come from MLflow's own variables (``MLFLOW_TRACKING_TOKEN``, else
``MLFLOW_TRACKING_USERNAME`` and ``_PASSWORD``) and go only into a request's
Authorization header: never into a message, a record or a command line.
"""
from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Iterator, NamedTuple

from ..errors import MindexpError
from ..secrets import masked
from . import mlflow_points as P

TIMEOUT_S = 10.0         # of one request of the live sender (its next pass tries again)
SYNC_TIMEOUT_S = 120.0   # of one request of `mindexp mlflow` (MLflow's own default): a busy
                         # server queues the calls of the runs in flight
BATCH = 1000             # MLflow's limit of metrics (and of all entries) per log-batch
PARAMS_BATCH = 100       # MLflow's limit of params, and of tags, per log-batch
# An http(s) sync sends this many runs at once: the server works on one while we read
# and encode another. The 12 runs of benchmarks/mlflow_sync.py --twelve at a load of
# 8-10, two tries each: 1 worker 32.5 and 57.1 s, 4 workers 25.5 and 32.1 s, 8 workers
# 28.7 and 25.8 s (one server worker is the bottleneck beyond a few)
WORKERS = 4
RETRY_CODES = (429, 500, 502, 503, 504)  # a busy or restarting server: try again
RETRIES = 5              # tries after the first
BACKOFF_S = 0.5          # the first pause; it doubles each time
MAX_PAUSE_S = 30.0       # the longest pause, whatever Retry-After asks
RUN_ID_TAG = "mindexp.run_id"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting: a sweep's or study's runs
_JSON_VALUE = "value"     # of MLflow's JSON pairs (not a log's column)
_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")


class RunInfo(NamedTuple):
    """What the sync reads of an MLflow run."""

    run_id: str
    experiment_id: str
    artifact_uri: str
    active: bool                  # not deleted
    params: dict[str, str]
    tags: dict[str, str]


class _Calls:
    """What :class:`Rest` and :class:`Client` share, in terms of their own calls."""

    workers = 1  # runs a sync sends at once through one of these

    def __init__(self) -> None:
        self._experiments: dict[str, str] = {}
        self._experiments_lock = threading.Lock()

    def run_tagged(self, experiment: str, key: str, value: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> tuple[str, bool]:
        """``(MLflow run id, created)``: the run of ``experiment`` whose tag ``key``
        is ``value``, else a new one named ``name`` with ``tags``."""
        experiment_id = self.experiment_id(experiment)
        found = self.find_run(experiment_id, key, value)
        if found:
            return found.run_id, False
        return self.create_run(experiment_id, name, start_ms, tags).run_id, True

    def experiment_id(self, name: str) -> str:
        """The id of the MLflow experiment ``name``, made when missing (one lookup
        per name; one thread at a time, so two runs never both create it)."""
        with self._experiments_lock:
            if name not in self._experiments:
                self._experiments[name] = self._lookup_experiment(name)
            return self._experiments[name]

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

    # -- each transport's own -------------------------------------------------------
    def _lookup_experiment(self, name: str) -> str:
        raise NotImplementedError

    def find_run(self, experiment_id: str, key: str, value: str) -> RunInfo | None:
        """The run of ``experiment_id`` whose tag ``key`` is ``value``, else None."""
        raise NotImplementedError

    def create_run(self, experiment_id: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> RunInfo:
        """A new run of ``experiment_id`` named ``name`` with ``tags``."""
        raise NotImplementedError

    def get_run(self, run_id: str) -> RunInfo | None:
        """The run ``run_id``, None when this server has no such run."""
        raise NotImplementedError

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        """Params, tags and metrics (at step 0), in as many calls as MLflow's limits need."""
        raise NotImplementedError

    def log_points(self, run_id: str, points: list[P.Point]) -> None:
        """Send ``points`` in batches of :data:`BATCH`."""
        raise NotImplementedError

    def delete_tag(self, run_id: str, key: str) -> None:
        """Remove the tag ``key`` of the run."""
        raise NotImplementedError

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        """The run's MLflow status (RUNNING, or FINISHED/FAILED/KILLED at ``end_ms``)."""
        raise NotImplementedError

    def log_artifact(self, run: RunInfo, path: str, folder: str | None = None) -> None:
        """Upload the file ``path`` into the run's artifacts (under ``folder``)."""
        raise NotImplementedError

    def log_text(self, run: RunInfo, text: str, name: str) -> None:
        """Upload ``text`` as the artifact ``name``."""
        raise NotImplementedError


class Rest(_Calls):
    """The calls of MLflow's REST API the bridge needs (an http(s) server), with
    retries (:data:`RETRY_CODES`, up to :data:`RETRIES` times, the pause doubling
    from :data:`BACKOFF_S` or what the server's Retry-After asks)."""

    workers = WORKERS

    def __init__(self, uri: str, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        parts = urllib.parse.urlsplit(uri)
        self.base = urllib.parse.urlunsplit(
            (parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""),
             parts.path.rstrip("/"), "", ""))
        self.headers = {"Content-Type": "application/json", **_auth(parts)}
        self._fallback: Client | None = None  # artifacts of a store the server does not proxy
        self._fallback_lock = threading.Lock()
        self.uri = uri

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict:
        """The JSON answer of ``method /api/2.0/mlflow/<path>``; raises on an error."""
        url = f"{self.base}/api/2.0/mlflow/{path}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        return json.loads(self._send(method, url, data, self.headers) or b"{}")

    def _send(self, method: str, url: str, data: bytes | str | None,
              headers: dict[str, str]) -> bytes:
        """The answer's body; ``data`` bytes, or a file's path (read again at each try)."""
        for attempt in range(RETRIES + 1):
            try:
                return _request(method, url, data, headers, self.timeout_s)
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_CODES or attempt == RETRIES:
                    raise
                pause = _retry_after(exc) or BACKOFF_S * 2 ** attempt
            except (ConnectionResetError, http.client.RemoteDisconnected):
                if attempt == RETRIES:  # the server dropped the connection (overloaded)
                    raise
                pause = BACKOFF_S * 2 ** attempt
            time.sleep(min(pause, MAX_PAUSE_S))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _lookup_experiment(self, name: str) -> str:
        try:
            return self.call("GET", "experiments/get-by-name",
                             {"experiment_name": name})["experiment"]["experiment_id"]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        return self.call("POST", "experiments/create", {"name": name})["experiment_id"]

    def find_run(self, experiment_id: str, key: str, value: str) -> RunInfo | None:
        found = self.call("POST", "runs/search", {
            "experiment_ids": [experiment_id], "max_results": 1,
            "filter": f"tags.`{key}` = '{value}'"}).get("runs") or []
        return _rest_run(found[0]) if found else None

    def create_run(self, experiment_id: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> RunInfo:
        made = self.call("POST", "runs/create", {
            "experiment_id": experiment_id, "start_time": start_ms, "run_name": name,
            "tags": _pairs(tags)})
        return _rest_run(made["run"])

    def get_run(self, run_id: str) -> RunInfo | None:
        try:
            return _rest_run(self.call("GET", "runs/get", {"run_id": run_id})["run"])
        except urllib.error.HTTPError as exc:
            if exc.code in (400, 404):  # no such run here (MLflow: RESOURCE_DOES_NOT_EXIST)
                return None
            raise

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        params_, tags_ = _pairs(params or {}), _pairs(tags or {})
        for i in range(0, max(len(params_), len(tags_)), PARAMS_BATCH):
            self.call("POST", "runs/log-batch", {
                "run_id": run_id, "params": params_[i:i + PARAMS_BATCH],
                "tags": tags_[i:i + PARAMS_BATCH]})
        self.log_points(run_id, [P.Point(k, v, timestamp, 0) for k, v in (metrics or {}).items()])

    def log_points(self, run_id: str, points: list[P.Point]) -> None:
        for i in range(0, len(points), BATCH):
            self.call("POST", "runs/log-batch", {"run_id": run_id, "metrics": [
                {"key": p.key, "value": p.value, "timestamp": p.timestamp, "step": p.step}
                for p in points[i:i + BATCH]]})

    def delete_tag(self, run_id: str, key: str) -> None:
        self.call("POST", "runs/delete-tag", {"run_id": run_id, "key": key})

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        body: dict[str, Any] = {"run_id": run_id, "run_uuid": run_id, "status": status}
        if status != "RUNNING" and end_ms:
            body["end_time"] = end_ms
        self.call("POST", "runs/update", body)

    def log_artifact(self, run: RunInfo, path: str, folder: str | None = None) -> None:
        url = self._artifact_url(run, "/".join(filter(None, [folder, os.path.basename(path)])))
        if url is None:
            self._client().log_artifact(run, path, folder)
        else:
            self._send("PUT", url, path, self._upload_headers())

    def log_text(self, run: RunInfo, text: str, name: str) -> None:
        url = self._artifact_url(run, name)
        if url is None:
            self._client().log_text(run, text, name)
        else:
            self._send("PUT", url, text.encode("utf-8"), self._upload_headers())

    def _artifact_url(self, run: RunInfo, name: str) -> str | None:
        """The server's artifact proxy URL of ``name`` in the run's artifacts; None when
        the run's artifacts are not proxied (``mlflow server --no-serve-artifacts``)."""
        where = urllib.parse.urlsplit(run.artifact_uri)
        if where.scheme != "mlflow-artifacts" or where.netloc:
            return None
        path = urllib.parse.quote(f"{where.path.strip('/')}/{name}")
        return f"{self.base}/api/2.0/mlflow-artifacts/artifacts/{path}"

    def _upload_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": "application/octet-stream"}

    def _client(self) -> Client:
        """MlflowClient for a store the server does not proxy (imports mlflow once)."""
        with self._fallback_lock:
            if self._fallback is None:
                self._fallback = Client(self.uri)
            return self._fallback


def _request(method: str, url: str, data: bytes | str | None, headers: dict[str, str],
             timeout_s: float) -> bytes:
    """One request; ``data`` a file's path is streamed from the file."""
    with contextlib.ExitStack() as stack:
        body: Any = data
        if isinstance(data, str):
            body = stack.enter_context(open(data, "rb"))
            headers = {**headers, "Content-Length": str(os.fstat(body.fileno()).st_size)}
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.read()


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """The pause a 429 or 503 asks for in seconds (Retry-After), else None."""
    try:
        return float(exc.headers.get("Retry-After") or "")
    except (TypeError, ValueError):
        return None


def _pairs(mapping: dict[str, str]) -> list[dict[str, str]]:
    """MLflow's JSON of params or tags: ``[{"key": ..., "value": ...}]``."""
    return [{"key": k, "value": v} for k, v in mapping.items()]


def _unpairs(items: list[dict[str, str]] | None) -> dict[str, str]:
    """``{key: value}`` of MLflow's JSON params or tags (a missing value: empty)."""
    return {item["key"]: item.get(_JSON_VALUE, "") for item in items or []}


def _rest_run(run: dict[str, Any]) -> RunInfo:
    info, data = run.get("info") or {}, run.get("data") or {}
    return RunInfo(info["run_id"], str(info.get("experiment_id")), info.get("artifact_uri") or "",
                   info.get("lifecycle_stage", "active") == "active",
                   _unpairs(data.get("params")), _unpairs(data.get("tags")))


class Client(_Calls):
    """The same calls through ``MlflowClient`` (a URI that is not http(s)); one run
    at a time (a SQLite store locks under writers)."""

    def __init__(self, uri: str) -> None:
        super().__init__()
        self.client = connect(uri)

    def _lookup_experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found else self.client.create_experiment(name)

    def find_run(self, experiment_id: str, key: str, value: str) -> RunInfo | None:
        runs = self.client.search_runs([experiment_id], filter_string=f"tags.`{key}` = '{value}'",
                                       max_results=1)
        return _client_run(runs[0]) if runs else None

    def create_run(self, experiment_id: str, name: str, start_ms: int,
                   tags: dict[str, str]) -> RunInfo:
        return _client_run(self.client.create_run(experiment_id, start_time=start_ms,
                                                  run_name=name, tags=tags))

    def get_run(self, run_id: str) -> RunInfo | None:
        try:
            return _client_run(self.client.get_run(run_id))
        except Exception:  # MlflowException: no such run on this server
            return None

    def log_batch(self, run_id: str, params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None,
                  metrics: dict[str, float] | None = None, timestamp: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag
        # MlflowClient sends them in as many calls as MLflow's limits need
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in (params or {}).items()],
                              tags=[RunTag(k, v) for k, v in (tags or {}).items()],
                              metrics=[Metric(k, v, timestamp, 0)
                                       for k, v in (metrics or {}).items()])

    def log_points(self, run_id: str, points: list[P.Point]) -> None:
        from mlflow.entities import Metric
        self.client.log_batch(run_id, metrics=[Metric(*p) for p in points])

    def delete_tag(self, run_id: str, key: str) -> None:
        self.client.delete_tag(run_id, key)

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        if status == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status, end_time=end_ms)

    def log_artifact(self, run: RunInfo, path: str, folder: str | None = None) -> None:
        self.client.log_artifact(run.run_id, path, artifact_path=folder)

    def log_text(self, run: RunInfo, text: str, name: str) -> None:
        self.client.log_text(run.run_id, text, name)


def _client_run(run: Any) -> RunInfo:
    return RunInfo(run.info.run_id, str(run.info.experiment_id), run.info.artifact_uri or "",
                   run.info.lifecycle_stage == "active", dict(run.data.params),
                   dict(run.data.tags))


def api_for(uri: str) -> Rest | Client:
    """MLflow's REST API for an http(s) server (no mlflow import), else ``MlflowClient``."""
    return Rest(uri) if uri.lower().startswith(("http:", "https:")) else Client(uri)


def _auth(parts: urllib.parse.SplitResult) -> dict[str, str]:
    """The Authorization header from MLflow's own variables (a token first), else
    from the URI's ``user:password@``."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    from_uri = _credentials(parts)
    user = os.environ.get(_USER) or from_uri.get(_USER)
    password = os.environ.get(_PASSWORD) or from_uri.get(_PASSWORD) or ""
    if not user:
        return {}
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


_USER, _PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def _credentials(parts: urllib.parse.SplitResult) -> dict[str, str]:
    """MLflow's variables for the ``user:password@`` of an http(s) URI (decoded), or {}."""
    if parts.scheme.lower() not in ("http", "https") or parts.username is None:
        return {}
    return {_USER: urllib.parse.unquote(parts.username),
            _PASSWORD: urllib.parse.unquote(parts.password or "")}


def plain_uri(uri: str) -> str:
    """An http(s) ``uri`` without its ``user:password@`` (urllib cannot open a URL
    holding one; MLflow takes them from its variables); any other URI as it is."""
    parts = urllib.parse.urlsplit(uri)
    if not _credentials(parts):
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@contextlib.contextmanager
def uri_credentials(uri: str) -> Iterator[str]:
    """Inside the block MLflow's MLFLOW_TRACKING_USERNAME/_PASSWORD hold the
    credentials of ``uri``'s ``user:password@`` (where the user set none; put
    back after); yields the URI without them, for ``mlflow.set_tracking_uri``."""
    with _env_defaults(_credentials(urllib.parse.urlsplit(uri))):
        yield plain_uri(uri)


@contextlib.contextmanager
def _env_defaults(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment for the block where the user set none."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def check_uri(tracking_uri: str) -> str:
    """``tracking_uri`` when it looks like an MLflow tracking URI, else MindexpError."""
    scheme = str(tracking_uri).partition(":")[0].partition("+")[0].lower()
    if ":" not in str(tracking_uri) or scheme not in _SCHEMES:
        raise MindexpError(f"--tracking-uri must be an MLflow tracking URI such as "
                           f"http://127.0.0.1:5000 or sqlite:///mlflow.db. "
                           f"Received: {masked(str(tracking_uri))!r}")
    return str(tracking_uri)


# MLflow's own switches for what it prints itself: its artifact progress bars and, when a
# run ends, the run's and the experiment's URLs (stdout). mindexp says one line per run.
QUIET_SWITCHES = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                  "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
# MLflow's loggers raised while a model is logged: pyfunc's note on CloudPickle (RunModel
# holds no object of the user's), the registry's "waiting for the version" (its own two
# lines say what was registered)
_QUIET_LEVELS = {"mlflow.pyfunc": logging.ERROR, "mlflow.store.model_registry": logging.WARNING}


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """Inside the block MLflow prints no progress bar, no run URL and no INFO line
    of logging a model: its switches set where the user set none, its loggers'
    levels raised; both as they were after the block."""
    loggers = [(logging.getLogger(name), level) for name, level in _QUIET_LEVELS.items()]
    before = [log.level for log, _ in loggers]
    for log, level in loggers:
        if log.getEffectiveLevel() < level:
            log.setLevel(level)
    try:
        with _env_defaults(QUIET_SWITCHES):
            yield
    finally:
        for (log, _), level in zip(loggers, before):
            log.setLevel(level)


def drop_type_hint_note(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that drops MLflow's note that a PythonModel's
    ``predict`` has no type hints (mindexp's has none on purpose: MLflow would
    read them as an input schema) and shows every other warning with ``show``.
    A filter cannot drop it: MLflow shows its UserWarnings under a filter of its
    own ("once"), put in front of the caller's."""
    def showwarning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if "Add type hints to the `predict` method" not in str(message):
            show(message, category, *args, **kwargs)
    return showwarning


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
    health = urllib.request.Request(plain_uri(uri).rstrip("/") + "/health",
                                    headers=_auth(urllib.parse.urlsplit(uri)))
    try:
        with urllib.request.urlopen(health, timeout=30) as answer:
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
