"""The interactive report's data and file (the browser checks are in test_browser.py)."""
import json
import os
import re
import sys

import numpy as np
import pytest

from mindexp.analysis import interactive, payload
from mindexp.cli.main import main
from mindexp.analysis.reports import load_runs
from rundirs import make_run


def _data(page):
    found = re.search(r'<script id="mindexp-data" type="application/json">(.*?)</script>', page,
                      re.S)
    return json.loads(found.group(1))


def test_downsampling_keeps_spikes_and_both_ends_and_cuts_non_finite_values():
    steps = np.arange(1, 10001)
    values = np.full(10000, 1.0)
    values[::2] = 0.5
    values[4321] = 1e6      # one spike
    values[5000] = np.nan   # cut
    values[5001] = np.inf   # cut
    x, y = payload.downsample(steps, values, max_points=1000)
    assert len(x) <= 1001 and x == sorted(x)
    assert 4322 in x and y[x.index(4322)] == 1e6
    assert x[0] == 1 and x[-1] == 10000
    assert 5001 not in x and 5002 not in x and all(np.isfinite(y))


def test_downsampling_drops_the_middle_of_flat_stretches_only():
    x, y = payload.downsample(np.arange(1, 101), np.full(100, 0.1))
    assert x == [1, 100] and y == [0.1, 0.1]


def test_report_holds_every_run_with_status_error_and_a_relative_folder_link(tmp_path):
    make_run(tmp_path, "20260101-000000-ok-aaaaaa", config={"lr": 0.1},
             eval_rows=[{"epoch": 1, "step": 2, "mae": 0.5}], params={"w": [1, 1.5, 1.9]},
             targets={"w": 2.0})
    make_run(tmp_path, "20260101-000001-bad-bbbbbb", status="failed", config={"lr": 9.0},
             meta={"error": "RuntimeError: boom\nTraceback..."})
    out = tmp_path / "report.html"
    code = main(["report", str(tmp_path), "--out", str(out)])
    assert code == 0
    data = _data(out.read_text())
    runs = {r["short"]: r for r in data["runs"]}
    assert set(runs) == {"ok-aaaaaa", "bad-bbbbbb"}
    assert runs["bad-bbbbbb"]["status"] == "failed"
    assert runs["bad-bbbbbb"]["error"] == "RuntimeError: boom"
    assert runs["ok-aaaaaa"]["href"] == "toy/20260101-000000-ok-aaaaaa/"
    assert (tmp_path / runs["ok-aaaaaa"]["href"] / "run.json").is_file()
    ids = [f["id"] for f in data["figures"]]
    assert ids == ["loss", "eval_mae", "lr", "param:w", "final_loss"]
    param = data["figures"][3]
    assert param["targets"] == [{"y": 2.0, "name": "w target 2"}]
    # config columns that differ come right after run and status
    assert data["table"]["columns"][1]["key"] == "lr"


def test_the_report_is_one_file_that_loads_nothing_from_anywhere(tmp_path):
    make_run(tmp_path, "r1")
    page = interactive.render_report(load_runs(tmp_path), "t")
    assert page.count("<script") == 3  # plotly inline, the data, the page script
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|@import|url\(http", page)
    assert "</script" not in _between(page, 'id="mindexp-data"', "</script>")[:-9]


def _between(text, start, end):
    i = text.index(start)
    return text[i:text.index(end, i) + len(end)]


def test_a_script_tag_in_a_config_value_cannot_end_the_data_block(tmp_path):
    make_run(tmp_path, "r1", config={"note": "</script><script>alert(1)</script>"})
    make_run(tmp_path, "r2", config={"note": "plain"})
    page = interactive.render_report(load_runs(tmp_path), "t")
    data = _data(page)
    assert "</script><script>alert(1)</script>" in [r["label"].split("=", 1)[1]
                                                    for r in data["runs"]]


def test_compare_html_without_plotly_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r1")
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import fails
    code = main(["compare", str(tmp_path), "--html", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "r.html").exists()
    assert err.strip().splitlines() == [
        "mindexp: error: the interactive report needs plotly: pip install 'mindexp[report]'"]


def test_report_of_a_missing_folder_is_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_fifty_runs_of_ten_thousand_steps_stay_under_20_mb(tmp_path):
    steps = 10000
    rng = np.random.default_rng(0)
    for i in range(50):
        losses = np.exp(-np.arange(steps) / 3000) * (1 + 0.1 * rng.random(steps))
        make_run(tmp_path, f"r{i:02d}", config={"lr": 0.001 * (i + 1)}, losses=losses.tolist(),
                 params={"w": (2 - losses).tolist(), "b": losses.tolist()},
                 targets={"w": 2.0, "b": 0.0}, steps_per_epoch=100,
                 eval_rows=[{"epoch": e, "step": 100 * e, "mae": float(losses[100 * e - 1])}
                            for e in range(1, 101)])
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path), "--out", str(out)]) == 0
    size = os.path.getsize(out)
    assert size < 20 * 2**20, size
    data = _data(out.read_text())
    assert len(data["table"]["rows"]) == 50
    loss = data["figures"][0]["traces"][0]
    assert loss["x"][0] == 1 and loss["x"][-1] == steps and len(loss["x"]) <= payload.MAX_POINTS + 1


