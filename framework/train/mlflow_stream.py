"""A run streamed to MLflow while it trains (``--mlflow [URI]``, ``track(...,
mlflow=URI)``, ``RunRequest(mlflow=URI)``): the run starts the live sender
(:mod:`mindexp.analysis.mlflow_live`), a process of its own, and never waits
for it. The sender is told the run folder and the URI through its
environment, never its command line (the URI may carry a password); run.json
records the URI with the password masked.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from typing import Any

from ..errors import ConfigError
from ..rundir.mlflow_names import ENV_PARENT, ENV_RUN_DIR, ENV_URI, META_KEY, SENDER_MODULE
from ..secrets import masked

_SENDERS: list[subprocess.Popen] = []    # kept, so Python does not warn about them
# A sender is a new interpreter (~0.1 CPU-s to start, 0.1-0.2 more a run for its first
# passes): a tenth to a third of a one-second run of the seed (benchmarks/mlflow_live.py).
# It starts once a run has trained this long; a shorter run is sent by its end-of-run sync.
START_DELAY_S = 5.0
_WAITING: dict[str, tuple[threading.Timer, dict[str, str]]] = {}  # run folder -> its sender
_LOCK = threading.Lock()


def tracking_uri(uri: str | None) -> str:
    """The URI of ``--mlflow [URI]``: ``uri``, else MLFLOW_TRACKING_URI; ConfigError
    (one line) when neither is there or it is not a tracking URI."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise ConfigError("--mlflow needs a tracking URI: --mlflow http://HOST:PORT, or set "
                          "MLFLOW_TRACKING_URI. Received: --mlflow without a URI and "
                          "MLFLOW_TRACKING_URI unset", field="mlflow")
    scheme = uri.partition(":")[0].partition("+")[0].lower()
    if ":" not in uri or scheme not in ("http", "https", "file", "sqlite", "postgresql",
                                        "mysql", "mssql", "databricks"):
        raise ConfigError("--mlflow must be an MLflow tracking URI such as "
                          f"http://127.0.0.1:5000. Received: {masked(uri)!r}", field="mlflow")
    return uri


def note_uri(meta: dict[str, Any], uri: str) -> None:
    """run.json names the URI (password masked) before the sender knows the MLflow run."""
    meta[META_KEY] = {**(meta.get(META_KEY) or {})}
    meta[META_KEY].setdefault(masked(uri), None)


def start_sender(run_dir: str, uri: str, parent: str | None = None,
                 delay_s: float | None = None) -> None:
    """Start the live sender for ``run_dir`` (its stderr is the run's: one warning
    when the server does not answer) once the run has trained ``delay_s``
    (default :data:`START_DELAY_S`), or when it ends (:func:`run_ended`),
    whichever comes first; a failure to start it only warns.
    ``parent``: the MLflow run id of the sweep or study the run is part of."""
    key = os.path.abspath(run_dir)
    env = {**os.environ, ENV_RUN_DIR: key, ENV_URI: uri}
    env.pop(ENV_PARENT, None)
    if parent:
        env[ENV_PARENT] = parent
    delay = START_DELAY_S if delay_s is None else delay_s
    if delay <= 0:
        _spawn(env)
        return
    timer = threading.Timer(delay, _start_waiting, args=(key,))
    timer.daemon = True
    with _LOCK:
        if not _WAITING:
            atexit.register(_start_all_waiting)  # a process that ends first still sends
        _WAITING[key] = (timer, env)
    timer.start()


def run_ended(run_dir: str) -> None:
    """The run's record is final: a sender still waiting for its delay starts now
    (it finds the run over and makes the end-of-run sync)."""
    _start_waiting(os.path.abspath(run_dir))


def _start_waiting(key: str) -> None:
    with _LOCK:
        waiting = _WAITING.pop(key, None)
    if waiting is not None:
        waiting[0].cancel()
        _spawn(waiting[1])


def _start_all_waiting() -> None:
    for key in list(_WAITING):
        _start_waiting(key)


def _spawn(env: dict[str, str]) -> None:
    try:
        _SENDERS.append(subprocess.Popen(
            [sys.executable, "-m", SENDER_MODULE], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True))
    except OSError as exc:
        import logging
        logging.getLogger(__name__).warning("the run is not streamed to MLflow (%s)", exc)
    _SENDERS[:] = [p for p in _SENDERS if p.poll() is None]
