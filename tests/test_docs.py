"""The manual: README.md and the MkDocs site under docs/ build, stay offline, and run.

- ``mkdocs build --strict`` succeeds (a broken link, a page missing from the
  nav, an API object mkdocstrings cannot find: each is a warning, so a failure)
  and no built page loads a script or stylesheet from another site.
- Every code block of README.md and of the docs pages runs, page by page in
  the order of the site's nav (README first), as a new user would:

  - A page's ```python blocks run cumulatively in one namespace (a later
    snippet may use names an earlier one of the same page defined, like a
    user pasting them into one notebook); each page starts afresh, so a page
    imports what it uses. All pages share one process and one fresh empty
    working directory, so a page may use the runs an earlier page made.
  - A ```python block right after ``<!-- not run: REASON -->`` is not run
    (say why: a placeholder, a server that blocks, ...).
  - ``outputs/<experiment>/<run_id>`` and ``outputs/<experiment>/<other_run_id>``
    stand for real runs: the newest and the second newest run directory under
    ``outputs/<experiment>/`` at the moment the snippet runs.
  - Every shell line of a page that starts with ``mindexp`` (or ``$ mindexp``,
    ``python -c``, ``msrun``, ``hostA$ mindexp``) runs too, at its place, in
    the same folder, with the same placeholders, and must exit 0, except the
    ones in ``EXIT_2`` (the page shows their one-line error) and the ones in
    ``SKIP``, each with the reason it cannot run here (a command may continue
    on the next line after a backslash). ``FILES`` are the files a user would
    have made first (``my.toml``, ``points.npy``).
  - A ``mindexp`` line runs through the CLI's ``main()`` in the driver's process
    (what the console script calls): a process per line spent most of this
    test importing MindSpore again. The console script itself, its exit
    statuses and one-line errors as a process, are tested in
    tests/framework/cli/test_cli.py; ``python -c`` and ``msrun`` lines are processes.
  - Runs draw their end-of-run plots/ and figures/ (``MINDEXP_PLOTS``) only on the
    pages in ``PLOTS_PAGES``, whose snippets read them; elsewhere, as in every other
    test, they do not (measured: 94 CPU-s for the whole test with plots everywhere,
    67 with these and the one worker below).
  - The driver counts one CPU core (``os.cpu_count()``), so a sweep's default
    ``--workers`` (one per core) is one worker, as on a one-core machine: a worker's
    start, importing MindSpore (~2.5 CPU-s), costs more than the few short points of
    a page's sweep (tests/framework/search/ runs sweeps with several workers).
"""
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
import yaml

from conftest import ROOT, cli_env

SWEEP = "mindexp sweep linear --grid optimizer=sgd,momentum,adam"
SPIRALS = ("mindexp run spirals --set epochs=100 --set early_stop=eval_accuracy --set patience=3 "
           "--set checkpoint_monitor=eval_accuracy --set keep_best=2")

# Shell lines (by their start) that cannot run in a test, and why.
SKIP = {
    "mindexp run path/to/file.py:MyExperiment": "a placeholder for the reader's own file "
                                                "(tests/framework/cli/test_cli.py runs a user's file)",
    "mindexp serve": "serves until stopped (tests/framework/analysis/test_dashboard.py starts and stops it)",
    "mindexp tune EXPERIMENT": "a synopsis with placeholders",
    "mindexp tune --show --study NAME": "a synopsis with placeholders",
    "hostA$": "needs two machines sharing a file system, or a PostgreSQL server",
    "hostB$": "needs two machines sharing a file system",
    "msrun": "needs two machines (tests/framework/train/test_distributed.py runs two launchers on loopback)",
    "mindexp show 49b912": "a run id from the sample output above it",
    "mindexp rm outputs/linear/20261130-125415-df8017": "a run of the sample output above it",
    "mindexp resume outputs/linear/<run_id> #": "needs an interrupted run "
                                               "(tests/framework/train/test_resume.py interrupts and resumes)",
    "mindexp rerun outputs/tripler/": "tripler is the Provenance page's example file, "
                                      "not in the docs (tests/framework/provenance/test_provenance.py)",
    "mindexp diff RUN_A RUN_B": "placeholders (tests/framework/provenance/test_provenance.py diffs real runs)",
    "mindexp run mlp_sine --set hidden=2048": "trains an 8.4 M-parameter model for minutes "
                                              "(tests/callbacks/test_param_budget.py checks "
                                              "the budget's choice from sizes)",
    "mindexp tune linear --param lr=loguniform:1e-3:1 --storage postgresql": "a server that "
        "cannot be had (tests/framework/search/test_shared_storage.py checks its one line, exit 2)",
    "mindexp mlflow": "needs an MLflow tracking server "
                      "(tests/framework/analysis/test_mlflow_export.py starts one)",
    "mindexp run linear --workers 2": "four MindSpore processes (msrun, its scheduler, two "
        "workers) for a line tests/framework/train/test_distributed.py runs as it is, with "
        "fewer epochs",
    'python -c "from mindexp.experiments.image_folder import write_shapes': "2,400 PNG files "
        "for the run below (tests/framework/define/test_data_on_disk.py writes smaller folders)",
    "mindexp run image_folder --set data_dir=shapes": "a CNN on 2,000 images for half a minute, "
        "the suite's costliest docs line (tests/framework/define/test_data_on_disk.py runs the "
        "recipe on a smaller folder, and its learning to 0.85 eval accuracy)",
}
# Lines whose one-line error the docs show: they must exit 2.
EXIT_2 = ("mindexp predict outputs/spirals/<run_id> --input bad.npy",
          "mindexp evaluate outputs/spirals/<run_id> --checkpoint 5")