# -- many runs: colours, labels' fields, progress of a stopped run -----------------

def _oklab_distance(a, b):
    from mindexp.analysis.colors import oklab
    return sum((x - y) ** 2 for x, y in zip(oklab(a), oklab(b))) ** 0.5


def test_run_colors_keep_plotlys_ten_then_stay_distinct_and_stable():
    from itertools import combinations
    from mindexp.analysis.colors import run_colors
    plotly_ten = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    assert run_colors(3) == plotly_ten[:3] and run_colors(10) == plotly_ten
    colors = run_colors(25)
    assert colors[:10] == plotly_ten and len(set(colors)) == 25
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors)
    # as far apart as Plotly's own ten are (0.11 in OKLab), give or take
    assert min(_oklab_distance(a, b) for a, b in combinations(colors, 2)) > 0.09
    assert run_colors(60)[:25] == colors  # a run keeps its colour when others come
    assert len(set(run_colors(1200))) == 1200  # past the grid's size: still distinct


def test_report_gives_every_run_its_own_colour_and_only_nonempty_differing_fields(tmp_path):
    from rundirs import many_runs
    folder = many_runs(tmp_path)
    data = payload.build(load_runs(folder), "t")
    assert len({r["color"] for r in data["runs"]}) == 25
    fields = {r["short"]: r["fields"] for r in data["runs"]}
    first = fields["sgd-000000"]
    assert "seed" not in first  # the same in every run
    assert first["early_stop"] is None and first["keep_best"] is None  # empty: left out
    assert first["optimizer"] == "sgd" and first["lr"] == "0.01"
    assert fields["momentum-000001"]["checkpoint_monitor"] is None and \
        fields["sgd-000003"]["keep_best"] == "2"


def test_an_early_stopped_run_shows_complete_progress_and_the_stop(tmp_path):
    stopped = make_run(tmp_path, "20260101-000000-stop-aaaaaa", losses=[0.5] * 99,
                       meta={"total_steps": 880, "stop_reason": "early stop at epoch 9: ..."})
    failed = make_run(tmp_path, "20260101-000001-fail-bbbbbb", status="failed",
                      losses=[0.5] * 45, meta={"total_steps": 880})
    progress = {r["short"]: r["progress"] for r in
                payload.build(load_runs(tmp_path), "t", progress=True)["runs"]}
    assert progress["stop-aaaaaa"]["step"] == progress["stop-aaaaaa"]["total"] == 99
    assert progress["stop-aaaaaa"]["stop"] == "early stop"
    assert progress["stop-aaaaaa"]["planned"] == 880
    assert (progress["fail-bbbbbb"]["step"], progress["fail-bbbbbb"]["total"],
            progress["fail-bbbbbb"]["stop"]) == (45, 880, None)  # a failure is no stop
    assert os.path.isdir(stopped) and os.path.isdir(failed)


@pytest.mark.parametrize("log", ["loss.csv", "grad_norm.csv", "eval.csv", "params.csv"])
def test_a_log_created_but_never_written_leaves_the_report_whole(cli, tmp_path, log):
    """A run killed the moment it made a log leaves an empty file (found by the
    fault-injection suite: `report` died with KeyError 'step')."""
    from rundirs import make_run
    make_run(tmp_path, "a", eval_rows=[{"epoch": 1, "step": 2, "mae": 0.5}], params={"w": [1, 2, 3]})
    killed = make_run(tmp_path, "b")
    open(os.path.join(killed, log), "w").close()
    done = cli("report", tmp_path, "--out", tmp_path / "r.html")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert os.path.getsize(tmp_path / "r.html") > 0


def test_past_max_drawn_runs_the_report_tables_every_run_and_draws_the_best(tmp_path):
    from mindexp.analysis.reports import list_runs
    for i, final in enumerate((0.5, 0.1, 0.4, 0.2, 0.3)):
        make_run(tmp_path, f"r{i}", losses=(1.0, final))
    runs = list_runs(str(tmp_path))
    data = _data(interactive.render_report(runs, max_drawn=3))
    assert len(data["table"]["rows"]) == 5 and len(data["runs"]) == 5
    loss = next(f for f in data["figures"] if f["id"] == "loss")
    assert sorted(data["runs"][t["run"]]["id"] for t in loss["traces"]) == ["r1", "r3", "r4"]
    assert data["note"] == "curves of the 3 runs with the lowest final loss of 5; every run is " \
                           "in the table"
