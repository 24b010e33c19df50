"""compare() of a folder through the run store: after a run is copied in by
hand, rewritten by a writer or removed, the snapshot brought up to date with the
store's change feed equals a cold compare() (values, columns, order, dtypes),
and only the changed runs are read."""
import gc
import json
import os
import shutil

import pandas as pd
import pytest

from mindexp import compare, layout
from mindexp.analysis import rows, snapshot
from mindexp.rundir import store as store_module
from mindexp.rundir.summary import SUMMARY_VERSION

from rundirs import make_run


def _finished(root, run_id, i, experiment="sum", *, evals=None, **config):
    """A run that ended with its summary in run.json (what the runner writes)."""
    loss = 0.5 / (i + 1)
    return make_run(root, run_id, experiment=experiment, losses=(1.0, loss),
                    config={"lr": 0.1 * (i + 1), "flag": bool(i % 2), "dims": [i, 2], **config},
                    meta={"summary": {"version": SUMMARY_VERSION, "params": {"w": 1.5 + i},
                                      "eval": evals or {"eval_acc": 0.5 + i / 10},
                                      "loss": {"rows": 2, "final": loss, "min": loss,
                                               "best_step": 2, "last_step": 2,
                                               "last_epoch": 1, "components": {}}},
                          "targets": {"w": 2.0}, "tags": ["t"] if i % 2 else []})


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "out"
    for i in range(6):
        _finished(root, f"s{i}", i)
    make_run(root, "live", status="running", experiment="sum", losses=(1.0, 0.8))
    os.makedirs(root / "sum" / "broken")
    (root / "sum" / "broken" / "run.json").write_text("{not json")
    return root / "sum"


def _cold(folder):
    """compare() with no snapshot (from the store's cells), and from every run's files."""
    for name in os.listdir(folder / layout.CATALOG):
        if name.startswith("compare-"):
            os.remove(folder / layout.CATALOG / name)
    from_store = compare(str(folder))
    return from_store


def _same(table, expected):
    pd.testing.assert_frame_equal(table, expected, check_exact=True)
    assert list(table.dtypes) == list(expected.dtypes) and table.attrs == expected.attrs


def _from_files(folder):
    """compare() of every run folder named one by one: read from their files."""
    dirs = sorted(os.path.join(folder, d) for d in os.listdir(folder) if not d.startswith("."))
    return compare(dirs)


@pytest.fixture
def reads(monkeypatch):
    """Counts: runs read from their folder by the store, runs read from their
    files by compare(), rows made by compare()."""
    counts = {"store": 0, "files": 0, "rows": 0}

    def counted(name, module, attribute):
        real = getattr(module, attribute)

        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, attribute, wrapper)
    counted("store", store_module, "_read_run")
    counted("files", snapshot, "file_cells")
    counted("rows", rows, "row_of")
    return counts


def test_a_cold_compare_from_the_store_equals_one_from_the_files(folder):
    table = compare(str(folder))
    _same(table, _from_files(folder))
    assert table.set_index("run_id")["status"]["broken"] == "unreadable"


def test_a_cold_table_is_made_with_the_cycle_collector_off_and_leaves_it_as_it_was(
        folder, monkeypatch):
    real, seen = rows.columns_of, []

    def columns_of(*args):
        seen.append(gc.isenabled())
        return real(*args)
    monkeypatch.setattr(rows, "columns_of", columns_of)
    expected = _from_files(folder)
    seen.clear()
    _same(compare(str(folder)), expected)   # the first: cold
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        _cold(folder)
        assert not gc.isenabled()
    finally:
        gc.enable()

    def broken(*args):
        raise RuntimeError("planted")
    monkeypatch.setattr(rows, "columns_of", broken)
    with pytest.raises(RuntimeError, match="planted"):
        _cold(folder)
    assert gc.isenabled()


def test_config_fields_named_like_other_columns_missing_or_nested_keep_their_cells(tmp_path):
    root = tmp_path / "out"
    _finished(root, "a", 0, status="x", steps=5, w=3, eval_acc=1, opt=None)
    _finished(root, "b", 1, opt={"k": [1, 2]})
    table = compare(str(root / "sum")).set_index("run_id")
    a, b = table.loc["a"], table.loc["b"]
    assert (a["config.status"], a["status"], a["steps"], a["steps_done"]) == ("x", "completed", 5, 2)
    assert (a["w"], a["param.w"], a["param.w_error"], a["config.eval_acc"]) == (3, 1.5, 0.5, 1)
    assert (b["param.w"], b["param.w_error"], b["dims"]) == (2.5, 0.5, (1, 2))
    assert pd.isna(b["config.status"]) and pd.isna(b["w"]) and pd.isna(a["opt"])
    assert (b["opt"], a["dims"]) == ((("k", (1, 2)),), (0, 2))
    assert {"config.status", "steps", "w", "config.eval_acc", "opt"} <= \
        set(table.attrs["config_columns"])


