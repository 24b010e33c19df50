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
answers from that record without importing mlflow. run.json keeps the
mapping (``mlflow``: tracking URI -> MLflow run id), the URI with its
password masked (:mod:`mindexp.secrets`); run.json is uploaded masked too.
"""
from __future__ import annotations

import os
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
from .mlflow_api import RUN_ID_TAG, Rest, _check_reachable, check_uri, connect  # noqa: F401
from .reports import as_runs

LEGACY_ROWS_TAG = "mindexp.rows."  # bookkeeping tags of syncs before the local record
BATCH = 1000          # MLflow's limit of metrics per log_batch call
STATUS = R.STATUS
PARAMS_CHOICES, DEFAULT_PARAMS = P.PARAMS_CHOICES, P.DEFAULT_PARAMS


def to_mlflow(runs: Any, tracking_uri: str, experiment: str | None = None,
              params: str = DEFAULT_PARAMS, register: str | None = None) -> list[dict[str, Any]]:
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
    Raises MindexpError (one line) for a bad or unreachable tracking URI.
    """
    check_uri(tracking_uri)
    check_params(params)
    parents = _parents(runs, tracking_uri, experiment)
    client: Any = None
    experiment_ids: dict[str, str] = {}  # one lookup per MLflow experiment
    done: list[Any] = []
    for run in as_runs(runs):
        parent = parents.get(run.dir)
        if R.unchanged(run.dir, tracking_uri, params, run.meta) and \
                register in (None, R.entry_of(run.dir, tracking_uri).get("registered")) and \
                parent in (None, R.entry_of(run.dir, tracking_uri).get("parent")):
            entry = R.entry_of(run.dir, tracking_uri)
            done.append({"run_dir": run.dir, "mlflow_run_id": entry["run_id"], "points": 0})
            continue
        client = client or connect(tracking_uri)
        done.append(_sync_run(client, tracking_uri, run, experiment, experiment_ids, params,
                              register, parent))
    return done


def _parents(runs: Any, uri: str, experiment: str | None) -> dict[str, str]:
    """``{run folder: MLflow run id of its parent}`` for the runs of each sweep or
    study folder among ``runs`` (:mod:`.mlflow_groups`: the parents brought up to date)."""
    from ..rundir.groups import group_kind
    items = [runs] if isinstance(runs, (str, os.PathLike)) else \
        [] if not isinstance(runs, (list, tuple)) else runs
    found: dict[str, str] = {}
    for folder in [os.fspath(i) for i in items if isinstance(i, (str, os.PathLike))]:
        if group_kind(folder):
            if os.path.isfile(os.path.join(folder, layout.RUN_JSON)):
                continue  # a run folder, never a group
            from .mlflow_groups import known_parent
            parent = known_parent(folder, uri) or _sync_parent(folder, uri, experiment)
            found.update({run.dir: parent for run in as_runs(folder)})
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
    """``params`` when it is one of :data:`PARAMS_CHOICES`, else MindexpError (one line)."""
    if params not in PARAMS_CHOICES:
        raise MindexpError(f"--params must be one of {', '.join(PARAMS_CHOICES)}. "
                           f"Received: {params!r}")
    return params


def _sync_run(client, uri, run, experiment, experiment_ids, params, register=None, parent=None):
    entry = R.entry_of(run.dir, uri)
    mlflow_run = _known_run(client, entry.get("run_id")) or \
        _find_or_create(client, run, _experiment_id(client, run, experiment, experiment_ids))
    run_id = mlflow_run.info.run_id
    if entry.get("run_id") != run_id:  # another MLflow run (or none) before: start over
        entry = {"run_id": run_id, "offsets": _legacy_offsets(run.dir, mlflow_run)}
    entry["params"] = params
    R.save_entry(run.dir, uri, entry)
    if not mlflow_run.data.params:
        _log_params(client, run_id, run.config)
    points = sum(_send_log(client, uri, run, log, entry, params)
                 for log in P.log_files(run.dir, params))
    client.log_batch(run_id, tags=_tags(run, parent))
    if parent:
        entry["parent"] = parent
    _drop_legacy_tags(client, run_id, mlflow_run)
    entry["artifacts"] = _log_artifacts(client, run_id, run, entry.get("artifacts") or {})
    _log_model(uri, run_id, run, entry, register)
    entry["status"] = _set_status(client, run_id, run)
    _remember(run.dir, masked(uri), run_id)
    entry["fingerprint"] = R.fingerprint(run.dir)  # last: _remember may rewrite run.json
    R.save_entry(run.dir, uri, entry)
    return {"run_dir": run.dir, "mlflow_run_id": run_id, "points": points}


