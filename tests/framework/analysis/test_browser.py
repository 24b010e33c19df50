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

import forkserver
from conftest import cli_env, require
from rundirs import EARLY_STOPPED, ODD_EPOCHS, five_runs, make_run, many_runs

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
        page.set_default_timeout(120_000)  # a loaded machine parses 4.6 MB of Plotly slowly
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
        forkserver.run([sys.executable, "-m", "mindexp", *args], env=cli_env(), cwd=root,
                       capture_output=True, text=True, timeout=300)
    folder = five_runs(root, run)
    done = forkserver.run([sys.executable, "-m", "mindexp", "report", folder, "--out",
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


# -- looking at many runs ---------------------------------------------------------

@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """25 hand-written runs (tests/rundirs.py: many_runs) and their report."""
    root = tmp_path_factory.mktemp("many")
    folder = many_runs(root)
    done = forkserver.run([sys.executable, "-m", "mindexp", "report", folder, "--out",
                           str(root / "report.html")], env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return root


def _legend_clear_of_modebar(page):
    """Per figure with a legend: its id, the modebar's and the legend's boxes, the
    first legend entry's box, and the card's right edge (page coordinates)."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.card')).map(c => {
        const box = e => { const r = e.getBoundingClientRect();
                           return [r.left, r.top, r.right, r.bottom]; };
        const legend = c.querySelector('.legend rect.bg');
        return legend && [c.dataset.figure, box(c.querySelector('.modebar')), box(legend),
                          box(c.querySelector('.legend .traces')), box(c)[2]];
    }).filter(Boolean)""")


def _overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _legend_texts(page, figure="loss"):
    """The legend's labels, lines joined by ", " (Plotly draws one tspan per line)."""
    return page.evaluate(f"""() => Array.from(document.querySelectorAll(
        '[data-figure="{figure}"] .legend .traces .legendtext')).map(t => {{
            const lines = t.querySelectorAll('tspan.line');
            return lines.length ? Array.from(lines).map(l => l.textContent).join(', ')
                                : t.textContent; }})""")


def _check_many_runs_page(page, width):
    """What every page of the 25 runs must show, report or dashboard."""
    page.wait_for_selector(".card .legend .traces")
    boxes = _legend_clear_of_modebar(page)
    assert len(boxes) >= 4, boxes  # loss, eval_loss, eval_mae, lr, dense.weight
    for figure, modebar, legend, first, right in boxes:
        assert modebar[3] > modebar[1] and first[3] > first[1]  # both laid out
        assert not _overlap(modebar, legend), (figure, modebar, legend)
        assert not _overlap(modebar, first), (figure, modebar, first)
        assert legend[2] <= right + 1, (figure, legend, right)  # the legend fits the card
    colours = page.evaluate("""() => [
        document.querySelector('[data-figure="loss"] .plot').data
            .filter(t => t.showlegend).map(t => t.line.color),
        Array.from(document.querySelectorAll('#runs .swatch')).map(s => s.style.background)]""")
    assert [len(c) for c in colours] == [25, 25]
    assert len(set(colours[0])) == 25 and len(set(colours[1])) == 25
    labels = _legend_texts(page)
    assert len(labels) == 25
    # only what differs, nothing empty: no defaults every run repeats
    assert not any(bad in label for label in labels
                   for bad in ("early_stop=,", "keep_best=none", "checkpoint_monitor=,", "seed=",
                               "=,", "epochs=12", "patience=5"))
    assert all("optimizer=" in label and ", lr=" in label for label in labels), labels
    assert sum("epochs=6" in label for label in labels) == 1
    assert sum("early_stop=eval_loss" in label for label in labels) == 1
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 1400])
def test_25_run_report_legend_clear_of_the_toolbar_distinct_colours_short_labels(
        many, page_of, tmp_path, width):
    page, errors = page_of((many / "report.html").as_uri(), width)
    _check_many_runs_page(page, width)
    page.screenshot(path=str(tmp_path / f"report-25-{width}.png"))
    assert errors == []


@pytest.mark.slow
def test_25_run_labels_follow_the_filter_and_hover_shows_the_full_label(many, page_of):
    page, errors = page_of((many / "report.html").as_uri(), 1280)
    page.wait_for_selector(".card .legend .traces")
    title = page.evaluate("""() => document.querySelector(
        '[data-figure="loss"] .legend .traces title').textContent""")
    assert title.startswith("20260101-000000-sgd-000000 (completed)")
    assert "early_stop=" in title and "keep_best=none" in title  # the full label
    page.fill("#filter", "adam")
    page.wait_for_function("document.querySelectorAll('#runs tbody tr').length === 8")
    page.wait_for_function("""() => !Array.from(document.querySelectorAll(
        '[data-figure="loss"] .legend .traces .legendtext'))
        .some(t => t.textContent.startsWith('optimizer='))""")
    adam = _legend_texts(page)  # only adam runs listed: optimizer= left out
    assert len(adam) == 8 and len(set(adam)) == 8
    assert all("lr=" in text and "optimizer=" not in text for text in adam), adam
    assert errors == []


