"""The report and the live dashboard in headless Chromium (Debian's package,
driven by Playwright): the table and every figure render with no script
error, the controls work, a run appearing while the page is open shows up.
Screenshots go to each test's temporary folder."""
import os
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import cli_env, require
from rundirs import five_runs, make_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium)", allow_module_level=True)
sync_api = require("playwright.sync_api",
                   reason="playwright is not installed (pip install playwright)")
expect = sync_api.expect


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page_of(browser):
    """``open(url, width)`` -> (page, errors): console errors and uncaught exceptions."""
    pages = []

    def open_page(url, width=1400):
        page = browser.new_page(viewport={"width": width, "height": 900})
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(url)
        pages.append(page)
        return page, errors
    yield open_page
    for page in pages:
        page.close()


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    """The issue's five real runs (one diverged, one failed, long labels) and their report."""
    root = tmp_path_factory.mktemp("five")

    def run(*args):
        subprocess.run([sys.executable, "-m", "mindexp", *args], env=cli_env(), cwd=root,
                       capture_output=True, text=True, timeout=300)
    folder = five_runs(root, run)
    done = subprocess.run([sys.executable, "-m", "mindexp", "report", folder, "--out",
                           str(root / "report.html")], env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return root / "report.html"


def _figures_drawn(page):
    """Per figure card: its id and the number of drawn traces (Plotly's own data)."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.card')).map(c => [
        c.dataset.figure, c.querySelector('.plot').data ? c.querySelector('.plot').data.length : 0,
        c.querySelectorAll('.main-svg').length])""")


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 1280])
def test_five_run_report_renders_every_figure_without_errors(five, page_of, tmp_path, width):
    page, errors = page_of(five.as_uri(), width)
    page.wait_for_selector(".card .main-svg")
    page.screenshot(path=str(tmp_path / f"report-{width}.png"), full_page=True)
    assert errors == []
    statuses = page.locator("#runs tbody td.status").all_inner_texts()
    assert sorted(statuses) == ["completed"] * 3 + ["diverged", "failed"]
    drawn = dict((fig, (traces, svgs)) for fig, traces, svgs in _figures_drawn(page))
    # every figure, exactly: eval_loss is drawn dotted inside "loss", not on its own
    assert sorted(drawn) == sorted(["loss", "eval_mae", "lr", "grad_norm",
                                    "param:dense.weight", "param:dense.bias", "final_loss"])
    assert all(traces > 0 and svgs > 0 for traces, svgs in drawn.values()), drawn
    # the table fits: no column is wider than the page, the run id is short (full on hover)
    first = page.locator("#runs tbody td.run").first
    assert len(first.inner_text()) < 20 and first.get_attribute("title").startswith("2")
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.slow
def test_report_axes_fit_the_healthy_runs_and_mark_the_diverged_one(five, page_of):
    page, errors = page_of(five.as_uri())
    page.wait_for_selector(".card .main-svg")
    top = page.evaluate("""() => {
        const plot = document.querySelector('[data-figure="loss"] .plot');
        return [plot.layout.yaxis.type, plot.layout.yaxis.range[1],
                plot.data.filter(t => t.marker && t.marker.symbol === 'x').length]; }""")
    kind, upper, markers = top
    assert kind == "log" and upper < 2  # log10 units: below 100 though one run reached inf
    assert markers == 2  # the diverged and the failed run
    assert errors == []