def _experiment_id(client, run, experiment, experiment_ids):
    name = experiment or run.meta.get("experiment") or "mindexp"
    if name not in experiment_ids:
        found = client.get_experiment_by_name(name)
        experiment_ids[name] = found.experiment_id if found else client.create_experiment(name)
    return experiment_ids[name]


def _known_run(client, run_id):
    """The MLflow run the local record names, or None (none, or deleted since)."""
    if not run_id:
        return None
    try:
        found = client.get_run(run_id)
    except Exception:  # MlflowException: no such run on this server
        return None
    return found if found.info.lifecycle_stage == "active" else None


def _find_or_create(client, run, experiment_id):
    runs = client.search_runs([experiment_id],
                              filter_string=f"tags.`{RUN_ID_TAG}` = '{run.run_id}'", max_results=1)
    if runs:
        return runs[0]
    return client.create_run(experiment_id, start_time=P.start_ms(run.meta),
                             run_name=run.run_id, tags={RUN_ID_TAG: run.run_id})


def _legacy_offsets(run_dir, mlflow_run):
    """Offsets from the ``mindexp.rows.<log>`` tags a sync before the local record
    left (rank 0's files); ``{}`` for a new MLflow run."""
    offsets = {}
    for key, value in mlflow_run.data.tags.items():
        if key.startswith(LEGACY_ROWS_TAG) and key[len(LEGACY_ROWS_TAG):] in schema.LOGS:
            path = schema.path_of(run_dir, key[len(LEGACY_ROWS_TAG):])
            _header, lines = P.read_lines(path, 0)
            rows = min(int(value), len(lines))
            if rows:
                offsets[os.path.basename(path)] = lines[rows - 1][0]
    return offsets


def _drop_legacy_tags(client, run_id, mlflow_run):
    for key in [k for k in mlflow_run.data.tags if k.startswith(LEGACY_ROWS_TAG)]:
        client.delete_tag(run_id, key)


def _log_params(client, run_id, config):
    from mlflow.entities import Param
    params = [Param(k, str(v)[:6000]) for k, v in sorted(config.items())]
    for i in range(0, len(params), 100):  # MLflow's limit of params per call
        client.log_batch(run_id, params=params[i:i + 100])


def _send_log(client, uri, run, log, entry, params):
    """Send the points of ``log`` after the offset the record holds; returns how many."""
    offsets = entry.setdefault("offsets", {})
    points, end = P.new_points(log, offsets.get(log.filename, 0), P.start_ms(run.meta), params,
                               every=P.summary_every(run.meta))
    if points:
        _log_points(client, uri, entry["run_id"], points)
    offsets[log.filename] = end
    R.save_entry(run.dir, uri, entry)  # at once: a sync cut short later does not send these again
    return len(points)


def _log_points(client, uri, run_id, points):
    """In batches: as JSON straight to an http(s) server's REST API (MlflowClient's
    protobuf objects cost ~0.06 CPU-ms a point, as much as a third of the server's
    own work), through ``client`` for other stores."""
    if uri.lower().startswith(("http:", "https:")):
        Rest(uri).log_points(run_id, points)
        return
    from mlflow.entities import Metric
    metrics = [Metric(*p) for p in points]
    for i in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[i:i + BATCH])


