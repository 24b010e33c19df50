"""system.csv (sampled off the training thread) and the experiments' figures()
hook: what a run writes, what show/compare report, and a hook that raises."""
import logging
import os

import numpy as np
import pytest

from conftest import require
from mindexp.callbacks import schema
from mindexp import layout
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
def run(tmp_path_factory, plots_drawn):
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
    folder = os.path.join(run.dir, layout.FIGURES_DIR)
    assert sorted(os.listdir(os.path.join(folder, "fit"))) == ["epoch-1.png", "epoch-2.png"]
    with open(os.path.join(folder, "fit.png"), "rb") as f:
        latest = f.read()
    with open(os.path.join(folder, "fit", "epoch-2.png"), "rb") as f:
        assert f.read() == latest and latest[:4] == b"\x89PNG"
    assert not [n for n in os.listdir(folder) if ".tmp" in n]  # atomic writes only


@pytest.mark.slow
def test_a_figures_hook_that_raises_fails_nothing(tmp_path, caplog, plots_drawn):
    with caplog.at_level(logging.WARNING):
        run = BrokenFigures(epochs=1, samples=20, system_every_s=0, mode="pynative").run(out=str(tmp_path),
                                                                        quiet=True)
    assert run.status == "completed"
    warned = [r.getMessage() for r in caplog.records if "figures()" in r.getMessage()]
    assert len(warned) == 1 and "no picture today" in warned[0]
    with open(os.path.join(run.dir, layout.FIGURES_LOG), encoding="utf-8") as f:
        log = f.read()
    assert "Traceback" in log and "RuntimeError: no picture today" in log
    assert not os.path.exists(os.path.join(run.dir, layout.FIGURES_DIR))
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
    with open(os.path.join(run.dir, layout.FIGURES_DIR, "fit.png"), "rb") as f:
        latest = base64.b64encode(f.read()).decode("ascii")
    assert f"data:image/png;base64,{latest}" in card and "title='fit'" in card


@pytest.mark.parametrize("local_rank, all_ranks, per_node, writes", [
    ("0", False, True, True),     # the first worker of another node: its node's file
    ("1", False, True, False),    # a second worker on that node: nothing
    ("1", True, True, True),      # log_all_ranks: every rank
    ("0", False, False, False),   # per_node off: rank 0 alone
])
def test_the_first_worker_of_each_node_writes_its_own_system_file(
        tmp_path, monkeypatch, local_rank, all_ranks, per_node, writes):
    """Rank 2 of a data-parallel job; msrun tells a worker its index on the node
    in DEVICE_ID (tests/framework/test_mindspore_contract.py checks that)."""
    require("psutil", "system.csv needs psutil (the system extra)")
    from mindexp.callbacks import SystemMonitor, _common
    monkeypatch.setattr(_common, "rank_id", lambda: 2)
    monkeypatch.setenv("DEVICE_ID", local_rank)
    monitor = SystemMonitor(tmp_path, every_s=60, all_ranks=all_ranks, per_node=per_node)
    monitor.on_train_begin(None)
    monitor.on_train_step_end(None)
    monitor.close()
    expected = [schema.rank_filename(schema.SYSTEM.filename, 2)] if writes else []
    assert sorted(os.listdir(tmp_path)) == expected
    if writes:
        from mindexp.callbacks.csv_log import read_csv
        assert read_csv(tmp_path / expected[0])["step"].tolist() == [0, 1]


def test_every_cpu_reading_is_taken_on_the_sampler_thread(tmp_path, monkeypatch):
    """psutil keeps the previous machine-wide CPU times per thread: a first reading
    on the training thread left the sampler's first one measuring since boot (0.0
    on a saturated machine that had been idle). The values are psutil's; what
    matters is that every reading follows the one before it on the same thread."""
    psutil = require("psutil", "system.csv needs psutil (the system extra)")
    import threading
    from mindexp.callbacks import SystemMonitor
    readers = []
    real_machine, real_process = psutil.cpu_percent, psutil.Process.cpu_percent

    def machine(*args, **kwargs):
        readers.append(("machine", threading.get_ident()))
        return real_machine(*args, **kwargs)

    def process(self, *args, **kwargs):
        readers.append(("process", threading.get_ident()))
        return real_process(self, *args, **kwargs)
    monkeypatch.setattr(psutil, "cpu_percent", machine)
    monkeypatch.setattr(psutil.Process, "cpu_percent", process)
    monitor = SystemMonitor(tmp_path, every_s=60)
    monitor.on_train_begin(None)
    first_rows = (tmp_path / schema.SYSTEM.filename).read_text().splitlines()
    monitor.on_train_step_end(None)
    monitor.close()
    assert len(first_rows) == 2  # header and the step-0 row, before the first step
    assert [kind for kind, _ in readers] == ["process", "machine"] * 2  # first and last
    threads = {ident for _, ident in readers}
    assert len(threads) == 1 and threads != {threading.get_ident()}


def test_show_compare_and_the_dashboard_read_every_nodes_system_file(tmp_path, capsys):
    """A run with system.csv (rank 0) and system.rank2.csv (the first worker of
    the second node): show has a line per rank, compare the peak of both, the
    run page a trace per rank."""
    import pandas as pd
    from rundirs import make_run
    from mindexp import load_run
    from mindexp.analysis import payload
    run_dir = make_run(tmp_path, "r-nodes", status="running")  # no stored summary: logs read
    header = ",".join(schema.SYSTEM.required) + "\n"
    for rank, rss in ((0, 100.0), (2, 300.0)):
        name = schema.rank_filename(schema.SYSTEM.filename, rank) if rank else \
            schema.SYSTEM.filename
        with open(os.path.join(run_dir, name), "w", encoding="utf-8") as f:
            f.write(header + f"0.0,0,,,{rss - 50},4,0,0\n1.0,2,{rss / 10},50.0,{rss},5,1,2\n")
    assert main(["show", run_dir]) == 0
    shown = capsys.readouterr().out
    assert "ranks 0, 2" in shown and "all peak RSS 300.0 MB" in shown
    assert "rank 0 peak RSS 100.0 MB" in shown and "rank 2 peak RSS 300.0 MB" in shown
    table_csv = tmp_path / "table.csv"
    assert main(["compare", os.path.dirname(run_dir), "--csv", str(table_csv)]) == 0
    row = pd.read_csv(table_csv).iloc[0]
    assert row["peak_rss_mb"] == 300.0 and row["mean_cpu_percent"] == 20.0  # (10 + 30) / 2
    figures = payload.build([load_run(run_dir)], "one run")["figures"]
    [rss] = [f for f in figures if f["id"] == "system:rss_mb"]
    assert [(t["name"], t["y"][-1]) for t in rss["traces"]] == [("rank 0", 100.0),
                                                                 ("rank 2", 300.0)]
