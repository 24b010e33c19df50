"""compare()'s cold table made a column at a time from the store's flat cells
equals the table made of rows from the run folders: values, the type of every
value, dtypes, columns, their order and attrs, for runs of many shapes."""
import json
import math
import os
import sqlite3

import pandas as pd
import pytest

from mindexp import compare, layout
from mindexp.analysis import rows
from mindexp.rundir import store as store_module
from mindexp.rundir.summary import SUMMARY_VERSION

from rundirs import make_run

NAN = float("nan")


def _finished(root, run_id, *, config, final=0.25, finals=None, evals=None, meta=None,
              targets=None, status="completed"):
    """A run that ended with its summary in run.json (what the runner writes)."""
    summary = {"version": SUMMARY_VERSION, "params": finals or {}, "eval": evals or {},
               "loss": {"rows": 2, "final": final, "min": 0.25, "best_step": 2,
                        "last_step": 2, "last_epoch": 1, "components": {}}}
    return make_run(root, run_id, experiment="mix", status=status, losses=(1.0, 0.25),
                    config=config, targets=targets,
                    meta={"summary": summary, **(meta or {})})


@pytest.fixture
def mixed(tmp_path):
    """Runs of many shapes, interleaved: a column of ints and floats, one of mixed
    kinds, NaN next to text, lists and objects, bools (alone and next to ints),
    a big int, a trial, eval metrics some runs lack, a running run (no cells),
    an old run (no summary: no cells) and an unreadable one."""
    root = tmp_path / "out"
    _finished(root, "a0", config={"k": 1, "mix": 1, "flag": True, "both": True, "lst": [1, [2]],
                                  "obj": {"b": 1, "a": [1]}, "nan_mix": NAN, "big": 2 ** 63},
              finals={"w": 1.5}, targets={"w": 2.0}, evals={"eval_acc": 0.5})
    _finished(root, "a1", config={"k": 1.5, "mix": "text", "flag": False, "both": 1, "lst": [],
                                  "nan_mix": "x", "big": 1},
              finals={"w": 1, "v": None}, targets={"w": 2, "v": 1.0, "u": True}, final=NAN)
    make_run(root, "live", status="running", experiment="mix", losses=(1.0, 0.8),
             config={"k": 3, "mix": 0.5, "flag": True, "both": True})
    _finished(root, "a2", config={"k": 2, "mix": None, "flag": True, "both": False, "only": 3},
              evals={"eval_acc": 0.7, "eval_f1": 0.1}, status="pruned",
              meta={"study": "s", "trial": 3, "tags": ["x", "y"], "note": "hi"})
    make_run(root, "old", experiment="mix", losses=(1.0, 0.5), config={"k": 4, "mix": [1]})
    _finished(root, "a3", config={"k": 5, "mix": 2.5, "flag": True, "both": True},
              finals={"w": 2.5}, targets={"w": 2.0})
    os.makedirs(root / "mix" / "broken")
    (root / "mix" / "broken" / "run.json").write_text("{not json")
    return root / "mix"


def _cold(folder):
    """compare() from the store's cells, with no snapshot."""
    for name in os.listdir(folder / layout.CATALOG) if (folder / layout.CATALOG).exists() else ():
        if name.startswith("compare-"):
            os.remove(folder / layout.CATALOG / name)
    return compare(str(folder), sort="run_id")


def _from_files(folder):
    """compare() of every run folder named one by one: rows made from their files."""
    dirs = sorted(os.path.join(folder, d) for d in os.listdir(folder) if not d.startswith("."))
    return compare(dirs, sort="run_id")


def _same(table, expected):
    """Equal, and every value of the same type (None is not NaN, 1 is not 1.0)."""
    pd.testing.assert_frame_equal(table, expected, check_exact=True)
    assert list(table.dtypes) == list(expected.dtypes) and table.attrs == expected.attrs
    for column in table.columns:
        assert list(map(type, table[column].tolist())) == \
            list(map(type, expected[column].tolist())), column


def test_a_cold_table_of_runs_of_many_shapes_equals_the_one_from_their_folders(mixed):
    table = _cold(mixed)
    _same(table, _from_files(mixed))
    by_id = table.set_index("run_id")
    kinds = {c: str(table[c].dtype) for c in ("k", "seed", "flag", "both", "mix", "big",
                                              "eval_f1", "w", "lst", "trial_state")}
    # the unreadable run's row is NaN but for its id, status, labels and folder
    assert kinds == {"k": "float64", "seed": "float64", "flag": "object", "both": "object",
                     "mix": "object", "big": "float64", "eval_f1": "float64",
                     "w": "float64", "lst": "object", "trial_state": "str"}
    assert math.isnan(by_id["nan_mix"]["a0"]) and by_id["nan_mix"]["a1"] == "x"
    assert by_id["lst"]["a0"] == (1, (2,)) and by_id["obj"]["a0"] == (("a", (1,)), ("b", 1))
    assert (by_id["w_error"]["a1"], by_id["trial"]["a2"], by_id["tags"]["a2"]) == (1.0, 3, "x,y")
    assert math.isnan(by_id["final_loss"]["a1"]) and by_id["status"]["broken"] == "unreadable"
    assert by_id["final_loss"]["live"] == 0.8 and by_id["mix"]["old"] == (1,)