# Pages whose snippets read what a run draws at its end (figures/, plots/): their runs
# draw as a user's do. Elsewhere the driver sets MINDEXP_PLOTS=0, as every other test
# does (docs/index.md): half a CPU-second a linear run, 4 the spirals run, and the pages
# make about 35 runs (tests/framework/analysis/test_plots.py tests the drawing).
PLOTS_PAGES = {"docs/system-figures-mlflow.md": "lists the figures/ of the run it made"}
FILES = {"my.toml": 'optimizer = "momentum"\nepochs = 5\n',
         "points.npy": [[0.1, 0.2], [-0.5, 0.3], [0.9, -0.9]],
         "bad.npy": [[0.0, 0.0, 0.0]] * 3}
COMMAND_STARTS = ("mindexp ", "python -c ", "msrun ", "hostA$ ", "hostB$ ")
BLOCK = re.compile(r"^(?:<!-- not run: (.+?) -->\n)?```(\w*)\n(.*?)^```", flags=re.S | re.M)

DRIVER = r'''
import contextlib, io, json, os, re, shlex, subprocess, sys, tempfile
import numpy as np
pages, files = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
plots_pages = set(json.load(open(sys.argv[3])))
for name, content in files.items():
    if name.endswith(".npy"):
        np.save(name, np.array(content, np.float32))
    else:
        open(name, "w").write(content)
namespace = sys.modules["__main__"].__dict__  # as in a user's own script or REPL
os.cpu_count = lambda: 1  # a sweep's default --workers: one (see the test's module doc)


def with_runs(text):
    for name in set(re.findall(r"outputs/(\w+)/<(?:other_)?run_id>", text)):
        where = os.path.join("outputs", name)
        if not os.path.isdir(where):  # (before its first run, only comments name it)
            continue
        runs = sorted((r for r in os.listdir(where) if os.path.isfile(
                          os.path.join(where, r, "run.json"))),
                      key=lambda r: os.path.getmtime(os.path.join(where, r)))
        text = text.replace(f"outputs/{name}/<run_id>", f"outputs/{name}/{runs[-1]}")
        if len(runs) > 1:
            text = text.replace(f"outputs/{name}/<other_run_id>", f"outputs/{name}/{runs[-2]}")
    return text


def _cli_line(args):
    """``mindexp ARGS`` through the console script's main() in this process:
    (exit status, stderr)."""
    from mindexp.cli.main import main
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = main(args)
        except SystemExit as exc:  # (argparse's --help and --version)
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


def _shell_line(args):
    done = subprocess.run([sys.executable] + args, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    return done.returncode, done.stderr


snippets = tempfile.mkdtemp(prefix="mindexp-doc-snippets-")  # outside the working folder
driver_names = set(namespace) | {"driver_names", "page", "steps", "i", "kind", "text", "code",
                                 "args", "status", "err", "leftover", "_cli_line", "plots_pages",
                                 "_shell_line", "snippets", "source", "f"}
for page, steps in pages:
    for leftover in set(namespace) - driver_names:  # each page starts afresh
        del namespace[leftover]
    os.environ["MINDEXP_PLOTS"] = "1" if page in plots_pages else "0"  # (read at a run's end)
    for i, (kind, text, code) in enumerate(steps):
        if kind == "console":
            args = shlex.split(with_runs(text), comments=True)
            print(f"--- {page} shell: {text}", flush=True)
            status, err = _cli_line(args[1:]) if args[0] == "mindexp" else _shell_line(args[1:])
            if status != code:
                sys.exit(f"{page}: shell line {text!r} exited {status}, not {code}: "
                         f"{err[-3000:]}")
            continue
        print(f"--- {page} snippet {i + 1}", flush=True)
        # from a file, as a user's script is: MindSpore's @jit reads its function's source
        source = os.path.join(snippets, f"{page.replace('/', '_')}-{i + 1}.py")
        with open(source, "w", encoding="utf-8") as f:
            f.write(with_runs(text))
        exec(compile(with_runs(text), source, "exec"), namespace)
print("--- all snippets ran", flush=True)
'''


