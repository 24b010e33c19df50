"""``mindexp runs ROOT --count``: the runs of each status the listing shows,
by the same filters, from the catalog or (a column only the logs give) the
runs table."""
import pytest

from rundirs import make_run


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("count") / "outputs"
    for i, lr in enumerate((0.001, 0.01, 0.1)):
        make_run(out, f"done{i}", config={"lr": lr}, losses=(1.0, 0.1 * (i + 1)))
    make_run(out, "failed", status="failed", config={"lr": 0.1})
    make_run(out, "stopped", status="interrupted", config={"lr": 0.01})
    make_run(out, "live", status="running", config={"lr": 0.1})   # no process holds it
    broken = out / "toy" / "broken"
    broken.mkdir(parents=True)
    (broken / "run.json").write_text("{")
    (broken / "config.json").write_text("{}")
    return out


def _counts(result):
    assert result.returncode == 0, result.stderr
    lines = [line.rsplit(None, 1) for line in result.stdout.splitlines()]
    return {status.strip(): int(number) for status, number in lines}


def _listed(cli, root, *args):
    """``{status: runs}`` as ``mindexp runs --all`` shows them."""
    out = cli("runs", root, "--all", *args).stdout.splitlines()[1:]
    found = {}
    for line in out:
        status = "running (process gone)" if "process gone" in line else line.split()[1]
        found[status] = found.get(status, 0) + 1
    return found


@pytest.mark.parametrize("args, expected", [
    ((), {"completed": 3, "failed": 1, "interrupted": 1, "running (process gone)": 1,
          "unreadable": 1, "total": 7}),
    (("--where", "lr >= 0.01"), {"completed": 2, "failed": 1, "interrupted": 1,
                                 "running (process gone)": 1, "unreadable": 0, "total": 5}),
    (("--status", "completed,running", "--where", "lr == 0.1 or lr < 0.005"),
     {"completed": 2, "running (process gone)": 1, "unreadable": 0, "total": 3}),
    (("--where", "min_loss < 0.25"),     # read from the logs: the runs table answers
     {"completed": 2, "unreadable": 0, "total": 2}),
    (("--where", "min_loss != 0.1"),
     {"completed": 2, "failed": 1, "interrupted": 1, "running (process gone)": 1,
      "unreadable": 1, "total": 6}),
    (("--tag", "nothing"), {"unreadable": 0, "total": 0}),
])
def test_count_is_right_per_status_and_agrees_with_the_listing(cli, root, args, expected):
    counted = _counts(cli("runs", root, "--count", *args))
    assert counted == expected
    shown = {k: v for k, v in counted.items() if v and k != "total"}
    assert shown == _listed(cli, root, *args)


@pytest.mark.parametrize("args, said", [
    (("--where", "lr >"), "--where cannot be read"),
    (("--where", "__import__('os')"), "a function call"),
    (("--status", "done"), "unknown status 'done'"),
    (("--limit", "3"), "not --limit"),
    (("--sort", "lr"), "not --sort"),
    (("--csv",), "not allowed with argument"),
])
def test_count_refuses_bad_input_in_one_line(cli, root, args, said):
    result = cli("runs", root, "--count", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert said in result.stderr and "Traceback" not in result.stderr