def test_the_stored_cells_keep_nan_as_nan_and_the_running_and_old_runs_have_none(mixed):
    _cold(mixed)
    db = sqlite3.connect(store_module.database_path(str(mixed)))
    try:
        stored = {rel: (json.loads(shape), json.loads(vals)) for rel, shape, vals in db.execute(
            "SELECT c.rel, s.shape, c.vals FROM cells c JOIN shapes s ON s.id = c.shape")}
    finally:
        db.close()
    assert sorted(stored) == ["a0", "a1", "a2", "a3"]
    shape, values = stored["a0"]
    at = shape.index(["config", "nan_mix", "float"])
    assert isinstance(values[at], float) and math.isnan(values[at])


def test_an_old_schema_store_is_made_again_and_gives_the_same_table(mixed):
    _cold(mixed)
    path = store_module.database_path(str(mixed))
    db = sqlite3.connect(path)
    try:   # the index as the previous version wrote it: one JSON text of cells per run
        db.execute("DROP TABLE cells")
        db.execute("DROP TABLE shapes")
        db.execute("CREATE TABLE cells (host TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT "
                   "NULL, cells TEXT NOT NULL, PRIMARY KEY (host, root, rel))")
        db.execute("INSERT INTO cells SELECT host, root, rel, '{}' FROM runs")
        db.execute("UPDATE catalog_version SET version = 2")
        db.commit()
    finally:
        db.close()
    _same(_cold(mixed), _from_files(mixed))
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT version FROM catalog_version").fetchone()[0] == \
            store_module.VERSION
    finally:
        db.close()


def _cells(run_id, config, **parts):
    meta = {"experiment": "x", "run_id": run_id, "status": "completed", "study": None,
            "trial": None, "tags": [], "note": None, "targets": {}, **parts.pop("meta", {})}
    return {"meta": meta, "config": config,
            "outcomes": parts.get("outcomes", {"final_loss": 0.5, "steps": 2}),
            "finals": parts.get("finals", {}), "eval": parts.get("eval", {}),
            "system": parts.get("system", {}), "git": list(parts.get("git", (None, None)))}


@pytest.mark.parametrize("unreadable", [False, True])
def test_the_columns_of_interleaved_shapes_make_the_frame_the_rows_make(unreadable):
    made = [
        _cells("r0", {"i": 1, "f": 0.5, "b": True, "s": "a"}, eval={"eval_x": 1.0},
               system={"peak_rss_mb": 3}),
        _cells("", {"i": 2, "f": 1, "b": False, "s": None, "n": [1]},
               outcomes={"final_loss": None, "steps": 3}, git=("abc", True)),
        _cells("r2", {"i": 2 ** 70, "f": 0.25, "b": True, "s": "c"}, eval={"eval_x": 2.0},
               system={"peak_rss_mb": 4}),
        _cells("r3", {"i": 3, "f": 2.0, "b": 1, "s": "d"}, finals={"lr": 0.1, "v": None},
               meta={"targets": {"lr": 0}, "note": 7}),
        _cells("r4", {"i": 4, "f": 0.75, "b": True, "s": "e", "n": {"k": [2]}},
               eval={"eval_x": 3.0}, system={"peak_rss_mb": 5}, meta={"note": ""}),
    ]
    entries = rows.flat_entries((f"/runs/r{i}", cells) for i, cells in enumerate(made))
    errors = [rows.Skipped("/runs/zz", "bad", "unreadable")] if unreadable else []
    config = rows.table_config(shape for _, shape, _ in entries)
    evals = rows.union_keys(rows.part_keys(shape, "eval") for _, shape, _ in entries)
    expected_rows = rows.rows_of(entries, errors, config)
    columns = rows.column_order(expected_rows, config)
    by_shape = {}
    for i, (_, shape, _) in enumerate(entries):
        by_shape.setdefault(shape, []).append(i)
    assert len(by_shape) == 4   # r0 and r2 share a shape, with r1 between them
    groups = [rows.shape_runs(at, shape, [entries[i][2] for i in at],
                              [entries[i][0] for i in at], config)
              for shape, at in by_shape.items()]
    table = rows.columnar_frame(groups, rows.unreadable_rows(errors, tags="", note=""),
                                config, evals, columns)
    _same(table, rows.frame_of(expected_rows, config, evals, columns))
    assert str(table["f"].dtype) == "float64" and table["run_id"][1] == "r1"
    assert str(table["eval_x"].dtype) == "float64" and table["i"].dtype == object


