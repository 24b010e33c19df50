"""`mindexp mlflow`: runs copied into a real MLflow tracking server (started here on
127.0.0.1 with a SQLite backend and a temporary artifact root), read back with
MlflowClient; a second sync sends only the new rows; bad URIs are one line."""
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import require
from mindexp.callbacks import schema
from mindexp import layout
from mindexp.cli.main import main
from rundirs import make_run

STEPS = 300


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(uri, server, deadline_s=900):  # mlflow server starts slowly on a busy machine
    import requests
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"mlflow server exited ({server.returncode})")
        try:
            if requests.get(uri + "/health", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    pytest.fail("mlflow server did not answer /health")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require("mlflow", "mindexp mlflow needs mlflow (the mlflow extra)")
    if os.environ.get("MINDEXP_TEST_MLFLOW_URI"):  # a server already running (a developer's)
        yield os.environ["MINDEXP_TEST_MLFLOW_URI"]
        return
    home = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
         "--artifacts-destination", str(home / "artifacts")],
        cwd=home, stdout=subprocess.DEVNULL, stderr=open(home / "server.log", "wb"),
        # without MLflow 3's job runner (GenAI jobs: a process and seven huey consumers
        # polling, ~10 CPU-s over this module), which tracking and the registry do not use
        env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
    try:
        _wait_healthy(uri, proc)
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _one_run(tmp_path):
    """A finished run of STEPS steps (loss, lr, a parameter), two evaluations,
    system samples, a figure, tags and a note."""
    run_dir = make_run(tmp_path, "r-mlflow", losses=[1.0 / (i + 1) for i in range(STEPS)],
                       params={"w": [i * 0.001 for i in range(STEPS)]},
                       eval_rows=[{"epoch": 1, "step": 2, "accuracy": 0.5},
                                  {"epoch": 2, "step": 4, "accuracy": 0.75}],
                       meta={"tags": ["baseline"], "note": "first try",
                             "provenance": {"source": {"origin": "/src/toy.py"},
                                            "git": {"commit": "abc123", "branch": "main"}}})
    with open(schema.path_of(run_dir, "system"), "w", encoding="utf-8") as f:
        f.write(",".join(schema.SYSTEM.required) + "\n0.0,0,,,100.0,4,0,0\n1.0,2,90.0,50.0,120.0,5,1,2\n")
    figures = os.path.join(run_dir, layout.FIGURES_DIR, "fit")
    os.makedirs(figures)
    for name in ("fit/epoch-1.png", "fit.png"):
        with open(os.path.join(run_dir, layout.FIGURES_DIR, name), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
    return run_dir


def _steps(client, run_id, key):
    """The steps of a metric's points, sorted (MLflow answers in timestamp order)."""
    return sorted(m.step for m in client.get_metric_history(run_id, key))


@pytest.mark.slow
def test_runs_are_copied_and_a_second_sync_sends_only_new_rows(server, tmp_path, capsys,
                                                                monkeypatch):
    from mlflow.tracking import MlflowClient
    run_dir = _one_run(tmp_path)
    assert main(["mlflow", str(tmp_path), "--tracking-uri", server]) == 0
    client = MlflowClient(server)
    [found] = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                                 filter_string="tags.`mindexp.run_id` = 'r-mlflow'")
    rid = found.info.run_id
    assert found.data.params == {"seed": "0", "epochs": "3", "optimizer": "sgd", "lr": "0.1"}
    assert found.data.tags["mindexp.run_id"] == "r-mlflow"
    assert found.data.tags["mlflow.note.content"] == "first try"
    assert found.data.tags["tag.baseline"] == "true"
    assert found.data.tags["mlflow.source.name"] == "/src/toy.py"  # the UI's Source column
    assert found.data.tags["mlflow.source.git.commit"] == "abc123"
    assert not [t for t in found.data.tags if t.startswith("mindexp.rows")]  # bookkeeping: local
    assert found.info.status == "FINISHED"
    assert _steps(client, rid, "loss") == list(range(1, STEPS + 1))
    assert len(client.get_metric_history(rid, "lr")) == STEPS
    # the summary (default) sends a parameter at the first step and every 3rd: 300 / 100
    assert _steps(client, rid, "param/w") == [1] + list(range(3, STEPS + 1, 3))
    assert [m.value for m in client.get_metric_history(rid, "eval_accuracy")] == [0.5, 0.75]
    assert [m.value for m in client.get_metric_history(rid, "system/rss_mb")] == [100.0, 120.0]
    artifacts = {a.path for a in client.list_artifacts(rid)}
    assert {"loss.csv", "params.csv", "eval.csv", "system.csv", "figures"} <= artifacts
    assert {a.path for a in client.list_artifacts(rid, "figures")} == {"figures/fit",
                                                                      "figures/fit.png"}
    from mindexp.rundir.meta import read_meta
    assert read_meta(run_dir)["mlflow"] == {server: rid}
    from mindexp.analysis.mlflow_record import entry_of
    assert entry_of(run_dir, server)["run_id"] == rid

    with open(schema.path_of(run_dir, "loss"), "a", encoding="utf-8") as f:  # the run went on
        f.write(f"{STEPS + 1},3,0.0001,0.1,9.9\n")
    with open(os.path.join(run_dir, layout.FIGURES_DIR, "fit", "epoch-2.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
    uploaded = []
    from mindexp.analysis.mlflow_api import Rest
    log_artifact = Rest.log_artifact
    monkeypatch.setattr(Rest, "log_artifact", lambda self, run, path, folder=None: (
        uploaded.append(os.path.relpath(path, run_dir)), log_artifact(self, run, path, folder)))
    capsys.readouterr()
    assert main(["mlflow", run_dir, "--tracking-uri", server]) == 0
    figures = sorted(p for p in uploaded if p.startswith(layout.FIGURES_DIR))
    assert figures == [os.path.join(layout.FIGURES_DIR, "fit", "epoch-2.png")]  # only the new one
    assert schema.LOSS.filename in uploaded
    assert {a.path for a in client.list_artifacts(rid, "figures/fit")} == {
        "figures/fit/epoch-1.png", "figures/fit/epoch-2.png"}
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "(2 new metric points)" in out  # loss and lr
    assert len(client.search_runs([found.info.experiment_id],
                                  filter_string="tags.`mindexp.run_id` = 'r-mlflow'")) == 1
    assert _steps(client, rid, "loss") == list(range(1, STEPS + 2))  # each step once


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("uri, says", [
    ("http://127.0.0.1:{closed}", "no MLflow tracking server answers at"),
    ("not a uri", "--tracking-uri must be an MLflow tracking URI"),
])
def test_a_bad_or_unreachable_tracking_uri_is_one_line_and_exit_2(cli, tmp_path, uri, says):
    require("mlflow", "mindexp mlflow needs mlflow (the mlflow extra)")
    run_dir = make_run(tmp_path, "r1")
    result = cli("mlflow", run_dir, "--tracking-uri", uri.format(closed=_free_port()))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr
    assert "Traceback" not in result.stderr


def _metric(client, run_id, key):
    """``[(step, value), ...]`` of a metric, by step."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _mlflow_run(client, run_dir):
    from mindexp.analysis.mlflow_record import entry_of, read_record
    [uri] = read_record(run_dir)
    return client.get_run(entry_of(run_dir, uri)["run_id"])


@pytest.mark.slow
def test_params_summary_none_and_all_send_what_they_say(server, tmp_path):
    """summary: an element-wise parameter's norm, mean and std (numpy's), a large one's
    logged norm/mean/std (not min/max), a scalar as it is; none: no param/ key; all: every row."""
    import numpy as np
    from mlflow.tracking import MlflowClient
    from mindexp import to_mlflow
    w = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    rows = {f"w[{i}]": list(w[:, i]) for i in range(3)}
    rows.update({"b": [0.1, 0.2], "big:norm": [3.0, 4.0], "big:min": [-1.0, -2.0],
                 "big:std": [0.5, 0.6]})
    client = MlflowClient(server)
    keys = {}
    for params in ("summary", "none", "all"):
        run_dir = make_run(tmp_path / params, f"r-{params}", losses=[1.0, 0.5], params=rows)
        [done] = to_mlflow(run_dir, server, params=params)
        keys[params] = {k for k in client.get_run(done["mlflow_run_id"]).data.metrics
                        if k.startswith("param/")}
        if params == "summary":
            rid = done["mlflow_run_id"]
            assert [s for s, _v in _metric(client, rid, "param/w/norm")] == [1, 2]
            assert [v for _s, v in _metric(client, rid, "param/w/norm")] == pytest.approx(
                list(np.linalg.norm(w, axis=1)))
            assert [v for _s, v in _metric(client, rid, "param/w/mean")] == pytest.approx(
                list(w.mean(axis=1)))
            assert [v for _s, v in _metric(client, rid, "param/w/std")] == pytest.approx(
                list(w.std(axis=1)))
            assert [v for _s, v in _metric(client, rid, "param/b")] == pytest.approx([0.1, 0.2])
    assert keys["summary"] == {"param/w/norm", "param/w/mean", "param/w/std", "param/b",
                               "param/big/norm", "param/big/std"}
    assert keys["none"] == set()
    assert keys["all"] == {"param/w/0", "param/w/1", "param/w/2", "param/b", "param/big/norm",
                           "param/big/min", "param/big/std"}


@pytest.mark.slow
def test_a_summary_sends_a_parameter_at_a_hundred_steps_and_the_loss_at_every_step(
        server, tmp_path):
    """A 1,000-step run (run.json: total_steps): the default summary sends each statistic
    at the first step, every 10th and the last; the loss goes at every step; --params all
    sends every row (at every step a parameter's statistics were most of a sync's points)."""
    from mlflow.tracking import MlflowClient
    from mindexp import to_mlflow
    n = 1000
    rows = {f"w[{i}]": [0.001 * (k + i) for k in range(n)] for i in range(2)}
    client = MlflowClient(server)
    for params, steps in (("summary", [1] + list(range(10, n + 1, 10))),
                          ("all", list(range(1, n + 1)))):
        run_dir = make_run(tmp_path / params, "r-thin", losses=[1.0 / (k + 1) for k in range(n)],
                           params=rows, meta={"total_steps": n})
        [done] = to_mlflow(run_dir, server, params=params)
        rid = done["mlflow_run_id"]
        assert _steps(client, rid, "loss") == list(range(1, n + 1))
        key = "param/w/norm" if params == "summary" else "param/w/1"
        assert _steps(client, rid, key) == steps


@pytest.mark.slow
def test_a_sync_with_nothing_new_answers_from_the_local_record_without_mlflow(
        server, tmp_path, capsys, monkeypatch):
    run_dir = make_run(tmp_path, "r-noop", losses=[1.0, 0.5, 0.25])
    assert main(["mlflow", run_dir, "--tracking-uri", server]) == 0
    first = capsys.readouterr().out
    assert "(6 new metric points)" in first  # loss and lr
    monkeypatch.setitem(sys.modules, "mlflow", None)  # importing mlflow now fails
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    assert main(["mlflow", run_dir, "--tracking-uri", server]) == 0
    again = capsys.readouterr().out
    assert again == first.replace("(6 new", "(0 new")  # the same MLflow run, nothing sent
    with open(schema.path_of(run_dir, "loss"), "a", encoding="utf-8") as f:
        f.write("4,2,0.125,0.1,0.3\n")  # something new: sent over REST, still without mlflow
    assert main(["mlflow", run_dir, "--tracking-uri", server]) == 0
    assert "(2 new metric points)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_whose_process_is_gone_is_killed_and_every_rank_is_sent(server, tmp_path):
    """run.json says running but no process holds its lock: KILLED, as `runs` shows
    it; loss.rank1.csv and system.rank1.csv go as rank1/ metrics and as artifacts."""
    from mlflow.tracking import MlflowClient
    from mindexp import to_mlflow
    run_dir = make_run(tmp_path, "r-gone", status="running", losses=[1.0, 0.5])
    with open(os.path.join(run_dir, "loss.rank1.csv"), "w", encoding="utf-8") as f:
        f.write("step,epoch,loss,lr,time_s\n1,1,0.9,0.1,0.0\n2,1,0.4,0.1,0.1\n")
    with open(os.path.join(run_dir, "system.rank1.csv"), "w", encoding="utf-8") as f:
        f.write(",".join(schema.SYSTEM.required) + "\n0.0,1,50.0,75.0,100.0,4,0,0\n")
    [done] = to_mlflow(run_dir, server)
    client = MlflowClient(server)
    rid = done["mlflow_run_id"]
    assert client.get_run(rid).info.status == "KILLED"
    assert _metric(client, rid, "rank1/loss") == [(1, 0.9), (2, 0.4)]
    assert _metric(client, rid, "loss") == [(1, 1.0), (2, 0.5)]
    assert _metric(client, rid, "system/rank1/cpu_utilization_percentage") == [(1, 75.0)]
    assert _metric(client, rid, "system/rank1/rss_mb") == [(1, 100.0)]
    assert {"loss.rank1.csv", "system.rank1.csv"} <= {a.path for a in client.list_artifacts(rid)}


# -- the REST sync (an http(s) server): what it sends, retries, what it imports ---------

def _everything(client, run_id):
    """What an MLflow run holds, comparable across runs: params, tags (not the run's
    own id or name), every metric's points, status, times and every artifact's bytes."""
    found = client.get_run(run_id)
    metrics = {k: sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, k))
               for k in found.data.metrics}
    files, folders = {}, [None]
    while folders:
        for item in client.list_artifacts(run_id, folders.pop()):
            if item.is_dir:
                folders.append(item.path)
            else:
                with open(client.download_artifacts(run_id, item.path, dst_path=_scratch()),
                          "rb") as f:
                    files[item.path] = f.read()
    tags = {k: v for k, v in found.data.tags.items() if k not in ("mlflow.runName",)}
    return {"params": found.data.params, "tags": tags, "metrics": metrics, "files": files,
            "status": found.info.status, "start": found.info.start_time,
            "end": found.info.end_time, "name": found.info.run_name}


def _scratch():
    import tempfile
    return tempfile.mkdtemp(prefix="mlflow-artifact-")


def _three_runs(root):
    """Three runs to sync at once: the full one, a gone process's with rank 1's files,
    one whose params.csv holds an element-wise parameter."""
    dirs = [_one_run(root)]
    gone = make_run(root, "r-gone2", status="running", losses=[1.0, 0.5])
    with open(os.path.join(gone, "loss.rank1.csv"), "w", encoding="utf-8") as f:
        f.write("step,epoch,loss,lr,time_s\n1,1,0.9,0.1,0.0\n2,1,0.4,0.1,0.1\n")
    dirs.append(gone)
    dirs.append(make_run(root, "r-elements", losses=[1.0, 0.5, 0.2],
                         params={"w[0]": [0.5, 1.0, 1.5], "w[1]": [-1.0, 2.0, 0.25]}))
    return dirs


@pytest.mark.slow
def test_the_rest_sync_sends_what_mlflowclient_sends_and_again_nothing_twice(
        server, tmp_path, monkeypatch):
    """The same three runs, synced at once over MLflow's REST API (the default for an http
    server) and through MlflowClient (the transport before it), into two experiments:
    every point's step, value and timestamp, params, tags, status, times and artifact
    bytes equal. A re-sync that lost the local record finds the same MLflow runs and
    changes nothing."""
    import shutil
    from mlflow.tracking import MlflowClient
    from mindexp import to_mlflow
    from mindexp.analysis import mlflow_export
    from mindexp.analysis.mlflow_api import Client
    rest_dirs = _three_runs(tmp_path / "rest")
    client_dirs = []
    for d in rest_dirs:
        copy = str(tmp_path / "client" / os.path.relpath(d, tmp_path / "rest"))
        shutil.copytree(d, copy)
        client_dirs.append(copy)
    rest = to_mlflow(rest_dirs, server, experiment="via-rest")
    with monkeypatch.context() as m:
        m.setattr(mlflow_export, "_api", lambda uri: Client(uri))
        via_client = to_mlflow(client_dirs, server, experiment="via-client")
    client = MlflowClient(server)
    held = []
    for a, b in zip(rest, via_client):
        assert a["points"] == b["points"] > 0
        ours, theirs = _everything(client, a["mlflow_run_id"]), _everything(client,
                                                                           b["mlflow_run_id"])
        assert ours["metrics"] and ours["files"]
        assert ours == theirs
        held.append(ours)
    assert {h["status"] for h in held} == {"FINISHED", "KILLED"}
    for d in rest_dirs:
        os.remove(os.path.join(d, layout.MLFLOW_RECORD))  # the local record lost
    again = to_mlflow(rest_dirs, server, experiment="via-rest")
    assert [d["mlflow_run_id"] for d in again] == [d["mlflow_run_id"] for d in rest]
    for d, before in zip(again, held):  # each point once; run.json now names its MLflow run
        after = _everything(client, d["mlflow_run_id"])
        after["files"].pop(layout.RUN_JSON), before["files"].pop(layout.RUN_JSON)
        assert after == before


class _Flaky:
    """A proxy on 127.0.0.1 in front of the MLflow server that answers 503 to the first
    ``times`` batches of metric points and artifact uploads (a busy or restarting
    server), and forwards everything else."""

    def __init__(self, upstream, times=1, require=None):
        import http.server
        import threading
        self.upstream, self.refused, self.lock = upstream, [], threading.Lock()
        self.times = times
        self.require = require  # the Authorization header asked of every request (else 401)
        self.seen = []  # (method, path, Authorization header) of every request
        flaky = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                kind = flaky.kind(self.command, self.path, body)
                with flaky.lock:
                    flaky.seen.append((self.command, self.path, self.headers.get("Authorization")))
                    refuse = kind and flaky.refused.count(kind) < flaky.times
                    if refuse:
                        flaky.refused.append(kind)
                if flaky.require and self.headers.get("Authorization") != flaky.require:
                    with flaky.lock:
                        flaky.refused.append("unauthorized")
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if refuse:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, headers, answer = flaky.send(self.command, self.path, body, self.headers)
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("transfer-encoding", "connection", "content-length",
                                           "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def kind(method, path, body):
        """``points`` / ``artifact`` for the requests refused once, else None."""
        import json
        if method == "PUT" and "/mlflow-artifacts/artifacts/" in path:
            return "artifact"
        if path.endswith("/runs/log-batch") and body:
            metrics = json.loads(body).get("metrics") or []
            return "points" if any(m.get("step") for m in metrics) else None
        return None

    def send(self, method, path, body, headers):
        import urllib.error
        import urllib.request
        keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        request = urllib.request.Request(self.upstream + path, data=body or None, method=method,
                                         headers=keep)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.getheaders(), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.items(), exc.read()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_a_sync_tries_again_after_the_server_answers_503(server, tmp_path, monkeypatch):
    """Through a proxy that refuses the first batch of points and the first artifact
    upload with 503: the sync waits, tries again and the MLflow run holds every point
    and every artifact."""
    from mlflow.tracking import MlflowClient
    from mindexp import to_mlflow
    from mindexp.analysis import mlflow_api
    monkeypatch.setattr(mlflow_api, "BACKOFF_S", 0.01, raising=False)  # the pause: short here
    run_dir = _one_run(tmp_path)
    flaky = _Flaky(server)
    try:
        [done] = to_mlflow(run_dir, flaky.uri, experiment="retried")
    finally:
        flaky.close()
    assert sorted(flaky.refused) == ["artifact", "points"]
    client = MlflowClient(server)
    rid = done["mlflow_run_id"]
    assert _steps(client, rid, "loss") == list(range(1, STEPS + 1))
    assert len(client.get_metric_history(rid, "lr")) == STEPS
    assert {"loss.csv", "params.csv", "eval.csv", "system.csv", "config.json", "run.json",
            "figures"} <= {a.path for a in client.list_artifacts(rid)}


@pytest.mark.slow
def test_the_rest_sync_sends_mlflows_credentials_and_writes_them_nowhere(
        server, tmp_path, monkeypatch, capsys):
    """MLFLOW_TRACKING_USERNAME/PASSWORD go as the Authorization header of every call
    (artifact uploads included) and into no file of the run and no output."""
    import base64
    secret = "s3cret-Pa55-42"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", secret)
    from mindexp.analysis import mlflow_api
    monkeypatch.setattr(mlflow_api, "BACKOFF_S", 0.01, raising=False)  # the proxy's 503s
    run_dir = _one_run(tmp_path)
    flaky = _Flaky(server)
    try:
        assert main(["mlflow", run_dir, "--tracking-uri", flaky.uri, "--experiment", "auth"]) == 0
    finally:
        flaky.close()
    header = "Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()
    uploads = [s for s in flaky.seen if s[0] == "PUT"]
    assert uploads and {auth for _m, path, auth in flaky.seen if path.startswith("/api/")} == {
        header}
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert secret.encode() not in f.read(), name


def _files_hold(folder, secret):
    """The files below ``folder`` whose bytes hold ``secret``."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                if secret.encode() in f.read():
                    found.append(os.path.join(root, name))
    return found


