"""The local record of what a run sent to MLflow: ``mlflow.json`` in its folder
(``layout.MLFLOW_RECORD``), written atomically by the sync and the live sender.

One entry per tracking URI, keyed by the URI with its password masked (the
credential itself is never written): the MLflow run id (a resume, a later
sync and the live sender continue the same MLflow run), the byte offset up
to which each log file was sent, the artifacts sent with their sizes, the
``--params`` choice, the status sent and the run folder's fingerprint at
the end of the last complete sync. A sync whose fingerprint and status are
unchanged has nothing to send and answers without importing mlflow.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from ..callbacks import schema
from .. import layout
from ..rundir.run_lock import GONE, shown_status
from ..secrets import masked
from . import mlflow_points as P

# mindexp status (as `mindexp runs` shows it) -> MLflow's run status
STATUS = {"completed": "FINISHED", "failed": "FAILED", "diverged": "FAILED",
          "interrupted": "KILLED", "pruned": "KILLED", GONE: "KILLED", "running": "RUNNING"}
_FINGERPRINT_DIRS = (layout.PLOTS_DIR, layout.FIGURES_DIR, schema.CHECKPOINT_DIR)


def read_record(run_dir: str) -> dict[str, Any]:
    """``{masked uri: entry}`` of ``run_dir`` (``{}``: nothing sent, or unreadable)."""
    return _read_dict(os.path.join(run_dir, layout.MLFLOW_RECORD))


def entry_of(run_dir: str, uri: str) -> dict[str, Any]:
    """The record's entry for ``uri`` (a copy; ``{}`` when none)."""
    entry = read_record(run_dir).get(masked(str(uri)))
    return dict(entry) if isinstance(entry, dict) else {}


def save_entry(run_dir: str, uri: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` as ``uri``'s (the others unchanged), atomically."""
    record = read_record(run_dir)
    record[masked(str(uri))] = entry
    schema.atomic_write(os.path.join(run_dir, layout.MLFLOW_RECORD),
                        json.dumps(record, indent=1, sort_keys=True))


def send_logs(api: Any, run_dir: str, uri: str, entry: dict[str, Any], meta: dict[str, Any],
              final: bool = True, limit: int | None = None) -> int:
    """Send the points each log gained after the offsets ``entry`` holds (at most
    ``limit`` bytes of a log) to its MLflow run, keeping each log's new offset at
    once (a send cut short later does not send them again); the points sent.
    ``final``: see :func:`mindexp.analysis.mlflow_points.new_points`."""
    offsets, sent = entry.setdefault("offsets", {}), 0
    for log in P.log_files(run_dir, entry["params"]):
        points, end = P.new_points(log, offsets.get(log.filename, 0), P.start_ms(meta),
                                   entry["params"], final=final, limit=limit,
                                   every=P.summary_every(meta))
        if points:
            api.log_points(entry["run_id"], points)
            sent += len(points)
        if end != offsets.get(log.filename, 0):
            offsets[log.filename] = end
            save_entry(run_dir, uri, entry)
    return sent


def mlflow_status(run_dir: str, status: str | None) -> str | None:
    """The MLflow status of a run whose run.json says ``status``: a run marked
    running whose process is gone (the lock rule) is KILLED, as ``runs`` shows it."""
    if not status:
        return None
    return STATUS.get(shown_status(run_dir, status) or status)


def fingerprint(run_dir: str) -> dict[str, list[int]]:
    """``{relative path: [size, mtime_ns]}`` of every file a sync reads: the
    top-level files (logs, run.json, config.json) and those of plots/,
    figures/ and checkpoints/; links are not followed."""
    found = {}
    for top in ("",) + _FINGERPRINT_DIRS:
        for root, _dirs, files in os.walk(os.path.join(run_dir, top)):
            for name in files:
                path = os.path.join(root, name)
                rel = os.path.relpath(path, run_dir)
                if rel == layout.MLFLOW_RECORD or name.startswith("."):  # locks come and go
                    continue
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    found[rel] = [st.st_size, st.st_mtime_ns]
            if not top:
                break  # the top level only; its folders are walked on their own
    return found


def unchanged(run_dir: str, uri: str, params: str, meta: dict[str, Any]) -> bool:
    """True when the last complete sync of ``run_dir`` to ``uri`` sent what it
    holds now (same files, same status, same ``params`` choice)."""
    entry = entry_of(run_dir, uri)
    return bool(entry.get("run_id")) and entry.get("params") == params \
        and entry.get("status") == mlflow_status(run_dir, meta.get("status")) \
        and entry.get("fingerprint") == fingerprint(run_dir)


def read_meta_quietly(run_dir: str) -> dict[str, Any]:
    """run.json of ``run_dir`` as it is now, ``{}`` when unreadable."""
    return _read_dict(os.path.join(run_dir, layout.RUN_JSON))


def _read_dict(path: str) -> dict[str, Any]:
    """The JSON object in ``path``, ``{}`` when it is unreadable or not an object."""
    try:
        with schema.open_file(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
