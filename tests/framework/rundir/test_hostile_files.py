"""Files of a run folder that are not what they say: a FIFO, a
folder or a link where a record, a log or a lock should be, JSON nested
100,000 deep. Beside a good run, every command that lists, shows or deletes
answers (a hang fails the test instead of blocking the suite), still lists
the good run, names the bad file in one line, and touches nothing outside."""
import json
import os
import threading

import pytest

from mindexp.cli.main import main
from rundirs import make_run

DEADLINE_S = 20  # each command answers in well under a second; a FIFO's open would block


def _fifo(path):
    os.mkfifo(path)


def _folder(path):
    os.mkdir(path)


def _nested(path):
    with open(path, "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)


def _link_out(path):
    os.symlink(os.path.join(os.path.dirname(path), "..", "..", "..", "outside.txt"), path)


# (file, how it is made, the commands that must name it)
CASES = {
    "fifo-loss": ("loss.csv", _fifo, {"show", "compare", "resume", "plot"}),
    "fifo-config": ("config.json", _fifo, {"runs", "show", "compare", "gc", "plot"}),
    "fifo-run-json": ("run.json", _fifo, {"runs", "show", "compare", "gc", "rm", "tag",
                                          "resume"}),
    "fifo-lock": (".lock", _fifo, {"rm", "resume"}),
    "folder-loss": ("loss.csv", _folder, {"show", "compare", "resume", "plot"}),
    "folder-lock": (".lock", _folder, {"rm", "resume"}),
    "link-lock": (".lock", _link_out, {"rm", "resume"}),
    "link-run-lock": (".run.lock", _link_out, {"rm", "tag"}),
    "nested-run-json": ("run.json", _nested, {"runs", "show", "compare", "gc", "rm", "tag",
                                              "resume"}),
    "nested-config": ("config.json", _nested, {"runs", "show", "compare", "gc"}),
}


def _commands(root, bad):
    return {"runs": ["runs", root], "show": ["show", bad], "compare": ["compare", root],
            "gc": ["gc", "--dry-run", "--status", "completed", root],
            "rm": ["rm", "--dry-run", bad], "tag": ["tag", bad, "+seen"],
            "resume": ["resume", bad], "plot": ["plot", bad],
            "report": ["report", root, "--out", os.path.join(root, "report.html")]}


def _answer(argv, capsys):
    """``main(argv)`` on a thread: ``(status, out, err)``; fails after DEADLINE_S."""
    result = {}

    def call():
        try:
            result["status"] = main(argv)
        except BaseException as exc:  # noqa: BLE001  reported below, with the command
            result["error"] = exc
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    out, err = capsys.readouterr()
    assert not thread.is_alive(), f"mindexp {' '.join(argv)} hung"
    assert "error" not in result, f"mindexp {' '.join(argv)} raised {result.get('error')!r}"
    return result["status"], out, err


@pytest.fixture
def release_fifos(tmp_path):
    """Open every FIFO left for writing afterwards: a reader blocked in open()
    (the code before the fix) then ends instead of keeping its thread."""
    yield
    for folder, dirs, names in os.walk(tmp_path):
        for name in dirs + names:
            path = os.path.join(folder, name)
            if os.path.exists(path) and not os.path.islink(path) and \
                    os.path.stat.S_ISFIFO(os.lstat(path).st_mode):
                os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_answers_beside_a_bad_file_and_names_it(case, tmp_path, capsys,
                                                             release_fifos):
    name, make, naming = CASES[case]
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    root = str(tmp_path / "out")
    make_run(root, "good")
    bad = make_run(root, "bad")
    target = os.path.join(bad, name)
    if os.path.lexists(target):
        os.remove(target)
    make(target)
    for command, argv in _commands(root, bad).items():
        status, out, err = _answer(argv, capsys)
        assert status in (0, 2), (command, status, out, err)
        assert "Traceback" not in out + err, (command, err)
        if command in ("runs", "compare"):
            assert "good" in out, (command, out, err)
        if command in naming:
            lines = [line for line in (out + err).splitlines() if target in line]
            assert lines, (command, out, err)
            assert all(len(line) < 400 for line in lines), lines  # one line, not a dump
    assert outside.read_text() == "keep"


@pytest.mark.parametrize("lock", [".lock", ".run.lock"])
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_no_command_writes_or_creates_a_lock_through_a_link(lock, dangling, tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    root = str(tmp_path / "out")
    make_run(root, "good")
    for argv in (["tag", "{bad}", "+x"], ["note", "{bad}", "hi"], ["rm", "--yes", "{bad}"],
                 ["gc", "--yes", root]):
        if not dangling:
            outside.write_text("keep")
        bad = make_run(root, "bad", status="failed")
        link = os.path.join(bad, lock)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(outside, link)
        status, out, err = _answer([a.format(bad=bad) for a in argv], capsys)
        assert status in (0, 2) and "Traceback" not in err, (argv, err)
        if dangling:
            assert not os.path.lexists(outside), argv  # never created through the link
        else:
            assert outside.read_text() == "keep", argv  # never truncated nor rewritten
        if argv[0] in ("rm", "gc") or lock == ".run.lock":  # refused: says why, naming the link
            assert os.path.isdir(bad) and link in out + err, (argv, out, err)
    status, out, _ = _answer(["runs", root], capsys)
    assert "good" in out


@pytest.mark.parametrize("name", ["../../x", "/tmp/mindexp-abs", ".hidden", "new\nline",
                                  "esc\x1b[31m", "$(touch pwned)"])
def test_an_experiment_whose_name_is_no_folder_name_is_refused_in_one_line(name, tmp_path,
                                                                          capsys):
    source = tmp_path / "mine.py"
    source.write_text("from mindexp.experiments.linear import Linear\n\n\n"
                      f"class Mine(Linear):\n    name = {name!r}\n")
    out = tmp_path / "a" / "b" / "out"
    status, _, err = _answer(["run", f"{source}:Mine", "--set", "epochs=1", "--out", str(out)],
                             capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "experiment's name must be" in err and repr(name) in err
    assert sorted(os.listdir(tmp_path)) == ["mine.py"] and not os.path.exists("/tmp/mindexp-abs")


NOTE = "bell\x07 esc\x1b[31mred\x1b]0;title\x07 csi\x9b2J"
RAW = ("\x07", "\x1b", "\x9b")


def _raw_controls(text):
    return [c for c in RAW if c in text]


def test_notes_and_tags_with_control_characters_are_shown_escaped(tmp_path, capsys):
    root = str(tmp_path / "out")
    run = make_run(root, "good", meta={"note": NOTE, "tags": ["t\x1b[2Jx"]})
    for argv in (["runs", root], ["runs", "--wide", root], ["show", run]):
        status, out, err = _answer(argv, capsys)
        assert status == 0 and _raw_controls(out + err) == [], (argv, out)
        assert "\\x1b" in out, (argv, out)
    assert "\\x07" in _answer(["show", run], capsys)[1]


class _Terminal:
    """A standard output that says it is a terminal."""

    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


@pytest.mark.parametrize("form", ["--csv", "--json"])
def test_csv_is_escaped_everywhere_json_exact_in_a_pipe_and_never_raw_on_a_terminal(
        form, tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "out")
    make_run(root, "good", meta={"note": NOTE})
    status, piped, _ = _answer(["runs", form, root], capsys)
    assert status == 0
    if form == "--csv":   # a file or a pipe is read on a terminal later: never raw
        assert _raw_controls(piped) == [] and "bell\\x07 esc\\x1b[31mred" in piped
    else:                 # JSON escapes them itself (\u001b): the data, exact, when parsed
        assert json.loads(piped)[0]["note"] == NOTE
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    assert main(["runs", form, root]) == 0
    shown = "".join(terminal.parts)
    assert _raw_controls(shown) == [] and "good" in shown


def test_the_dashboard_answers_beside_a_fifo_and_serves_no_log_linked_out_of_its_root(
        tmp_path, release_fifos):
    import http.client
    from mindexp.analysis.dashboard import make_server
    root = tmp_path / "out"
    make_run(root, "good")
    fifo = make_run(root, "fifo")
    os.remove(os.path.join(fifo, "loss.csv"))
    os.mkfifo(os.path.join(fifo, "loss.csv"))
    linked = make_run(root, "linked")
    os.remove(os.path.join(linked, "loss.csv"))
    (tmp_path / "outside.csv").write_text("step,epoch,loss\n1,1,4242.5\n")
    os.symlink(tmp_path / "outside.csv", os.path.join(linked, "loss.csv"))
    server = make_server([str(root)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        for path in ("/api/data", "/api/data?run=0/toy/fifo", "/api/data?run=0/toy/linked",
                     "/api/runs"):
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=DEADLINE_S)
            conn.request("GET", path)
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            assert answer.status == 200 and b"4242" not in body, (path, answer.status)
    finally:
        server.shutdown()
        server.server_close()
