"""mindexp compare / runs / plot: tables, CSV, self-contained HTML, and bad input."""
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import cli_env
from mindexp.cli.main import main
from rundirs import make_run, trained_runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_runs(tmp_path_factory)


def report_data(page):
    """The JSON the interactive report page draws from."""
    import json
    found = re.search(r'<script id="mindexp-data" type="application/json">(.*?)</script>', page,
                      re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def mindexp(capsys, *args):
    """Run the CLI in this process; returns (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_compare_prints_the_differing_config_and_writes_csv_and_html(cli, trained, tmp_path):
    done = cli("compare", trained, "--csv", "table.csv", "--html", "report.html")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:6] == ["run_id", "status", "optimizer", "lr", "final_loss",
                                    "min_loss"]
    assert "samples" not in lines[0] and "seed" not in lines[0]  # equal everywhere
    assert len([line for line in lines if " completed " in line]) == 3
    assert done.stdout.rstrip().endswith("report.html")

    table = pd.read_csv(tmp_path / "table.csv")
    assert len(table) == 3 and table["final_loss"].is_monotonic_increasing
    assert {"samples", "seed", "dense.weight_error", "run_dir"} <= set(table.columns)

    page = (tmp_path / "report.html").read_text()
    data = report_data(page)  # the interactive report (browser checks: test_browser.py)
    assert [r["status"] for r in data["runs"]] == ["completed"] * 3
    assert "optimizer=adam, lr=0.1" in [r["label"] for r in data["runs"]]
    assert len(data["table"]["rows"]) == 3
    assert {f["id"] for f in data["figures"]} >= {"loss", "lr", "grad_norm", "param:dense.weight",
                                                   "param:dense.bias", "final_loss"}
    assert not re.search(r'<script[^>]+src=|<link[^>]+stylesheet|<img[^>]+src="http', page)


@pytest.mark.slow
def test_runs_lists_status_age_steps_and_final_loss(capsys, trained):
    code, out, err = mindexp(capsys, "runs", trained)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["path", "status", "tags", "age", "steps", "final_loss"]
    assert len(lines) == 4 and all(line.split()[1] == "completed" for line in lines[1:])
    assert all(line.split()[3] == "50" for line in lines[1:])  # no tags: "", age, steps


@pytest.mark.slow
def test_plot_writes_run_plots_and_overlays_into_out(capsys, trained, tmp_path):
    code, out, err = mindexp(capsys, "plot", trained, "--out", tmp_path / "figs")
    assert code == 0, err
    written = out.split()
    assert len(written) == 3 * 3 + 3 and all(os.path.isfile(p) for p in written)
    assert sorted(f for f in os.listdir(tmp_path / "figs") if f.endswith(".png")) == \
        ["final_loss.png", "loss_overlay.png", "params_overlay.png"]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_plot_by_default_draws_into_each_run_and_the_common_folder(capsys, tmp_path):
    first = make_run(tmp_path, "a", config={"lr": 0.1})
    second = make_run(tmp_path, "b", config={"lr": 0.2})
    code, out, err = mindexp(capsys, "plot", first, second)
    assert code == 0, err
    assert os.path.isfile(os.path.join(first, "plots", "loss.png"))
    assert os.path.isfile(tmp_path / "toy" / "plots" / "loss_overlay.png")


def test_compare_skips_a_broken_run_naming_it(capsys, tmp_path):
    make_run(tmp_path, "good")
    broken = make_run(tmp_path, "broken")
    with open(os.path.join(broken, "loss.csv"), "a") as f:
        f.write("4,2,0.")
    html = tmp_path / "r.html"
    code, out, err = mindexp(capsys, "compare", tmp_path, "--html", html)
    assert code == 0
    assert err.strip() == (f"mindexp: warning: skipped a broken run: {broken}/loss.csv is "
                           "truncated: its last row has no line end (the file was cut while "
                           "being written or copied)")
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["good"]
    assert report_data(html.read_text())["skipped"][0]["dir"] == broken


def test_compare_sort_descending(capsys, tmp_path):
    make_run(tmp_path, "low", losses=(1.0, 0.1))
    make_run(tmp_path, "high", losses=(1.0, 0.9))
    code, out, _ = mindexp(capsys, "compare", tmp_path, "--sort=-final_loss")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["high", "low"]


# -- bad input: one line on stderr, exit 2, no report file ----------------------------

def _bad_csv(run_dir):
    with open(os.path.join(run_dir, "loss.csv"), "a") as f:
        f.write("3,2,not-a-number,0.1,0.2\n")


def _truncated_csv(run_dir):
    with open(os.path.join(run_dir, "params.csv"), "w") as f:
        f.write("step,epoch,param,value\n1,1,w,0.5\n2,1,w,0.")


def _bad_json(run_dir):
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        f.write('{"experiment": "toy", "status": ')


NO_RUNS = [
    (None, "missing", "missing does not exist"),
    (None, "empty", "empty holds no runs"),
    (None, "notes.txt", "notes.txt is neither a run directory nor a folder holding runs"),
    (_bad_json, "root", "run.json is not valid JSON"),
]
BAD_LOGS = [
    (_bad_csv, "root", "loss.csv is malformed: column 'loss' must hold numbers. "
                       "Received: 'not-a-number' on line 5"),
    (_truncated_csv, "root", "params.csv is truncated"),
]


# `runs` reads run.json alone (and loss.csv of running runs): it has no BAD_LOGS case.
@pytest.mark.parametrize("command, spoil, target, message",
                         [("compare", *case) for case in NO_RUNS + BAD_LOGS] +
                         [("plot", *case) for case in NO_RUNS + BAD_LOGS] +
                         [("runs", *case) for case in NO_RUNS])
def test_paths_without_readable_runs(capsys, tmp_path, command, spoil, target, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    run_dir = make_run(tmp_path / "root", "r1")
    if spoil:
        spoil(run_dir)
    extra = ["--csv", tmp_path / "t.csv", "--html", tmp_path / "t.html"] \
        if command == "compare" else []
    code, out, err = mindexp(capsys, command, tmp_path / target, *extra)
    assert code == 2, out + err
    assert err.startswith("mindexp: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "t.html").exists()
    assert not os.path.exists(os.path.join(run_dir, "plots"))


@pytest.mark.parametrize("args, message", [
    (["--sort", "speed"], "unknown sort column 'speed'; valid columns: experiment, run_id"),
    (["--sort=-"], "sort must name a column"),
    (["--sort", "-lr"], "argument --sort: expected one argument"),
    (["--html", "{tmp}/no/such/dir/r.html", "--csv", "{tmp}/t.csv"], "cannot write the report to"),
    (["--csv", "{tmp}", "--html", "{tmp}/t.html"], "it is a folder"),
])
def test_bad_compare_options_write_nothing(capsys, tmp_path, args, message):
    make_run(tmp_path, "r1")
    files = [] if "--csv" in args else ["--csv", "{tmp}/t.csv", "--html", "{tmp}/t.html"]
    code, out, err = mindexp(capsys, "compare", tmp_path,
                             *[a.format(tmp=tmp_path) for a in args + files])
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert out == ""
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "t.html").exists()
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_a_subprocess_compare_of_nothing_is_one_line(cli, tmp_path):
    done = cli("compare", "nowhere")
    assert done.returncode == 2
    assert done.stderr == "mindexp: error: nowhere does not exist. Received: 'nowhere'\n"


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_reports_do_not_import_mindspore(tmp_path):
    make_run(tmp_path, "a", config={"lr": 0.1})
    make_run(tmp_path, "b", config={"lr": 0.2})
    code = ("import sys; from mindexp.cli.main import main; "
            f"codes = [main([c, {str(tmp_path)!r}]) for c in ('compare', 'runs', 'plot')]; "
            "print(codes, 'mindspore' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip().endswith("[0, 0, 0] False"), done.stdout + done.stderr
