"""``mindexp mlflow``: copy runs into an MLflow tracking server.

Each mindexp run becomes one MLflow run: the config as params, every logged
row of loss.csv (loss, lr, loss components), grad_norm.csv, eval.csv
(``eval_<metric>``), params.csv (``param/<name>``, ``param/<name>/<i>``,
``param/<name>/<stat>``) and system.csv (``system/<column>``) as metrics at
their steps (``log_batch``), the tags, the note, the status and times, and as
artifacts the CSVs, plots/, figures/ and the best (else last) checkpoint.

Syncing again updates the same MLflow run and sends only the rows logged
since: the MLflow run carries the mindexp run id (tag ``mindexp.run_id``)
and how many rows of each log it holds (tags ``mindexp.rows.<log>``), and
run.json keeps the mapping (``mlflow``: tracking URI -> MLflow run id), the
URI with its password masked (:mod:`mindexp.secrets`), as every message
shows it; run.json is uploaded masked too (a record written before masking).
"""
from __future__ import annotations

import datetime as _dt
import os
import re
from typing import Any

from ..callbacks import schema
from ..errors import MindexpError
from ..secrets import masked
from ..rundir.record import update_meta
from .reports import as_runs

RUN_ID_TAG = "mindexp.run_id"
ROWS_TAG = "mindexp.rows."
BATCH = 1000          # MLflow's limit of metrics per log_batch call
META_KEY = "mlflow"   # run.json: {tracking_uri: mlflow run id}
# mindexp status -> MLflow's terminal status (a running run stays RUNNING)
STATUS = {"completed": "FINISHED", "failed": "FAILED", "diverged": "FAILED",
          "interrupted": "KILLED", "pruned": "KILLED"}
_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")


def to_mlflow(runs: Any, tracking_uri: str, experiment: str | None = None) -> list[dict[str, Any]]:
    """Copy ``runs`` (run directories, folders of runs, or Run objects) into the
    MLflow tracking server at ``tracking_uri``; returns one dict per run:
    ``run_dir``, ``mlflow_run_id``, ``points`` (metric points sent now).

    ``experiment``: the MLflow experiment (default: each run's experiment name).
    Raises MindexpError (one line) for a bad or unreachable tracking URI.
    """
    client = connect(tracking_uri)
    experiment_ids: dict[str, str] = {}  # one lookup per MLflow experiment, not per run
    return [_sync_run(client, tracking_uri, run, experiment, experiment_ids)
            for run in as_runs(runs)]


def connect(tracking_uri):
    """An ``MlflowClient`` on a reachable ``tracking_uri``, else MindexpError."""
    scheme = str(tracking_uri).partition(":")[0].partition("+")[0].lower()
    if ":" not in str(tracking_uri) or scheme not in _SCHEMES:
        raise MindexpError(f"--tracking-uri must be an MLflow tracking URI such as "
                           f"http://127.0.0.1:5000 or sqlite:///mlflow.db. "
                           f"Received: {masked(str(tracking_uri))!r}")
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


def _sync_run(client, uri, run, experiment, experiment_ids):
    name = experiment or run.meta.get("experiment") or "mindexp"
    if name not in experiment_ids:
        found = client.get_experiment_by_name(name)
        experiment_ids[name] = found.experiment_id if found else client.create_experiment(name)
    mlflow_run = _find_or_create(client, run, experiment_ids[name])
    sent = {k[len(ROWS_TAG):]: int(v) for k, v in mlflow_run.data.tags.items()
            if k.startswith(ROWS_TAG)}
    run_id = mlflow_run.info.run_id
    if not mlflow_run.data.params:
        _log_params(client, run_id, run.config)
    points = 0
    for name in ("loss", "grad_norm", "eval", "params", "system"):
        points += _send_log(client, run_id, run, name, sent)
    client.log_batch(run_id, tags=_tags(run, sent))
    _log_artifacts(client, run_id, run)
    _set_status(client, run_id, run.meta)
    _remember(run.dir, masked(uri), run_id)
    return {"run_dir": run.dir, "mlflow_run_id": run_id, "points": points}


def _find_or_create(client, run, experiment_id):
    runs = client.search_runs([experiment_id],
                              filter_string=f"tags.`{RUN_ID_TAG}` = '{run.run_id}'", max_results=1)
    if runs:
        return runs[0]
    return client.create_run(experiment_id, start_time=_ms(run.meta.get("started_at")),
                             run_name=run.run_id, tags={RUN_ID_TAG: run.run_id})


def _log_params(client, run_id, config):
    from mlflow.entities import Param
    params = [Param(k, str(v)[:6000]) for k, v in sorted(config.items())]
    for i in range(0, len(params), 100):  # MLflow's limit of params per call
        client.log_batch(run_id, params=params[i:i + 100])


def _send_log(client, run_id, run, name, sent):
    """Send the rows of log ``name`` after the ``sent[name]`` already sent; returns the points."""
    from mlflow.entities import Metric
    table = _read(run, name)
    done = sent.get(name, 0)
    if table is None or len(table) <= done:
        sent[name] = max(done, 0 if table is None else len(table))
        return 0
    start = _ms(run.meta.get("started_at"))
    metrics = [Metric(key, value, start + int(1000 * seconds), step)
               for key, value, step, seconds in _points(name, table.iloc[done:])]
    for i in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[i:i + BATCH])
    sent[name] = len(table)
    # at once: a sync cut short later does not send these rows again
    client.set_tag(run_id, f"{ROWS_TAG}{name}", str(len(table)))
    return len(metrics)


def _read(run, name):
    if not os.path.isfile(schema.path_of(run.dir, name)):
        return None
    return run.read(name)


