"""One ``--where`` grammar, two back ends: the catalog's SQL and the runs
table's pandas evaluation give the same runs for any condition, and ``runs
--where``, ``gc --where``, ``compare(where=)`` and the dashboard's table select
the same runs on a tree with damaged, running and planted folders.

The tree holds TREE_RUNS runs (300; ``MINDEXP_WHERE_RUNS=10000`` for the
issue's size: minutes)."""
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mindexp
from mindexp.errors import ConfigError
from mindexp.manage import queried, runs as runs_module
from mindexp.manage.filters import Filters

from rundirs import make_run

# 48 runs hold every kind of run four times over; MINDEXP_WHERE_RUNS=10000 for the scale
TREE_RUNS = int(os.environ.get("MINDEXP_WHERE_RUNS", "48"))
EVERY_STATUS = "completed,failed,interrupted,diverged,pruned,running"


def _seed_runs(out):
    """Twelve kinds of run: configs, outcomes, statuses, tags, eval and parameters."""
    for i in range(12):
        make_run(out, f"s{i:02d}", status=["completed", "failed", "interrupted"][i % 3],
                 config={"lr": [0.001, 0.01, 0.1, 0.05][i % 4],
                         "optimizer": ["sgd", "adam", "momentum"][i % 3],
                         **({"width": 8 + i % 3} if i % 2 else {})},
                 losses=(1.0, 0.3 + 0.05 * i, 0.1 * (i % 5) + 0.2),
                 params={"w": [0.5, 1.0 + 0.1 * i, 2.0 - 0.1 * i]}, targets={"w": 2.0},
                 eval_rows=[{"epoch": 1, "step": 2, "accuracy": 0.1 * (i % 7)}],
                 meta={"started_at": f"2026-01-01T00:{i:02d}:00+00:00",
                       "tags": ["keep"] if i % 4 == 0 else []})


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("grammar") / "outputs"
    _seed_runs(out)
    seeds = sorted((out / "toy").iterdir())
    for n in range(12, TREE_RUNS):   # copies of the seeds: the catalog and pandas at scale
        copy = out / "toy" / f"c{n:05d}"
        shutil.copytree(seeds[n % 12], copy)
        run_json = copy / "run.json"
        run_json.write_text(run_json.read_text().replace(f'"run_id": "{seeds[n % 12].name}"',
                                                         f'"run_id": "c{n:05d}"'))
    make_run(out, "live", status="running", config={"lr": 0.01, "optimizer": "sgd"},
             losses=(1.0, 0.25), meta={"started_at": "2026-02-01T00:00:00+00:00"})
    make_run(out, "planted", config={"lr": 0.1, "optimizer": "adam"},
             losses=(1.0, float("nan")), meta={"started_at": "2026-02-02T00:00:00+00:00"})
    shutil.copytree(out / "toy" / "s00", out / "toy" / "damaged")
    (out / "toy" / "damaged" / "run.json").write_text('{"status": ')
    (out / "toy" / "stray").mkdir()
    (out / "toy" / "stray" / "notes.txt").write_text("not a run")
    return out


def _ids(paths):
    return sorted(os.path.basename(str(p).rstrip("/")) for p in paths)


def _runs_ids(cli, root, text):
    result = cli("runs", root, "--all", "--wide", "--status", EVERY_STATUS, "--where", text)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    return [] if lines == ["no runs match"] else _ids(line.split()[0] for line in lines[1:])


def _gc_ids(cli, root, text):
    result = cli("gc", root, "--dry-run", "--status", EVERY_STATUS, "--where", text)
    assert result.returncode == 0, result.stderr
    return _ids(line.split()[0] for line in result.stdout.splitlines() if line.startswith("  "))


@pytest.fixture(scope="module")
def dashboard(tree):
    from mindexp.analysis.dashboard import make_server
    server = make_server([str(tree)], port=0)
    yield server.RequestHandlerClass.index
    server.server_close()


def _dashboard_ids(index, text):
    """The runs the dashboard's table lists for ``where`` (its pages, 500 rows each)."""
    dirs, offset = [], 0
    while True:
        rows = index.runs_page(offset, 500, where=text)["rows"]
        dirs += [row["dir"] for row in rows]
        if len(rows) < 500:
            return [i for i in _ids(dirs) if i != "damaged"]   # unreadable: listed too
        offset += 500


def _compare_ids(root, text):
    table = mindexp.compare(str(root), where=f"({text}) and status != 'unreadable'")
    return _ids(table["run_dir"])