@pytest.mark.slow
def test_legend_labels_function_keeps_differing_nonempty_uncommon_values(many, page_of):
    page, errors = page_of((many / "report.html").as_uri(), 1280)
    labels = page.evaluate("""() => {
        const run = (short, fields, experiment) => ({short, fields, experiment: experiment || 'x'});
        const f = window.mindexpPage.legendLabels;
        const three = [run('a', {lr: '0.1', early_stop: null, opt: 'sgd'}),
                       run('b', {lr: '0.2', early_stop: 'loss', opt: 'sgd'}),
                       run('c', {lr: '0.2', early_stop: null, opt: 'adam'})];
        const eight = [0, 1, 2, 3, 4, 5, 6, 7].map(i =>
            run('r' + i, {epochs: i === 7 ? '6' : '12', lr: String(i)}));
        const twins = [run('p', {lr: '1', note: null}), run('q', {lr: '1', note: ''}),
                       run('s', {lr: '2', note: null}, 'y')];
        return [f(three, [true, true, true]), f(three, [false, true, true]),
                f(three, [true, false, false]), f(eight, eight.map(() => true)),
                f(twins, [true, true, true])]; }""")
    assert labels[0] == ["lr=0.1, opt=sgd", "lr=0.2, early_stop=loss, opt=sgd",
                         "lr=0.2, opt=adam"]
    assert labels[1][1:] == ["early_stop=loss, opt=sgd", "opt=adam"]  # a's lr is not listed
    assert labels[2][0] == "a"  # alone: nothing differs, its short id
    assert labels[3] == [f"lr={i}" for i in range(7)] + ["epochs=6, lr=7"]  # 12 is common
    assert labels[4] == ["x, lr=1, p", "x, lr=1, q", "y, lr=2"]  # same label: the id added
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 1400])
def test_25_run_dashboard_same_page_and_an_early_stopped_run_is_complete(
        many, page_of, tmp_path, width):
    from mindexp.analysis.dashboard import make_server, url_of
    server = make_server([str(many)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        page, errors = page_of(url_of(server), width)
        page.wait_for_selector("#runs tbody tr")
        _check_many_runs_page(page, width)
        progress = page.evaluate("""() => Object.fromEntries(Array.from(
            document.querySelectorAll('#runs tbody tr')).map(tr => [
                tr.querySelector('td.run').innerText.trim(),
                tr.querySelector('td.progress').textContent]))""")
        assert EARLY_STOPPED == 7 and ODD_EPOCHS == 11  # the runs named below
        assert progress["momentum-000007"] == "10 / 10 \u00b7 early stop"  # was 10 / 24
        assert progress["adam-00000b"] == "12 / 12"
        assert sum(text == "24 / 24" for text in progress.values()) == 23
        page.screenshot(path=str(tmp_path / f"dashboard-25-{width}.png"))
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()


# -- the experiment's figures: the epoch slider -------------------------------------

@pytest.fixture(scope="module")
def figures_run(tmp_path_factory):
    """A run with three epochs of one figure (three different PNGs) and system.csv."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image
    import numpy as np
    from mindexp.callbacks import schema
    from mindexp import layout
    root = tmp_path_factory.mktemp("figures")
    run_dir = make_run(root, "20260101-000000-fig-aaaaaa", losses=[1.0, 0.5, 0.25, 0.2, 0.1, 0.05])
    folder = os.path.join(run_dir, layout.FIGURES_DIR, "fit")
    os.makedirs(folder)
    for epoch in (1, 2, 3):
        matplotlib.image.imsave(os.path.join(folder, f"epoch-{epoch}.png"),
                                np.full((8, 8), epoch / 3.0), vmin=0, vmax=1)
    shutil.copy(os.path.join(folder, "epoch-3.png"), folder + ".png")
    with open(schema.path_of(run_dir, "system"), "w", encoding="utf-8") as f:
        f.write(",".join(schema.SYSTEM.required) + "\n0.0,0,,,100.0,4,0,0\n"
                "1.0,3,90.0,50.0,120.0,5,1,2\n2.0,6,95.0,55.0,125.0,5,1,2\n")
    return run_dir


def _move_slider_to_first_epoch_and_back(page, shown_as):
    """Home then ArrowRight on the figure's slider (keys, as a user moves it): the
    image shown is epoch 1's, then epoch 2's, each loaded (``shown_as(epoch)``
    is what its ``src`` must be)."""
    slider, image = page.locator("input[aria-label='epoch of fit']"), page.locator("img.run-figure")
    assert image.get_attribute("src") == shown_as(3)  # the newest until moved
    for key, epoch in (("Home", 1), ("ArrowRight", 2)):
        slider.press(key)
        expect(page.locator(".slider-row .hint")).to_have_text(f"epoch {epoch}")
        assert image.get_attribute("src") == shown_as(epoch)
        page.wait_for_function("img => img.complete && img.naturalWidth === 8",
                               arg=image.element_handle())


@pytest.mark.slow
def test_the_figures_slider_shows_each_epochs_png_on_the_run_page_and_in_the_report(
        figures_run, page_of, tmp_path):
    import base64
    from mindexp.analysis.dashboard import make_server, url_of
    from mindexp.cli.main import main
    server = make_server([os.path.dirname(os.path.dirname(figures_run))], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        page, errors = page_of(url_of(server) + "run/0/toy/20260101-000000-fig-aaaaaa", 1280)
        page.wait_for_selector("img.run-figure")
        src = page.locator("img.run-figure").get_attribute("src")
        assert src.endswith("/figures/fit/epoch-3.png")
        _move_slider_to_first_epoch_and_back(page, lambda k: src.replace("epoch-3", f"epoch-{k}"))
        assert errors == [], errors
    finally:
        server.shutdown()
        server.server_close()

    def embedded(epoch):
        with open(os.path.join(figures_run, "figures", "fit", f"epoch-{epoch}.png"), "rb") as f:
            return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")
    report = tmp_path / "report.html"
    assert main(["report", figures_run, "--out", str(report)]) == 0
    page, errors = page_of(report.as_uri(), 1280)
    page.wait_for_selector("img.run-figure")
    _move_slider_to_first_epoch_and_back(page, embedded)
    assert errors == [], errors
# -- the dashboard over more runs than it draws ------------------------------------

def _copies(root, n):
    """``n`` runs copied from one (newest last), every 10th an adam run."""
    first = make_run(root, "20260101-000000-sgd-000000", losses=[1.0, 0.8, 0.6])
    for i in range(1, n):
        name = f"20260101-{i:06d}-{'adam' if i % 10 == 0 else 'sgd'}-{i:06x}"
        shutil.copytree(first, os.path.join(os.path.dirname(first), name))
        with open(os.path.join(os.path.dirname(first), name, "config.json"), "w") as f:
            f.write('{"seed": 0, "epochs": 3, "lr": %s, "optimizer": "%s"}'
                    % (i / 1000, "adam" if i % 10 == 0 else "sgd"))
    return os.path.dirname(first)


def _requests_during_polls(page, requests, polls):
    """The requests the page made while it polled ``polls`` more times (waits on
    the polls themselves, however slow the machine)."""
    start = len(requests)
    for _ in range(600):
        if sum("/api/changes" in u for u in requests[start:]) >= polls:
            break
        page.wait_for_timeout(100)
    return requests[start:]


@pytest.mark.slow
def test_dashboard_pages_filters_on_the_server_and_follows_changes_by_its_cursor(
        tmp_path, page_of, monkeypatch):
    from mindexp.analysis import dashboard
    monkeypatch.setattr(dashboard, "PAGE_ROWS", 20)   # pages of 20 rows; 5 runs drawn
    monkeypatch.setattr(dashboard, "MAX_SHOWN", 5)
    folder = _copies(tmp_path, 30)
    server = dashboard.make_server([str(tmp_path)], port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        page, errors = page_of(dashboard.url_of(server), 1280)
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        rows = page.locator("#runs tbody tr")
        expect(rows).to_have_count(20, timeout=60000)
        expect(page.locator("#shown")).to_contain_text("1\u201320 of 30 runs \u00b7 5 drawn",
                                                       timeout=60000)
        expect(page.locator(".card .main-svg").first).to_be_visible(timeout=60000)
        page.locator("#pager button", has_text="next").click()
        expect(rows).to_have_count(10, timeout=30000)
        page.fill("#filter", "adam")
        expect(rows).to_have_count(2, timeout=30000)
        assert any("/api/runs" in u and "q=adam" in u for u in requests)
        quiet = _requests_during_polls(page, requests, 3)
        assert not any("/api/data" in u or "/api/runs" in u for u in quiet), quiet
        make_run(tmp_path, "20260102-000000-adam-ffffff", losses=[1.0, 0.5])  # a new run
        expect(rows).to_have_count(3, timeout=30000)
        done = os.path.join(folder, "20260101-000010-adam-00000a", "run.json")
        with open(done) as f:
            text = f.read()
        with open(done + ".tmp", "w") as f:
            f.write(text.replace('"status": "completed"', '"status": "failed"'))
        os.replace(done + ".tmp", done)   # a status change
        expect(page.locator("tr[data-key$='adam-00000a'] td.status")).to_have_text(
            "failed", timeout=30000)
        page.screenshot(path=str(tmp_path / "dashboard-30.png"))
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()
