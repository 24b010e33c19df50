"""A sweep or a tune study as a parent run in MLflow, its runs as children.

One parent run per sweep (``<out>/sweeps/<sweep_id>/``) or study
(``<out>/studies/<study>/``), in the MLflow experiment of its runs: named
after the sweep or study; its grid (``grid.<field>``, ``set.<field>``) or
search space (``space.<field>``, ``objective``, ``direction``) as params;
its best value as a metric (a sweep's ``best_final_loss``, a study's
``best_value``) with the best run's id as the tag ``mindexp.best_run``;
its status as MLflow's. Each of its runs carries MLflow's own
``mlflow.parentRunId`` tag, so the UI nests them under it.

The parent is found again by its tag ``mindexp.group`` (``sweep:<id>``,
``study:<name>``) and through the folder's local record (``mlflow.json``,
:mod:`.mlflow_record`, the URI's password masked), so a re-sync makes no
second parent; a folder whose index (sweep.json, the study's journal) did
not change since is answered from that record without importing mlflow or
Optuna.

Used live by ``mindexp sweep/tune --mlflow`` (:func:`start_parent` before
the first run, :func:`end_parent` after the last: they never stop the
search, a server that does not answer costs one warning) and after the
fact by ``mindexp mlflow <sweep or study folder>`` (:func:`sync_parent`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any

from ..rundir.groups import INDEX_FILES, STUDY_JOURNAL, group_kind, open_journal
from ..rundir.io import read_json
from ..secrets import masked
from . import mlflow_points as P
from . import mlflow_record as R
from .mlflow_api import api_for

GROUP_TAG = "mindexp.group"       # "sweep:<id>" / "study:<name>": the parent found again
BEST_RUN_TAG = "mindexp.best_run"
# a sweep's status (sweep.json) -> MLflow's
SWEEP_STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED",
                "running": "RUNNING", "pending": "RUNNING"}

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Group:
    """What the parent run of a sweep or study holds."""

    folder: str
    kind: str                      # sweep | study
    name: str                      # the sweep id, the study's name
    experiment: str                # the MLflow experiment (its runs')
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    status: str                    # MLflow's: RUNNING, FINISHED, FAILED, KILLED
    started_ms: int
    ended_ms: int | None = None

    @property
    def key(self) -> str:
        """The value of the parent's GROUP_TAG."""
        return f"{self.kind}:{self.name}"


def sweep_group(folder: str, record: dict[str, Any]) -> Group:
    """The parent of the sweep whose sweep.json holds ``record``."""
    params = {f"grid.{k}": ",".join(map(str, v)) for k, v in (record.get("grid") or {}).items()}
    params.update({f"set.{k}": str(v) for k, v in (record.get("set") or {}).items()})
    params["retries"] = str(record.get("retries", 0))
    runs = [r for r in record.get("runs") or [] if isinstance(r, dict)]
    done = [r for r in runs if r.get("status") == "completed" and _finite(r.get("final_loss"))]
    metrics = {"runs_completed": float(sum(r.get("status") == "completed" for r in runs)),
               "runs_failed": float(sum(r.get("status") == "failed" for r in runs))}
    tags = {}
    if done:
        best = min(done, key=lambda r: float(r["final_loss"]))
        metrics["best_final_loss"] = float(best["final_loss"])
        tags[BEST_RUN_TAG] = str(best.get("run_id"))
    return Group(folder, "sweep", str(record.get("sweep_id") or os.path.basename(folder)),
                 str(record.get("experiment") or "mindexp"), params, metrics, tags,
                 SWEEP_STATUS.get(str(record.get("status")), "RUNNING"),
                 P.ms(record.get("started_at")),
                 P.ms(record["ended_at"]) if record.get("ended_at") else None)


def study_group(folder: str, study: Any, interrupted: bool = False) -> Group:
    """The parent of an Optuna ``study`` whose folder is ``folder`` (its trials'
    runs below it); ``interrupted``: the command was stopped by a signal."""
    attrs = study.user_attrs.get("mindexp") or {}
    trials = [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]
    params = {"objective": str(attrs.get("objective")), "direction": str(attrs.get("direction"))}
    params.update({f"space.{k}": _space_text(v) for k, v in (attrs.get("space") or {}).items()})
    states = [t.state.name for t in trials]
    metrics = {f"trials_{s.lower()}": float(states.count(s)) for s in ("COMPLETE", "PRUNED", "FAIL")}
    tags = {}
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    if complete:
        best = study.best_trial   # Optuna's, by the study's direction
        metrics["best_value"] = float(best.value)
        tags["mindexp.best_trial"] = str(best.number)
        if best.user_attrs.get("run_dir"):
            tags[BEST_RUN_TAG] = os.path.basename(str(best.user_attrs["run_dir"]))
    status = "KILLED" if interrupted else "RUNNING" if "RUNNING" in states else \
        "FINISHED" if complete else "FAILED"
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    return Group(folder, "study", study.study_name, str(attrs.get("experiment") or "mindexp"),
                 params, metrics, tags, status,
                 int(min(starts).timestamp() * 1000) if starts else P.ms(None),
                 int(max(ends).timestamp() * 1000) if ends and status != "RUNNING" else None)


