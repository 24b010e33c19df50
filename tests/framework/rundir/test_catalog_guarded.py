"""The run catalog is written only inside its root: a ``.mindexp-catalog`` that
is a link or not a folder is never written through (by tag, note, rm, gc or a
new run; listings scan with one warning), and a catalog whose tables have
another shape is made again by the first listing, ``runs --rebuild`` or writer."""
import os
import sqlite3

import pytest

import mindexp
from mindexp import layout
from mindexp.rundir import store as cat

from rundirs import make_run


def _root_with_runs(path):
    root = path / "out"
    for name in ("a", "b", "c"):
        make_run(root, name, status="failed" if name == "c" else "completed")
    return root


def _writers(cli, root):
    """Every kind of writer, through the command line and track()."""
    run = root / "toy" / "a"
    assert cli("tag", run, "+seen").returncode == 0
    assert cli("note", run, "looked at").returncode == 0
    assert cli("rm", root / "toy" / "b", "--yes").returncode == 0
    assert cli("gc", root, "--status", "failed", "--yes").returncode == 0
    with mindexp.track(root, "script") as tracked:
        pass
    return tracked


@pytest.mark.parametrize("kind", ["link", "link-with-file", "file"])
def test_a_catalog_that_is_no_folder_of_the_root_is_never_written_through(cli, tmp_path, kind):
    root = _root_with_runs(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if kind == "file":
        (root / layout.CATALOG).write_text("not a folder")
    else:
        os.symlink(outside, root / layout.CATALOG)
        if kind == "link-with-file":    # a catalog already there: still never written
            conn = sqlite3.connect(outside / layout.CATALOG_DB)
            conn.execute("CREATE TABLE probe (x)")
            conn.close()
    before = sorted(os.listdir(outside)), [os.stat(outside / n).st_mtime_ns
                                           for n in sorted(os.listdir(outside))]
    tracked = _writers(cli, root)
    assert os.path.isfile(os.path.join(tracked.dir, layout.RUN_JSON))   # the run is made
    assert (sorted(os.listdir(outside)), [os.stat(outside / n).st_mtime_ns
                                          for n in sorted(os.listdir(outside))]) == before
    listed = cli("runs", root)
    assert listed.returncode == 0
    assert {line.split()[0].rsplit("/", 1)[-1] for line in listed.stdout.splitlines()[1:]} == \
        {"a", os.path.basename(tracked.dir)}
    warned = [line for line in listed.stderr.splitlines() if "listing by scanning" in line]
    assert len(warned) == 1, listed.stderr
    if kind == "file":
        assert (root / layout.CATALOG).read_text() == "not a folder"


def _reshaped(root):
    """The root's catalog with its runs table replaced by one of other columns."""
    with cat.open_store(root):
        pass
    conn = sqlite3.connect(cat.database_path(str(root)))
    conn.execute("DROP TABLE runs")
    conn.execute("CREATE TABLE runs (host TEXT, root TEXT, name TEXT)")
    conn.commit()
    conn.close()


def _runs_columns(root):
    conn = sqlite3.connect(cat.database_path(str(root)))
    try:
        return [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    finally:
        conn.close()


@pytest.mark.parametrize("repair", ["rebuild", "listing", "writer"])
def test_a_catalog_of_another_shape_is_made_again(cli, tmp_path, repair):
    root = _root_with_runs(tmp_path)
    _reshaped(root)
    assert "rel" not in _runs_columns(root)
    if repair == "writer":
        assert cli("tag", root / "toy" / "a", "+seen").returncode == 0
        assert "rel" in _runs_columns(root)
    listed = cli("runs", root, *(["--rebuild"] if repair == "rebuild" else []))
    assert listed.returncode == 0, listed.stderr
    assert "no such column" not in listed.stderr and "listing by scanning" not in listed.stderr
    assert len(listed.stdout.splitlines()) == 4
    assert "rel" in _runs_columns(root)
    again = cli("runs", root)
    assert again.stderr == "" and again.stdout == listed.stdout