@pytest.mark.slow   # reads every run's logs several times, two commands per condition
@pytest.mark.timeout(900)
@pytest.mark.parametrize("text", [
    "lr > 0.01 and optimizer == 'adam'", "lr < 0.05 & final_loss < 0.5 | tags == 'keep'",
    "optimizer in ['sgd', 'momentum'] and not (width == 9)", "0.005 < lr < 0.07",
    "`lr` * 10 >= 0.5", "min_loss < 0.35", "eval_accuracy >= 0.3 or best_step == 3",
    "w_error < 0.5", "status == 'failed' | final_loss != 0.2",
])
def test_runs_gc_compare_and_the_dashboard_select_the_same_runs(cli, tree, dashboard, text):
    runs = _runs_ids(cli, tree, text)
    assert runs, "a condition that selects nothing proves nothing"
    assert _gc_ids(cli, tree, text) == runs
    assert _compare_ids(tree, text) == runs
    if any(name in text for name in ("min_loss", "best_step", "eval_", "_error", "*")):
        with pytest.raises(ValueError, match="mindexp runs --where"):   # not in SQL
            dashboard.runs_page(0, 10, where=text)
    else:
        assert _dashboard_ids(dashboard, text) == runs


def test_the_dashboards_table_takes_the_grammar_and_refuses_in_one_line(dashboard):
    assert _dashboard_ids(dashboard, "lr > 0.07 and optimizer == 'adam'") == sorted(
        ["planted", "s10"] + [f"c{n:05d}" for n in range(12, TREE_RUNS) if n % 12 == 10])
    for text, said in (("__import__('os')", "a function call"),
                       ("min_loss < 1", "Received: where='min_loss < 1'")):
        with pytest.raises(ValueError, match="where") as caught:
            dashboard.runs_page(0, 10, where=text)
        assert said in str(caught.value) and "\n" not in str(caught.value)


# -- the two back ends agree on generated conditions ---------------------------------

_NUMBERS = st.sampled_from(["0", "1", "2", "3", "0.001", "0.01", "0.05", "0.1", "-1", "0.3",
                            "1e-2", "8", "9"])
_TEXTS = st.sampled_from(["'sgd'", '"adam"', "'keep'", "'completed'", "'failed'", "'toy'",
                          "''", "'running'"])
_COLUMNS = st.sampled_from(["lr", "final_loss", "steps", "width", "epochs", "optimizer",
                            "tags", "status", "experiment", "`lr`"])
_CONSTANTS = st.one_of(_NUMBERS, _TEXTS)
_OPS = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


def _comparisons():
    pair = st.builds(lambda c, o, v: f"{c} {o} {v}", _COLUMNS, _OPS, _CONSTANTS)
    flipped = st.builds(lambda v, o, c: f"{v} {o} {c}", _CONSTANTS, _OPS, _COLUMNS)
    listed = st.builds(lambda c, o, vs: f"{c} {o} [{', '.join(vs)}]", _COLUMNS,
                       st.sampled_from(["in", "not in", "==", "!="]),
                       st.lists(_CONSTANTS, min_size=0, max_size=3))
    chained = st.builds(lambda a, o, c, p, b: f"{a} {o} {c} {p} {b}", _NUMBERS,
                        st.sampled_from(["<", "<="]), _COLUMNS, st.sampled_from(["<", "<="]),
                        _NUMBERS)
    return st.one_of(pair, flipped, listed, chained)


_CONDITIONS = st.recursive(_comparisons(), lambda inner: st.one_of(
    st.builds(lambda a, j, b: f"({a}) {j} ({b})", inner,
              st.sampled_from(["and", "or", "&", "|"]), inner),
    st.builds(lambda n, a: f"{n}({a})", st.sampled_from(["not ", "~"]), inner)),
    max_leaves=4)


@pytest.fixture(scope="module")
def table(tree):
    return runs_module.runs_table([str(tree)])


def _pandas_ids(table, text):
    try:
        return _ids(runs_module.select(table, Filters(where=text))["run_dir"])
    except ConfigError:
        return "refused"


def _sql_ids(tree, text):
    blocks = queried.listed(str(tree), Filters(where=text), limit=10 ** 6, wide=True)
    if blocks is None:
        return None   # the SQL back end cannot answer it: the table does, by definition
    lines = "".join(blocks).splitlines()
    return [] if lines == ["no runs match"] else _ids(line.split()[0] for line in lines[1:])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CONDITIONS)
def test_sql_and_pandas_back_ends_agree(tree, table, text):
    sql = _sql_ids(tree, text)
    if sql is not None:
        assert sql == _pandas_ids(table, text), text


def test_compare_where_takes_the_grammar_and_refuses_in_one_line(tmp_path):
    for i, lr in enumerate((0.01, 0.1)):
        make_run(tmp_path, f"k{i}", config={"lr": lr}, losses=(1.0, 0.5 - 0.1 * i))
    assert list(mindexp.compare(str(tmp_path), where="lr > 0.05 and min_loss < 0.5")
                ["run_id"]) == ["k1"]
    grouped = mindexp.compare(str(tmp_path), where="`lr` in [0.01]", group_by="lr")
    assert list(grouped["n"]) == [1]
    for text, said in (("lrate > 1", "unknown column 'lrate'. Did you mean lr?"),
                       ("__import__('os')", "a function call")):
        with pytest.raises(ConfigError, match="--where") as caught:
            mindexp.compare(str(tmp_path), where=text)
        assert said in str(caught.value) and "\n" not in str(caught.value)