def _tags(run, parent=None):
    from mlflow.entities import RunTag
    meta = run.meta
    tags = {RUN_ID_TAG: run.run_id, "mindexp.experiment": str(meta.get("experiment")),
            "mindexp.status": str(meta.get("status")),
            "mindexp.tags": ",".join(meta.get("tags") or []),
            "mlflow.note.content": meta.get("note") or "", **source_tags(meta)}
    tags.update({f"tag.{t}": "true" for t in meta.get("tags") or []})
    if parent:  # MLflow's own nesting under the sweep's or study's run
        tags["mlflow.parentRunId"] = parent
    return [RunTag(k, v) for k, v in tags.items()]


def source_tags(meta: dict[str, Any]) -> dict[str, str]:
    """MLflow's own source tags (its UI's Source and git commit) from run.json's
    provenance: the experiment's file (else its entry) and the git commit."""
    block = provenance_of(meta)
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    git = block.get("git") if isinstance(block.get("git"), dict) else {}
    name = source.get("origin") or meta.get("entry")
    tags = {"mlflow.source.type": "LOCAL"}
    if name:
        tags["mlflow.source.name"] = masked(str(name))
    if git.get("commit"):
        tags["mlflow.source.git.commit"] = str(git["commit"])
    if git.get("branch"):
        tags["mlflow.source.git.branch"] = str(git["branch"])
    return tags


def _log_artifacts(client, run_id, run, sent):
    """The logs (each rank's), config and run record, plots/, figures/ and the best
    (else last) checkpoint; returns ``{artifact path: size}`` of the folders' files sent.

    The few top-level files always go again (they change while a run runs);
    a file of plots/, figures/ or checkpoints/ already sent with its size
    (``sent``, from the local record) is not sent again, so a re-sync of a
    long run does not upload every epoch's figures and a checkpoint once more."""
    for path in _top_files(run):
        client.log_artifact(run_id, path)
    _log_run_json(client, run_id, run)
    sent = dict(sent)
    for path, folder in _folder_files(run):
        try:
            size = os.path.getsize(path)
        except OSError:  # replaced meanwhile by a running run's atomic write
            continue
        key = f"{folder}/{os.path.basename(path)}"
        if sent.get(key) != size:
            client.log_artifact(run_id, path, artifact_path=folder)
            sent[key] = size
    return sent


def _top_files(run):
    """The logs (every rank's file), config.json: the top-level files uploaded."""
    names = list(schema.LOGS) + [layout.EVALUATIONS_CSV]
    paths = [p for n in names for p in schema.rank_files(run.dir, n).values()]
    config = os.path.join(run.dir, layout.CONFIG_JSON)
    return [p for p in paths + [config] if os.path.isfile(p) and not os.path.islink(p)]


def _log_run_json(client, run_id, run):
    """run.json with any URL password masked: a run recorded before masking kept
    its worker's command line, storage URL included."""
    path = os.path.join(run.dir, layout.RUN_JSON)
    try:
        with schema.open_file(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:  # no run.json (or replaced meanwhile): nothing to send
        return
    client.log_text(run_id, masked(text), layout.RUN_JSON)


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
    import mlflow
    from .mlflow_model import log_run_model
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(run_id=run_id):  # its status is set again after this
        entry["model_uri"] = log_run_model(run, checkpoint, register)
    entry["model"] = mark
    if register:
        entry["registered"] = register


def _set_status(client, run_id, run):
    """The run's status as MLflow's (a dead process's run: KILLED); returns it."""
    status = R.mlflow_status(run.dir, run.meta.get("status"))
    if status == "RUNNING":
        client.update_run(run_id, status="RUNNING")
    elif status:
        client.set_terminated(run_id, status=status, end_time=P.ms(run.meta.get("ended_at")))
    return status


def _remember(run_dir, uri, run_id):
    """Keep ``{tracking_uri: mlflow run id}`` in run.json (best effort)."""
    def change(meta):
        meta[META_KEY] = {**(meta.get(META_KEY) or {}), uri: run_id}
    if (R.read_meta_quietly(run_dir).get(META_KEY) or {}).get(uri) == run_id:
        return  # already there: run.json stays as it is
    try:
        update_meta(run_dir, change)
    except MindexpError:
        pass  # the local record and the MLflow run's own tag find it again
