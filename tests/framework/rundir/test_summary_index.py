"""The summary index per output root: a cache of run.json + config.json that
never hides a run on disk, never shows one that is gone, and only costs time
when damaged."""
import json
import os
import shutil

import pytest

from mindexp import compare
from mindexp.callbacks import schema
from mindexp.rundir.index import _read_index, _write_index, indexed_runs

from rundirs import make_run


def _ids(root):
    return sorted(run.meta["run_id"] for run in indexed_runs(root))


@pytest.fixture
def root(tmp_path):
    for i in range(3):
        make_run(tmp_path, f"r{i}", config={"lr": 0.1 * (i + 1)})
    return tmp_path


def test_a_current_index_is_read_instead_of_the_runs_files(root):
    assert _ids(root) == ["r0", "r1", "r2"]
    entries = _read_index(str(root))
    # mark the cached copy: a listing that reads the index shows the mark
    entries[os.path.join("toy", "r1")]["meta"]["note"] = "from the index"
    _write_index(str(root), entries)
    notes = {run.meta["run_id"]: run.meta.get("note") for run in indexed_runs(root)}
    assert notes["r1"] == "from the index"


def test_the_index_never_hides_a_new_run_nor_shows_a_removed_one(root):
    _ids(root)
    make_run(root, "r3")
    shutil.rmtree(root / "toy" / "r0")
    assert _ids(root) == ["r1", "r2", "r3"]
    assert compare(str(root))["run_id"].tolist().count("r0") == 0


def test_a_changed_run_json_is_read_again(root):
    _ids(root)
    path = root / "toy" / "r2" / schema.RUN_JSON
    meta = json.loads(path.read_text())
    meta.update(status="failed", note="changed")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, path)   # as the runner writes it: a new inode
    statuses = {run.meta["run_id"]: run.meta["status"] for run in indexed_runs(root)}
    assert statuses["r2"] == "failed"


@pytest.mark.parametrize("damage", [
    lambda text: text[:len(text) // 2],                            # torn
    lambda text: text.replace('"completed"', '"failed"', 1),       # edited by hand
    lambda text: "{not json"])
def test_a_damaged_index_only_costs_time(root, damage):
    _ids(root)
    index = root / schema.SUMMARY_INDEX
    index.write_text(damage(index.read_text()))
    assert sorted(compare(str(root))["run_id"]) == ["r0", "r1", "r2"]
    assert sorted(compare(str(root))["status"]) == ["completed"] * 3
    assert len(_read_index(str(root))) == 3   # rewritten whole
