"""What a killed removal or report leaves is cleaned by the next command:
``.<run>.removing-PID`` folders of dead pids go at the next ``rm`` or
``gc``; a live remover's folder, and another host's, stay; a killed
report's temporary file goes at the next report into its folder."""
import os
import platform
import subprocess
import sys

import pytest

from rundirs import make_run


def dead_pid():
    """A pid no process has: a child that has exited and been waited for."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def _leftover(folder, name, suffix):
    path = os.path.join(folder, f".{name}.removing-{suffix}")
    os.makedirs(os.path.join(path, "checkpoints"))
    with open(os.path.join(path, "checkpoints", "epoch0001-step0000001.ckpt"), "wb") as f:
        f.write(b"x" * 100)
    return path


@pytest.mark.parametrize("command", ["rm", "gc"])
def test_the_next_rm_or_gc_removes_what_a_killed_removal_left(command, cli, tmp_path):
    root = tmp_path / "out"
    keep = make_run(root, "keep")
    gone = make_run(root, "gone", status="failed")
    folder = os.path.dirname(keep)
    dead = dead_pid()
    old_style = _leftover(folder, "a", str(dead))                       # before host names
    this_host = _leftover(folder, "b", f"{dead}@{platform.node()}")
    live = _leftover(folder, "c", f"{os.getpid()}@{platform.node()}")   # a removal under way
    other_host = _leftover(folder, "d", f"{dead}@another-host")         # cannot be checked here
    argv = ["rm", "--yes", gone] if command == "rm" else ["gc", "--yes", "--status", "failed",
                                                            root]
    done = cli(*argv)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(old_style) and not os.path.exists(this_host)
    assert os.path.isdir(live) and os.path.isdir(other_host) and os.path.isdir(keep)
    assert not os.path.exists(gone)
    assert sorted(os.listdir(folder)) == sorted(["keep", os.path.basename(live),
                                                 os.path.basename(other_host)])
    assert "removed 2 temporary file(s) or folder(s)" in done.stdout


def test_a_removal_names_its_hidden_folder_with_pid_and_host(tmp_path, monkeypatch):
    from mindexp.manage import cleanup
    run = make_run(tmp_path / "out", "r1")
    seen = []
    real = cleanup._delete
    monkeypatch.setattr(cleanup, "_delete", lambda path: (seen.append(path), real(path)))
    cleanup.remove(cleanup.plan_rm([run]))
    (hidden,) = seen
    assert os.path.basename(hidden) == f".r1.removing-{os.getpid()}@{platform.node()}"


def test_the_next_report_into_a_folder_removes_a_killed_reports_temp_file(cli, tmp_path):
    root = tmp_path / "out"
    make_run(root, "r1")
    reports = tmp_path / "reports"  # a folder without runs: no resume or gc looks there
    reports.mkdir()
    dead = reports / f"report.html.tmp-{dead_pid()}@{platform.node()}"
    dead.write_text("half a report")
    live = reports / f"other.html.tmp-{os.getpid()}@{platform.node()}"
    live.write_text("being written")
    done = cli("report", root, "--out", reports / "report.html")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(reports)) == sorted(["report.html", live.name])
