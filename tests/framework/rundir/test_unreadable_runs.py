"""A hand-damaged run.json: listed as ``unreadable`` (every other run as usual),
and one line, exit 2, from the commands that target it."""
import http.client
import json
import os
import re
import threading

import pytest

from conftest import require
from mindexp.analysis.dashboard import make_server
from mindexp.analysis.reports import compare, load_run
from mindexp.cli.main import main
from mindexp.errors import RunDirError
from rundirs import make_run

# (damage, the field the message names; None: the whole file)
DAMAGES = {
    "params-list": ({"params": [1, 2]}, "params"),
    "experiment-list": ({"experiment": ["x"]}, "experiment"),
    "targets-list": ({"targets": [1]}, "targets"),
    "started-at-number": ({"started_at": 12}, "started_at"),
    "tags-text": ({"tags": "abc"}, "tags"),
    "file-list": ([1, 2], None),
    "file-text": ("text", None),
    "file-null": (None, None),
}


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request, tmp_path):
    """A root with a good run and a damaged one: ``(root, good, bad, field)``."""
    damage, field = DAMAGES[request.param]
    root = tmp_path / "runs"
    good = make_run(root, "good")
    bad = make_run(root, "bad")
    path = os.path.join(bad, "run.json")
    if isinstance(damage, dict):
        with open(path, encoding="utf-8") as f:
            damage = {**json.load(f), **damage}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(damage, f)
    return str(root), good, bad, field


def mindexp(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def report_data(page):
    """The JSON the report page draws from."""
    found = re.search(r'<script id="mindexp-data" type="application/json">(.*?)</script>', page,
                      re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def _names_the_damage(line, bad, field):
    return os.path.join(bad, "run.json") in line and (field is None or repr(field) in line)


@pytest.mark.parametrize("command", ["runs", "compare"])
def test_a_listing_shows_the_damaged_run_as_unreadable_and_the_others_as_usual(
        capsys, damaged, command):
    root, good, bad, field = damaged
    code, out, err = mindexp(capsys, command, root)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and _names_the_damage(lines[0], bad, field), err
    rows = {name: line.split() for line in out.splitlines()[1:]
            for name in ("good", "bad") if name in line.replace(os.sep, " ").split()}
    assert set(rows) == {"good", "bad"}
    assert "unreadable" in rows["bad"] and "completed" in rows["good"]
    if command == "compare":  # no config column "differs" for want of the damaged run's
        assert out.splitlines()[0].split()[:3] == ["run_id", "status", "final_loss"]


def test_report_and_gc_list_the_others_and_name_the_damaged_run(capsys, damaged, tmp_path):
    require("plotly")
    root, good, bad, field = damaged
    code, out, err = mindexp(capsys, "report", root, "--out", tmp_path / "r.html")
    assert code == 0 and "(1 runs)" in out, err
    [skipped] = report_data((tmp_path / "r.html").read_text())["skipped"]
    assert skipped["dir"] == bad and skipped["status"] == "unreadable"
    assert _names_the_damage(err, bad, field)
    code, out, err = mindexp(capsys, "gc", root, "--status", "completed", "--dry-run")
    assert code == 0, err
    assert good in out and bad not in out  # never removed on a guess: its record is unknown
    assert len(err.strip().splitlines()) == 1 and _names_the_damage(err, bad, field)


def test_python_compare_and_load_run(damaged, caplog):
    root, good, bad, field = damaged
    table = compare(root)
    assert dict(zip(table["run_dir"], table["status"])) == {good: "completed", bad: "unreadable"}
    with pytest.raises(RunDirError) as raised:
        load_run(bad)
    assert _names_the_damage(str(raised.value), bad, field)
    assert load_run(good).status == "completed"


@pytest.mark.parametrize("args", [("tag", "+x"), ("note", "hello"), ("resume",), ("show",),
                                  ("evaluate",), ("rerun",), ("diff", "GOOD")])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_command_on_the_damaged_run_says_which_file_and_field_exit_2(capsys, damaged, args):
    root, good, bad, field = damaged
    with open(os.path.join(bad, "run.json"), "rb") as f:
        before = f.read()
    rest = [good if a == "GOOD" else a for a in args[1:]]
    code, out, err = mindexp(capsys, args[0], bad, *rest)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("mindexp: error: ")
    assert _names_the_damage(err, bad, field), err
    with open(os.path.join(bad, "run.json"), "rb") as f:
        assert f.read() == before  # left as it was


def test_dashboard_data_lists_the_damaged_run_as_unreadable(damaged):
    root, good, bad, field = damaged
    server = make_server([root], port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
        conn.request("GET", "/api/data")
        response = conn.getresponse()
        body = response.read()
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert response.status == 200, body
    data = json.loads(body)
    assert [run["dir"] for run in data["runs"]] == [good]
    [skipped] = data["skipped"]
    assert skipped["dir"] == bad and skipped["status"] == "unreadable"
    assert _names_the_damage(skipped["error"], bad, field)
