"""``mindexp mlflow``: copy runs into an MLflow tracking server.

Each mindexp run becomes one MLflow run: the config as params, the points of
its logs (:mod:`mindexp.analysis.mlflow_points`: loss.csv, grad_norm.csv,
eval.csv, params.csv as chosen by ``params``, system.csv, and every rank's
own files under ``rank<N>/``) at their steps (``log_batch``), the tags, the
note, the source file and git commit (``mlflow.source.*``, from run.json's
provenance), the status (a run whose process is gone: KILLED) and times,
and as artifacts the CSVs (each rank's too), plots/, figures/ and the best
(else last) checkpoint.

A sweep's or a tune study's folder becomes a parent run whose children are
its runs (:mod:`.mlflow_groups`).

Syncing again updates the same MLflow run and sends only what is new: the
run folder's local record (:mod:`mindexp.analysis.mlflow_record`, never a
password) keeps the MLflow run id and how far each log was sent, so the
MLflow run's Tags panel holds only the user's tags; a sync with nothing new
answers from that record without importing mlflow, pandas or numpy. An
http(s) server gets the runs over MLflow's REST API, several at once
(:mod:`.mlflow_api`: retries, artifacts through the server's proxy), and
mlflow is imported only to log a model. run.json keeps the
mapping (``mlflow``: tracking URI -> MLflow run id), the URI with its
password masked (:mod:`mindexp.secrets`); run.json is uploaded masked too.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..callbacks import schema
from .. import layout
from ..errors import MindexpError
from ..provenance.files import provenance_of
from ..secrets import masked
from ..rundir.mlflow_names import META_KEY  # run.json: {tracking_uri: mlflow run id}
from ..rundir.record import update_meta
from . import mlflow_points as P
from . import mlflow_record as R
from .mlflow_api import RUN_ID_TAG, SYNC_TIMEOUT_S, Client, Rest, _Calls, _check_reachable, \
    check_uri, quiet_mlflow, uri_credentials
from ..rundir.run import Run
from .reports import as_runs

LEGACY_ROWS_TAG = "mindexp.rows."  # bookkeeping tags of syncs before the local record
# mlflow's fluent API (a model is logged into "the active run") is one per process
_MODEL_LOCK = threading.Lock()


def to_mlflow(runs: Any, tracking_uri: str, experiment: str | None = None,
              params: str = P.DEFAULT_PARAMS, register: str | None = None) -> list[dict[str, Any]]:
    """Copy ``runs`` (run directories, folders of runs, or Run objects) into the
    MLflow tracking server at ``tracking_uri``; returns one dict per run:
    ``run_dir``, ``mlflow_run_id``, ``points`` (metric points sent now).

    ``experiment``: the MLflow experiment (default: each run's experiment name).
    ``params``: which points of params.csv go (``none``, ``summary``: each
    parameter's norm, mean and std, or ``all``: every row). A finished run's
    best (else last) checkpoint is logged as the MLflow model ``model``
    (:mod:`mindexp.analysis.mlflow_model`), registered in the Model Registry
    as ``register`` when given. A sweep's or a tune study's folder among
    ``runs`` is one parent run whose children are its runs
    (:mod:`mindexp.analysis.mlflow_groups`).

    An http(s) server is sent to through MLflow's REST API, several runs at once
    (:data:`mindexp.analysis.mlflow_api.WORKERS`), without importing mlflow unless
    a model is logged; any other URI through ``MlflowClient``, one run at a time.
    Raises MindexpError (one line) for a bad or unreachable tracking URI, or when
    the server refuses a call.
    """
    check_uri(tracking_uri)
    check_params(params)
    parents = _parents(runs, tracking_uri, experiment)
    done: dict[int, dict[str, Any]] = {}
    todo = []
    for i, run in enumerate(as_runs(runs, read=_records)):
        parent = parents.get(run.dir)
        entry = R.entry_of(run.dir, tracking_uri)
        if R.unchanged(run.dir, tracking_uri, params, run.meta) and \
                register in (None, entry.get("registered")) and \
                parent in (None, entry.get("parent")):
            done[i] = {"run_dir": run.dir, "mlflow_run_id": entry["run_id"], "points": 0}
        else:
            todo.append((i, run, parent))
    if todo:
        api = _api(tracking_uri)
        with ThreadPoolExecutor(min(api.workers, len(todo))) as pool:
            futures = {i: pool.submit(_sync_guarded, api, tracking_uri, run, experiment, params,
                                      register, parent) for i, run, parent in todo}
        done.update({i: future.result() for i, future in futures.items()})
    return [done[i] for i in sorted(done)]


def _records(run: Any) -> Run:
    """``run`` with run.json and config.json read (its logs are read as points, by
    :mod:`.mlflow_points`: no pandas, no numpy)."""
    run.meta, run.config  # noqa: B018  (cached: a broken JSON is skipped here)
    return run


def _api(uri: str) -> _Calls:
    """The calls for ``uri``: REST for a reachable http(s) server, else MlflowClient."""
    if uri.lower().startswith(("http:", "https:")):
        _check_reachable(uri)
        return Rest(uri, SYNC_TIMEOUT_S)
    return Client(uri)


def _sync_guarded(api, uri, run, experiment, params, register, parent):
    """:func:`_sync_run`; a call the server refused (after its retries) is one line."""
    try:
        return _sync_run(api, uri, run, experiment, params, register, parent)
    except urllib.error.HTTPError as exc:
        why = masked(" ".join(_error_text(exc).split())[:300])
        raise MindexpError(f"MLflow at {masked(uri)} refused {exc.code} while sending "
                           f"{run.dir}: {why}") from None
    except OSError as exc:  # refused, reset or timed out (urllib's URLError among them)
        why = masked(str(getattr(exc, "reason", None) or exc or type(exc).__name__))
        raise MindexpError(f"MLflow at {masked(uri)} stopped answering while sending "
                           f"{run.dir} ({why})") from None


def _error_text(exc):
    """The server's message of an HTTP error (MLflow answers JSON with a ``message``)."""
    try:
        body = exc.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001  the body is only for the message
        return str(exc)
    try:
        return str(json.loads(body).get("message") or body)
    except (ValueError, AttributeError):
        return body or str(exc)


def _parents(runs: Any, uri: str, experiment: str | None) -> dict[str, str]:
    """``{run folder: MLflow run id of its parent}`` for the runs of each sweep or
    study folder among ``runs`` (:mod:`.mlflow_groups`: the parents brought up to date)."""
    from ..rundir.groups import group_kind
    from .mlflow_groups import known_parent
    items = [runs] if isinstance(runs, (str, os.PathLike)) else \
        [] if not isinstance(runs, (list, tuple)) else runs
    found: dict[str, str] = {}
    for folder in [os.fspath(i) for i in items if isinstance(i, (str, os.PathLike))]:
        # a folder with its own run.json is a run, never a group
        if group_kind(folder) and not os.path.isfile(os.path.join(folder, layout.RUN_JSON)):
            parent = known_parent(folder, uri) or _sync_parent(folder, uri, experiment)
            found.update({run.dir: parent for run in as_runs(folder, read=_records)})
    return found


def _sync_parent(folder, uri, experiment):
    from .mlflow_groups import sync_parent
    if check_uri(uri).lower().startswith(("http:", "https:")):
        _check_reachable(uri)
    try:
        return sync_parent(folder, uri, experiment)
    except MindexpError:
        raise
    except Exception as exc:  # the server refused: one line
        why = masked(" ".join(str(exc).split())[:300])
        raise MindexpError(f"MLflow at {masked(uri)} refused the parent run of {folder} "
                           f"({type(exc).__name__}: {why})") from None


def check_params(params: str) -> str:
    """``params`` when it is one of :data:`.mlflow_points.PARAMS_CHOICES`, else MindexpError (one line)."""
    if params not in P.PARAMS_CHOICES:
        raise MindexpError(f"--params must be one of {', '.join(P.PARAMS_CHOICES)}. "
                           f"Received: {params!r}")
    return params


def _sync_run(api, uri, run, experiment, params, register, parent):
    entry = R.entry_of(run.dir, uri)
    mlflow_run = _known_run(api, entry.get("run_id")) or _find_or_create(api, run, experiment)
    run_id = mlflow_run.run_id
    if entry.get("run_id") != run_id:  # another MLflow run (or none) before: start over
        entry = {"run_id": run_id, "offsets": _legacy_offsets(run.dir, mlflow_run)}
    entry["params"] = params
    R.save_entry(run.dir, uri, entry)
    if not mlflow_run.params:
        api.log_batch(run_id, params={k: str(v)[:6000] for k, v in sorted(run.config.items())})
    points = R.send_logs(api, run.dir, uri, entry, run.meta)
    api.log_batch(run_id, tags=_tags(run, parent))
    if parent:
        entry["parent"] = parent
    for key in [k for k in mlflow_run.tags if k.startswith(LEGACY_ROWS_TAG)]:
        api.delete_tag(run_id, key)
    entry["artifacts"] = _log_artifacts(api, mlflow_run, run, entry.get("artifacts") or {})
    _log_model(uri, run_id, run, entry, register)
    entry["status"] = _set_status(api, run_id, run)
    _remember(run.dir, masked(uri), run_id)
    entry["fingerprint"] = R.fingerprint(run.dir)  # last: _remember may rewrite run.json
    R.save_entry(run.dir, uri, entry)
    return {"run_dir": run.dir, "mlflow_run_id": run_id, "points": points}


def _known_run(api, run_id):
    """The MLflow run the local record names, or None (none, or deleted since)."""
    found = api.get_run(run_id) if run_id else None
    return found if found and found.active else None


def _find_or_create(api, run, experiment):
    experiment_id = api.experiment_id(experiment or run.meta.get("experiment") or "mindexp")
    return api.find_run(experiment_id, RUN_ID_TAG, run.run_id) or api.create_run(
        experiment_id, run.run_id, P.start_ms(run.meta), {RUN_ID_TAG: run.run_id})


def _legacy_offsets(run_dir, mlflow_run):
    """Offsets from the ``mindexp.rows.<log>`` tags a sync before the local record
    left (rank 0's files); ``{}`` for a new MLflow run."""
    offsets = {}
    for key, value in mlflow_run.tags.items():
        if key.startswith(LEGACY_ROWS_TAG) and key[len(LEGACY_ROWS_TAG):] in schema.LOGS:
            path = schema.path_of(run_dir, key[len(LEGACY_ROWS_TAG):])
            _header, lines = P.read_lines(path, 0)
            rows = min(int(value), len(lines))
            if rows:
                offsets[os.path.basename(path)] = lines[rows - 1][0]
    return offsets


def _tags(run, parent=None):
    meta = run.meta
    tags = {RUN_ID_TAG: run.run_id, "mindexp.experiment": str(meta.get("experiment")),
            "mindexp.status": str(meta.get("status")),
            "mindexp.tags": ",".join(meta.get("tags") or []),
            "mlflow.note.content": meta.get("note") or "", **source_tags(meta)}
    tags.update({f"tag.{t}": "true" for t in meta.get("tags") or []})
    if parent:  # MLflow's own nesting under the sweep's or study's run
        tags["mlflow.parentRunId"] = parent
    return tags


def source_tags(meta: dict[str, Any]) -> dict[str, str]:
    """MLflow's own source tags (its UI's Source and git commit) from run.json's
    provenance: the experiment's file (else its entry) and the git commit."""
    block = provenance_of(meta)
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    git = block.get("git") if isinstance(block.get("git"), dict) else {}
    name = source.get("origin") or meta.get("entry")
    tags = {"mlflow.source.type": "LOCAL", "mlflow.source.name": name and masked(str(name)),
            "mlflow.source.git.commit": git.get("commit") and str(git["commit"]),
            "mlflow.source.git.branch": git.get("branch") and str(git["branch"])}
    return {key: value for key, value in tags.items() if value}


def _log_artifacts(api, mlflow_run, run, sent):
    """The logs (each rank's), config and run record, plots/, figures/ and the best
    (else last) checkpoint; returns ``{artifact path: size}`` of the folders' files sent.

    The few top-level files always go again (they change while a run runs);
    a file of plots/, figures/ or checkpoints/ already sent with its size
    (``sent``, from the local record) is not sent again, so a re-sync of a
    long run does not upload every epoch's figures and a checkpoint once more."""
    for path in _top_files(run):
        api.log_artifact(mlflow_run, path)
    _log_run_json(api, mlflow_run, run)
    sent = dict(sent)
    for path, folder in _folder_files(run):
        try:
            size = os.path.getsize(path)
        except OSError:  # replaced meanwhile by a running run's atomic write
            continue
        key = f"{folder}/{os.path.basename(path)}"
        if sent.get(key) != size:
            api.log_artifact(mlflow_run, path, folder)
            sent[key] = size
    return sent


def _top_files(run):
    """The logs (every rank's file), config.json: the top-level files uploaded."""
    names = list(schema.LOGS) + [layout.EVALUATIONS_CSV]
    paths = [p for n in names for p in schema.rank_files(run.dir, n).values()]
    config = os.path.join(run.dir, layout.CONFIG_JSON)
    return [p for p in paths + [config] if os.path.isfile(p) and not os.path.islink(p)]


def _log_run_json(api, mlflow_run, run):
    """run.json with any URL password masked: a run recorded before masking kept
    its worker's command line, storage URL included."""
    path = os.path.join(run.dir, layout.RUN_JSON)
    try:
        with schema.open_file(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:  # no run.json (or replaced meanwhile): nothing to send
        return
    api.log_text(mlflow_run, masked(text), layout.RUN_JSON)


def _folder_files(run):
    """``(local path, artifact folder)`` of each file of plots/ and figures/ (with their
    sub-folders) and of the best (else last) checkpoint."""
    for top in (layout.PLOTS_DIR, layout.FIGURES_DIR):
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


def _log_model(uri, run_id, run, entry, register):
    """A finished run's best (else last) checkpoint as the MLflow model, once per
    checkpoint (and once more to register it under a new name)."""
    if R.mlflow_status(run.dir, run.meta.get("status")) in (None, "RUNNING"):
        return
    checkpoint = model_checkpoint(run)
    if not checkpoint:
        return
    mark = [os.path.relpath(checkpoint, run.dir), os.path.getsize(checkpoint)]
    if entry.get("model") == mark and register in (None, entry.get("registered")):
        return
    with _MODEL_LOCK:  # the one place a sync imports mlflow (seconds of CPU)
        try:
            import mlflow
            from .mlflow_model import log_run_model
        except ImportError:  # the points and files went over REST; the model needs mlflow
            raise MindexpError("mindexp mlflow needs mlflow to log a finished run's model: "
                               "pip install 'mindexp[mlflow]'") from None
        with uri_credentials(uri) as plain, quiet_mlflow():
            mlflow.set_tracking_uri(plain)   # (the password through MLflow's variables)
            with mlflow.start_run(run_id=run_id):  # (the status is set after it)
                entry["model_uri"] = log_run_model(run, checkpoint, register)
    entry["model"] = mark
    if register:
        entry["registered"] = register


def _set_status(api, run_id, run):
    """The run's status as MLflow's (a dead process's run: KILLED); returns it."""
    status = R.mlflow_status(run.dir, run.meta.get("status"))
    if status:
        api.set_status(run_id, status, P.ms(run.meta.get("ended_at")))
    return status


def _remember(run_dir, uri, run_id):
    """Keep ``{tracking_uri: mlflow run id}`` in run.json (best effort)."""
    def change(meta):
        meta[META_KEY] = {**(meta.get(META_KEY) or {}), uri: run_id}
    if (R.read_meta_quietly(run_dir).get(META_KEY) or {}).get(uri) == run_id:
        return  # already there: run.json stays as it is
    with contextlib.suppress(MindexpError):  # the local record and the run's tag find it again
        update_meta(run_dir, change)