@pytest.mark.slow
def test_report_controls_sort_filter_hide_and_smooth(five, page_of):
    page, errors = page_of(five.as_uri())
    page.wait_for_selector(".card .main-svg")
    page.locator("#runs th", has_text="final_loss").click()
    losses = page.locator("#runs tbody tr td:nth-child(1)").all_inner_texts()
    assert losses[0].startswith("momentum") or losses[0].startswith("adam")
    page.fill("#filter", "diverged")
    page.wait_for_function("document.querySelectorAll('#runs tbody tr').length === 1")
    page.fill("#filter", "")
    page.wait_for_function("document.querySelectorAll('#runs tbody tr').length === 5")
    page.locator(".swatch").first.click()  # hide one run in every figure
    hidden = page.evaluate("""() => Array.from(document.querySelectorAll('.card .plot')).map(
        p => p.data.filter(t => t.visible === 'legendonly').length)""")
    assert all(n >= 1 for n in hidden), hidden
    page.evaluate("document.querySelector('[data-figure=\"loss\"]').scrollIntoView("
                  "{block: 'center'})")
    page.locator('[data-figure="loss"] .legendtoggle').nth(0).click()  # sgd-base: legend click
    hidden = page.evaluate("""() => Array.from(document.querySelectorAll('.card .plot')).map(
        p => new Set(p.data.filter(t => t.visible === 'legendonly').map(t => t.meta)).size)""")
    assert all(n == 2 for n in hidden), hidden  # that run is hidden in every figure
    page.fill("#smooth", "0")
    page.dispatch_event("#smooth", "input")
    assert page.evaluate("""() => document.querySelector('[data-figure="loss"] .plot').data
        .filter(t => t.opacity === 0.25).length""") == 0  # no faint raw lines without smoothing
    assert errors == []


@pytest.mark.slow
def test_live_page_shows_a_new_run_and_a_running_one_advancing(tmp_path, page_of):
    from mindexp.analysis.dashboard import make_server, url_of
    running = make_run(tmp_path, "20260101-000000-live-aaaaaa", status="running",
                       losses=[1.0, 0.8], meta={"total_steps": 10})
    server = make_server([str(tmp_path)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        page, errors = page_of(url_of(server), 1280)
        page.wait_for_selector("#runs tbody tr")
        assert page.locator("td.progress").first.inner_text().startswith("2 / 10")
        with open(os.path.join(running, "loss.csv"), "a") as f:
            f.write("3,2,0.6,0.1,0.2\n4,2,0.5,0.1,0.3\n")
        # waits by locator: a string wait_for_function is an eval, which the CSP refuses
        expect(page.locator("td.progress").first).to_contain_text("4 / 10", timeout=10000)
        make_run(tmp_path, "20260101-000001-new-bbbbbb", losses=[1.0, 0.5, 0.2])
        expect(page.locator("#runs tbody tr")).to_have_count(2, timeout=10000)
        page.wait_for_selector(".card .main-svg")
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        page.locator("#runs tbody a", has_text="live-aaaaaa").click()
        page.wait_for_selector("table.kv")
        page.screenshot(path=str(tmp_path / "dashboard-run.png"), full_page=True)
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_dashboard_pages_work_under_their_content_security_policy(tmp_path, page_of):
    """The CSP is sent and nothing the pages need is refused by it (a refusal is
    a console error), Plotly draws, and a planted SVG is shown as text."""
    from mindexp.analysis.dashboard import make_server, url_of
    run_dir = make_run(tmp_path, "20260101-000000-csp-aaaaaa", losses=[1.0, 0.5, 0.2])
    with open(os.path.join(run_dir, "evil.svg"), "w") as f:
        f.write("<svg xmlns='http://www.w3.org/2000/svg'><script>document.title='ran'"
                "</script></svg>")
    server = make_server([str(tmp_path)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        for path in ("", "run/0/toy/20260101-000000-csp-aaaaaa"):
            page, errors = page_of(url_of(server) + path, 1280)
            csp = page.reload().headers["content-security-policy"]
            assert csp.startswith("default-src 'none'; script-src 'self' 'sha256-")
            expect(page.locator(".card .main-svg").first).to_be_visible(timeout=20000)
            expect(page.locator("#runs tbody tr")).to_have_count(1)  # page.js ran
            assert errors == [], errors
        page.goto(url_of(server) + "files/0/toy/20260101-000000-csp-aaaaaa/")
        page.locator("a", has_text="loss.csv").click()  # the listing's links still work
        expect(page.locator("body")).to_contain_text("step,epoch,loss")
        response = page.goto(url_of(server) + "files/0/toy/20260101-000000-csp-aaaaaa/evil.svg")
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert page.title() != "ran" and "<script>" in page.locator("body").inner_text()
        assert errors == [], errors
    finally:
        server.shutdown()
        server.server_close()