def nav_pages():
    """docs/ pages in the order of mkdocs.yml's nav."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = yaml.safe_load(f)["nav"]

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from walk(value)
            else:
                yield value
    return list(walk(nav))


def pages():
    """README.md, then every docs page in nav order, as paths relative to ROOT."""
    return ["README.md"] + [f"docs/{page}" for page in nav_pages()]


def shell_lines(body):
    # (the console blocks' other lines are outputs; a command may continue after a backslash)
    for line in body.replace("\\\n", " ").splitlines():
        line = " ".join(line.split())
        line = line[2:] if line.startswith("$ ") else line
        if line.startswith(COMMAND_STARTS):
            yield line


def skipped(line):
    return next((reason for start, reason in SKIP.items() if line.startswith(start)), None)


def _read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def page_steps(page):
    """``[("python", code, 0) | ("console", command, exit status)]`` of one page, in order."""
    return text_steps(_read(page))


def text_steps(text):
    steps = []
    for not_run, lang, body in BLOCK.findall(text):
        if lang == "python" and not not_run:
            steps.append(("python", body, 0))
        elif lang in ("", "console", "bash", "sh", "shell"):
            steps.extend(("console", line, 2 if line in EXIT_2 else 0)
                         for line in shell_lines(body) if not skipped(line))
    return steps


def test_a_marked_block_is_not_run_and_the_others_are_in_order():
    text = ("```python\nfirst = 1\n```\n\n<!-- not run: a placeholder -->\n```python\nnope()\n```\n"
            "```console\n$ mindexp serve outputs\n$ mindexp list\noutput line\n```\n"
            "```python\nsecond = first\n```\n")
    assert text_steps(text) == [("python", "first = 1\n", 0), ("console", "mindexp list", 0),
                                ("python", "second = first\n", 0)]


def all_shell_lines():
    return [line for page in pages() for _, lang, body in BLOCK.findall(_read(page))
            if lang in ("", "console", "bash", "sh", "shell") for line in shell_lines(body)]


def test_every_docs_page_is_in_the_nav():
    found = {os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "docs")).replace(os.sep, "/")
             for d, _, files in os.walk(os.path.join(ROOT, "docs")) for f in files
             if f.endswith(".md")}
    assert found == set(nav_pages())


def test_the_pages_have_the_snippets_this_test_expects():
    steps = [step for page in pages() for step in page_steps(page)]
    assert [k for k, _, _ in steps].count("python") >= 10
    commands = [text for kind, text, _ in steps if kind == "console"]
    assert SWEEP in commands and any(c.startswith(SPIRALS) for c in commands)
    assert "mindexp run image_folder --set data_dir=shapes" in all_shell_lines()
    assert set(EXIT_2) <= set(commands)
    lines = all_shell_lines()
    for start in SKIP:  # every skip names a line the docs still have
        assert any(ln.startswith(start) for ln in lines), start
    for page in PLOTS_PAGES:  # every page named there has snippets to run
        assert page in pages() and page_steps(page), page
    # the spirals run comes before the page that uses it
    order = [c for c in commands if c.startswith((SPIRALS, EXIT_2[0]))]
    assert order[0].startswith(SPIRALS)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # every shell line too: trainings, a 12-trial study, sweeps
def test_every_snippet_of_the_docs_runs_in_order(tmp_path):
    plan = [(page, page_steps(page)) for page in pages()]
    steps_file, files_file = tmp_path / "pages.json", tmp_path / "files.json"
    steps_file.write_text(json.dumps([p for p in plan if p[1]]))
    files_file.write_text(json.dumps(FILES))
    plots_file = tmp_path / "plots.json"
    plots_file.write_text(json.dumps(sorted(PLOTS_PAGES)))
    (tmp_path / "driver.py").write_text(DRIVER)
    work = tmp_path / "fresh"
    work.mkdir()
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(steps_file),
                           str(files_file), str(plots_file)], cwd=work,
                          env=cli_env(MPLBACKEND="Agg"),
                          capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "--- all snippets ran" in done.stdout


class _Loads(HTMLParser):
    """The URLs a page loads: ``<script src>``, ``<link href>`` (stylesheets, icons,
    preloads), ``<img src>``, ``<iframe src>``."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe") and attrs.get("src"):
            self.urls.append(attrs["src"])
        elif tag == "link" and attrs.get("href") and attrs.get("rel") != "canonical":
            self.urls.append(attrs["href"])