def read_group(folder: str) -> Group:
    """The parent of the sweep or study folder ``folder`` (a study's from its own
    journal, read with Optuna). MindexpError (one line) when it cannot be read."""
    from ..errors import MindexpError
    kind = group_kind(folder)
    if kind == "sweep":
        return sweep_group(folder, read_json(os.path.join(folder, INDEX_FILES[0])))
    journal = os.path.join(folder, STUDY_JOURNAL)
    if kind != "study" or not os.path.isfile(journal):
        raise MindexpError(f"{folder} is not a sweep folder (sweep.json) or a study folder "
                           f"with its own {STUDY_JOURNAL}. Received: {folder!r}")
    import optuna
    return study_group(folder, optuna.load_study(study_name=os.path.basename(folder),
                                                 storage=open_journal(journal)))


def index_fingerprint(folder: str) -> list[int] | None:
    """``[size, mtime_ns]`` of the file the group is read from (sweep.json, the journal)."""
    for name in (INDEX_FILES[0], STUDY_JOURNAL):
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        return [st.st_size, st.st_mtime_ns]
    return None


def known_parent(folder: str, uri: str) -> str | None:
    """The parent's MLflow run id when the folder's index is as it was at its last
    complete sync (nothing to send: answered without mlflow or Optuna)."""
    entry = R.entry_of(folder, uri)
    if entry.get("run_id") and entry.get("fingerprint") == index_fingerprint(folder):
        return str(entry["run_id"])
    return None


def open_parent(api: Any, uri: str, group: Group, experiment: str | None = None) -> str:
    """The parent run of ``group`` (found by its tag, else created), its params
    logged; kept in the folder's local record. Raises what the server raises."""
    parent, _created = api.run_tagged(experiment or group.experiment, GROUP_TAG, group.key,
                                      group.name, group.started_ms,
                                      {GROUP_TAG: group.key, "mindexp.kind": group.kind})
    api.log_batch(parent, params=group.params)  # the same values again: MLflow accepts them
    entry = R.entry_of(group.folder, uri)
    if entry.get("run_id") != parent:
        R.save_entry(group.folder, uri, {"run_id": parent})
    return parent


def close_parent(api: Any, uri: str, group: Group, parent: str) -> None:
    """The parent's best value, tags and status as ``group`` has them now."""
    api.log_batch(parent, tags=group.tags, metrics=group.metrics,
                  timestamp=group.ended_ms or group.started_ms)
    api.set_status(parent, group.status, group.ended_ms)
    R.save_entry(group.folder, uri, {"run_id": parent, "status": group.status,
                                     "fingerprint": index_fingerprint(group.folder)})


def sync_parent(folder: str, uri: str, experiment: str | None = None) -> str:
    """The parent run of the sweep or study ``folder`` brought up to date (``mindexp
    mlflow FOLDER``); returns its MLflow run id."""
    known = known_parent(folder, uri)
    if known:
        return known
    group, api = read_group(folder), api_for(uri)
    parent = open_parent(api, uri, group, experiment)
    close_parent(api, uri, group, parent)
    return parent


def start_parent(uri: str, group: Group) -> str | None:
    """Live (``sweep/tune --mlflow``): the parent run, RUNNING, before the first
    run starts; None (one warning) when the server does not answer."""
    try:
        api = api_for(uri)
        parent = open_parent(api, uri, group)
        api.set_status(parent, "RUNNING")
        return parent
    except Exception as exc:  # noqa: BLE001  the search goes on without a parent
        _warn(uri, exc)
        return None


def end_parent(uri: str, group: Group, parent: str | None) -> None:
    """Live: the parent's best value and final status once the search ends."""
    if not parent:
        return
    try:
        close_parent(api_for(uri), uri, group, parent)
    except Exception as exc:  # noqa: BLE001  `mindexp mlflow FOLDER` brings it up to date
        _warn(uri, exc)


def _warn(uri: str, exc: BaseException) -> None:
    why = masked(str(getattr(exc, "reason", None) or exc).splitlines()[0] if str(exc) else "")
    logger.warning("MLflow at %s does not answer (%s: %s); the search goes on, its parent run "
                   "is made later by: mindexp mlflow <its folder> --tracking-uri URI",
                   masked(uri), type(exc).__name__, why)


def _space_text(item: Any) -> str:
    if isinstance(item, (list, tuple)):
        return "choice:" + ",".join(map(str, item))
    return str(item)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
