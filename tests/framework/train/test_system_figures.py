"""system.csv (sampled off the training thread) and the experiments' figures()
hook: what a run writes, what show/compare report, and a hook that raises."""
import logging
import os

import numpy as np
import pytest

from conftest import require
from mindexp.callbacks import schema
from mindexp.cli.main import main
from mindexp.experiments.linear import Linear


class LinearWithEval(Linear):
    """Linear with an eval split: figures are drawn after each evaluation."""

    name = "linear_eval"

    def source(self, split):
        return super().source("train")


class BrokenFigures(Linear):
    name = "broken_figures"

    def figures(self, network, split):
        raise RuntimeError("no picture today")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require("psutil", "system.csv needs psutil (the system extra)")
    out = tmp_path_factory.mktemp("system")
    return LinearWithEval(epochs=2, samples=40, system_every_s=0.05,
                          mode="pynative").run(out=str(out), quiet=True)


@pytest.mark.slow
def test_system_csv_has_first_and_last_sample_and_no_device_column_on_cpu(run):
    table = run.system
    assert run.status == "completed"
    assert list(table.columns) == list(schema.SYSTEM.required)  # CPU: no device column
    assert len(table) >= 2
    assert table["step"].iloc[0] == 0 and table["step"].iloc[-1] == run.meta["steps"]
    assert np.all(np.diff(table["time_s"]) > 0) and np.all(np.diff(table["step"]) >= 0)
    assert (table["rss_mb"] > 10).all() and (table["threads"] >= 1).all()
    assert np.isnan(table["process_cpu_percent"].iloc[0])  # no interval yet
    assert table["process_cpu_percent"].iloc[1:].notna().all()


@pytest.mark.slow
def test_show_and_compare_report_peak_rss_and_mean_cpu(run, capsys, tmp_path):
    assert main(["show", run.dir]) == 0
    shown = capsys.readouterr().out
    peak = run.system["rss_mb"].max()
    assert f"peak RSS {peak:.1f} MB" in shown and "mean CPU" in shown
    table_csv = tmp_path / "table.csv"
    assert main(["compare", os.path.dirname(run.dir), "--csv", str(table_csv)]) == 0
    import pandas as pd
    table = pd.read_csv(table_csv)
    assert table["peak_rss_mb"].iloc[0] == pytest.approx(peak, abs=0.01)
    cpu = run.system["process_cpu_percent"].mean()
    assert table["mean_cpu_percent"].iloc[0] == pytest.approx(cpu, abs=0.01)


@pytest.mark.slow
def test_figures_are_saved_after_each_evaluation_with_the_latest_beside(run):
    folder = os.path.join(run.dir, schema.FIGURES_DIR)
    assert sorted(os.listdir(os.path.join(folder, "fit"))) == ["epoch-1.png", "epoch-2.png"]
    with open(os.path.join(folder, "fit.png"), "rb") as f:
        latest = f.read()
    with open(os.path.join(folder, "fit", "epoch-2.png"), "rb") as f:
        assert f.read() == latest and latest[:4] == b"\x89PNG"
    assert not [n for n in os.listdir(folder) if ".tmp" in n]  # atomic writes only


@pytest.mark.slow
def test_a_figures_hook_that_raises_fails_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        run = BrokenFigures(epochs=1, samples=20, system_every_s=0, mode="pynative").run(out=str(tmp_path),
                                                                        quiet=True)
    assert run.status == "completed"
    warned = [r.getMessage() for r in caplog.records if "figures()" in r.getMessage()]
    assert len(warned) == 1 and "no picture today" in warned[0]
    with open(os.path.join(run.dir, schema.FIGURES_LOG), encoding="utf-8") as f:
        log = f.read()
    assert "Traceback" in log and "RuntimeError: no picture today" in log
    assert not os.path.exists(os.path.join(run.dir, schema.FIGURES_DIR))
    assert not os.path.exists(schema.path_of(run.dir, "system"))  # system_every_s=0: off


def test_resume_cuts_system_csv_back_like_the_other_step_logs():
    assert schema.SYSTEM.filename in schema.STEP_LOGS


def test_system_every_s_must_not_be_negative():
    from mindexp import ConfigError
    with pytest.raises(ConfigError, match="system_every_s"):
        Linear(system_every_s=-1)


@pytest.mark.slow
def test_report_and_dashboard_carry_system_panels_and_figure_frames(run):
    import json
    import threading
    import urllib.request
    from mindexp import load_run
    from mindexp.analysis import payload
    from mindexp.analysis.dashboard import make_server, url_of
    report = payload.build([load_run(run.dir)], "one run")
    system = [f for f in report["figures"] if f["id"].startswith("system:")]
    assert [f["id"] for f in system] == ["system:rss_mb", "system:process_cpu_percent"]
    assert system[0]["xtitle"] == "time (s)"
    drawn = system[0]["traces"][0]["x"]  # against time_s (equal values inside runs dropped)
    assert drawn[0] == run.system["time_s"].iloc[0] and drawn[-1] == run.system["time_s"].iloc[-1]
    [fit] = report["images"]
    assert [f["epoch"] for f in fit["frames"]] == [1, 2]
    assert all(f["src"].startswith("data:image/png;base64,") for f in fit["frames"])
    server = make_server([os.path.dirname(run.dir)], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = url_of(server).rstrip("/")
        with urllib.request.urlopen(base + "/api/data", timeout=60) as answer:
            page = json.load(answer)["runs"][0]["page"]
        with urllib.request.urlopen(base + "/api/data?run=" + page[len("/run/"):],
                                    timeout=60) as answer:
            [fit] = json.load(answer)["images"]
        with urllib.request.urlopen(base + fit["frames"][-1]["src"], timeout=60) as answer:
            assert answer.headers["Content-Type"] == "image/png"
            assert answer.read()[:4] == b"\x89PNG"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_the_notebook_run_card_shows_the_latest_figures(run):
    import base64
    from mindexp import load_run
    card = load_run(run.dir)._repr_html_()
    with open(os.path.join(run.dir, schema.FIGURES_DIR, "fit.png"), "rb") as f:
        latest = base64.b64encode(f.read()).decode("ascii")
    assert f"data:image/png;base64,{latest}" in card and "title='fit'" in card
