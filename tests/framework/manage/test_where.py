"""``mindexp runs --where`` in SQL: each form the SQL back end takes gives what
pandas gives, a value is always data, and anything else is pandas' answer."""
import json
import os
import shutil

import pytest

from mindexp.manage import queried, runs as runs_module
from mindexp.rundir import where as w
from mindexp.rundir import store as cat

from rundirs import make_run


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("where") / "outputs"
    for i in range(6):
        make_run(out, f"r{i}", config={"lr": [0.0005, 0.001, 0.002, 0.0005, 0.01, 0.1][i],
                                       "optimizer": ["sgd", "adam", "momentum"][i % 3],
                                       **({"width": 8} if i % 2 else {})},
                 losses=(1.0, [0.005, 0.02, 0.001, 0.5, 0.009, 0.3][i]),
                 meta={"started_at": f"2026-01-0{i + 1}T00:00:00+00:00",
                       "tags": ["keep"] if i < 3 else []})
    make_run(out, "nan", config={"lr": 0.001}, losses=(1.0, float("nan")),
             meta={"started_at": "2026-01-09T00:00:00+00:00"})
    shutil.copytree(out / "toy" / "r0", out / "toy" / "broken")
    (out / "toy" / "broken" / "run.json").write_text("{")
    return out


def _pandas_answer(cli, root, monkeypatch, *args):
    with monkeypatch.context() as patch:
        patch.setattr(queried, "listed", lambda *a, **k: None)
        return cli("runs", root, *args)


def _sql_answer(cli, root, monkeypatch, *args):
    """The catalog's answer, proven not to have asked pandas."""
    def refuse(*a, **k):
        raise AssertionError("pandas was asked")
    with monkeypatch.context() as patch:
        patch.setattr(runs_module, "runs_table", refuse)
        return cli("runs", root, *args)


@pytest.mark.parametrize("expression, ids", [
    ("lr < 0.001", ["r3", "r0"]),
    ("lr <= 0.001", ["nan", "r3", "r1", "r0"]),
    ("0.001 > lr", ["r3", "r0"]),
    ("lr == 0.002", ["r2"]),
    ("lr != 0.0005", ["nan", "r5", "r4", "r2", "r1", "broken"]),
    ("lr >= 0.01 or optimizer == 'sgd'", ["nan", "r5", "r4", "r3", "r0"]),
    ("lr < 0.001 and final_loss < 0.01", ["r0"]),
    ("not (optimizer == \"adam\")", ["nan", "r5", "r3", "r2", "r0", "broken"]),
    ("final_loss > 0.1", ["r5", "r3"]),
    ("final_loss != 0.5", ["nan", "r5", "r4", "r2", "r1", "r0", "broken"]),   # NaN differs
    ("width == 8 and steps >= 2", ["r5", "r3", "r1"]),
    ("width < 9", ["r5", "r3", "r1"]),
    ("experiment == 'toy' and lr > 0.05", ["r5"]),
    ("optimizer == 3", []),
    ("lr == 'adam'", []),
    ("tags == 'keep' and (lr > 0.0009 or lr < 0)", ["r2", "r1"]),
    ("lr < 0.001 & final_loss < 0.01", ["r0"]),              # pandas' operators
    ("lr > 0.05 | optimizer == 'adam'", ["r5", "r4", "r1"]),
    ("optimizer in ['sgd', 'adam']", ["nan", "r4", "r3", "r1", "r0"]),
    ("optimizer not in ('sgd', 3)", ["r5", "r4", "r2", "r1", "broken"]),
    ("optimizer == ['momentum']", ["r5", "r2"]),
    ("0.0001 < lr < 0.005", ["nan", "r3", "r2", "r1", "r0"]),   # chained
    ("lr > -0.5 and lr < +0.005", ["nan", "r3", "r2", "r1", "r0"]),   # signed numbers
    ("`lr` >= 0.01 and ~(optimizer == 'sgd')", ["r5", "r4"]),
])
def test_each_supported_form_answers_in_sql_as_pandas_does(cli, root, monkeypatch, expression,
                                                           ids):
    sql = _sql_answer(cli, root, monkeypatch, "--where", expression)
    assert sql.returncode == 0, sql.stderr
    pandas = _pandas_answer(cli, root, monkeypatch, "--where", expression)
    assert sql.stdout == pandas.stdout and sql.returncode == pandas.returncode
    listed = [line.split()[0].rsplit("/", 1)[-1] for line in sql.stdout.splitlines()[1:]]
    assert listed == ids and (ids or sql.stdout.strip() == "no runs match")


