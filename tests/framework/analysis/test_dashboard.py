"""mindexp serve: the JSON API, path safety, runs changing under it, the command."""
import base64
import contextlib
import hashlib
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

import forkserver
from conftest import cli_env
from mindexp.analysis.dashboard import make_server, url_of
from mindexp.cli.main import main
from rundirs import make_run


@contextlib.contextmanager
def _serve(root):
    """A dashboard over ``root`` in a thread; yields get(path) -> (status, body),
    whose ``address`` is the server's (host, port)."""
    server = make_server([str(root)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    host, port = server.server_address[:2]

    def get(path):
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("GET", path)  # sent as is: no client-side normalisation of ".."
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body
    get.address = (host, port)
    get.index = server.RequestHandlerClass.index
    try:
        yield get
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(tmp_path):
    """A dashboard over tmp_path/runs in a thread; yields (root, get(path) -> (status, body))."""
    root = tmp_path / "runs"
    root.mkdir()
    with _serve(root) as get:
        yield root, get


def _json(get, path):
    """The JSON answer to a GET of ``path``, which must succeed."""
    status, body = get(path)
    assert status == 200, body
    return json.loads(body)


def _data(get, query=""):
    return _json(get, "/api/data" + query)


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


def _ctrl_c_as_in_a_terminal():
    """A child's SIGINT as a terminal's shell gives it: the default. A disposition
    of "ignored" survives exec, and CPython then leaves SIGINT ignored; twice in
    full runs (never alone) the xdist worker held it so, from a source not found,
    and the server rightly stayed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_serving(folder, *args):
    """``mindexp serve FOLDER --port 0 ARGS`` in a subprocess; returns (proc, port).

    PYTHONFAULTHANDLER: a server that does not stop is sent SIGABRT by
    :func:`_stop`, which dumps every thread's stack to its stderr.
    """
    proc = forkserver.popen([sys.executable, "-m", "mindexp", "serve", str(folder), "--port",
                             "0", *args], env=cli_env(PYTHONFAULTHANDLER="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    line = proc.stdout.readline()  # printed once both signals are handled
    if " at http://" not in line:
        proc.kill()
        pytest.fail(f"no URL printed: {line!r}; stderr: {proc.communicate()[1]}")
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def _stop(proc, sig, timeout=30):
    """Send ``sig`` and wait; a server still running is made to dump its threads
    (SIGABRT under PYTHONFAULTHANDLER) and the test fails with its stderr."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            err = proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
        pytest.fail(f"the server was still running {timeout} s after signal {sig}; its threads "
                    f"and stderr:\n{err}")


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_serve_prints_the_url_of_port_0_and_ctrl_c_ends_it_cleanly(tmp_path):
    make_run(tmp_path, "r1")
    proc, port = _start_serving(tmp_path)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/api/data")
        assert json.loads(conn.getresponse().read())["runs"][0]["id"] == "r1"
        out, err = _stop(proc, signal.SIGINT)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


def test_serve_ends_cleanly_on_sigterm(tmp_path):
    proc, _ = _start_serving(tmp_path)
    try:
        out, err = _stop(proc, signal.SIGTERM)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and err == ""


def _sparse_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)  # no disk space used, read back as zeros


def test_ctrl_c_stops_the_server_while_a_slow_client_reads_a_big_file(tmp_path):
    run_dir = make_run(tmp_path, "r1")
    _sparse_file(os.path.join(run_dir, "big.bin"), 256 * 2**20)
    proc, port = _start_serving(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
            slow.sendall(f"GET /files/0/toy/r1/big.bin HTTP/1.0\r\nHost: 127.0.0.1:{port}"
                         "\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:  # the server is sending the body now
                head += slow.recv(4096)
            assert head.startswith(b"HTTP/1.0 200")  # and the client reads no more
            out, err = _stop(proc, signal.SIGINT)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_ctrl_c_stops_the_server_while_pages_poll(tmp_path):
    for i in range(8):
        make_run(tmp_path, f"r{i}", losses=[1.0 / (k + 1) for k in range(200)])
    proc, port = _start_serving(tmp_path)
    answered, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/api/data")  # no ?since=: every poll loads the runs
                answered.append(conn.getresponse().status)
                conn.close()
            except OSError:
                return  # the server went away
    pollers = [threading.Thread(target=poll, daemon=True) for _ in range(4)]
    try:
        for t in pollers:
            t.start()
        while len(answered) < 8 and proc.poll() is None:
            threading.Event().wait(0.05)
        out, err = _stop(proc, signal.SIGINT)
    finally:
        stop.set()
        proc.kill()
    assert set(answered) == {200}
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


def test_the_server_process_ends_once_its_socket_is_closed_whatever_threads_remain(tmp_path):
    """A thread that would never end (as pyarrow's CSV reader threads can hang an
    interpreter's exit, apache/arrow#33975) does not keep the stopped server alive."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import threading\nthreading.Thread(target=threading.Event().wait, daemon=False,"
        " name='never-ends').start()\n")
    proc = forkserver.popen([sys.executable, "-m", "mindexp", "serve", str(tmp_path), "--port",
                             "0"], env=cli_env(PYTHONFAULTHANDLER="1",
                                               PYTHONPATH=f"{hook}{os.pathsep}"
                                               f"{cli_env()['PYTHONPATH']}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        assert " at http://" in proc.stdout.readline()
        out, err = _stop(proc, signal.SIGINT)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


def test_binding_beyond_this_machine_prints_a_warning(tmp_path):
    proc, port = _start_serving(tmp_path, "--host", "0.0.0.0")
    try:
        out, err = _stop(proc, signal.SIGTERM)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert err.strip() == (f"mindexp: warning: listening on 0.0.0.0:{port}, so every file of "
                           "the served runs is readable by anyone on the network who can reach "
                           "this machine (no password); --host 127.0.0.1 keeps them to this "
                           "machine")


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


def _request(address, path, host="default"):
    """GET ``path`` with the Host header ``host`` (None: none sent); (status, headers, body)."""
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.putrequest("GET", path, skip_host=True)
    if host is not None:
        conn.putheader("Host", f"{address[0]}:{address[1]}" if host == "default" else host)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.headers, body


def test_paths_into_a_sibling_folder_with_the_same_prefix_are_refused(served):
    root, get = served
    run_dir = make_run(root, "r1")
    sibling = root.parent / (root.name + "-private")  # runs-private beside runs
    sibling.mkdir()
    (sibling / "secret.txt").write_text("top secret")
    os.symlink(sibling, os.path.join(run_dir, "sibling"))
    for path in ("/files/0/../runs-private/secret.txt", "/files/0/toy/r1/sibling/secret.txt",
                 "/files/0/toy/r1/sibling/", "/api/data?run=0/../runs-private"):
        status, body = get(path)
        assert status == 403 and b"secret" not in body, path


@pytest.mark.parametrize("name, kind", [
    ("plot.svg", "text/plain; charset=utf-8"), ("page.xhtml", "text/plain; charset=utf-8"),
    ("page.html", "text/plain; charset=utf-8"), ("code.js", "text/plain; charset=utf-8"),
    ("loss.csv", "text/plain; charset=utf-8"), ("model.ckpt", "application/octet-stream"),
    ("page.htm.bin", "application/octet-stream"), ("curve.png", "image/png"),
    ("photo.jpeg", "image/jpeg"), ("anim.gif", "image/gif"), ("pic.webp", "image/webp"),
])
def test_run_files_are_served_inert(served, name, kind):
    root, get = served
    run_dir = make_run(root, "r1")
    planted = b"<svg xmlns='http://www.w3.org/2000/svg'><script>fetch('/api/data')</script></svg>"
    with open(os.path.join(run_dir, name), "wb") as f:
        f.write(planted)
    status, headers, body = _request(get.address, f"/files/0/toy/r1/{name}")
    assert status == 200 and body == planted
    assert headers["Content-Type"] == kind and headers["X-Content-Type-Options"] == "nosniff"
    assert ("sandbox" in headers["Content-Security-Policy"]) and \
        headers["Content-Security-Policy"].startswith("default-src 'none'")
    if kind == "application/octet-stream":
        assert headers["Content-Disposition"] == f"attachment; filename*=UTF-8''{name}"
    else:
        assert headers["Content-Disposition"] is None


@pytest.mark.parametrize("path", ["/", "/run/0/toy/r1", "/api/data", "/files/0/toy/r1/",
                                  "/files/0/toy/r1/loss.csv", "/static/plotly.min.js",
                                  "/no/such/page", "/files/0/../x"])
def test_every_response_carries_the_security_headers(served, path):
    root, get = served
    make_run(root, "r1")
    status, headers, body = _request(get.address, path)
    assert status in (200, 403, 404)
    csp = headers["Content-Security-Policy"]
    assert csp.startswith("default-src 'none'") and "frame-ancestors 'none'" in csp
    assert headers["X-Frame-Options"] == "DENY" and headers["Referrer-Policy"] == "no-referrer"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "http:" not in csp and "https:" not in csp and "*" not in csp  # nothing from elsewhere


def _raw(address, data):
    """Send ``data`` as is on a new connection; the whole answer (the server closes)."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# The standard library's own error pages: its parser answers these before any handler.
RAW_REQUESTS = {
    "bad-request-line": (b"GET /\x01 HTTP/1.1 x\r\nHost: 127.0.0.1\r\n\r\n", 400),
    "http-0.9": (b"GET /\r\n\r\n", 505),  # an HTTP/0.9 answer would carry no header at all
    "too-long-uri": (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    "too-long-header": (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 70_000
                        + b"\r\n\r\n", 431),
    "too-many-headers": (b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 150 + b"\r\n", 431),
    "unknown-method": (b"BREW / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 501),
    "http-2.0": (b"GET / HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
}


@pytest.mark.parametrize("case", sorted(RAW_REQUESTS))
def test_the_standard_librarys_error_pages_carry_the_security_headers(served, case):
    data, code = RAW_REQUESTS[case]
    _, get = served
    answer = _raw(get.address, data)
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    assert head[0].startswith("HTTP/1.") and f" {code} " in head[0] + " ", head[0]
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
    assert headers.get("content-security-policy", "").startswith("default-src 'none'"), head
    assert "sandbox" in headers["content-security-policy"]
    assert headers.get("x-frame-options") == "DENY" and headers.get("x-content-type-options") \
        == "nosniff" and headers.get("referrer-policy") == "no-referrer", head
    assert headers.get("cache-control") == "no-store", head


def test_drawn_runs_kept_in_memory_are_bounded_in_bytes_and_freed_when_gone(tmp_path):
    from mindexp.analysis.dashboard import RunIndex, run_bytes
    root = tmp_path / "runs"
    dirs = [make_run(root, f"r{i}", losses=[1.0 / (k + 1) for k in range(3000)])
            for i in range(6)]
    index = RunIndex([str(root)], cache_bytes=1)
    one = run_bytes(index.load([os.path.realpath(dirs[0])])[0][0])
    assert one > 3000 * 8  # its loss table at least: the measure counts the tables
    index = RunIndex([str(root)], cache_bytes=int(2.5 * one))  # room for two of them
    for run_dir in dirs:
        runs, errors = index.load([os.path.realpath(run_dir)])
        assert len(runs) == 1 and not errors
        assert index.cache.bytes <= int(2.5 * one)
    kept = [d for d in dirs if os.path.realpath(d) in index.cache]
    assert kept == dirs[-2:]  # the least recently drawn went first
    shutil.rmtree(dirs[-1])
    index.data()  # a full poll: the removed run's tables are freed
    assert os.path.realpath(dirs[-1]) not in index.cache and len(index.cache) <= 2


def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_memory_of_a_removed_big_run_goes_back_to_the_system(tmp_path):
    """The server's RSS, not just its cache's count: a drawn 1,000,000-step run,
    removed, leaves the process near where it was (pyarrow's own pool and the C
    allocator kept a 129 MB loss.csv's 330 MB for good)."""
    make_run(tmp_path, "small")
    big = make_run(tmp_path, "big")
    with open(os.path.join(big, "loss.csv"), "w") as f:
        f.write("step,epoch,loss,lr,time_s\n")
        f.writelines(f"{i},{i // 1000 + 1},{1.0 / i:.6f},0.1,{i * 1e-3:.3f}\n"
                     for i in range(1, 1_000_001))
    proc, port = _start_serving(tmp_path)
    try:
        get = lambda path: _request(("127.0.0.1", port), path)[0]  # noqa: E731
        assert get("/api/data?run=0/toy/small") == 200
        before = _rss_mb(proc.pid)
        assert get("/api/data?run=0/toy/big") == 200
        peak = _rss_mb(proc.pid)
        shutil.rmtree(big)
        assert get("/api/data") == 200  # the poll that sees it gone
        # returned when that answer's thread ends, just after the client has it; kept
        # for good before (all of it); Python's small-object arenas keep 15-50 % now
        deadline = time.monotonic() + 30
        while (after := _rss_mb(proc.pid)) - before >= 0.75 * (peak - before) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _stop(proc, signal.SIGTERM)
    assert peak - before > 40, (before, peak)  # it was drawn: its tables took memory
    assert after - before < 0.75 * (peak - before), (before, peak, after)


def test_the_page_runs_only_its_own_script_by_hash(served):
    root, get = served
    make_run(root, "r1")
    for path in ("/", "/run/0/toy/r1"):
        status, headers, body = _request(get.address, path)
        directives = dict(d.strip().split(" ", 1) for d in
                          headers["Content-Security-Policy"].split(";") if " " in d.strip())
        scripts = re.findall(r"<script>(.*?)</script>", body.decode(), flags=re.S)
        assert len(scripts) == 1 and "<script src=" not in body.decode()  # page.js only
        digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
        assert directives["script-src"].split() == ["'self'", f"'sha256-{digest}'"]
        assert b'"plotly":"/static/plotly.min.js"' in body   # loaded by page.js, same origin


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:{port}",
                                  "127.0.0.1:{other}", "localhost.evil.example.com:{port}",
                                  "127.0.0.1", "", None])
def test_a_host_header_naming_another_server_is_refused(served, host):
    root, get = served
    make_run(root, "r1")
    port = get.address[1]
    host = host.format(port=port, other=port + 1) if host is not None else None
    for path in ("/", "/api/data", "/files/0/toy/r1/loss.csv"):
        status, _, body = _request(get.address, path, host=host)
        assert status == 403 and b"r1" not in body and b"step" not in body, (host, path)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}",
                                  "[::1]:{port}"])
def test_a_host_header_naming_this_server_is_answered(served, host):
    root, get = served
    make_run(root, "r1")
    status, _, body = _request(get.address, "/api/data",
                               host=host.format(port=get.address[1]))
    assert status == 200 and json.loads(body)["runs"][0]["id"] == "r1"


def test_a_fifo_in_a_run_folder_is_refused_without_hanging(served):
    root, get = served
    run_dir = make_run(root, "r1")
    os.mkfifo(os.path.join(run_dir, "pipe.csv"))
    status, body = get("/files/0/toy/r1/pipe.csv")  # 30 s client timeout: a hang fails
    assert status == 403 and b"not a regular file" in body
    assert get("/files/0/toy/r1/loss.csv")[0] == 200


def test_big_files_are_streamed_not_read_into_memory(served):
    root, get = served
    run_dir = make_run(root, "r1")
    size = 64 * 2**20
    _sparse_file(os.path.join(run_dir, "big.bin"), size)
    conn = http.client.HTTPConnection(*get.address, timeout=30)
    tracemalloc.start()
    try:
        conn.request("GET", "/files/0/toy/r1/big.bin")
        response = conn.getresponse()
        received = 0
        while chunk := response.read(2**20):
            received += len(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        conn.close()
    assert response.status == 200 and received == size
    assert int(response.headers["Content-Length"]) == size
    assert peak < size / 8, f"{peak} bytes held while serving {size}"


def _changes(get, cursor=""):
    status, body = get(f"/api/changes?cursor={cursor}")
    assert status == 200, body
    return json.loads(body), len(body)


def test_a_poll_with_the_cursor_returns_exactly_what_changed(served):
    root, get = served
    make_run(root, "r1", status="running", losses=(1.0, 0.5))
    first, _ = _changes(get)                         # no cursor: "now", nothing listed
    quiet, size = _changes(get, first["cursor"])
    assert quiet["cursor"] == first["cursor"] and size < 200
    assert not (quiet["new"] or quiet["status"] or quiet["removed"] or quiet["rows"])
    with open(root / "toy" / "r1" / "loss.csv", "a") as f:   # two new rows, one half-written
        f.write("3,2,0.25,0.1,0.2\n4,2,0.125,0.1,0.3\n5,3,0.0")
    make_run(root, "r2")
    poll, _ = _changes(get, first["cursor"])
    assert [r["run_id"] for r in poll["new"]] == ["r2"]
    assert poll["rows"] == {"0/toy/r1": {"loss": [["3", "2", "0.25", "0.1", "0.2"],
                                                  ["4", "2", "0.125", "0.1", "0.3"]]}}
    with open(root / "toy" / "r1" / "loss.csv", "a") as f:   # the row ends: sent once, whole
        f.write("625,0.1,0.4\n")
    shutil.rmtree(root / "toy" / "r2")
    last, _ = _changes(get, poll["cursor"])
    assert last["rows"] == {"0/toy/r1": {"loss": [["5", "3", "0.0625", "0.1", "0.4"]]}}
    assert last["removed"] == ["0/toy/r2"] and not last["new"]
    assert _changes(get, last["cursor"] + 5)[0]["reset"]   # a cursor this server never gave


def test_system_log_is_read_only_where_it_is_drawn(served):
    root, get = served
    header = "time_s,step,process_cpu_percent,machine_cpu_percent,rss_mb,threads," \
        "read_bytes,write_bytes\n"
    for name in ("a", "b"):
        with open(os.path.join(make_run(root, name), "system.csv"), "w") as f:
            f.write(header + "0.1,1,50,60,100,4,0,0\n0.2,2,55,65,110,4,0,0\n")
    overview = _data(get, "?runs=0/toy/a,0/toy/b")   # two runs: no system panels
    assert not [f for f in overview["figures"] if f["id"].startswith("system:")]
    assert not [d for d in get.index.cache.folders()
                if "system_by_rank" in vars(get.index.cache._entries[d][1])]
    alone = _data(get, "?run=0/toy/a")   # a run's own page draws it (its cached run read more)
    assert "system:rss_mb" in [f["id"] for f in alone["figures"]]


def test_a_log_made_after_the_run_was_seen_comes_with_its_header(served):
    root, get = served
    run = make_run(root, "r1", status="running", losses=(1.0, 0.5))
    cursor = _changes(get)[0]["cursor"]
    with open(os.path.join(run, "grad_norm.csv"), "w") as f:   # its first rows, one half-written
        f.write("step,epoch,grad_norm\n1,1,0.5\n2,1,0.2")
    poll, _ = _changes(get, cursor)
    assert poll["rows"] == {"0/toy/r1": {"grad_norm": [["step", "epoch", "grad_norm"],
                                                       ["1", "1", "0.5"]]}}
    with open(os.path.join(run, "grad_norm.csv"), "a") as f:
        f.write("5\n")
    assert _changes(get, poll["cursor"])[0]["rows"] == {"0/toy/r1": {"grad_norm": [
        ["2", "1", "0.25"]]}}


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_past_max_shown_runs_the_page_loads_the_most_recent_or_the_picked_ones(served):
    from mindexp.analysis import dashboard
    root, get = served
    for i in range(dashboard.MAX_SHOWN + 3):
        make_run(root, f"20260101-{i:06d}-{'adam' if i == 1 else 'sgd'}", losses=(1.0,))
    data = _data(get)
    ids = sorted(r["id"] for r in data["runs"])
    assert len(ids) == dashboard.MAX_SHOWN and ids[0] == "20260101-000003-sgd"
    assert f"most recent of {dashboard.MAX_SHOWN + 3} runs" in data["title"]
    assert [r["id"] for r in _data(get, "?q=adam")["runs"]] == ["20260101-000001-adam"]


def test_a_finished_run_resumed_sends_its_new_rows(served):
    root, get = served
    make_run(root, "done", status="completed", losses=(1.0, 0.5))
    cursor = _changes(get)[0]["cursor"]
    run_json = root / "toy" / "done" / "run.json"
    meta = json.loads(run_json.read_text())
    tmp = root / "toy" / "done" / "run.json.tmp"
    tmp.write_text(json.dumps(meta | {"status": "running"}))
    os.replace(tmp, run_json)   # resumed: run.json first, then rows
    poll = _changes(get, cursor)[0]
    assert [r["status"] for r in poll["status"]] == ["running"]
    with open(root / "toy" / "done" / "loss.csv", "a") as f:
        f.write("3,2,0.25,0.1,0.2\n")
    assert _changes(get, poll["cursor"])[0]["rows"] == {
        "0/toy/done": {"loss": [["3", "2", "0.25", "0.1", "0.2"]]}}


def test_the_first_scan_knows_which_runs_run_from_a_current_catalog(served, monkeypatch):
    from mindexp.rundir import store as catalog, replica
    root, get = served
    for name, status in (("live", "running"), ("done", "completed"), ("resumed", "completed")):
        make_run(root, name, status=status, losses=(1.0, 0.5))
    catalog.open_store(root).close()   # what `mindexp runs` leaves
    run_json = root / "toy" / "resumed" / "run.json"   # rewritten after the catalog read it
    run_json.write_text(json.dumps(json.loads(run_json.read_text()) | {"status": "running"}))
    read = []
    for module in (catalog, replica):
        real = module._read_run
        monkeypatch.setattr(module, "_read_run", lambda run_dir, real=real: read.append(
            os.path.basename(run_dir)) or real(run_dir))
    cursor = _changes(get)[0]["cursor"]
    assert read == ["resumed"]   # the others' run.json is the one the catalog read
    for name in ("live", "resumed", "done"):
        with open(root / "toy" / name / "loss.csv", "a") as f:
            f.write("3,2,0.25,0.1,0.2\n")
    assert sorted(_changes(get, cursor)[0]["rows"]) == ["0/toy/live", "0/toy/resumed"]


# -- many runs: the table paged, filtered and sorted by the server ---------------------

SIXTY = 60


@pytest.fixture(scope="module")
def sixty(tmp_path_factory):
    """60 runs (copies of one, lr and final loss differing; every 7th adam), served."""
    root = tmp_path_factory.mktemp("sixty")
    first = make_run(root, "20260101-000000-sgd-000000")
    for i in range(1, SIXTY):
        name = f"20260101-{i:06d}-{'adam' if i % 7 == 0 else 'sgd'}-{i:06x}"
        run_dir = shutil.copytree(first, os.path.join(os.path.dirname(first), name))
        meta = json.loads(open(os.path.join(run_dir, "run.json")).read())
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            json.dump(meta | {"run_id": name, "final_loss": 1.0 / (i + 1)}, f)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump({"seed": 0, "epochs": 3, "lr": i / 100,
                       "optimizer": "adam" if i % 7 == 0 else "sgd"}, f)
    with _serve(root) as get:
        yield root, get


def _runs(get, query=""):
    return _json(get, "/api/runs" + query)


def test_the_runs_table_is_paged_sorted_and_filtered_by_the_server(sixty):
    _, get = sixty
    first = _runs(get, "?limit=25")
    assert (first["total"], first["matched"], len(first["rows"])) == (SIXTY, SIXTY, 25)
    assert first["rows"][0]["id"] == f"20260101-{SIXTY - 1:06d}-sgd-{SIXTY - 1:06x}"  # newest
    assert sorted(first["columns"]) == ["lr", "optimizer"]   # only the fields that differ
    last = _runs(get, "?limit=25&offset=50")
    assert len(last["rows"]) == 10
    best = _runs(get, "?limit=3&sort=final_loss")["rows"]
    assert [r["final_loss"] for r in best] == [1 / SIXTY, 1 / (SIXTY - 1), 1 / (SIXTY - 2)]
    by_lr = _runs(get, "?limit=2&sort=-config.lr")["rows"]
    assert [r["config"]["lr"] for r in by_lr] == [0.59, 0.58]
    adam = _runs(get, "?q=adam&sort=run")
    assert adam["matched"] == len(range(7, SIXTY, 7)) and adam["total"] == SIXTY
    assert all(r["config"]["optimizer"] == "adam" for r in adam["rows"])
    assert _runs(get, "?q=optimizer=adam+lr=0.14")["rows"][0]["config"]["lr"] == 0.14


def test_the_runs_table_shows_at_most_eight_differing_config_fields(served):
    root, get = served
    for i in range(2):
        make_run(root, f"r{i}", config={f"f{n}": i for n in range(10)} | ({"gone": 1} if i else {}))
    columns = _runs(get)["columns"]
    assert len(columns) == 8 and set(columns) <= {f"f{n}" for n in range(10)} | {"gone"}


@pytest.mark.parametrize("query, says", [("?sort=colour", "cannot sort by 'colour'"),
                                         ("?limit=many", "limit"), ("?offset=-", "offset")])
def test_a_bad_table_request_is_one_line_naming_what_is_accepted(sixty, query, says):
    status, body = sixty[1]("/api/runs" + query)
    error = json.loads(body)["error"]
    assert status == 400 and says in error and "\n" not in error


def test_a_quiet_poll_is_a_few_bytes_at_sixty_runs(sixty):
    _, get = sixty
    cursor = _changes(get)[0]["cursor"]
    quiet, size = _changes(get, cursor)
    assert size < 100 and not (quiet["new"] or quiet["status"] or quiet["rows"])


def test_the_page_draws_the_runs_it_picks_and_nothing_outside(sixty):
    _, get = sixty
    keys = [r["key"] for r in _runs(get, "?limit=2&sort=final_loss")["rows"]]
    data = _data(get, "?runs=" + ",".join(keys + ["0/../etc", "0/toy/gone"]))
    assert sorted(r["key"] for r in data["runs"]) == sorted(keys)
    assert data["runs"][0]["logs"]["loss"] == ["step", "epoch", "loss", "lr", "time_s"]
    loss = next(f for f in data["figures"] if f["id"] == "loss")
    assert loss["traces"][0]["src"] == {"log": "loss", "x": "step", "col": "loss"}


def test_the_table_lists_exactly_the_runs_on_disk_and_their_new_status(served):
    root, get = served
    make_run(root, "a", status="running", losses=(1.0, 0.5), meta={"total_steps": 8})
    make_run(root, "b")
    assert [(r["id"], r["progress"]["step"]) for r in _runs(get, "?sort=run")["rows"]] == [
        ("a", 2), ("b", 3)]
    with open(root / "toy" / "a" / "loss.csv", "a") as f:
        f.write("3,2,0.25,0.1,0.2\n")
    shutil.rmtree(root / "toy" / "b")
    make_run(root, "c", status="failed", meta={"error": "boom\nat line 3"})
    rows = _runs(get, "?sort=run")["rows"]
    assert [(r["id"], r["status"], r["progress"]["step"]) for r in rows] == [
        ("a", "running", 3), ("c", "failed", 3)]
    assert rows[1]["error"] == "boom"


# -- many runs: nothing per request grows with the runs --------------------------------

@contextlib.contextmanager
def _run_json_stats(monkeypatch):
    """A list that collects the run folders whose run.json is stat-ed (any thread)."""
    seen = []
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def counted(path, *a, real=real, **k):
            if isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith("run.json"):
                seen.append(os.path.dirname(os.fspath(path)))
            return real(path, *a, **k)
        monkeypatch.setattr(os, name, counted)
    yield seen


def _bound_rolling_check(monkeypatch, count):
    """The replica's rolling check at ``count`` runs a refresh."""
    from mindexp.rundir import replica
    monkeypatch.setattr(replica, "CHECKED_PER_REFRESH", count)


def test_a_page_and_a_quiet_poll_stat_no_run_beyond_the_rolling_check(sixty, monkeypatch):
    _bound_rolling_check(monkeypatch, 5)
    _, get = sixty
    cursor = _runs(get, "?limit=10")["cursor"]   # the private catalog made and current
    with _run_json_stats(monkeypatch) as seen:
        page = _runs(get, "?limit=10&offset=20&sort=final_loss")
        quiet, _ = _changes(get, cursor)
        _data(get, "?run=" + page["rows"][0]["key"])
    assert len(page["rows"]) == 10 and not (quiet["new"] or quiet["status"] or quiet["removed"])
    # two refreshes of 5 runs each, the drawn runs' files (those kept drawn too): never
    # the 60 runs
    assert len(set(seen)) <= 20, len(set(seen))


def test_a_page_reads_only_its_own_runs(served, monkeypatch):
    from mindexp.analysis import listing
    root, get = served
    for i in range(30):
        make_run(root, f"r{i:02d}", config={"lr": i / 100})
    built, real = [], listing.Listing._row
    monkeypatch.setattr(listing.Listing, "_row", lambda self, run_dir, *a: built.append(
        run_dir) or real(self, run_dir, *a))
    page = _runs(get, "?limit=7&offset=20&sort=-config.lr")   # the server's first request
    assert [r["config"]["lr"] for r in page["rows"]] == [i / 100 for i in range(9, 2, -1)]
    assert (page["total"], page["matched"]) == (30, 30)
    assert len(built) == 7   # the page's runs read (COUNT, ORDER BY ... LIMIT 7 OFFSET 20)


def test_a_writers_change_to_a_finished_run_is_followed_from_the_roots_catalog(served,
                                                                            monkeypatch):
    from mindexp.rundir import store as catalog, replica
    monkeypatch.setattr(replica, "CHECKED_PER_REFRESH", 0)
    root, get = served
    done = make_run(root, "done")
    make_run(root, "other")
    catalog.open_store(root).close()   # the root's catalog, as `mindexp runs` leaves it
    cursor = _changes(get)[0]["cursor"]
    run_json = os.path.join(done, "run.json")
    meta = json.loads(open(run_json).read())
    with open(run_json + ".tmp", "w") as f:
        json.dump(meta | {"tags": ["best"]}, f)
    os.replace(run_json + ".tmp", run_json)
    assert not _changes(get, cursor)[0]["status"]   # edited by hand, unsaid: not seen yet
    catalog.run_written(done)                        # what `mindexp tag` does after writing
    poll = _changes(get, cursor)[0]
    assert [r["run_id"] for r in poll["status"]] == ["done"]


def test_the_replica_lives_outside_the_served_folder_and_goes_with_the_server(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "r1")
    server = make_server([str(root)], port=0)
    index = server.RequestHandlerClass.index
    index.runs_page(0, 1)
    ((_, catalog),) = index.feed.query(lambda served: served)
    assert os.path.isfile(catalog.path) and not catalog.path.startswith(str(tmp_path))
    assert sorted(os.listdir(root)) == ["toy"]   # nothing written into the served folder
    server.server_close()
    assert not os.path.exists(catalog.path)


def test_a_killed_servers_replica_is_removed_by_the_next_one(tmp_path):
    from mindexp.rundir.replica import PREFIX, replica
    make_run(tmp_path / "runs", "r1")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    folder = tmp_path / "private"
    folder.mkdir()
    host = platform.node()
    orphan = folder / f".tmp-{gone.stdout.strip()}@{host}@{PREFIX}abcdefgh.sqlite"
    orphan.write_bytes(b"")   # left by a server killed with SIGKILL
    mine = folder / f".tmp-{os.getpid()}@{host}@{PREFIX}abcdefgh.sqlite"
    mine.write_bytes(b"")     # a live server's
    catalog = replica(str(tmp_path / "runs"), str(folder))
    try:
        assert not orphan.exists() and mine.exists()
    finally:
        catalog.close()
    assert sorted(os.listdir(folder)) == [mine.name]
    made = replica(str(tmp_path / "runs"), str(folder))   # its own file: named the same way
    try:
        assert os.path.basename(made.path).startswith(f".tmp-{os.getpid()}@{host}@{PREFIX}")
    finally:
        made.close()


def test_a_finished_run_edited_by_hand_shows_within_one_pass_of_the_rolling_check(
        served, monkeypatch):
    from mindexp.rundir import replica
    monkeypatch.setattr(replica, "CHECKED_PER_REFRESH", 3)
    root, get = served
    for i in range(12):
        make_run(root, f"r{i:02d}")
    cursor = _changes(get)[0]["cursor"]
    run_json = root / "toy" / "r07" / "run.json"
    run_json.write_text(json.dumps(json.loads(run_json.read_text()) | {"status": "failed"}))
    seen = [[s["run_id"] for s in _changes(get, cursor)[0]["status"]]
            for _ in range(12 // 3 + 1)]
    assert seen[0] == [] and seen[-1] == ["r07"]   # 3 runs a poll: seen within 4 polls


def test_without_a_roots_catalog_the_server_scans_a_batch_at_a_time(tmp_path, monkeypatch):
    from mindexp.rundir import store
    monkeypatch.setattr(store, "REBUILD_BATCH", 2)
    root = tmp_path / "runs"
    for i in range(4):
        make_run(root, f"r{i}")
    make_run(root, "bad", status="failed", meta={"error": "exploded at step 3"})
    with _serve(root) as get:
        page = _runs(get, "?sort=run")
        assert [r["id"] for r in page["rows"]] == ["bad", "r0", "r1", "r2", "r3"]
        assert [r["id"] for r in _runs(get, "?q=exploded")["rows"]] == ["bad"]
    assert not (root / ".mindexp-catalog").exists()   # the server wrote nothing there


# -- the first page while the private copy is made -------------------------------------

@contextlib.contextmanager
def _copy_held(monkeypatch, fails=None, copied=0):
    """The replica's first copy of the root's store, held once it read the
    store's feed, before it copies a row (after ``copied`` reads of rows),
    until the block ends (yields the event set then); ``fails``: an exception
    it then raises."""
    from mindexp.rundir import replica
    reached, release = threading.Event(), threading.Event()
    real, calls = replica.Replica._take, []

    def held(self, *args):
        calls.append(args)
        if len(calls) > copied and not reached.is_set():
            reached.set()
            release.wait(60)
            if fails is not None:
                raise fails
        return real(self, *args)
    monkeypatch.setattr(replica.Replica, "_take", held)
    try:
        yield reached
    finally:
        release.set()


def _answer_within(get, path, seconds):
    """``(status, body)`` of GET ``path``, or None when it takes over ``seconds``
    (the request goes on in its thread)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(get(path)), daemon=True)
    thread.start()
    thread.join(seconds)
    return out[0] if out else None


def _runs_soon(get, query="", seconds=20):
    answer = _answer_within(get, "/api/runs" + query, seconds)
    assert answer is not None, f"/api/runs{query} did not answer within {seconds} s"
    assert answer[0] == 200, answer
    return json.loads(answer[1])


def _with_catalog(root, names, **kwargs):
    from mindexp.rundir import store as catalog
    dirs = [make_run(root, name, **kwargs) for name in names]
    catalog.open_store(root).close()   # the root's catalog, as `mindexp runs` leaves it
    return dirs


def test_a_page_is_answered_from_the_roots_catalog_while_the_copy_is_made(served, monkeypatch):
    root, get = served
    _with_catalog(root, ["r0", "r1", "r2"], config={"lr": 0.1})
    make_run(root, "r3", config={"lr": 0.3})
    from mindexp.rundir import store as catalog
    catalog.run_written(str(root / "toy" / "r3"))
    with _copy_held(monkeypatch) as reached:
        page = _runs_soon(get, "?sort=run&limit=2")
        assert reached.wait(10)   # the copy had begun, and was held
        assert [r["id"] for r in page["rows"]] == ["r0", "r1"]
        assert (page["total"], page["matched"], page["columns"]) == (4, 4, ["lr"])
        assert page["rows"][0]["config"]["lr"] == 0.1 and page["rows"][0]["progress"]["step"] == 3
        assert [r["id"] for r in _runs_soon(get, "?sort=-config.lr&limit=1")["rows"]] == ["r3"]
    later = _runs(get, "?sort=run&limit=2")
    assert {k: v for k, v in later.items() if k != "cursor"} == \
        {k: v for k, v in page.items() if k != "cursor"}


def test_what_changes_while_the_copy_is_made_reaches_the_next_poll(served, monkeypatch):
    from mindexp.rundir import store as catalog
    root, get = served
    live, done, gone = _with_catalog(root, ["live", "done", "gone"])
    _rewrite_meta(live, status="running")
    catalog.run_written(live)
    with _copy_held(monkeypatch):
        cursor = _runs_soon(get, "?sort=run")["cursor"]
        _rewrite_meta(done, tags=["best"])
        catalog.run_written(done)              # a writer: `mindexp tag`
        make_run(root, "fresh")                # copied in by hand: no writer said it
        shutil.rmtree(gone)
        with open(os.path.join(live, "loss.csv"), "a") as f:
            f.write("4,2,0.125,0.1,0.3\n")
    poll, _ = _changes(get, cursor)
    assert not poll.get("reset")
    assert [r["run_id"] for r in poll["new"]] == ["fresh"]
    assert [r["run_id"] for r in poll["status"]] == ["done"]
    assert poll["removed"] == ["0/toy/gone"]
    assert poll["rows"] == {"0/toy/live": {"loss": [["4", "2", "0.125", "0.1", "0.3"]]}}
    assert not _changes(get, poll["cursor"])[0]["new"]   # told once


def _rewrite_meta(run_dir, **changes):
    path = os.path.join(run_dir, "run.json")
    meta = json.loads(open(path).read())
    with open(path + ".tmp", "w") as f:
        json.dump(meta | changes, f)
    os.replace(path + ".tmp", path)


def test_a_writer_never_waits_for_the_server_on_a_rollback_journal(served, monkeypatch):
    """On a network filesystem the store keeps a rollback journal, where a reader's
    lock holds every commit: the server reads the store a short statement at a time
    (here a writer that would wait even a moment fails, and says nothing)."""
    from mindexp.rundir import replica, store
    monkeypatch.setattr(store, "_filesystem_of", lambda path: "nfs")
    root, get = served
    done, _ = _with_catalog(root, ["done", "other"])
    with store.open_store(root, sync=False) as opened:
        assert opened.journal == "delete"
    monkeypatch.setattr(store, "BUSY_TIMEOUT_S", 0.0)
    monkeypatch.setattr(replica, "COPY_ROWS", 1)   # held with one row copied, one to come
    with _copy_held(monkeypatch, copied=1) as reached:
        cursor = _runs_soon(get, "?sort=run")["cursor"]   # read from the store itself
        assert reached.wait(10)                           # the replica's copy under way
        _rewrite_meta(done, tags=["best"])
        store.run_written(done)                           # what `mindexp tag` does
    with contextlib.closing(sqlite3.connect(store.database_path(str(root)))) as conn:
        assert conn.execute("SELECT tags FROM runs WHERE rel = 'toy/done'").fetchall() == [
            ("best",)]
    poll, _ = _changes(get, cursor)
    assert [r["run_id"] for r in poll["status"]] == ["done"]


def test_a_store_made_anew_while_served_is_followed(served, monkeypatch):
    from mindexp.rundir import replica, store
    monkeypatch.setattr(replica, "CHECKED_PER_REFRESH", 0)   # only the feed tells
    root, get = served
    done, _ = _with_catalog(root, ["done", "other"])
    cursor = _changes(get)[0]["cursor"]
    for suffix in ("", "-wal", "-shm"):   # removed, as a damaged file is, and made again
        path = store.database_path(str(root)) + suffix
        if os.path.exists(path):
            os.remove(path)
    store.open_store(root).close()
    _rewrite_meta(done, tags=["best"])
    store.run_written(done)
    poll, _ = _changes(get, cursor)
    assert [r["run_id"] for r in poll["status"]] == ["done"] and not poll["new"]


@pytest.mark.parametrize("fails", [sqlite3.OperationalError("disk I/O error"),
                                   OSError(28, "No space left on device")],
                         ids=["copy-falls-back-to-a-scan", "copy-raises"])
def test_a_copy_failing_after_an_early_page_resets_its_cursor(served, monkeypatch, fails):
    root, get = served
    _with_catalog(root, ["r0", "r1"])
    with _copy_held(monkeypatch, fails):
        early = _runs_soon(get, "?sort=run")
        make_run(root, "r2")
    assert [r["id"] for r in early["rows"]] == ["r0", "r1"]
    poll, _ = _changes(get, early["cursor"])
    assert poll["reset"] and poll["cursor"] > early["cursor"]
    page = _runs(get, "?sort=run")
    assert [r["id"] for r in page["rows"]] == ["r0", "r1", "r2"]
    assert _changes(get, page["cursor"])[0]["new"] == []   # the new cursor holds


def test_a_subfolder_is_paged_from_the_roots_catalog(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    _with_catalog(root, ["a0", "a1"])
    make_run(root, "b0", experiment="other")
    from mindexp.rundir import store as catalog
    catalog.run_written(str(root / "other" / "b0"))
    with _serve(root / "toy") as get, _copy_held(monkeypatch) as reached:
        page = _runs_soon(get, "?sort=run")
        assert reached.wait(10)
        assert [(r["id"], r["key"]) for r in page["rows"]] == [("a0", "0/a0"), ("a1", "0/a1")]
        assert page["total"] == 2


def _damage(path):
    """Every page of the SQLite file but its first overwritten with garbage."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(bytes(range(256)) * ((size - 4096) // 256 + 1))


def _edit(path, sql):
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("how", ["symlink", "fifo", "fifo-wal", "damaged", "newer-version",
                                 "other-folder"])
def test_an_unsafe_roots_catalog_is_not_read_and_the_page_waits_for_the_copy(
        tmp_path, monkeypatch, how):
    from mindexp.rundir.store import VERSION, database_path
    root = tmp_path / "runs"
    _with_catalog(root, ["r0", "r1"])
    path = database_path(str(root))
    if how == "symlink":   # a catalog elsewhere, of this very folder, through a link
        os.replace(path, tmp_path / "elsewhere.sqlite")
        os.symlink(tmp_path / "elsewhere.sqlite", path)
    elif how == "fifo":    # opening it for reading would wait for a writer
        os.remove(path)
        os.mkfifo(path)
    elif how == "fifo-wal":
        os.mkfifo(path + "-wal")
    elif how == "damaged":
        _damage(path)
    elif how == "newer-version":
        _edit(path, f"UPDATE catalog_version SET version = {VERSION + 1}")
    else:   # a catalog copied with another root's runs (cp -a)
        _edit(path, "UPDATE roots SET folder_id = '0:0'")
    make_run(root, "r2")   # only the runs' folders know it: not a page read from the catalog
    with _serve(root) as get:
        with _copy_held(monkeypatch):   # (not reached when the copy refuses it too)
            held = _answer_within(get, "/api/runs?sort=run", 2.0)
        page = json.loads(held[1]) if held else _runs_soon(get, "?sort=run")
    assert [r["id"] for r in page["rows"]] == ["r0", "r1", "r2"]


def test_the_roots_catalog_is_read_when_it_is_sound(tmp_path, monkeypatch):
    """The control of the test above: the same root, its catalog left as it is."""
    root = tmp_path / "runs"
    _with_catalog(root, ["r0", "r1"])
    with _serve(root) as get, _copy_held(monkeypatch):
        assert [r["id"] for r in _runs_soon(get, "?sort=run")["rows"]] == ["r0", "r1"]


def _columns_as_before(catalog, root):
    """listing._differing as it was written before its rework for 100,000 runs (the
    reference: the sampled fields shown must not change)."""
    from mindexp.analysis import listing
    scope, params = catalog.scope(root, other_hosts=False, alias="runs.")
    top = catalog.db.execute("SELECT MAX(rowid) FROM runs").fetchone()[0] or 0
    every = max(1, -(-top // listing.COLUMNS_SAMPLE))
    picked = ("runs" if every == 1 else
              f"(WITH RECURSIVE pick(id) AS (SELECT 1 UNION ALL SELECT id + {every} FROM pick "
              f"WHERE id + {every} <= {top}) SELECT runs.* FROM pick JOIN runs ON runs.rowid = "
              "pick.id) runs")
    rows = catalog.db.execute(
        "SELECT j.key, COUNT(DISTINCT j.value), COUNT(*), MIN(j.id) FROM "
        f"{picked}, json_each(runs.config) j WHERE {scope} AND runs.config IS NOT NULL "
        "GROUP BY j.key", params).fetchall()
    sampled = catalog.db.execute(f"SELECT COUNT(*) FROM {picked} WHERE {scope} AND "
                                 "runs.config IS NOT NULL", params).fetchone()[0]
    return [key for key, distinct, count, _ in sorted(rows, key=lambda r: (r[3], r[0]))
            if distinct > 1 or count < sampled]


def test_the_sampled_config_columns_are_the_same_as_before(tmp_path, monkeypatch):
    from mindexp.analysis import listing
    from mindexp.rundir.store import open_store
    monkeypatch.setattr(listing, "COLUMNS_SAMPLE", 5)   # one run in three of the 14 looked at
    root = tmp_path / "runs"
    configs = [{"same": 1, "whole": 1.0 if i % 2 else 1, "flag": i % 3 == 0,
                "none": None if i % 4 else 2, "list": [1, i % 5 == 0], "lr": i / 10,
                "name": "x" if i % 7 else "y", **({"gone": 1} if i % 6 else {})}
               for i in range(14)]
    for i, config in enumerate(configs):
        make_run(root, f"r{i:02d}", config=config)
    with open_store(root) as cat:
        expected = _columns_as_before(cat, str(root))
        assert listing._differing(cat, str(root)) == expected
    assert "lr" in expected and "same" not in expected and "whole" not in expected
    with _serve(root) as get:
        with _copy_held(monkeypatch):
            early = _runs_soon(get)["columns"]     # from the root's store
        get.index.feed.refresh()                  # waits for the replica
        later = _runs(get)["columns"]             # from the replica (its own rowids)
        ((_, private),) = get.index.feed.query(lambda served: served)
        assert later == _columns_as_before(private, str(root))[:listing.MAX_CONFIG_COLUMNS]
    assert early == expected[:listing.MAX_CONFIG_COLUMNS]


def test_a_tables_bytes_are_what_pandas_deep_memory_use_says():
    import numpy as np
    import pandas as pd
    from mindexp.analysis.dashboard import table_bytes
    table = pd.DataFrame({"step": np.arange(5), "loss": np.linspace(1, 0, 5),
                          "param": pd.array(["w", "b", "w", "b", "a long name"], dtype="string"),
                          "kind": pd.Categorical(list("xyxyx")), "obj": [None, 1, "a", 2.0, ()],
                          "n": pd.array([1, None, 3, 4, 5], dtype="Int64")})
    table.columns = ["step", "loss", "param", "kind", "obj", "step"]   # a name twice
    for frame in (table, table.iloc[:0], table.set_index("loss"), pd.DataFrame()):
        assert table_bytes(frame) == int(frame.memory_usage(deep=True).sum())


def test_a_rows_config_holds_only_the_fields_shown_as_columns(sixty):
    _, get = sixty
    page = _runs(get, "?limit=5")
    assert sorted(page["columns"]) == ["lr", "optimizer"]
    assert all(sorted(row["config"]) == ["lr", "optimizer"] for row in page["rows"])


@pytest.mark.parametrize("first", ["poll", "data"])
def test_the_copy_pauses_for_the_first_page_until_its_data_or_a_poll(served, monkeypatch, first):
    from mindexp.analysis import cursor
    monkeypatch.setattr(cursor, "COPY_PAUSE_S", 600.0)   # only what the page does ends it
    root, get = served
    _with_catalog(root, ["r0", "r1"])
    page = _runs_soon(get, "?sort=run")
    if first == "poll":   # a poll waits for the copy: it pauses no more
        poll = _answer_within(get, f"/api/changes?cursor={page['cursor']}", 20)
        assert poll is not None and poll[0] == 200 and not json.loads(poll[1]).get("reset")
    else:                 # the page has its data: the copy goes on, no poll asked
        _data(get, "?runs=" + ",".join(r["key"] for r in page["rows"]))
        made = threading.Thread(target=get.index.feed.refresh, daemon=True)   # waits for it
        made.start()
        made.join(20)
        assert not made.is_alive()
