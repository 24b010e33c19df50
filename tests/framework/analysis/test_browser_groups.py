"""The report's and the dashboard's "group by" control in headless Chromium:
the same runs grouped the same way in both, each group's mean curve and band
as mindexp.history(group_by=...) computes them. Screenshots in tmp_path."""
import threading

import numpy as np
import pytest

from rundirs import make_run
from test_browser import browser, page_of  # noqa: F401  (fixtures: Chromium, a page)

GROUP_TRACES = """() => {
    const plot = document.querySelector('[data-figure="loss"] .plot');
    return plot.data.filter(t => t.meta && t.meta.startsWith('group:') && t.name)
        .map(t => [t.name, t.x, t.y]); }"""


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """Three optimizers x three seeds; one adam run stopped early (after step 4)."""
    root = tmp_path_factory.mktemp("grouped")
    rng = np.random.default_rng(5)
    for optimizer, centre in (("sgd", 0.3), ("momentum", 0.2), ("adam", 0.1)):
        for seed in range(3):
            steps = 4 if (optimizer, seed) == ("adam", 2) else 8
            make_run(root, run_id=f"2026010{seed}-000000-{optimizer}-{seed:06x}",
                     config={"optimizer": optimizer, "seed": seed},
                     losses=[1 / (i + 1) + centre + 0.05 * rng.random() for i in range(steps)])
    return root / "toy"


def _grouped_curves(page, tmp_path, name):
    page.wait_for_selector(".card .main-svg")
    page.select_option("#group-by", "optimizer")
    page.wait_for_function("() => document.querySelector('[data-figure=\"loss\"] .plot').data"
                           ".some(t => t.meta && t.meta.startsWith('group:'))")
    page.screenshot(path=str(tmp_path / name), full_page=True)
    return {label: (x, y) for label, x, y in page.evaluate(GROUP_TRACES)}


@pytest.mark.slow
def test_report_and_dashboard_group_the_same_runs_the_same_way(grouped, page_of, tmp_path):
    from mindexp import history
    from mindexp.analysis.dashboard import make_server, url_of
    from mindexp.analysis.interactive import render_report
    from mindexp.analysis.reports import list_runs
    report = tmp_path / "report.html"
    report.write_text(render_report(list_runs([str(grouped)]), "groups"), encoding="utf-8")
    page, errors = page_of(report.as_uri())
    in_report = _grouped_curves(page, tmp_path, "report-groups.png")
    assert errors == []
    server = make_server([str(grouped)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        page, errors = page_of(url_of(server))
        in_dashboard = _grouped_curves(page, tmp_path, "dashboard-groups.png")
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(in_report) == ["optimizer=adam (n=3)", "optimizer=momentum (n=3)",
                                 "optimizer=sgd (n=3)"]
    assert sorted(in_dashboard) == sorted(in_report)
    for label, (x, y) in in_dashboard.items():   # runs listed in another order: sums differ
        assert x == in_report[label][0] and y == pytest.approx(in_report[label][1], rel=1e-12)
    expected = history(str(grouped), "loss", group_by="optimizer")
    for label, (x, y) in in_report.items():
        rows = expected[expected["optimizer"] == label.split("=")[1].split(" ")[0]]
        assert x == rows["step"].tolist()
        assert y == pytest.approx(rows["loss_mean"].tolist(), rel=1e-5)  # drawn: 6 digits
    adam = expected[expected["optimizer"] == "adam"]
    assert adam["n"].tolist() == [3] * 4 + [2] * 4   # the early-stopped run drops out


@pytest.mark.slow
def test_the_band_is_the_t_interval_and_the_legend_hides_a_group(grouped, page_of, tmp_path):
    from mindexp import history
    from mindexp.analysis.interactive import render_report
    from mindexp.analysis.reports import list_runs
    report = tmp_path / "report.html"
    report.write_text(render_report(list_runs([str(grouped)]), "groups"), encoding="utf-8")
    page, errors = page_of(report.as_uri())
    _grouped_curves(page, tmp_path, "report-groups.png")
    bands = page.evaluate("""() => {
        const plot = document.querySelector('[data-figure="loss"] .plot');
        return plot.data.filter(t => t.meta === 'group:optimizer=sgd' && !t.name)
            .map(t => [t.fill || '', t.y]); }""")
    expected = history(str(grouped), "loss", group_by="optimizer")
    sgd = expected[expected["optimizer"] == "sgd"]
    (_, low), (fill, high) = bands
    assert fill == "tonexty"
    assert low == pytest.approx(sgd["loss_ci_low"].tolist(), rel=1e-5)
    assert high == pytest.approx(sgd["loss_ci_high"].tolist(), rel=1e-5)
    page.locator('[data-figure="loss"] .legend .traces', has_text="optimizer=sgd").click()
    page.wait_for_function("""() => document.querySelector('[data-figure="loss"] .plot').data
        .filter(t => t.meta === 'group:optimizer=sgd').every(t => t.visible === 'legendonly')""")
    page.select_option("#group-by", "")   # back to a curve per run
    page.wait_for_function("""() => !document.querySelector('[data-figure="loss"] .plot').data
        .some(t => t.meta && t.meta.startsWith('group:'))""")
    assert errors == []