@pytest.mark.parametrize("args", [
    ("--sort", "lr"), ("--sort=-lr",), ("--sort", "final_loss", "--limit", "3"),
    ("--tag", "keep", "--where", "lr > 0.0006"), ("--status", "completed", "--limit", "2"),
    ("--experiment", "toy", "--wide"), ("--since", "2026-01-04"),
])
def test_filters_sort_and_limit_answer_in_sql_as_pandas_does(cli, root, monkeypatch, args):
    sql = _sql_answer(cli, root, monkeypatch, *args)
    assert sql.returncode == 0, sql.stderr
    assert sql.stdout == _pandas_answer(cli, root, monkeypatch, *args).stdout


@pytest.mark.parametrize("expression", [
    "min_loss < 0.01",                       # a column only the logs give
    "lr * 2 < 0.002",                        # arithmetic
    "lr < width",                            # a column against a column
    "-lr > -0.005",                          # a sign before a column
])
def test_an_unsupported_form_falls_back_to_pandas_with_the_same_answer(cli, root, monkeypatch,
                                                                       expression):
    with pytest.raises(w.Unsupported):
        if "min_loss" in expression:
            queried._kinds(*_scoped(root), ["min_loss"])
        else:
            w.to_sql(w.parse(expression), {n: w.Column(n, (), "number") for n in ("lr", "width")})
    listed = cli("runs", root, "--where", expression)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == _pandas_answer(cli, root, monkeypatch, "--where", expression).stdout
    assert len(listed.stdout.splitlines()) > 1


def _scoped(root):
    catalog = cat.open_store(root)
    return (catalog, *catalog.scope(str(root)))


@pytest.mark.parametrize("expression, code", [
    ("lr < 1; DROP TABLE runs", 2),                       # not the subset; pandas refuses
    ("optimizer == \"x'; DROP TABLE runs; --\"", 0),      # a value: matches nothing
    ("optimizer == 'sgd'' OR ''1''=''1'", 0),              # pandas joins the strings: data
])
def test_an_injection_is_refused_or_treated_as_data(cli, root, expression, code):
    listed = cli("runs", root, "--where", expression)
    assert listed.returncode == code, listed.stderr
    if code == 0:
        assert listed.stdout.strip() == "no runs match"
    with cat.open_store(root) as catalog:
        assert len(catalog.select(["run_id"])) == 8       # the table is whole


def test_a_running_run_is_matched_on_its_live_loss(cli, root, tmp_path, monkeypatch):
    copy = tmp_path / "live"
    shutil.copytree(root / "toy" / "r3", copy / "toy" / "r3")
    path = copy / "toy" / "r3" / "run.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"status": "running"}))
    with open(copy / "toy" / "r3" / "loss.csv", "a") as f:
        f.write("3,2,0.004,0.1,0.2\n")   # logged after run.json: run.json still says 0.5
    sql = _sql_answer(cli, copy, monkeypatch, "--where", "final_loss < 0.01")
    assert "r3" in sql.stdout and "running (process gone)" in sql.stdout
    assert sql.stdout == _pandas_answer(cli, copy, monkeypatch, "--where",
                                        "final_loss < 0.01").stdout
    assert os.path.isdir(copy / cat.layout.CATALOG)
