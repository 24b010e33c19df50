"""The run catalog: derived from the run folders, kept current by the writers
and by the folders' modification times, rebuilt when missing, readable from
a read-only root."""
import json
import os
import shutil
import sqlite3

import pytest

from mindexp import compare
from mindexp import layout
from mindexp.rundir import store as cat

from rundirs import make_run


@pytest.fixture
def root(tmp_path):
    out = tmp_path / "outputs"
    for i in range(4):
        make_run(out, f"r{i}", config={"lr": 0.001 * (i + 1), "optimizer": ["sgd", "adam"][i % 2]},
                 losses=(1.0, 0.1 / (i + 1)),
                 meta={"started_at": f"2026-01-0{i + 1}T00:00:00+00:00"})
    return out


def _rows(root, sync=False):
    """{run_id: (status, tags, note)} as the catalog holds them (not synced: what
    the writers left)."""
    with cat.open_store(root, sync=sync) as catalog:
        return {r[0]: r[1:] for r in catalog.select(["run_id", "status", "tags", "note"])}


def test_deleting_the_catalog_lists_the_same_table(cli, root):
    first = cli("runs", root, "--where", "lr > 0.001")
    assert first.returncode == 0, first.stderr
    assert os.path.isfile(cat.database_path(str(root)))
    shutil.rmtree(root / layout.CATALOG)
    again = cli("runs", root, "--where", "lr > 0.001")
    assert again.stdout == first.stdout and os.path.isfile(cat.database_path(str(root)))
    rebuilt = cli("runs", root, "--where", "lr > 0.001", "--rebuild")
    assert rebuilt.stdout == first.stdout
    assert [line.split()[0] for line in first.stdout.splitlines()[1:]] == \
        [f"outputs/toy/r{i}" for i in (3, 2, 1)]


def test_a_run_copied_in_by_hand_appears_and_a_removed_one_goes(cli, root):
    cli("runs", root)
    shutil.copytree(root / "toy" / "r0", root / "toy" / "copied")
    meta = json.loads((root / "toy" / "copied" / "run.json").read_text())
    (root / "toy" / "copied" / "run.json").write_text(json.dumps(meta | {"run_id": "copied"}))
    shutil.copytree(root / "toy" / "r1", root / "other" / "r1")   # a new experiment folder
    shutil.rmtree(root / "toy" / "r2")
    listed = cli("runs", root).stdout
    assert "outputs/toy/copied" in listed and "outputs/other/r1" in listed
    assert "outputs/toy/r2" not in listed
    assert sorted(compare(str(root))["run_id"]) == ["copied", "r0", "r1", "r1", "r3"]


def test_the_writers_keep_the_catalog_current(cli, root):
    cli("runs", root)
    assert cli("tag", root / "toy" / "r1", "+best").returncode == 0
    assert cli("note", root / "toy" / "r2", "look again").returncode == 0
    assert cli("rm", root / "toy" / "r0", "--yes").returncode == 0
    make_run(root, "r9", status="failed")
    rows = _rows(root)   # not synced: only the writers told it
    assert rows["r1"][1] == "best" and rows["r2"][2] == "look again" and "r0" not in rows
    assert cli("gc", root, "--yes").returncode == 0   # syncs, finds r9 failed, removes it
    assert sorted(_rows(root)) == ["r1", "r2", "r3"]


def test_a_running_run_rewritten_by_another_writer_is_read_again(cli, root):
    path = root / "toy" / "r3" / "run.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(meta | {"status": "running"}))
    cli("runs", root)
    assert _rows(root)["r3"][0] == "running"
    tmp = path.with_suffix(".tmp")   # an older mindexp ends the run: a new run.json
    tmp.write_text(json.dumps(meta | {"status": "diverged"}))
    os.replace(tmp, path)
    assert _rows(root, sync=True)["r3"][0] == "diverged"


def test_a_catalog_copied_with_its_root_is_built_again(cli, root, tmp_path):
    cli("runs", root)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)   # copytree keeps the folders' times
    path = copy / "toy" / "r1" / "run.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"note": "only here"}))
    assert _rows(copy, sync=True)["r1"][2] == "only here"