@pytest.mark.slow  # a run in a subprocess, its live sender, the model's upload
def test_credentials_in_the_uri_reach_a_server_that_asks_for_them_and_stay_out_of_files(
        server, tmp_path, capsys):
    """``--mlflow http://alice:PASSWORD@HOST`` (a server behind Basic auth): the live
    sender streams, the end-of-run sync sends params, status and the model; then
    ``mindexp mlflow RUN --tracking-uri`` the same URI copies it again. Every request
    carries the header (none refused); the password is in no file and no output."""
    import base64
    from mlflow.tracking import MlflowClient
    from mindexp.analysis.mlflow_record import entry_of
    from mindexp.rundir.meta import read_meta
    import uuid
    secret = f"Pw-{uuid.uuid4().hex}"   # made here: in no file (a diff of this one, say)
    guard = _Flaky(server, times=0,
                   require="Basic " + base64.b64encode(f"alice:{secret}".encode()).decode())
    uri = guard.uri.replace("http://", f"http://alice:{secret}@")
    client = MlflowClient(server)
    try:
        run = _mindexp_proc(tmp_path, "run", "linear", "--set", "epochs=2", "--out",
                            tmp_path / "out", "--quiet", "--mlflow", uri,
                            MINDEXP_MLFLOW_POLL_S="0.1")
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0 and "does not answer" not in err, err
        [run_dir] = (tmp_path / "out" / "linear").iterdir()

        def finished():   # the sender's end-of-run sync, in a process of its own
            rid = entry_of(str(run_dir), uri).get("run_id")
            return rid and client.get_run(rid).info.status == "FINISHED" and rid
        _wait_for(finished, "the end-of-run sync through the guarded server", timeout=300)
        found = client.get_run(finished())
        assert found.data.params["epochs"] == "2" and len(client.get_metric_history(
            found.info.run_id, "loss")) == read_meta(str(run_dir))["steps"]
        assert entry_of(str(run_dir), uri).get("model_uri")   # the model went up too
        capsys.readouterr()
        assert main(["mlflow", str(run_dir), "--tracking-uri", uri, "--experiment",
                     "copied"]) == 0
        said = capsys.readouterr()
    finally:
        guard.close()
    assert guard.refused == [] and guard.seen
    assert secret not in out + err + said.out + said.err
    assert list(read_meta(str(run_dir))["mlflow"]) == [uri.replace(secret, "***")]
    assert _files_hold(run_dir, secret) == []


