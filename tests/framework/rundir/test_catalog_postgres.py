"""A team's catalog on the real PostgreSQL: two machines (two processes with
different ``MINDEXP_HOST``) write their runs into one table and list each
other's; a rebuild touches only its own host's rows; removing another
host's run says where it lives; the password never shows."""
import os

import pytest

from mindexp.rundir import store as cat

from postgres import postgres  # noqa: F401  (the fixture: a private server per session)
from rundirs import make_run


def _outputs(base, prefix, lrs, month):
    out = base / prefix / "outputs"
    for i, lr in enumerate(lrs):
        make_run(out, f"{prefix}{i}", config={"lr": lr},
                 meta={"started_at": f"2026-{month}-0{i + 1}T00:00:00+00:00"})
    return out


def _paths(listed):
    return [line.split()[0] for line in listed.stdout.splitlines()[1:]]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_two_hosts_list_each_others_runs(cli, postgres, tmp_path):  # noqa: F811
    url = postgres.create_database("catalog_two_hosts")
    alpha = _outputs(tmp_path, "a", (0.001, 0.002, 0.003), "01")
    beta = _outputs(tmp_path, "b", (0.01, 0.02), "02")
    env = {"MINDEXP_CATALOG": url}
    first = cli("runs", alpha, MINDEXP_HOST="alpha", **env)
    assert first.returncode == 0, first.stderr
    assert cli("tag", alpha / "toy" / "a1", "+shared", MINDEXP_HOST="alpha",
               **env).returncode == 0                        # the writer's hook
    listed = cli("runs", beta, "--wide", "--where", "lr < 0.015", "--sort=-lr", MINDEXP_HOST="beta", **env)
    assert listed.returncode == 0, listed.stderr
    here = os.path.relpath(beta, tmp_path)
    assert _paths(listed) == [f"{here}/toy/b0"] + [f"alpha:{alpha}/toy/a{i}" for i in (2, 1, 0)]
    tagged = cli("runs", beta, "--wide", "--tag", "shared", MINDEXP_HOST="beta", **env)
    assert _paths(tagged) == [f"alpha:{alpha}/toy/a1"]

    refused = cli("rm", "a2", "--yes", "--out", beta, MINDEXP_HOST="beta", **env)
    assert refused.returncode == 2 and f"on host alpha at {alpha}/toy/a2" in refused.stderr
    assert (alpha / "toy" / "a2").is_dir()

    rebuilt = cli("runs", beta, "--rebuild", MINDEXP_HOST="beta", **env)
    assert sorted(_paths(rebuilt)) == sorted(_paths(cli("runs", beta, MINDEXP_HOST="beta",
                                                        **env)))
    from_alpha = cli("runs", alpha, "--wide", "--catalog", url, MINDEXP_HOST="alpha")
    assert _paths(from_alpha)[:2] == [f"beta:{beta}/toy/b1", f"beta:{beta}/toy/b0"]
    assert "shared" in from_alpha.stdout       # beta's rebuild left alpha's rows alone


def test_a_password_in_the_url_is_never_printed(cli, postgres, tmp_path):  # noqa: F811
    url = postgres.create_database("catalog_secret")
    root = _outputs(tmp_path, "a", (0.1,), "01")
    wrong = url.replace("127.0.0.1:", "127.0.0.1:1").replace("//mindexp@", "//mindexp:s3cr3t@")
    listed = cli("runs", root, "--catalog", wrong, MINDEXP_HOST="alpha")
    assert listed.returncode == 2 and "s3cr3t" not in listed.stderr + listed.stdout
    assert "***" in listed.stderr
    with cat.open_store(root, url=url) as catalog:
        assert catalog.select(["host", "run_id"]) == [(cat.this_host(), "a0")]


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_compare_of_a_folder_from_a_postgres_store_is_the_one_from_its_runs(
        postgres, tmp_path, monkeypatch):  # noqa: F811
    import pandas as pd
    from mindexp import compare
    from rundirs import make_run
    from mindexp.rundir.summary import SUMMARY_VERSION
    root = tmp_path / "outputs"
    for i, config in enumerate(({"lr": 0.1, "dims": [1, 2]}, {"lr": "x"}, {"lr": 2})):
        summary = {"version": SUMMARY_VERSION, "params": {"w": 1.5}, "eval": {},
                   "loss": {"rows": 2, "final": 0.5, "min": 0.5, "best_step": 2,
                            "last_step": 2, "last_epoch": 1, "components": {}}}
        make_run(root, f"r{i}", config=config, meta={"summary": summary})
    make_run(root, "live", status="running", config={"lr": 0.3})
    runs = sorted(str(p) for p in (root / "toy").iterdir())
    expected = compare(runs, sort="run_id")
    monkeypatch.setenv("MINDEXP_CATALOG", postgres.create_database("catalog_compare"))
    with cat.open_store(root / "toy") as store:
        stored = store.cells(str(root / "toy"))
        assert [(rel, shape is None) for rel, shape, _ in stored.rows] == \
            [("toy/live", True), ("toy/r0", False), ("toy/r1", False), ("toy/r2", False)]
    pd.testing.assert_frame_equal(compare(str(root / "toy"), sort="run_id"), expected,
                                  check_exact=True)