def _points(name, table):
    """``(key, value, step, seconds)`` of each number in the rows of log ``name``."""
    import math
    col = schema.Col
    steps = table[col.STEP].astype(int).tolist()
    seconds = table[col.TIME_S].fillna(0).tolist() if col.TIME_S in table.columns \
        else [0.0] * len(table)
    if name == schema.PARAMS.name:
        keys = [_param_key(p) for p in table[col.PARAM]]
        columns = [(keys, table[col.VALUE].tolist())]
    else:
        skip = {col.STEP, col.EPOCH, col.TIME_S}
        columns = [([_metric_key(name, c)] * len(table), table[c].tolist())
                   for c in table.columns if c not in skip]
    for keys, values in columns:
        for key, value, step, s in zip(keys, values, steps, seconds):
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                yield key, float(value), step, float(s)


def _metric_key(log, column):
    if log == "eval":
        from ..rundir.summary import eval_name
        return eval_name(column)
    return f"system/{column}" if log == "system" else column


def _param_key(param):
    """``w`` -> ``param/w``, ``w[3]`` -> ``param/w/3``, ``w:norm`` -> ``param/w/norm``."""
    key = "param/" + str(param).replace("[", "/").replace("]", "").replace(":", "/")
    return _BAD_KEY.sub("_", key)


def _tags(run, sent):
    from mlflow.entities import RunTag
    meta = run.meta
    tags = {RUN_ID_TAG: run.run_id, "mindexp.experiment": str(meta.get("experiment")),
            "mindexp.status": str(meta.get("status")),
            "mindexp.tags": ",".join(meta.get("tags") or []),
            "mlflow.note.content": meta.get("note") or "",
            **{f"{ROWS_TAG}{k}": str(v) for k, v in sent.items()}}
    tags.update({f"tag.{t}": "true" for t in meta.get("tags") or []})
    return [RunTag(k, v) for k, v in tags.items()]


def _log_artifacts(client, run_id, run):
    """The CSVs, config and run record, plots/, figures/ and the best (else last) checkpoint.

    The few top-level files always go again (they change while a run runs);
    a file of plots/, figures/ or checkpoints/ already stored with its size
    is not sent again, so a re-sync of a long run does not upload every
    epoch's figures and a checkpoint once more."""
    for name in [log.filename for log in schema.LOGS.values()] + [schema.CONFIG_JSON]:
        path = os.path.join(run.dir, name)
        if os.path.isfile(path):
            client.log_artifact(run_id, path)
    _log_run_json(client, run_id, run)
    stored = _stored_sizes(client, run_id)
    for path, folder in _folder_files(run):
        try:
            size = os.path.getsize(path)
        except OSError:  # replaced meanwhile by a running run's atomic write
            continue
        if stored.get(f"{folder}/{os.path.basename(path)}") != size:
            client.log_artifact(run_id, path, artifact_path=folder)


def _log_run_json(client, run_id, run):
    """run.json with any URL password masked: a run recorded before masking kept
    its worker's command line, storage URL included."""
    path = os.path.join(run.dir, schema.RUN_JSON)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:  # no run.json (or replaced meanwhile): nothing to send
        return
    client.log_text(run_id, masked(text), schema.RUN_JSON)


def _folder_files(run):
    """``(local path, artifact folder)`` of each file of plots/ and figures/ (with their
    sub-folders) and of the best (else last) checkpoint."""
    for top in (schema.PLOTS_DIR, schema.FIGURES_DIR):
        for root, _dirs, files in os.walk(os.path.join(run.dir, top)):
            folder = os.path.relpath(root, run.dir).replace(os.sep, "/")
            yield from ((os.path.join(root, f), folder) for f in sorted(files))
    checkpoint = model_checkpoint(run)
    if checkpoint:
        yield checkpoint, schema.CHECKPOINT_DIR


def model_checkpoint(run):
    """The checkpoint uploaded as the run's model: the one ``evaluate --checkpoint
    best`` uses, else (no best kept) the last; None when the run has none."""
    from ..callbacks import list_checkpoints
    return run.checkpoint(best=bool(list_checkpoints(run.dir, "best"))) or run.checkpoint()


def _stored_sizes(client, run_id):
    """``{artifact path: size}`` of the files the MLflow run holds under plots/,
    figures/ and checkpoints/ (one listing per folder)."""
    sizes, folders = {}, [schema.PLOTS_DIR, schema.FIGURES_DIR, schema.CHECKPOINT_DIR]
    stored = {info.path for info in client.list_artifacts(run_id)}
    folders = [f for f in folders if f in stored]
    while folders:
        for info in client.list_artifacts(run_id, folders.pop()):
            if info.is_dir:
                folders.append(info.path)
            else:
                sizes[info.path] = info.file_size
    return sizes


def _set_status(client, run_id, meta):
    status = STATUS.get(meta.get("status"))
    if status:
        client.set_terminated(run_id, status=status, end_time=_ms(meta.get("ended_at")))


def _remember(run_dir, uri, run_id):
    """Keep ``{tracking_uri: mlflow run id}`` in run.json (best effort)."""
    def change(meta):
        meta[META_KEY] = {**(meta.get(META_KEY) or {}), uri: run_id}
    try:
        update_meta(run_dir, change)
    except MindexpError:
        pass  # the MLflow run's own tag finds it again


def _ms(iso):
    """Milliseconds since the epoch of an ISO time (now when absent)."""
    try:
        when = _dt.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        when = _dt.datetime.now(_dt.timezone.utc)
    return int(when.timestamp() * 1000)