def outside(url):
    return url.startswith(("http://", "https://", "//"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once with ``mkdocs build --strict`` (a warning fails the build),
    through the ``mkdocs`` console script where it is installed: its folder, first on
    sys.path, holds the ``mindexp`` console script, which griffe took for the package
    (docs/_hooks.py)."""
    where = tmp_path_factory.mktemp("site")
    script = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    command = [script] if os.path.isfile(script) else ["-m", "mkdocs"]
    done = subprocess.run([sys.executable, *command, "build", "--strict", "--site-dir",
                           str(where)], cwd=ROOT, env=cli_env(NO_MKDOCS_2_WARNING="1"),
                          capture_output=True, text=True, timeout=600)
    return where, done


@pytest.mark.slow
def test_the_site_builds_strictly(site):
    where, done = site
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    assert (where / "index.html").is_file() and (where / "tour.html").is_file()


@pytest.mark.slow
def test_the_api_reference_shows_the_public_names(site):
    where, _ = site
    mindexp = (where / "reference" / "mindexp.html").read_text(encoding="utf-8")
    for name in ("Experiment", "Config", "Run", "Runs", "load_run", "load_runs", "compare",
                 "history", "plot", "diff", "tune", "study_frame", "sweep", "Lazy", "ConfigError",
                 "track", "TrackedRun"):
        assert re.search(rf'<h[23] id="mindexp\.[\w.]*\b{name}"', mindexp), name
    callbacks = (where / "reference" / "callbacks.html").read_text(encoding="utf-8")
    for name in ("LossMonitor", "ParameterTracker", "GradNormMonitor", "EvalMonitor", "Checkpoint",
                 "EarlyStopping", "Timer", "TensorBoardLogger", "TrainStep", "EvalLoss", "CsvLog",
                 "schema"):
        assert re.search(rf'<h2 id="callbacks\.[\w.]*\b{name}"', callbacks), name
    assert "Train in a new run directory" in mindexp  # the docstrings are the source


@pytest.mark.slow
def test_no_page_loads_anything_from_another_site(site):
    where, _ = site
    pages = list(where.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        parser = _Loads()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.urls, page
        assert not [u for u in parser.urls if outside(u)], page
    for sheet in where.rglob("*.css"):
        assert not re.search(r"@import\s+(url\()?['\"]?(https?:)?//", sheet.read_text("utf-8")), sheet


@pytest.mark.slow
def test_the_site_opened_from_disk_follows_nav_links_and_searches(site, tmp_path):
    """README: open site/index.html. From file:// a nav link opens its page (not a
    folder listing) and search answers (its index inlined, its worker from a blob:
    URL, nothing from another site). Screenshots in tmp_path."""
    import shutil
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    from conftest import require
    sync_api = require("playwright.sync_api", reason="playwright is not installed")
    where, done = site
    assert done.returncode == 0, done.stderr[-4000:]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.set_default_timeout(60_000)
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto((where / "index.html").as_uri())
        page.click("nav.md-nav--primary >> text=Resume and stop early")
        page.wait_for_selector("h1#resume-and-stop-early, article h1")
        assert page.url == (where / "training.html").as_uri()
        assert "Stop early, keep the best" in page.inner_text("article")
        page.screenshot(path=str(tmp_path / "nav.png"))
        page.fill("input.md-search__input", "patience")
        page.wait_for_selector(".md-search-result__item")
        assert "matching document" in page.inner_text(".md-search-result__meta")
        page.screenshot(path=str(tmp_path / "search.png"))
        titles = page.locator(".md-search-result__item h1").all_inner_texts()
        assert "Resume and stop early" in titles, titles
        browser.close()
    assert errors == []


def test_the_changelog_is_at_the_package_version():
    import mindexp
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", _read("CHANGELOG.md"),
                          flags=re.M)
    assert versions[0] == mindexp.__version__
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert {"0.1.0", "0.2.0"} <= set(versions)


def test_mindexp_version_prints_the_package_version(cli):
    import mindexp
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"mindexp {mindexp.__version__}"


def test_the_package_carries_the_whole_apache_license():
    text = _read("LICENSE")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    sections = re.findall(r"^   (\d)\. ([A-Z][\w ]*)\.", text, flags=re.M)
    assert [int(n) for n, _ in sections] == list(range(1, 10))
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text
    setup = _read("setup.cfg")
    assert re.search(r"^license = Apache-2.0$", setup, flags=re.M)
    assert re.search(r"^license_files = LICENSE$", setup, flags=re.M)
