"""RunStore.query: the one listing of runs (filters, --where, sort, page) that
``runs``, ``runs --count`` and the dashboard's table ask."""
import pytest

from mindexp.rundir import store as cat
from mindexp.rundir import where as grammar
from mindexp.rundir.store import Query
from rundirs import make_run

RUNS = {   # run_id: (status, tags, config, losses, day, experiment)
    "a": ("completed", "x", {"lr": 0.1, "width": 2}, (1.0, 0.5), 1, "toy"),
    "b": ("failed", "", {"lr": 0.3}, (), 2, "toy"),
    "c": ("completed", "", {"lr": 0.2, "width": 1}, (1.0, 0.2), 3, "toy"),
    "d": ("skipped", "x", {"lr": 0.4}, (1.0,), 4, "toy"),
    "e": ("completed", "x,y", {"lr": 0.5, "width": 3}, (1.0, 0.9), 5, "other"),
    "f": ("running", "", {"lr": 0.6}, (1.0,), 6, "toy"),
}


@pytest.fixture
def store(tmp_path):
    out = tmp_path / "outputs"
    for run_id, (status, tags, config, losses, day, experiment) in RUNS.items():
        make_run(out, run_id, status=status, config=config, losses=losses,
                 experiment=experiment,
                 meta={"tags": [t for t in tags.split(",") if t],
                       "started_at": f"2026-01-0{day}T00:00:00+00:00"})
    with cat.open_store(out) as opened:
        yield opened, str(out)


def _ids(store, **fields):
    opened, folder = store
    page = {k: fields.pop(k) for k in ("limit", "offset") if k in fields}
    return [r[0] for r in opened.query(folder, Query(**fields), ["run_id"], **page)]


def test_newest_first_by_default_and_a_page_of_it(store):
    assert _ids(store) == ["f", "e", "d", "c", "b", "a"]
    assert _ids(store, limit=2, offset=1) == ["e", "d"]
    assert _ids(store, limit=5, offset=4) == ["b", "a"]


def test_filters_by_status_tag_experiment_time_and_skipped(store):
    assert _ids(store, status=("completed", "failed")) == ["e", "c", "b", "a"]
    assert _ids(store, tags=("x",)) == ["e", "d", "a"]
    assert _ids(store, tags=("x", "y")) == ["e"]
    assert _ids(store, experiments=("other",)) == ["e"]
    assert _ids(store, skipped=False) == ["f", "e", "c", "b", "a"]
    since = cat.timestamp("2026-01-04T00:00:00+00:00")
    assert _ids(store, since=since) == ["f", "e", "d"]


def test_where_in_sql_and_live_running_runs_left_to_the_caller(store):
    assert _ids(store, where="lr >= 0.3 and lr < 0.6") == ["e", "d", "b"]
    assert _ids(store, where=grammar.parse("width > 1")) == ["e", "a"]
    assert _ids(store, where="lr > 10") == []
    assert _ids(store, where="lr > 10", live=True) == ["f"]
    with pytest.raises(grammar.Unsupported):
        _ids(store, where="min_loss < 1")


def test_sort_puts_missing_values_last_in_either_direction(store):
    assert _ids(store, sort="width") == ["c", "a", "e", "f", "d", "b"]
    assert _ids(store, sort="-width") == ["e", "a", "c", "f", "d", "b"]
    assert _ids(store, sort="final_loss", status=("completed", "failed")) == ["c", "a", "e", "b"]
    with pytest.raises(grammar.Unsupported):   # a running run's loss log may change it
        _ids(store, sort="final_loss", live=True)


def test_counted_and_grouped_by_the_same_filters(store):
    opened, folder = store
    query = Query(where="lr < 0.45", skipped=False)
    assert opened.query(folder, query, ["COUNT(*)"]).fetchone()[0] == 3
    assert dict(opened.query(folder, query, ["status", "COUNT(*)"], group="status")) == \
        {"completed": 2, "failed": 1}
