"""A run streamed to MLflow while it trains (``--mlflow [URI]``, ``track(...,
mlflow=URI)``, ``RunRequest(mlflow=URI)``): the run starts the live sender
(:mod:`mindexp.analysis.mlflow_live`), a process of its own, and never waits
for it. The sender is told the run folder and the URI through its
environment, never its command line (the URI may carry a password); run.json
records the URI with the password masked.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from ..errors import ConfigError
from ..rundir.mlflow_names import ENV_PARENT, ENV_RUN_DIR, ENV_URI, META_KEY, SENDER_MODULE
from ..secrets import masked

_SENDERS: list[subprocess.Popen] = []    # kept, so Python does not warn about them


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


def start_sender(run_dir: str, uri: str, parent: str | None = None) -> None:
    """Start the live sender for ``run_dir`` (its stderr is the run's: one warning
    when the server does not answer); a failure to start it only warns.
    ``parent``: the MLflow run id of the sweep or study the run is part of."""
    env = {**os.environ, ENV_RUN_DIR: os.path.abspath(run_dir), ENV_URI: uri}
    env.pop(ENV_PARENT, None)
    if parent:
        env[ENV_PARENT] = parent
    try:
        _SENDERS.append(subprocess.Popen(
            [sys.executable, "-m", SENDER_MODULE], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True))
    except OSError as exc:
        import logging
        logging.getLogger(__name__).warning("the run is not streamed to MLflow (%s)", exc)
    _SENDERS[:] = [p for p in _SENDERS if p.poll() is None]