def test_a_read_only_root_lists_by_scanning_or_from_its_catalog(cli, root, monkeypatch):
    expected = cli("runs", root).stdout
    shutil.rmtree(root / layout.CATALOG)
    # the tests run as root, for whom chmod changes nothing: the check is what says so
    real_access = os.access
    monkeypatch.setattr(cat.os, "access",
                        lambda p, mode: False if mode & os.W_OK else real_access(p, mode))
    assert cli("runs", root).stdout == expected
    assert not (root / layout.CATALOG).exists()      # nothing written
    monkeypatch.undo()
    cli("runs", root)
    monkeypatch.setattr(cat.os, "access",
                        lambda p, mode: False if mode & os.W_OK else real_access(p, mode))
    with cat.open_store(root) as catalog:
        assert catalog.journal == "read-only"         # current: read as it is
    make_run(root, "r7")
    with cat.open_store(root) as catalog:           # stale: scanned into memory
        assert catalog.journal == "memory"
        assert "r7" in {r[0] for r in catalog.select(["run_id"])}


def test_a_listed_subfolder_uses_its_roots_catalog(cli, root):
    cli("runs", root)
    listed = cli("runs", root / "toy")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 5
    assert not (root / "toy" / layout.CATALOG).exists()


def test_a_catalog_is_never_made_above_the_listed_folder(cli, root):
    """An experiment's folder listed first gets its own catalog, not its parent
    (a shared folder would be scanned by every listing below it); both are
    kept current by the writers."""
    cli("runs", root / "toy")
    assert (root / "toy" / layout.CATALOG).is_dir() and not (root / layout.CATALOG).exists()
    cli("runs", root)
    assert cli("note", root / "toy" / "r1", "both").returncode == 0
    for folder in (root, root / "toy"):
        assert _rows(folder)["r1"][2] == "both"


def test_a_damaged_catalog_is_listed_around(cli, root):
    expected = cli("runs", root).stdout
    path = cat.database_path(str(root))
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    with open(path, "wb") as f:
        f.write(b"not a database" * 100)
    listed = cli("runs", root)
    assert listed.returncode == 0 and listed.stdout == expected


def test_a_newer_schema_is_refused_with_one_line(cli, root):
    cli("runs", root)
    with sqlite3.connect(cat.database_path(str(root))) as conn:
        conn.execute("UPDATE catalog_version SET version = 99")
    listed = cli("runs", root)
    assert listed.returncode == 2 and "schema version 99" in listed.stderr
    assert "Traceback" not in listed.stderr


def test_wal_where_the_filesystem_allows_it(root):
    with cat.open_store(root) as catalog:
        assert catalog.journal == "wal"
    assert cat._filesystem_of(cat.database_path(str(root)))   # mountinfo was read


def test_a_postgres_password_is_never_in_a_message(root):
    from mindexp.errors import ConfigError
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigError) as error:
        cat.open_store(root, url="postgresql://me:s3cr3t@127.0.0.1:1/runs")
    assert "s3cr3t" not in str(error.value) and "***" in str(error.value)


def _summarized(root, n=4):
    """Runs that ended with their summary in run.json (what the runner writes)."""
    from mindexp.rundir.summary import SUMMARY_VERSION
    for i in range(n):
        loss = 0.5 / (i + 1)
        make_run(root, f"s{i}", config={"lr": 0.1 * (i + 1), "flag": bool(i % 2), "dims": [i, 2]},
                 losses=(1.0, loss), experiment="sum",
                 meta={"summary": {"version": SUMMARY_VERSION, "params": {}, "eval": {},
                                   "loss": {"rows": 2, "final": loss, "min": loss,
                                            "best_step": 2, "last_step": 2, "last_epoch": 1,
                                            "components": {}}}})
    return root / "sum"


def test_compare_reads_a_column_selection_from_the_catalog(tmp_path, monkeypatch):
    import mindexp.analysis.reports as reports
    folder = _summarized(tmp_path / "out")
    columns = ["run_id", "lr", "flag", "dims", "final_loss", "min_loss", "steps", "status",
               "run_dir"]
    expected = compare(str(folder), sort="-lr")[columns]
    with monkeypatch.context() as patch:   # no run's files read: the catalog answers
        patch.setattr(reports, "as_runs", lambda *a, **k: pytest.fail("runs were read"))
        selected = compare(str(folder), sort="-lr", columns=columns)
    assert selected.equals(expected) and list(selected["run_id"]) == ["s3", "s2", "s1", "s0"]
    assert selected.attrs["config_columns"] == ["lr", "flag", "dims"]


