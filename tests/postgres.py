"""A private PostgreSQL server for tests: a cluster in a temporary folder,
listening on 127.0.0.1 and a free port, owned by an unprivileged user
(PostgreSQL refuses to run as root, and CI runs as root), removed afterwards.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

USER = "mindexp"  # the database superuser the cluster is made with (trust auth on loopback)
UNPRIVILEGED = "nobody"


def find_binary(name: str) -> str | None:
    """``initdb``/``pg_ctl`` on PATH, else in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versions[-1] if versions else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``with Server() as pg: pg.url("dbname")``; ``pg.missing`` says why there is none."""

    def __init__(self):
        self.initdb, self.pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        self.missing = None if self.initdb and self.pg_ctl else \
            "PostgreSQL's initdb/pg_ctl not found (apt-get install postgresql)"
        self.folder = self.port = None

    def _as_owner(self, *cmd: str) -> list[str]:
        """``cmd`` as the cluster's unprivileged owner when we are root."""
        if os.geteuid() != 0:
            return list(cmd)
        return ["runuser", "-u", UNPRIVILEGED, "--", *cmd]

    def start(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="mindexp-pg-")
        os.chmod(self.folder, 0o755)
        data = os.path.join(self.folder, "data")
        if os.geteuid() == 0:
            shutil.chown(self.folder, UNPRIVILEGED)
        subprocess.run(self._as_owner(self.initdb, "-D", data, "-U", USER, "--auth=trust",
                                      "--no-sync", "-E", "UTF8"),
                       check=True, capture_output=True, timeout=120)
        self.port = free_port()
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                   f"-c unix_socket_directories={self.folder} -c fsync=off")
        subprocess.run(self._as_owner(self.pg_ctl, "-D", data, "-o", options, "-w", "-t", "60",
                                      "-l", os.path.join(self.folder, "server.log"), "start"),
                       check=True, capture_output=True, timeout=120)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """A new empty database; returns its SQLAlchemy URL (psycopg 3)."""
        import psycopg
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.folder is None:
            return
        subprocess.run(self._as_owner(self.pg_ctl, "-D", os.path.join(self.folder, "data"),
                                      "-m", "immediate", "-w", "stop"),
                       capture_output=True, timeout=120)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL cluster on 127.0.0.1, one for the session (its start
    costs seconds; each test makes its own database); a test module uses it with
    ``from postgres import postgres``. Skips with one line where PostgreSQL
    cannot be had (fails under CI instead)."""
    from conftest import require, skip_unless_ci
    server = Server()
    if server.missing:
        skip_unless_ci(server.missing)
    require("psycopg", reason="psycopg (the PostgreSQL driver of the test extra) is missing")
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001  no unprivileged user, a broken install
        server.stop()
        skip_unless_ci(f"could not start a private PostgreSQL server: {exc}")
    yield server
    server.stop()
