"""A password in a storage URL is never written, printed, served or put on a
worker's command line: a real PostgreSQL study given a random
password, every file, both output streams and every worker's
/proc/<pid>/cmdline searched for it."""
import os
import secrets
import subprocess
import sys
import time

import pytest

import forkserver
from conftest import cli_env, require
from postgres import USER, postgres  # noqa: F401  (the fixture: a private server per module)

require("optuna")


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://user:PASS@host/db", "postgresql+psycopg://user:***@host/db"),
    ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
    ("https://u:t@k@h:5000", "https://u:***@h:5000"),
    ("--storage=mysql://u:p%2Fq@h/db", "--storage=mysql://u:***@h/db"),
    ("postgresql://u@h/db?sslmode=require&password=PASS", "postgresql://u@h/db?sslmode=require&password=***"),
    ("/abs/journal.log", "/abs/journal.log"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_masked_hides_the_password_of_a_url_and_nothing_else(url, shown):
    from mindexp.secrets import masked
    assert masked(url) == shown


def _worker_cmdlines(proc, seen):
    """Every worker's command line as /proc shows it, while the driver ``proc`` runs."""
    import psutil
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            seen[child.pid] = open(f"/proc/{child.pid}/cmdline", "rb").read()
        except OSError:  # exited meanwhile
            pass


def _files_holding(root, needle):
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
    return found


def _tune_on(storage, tmp_path, **env):
    """``mindexp tune`` with two workers on ``storage`` into tmp_path/out, as its own
    process; (stdout, stderr, {pid: /proc cmdline of each worker seen while it ran})."""
    cmd = [sys.executable, "-m", "mindexp", "tune", "linear", "--param", "lr=loguniform:1e-3:0.1",
           "--set", "epochs=1", "--trials", "2", "--workers", "2", "--storage", storage,
           "--out", str(tmp_path / "out")]
    # real workers (a new interpreter each, MINDEXP_TEST_FORK_WORKERS=0): their
    # /proc command lines are what this test reads
    proc = forkserver.popen(cmd, env=cli_env(MINDEXP_TEST_FORK_WORKERS="0", **env),
                            cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen, deadline = {}, time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        _worker_cmdlines(proc, seen)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out, err, seen


@pytest.mark.slow
def test_a_password_in_the_storage_url_reaches_no_file_output_or_worker_command_line(
        postgres, tmp_path, capsys, monkeypatch):
    password = "pw" + secrets.token_hex(12)
    database = postgres.create_database("secret_study")
    url = database.replace(f"//{USER}@", f"//{USER}:{password}@")  # trust auth: accepted
    out, err, seen = _tune_on(url, tmp_path)
    assert seen, "no worker was seen running"
    assert [pid for pid, line in seen.items() if password.encode() in line] == []
    assert password not in out and password not in err
    assert err.count("--storage holds a password") == 1  # the one warning line
    assert f"{USER}:***@" in out  # the storage is shown, masked
    runs = list((tmp_path / "out").rglob("run.json"))
    assert len(runs) == 2
    assert _files_holding(tmp_path / "out", password.encode()) == []
    _served_and_exported_without(tmp_path / "out", password, tmp_path / "mlruns", capsys,
                                 monkeypatch)


def test_the_dashboard_and_the_mlflow_export_mask_a_run_json_recorded_before_masking(tmp_path):
    """A run.json written by an older mindexp holds its worker's command line
    with the storage URL: served and uploaded masked."""
    import json
    from mindexp.analysis import mlflow_export
    run = tmp_path / "linear" / "r1"
    run.mkdir(parents=True)
    meta = {"experiment": "linear", "run_id": "r1", "status": "completed",
            "provenance": {"command": ["mindexp", "_search_worker",
                                       '{"storage": "postgresql://u:SECRETPW@h/db"}', "0"]}}
    (run / "run.json").write_text(json.dumps(meta))

    class Client:
        texts = {}

        def log_text(self, run_id, text, name):
            self.texts[name] = text
    client = Client()
    mlflow_export._log_run_json(client, "id", type("Run", (), {"dir": str(run)})())
    assert "SECRETPW" not in client.texts["run.json"] and "u:***@h" in client.texts["run.json"]


def test_the_dashboard_serves_a_run_json_recorded_before_masking_masked(tmp_path):
    import http.client
    import threading
    from mindexp.analysis.dashboard import make_server
    from rundirs import make_run
    command = ["mindexp", "_search_worker", '{"storage": "postgresql://u:SECRETPW@h/db"}', "0"]
    make_run(tmp_path, meta={"provenance": {"command": command}})
    server = make_server([str(tmp_path)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        for path in ("/files/0/toy/r1/run.json", "/api/data?run=0/toy/r1", "/api/data"):
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
            conn.request("GET", path)
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            assert answer.status == 200 and b"SECRETPW" not in body, (path, body[:300])
    finally:
        server.shutdown()
        server.server_close()


def _dashboard_answers(root):
    """The dashboard over ``root``: its page, /api/data, and each run's /api/data?run=
    and /files/.../run.json, as (path, status, body)."""
    import http.client
    import threading
    from mindexp.analysis.dashboard import make_server
    runs = sorted(os.path.relpath(os.path.dirname(p), root) for p in _run_jsons(root))
    paths = ["/", "/api/data"] + [f"/api/data?run=0/{r}" for r in runs] + \
        [f"/files/0/{r}/run.json" for r in runs]
    server = make_server([str(root)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    answers = []
    try:
        for path in paths:
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
            conn.request("GET", path)
            answer = conn.getresponse()
            answers.append((path, answer.status, answer.read()))
            conn.close()
    finally:
        server.shutdown()
        server.server_close()
    return answers


def _run_jsons(root):
    return [os.path.join(d, "run.json") for d, _, names in os.walk(root) if "run.json" in names]


@pytest.mark.slow
def test_a_password_given_through_the_environment_reaches_no_file_page_artifact_or_command_line(
        postgres, tmp_path, capsys, monkeypatch):
    """The promise: a random password reaches a real PostgreSQL study the
    way the docs say to give it (the driver's own PGPASSWORD, no password on a command
    line), and is found in no run file, no catalog, neither output stream, no answer
    of the dashboard, no MLflow artifact and no worker's /proc/<pid>/cmdline."""
    password = "pw" + secrets.token_hex(12)
    url = postgres.create_database("env_secret_study")  # trust auth: the password is accepted
    out, err, seen = _tune_on(url, tmp_path, PGPASSWORD=password)
    assert seen and [pid for pid, line in seen.items() if password.encode() in line] == []
    assert password not in out + err and "--storage holds a password" not in err
    root = tmp_path / "out"
    assert len(_run_jsons(root)) == 2
    assert _files_holding(root, password.encode()) == []   # runs, the study, the catalog
    _served_and_exported_without(root, password, tmp_path / "mlruns", capsys, monkeypatch)


def _served_and_exported_without(root, password, mlruns, capsys, monkeypatch):
    """The dashboard's answers over ``root`` and its runs exported to MLflow (a file
    store at ``mlruns``: every record and artifact a file to search) hold no ``password``."""
    from mindexp.cli.main import main
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (MLflow 3 keeps it behind this)
    answers = _dashboard_answers(root)
    assert [(path, status) for path, status, _ in answers if status != 200] == []
    assert [path for path, _, body in answers if password.encode() in body] == []
    capsys.readouterr()
    assert main(["mlflow", str(root), "--tracking-uri", mlruns.as_uri()]) == 0
    shown = capsys.readouterr()
    assert password not in shown.out + shown.err
    # each run.json uploaded (a run's artifacts, and its model's copy of the run)
    assert len([d for d, _, names in os.walk(mlruns) if "run.json" in names]) >= 2
    assert _files_holding(mlruns, password.encode()) == []


def test_the_environment_recorded_with_a_run_masks_credentials_but_not_the_config(
        tmp_path, monkeypatch):
    """run.json's record of the MS_* variables: a name holding URL, URI, TOKEN,
    PASSWORD, SECRET or KEY is ``***`` whole, a URL's password in any other is
    ``***``; the config is the user's own, kept as given (a rerun needs it)."""
    import json
    import mindexp
    password = secrets.token_hex(8)
    given = {"MS_DB_URL": f"postgresql://u:{password}@h/db", "MS_API_TOKEN": password,
             "MS_SECRET_KEY": password, "MS_PASSWORD": password, "MS_DEV_URI": password,
             "MS_NOTE": f"see https://bob:{password}@example.org/x", "MS_PLAIN": "1"}
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    with mindexp.track(tmp_path / "out", "envtest",
                       config={"db": f"postgresql://u:{password}@h/db"}) as run:
        pass
    with open(os.path.join(run.dir, "run.json"), encoding="utf-8") as f:
        recorded = json.load(f)["provenance"]["env"]
    assert {k: v for k, v in recorded.items() if k in given} == {
        "MS_DB_URL": "***", "MS_API_TOKEN": "***", "MS_SECRET_KEY": "***", "MS_PASSWORD": "***",
        "MS_DEV_URI": "***", "MS_NOTE": "see https://bob:***@example.org/x", "MS_PLAIN": "1"}
    with open(os.path.join(run.dir, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["db"] == f"postgresql://u:{password}@h/db"
    for root, _dirs, files in os.walk(run.dir):
        for name in files:
            if name != "config.json" and "source" not in root:
                with open(os.path.join(root, name), "rb") as f:
                    assert password.encode() not in f.read(), name