def test_compare_columns_of_runs_without_a_summary_are_read_from_the_runs(root):
    selected = compare(str(root), columns=["run_id", "min_loss"])
    assert list(selected.columns) == ["run_id", "min_loss"]
    assert selected.set_index("run_id")["min_loss"].to_dict() == \
        {f"r{i}": 0.1 / (i + 1) for i in range(4)}
    from mindexp.errors import ConfigError
    with pytest.raises(ConfigError, match="unknown column 'nope'"):
        compare(str(root), columns=["run_id", "nope"])


def test_gc_keep_best_ranks_by_the_catalogs_column(cli, tmp_path, monkeypatch):
    import mindexp.manage.runs as runs
    folder = _summarized(tmp_path / "out")
    monkeypatch.setattr(runs, "with_log_columns", lambda *a: pytest.fail("logs were read"))
    done = cli("gc", folder, "--status", "completed", "--keep-best", "1", "--by", "min_loss",
               "--yes")
    assert done.returncode == 0, done.stderr
    assert [d for d in os.listdir(folder) if not d.startswith(".")] == ["s3"]


@pytest.mark.parametrize("plant", ["link", "file"])
def test_a_planted_catalog_folder_is_listed_around_and_never_followed(cli, root, tmp_path, plant):
    expected = cli("runs", root).stdout
    shutil.rmtree(root / layout.CATALOG)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if plant == "link":
        os.symlink(elsewhere, root / layout.CATALOG)
    else:
        (root / layout.CATALOG).write_text("not a folder")
    listed = cli("runs", root)
    assert listed.returncode == 0 and listed.stdout == expected
    assert "listing by scanning" in listed.stderr and os.listdir(elsewhere) == []


def _snapshots(root):
    return sorted(n for n in os.listdir(os.path.join(root, layout.CATALOG))
                  if n.startswith("compare-"))


def test_compare_of_a_folder_is_read_from_its_snapshot_while_the_runs_are_unchanged(
        tmp_path, monkeypatch):
    import pandas as pd
    import mindexp.analysis.reports as reports
    folder = _summarized(tmp_path / "out")
    first = compare(str(folder), sort="-lr")
    assert _snapshots(folder) != []
    with monkeypatch.context() as patch:   # no run read: the snapshot answers, every sort
        patch.setattr(reports, "as_runs", lambda *a, **k: pytest.fail("runs were read"))
        again = compare(str(folder), sort="-lr")
        by_id = compare(str(folder), sort="run_id")
    pd.testing.assert_frame_equal(again, first, check_exact=True)
    assert again.attrs == first.attrs and again["dims"][0] == (3, 2)   # lists stay tuples
    assert list(by_id["run_id"]) == ["s0", "s1", "s2", "s3"]


def test_a_changed_added_or_removed_run_makes_compare_read_the_runs_again(cli, tmp_path):
    folder = _summarized(tmp_path / "out")
    compare(str(folder))
    assert cli("note", folder / "s1", "checked").returncode == 0
    assert compare(str(folder)).set_index("run_id")["note"]["s1"] == "checked"
    shutil.copytree(folder / "s0", folder / "copy")
    shutil.rmtree(folder / "s2")
    assert sorted(compare(str(folder))["run_dir"].map(os.path.basename)) == \
        ["copy", "s0", "s1", "s3"]


@pytest.mark.parametrize("plant", ["link", "forged"])
def test_a_planted_compare_snapshot_is_never_followed_nor_trusted(tmp_path, plant):
    folder = _summarized(tmp_path / "out")
    expected = compare(str(folder))
    (name,) = _snapshots(folder)
    path = folder / layout.CATALOG / name
    other = _summarized(tmp_path / "other")   # a real snapshot of other runs
    compare(str(other))
    (forged,) = _snapshots(other)
    os.remove(path)
    if plant == "link":
        os.symlink(other / layout.CATALOG / forged, path)
    else:
        shutil.copy(other / layout.CATALOG / forged, path)
    table = compare(str(folder))
    assert table.equals(expected) and table["run_dir"][0].startswith(str(folder))


# -- the change feed, find, an older index ---------------------------------------------