def test_eval_metrics_and_columns_in_order_of_first_appearance(tmp_path):
    root = tmp_path / "out"
    _finished(root, "a", 0, evals={"eval_b": 0.5}, late=1)
    _finished(root, "b", 1, evals={"eval_a": 0.25, "eval_b": 0.75})
    table = compare(str(root / "sum"))
    assert table.attrs["eval_columns"] == ["eval_b", "eval_a"]
    assert list(table.columns).index("eval_b") < list(table.columns).index("eval_a")
    _same(table, _from_files(root / "sum"))


def test_compare_after_a_run_copied_in_by_hand_reads_that_run_alone(folder, reads):
    compare(str(folder))
    shutil.copytree(folder / "s0", folder / "s0copy")
    reads.update(store=0, files=0, rows=0)
    table = compare(str(folder))
    # the copy read into the store; the live and broken runs read again from their files
    assert reads == {"store": 1, "files": 2, "rows": 2}
    assert "s0copy" in set(table["run_dir"].map(os.path.basename))
    _same(table, _cold(folder))
    _same(table, _from_files(folder))


def test_compare_after_a_writer_rewrote_a_run_and_one_was_removed(cli, folder, reads):
    compare(str(folder))
    assert cli("note", folder / "s2", "checked").returncode == 0
    assert cli("tag", folder / "s3", "+best").returncode == 0
    shutil.rmtree(folder / "s4")
    reads.update(store=0, files=0, rows=0)
    table = compare(str(folder))
    assert reads["store"] == 0 and reads["files"] == 2 and reads["rows"] == 3
    assert table.set_index("run_id")["note"]["s2"] == "checked"
    assert "s4" not in set(table["run_id"])
    _same(table, _cold(folder))
    _same(table, _from_files(folder))


def test_a_running_runs_row_is_current_on_every_call(folder):
    first = compare(str(folder)).set_index("run_id")
    assert first["final_loss"]["live"] == 0.8 and first["steps"]["live"] == 2
    with open(folder / "live" / "loss.csv", "a") as f:
        f.write("3,2,0.4,0.1,0.2\n")
    again = compare(str(folder)).set_index("run_id")
    assert again["final_loss"]["live"] == 0.4 and again["min_loss"]["live"] == 0.4


def test_a_change_of_columns_or_dtypes_gives_the_cold_table(folder):
    compare(str(folder))
    _finished(folder.parent, "s9", 9, extra="new field")          # a new config column
    _same(compare(str(folder)), _from_files(folder))
    _finished(folder.parent, "s10", 10, lr="text")                # text in a number column
    table = compare(str(folder), sort="run_id")
    _same(table, compare(_sorted_dirs(folder), sort="run_id"))
    assert table["lr"].dtype == object


def _sorted_dirs(folder):
    return sorted(os.path.join(folder, d) for d in os.listdir(folder) if not d.startswith("."))


def test_the_snapshot_is_rewritten_only_past_its_share_of_changes(cli, folder, monkeypatch):
    compare(str(folder))
    (name,) = [n for n in os.listdir(folder / layout.CATALOG) if n.startswith("compare-")]
    path = folder / layout.CATALOG / name
    before = path.read_bytes()
    monkeypatch.setattr(snapshot, "REWRITE_SHARE", 0.4)   # at most 3 changes of 9 rows: kept
    assert cli("note", folder / "s1", "one").returncode == 0
    _same(compare(str(folder)), _from_files(folder))
    shutil.copytree(folder / "s0", folder / "s0copy")
    _same(compare(str(folder)), _from_files(folder))          # both changes applied again
    assert path.read_bytes() == before
    shutil.rmtree(folder / "s5")
    shutil.copytree(folder / "s0", folder / "s0again")
    _same(compare(str(folder)), _from_files(folder))          # 4 changes of 9: written
    assert path.read_bytes() != before


def test_a_snapshot_of_another_store_is_read_anew(folder):
    compare(str(folder))
    shutil.rmtree(folder / layout.CATALOG / layout.CATALOG_DB, ignore_errors=True)
    for name in os.listdir(folder / layout.CATALOG):
        if not name.startswith("compare-"):
            os.remove(folder / layout.CATALOG / name)
    shutil.rmtree(folder / "s1")   # no feed tells it: the new store's token differs
    table = compare(str(folder))
    assert "s1" not in set(table["run_id"])
    _same(table, _from_files(folder))


def test_mindexp_compare_of_a_folder_reads_no_finished_runs_logs(cli, folder):
    (folder / "s1" / "loss.csv").write_text("step,epoch,loss\n1,1,not a number\n")   # broken
    shown = cli("compare", folder, "--sort", "run_id")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:]] == \
        ["broken", "live", "s0", "s1", "s2", "s3", "s4", "s5"]
    assert "skipped" not in shown.stderr and "unreadable run" in shown.stderr