def test_cells_whose_values_json_would_give_back_as_another_type_are_not_stored():
    from mindexp.rundir.summary import stored_cells
    meta = {"run_id": "r", "status": "completed", "summary": {
        "version": SUMMARY_VERSION, "params": {}, "eval": {},
        "loss": {"rows": 1, "final": 0.5, "min": 0.5, "best_step": 1, "last_step": 1,
                 "last_epoch": 1, "components": {}}}}
    shape, values = stored_cells(meta, {"dims": [1, 2]})
    assert ["config", "dims", "list"] in json.loads(shape) and [1, 2] in json.loads(values)
    assert stored_cells(meta, {"dims": (1, 2)}) is None   # a tuple would come back a list


def test_the_cold_tables_row_shapes_are_the_ones_its_rows_give(mixed):
    """The snapshot's shapes, made a group at a time, are those a row at a time
    gives (what the warm path looks a changed run's row up in)."""
    from mindexp.analysis import snapshot
    with store_module.open_store(str(mixed)) as store:
        kept = snapshot._from_store(store, str(mixed))
        rels = [rel for rel, _, _ in store.cells(str(mixed)).rows]
        entries, errors = snapshot._entries(store, rels)
    made = rows.rows_of(entries, errors, kept.config)
    shapes, codes = snapshot._shapes_of(made, snapshot._row_parts(entries, made))
    assert kept.shapes == shapes and kept.codes.tolist() == codes.tolist()
    assert len(shapes) > 4


def test_rows_of_one_shape_whose_made_cells_differ_in_type_get_shapes_of_their_own():
    from mindexp.analysis import snapshot
    made = [_cells("r0", {"a": 1}, meta={"note": 7}), _cells("r1", {"a": 2}, meta={"note": 0}),
            _cells("r2", {"a": 3}, meta={"note": 5}), _cells("r3", {"a": 1.5})]
    entries = rows.flat_entries((f"/runs/r{i}", cells) for i, cells in enumerate(made))
    config = rows.table_config(shape for _, shape, _ in entries)
    gathered = {}
    for i, (run_dir, shape, values) in enumerate(entries):
        runs = gathered.setdefault(shape, snapshot._Gathered(shape))
        runs.positions.append(i)
        runs.dirs.append(run_dir)
        runs.values.append(values)
    groups = [rows.shape_runs(runs.positions, runs.shape, runs.parsed(), runs.dirs, config)
              for runs in gathered.values()]
    assert len(groups) == 2
    errors = [rows.Skipped("/runs/zz", "bad", "unreadable")]
    shapes, codes = snapshot._group_shapes(list(gathered.values()), groups,
                                           rows.unreadable_rows(errors, tags="", note=""))
    made_rows = rows.rows_of(entries, errors, config)
    assert (shapes, codes.tolist()) == \
        tuple(map(list, snapshot._shapes_of(made_rows, snapshot._row_parts(entries, made_rows))))
    assert codes.tolist() == [0, 1, 0, 2, 3]   # note 0 is "" (text), 7 and 5 stay numbers


def test_runs_of_one_shape_from_the_store_and_from_their_files_keep_their_order():
    from mindexp.analysis import snapshot
    runs = snapshot._Gathered(("shape",))
    runs.values += ['[1, "a"]', [2, "b"], '[3, NaN]']
    parsed = runs.parsed()
    assert parsed[:2] == [[1, "a"], [2, "b"]] and parsed[2][0] == 3 and math.isnan(parsed[2][1])


def test_runs_whose_shape_the_store_lost_are_read_from_their_files(mixed):
    _cold(mixed)
    db = sqlite3.connect(store_module.database_path(str(mixed)))
    try:
        db.execute("DELETE FROM shapes")
        db.commit()
    finally:
        db.close()
    _same(_cold(mixed), _from_files(mixed))


def test_a_column_of_numbers_that_an_unreadable_runs_row_fills_keeps_its_text():
    made = [_cells(1.5, {"a": 1}), _cells(2.5, {"a": 2})]   # run ids that are numbers
    entries = rows.flat_entries((f"/runs/r{i}", cells) for i, cells in enumerate(made))
    errors = [rows.Skipped("/runs/zz", "bad", "unreadable")]
    config = rows.table_config(shape for _, shape, _ in entries)
    expected_rows = rows.rows_of(entries, errors, config)
    columns = rows.column_order(expected_rows, config)
    group = rows.shape_runs([0, 1], entries[0][1], [v for _, _, v in entries],
                            [d for d, _, _ in entries], config)
    table = rows.columnar_frame([group], rows.unreadable_rows(errors, tags="", note=""),
                                config, [], columns)
    _same(table, rows.frame_of(expected_rows, config, [], columns))
    assert table["run_id"].tolist() == [1.5, 2.5, "zz"]