def _feed(root, since):
    with cat.open_store(root) as store:
        seq, changed, dropped = store.changes(str(root), since)
    return seq, sorted(changed), None if dropped is None else sorted(dropped)


def test_the_feed_gives_what_changed_since_a_value_and_what_was_dropped(cli, root):
    seq, changed, dropped = _feed(root, 0)
    assert changed == [f"toy/r{i}" for i in range(4)] and dropped is None   # from nothing
    assert _feed(root, seq) == (seq, [], [])
    assert cli("tag", str(root / "toy" / "r1"), "+best").returncode == 0     # a writer's put
    shutil.copytree(root / "toy" / "r0", root / "toy" / "copied")            # by hand
    assert cli("rm", str(root / "toy" / "r2"), "--yes").returncode == 0      # a writer's drop
    shutil.rmtree(root / "toy" / "r3")                                       # by hand
    later, changed, dropped = _feed(root, seq)
    assert later > seq and changed == ["toy/copied", "toy/r1"]
    assert dropped == ["toy/r2", "toy/r3"]
    assert _feed(root, later) == (later, [], [])
    shutil.copytree(root / "toy" / "r0", root / "toy" / "r3")                # back again
    _, changed, dropped = _feed(root, later)
    assert changed == ["toy/r3"] and dropped == []
    assert _feed(root, seq)[2] == ["toy/r2"]        # no longer dropped since then


def test_a_rebuild_starts_the_feed_anew(root):
    seq, _, _ = _feed(root, 0)
    with cat.open_store(root, rebuild=True):
        pass
    later, changed, dropped = _feed(root, seq)
    assert later > seq and dropped is None and len(changed) == 4


def test_the_feed_covers_the_folder_asked_for(root):
    _feed(root, 0)
    make_run(root, "elsewhere", experiment="other")
    seq, changed, _ = _feed(root / "other", 0)
    assert changed == ["other/elsewhere"]


def test_find_gives_the_runs_whose_folder_name_holds_the_part(cli, root):
    with cat.open_store(root) as store:
        assert store.find("r2") == [str(root / "toy" / "r2")]
        assert store.find("r") == [str(root / "toy" / f"r{i}") for i in range(4)]
        assert store.find("toy") == []          # a folder above the run is no run id
    shown = cli("show", "r2", "--out", str(root))
    assert shown.returncode == 0 and "run        r2" in shown.stdout, shown.stderr


def test_show_by_id_asks_the_store_and_walks_nothing(root, monkeypatch):
    from mindexp.manage import show
    with cat.open_store(root):
        pass

    def walked(*args):
        raise AssertionError("the root was walked")
    monkeypatch.setattr(show, "find_run_dirs", walked)
    assert show.find_run("r3", str(root)).dir == str(root / "toy" / "r3")


def test_a_version_one_index_is_made_again_and_read(cli, root):
    cli("runs", root)
    path = cat.database_path(str(root))
    conn = sqlite3.connect(path)
    # version 1's tables: no feed, no dropped runs, no cells, no seq; its rows kept
    # (emptied here: the listing below shows the runs only if they are scanned again)
    conn.executescript("DROP TABLE feed; DROP TABLE dropped; DROP TABLE cells; DROP TABLE shapes; "
                       "DROP INDEX runs_seq; DROP INDEX runs_uncelled; "
                       "ALTER TABLE runs DROP COLUMN seq; UPDATE catalog_version SET version = 1; "
                       "DELETE FROM runs;")
    conn.commit()
    conn.close()
    listed = cli("runs", root)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == \
        [f"outputs/toy/r{i}" for i in (3, 2, 1, 0)]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM catalog_version").fetchone() == (cat.VERSION,)
    assert conn.execute("SELECT COUNT(*) FROM runs WHERE seq > 0").fetchone() == (4,)
    conn.close()


def test_the_feeds_token_changes_with_a_rebuild_and_a_new_index(root):
    with cat.open_store(root) as store:
        token, seq = store.feed()
    assert token and seq > 0
    with cat.open_store(root, rebuild=True) as store:
        rebuilt, later = store.feed()
    assert rebuilt != token and later > seq
    shutil.rmtree(root / layout.CATALOG)
    with cat.open_store(root) as store:
        assert store.feed()[0] not in (token, rebuilt)
