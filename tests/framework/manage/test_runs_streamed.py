"""``mindexp runs`` into a pipe or a file (every run): the catalog's rows are
fetched, formatted and written a page at a time, and the table is the one the
whole-table paths print (the catalog's with ``--limit``, pandas'), byte for byte."""
import random
import shutil
import sqlite3
import subprocess
import sys
import tracemalloc

import pytest

from conftest import cli_env
from mindexp.manage import queried
from mindexp.manage.filters import Filters
from mindexp.manage.table_text import TableSpool, fitted_columns
from mindexp.rundir import store as cat

from rundirs import make_run

LOSSES = [0.5, 1.23456789e-7, 123456.7, 0.00351875, 2.0, 1e-5, 0.1, 42, 7.5e-9, 0.25]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Runs whose columns each change their look with a single row: a step count
    of seven digits (a float, ``1.23457e+06``, once another run has none), a
    whole-number loss, control characters in a tag and a note, a running run
    and one whose run.json does not load."""
    out = tmp_path_factory.mktemp("streamed") / "outputs"
    for i, loss in enumerate(LOSSES):
        meta = {"started_at": f"2026-01-{i + 1:02d}T00:00:00+00:00",
                "tags": ["keep"] if i % 3 == 0 else ["t\x1b[2Jx"] if i == 4 else [],
                "note": "bell\x07 note" if i == 5 else f"note {i}" if i % 2 else None}
        if i == 2:
            meta["steps"] = 1234567
        if i == 7:
            meta["steps"] = None
        make_run(out, f"r{i}", config={"lr": [0.001, 0.01, 0.1][i % 3] * (i + 1),
                                       "optimizer": ["sgd", "adam"][i % 2]},
                 losses=(1.0, loss), meta=meta)
    make_run(out, "live", status="running", losses=(1.0, 0.75, 0.5),
             meta={"started_at": "2026-01-20T00:00:00+00:00", "ended_at": None})
    shutil.copytree(out / "toy" / "r0", out / "toy" / "broken")
    (out / "toy" / "broken" / "run.json").write_text("{")
    return out


def _pandas_answer(cli, monkeypatch, *args, cwd=None):
    with monkeypatch.context() as patch:
        patch.setattr(queried, "listed", lambda *a, **k: None)
        return cli("runs", *args, cwd=cwd)


@pytest.mark.parametrize("args", [
    (), ("--wide",), ("--sort", "lr"), ("--sort=-final_loss",), ("--where", "lr < 0.05"),
    ("--where", "optimizer == 'adam'", "--wide"), ("--sort", "note"), ("--tag", "keep"),
    ("--experiment", "toy", "--status", "completed"), ("--where", "lr > 100"),
])
@pytest.mark.parametrize("here", [False, True])   # absolute paths cut to 100 columns, or short
def test_the_piped_listing_is_the_whole_tables_byte_for_byte(cli, root, monkeypatch, args,
                                                             here):
    """Two rows a page: each column's width, type and float look come from every page."""
    monkeypatch.setattr(queried, "PAGE", 2, raising=False)
    cwd = root if here else None
    piped = cli("runs", root, *args, cwd=cwd)
    assert piped.returncode == 0, piped.stderr
    whole = cli("runs", root, *args, "--limit", "1000", cwd=cwd)
    assert piped.stdout == whole.stdout
    assert piped.stdout == _pandas_answer(cli, monkeypatch, root, *args, cwd=cwd).stdout
    if not args:
        assert len(piped.stdout.splitlines()) == 1 + len(LOSSES) + 2
        assert "1.23457e+06" in piped.stdout and "\\x1b" in piped.stdout


def test_a_note_named_by_sort_is_shown(cli, root, monkeypatch):
    """The note is the one named column a plain row lacked: ``--sort note`` failed
    (AttributeError) where pandas shows the notes."""
    listed = cli("runs", root, "--sort", "note", "--limit", "4")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[-1] == "note"
    assert listed.stdout == _pandas_answer(cli, monkeypatch, root, "--sort", "note",
                                           "--limit", "4").stdout