@pytest.mark.slow
def test_a_server_that_keeps_refusing_is_one_line_and_exit_2(server, tmp_path, monkeypatch,
                                                             capsys):
    from mindexp.analysis import mlflow_api
    monkeypatch.setattr(mlflow_api, "BACKOFF_S", 0.01, raising=False)
    run_dir = _one_run(tmp_path)
    flaky = _Flaky(server, times=100)
    try:
        assert main(["mlflow", run_dir, "--tracking-uri", flaky.uri, "--experiment",
                     "refused"]) == 2
    finally:
        flaky.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused 503" in err and run_dir in err
    assert flaky.refused.count("points") == 6  # the first try and RETRIES more


@pytest.mark.slow
def test_a_model_to_log_without_mlflow_installed_is_one_line_and_exit_2(
        server, tmp_path, monkeypatch, capsys):
    """Points and files go over REST without mlflow; a finished run's model needs it."""
    from mindexp.analysis import mlflow_export
    run_dir = make_run(tmp_path, "r-model", losses=[1.0, 0.5])
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"weights")
    monkeypatch.setattr(mlflow_export, "model_checkpoint", lambda run: str(checkpoint))
    monkeypatch.setitem(sys.modules, "mlflow", None)  # importing mlflow now fails
    assert main(["mlflow", run_dir, "--tracking-uri", server, "--experiment", "no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs mlflow to log a finished run's model" in err


PROBE = """
import json, runpy, sys
try:
    runpy.run_module("mindexp", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(json.dumps(sorted(m for m in ("mlflow", "pandas", "numpy") if m in sys.modules)),
      file=sys.stderr)
"""


def _command(*args):
    """``python -m mindexp ARGS`` in a new interpreter: (stdout, the modules of
    mlflow/pandas/numpy it imported)."""
    import json
    from conftest import cli_env
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], env=cli_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow  # new interpreters
def test_the_sync_as_a_command_imports_no_mlflow_and_the_no_op_nothing_heavy(server, tmp_path):
    """`mindexp mlflow RUN` as typed, a new interpreter: the first sync of a run without
    a checkpoint (no model to log) never imports mlflow; again with nothing new it
    reads run.json and the local record only: no mlflow, pandas or numpy."""
    run_dir = _one_run(tmp_path)
    out, imported = _command("mlflow", run_dir, "--tracking-uri", server)
    assert "new metric points" in out and "(0 new" not in out
    assert "mlflow" not in imported
    out, imported = _command("mlflow", run_dir, "--tracking-uri", server)
    assert "(0 new metric points)" in out
    assert imported == []


GATED = '''
import os, time
from mindexp.experiments.linear import Linear


class Gated(Linear):
    """Linear that waits at step $GATE_STEP (writes at-step there, waits for go) when $GATES is set."""

    def callbacks(self):
        from mindspore.train import Callback
        gates, at = os.environ.get("GATES"), os.environ.get("GATE_STEP")
        if not gates:
            return []

        class Gate(Callback):
            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                step = (p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1
                if str(step) == at:
                    open(os.path.join(gates, "at-step"), "w").close()
                    while not os.path.exists(os.path.join(gates, "go")):
                        time.sleep(0.005)
        return [Gate()]
'''


def _wait_for(condition, what, timeout=600):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _mindexp_proc(tmp_path, *args, **env):
    """``python -m mindexp ARGS``, a process of its own forked from the worker's fork
    server (tests/forkserver.py: MindSpore imported once, not once per process)."""
    import forkserver
    from conftest import cli_env
    return forkserver.popen([sys.executable, "-m", "mindexp", *map(str, args)], cwd=tmp_path,
                            env=cli_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_a_run_with_mlflow_streams_its_loss_while_it_trains(server, tmp_path):
    """Held at step 15 (epoch 2 of 3): MLflow already holds epoch 1's loss points; once it
    ends, the end-of-run sync makes the same MLflow run FINISHED, every step once."""
    from mlflow.tracking import MlflowClient
    (tmp_path / "gated.py").write_text(GATED)
    gates = tmp_path / "gates"
    gates.mkdir()
    run = _mindexp_proc(tmp_path, "run", tmp_path / "gated.py:Gated", "--set", "epochs=3",
                        "--set", "checkpoint_interval_s=0", "--out", tmp_path / "out",
                        "--quiet", "--mlflow", server, GATES=str(gates), GATE_STEP="15",
                        MINDEXP_MLFLOW_POLL_S="0.1")
    client = MlflowClient(server)
    try:
        _wait_for(lambda: (gates / "at-step").exists() or run.poll() is not None, "step 15")
        assert run.poll() is None, run.communicate()
        [run_dir] = (tmp_path / "out" / "linear").iterdir()

        def streamed():
            from mindexp.analysis.mlflow_record import entry_of
            rid = entry_of(str(run_dir), server).get("run_id")
            return rid and len(client.get_metric_history(rid, "loss")) >= 10 and rid
        _wait_for(streamed, "loss points in MLflow while the run is held")
        rid = streamed()
        assert client.get_run(rid).info.status == "RUNNING"
        assert run.poll() is None  # still held: these points came live
        (gates / "go").touch()
        out, err = run.communicate(timeout=600)
    finally:
        run.kill()
    assert run.returncode == 0, err
    _wait_for(lambda: client.get_run(rid).info.status == "FINISHED", "the end-of-run sync")
    assert _steps(client, rid, "loss") == list(range(1, 31))  # each step once
    found = client.get_run(rid)
    assert found.data.params["epochs"] == "3" and found.data.tags["mindexp.run_id"] == run_dir.name
    from mindexp.rundir.meta import read_meta
    assert read_meta(str(run_dir))["mlflow"] == {server: rid}


@pytest.mark.slow  # a run in a subprocess: its stderr and exit status
def test_a_dead_mlflow_server_costs_one_warning_and_the_run_completes(tmp_path):
    dead = f"http://127.0.0.1:{_free_port()}"
    run = _mindexp_proc(tmp_path, "run", "linear", "--set", "epochs=2", "--out",
                        tmp_path / "out", "--quiet", "--mlflow", dead, MINDEXP_MLFLOW_POLL_S="0.1")
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    assert err.count("does not answer") == 1, err
    [run_dir] = (tmp_path / "out" / "linear").iterdir()
    from mindexp.rundir.meta import read_meta
    meta = read_meta(str(run_dir))
    assert meta["status"] == "completed" and meta["mlflow"] == {dead: None}


def test_mlflow_without_a_uri_or_the_variable_is_one_line_and_exit_2(cli, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = cli("run", "linear", "--mlflow")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "MLFLOW_TRACKING_URI" in result.stderr


@pytest.mark.slow
def test_the_registered_model_predicts_what_mindexp_predict_predicts(server, tmp_path):
    """A real Linear run (its code captured from a file): `mindexp mlflow --register` logs
    its best checkpoint as a pyfunc model, printing its one line and nothing else; loaded
    back from the Model Registry it predicts what `mindexp predict` predicts on the same
    input (Linear keeps no best: the last)."""
    import numpy as np
    import mlflow
    from mindexp.use.predict import predict
    (tmp_path / "gated.py").write_text(GATED)
    assert main(["run", str(tmp_path / "gated.py") + ":Gated", "--set", "epochs=2",
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0
    [run_dir] = (tmp_path / "out" / "linear").iterdir()
    # as typed, in a process of its own (mlflow imported there afresh): the one line, and
    # of MLflow's own only the registry's lines naming the model (no warning that predict
    # has no type hints, no progress bar, no run URL, no INFO log)
    proc = _mindexp_proc(tmp_path, "mlflow", run_dir, "--tracking-uri", server,
                         "--register", "linear-model")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    [line] = out.splitlines()
    assert line.startswith(f"{run_dir} -> MLflow run ") and line.endswith(" new metric points)")
    assert err and all("'linear-model'" in line for line in err.splitlines()), err
    x = np.array([[0.0], [0.5], [-2.0]], np.float32)
    mlflow.set_tracking_uri(server)
    version = max(int(v.version) for v in
                  mlflow.MlflowClient(server).search_model_versions("name='linear-model'"))
    got = mlflow.pyfunc.load_model(f"models:/linear-model/{version}").predict(x)
    from mindexp.analysis.mlflow_export import model_checkpoint
    from mindexp.rundir.run import Run
    assert model_checkpoint(Run(str(run_dir))) == Run(str(run_dir)).checkpoint()  # no best kept
    np.testing.assert_allclose(np.asarray(got), predict(str(run_dir), x))  # `mindexp predict`'s


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_model_of_a_run_with_an_input_transform_predicts_from_raw_inputs(server, tmp_path):
    """The model carries the run's fitted input transform (input_transform.npz): on raw
    inputs it predicts what `mindexp predict` predicts, which standardizes them."""
    import numpy as np
    import mlflow
    from mindexp.use.predict import predict
    import importlib.util
    spec = importlib.util.spec_from_file_location(  # the experiment of the transform's own tests
        "input_transform_tests", os.path.join(os.path.dirname(__file__), os.pardir, "use",
                                              "test_input_transform.py"))
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    (tmp_path / "scaled.py").write_text(tests.SCALED)
    assert main(["run", str(tmp_path / "scaled.py") + ":Scaled", "--out", str(tmp_path / "out"),
                 "--quiet"]) == 0
    [run_dir] = (tmp_path / "out" / "scaled").iterdir()
    assert (run_dir / "input_transform.npz").is_file()
    assert main(["mlflow", str(run_dir), "--tracking-uri", server]) == 0
    mlflow.set_tracking_uri(server)
    [found] = mlflow.search_runs(experiment_names=["scaled"], output_format="list")
    model = mlflow.pyfunc.load_model(f"runs:/{found.info.run_id}/model")
    x = np.array([[50.0, -3.0, 1000.0], [70.0, -2.9, 400.0]], np.float32)
    np.testing.assert_allclose(np.asarray(model.predict(x)), predict(str(run_dir), x), rtol=1e-6)


# -- a sweep or a tune study as a parent run, its runs as children ----------------------

from searches import forked_workers, wait_for  # noqa: E402,F401  (autouse: workers forked)


def _parents(client, experiment_id, key):
    return client.search_runs([experiment_id], filter_string=f"tags.`mindexp.group` = '{key}'")


def _children(client, experiment_id, parent_id):
    return client.search_runs([experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")


def _synced(run_dirs, uri):
    """Every run's live sender finished its end-of-run sync (its local record whole)."""
    from mindexp.analysis.mlflow_record import entry_of
    return all(entry_of(str(d), uri).get("fingerprint") for d in run_dirs)


@pytest.mark.slow
def test_a_sweep_with_mlflow_is_a_parent_run_whose_children_are_its_runs(server, cli, tmp_path):
    """`sweep --mlflow`: one parent run (its grid as params, its best final loss, FINISHED),
    each point's run streamed as its child; `mindexp mlflow <sweep folder>` afterwards
    makes no second parent and links the same children."""
    import json
    from mlflow.tracking import MlflowClient
    out = tmp_path / "out"
    done = cli("sweep", "linear", "--grid", "lr=0.01,0.1", "--set", "epochs=1", "--workers", "1",
               "--out", out, "--mlflow", server)
    assert done.returncode == 0, done.stderr
    [folder] = (out / "sweeps").iterdir()
    record = json.loads((folder / "sweep.json").read_text())
    losses = {r["run_id"]: r["final_loss"] for r in record["runs"]}
    wait_for(lambda: _synced([r["run_dir"] for r in record["runs"]], server), "the senders' syncs")
    client = MlflowClient(server)
    exp = client.get_experiment_by_name("linear").experiment_id
    [parent] = _parents(client, exp, f"sweep:{folder.name}")
    assert parent.info.run_name == folder.name and parent.info.status == "FINISHED"
    assert parent.data.params["grid.lr"] == "0.01,0.1" and parent.data.params["set.epochs"] == "1"
    assert parent.data.metrics["best_final_loss"] == pytest.approx(min(losses.values()))
    assert parent.data.tags["mindexp.best_run"] == min(losses, key=losses.get)
    kids = _children(client, exp, parent.info.run_id)
    assert sorted(k.data.tags["mindexp.run_id"] for k in kids) == sorted(losses)
    assert {k.info.status for k in kids} == {"FINISHED"}
    assert main(["mlflow", str(folder), "--tracking-uri", server]) == 0
    assert len(_parents(client, exp, f"sweep:{folder.name}")) == 1  # idempotent
    assert len(_children(client, exp, parent.info.run_id)) == 2
    for run_id in losses:  # no second copy of a child either
        assert len(client.search_runs([exp], f"tags.`mindexp.run_id` = '{run_id}'")) == 1


@pytest.mark.slow
def test_a_tune_study_with_mlflow_is_a_parent_run_found_again_by_a_later_sync(
        server, cli, tmp_path):
    """`tune --mlflow`: the study's parent run holds its space, objective and best value,
    each trial's run is its child; a later `mindexp mlflow <study folder>` that lost the
    folder's local record finds the same parent by its tag (no duplicate)."""
    from mlflow.tracking import MlflowClient
    from mindexp.rundir.meta import read_meta
    out = tmp_path / "out"
    done = cli("tune", "linear", "--param", "lr=loguniform:0.001:0.01", "--trials", "2",
               "--set", "epochs=1", "--seed", "0", "--study", "s-mlflow", "--out", out,
               "--mlflow", server)
    assert done.returncode == 0, done.stderr
    folder = out / "studies" / "s-mlflow"
    run_dirs = sorted((folder / "linear").iterdir())
    assert len(run_dirs) == 2
    wait_for(lambda: _synced(run_dirs, server), "the senders' syncs")
    client = MlflowClient(server)
    exp = client.get_experiment_by_name("linear").experiment_id
    [parent] = _parents(client, exp, "study:s-mlflow")
    losses = {d.name: read_meta(str(d))["final_loss"] for d in run_dirs}
    assert parent.info.status == "FINISHED"
    assert parent.data.params["space.lr"] == "loguniform:0.001:0.01"
    assert parent.data.params["objective"] == "final_loss"
    assert parent.data.metrics["best_value"] == pytest.approx(min(losses.values()))
    assert parent.data.tags["mindexp.best_run"] == min(losses, key=losses.get)
    kids = _children(client, exp, parent.info.run_id)
    assert sorted(k.data.tags["mindexp.run_id"] for k in kids) == sorted(losses)
    (folder / layout.MLFLOW_RECORD).unlink()  # the folder's local record lost
    assert main(["mlflow", str(folder), "--tracking-uri", server]) == 0
    assert [p.info.run_id for p in _parents(client, exp, "study:s-mlflow")] == [parent.info.run_id]
    assert len(_children(client, exp, parent.info.run_id)) == 2


@pytest.mark.slow
def test_a_sweep_synced_afterwards_is_a_parent_run_and_again_nothing_new_without_mlflow(
        server, cli, tmp_path, capsys, monkeypatch):
    from mlflow.tracking import MlflowClient
    out = tmp_path / "out"
    done = cli("sweep", "linear", "--grid", "optimizer=sgd,adam", "--set", "epochs=1",
               "--workers", "1", "--out", out)
    assert done.returncode == 0, done.stderr
    [folder] = (out / "sweeps").iterdir()
    assert main(["mlflow", str(folder), "--tracking-uri", server, "--experiment", "later"]) == 0
    first = capsys.readouterr().out
    client = MlflowClient(server)
    exp = client.get_experiment_by_name("later").experiment_id
    [parent] = _parents(client, exp, f"sweep:{folder.name}")
    assert parent.data.params["grid.optimizer"] == "sgd,adam"
    assert parent.info.status == "FINISHED"
    kids = _children(client, exp, parent.info.run_id)
    assert sorted(k.data.tags["mindexp.run_id"] for k in kids) == sorted(
        d.name for d in (out / "linear").iterdir())
    monkeypatch.setitem(sys.modules, "mlflow", None)  # importing mlflow now fails
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    assert main(["mlflow", str(folder), "--tracking-uri", server, "--experiment", "later"]) == 0
    assert capsys.readouterr().out.count("(0 new metric points)") == 2
    assert first.count("new metric points") == 2


def test_mlflow_is_quiet_inside_the_block_and_the_users_own_settings_stay():
    """quiet_mlflow sets MLflow's switches the user did not set, for the block only
    (a value the user set stays as it is), raises MLflow's loggers for the block only,
    and puts both back when the block raises."""
    import logging
    from mindexp.analysis.mlflow_api import quiet_mlflow
    bar, url = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
    registry = logging.getLogger("mlflow.store.model_registry")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(bar, "true")   # the user's own choice
        patch.delenv(url, raising=False)
        patch.setattr(registry, "level", logging.NOTSET)
        with pytest.raises(KeyError), quiet_mlflow():
            assert (os.environ[bar], os.environ[url]) == ("true", "true")
            assert registry.getEffectiveLevel() == logging.WARNING
            raise KeyError("a failing upload")
        assert os.environ[bar] == "true" and url not in os.environ
        assert registry.level == logging.NOTSET


def test_only_mlflows_note_on_predicts_type_hints_is_dropped():
    from mindexp.analysis.mlflow_api import drop_type_hint_note
    shown = []
    show = drop_type_hint_note(lambda message, category, *rest: shown.append(str(message)))
    show(UserWarning("\x1b[33mAdd type hints to the `predict` method to enable ...\x1b[0m"),
         UserWarning, "data_validation.py", 187)
    show(UserWarning("a warning of the user's"), UserWarning, "theirs.py", 1)
    assert shown == ["a warning of the user's"]
