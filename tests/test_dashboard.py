"""mindexp serve: the JSON API, path safety, runs changing under it, the command."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from conftest import cli_env
from mindexp.analysis.dashboard import make_server, url_of
from mindexp.cli.main import main
from rundirs import make_run


@pytest.fixture
def served(tmp_path):
    """A dashboard over tmp_path/runs in a thread; yields (root, get(path) -> (status, body))."""
    root = tmp_path / "runs"
    root.mkdir()
    server = make_server([str(root)], port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    host, port = server.server_address[:2]

    def get(path):
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("GET", path)  # sent as is: no client-side normalisation of ".."
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body
    yield root, get
    server.shutdown()
    server.server_close()


def _data(get, query=""):
    status, body = get("/api/data" + query)
    assert status == 200, body
    return json.loads(body)


def test_binds_to_this_machine_only_by_default(tmp_path):
    server = make_server([str(tmp_path)], port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        assert url_of(server).startswith("http://127.0.0.1:")
    finally:
        server.server_close()


def test_api_lists_runs_with_status_and_progress(served):
    root, get = served
    make_run(root, "20260101-000000-a-aaaaaa", status="running", losses=[1.0, 0.5, 0.4, 0.3],
             meta={"total_steps": 10})
    data = _data(get)
    (run,) = data["runs"]
    assert run["status"] == "running" and run["short"] == "a-aaaaaa"
    assert run["progress"]["step"] == 4 and run["progress"]["total"] == 10
    assert run["progress"]["steps_per_s"] == pytest.approx(10.0)  # time_s goes 0.1 a step
    assert run["progress"]["eta_s"] == pytest.approx(0.6)
    assert run["page"] == "/run/0/toy/20260101-000000-a-aaaaaa"
    status, page = get(run["page"])
    assert status == 200 and b'"run": "0/toy/' not in page and b"/api/data?run=" in page


def test_unchanged_runs_answer_unchanged_and_new_rows_show_next_poll(served):
    root, get = served
    run_dir = make_run(root, "r1", status="running", losses=[1.0, 0.5])
    first = _data(get)
    again = _data(get, f"?since={first['version']}")
    assert again == {"unchanged": True, "version": first["version"]}
    with open(os.path.join(run_dir, "loss.csv"), "a") as f:
        f.write("3,2,0.25,0.1,0.2\n")
    later = _data(get, f"?since={first['version']}")
    assert later["runs"][0]["progress"]["step"] == 3


def test_runs_created_half_written_and_deleted_never_break_the_server(served):
    root, get = served
    make_run(root, "good")
    half = make_run(root, "half")
    with open(os.path.join(half, "run.json"), "w") as f:
        f.write('{"experiment": "toy", "run_id": "ha')  # mid-write
    data = _data(get)
    assert [r["id"] for r in data["runs"]] == ["good"]
    assert data["skipped"][0]["dir"].endswith("half")
    make_run(root, "half")  # the write finished
    assert sorted(r["id"] for r in _data(get)["runs"]) == ["good", "half"]
    shutil.rmtree(half)
    assert [r["id"] for r in _data(get)["runs"]] == ["good"]
    shutil.rmtree(root / "toy")
    assert _data(get)["runs"] == []


@pytest.mark.parametrize("path", [
    "/files/0/../secret.txt", "/files/0/%2e%2e/secret.txt", "/files/0/%2E%2E%2Fsecret.txt",
    "/files/0/toy/r1/../../../secret.txt", "/files/0//etc/passwd", "/files/0/%2Fetc%2Fpasswd",
    "/files/1/secret.txt", "/files//etc/passwd", "/files/0/toy/r1/link/secret.txt",
    "/files/0/toy/r1/linkfile", "/run/0/..%2F..", "/api/data?run=0/../..",
])
def test_paths_outside_the_served_folders_are_refused(served, path):
    root, get = served
    run_dir = make_run(root, "r1")
    (root.parent / "secret.txt").write_text("top secret")
    os.symlink(root.parent, os.path.join(run_dir, "link"))
    os.symlink(root.parent / "secret.txt", os.path.join(run_dir, "linkfile"))
    status, body = get(path)
    assert status == 403 and b"secret" not in body and b"root:" not in body


def test_double_encoded_dots_are_a_name_not_a_way_up(served):
    root, get = served
    make_run(root, "r1")
    (root.parent / "secret.txt").write_text("top secret")
    status, body = get("/files/0/%252e%252e/secret.txt")
    assert status == 404 and b"secret" not in body


def test_run_files_are_served_read_only_as_text(served):
    root, get = served
    make_run(root, "r1")
    status, body = get("/files/0/toy/r1/loss.csv")
    assert status == 200 and body.startswith(b"step,epoch,loss")
    status, listing = get("/files/0/toy/r1/")
    assert status == 200 and b"run.json" in listing
    conn_status, _ = get("/no/such/page")
    assert conn_status == 404


def test_serve_prints_the_url_of_port_0_and_ctrl_c_ends_it_cleanly(tmp_path):
    make_run(tmp_path, "r1")
    proc = subprocess.Popen([sys.executable, "-m", "mindexp", "serve", str(tmp_path), "--port",
                             "0"], env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"mindexp dashboard of {tmp_path} at http://127.0.0.1:"), line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/api/data")
        assert json.loads(conn.getresponse().read())["runs"][0]["id"] == "r1"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


def test_serve_ends_cleanly_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "mindexp", "serve", str(tmp_path), "--port",
                             "0"], env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert "http://127.0.0.1:" in proc.stdout.readline()  # printed once signals are handled
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and err == ""


def test_serve_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nope"), "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"mindexp: error: cannot serve {tmp_path / 'nope'}: it is not a folder. "
        f"Received: '{tmp_path / 'nope'}'")
    assert main(["serve", str(tmp_path), "--port", "70000"]) == 2
    assert "must be an integer from 0 to 65535" in capsys.readouterr().err
    busy = make_server([str(tmp_path)], port=0)
    try:
        port = busy.server_address[1]
        assert main(["serve", str(tmp_path), "--port", str(port)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"mindexp: error: cannot listen on 127.0.0.1:{port}") \
            and "--port" in err and len(err.splitlines()) == 1
    finally:
        busy.server_close()