def _catalog_of(folder, runs):
    """A root of ``runs`` runs: two made on disk, the rest their rows copied in the
    catalog (a listing reads the catalog's rows alone)."""
    for i in range(2):
        make_run(folder, f"r{i}", losses=(1.0, 0.5 / (i + 1)))
    cat.open_store(str(folder)).close()
    conn = sqlite3.connect(cat.database_path(str(folder)))
    names = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    row = dict(zip(names, conn.execute("SELECT * FROM runs WHERE rel = 'toy/r0'").fetchone()))
    copies = [tuple((row | {"rel": f"toy/s{i:06d}", "run_id": f"s{i:06d}",
                            "final_loss": 1.0 / (i + 3)})[n] for n in names)
              for i in range(runs - 2)]
    conn.executemany(f"INSERT INTO runs VALUES ({', '.join('?' for _ in names)})", copies)
    conn.commit()
    conn.close()
    return str(folder)


def _peak_listing(folder):
    """(lines listed, the most memory Python held meanwhile)."""
    tracemalloc.start()
    try:
        blocks = queried.listed(folder, Filters())
        lines = sum(block.count("\n") for block in blocks)
        return lines, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_piped_listings_memory_does_not_grow_with_the_runs(tmp_path, monkeypatch):
    """2,000 and 8,000 runs in pages of 500: the same peak, give or take (the
    whole table held at once took four times as much for four times the runs)."""
    monkeypatch.setattr(queried, "PAGE", 500, raising=False)
    small = _catalog_of(tmp_path / "small", 2000)
    large = _catalog_of(tmp_path / "large", 8000)
    _peak_listing(small)   # the imports and caches of a first listing
    lines_small, peak_small = _peak_listing(small)
    lines_large, peak_large = _peak_listing(large)
    assert peak_large < 1.5 * peak_small, (peak_small, peak_large)
    assert (lines_small, lines_large) == (1 + 2000, 1 + 8000)


def test_a_piped_listing_imports_neither_pandas_nor_mindspore(tmp_path):
    folder = _catalog_of(tmp_path / "outputs", 50)
    code = ("import sys; from mindexp.cli.main import main; code = main(['runs', sys.argv[1]]); "
            "print('LOADED', sorted(m for m in ('pandas', 'numpy', 'mindspore') "
            "if m in sys.modules), code)")
    done = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True,
                          env=cli_env(), timeout=120)   # not forked: a clean interpreter
    assert done.stdout.splitlines()[-1] == "LOADED [] 0", done.stdout + done.stderr
    assert len(done.stdout.splitlines()) == 1 + 50 + 1


def _random_column(rng, rows):
    kind = rng.choice(["int", "big", "float", "text", "mixed"])
    pick = {"int": lambda: rng.randrange(-999, 99999),
            "big": lambda: rng.choice([rng.randrange(10 ** 6, 10 ** 9), rng.randrange(99),
                                       None]),
            "float": lambda: rng.choice([rng.uniform(-1, 1) * 10 ** rng.randrange(-9, 9), None,
                                         float("nan"), 1000005.0, -0.0, rng.randrange(50)]),
            "text": lambda: rng.choice(["a", "a longer piece of text " * rng.randrange(1, 4),
                                        "esc\x1b[31m", "tab\there", ""]),
            "mixed": lambda: rng.choice([1, 2.5, "x", None, True, (1, "b")])}[kind]
    return [pick() for _ in range(rows)]


@pytest.mark.parametrize("seed", range(40))
def test_a_table_spooled_a_page_at_a_time_is_the_table_fitted_whole(seed):
    """Random columns (large integers, floats with gaps, control characters,
    mixed types), given in random pages: the same text as :func:`fitted_columns`."""
    rng = random.Random(seed)
    rows = rng.randrange(1, 40)
    names = ["path", "status"] + [f"c{i}" for i in range(rng.randrange(1, 5))]
    columns = {n: _random_column(rng, rows) for n in names}
    columns["path"] = [f"/far/away/{'deep/' * rng.randrange(12)}run{i}" for i in range(rows)]
    numeric = {"path": False, "c0": True} if rng.random() < 0.3 and \
        all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
            for v in columns["c0"]) else {"path": False}
    width = rng.choice([None, 40, 100])
    whole = fitted_columns({n: list(v) for n, v in columns.items()}, numeric, width)
    with TableSpool(numeric) as spool:
        start = 0
        while start < rows:
            size = rng.randrange(1, 8)
            spool.add({n: v[start:start + size] for n, v in columns.items()})
            start += size
        assert "".join(spool.lines(width)) == whole + "\n"
        assert spool.rows == rows
