"""Values no config should hold: NaN, Infinity and lists nested past any use are
refused where a config is made (``track(config=)``, ``--set``, ``--grid``);
planted by hand into a run's files, they make that run alone unreadable or
shown as missing, and never hide another run from any view."""
import http.client
import json
import threading

import pytest

import mindexp
from mindexp.analysis.dashboard import make_server
MAX_JSON_DEPTH = 100   # mindexp.rundir.io.MAX_JSON_DEPTH, as the docs give it

from rundirs import make_run


def _nested(levels):
    value = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("config, words", [
    ({"lr": float("nan")}, ["'lr' holds a number that is not finite", "Received: lr=nan"]),
    ({"opt": {"betas": [0.9, float("inf")]}}, ["'opt' holds a number that is not finite"]),
    ({"deep": _nested(100_000)}, ["'deep' nests lists or dicts too deeply",
                                  f"up to {MAX_JSON_DEPTH - 1} levels"]),
    ({"deep": _nested(900)}, ["'deep' nests lists or dicts too deeply"]),
])
def test_track_refuses_a_config_no_reader_could_use_in_one_line(tmp_path, config, words):
    with pytest.raises(mindexp.ConfigError) as caught:
        with mindexp.track(tmp_path / "out", "probe", config=config):
            pass
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and all(w in message for w in words), message
    assert not (tmp_path / "out").exists()
    with mindexp.track(tmp_path / "out", "fine", config={"deep": _nested(MAX_JSON_DEPTH - 1)}):
        pass


@pytest.mark.parametrize("args", [("run", "linear", "--set", "lr=nan"),
                                  ("run", "linear", "--set", "lr=-Infinity"),
                                  ("sweep", "linear", "--grid", "lr=0.1,nan")])
def test_set_and_grid_refuse_a_non_finite_number_in_one_line(cli, tmp_path, args):
    done = cli(*args, "--out", tmp_path / "out")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "config field 'lr' expects a number that is finite" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.fixture
def planted(tmp_path):
    root = tmp_path / "out"
    make_run(root, "good", config={"lr": 0.1, "width": 4})
    make_run(root, "nan", config={"lr": float("nan"), "width": float("inf")},
             meta={"final_loss": float("nan"), "train_time_s": float("inf"),
                   "started_at": "2026-01-02T00:00:00+00:00"})
    for name, levels in (("deep", 100_000), ("deep900", 900)):
        run = make_run(root, name, meta={"started_at": "2026-01-03T00:00:00+00:00"})
        with open(f"{run}/config.json", "w", encoding="utf-8") as f:
            f.write('{"a": ' + "[" * levels + "]" * levels + "}")
    return root


def test_a_planted_nan_or_deep_config_hides_no_run_from_the_command_line(cli, planted):
    listed = cli("runs", planted)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0].rsplit("/", 1)[-1]: line for line in listed.stdout.splitlines()[1:]}
    assert set(rows) == {"good", "nan", "deep", "deep900"}
    assert "unreadable" in rows["deep"] and "unreadable" in rows["deep900"]
    assert "nests lists or objects deeper than 100 levels" in listed.stderr
    where = cli("runs", planted, "--where", "width > 1")
    assert where.returncode == 0 and {line.split()[0].rsplit("/", 1)[-1] for line in
                                      where.stdout.splitlines()[1:]} == {"good", "nan"}
    compared = cli("compare", planted)
    assert compared.returncode == 0 and all(n in compared.stdout for n in rows)
    report = cli("report", planted, "--out", planted.parent / "report.html")
    assert report.returncode == 0 and "(2 runs)" in report.stdout, report.stdout
    as_csv = cli("runs", planted, "--csv")
    assert as_csv.returncode == 0 and len(as_csv.stdout.strip().splitlines()) == 5


def _get(server, path):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    conn.request("GET", path)
    answer = conn.getresponse()
    return answer.status, answer.read()


def test_a_planted_nan_or_deep_config_hides_no_run_from_the_dashboard(planted):
    server = make_server([str(planted)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        status, body = _get(server, "/api/runs")
        assert status == 200, body
        ids = {row["id"]: row for row in json.loads(body)["rows"]}
        assert set(ids) == {"good", "nan", "deep", "deep900"}
        assert ids["deep"]["status"] == "unreadable"
        status, body = _get(server, "/api/data")
        assert status == 200, body
        assert {run["id"] for run in json.loads(body)["runs"]} >= {"good", "nan"}
        status, body = _get(server, "/api/data?run=0/toy/nan")
        assert status == 200 and b"NaN" not in body and b"Infinity" not in body, body[:300]
        json.loads(body)   # strict JSON, as a browser reads it
    finally:
        server.shutdown()
        server.server_close()
